// The heartbeat's wire types (paladin/api/wire.h): what the agent encodes the server decodes to
// the same values, and a hostile body is refused with the list, the index and the field named.
#include "paladin/api/wire.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace paladin::api {
namespace {

using Json = nlohmann::json;

TEST(WireTest, AHeartbeatRoundTrips) {
  JobReport job;
  job.id = "j-000007";
  job.epoch = 3;
  job.state = CopyState::kExited;
  job.pid = 4242;
  job.used_bytes = int64_t{5} << 30;
  job.quota_bytes = int64_t{8} << 30;
  job.quota_grows = 2;
  job.refusals = 1;
  job.exit_code = -9;
  job.stdout_text = "step 1 ok\n";
  GpuReport gpu{1, int64_t{3} << 30, false, "Xid 79"};
  CommandResult result{17, false, "disk full", Json{{"path", "/ckpt/x"}}};
  const Json body = {
      {"gpus", {ToJson(gpu)}}, {"jobs", {ToJson(job)}}, {"results", {ToJson(result)}}};

  StatusOr<Heartbeat> beat = DecodeHeartbeat(body);
  ASSERT_TRUE(beat.ok()) << beat.status().ToString();
  ASSERT_EQ(beat->jobs.size(), 1U);
  const JobReport& j = beat->jobs[0];
  EXPECT_EQ(j.id, job.id);
  EXPECT_EQ(j.epoch, 3);
  EXPECT_EQ(j.state, CopyState::kExited);
  EXPECT_EQ(j.used_bytes, job.used_bytes);
  EXPECT_EQ(j.quota_grows, 2);
  EXPECT_EQ(j.exit_code, -9);
  EXPECT_EQ(j.stdout_text, "step 1 ok\n");
  ASSERT_EQ(beat->gpus.size(), 1U);
  EXPECT_EQ(beat->gpus[0].index, 1);
  EXPECT_FALSE(beat->gpus[0].healthy);
  EXPECT_EQ(beat->gpus[0].fault, "Xid 79");
  ASSERT_EQ(beat->results.size(), 1U);
  EXPECT_EQ(beat->results[0].command, 17);
  EXPECT_EQ(beat->results[0].error, "disk full");
  EXPECT_EQ(beat->results[0].detail["path"], "/ckpt/x");
}

TEST(WireTest, AbsentFieldsTakeTheirDefaults) {
  StatusOr<Heartbeat> beat = DecodeHeartbeat(Json{{"jobs", {{{"id", "j-000001"}}}}});
  ASSERT_TRUE(beat.ok()) << beat.status().ToString();
  EXPECT_EQ(beat->jobs[0].state, CopyState::kRunning);
  EXPECT_FALSE(beat->jobs[0].used_bytes.has_value()) << "unknown, not zero";
  EXPECT_FALSE(beat->jobs[0].exit_code.has_value());
  EXPECT_TRUE(DecodeHeartbeat(Json::object())->jobs.empty());
  EXPECT_TRUE(DecodeHeartbeat(Json{{"jobs", nullptr}})->jobs.empty());
}

TEST(WireTest, AHostileBodyIsRefusedNamingWhereAndWhat) {
  struct Case {
    Json body;
    std::string says;
  };
  const Case cases[] = {
      {Json::array(), "body: expected a JSON object"},
      {Json{{"jobs", 5}}, "jobs: expected a list"},
      {Json{{"jobs", {5}}}, "jobs[0]: expected an object"},
      {Json{{"jobs", {{{"id", 5}}}}}, "jobs[0]: id: expected a string"},
      {Json{{"jobs", {{{"id", "a"}}, {{"id", "b"}, {"used_bytes", -5}}}}},
       "jobs[1]: used_bytes: expected an integer from 0"},
      {Json{{"jobs", {{{"id", "a"}, {"epoch", "x"}}}}}, "jobs[0]: epoch: expected an integer"},
      {Json{{"jobs", {{{"id", "a"}, {"exit_code", 5000}}}}}, "jobs[0]: exit_code"},
      {Json{{"jobs", {{{"id", "a"}, {"stdout", 5}}}}}, "jobs[0]: stdout: expected a string"},
      {Json{{"jobs", {{{"id", "a"}, {"state", "paused"}}}}},
       "jobs[0]: state: expected running, stopped, frozen or exited"},
      {Json{{"jobs", {{{"id", "a"}, {"state", 1}}}}}, "jobs[0]: state: expected running"},
      {Json{{"jobs", {{{"id", "a"}, {"quota_bytes", 18446744073709551615ULL}}}}},
       "jobs[0]: quota_bytes: too large"},
      {Json{{"gpus", {{{"index", "0"}}}}}, "gpus[0]: index: expected an integer"},
      {Json{{"gpus", {{{"index", 2000}}}}}, "gpus[0]: index"},
      {Json{{"gpus", {{{"healthy", "yes"}}}}}, "gpus[0]: healthy: expected true or false"},
      {Json{{"results", 5}}, "results: expected a list"},
      {Json{{"results", {{{"command", 1}, {"detail", 5}}}}}, "results[0]: detail"},
      {Json{{"results", {{{"command", 1}, {"ok", "yes"}}}}}, "results[0]: ok"},
  };
  for (const Case& c : cases) {
    StatusOr<Heartbeat> beat = DecodeHeartbeat(c.body);
    ASSERT_FALSE(beat.ok()) << c.body.dump();
    EXPECT_EQ(beat.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(beat.status().message().find(c.says), std::string::npos)
        << c.body.dump() << " -> " << beat.status().message();
  }
}

// Every copy state reads back as it was written, by the name the wire uses for it.
TEST(WireTest, EveryCopyStateRoundTrips) {
  for (CopyState state :
       {CopyState::kRunning, CopyState::kStopped, CopyState::kFrozen, CopyState::kExited}) {
    JobReport job;
    job.id = "j-1";
    job.state = state;
    const Json body = {{"jobs", {ToJson(job)}}};
    StatusOr<Heartbeat> beat = DecodeHeartbeat(body);
    ASSERT_TRUE(beat.ok()) << beat.status().ToString();
    EXPECT_EQ(beat->jobs[0].state, state) << body.dump();
    EXPECT_EQ(body["jobs"][0]["state"], CopyStateName(state));
  }
  EXPECT_EQ(CopyStateNamed("frozen"), CopyState::kFrozen);
  EXPECT_FALSE(CopyStateNamed("Running").has_value());
}

// Every kind of command the server sends reads back as it was written.
TEST(WireTest, EveryCommandKindRoundTrips) {
  Command start;
  start.id = 7;
  start.kind = CommandKind::kStart;
  start.job = "j-1";
  start.epoch = 3;
  start.name = "train";
  start.command = {"python3", "train.py"};
  start.env = {{"SEED", "1"}};
  start.gpu_index = 1;
  start.gpu_indices = {1, 2};
  start.gpu_uuid = "GPU-x";
  start.quota_bytes = 1 << 30;
  start.ceiling_bytes = int64_t{2} << 30;
  Command restore = start;
  restore.kind = CommandKind::kRestore;
  restore.image = "/var/lib/paladin/ckpt/j-1/3";
  restore.gpu_map = {{"GPU-a", "GPU-b"}};
  Command in;
  in.id = 8;
  in.kind = CommandKind::kMigrateIn;
  in.job = "j-1";
  in.epoch = 4;
  in.command = {"sleep", "1"};
  in.port = 7400;
  in.token = "t";
  in.migration = 5;
  in.from_node = "a";
  in.from_gpu_uuid = "GPU-a";
  in.address = "10.0.0.2";
  Command out;
  out.id = 9;
  out.kind = CommandKind::kMigrateOut;
  out.job = "j-1";
  out.epoch = 3;
  out.port = 7400;
  out.token = "t";
  out.migration = 5;
  out.to_address = "10.0.0.2";
  out.to_node = "b";
  out.to_gpu = 1;
  out.to_gpu_uuid = "GPU-b";
  Command checkpoint = CheckpointCommand("stop", "/ckpt/j-1/4");
  checkpoint.id = 10;
  checkpoint.job = "j-1";
  Command kill = KillCommand(3);
  kill.id = 11;
  kill.job = "j-1";
  Command fault = FaultCommand(0, "ecc", 48);
  fault.id = 12;
  Command resize;
  resize.id = 13;
  resize.kind = CommandKind::kResize;
  resize.job = "j-1";
  resize.ceiling_bytes = 5;
  for (const Command& c : {start, restore, in, out, checkpoint, kill, fault, resize}) {
    StatusOr<Command> back = DecodeCommand(ToJson(c));
    ASSERT_TRUE(back.ok()) << ToJson(c).dump() << ": " << back.status().message();
    EXPECT_EQ(ToJson(*back), ToJson(c));
    EXPECT_EQ(back->kind, c.kind);
    EXPECT_EQ(back->epoch, c.epoch);
  }
  EXPECT_EQ(ToJson(start)["kind"], "start");
  EXPECT_EQ(ToJson(out)["to_port"], 7400);
  EXPECT_FALSE(DecodeCommand(ToJson(resize))->quota_bytes.has_value());  // absent: unchanged
  Json no_epoch = ToJson(kill);
  no_epoch.erase("epoch");
  EXPECT_FALSE(DecodeCommand(no_epoch)->epoch.has_value());  // every copy
}

// A move's mode travels in migrate_in and migrate_out; a command without one (from a server that
// predates post-copy) is a pre-copy move, and an unknown mode is refused naming the field.
TEST(WireTest, AMoveCarriesItsMode) {
  Command out;
  out.id = 9;
  out.kind = CommandKind::kMigrateOut;
  out.job = "j-1";
  out.port = 7400;
  out.token = "t";
  out.migration = 5;
  out.to_address = "10.0.0.2";
  out.move_mode = MoveMode::kPostCopy;
  Command in = out;
  in.kind = CommandKind::kMigrateIn;
  for (const Command& c : {out, in}) {
    EXPECT_EQ(ToJson(c)["move_mode"], "post-copy");
    StatusOr<Command> back = DecodeCommand(ToJson(c));
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->move_mode, MoveMode::kPostCopy);
    Json old = ToJson(c);
    old.erase("move_mode");
    EXPECT_EQ(DecodeCommand(old)->move_mode, MoveMode::kPreCopy);
    Json wrong = ToJson(c);
    wrong["move_mode"] = "teleport";
    StatusOr<Command> refused = DecodeCommand(wrong);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("move_mode: expected pre-copy or post-copy"),
              std::string::npos)
        << refused.status().message();
  }
  EXPECT_STREQ(MoveModeName(MoveMode::kPreCopy), "pre-copy");
  EXPECT_EQ(MoveModeNamed("post-copy"), MoveMode::kPostCopy);
  EXPECT_FALSE(MoveModeNamed("auto").has_value());
}

// A malformed command is refused naming the command, its kind and the field.
TEST(WireTest, AMalformedCommandNamesTheField) {
  struct Case {
    Json body;
    const char* says;
  };
  const Case cases[] = {
      {Json::array(), "command: expected a JSON object"},
      {Json{{"kind", "kill"}, {"job", "j"}}, "id: missing"},
      {Json{{"id", 1}, {"kind", "reboot"}, {"job", "j"}}, "unknown command kind 'reboot'"},
      {Json{{"id", 1}, {"kind", "kill"}}, "command 1 (kill): job: missing"},
      {Json{{"id", 1}, {"kind", "kill"}, {"job", "j"}, {"epoch", -2}}, "(kill): epoch"},
      {Json{{"id", 2}, {"kind", "start"}, {"job", "j"}}, "command 2 (start): command: missing"},
      {Json{{"id", 2}, {"kind", "start"}, {"job", "j"}, {"command", {"a", 5}}},
       "command: expected a list of strings"},
      {Json{{"id", 2}, {"kind", "start"}, {"job", "j"}, {"command", {"a"}}, {"env", {{"K", 1}}}},
       "env: K: expected a string"},
      {Json{{"id", 2}, {"kind", "start"}, {"job", "j"}, {"command", {"a"}}, {"quota_bytes", -1}},
       "quota_bytes: expected an integer from 0"},
      {Json{{"id", 3}, {"kind", "restore"}, {"job", "j"}}, "(restore): image: missing"},
      {Json{{"id", 4}, {"kind", "checkpoint"}, {"job", "j"}, {"mode", "pause"}, {"dir", "/d"}},
       "mode: expected keep, stop or frozen"},
      {Json{{"id", 8}, {"kind", "start"}, {"job", "j"}, {"command", {"a"}}, {"rank_net", 5}},
       "(start): rank_net: expected an object"},
      {Json{{"id", 8},
            {"kind", "start"},
            {"job", "j"},
            {"command", {"a"}},
            {"rank_net", {{"address", "10.231.0.300"}}}},
       "(start): rank_net: address: expected a dotted IPv4 address"},
      {Json{{"id", 8},
            {"kind", "restore"},
            {"job", "j"},
            {"image", "/i"},
            {"rank_net", {{"address", "10.231.0.3"}, {"interface", "../eth0"}}}},
       "(restore): rank_net: interface: expected 1-15 characters"},
      {Json{{"id", 4}, {"kind", "checkpoint"}, {"job", "j"}}, "dir: missing"},
      {Json{{"id", 5}, {"kind", "fault"}, {"gpu_index", 0}, {"fault_kind", "melted"}},
       "fault_kind: expected xid, ecc or ecc-corrected"},
      {Json{{"id", 5}, {"kind", "fault"}, {"gpu_index", 0}, {"code", -1}}, "code"},
      {Json{{"id", 6}, {"kind", "migrate_in"}, {"job", "j"}, {"port", 70000}, {"token", "t"}},
       "(migrate_in): port: expected an integer from 1 to 65534"},
      {Json{{"id", 7}, {"kind", "migrate_out"}, {"job", "j"}, {"to_address", "a"}},
       "to_port: missing"},
  };
  for (const Case& c : cases) {
    StatusOr<Command> command = DecodeCommand(c.body);
    ASSERT_FALSE(command.ok()) << c.body.dump();
    EXPECT_EQ(command.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(command.status().message().find(c.says), std::string::npos)
        << c.body.dump() << " -> " << command.status().message();
  }
}

// A gang rank's start carries its own network; the cut's steps are commands of their own.
TEST(WireTest, AGangRanksNetworkAndTheCutsStepsRoundTrip) {
  Command start;
  start.id = 9;
  start.kind = CommandKind::kStart;
  start.job = "j-000002";
  start.epoch = 1;
  start.command = {"python3", "ddp_train.py"};
  start.rank_net = RankNet{"10.231.0.2", "pal0"};
  StatusOr<Command> back = DecodeCommand(ToJson(start));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_TRUE(back->rank_net.has_value());
  EXPECT_EQ(back->rank_net->address, "10.231.0.2");
  EXPECT_EQ(back->rank_net->interface, "pal0");
  start.rank_net.reset();
  back = DecodeCommand(ToJson(start));
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->rank_net.has_value()) << "a job that is no gang rank has none";
  for (CommandKind kind : {CommandKind::kFreeze, CommandKind::kThaw}) {
    Command c;
    c.id = 10;
    c.kind = kind;
    c.job = "j-000002";
    c.epoch = 1;
    back = DecodeCommand(ToJson(c));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->kind, kind);
    EXPECT_EQ(back->epoch, 1);
  }
  back = DecodeCommand(ToJson(CheckpointCommand("frozen", "/ckpt/j/4")));
  EXPECT_FALSE(back.ok()) << "no id";
  Command dump = CheckpointCommand("frozen", "/ckpt/j/4");
  dump.id = 11;
  dump.job = "j-000002";
  back = DecodeCommand(ToJson(dump));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->mode, "frozen");
}

TEST(WireTest, RankRoutesRoundTripAndAHostileListNamesTheField) {
  const std::vector<RankRoute> routes = {{"10.231.0.2", "192.0.2.2"}, {"10.231.0.3", "192.0.2.3"}};
  StatusOr<std::vector<RankRoute>> back = DecodeRankRoutes(ToJson(routes));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, routes);
  EXPECT_TRUE(DecodeRankRoutes(Json(nullptr))->empty()) << "an older server sends none";
  struct Case {
    Json list;
    const char* says;
  };
  const Case cases[] = {
      {Json::object(), "rank_routes: expected a list"},
      {Json{5}, "rank_routes[0]: expected an object"},
      {Json{{{"address", "10.231.0.2"}}}, "rank_routes[0]: via: missing"},
      {Json{{{"address", "10.231.0.2"}, {"via", "host-b"}}},
       "rank_routes[0]: via: expected a dotted IPv4 address"},
      {Json{{{"address", "10.231.0.2"}, {"via", "192.0.2.2"}},
            {{"address", "10.231.00.3"}, {"via", "192.0.2.2"}}},
       "rank_routes[1]: address: expected a dotted IPv4 address"},
  };
  for (const Case& c : cases) {
    StatusOr<std::vector<RankRoute>> r = DecodeRankRoutes(c.list);
    ASSERT_FALSE(r.ok()) << c.list.dump();
    EXPECT_EQ(r.status().message(), c.says) << c.list.dump();
  }
  for (const char* ok : {"0.0.0.0", "10.231.0.2", "255.255.255.255"}) {
    EXPECT_TRUE(IsDottedIpv4(ok)) << ok;
  }
  for (const char* bad : {"", "10.231.0", "10.231.0.2.", "1.2.3.4.5", "01.2.3.4", "1..3.4",
                          "256.1.1.1", " 1.2.3.4", "1.2.3.4/32"}) {
    EXPECT_FALSE(IsDottedIpv4(bad)) << bad;
  }
}

// The pods Paladin's Kubernetes scheduler reports: what it encodes the server decodes to the same
// values; a hostile list is refused naming the pod's index and the field.
TEST(WireTest, ARegistrationRoundTripsAndAHostileOneNamesTheField) {
  Registration r;
  r.name = "node-a";
  r.address = "10.0.0.5";
  r.migrate_port = 7071;
  r.checkpointable = false;
  r.post_copy = true;
  r.stream = true;
  r.gpus.push_back(RegisteredGpu{1, int64_t{80} << 30, "GPU-1", "H100", true, false});
  JobReport job;
  job.id = "j-000002";
  job.epoch = 4;
  r.jobs.push_back(job);
  StatusOr<Registration> back = DecodeRegistration(ToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->name, "node-a");
  EXPECT_EQ(back->address, "10.0.0.5");
  EXPECT_EQ(back->migrate_port, 7071);
  EXPECT_FALSE(back->checkpointable);
  EXPECT_TRUE(back->post_copy);
  EXPECT_TRUE(back->stream);
  ASSERT_EQ(back->gpus.size(), 1U);
  EXPECT_EQ(back->gpus[0].index, 1);
  EXPECT_EQ(back->gpus[0].memory_bytes, int64_t{80} << 30);
  EXPECT_EQ(back->gpus[0].uuid, "GPU-1");
  EXPECT_EQ(back->gpus[0].model, "H100");
  EXPECT_TRUE(back->gpus[0].emulated);
  EXPECT_FALSE(back->gpus[0].healthy);
  ASSERT_EQ(back->jobs.size(), 1U);
  EXPECT_EQ(back->jobs[0].epoch, 4);

  StatusOr<Registration> bare = DecodeRegistration(Json{{"name", "n"}});
  ASSERT_TRUE(bare.ok());
  EXPECT_TRUE(bare->checkpointable) << "absent: a node whose workloads CRIU can dump";
  EXPECT_EQ(RegistrationName(Json{{"name", "n"}}).value(), "n");

  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[]", "body: expected a JSON object"},
      {R"({"name": 5})", "name: expected a string"},
      {R"({"migrate_port": 70000})", "migrate_port: out of range"},
      {R"({"checkpointable": null})", "checkpointable: expected true or false"},
      {R"({"stream": "yes"})", "stream: expected a boolean"},
      {R"({"gpus": 5})", "gpus: expected a list"},
      {R"({"gpus": [5]})", "gpus[]: expected objects"},
      {R"({"gpus": [{"memory_bytes": 1}]})", "gpus[]: index: required"},
      {R"({"gpus": [{"index": 16}]})", "gpus[]: index: out of range"},
      {R"({"gpus": [{"index": 0}, {"index": 0}]})", "gpus[]: index 0 appears twice"},
      {R"({"jobs": [{"id": 5}]})", "jobs[0]: id: expected a string"},
  };
  for (const auto& [body, message] : cases) {
    StatusOr<Registration> bad = DecodeRegistration(Json::parse(body));
    ASSERT_FALSE(bad.ok()) << body;
    EXPECT_EQ(bad.status().message(), message) << body;
  }
}

TEST(WireTest, TheAgentReadsTheServersAnswersAndKeepsWhatIsAbsent) {
  HeartbeatAnswer beat;
  beat.lease_s = 6;
  beat.heartbeat_s = 0.5;
  Command kill = KillCommand(3);
  kill.id = 9;
  kill.job = "j-000001";
  beat.commands.push_back(ToJson(kill));
  beat.rank_routes.push_back(RankRoute{"10.231.0.2", "192.168.1.7"});
  const Json beat_json = ToJson(beat);
  StatusOr<AgentAnswer> read = ReadAgentAnswer(beat_json);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->lease_s, 6);
  EXPECT_EQ(read->heartbeat_s, 0.5);
  ASSERT_NE(read->commands, nullptr);
  ASSERT_EQ(read->commands->size(), 1U);
  EXPECT_TRUE(DecodeCommand((*read->commands)[0]).ok());
  ASSERT_NE(read->rank_routes, nullptr);
  EXPECT_EQ(DecodeRankRoutes(*read->rank_routes).value(), beat.rank_routes);

  const Json registered = ToJson(RegisterAnswer{6, 1, "/srv/ckpt"});
  read = ReadAgentAnswer(registered);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->lease_s, 6);
  EXPECT_EQ(read->commands, nullptr) << "a registration's answer has no commands";

  read = ReadAgentAnswer(Json::object());
  ASSERT_TRUE(read.ok());
  EXPECT_FALSE(read->lease_s.has_value()) << "an older server: the agent keeps its own";
  EXPECT_FALSE(ReadAgentAnswer(Json{{"lease_s", "6"}}).ok());
  EXPECT_FALSE(ReadAgentAnswer(Json{{"commands", 5}}).ok());
  EXPECT_EQ(CommandIdOf((*ToJson(beat).find("commands"))[0]), 9);
  EXPECT_EQ(CommandIdOf(Json{{"id", "9"}}), 0) << "not an integer: no id to answer";
  EXPECT_EQ(CommandIdOf(Json::array()), 0);
}

TEST(WireTest, APodListRoundTrips) {
  PodList list;
  list.cluster = "prod-eu";
  list.pods.push_back({"research", "train-0", "research", "Running", "node-a", 1, int64_t{8} << 30,
                       int64_t{5} << 30, "", "node-a/1 by best fit", "train"});
  list.pods.push_back({"research", "train-1", "research", "Pending", "", -1, int64_t{4} << 30, -1,
                       "team research: 8 GiB of its 8 GiB in use"});
  StatusOr<PodList> back = DecodePodList(ToJson(list));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->cluster, "prod-eu");
  ASSERT_EQ(back->pods.size(), 2U);
  EXPECT_EQ(back->pods[0].node, "node-a");
  EXPECT_EQ(back->pods[0].gpu, 1);
  EXPECT_EQ(back->pods[0].gpu_mem_bytes, int64_t{8} << 30);
  EXPECT_EQ(back->pods[0].used_bytes, int64_t{5} << 30);
  EXPECT_EQ(back->pods[1].gpu, -1);
  EXPECT_EQ(back->pods[1].used_bytes, -1);
  EXPECT_EQ(back->pods[1].reason, list.pods[1].reason);
  EXPECT_EQ(back->pods[0].placement, "node-a/1 by best fit");
  EXPECT_EQ(back->pods[1].placement, "");
  EXPECT_EQ(back->pods[0].command, "train");
  EXPECT_EQ(back->pods[1].command, "");
}

TEST(WireTest, AHostilePodListIsRefusedNamingTheField) {
  const Json good = {{"namespace", "research"}, {"name", "p"}, {"team", "research"},
                     {"phase", "Running"},      {"node", "n"}, {"gpu", 0},
                     {"gpu_mem_bytes", 1024}};
  struct Case {
    const char* key;
    Json value;
    const char* expected;
  } cases[] = {
      {"namespace", "Research", "pods[1]: namespace: expected a Kubernetes namespace name"},
      {"namespace", std::string(64, 'a'), "pods[1]: namespace"},
      {"name", "../etc", "pods[1]: name: expected a Kubernetes pod name"},
      {"team", "", "pods[1]: team: expected a team name"},
      {"team", "a\nb", "pods[1]: team"},
      {"phase", "Run\x1bning", "pods[1]: phase"},
      {"node", "node/1", "pods[1]: node: expected a node name"},
      {"gpu", 4096, "pods[1]: gpu: expected an integer from -1 to 1023"},
      {"gpu_mem_bytes", -1, "pods[1]: gpu_mem_bytes"},
      {"used_bytes", -2, "pods[1]: used_bytes"},
      {"reason", std::string(1025, 'x'), "pods[1]: reason"},
      {"reason", "two\nlines", "pods[1]: reason"},
      {"placement", std::string(1025, 'x'), "pods[1]: placement"},
      {"placement", "a\x7f", "pods[1]: placement"},
      {"command", "/usr/bin/python3", "pods[1]: command"},
      {"command", "a b", "pods[1]: command"},
      {"command", std::string(256, 'x'), "pods[1]: command"},
  };
  for (const Case& c : cases) {
    Json bad = good;
    bad[c.key] = c.value;
    StatusOr<PodList> r = DecodePodList(Json{{"pods", {good, bad}}});
    ASSERT_FALSE(r.ok()) << c.key << " = " << c.value.dump();
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos)
        << r.status().message() << " (expected: " << c.expected << ")";
  }
  EXPECT_FALSE(DecodePodList(Json{{"cluster", "A B"}, {"pods", Json::array()}}).ok());
  EXPECT_FALSE(DecodePodList(Json{{"pods", "none"}}).ok());
  EXPECT_FALSE(DecodePodList(Json::array()).ok());
}

}  // namespace
}  // namespace paladin::api
