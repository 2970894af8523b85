// Gangs in the control plane, with fake agents and the clock injected (no HTTP, no sleeps): a gang
// is checked as hostile input, placed all-or-nothing by the core packer with at most K ranks per
// node, every rank gets a stable address and the rendezvous variables, agents are told the routes
// to the other nodes' ranks, a coordinated checkpoint freezes every rank before any is dumped and
// gives up as a whole when one rank fails, and a lost node brings the whole gang back from its
// last cut without ever running a rank twice; one rank moves to another node with the gang
// frozen, the routes to it switched only once its restore is reported.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "control_fixture.h"

namespace paladin::server {
namespace {

using testing::kGiB;

class GangTest : public testing::ControlTest {
 protected:
  void SetUp() override {
    ControlOptions options;
    options.lease_s = 6;
    options.heartbeat_s = 1;
    ASSERT_NO_FATAL_FAILURE(Open("gang", options));
  }

  // A node of GPUS 80 GiB GPUs whose agent registered ADDRESS.
  void AddNode(const std::string& node, const std::string& address, int gpus = 1) {
    Json list = Json::array();
    for (int g = 0; g < gpus; ++g) {
      list.push_back({{"index", g},
                      {"uuid", "GPU-" + node + "-" + std::to_string(g)},
                      {"model", "EMU"},
                      {"memory_bytes", 80 * kGiB},
                      {"emulated", true},
                      {"healthy", true}});
    }
    StatusOr<Json> r =
        control_->RegisterAgent(admin_, Json{{"name", node}, {"address", address}, {"gpus", list}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }

  StatusOr<Json> SubmitGang(int ranks, int per_node, Json extra = Json::object()) {
    Json body = {{"name", "ddp"},
                 {"command", {"python3", "ddp_train.py"}},
                 {"gpu_mem", "8GiB"},
                 {"ranks", ranks},
                 {"ranks_per_node", per_node}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    return control_->Submit(admin_, body);
  }

  // One heartbeat of NODE: answers the commands it was given before (each as `answer` says, ok by
  // default), reports its copies, and keeps the new commands and the routes.
  void Beat(const std::string& node) {
    Json results = Json::array();
    for (const Json& c : unanswered_[node]) {
      Json result = Done(c);
      const std::string kind = c["kind"];
      if (kind == "checkpoint") {
        result["detail"] = {{"path", c["dir"]}, {"bytes", 1000}};
      }
      const std::string job = c["job"];
      auto failure = fail_.find(job + "/" + kind);
      if (failure == fail_.end()) failure = fail_.find(job + "/" + kind + "@" + node);
      if (failure != fail_.end()) {
        result["ok"] = false;
        result["error"] = failure->second;
      }
      const bool ok = result["ok"].get<bool>();
      if ((kind == "start" || kind == "restore") && ok) {
        copies_[node][job] = c["epoch"].get<int64_t>();
      }
      if (kind == "kill" || (kind == "checkpoint" && c["mode"] == "stop" && ok)) {
        copies_[node].erase(job);
      }
      results.push_back(result);
    }
    unanswered_[node] = Json::array();
    Json jobs = Json::array();
    for (const auto& [id, epoch] : copies_[node]) {
      jobs.push_back(CopyReport(id, epoch, "running", 0, 8 * kGiB));
    }
    StatusOr<Json> r = control_->Heartbeat(
        admin_, node, Json{{"gpus", Json::array()}, {"jobs", jobs}, {"results", results}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (const Json& c : (*r)["commands"]) {
      unanswered_[node].push_back(c);
      sent_[node].push_back(c);
    }
    routes_[node] = (*r)["rank_routes"];
  }
  void BeatAll() {
    for (const std::string& n : nodes_) Beat(n);
  }

  Json Job(const std::string& id) {
    StatusOr<Json> j = control_->GetJob(admin_, id);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? *j : Json::object();
  }

  // The commands of KIND sent to NODE so far.
  std::vector<Json> Sent(const std::string& node, const std::string& kind) {
    std::vector<Json> out;
    for (const Json& c : sent_[node]) {
      if (c["kind"] == kind) out.push_back(c);
    }
    return out;
  }
  int SentEverywhere(const std::string& kind) {
    int n = 0;
    for (const std::string& node : nodes_) n += static_cast<int>(Sent(node, kind).size());
    return n;
  }

  // Submits a gang of RANKS over the nodes, places it and has every rank report running.
  std::vector<std::string> RunningGang(int ranks, int per_node, Json extra = Json::object()) {
    StatusOr<Json> g = SubmitGang(ranks, per_node, std::move(extra));
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    std::vector<std::string> ids;
    for (const Json& id : (*g)["gang_jobs"]) ids.push_back(id);
    control_->Tick();
    BeatAll();  // takes the starts
    BeatAll();  // answers them, reports the copies
    for (const std::string& id : ids) EXPECT_EQ(Job(id)["state"], "running") << id;
    return ids;
  }

  std::vector<std::string> nodes_;
  std::map<std::string, Json> unanswered_;
  std::map<std::string, std::vector<Json>> sent_;
  std::map<std::string, Json> routes_;
  std::map<std::string, std::map<std::string, int64_t>> copies_;  // node -> job -> epoch
  // "JOB/KIND" or "JOB/KIND@NODE" -> the error its agent answers
  std::map<std::string, std::string> fail_;

  // How many nodes hold a copy of JOB now (running or frozen).
  int Copies(const std::string& job) {
    int n = 0;
    for (const auto& [node, jobs] : copies_) n += static_cast<int>(jobs.count(job));
    return n;
  }
  // Where NODE's last heartbeat answer routes ADDRESS ("" for nowhere).
  std::string RouteOf(const std::string& node, const std::string& address) {
    for (const Json& route : routes_[node]) {
      if (route["address"] == address) return route["via"];
    }
    return "";
  }
  std::string EventsOf(const std::string& id) {
    StatusOr<Json> events = control_->Events(admin_, id, 0);
    EXPECT_TRUE(events.ok());
    return events.ok() ? events->dump() : "";
  }
};

TEST_F(GangTest, AGangIsCheckedAsHostileInputNamingTheField) {
  AddNode("node-a", "192.0.2.1");
  struct Case {
    Json body;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{{"ranks", 1}}, "ranks: 1 is out of range 2..1024"},
      {{{"ranks", 5000}}, "ranks: 5000 is out of range 2..1024"},
      {{{"ranks", "two"}}, "ranks: expected an integer"},
      {{{"ranks", 2}, {"ranks_per_node", 3}}, "ranks_per_node: 3 is out of range 1..2"},
      {{{"ranks", 2}, {"ranks_per_node", 0}}, "ranks_per_node: 0 is out of range 1..2"},
      {{{"ranks", 2}, {"rank_port", 80}}, "rank_port: 80 is out of range 1024..65535"},
      {{{"ranks_per_node", 1}}, "ranks_per_node, rank_port: only with ranks (a gang)"},
      {{{"ranks", 2}, {"env", {{"MASTER_ADDR", "1.2.3.4"}}}},
       "env: MASTER_ADDR is set by the server for each rank of a gang"},
      {{{"ranks", 2}, {"env", {{"RANK", "0"}}}},
       "env: RANK is set by the server for each rank of a gang"},
      {{{"gpus", 0}}, "gpus: 0 only for the ranks of a gang (CPU ranks)"},
      {{{"ranks", 2}, {"gpus", -1}}, "gpus: -1 is out of range 0..16"},
  };
  for (const Case& c : cases) {
    Json body = {{"command", {"python3", "t.py"}}, {"gpu_mem", "8GiB"}};
    for (auto& [k, v] : c.body.items()) body[k] = v;
    StatusOr<Json> r = control_->Submit(admin_, body);
    ASSERT_FALSE(r.ok()) << body.dump();
    EXPECT_EQ(r.status().message(), c.says) << body.dump();
  }
  // A team's quota counts every rank: four 1-GPU ranks never fit a quota of three GPUs.
  ASSERT_TRUE(control_->PutTeam("vision", Json{{"max_gpus", 3}}).ok());
  StatusOr<Json> r = SubmitGang(4, 4, {{"team", "vision"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "ranks: the gang needs 4 GPUs, more than team vision's quota of 3");
  StatusOr<std::string> listed = control_->ListJobs(admin_, "", "", true);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(Json::parse(*listed)["jobs"].size(), 0u) << "nothing was created";
}

// CPU ranks (gpus 0) hold no GPU: two fit a node of one GPU, beside a GPU job.
TEST_F(GangTest, CpuRanksArePlacedWithoutAGpu) {
  nodes_ = {"node-a"};
  AddNode("node-a", "192.0.2.1");
  StatusOr<Json> g = SubmitGang(2, 2, {{"gpus", 0}});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  control_->Tick();
  BeatAll();
  for (const Json& id : (*g)["gang_jobs"]) {
    const Json job = Job(id);
    EXPECT_EQ(job["state"], "starting");
    EXPECT_EQ(job["gpu"], nullptr);
    EXPECT_EQ(job["quota_bytes"], 0);
  }
  for (const Json& start : Sent("node-a", "start")) {
    EXPECT_EQ(start["gpu_index"], -1);
    EXPECT_EQ(start["gpu_uuid"], "");
  }
  StatusOr<Json> gpu_job =
      control_->Submit(admin_, Json{{"command", {"python3", "train.py"}}, {"gpu_mem", "8GiB"}});
  ASSERT_TRUE(gpu_job.ok());
  control_->Tick();
  EXPECT_EQ(Job((*gpu_job)["id"])["state"], "starting") << "the GPU is still free";
}

TEST_F(GangTest, PlacementIsAllOrNothingWithAtMostKRanksPerNode) {
  nodes_ = {"node-a", "node-b", "node-c"};
  AddNode("node-a", "192.0.2.1");
  AddNode("node-b", "192.0.2.2");
  AddNode("node-c", "192.0.2.3");
  // Four ranks, one per node, on three one-GPU nodes: none is placed.
  StatusOr<Json> g = SubmitGang(4, 1);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::vector<std::string> ids;
  for (const Json& id : (*g)["gang_jobs"]) ids.push_back(id);
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ((*g)["gang"]["id"], ids[0]) << "rank 0's id names the gang";
  control_->Tick();
  BeatAll();
  EXPECT_EQ(SentEverywhere("start"), 0) << "a gang that does not fit starts no rank";
  for (const std::string& id : ids) {
    EXPECT_EQ(Job(id)["state"], "pending");
    EXPECT_NE(Job(id)["reason"].get<std::string>().find("MaxPerNode kept it off 3 nodes"),
              std::string::npos)
        << Job(id)["reason"];
  }
  // A fourth node: all four start at once, one on each node.
  nodes_.push_back("node-d");
  AddNode("node-d", "192.0.2.4");
  control_->Tick();
  BeatAll();
  std::set<std::string> used;
  for (const std::string& id : ids) {
    EXPECT_EQ(Job(id)["state"], "starting");
    used.insert(Job(id)["node"].get<std::string>());
  }
  EXPECT_EQ(used.size(), 4u);
  EXPECT_EQ(SentEverywhere("start"), 4);
}

TEST_F(GangTest, EveryRankGetsItsAddressTheRendezvousVariablesAndRoutes) {
  nodes_ = {"node-a", "node-b"};
  AddNode("node-a", "192.0.2.1", 2);
  AddNode("node-b", "192.0.2.2", 2);
  // Four ranks, at most two per node, on two nodes of two GPUs: two on each.
  std::vector<std::string> ids = RunningGang(4, 2);
  ASSERT_EQ(ids.size(), 4u);
  std::map<std::string, int> per_node;
  std::map<std::string, Json> start_of;
  for (const std::string& node : nodes_) {
    for (const Json& s : Sent(node, "start")) start_of[s["job"]] = s;
  }
  ASSERT_EQ(start_of.size(), 4u);
  std::map<std::string, std::set<std::string>> local_ranks;  // node -> LOCAL_RANKs
  for (int r = 0; r < 4; ++r) {
    const Json job = Job(ids[static_cast<size_t>(r)]);
    const Json& start = start_of[ids[static_cast<size_t>(r)]];
    const std::string address = "10.231.0." + std::to_string(r + 1);
    EXPECT_EQ(job["gang"]["address"], address) << "the lowest free addresses, in rank order";
    EXPECT_EQ(job["gang"]["rank"], r);
    EXPECT_EQ(start["rank_net"]["address"], address);
    const Json& env = start["env"];
    EXPECT_EQ(env["MASTER_ADDR"], "10.231.0.1");
    EXPECT_EQ(env["MASTER_PORT"], "29500");
    EXPECT_EQ(env["RANK"], std::to_string(r));
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env["GLOO_SOCKET_IFNAME"], start["rank_net"]["interface"]);
    local_ranks[job["node"]].insert(env["LOCAL_RANK"].get<std::string>());
    ++per_node[job["node"]];
  }
  EXPECT_EQ(per_node["node-a"], 2);
  EXPECT_EQ(per_node["node-b"], 2);
  for (const auto& [node, locals] : local_ranks) {
    EXPECT_EQ(locals, (std::set<std::string>{"0", "1"})) << node;
  }
  // Each node routes the other node's ranks to that node's address, and only those.
  for (const std::string& node : nodes_) {
    const std::string other = node == "node-a" ? "node-b" : "node-a";
    const std::string via = node == "node-a" ? "192.0.2.2" : "192.0.2.1";
    std::set<std::string> want;
    for (const std::string& id : ids) {
      if (Job(id)["node"] == other) want.insert(Job(id)["gang"]["address"].get<std::string>());
    }
    std::set<std::string> got;
    for (const Json& route : routes_[node]) {
      EXPECT_EQ(route["via"], via) << node;
      got.insert(route["address"].get<std::string>());
    }
    EXPECT_EQ(got, want) << node;
  }
  // A second gang takes the next addresses; the routes go when the gang ends.
  StatusOr<Json> second = SubmitGang(2, 1);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)["gang"]["address"], "10.231.0.5");
  for (const std::string& id : ids) ASSERT_TRUE(control_->Cancel(admin_, id).ok());
  BeatAll();
  BeatAll();
  for (const Json& id : (*second)["gang_jobs"]) ASSERT_TRUE(control_->Cancel(admin_, id).ok());
  BeatAll();
  for (const std::string& node : nodes_) EXPECT_TRUE(routes_[node].empty()) << routes_[node];
}

TEST_F(GangTest, ACheckpointFreezesEveryRankBeforeDumpingAnyAndOneFailureThawsThemAll) {
  nodes_ = {"node-a", "node-b"};
  AddNode("node-a", "192.0.2.1");
  AddNode("node-b", "192.0.2.2");
  std::vector<std::string> ids = RunningGang(2, 1);

  // Rank 1's dump fails: every rank is thawed, nothing is recorded.
  fail_[ids[1] + "/checkpoint"] = "criu dump failed";
  StatusOr<Json> asked = control_->CheckpointJob(admin_, ids[1]);
  ASSERT_TRUE(asked.ok()) << asked.status().ToString();
  BeatAll();  // takes the freezes
  EXPECT_EQ(SentEverywhere("freeze"), 2);
  EXPECT_EQ(SentEverywhere("checkpoint"), 0) << "no dump before every rank is frozen";
  for (int i = 0; i < 4; ++i) BeatAll();  // freezes answered, dumps (one fails), thaws
  for (const std::string& node : nodes_) {
    ASSERT_EQ(Sent(node, "checkpoint").size(), 1u) << node;
    EXPECT_EQ(Sent(node, "checkpoint")[0]["mode"], "frozen");
    EXPECT_EQ(Sent(node, "thaw").size(), 1u) << node;
  }
  for (const std::string& id : ids) {
    EXPECT_EQ(Job(id)["state"], "running");
    EXPECT_EQ(Job(id)["last_checkpoint"], nullptr);
    EXPECT_EQ(Job(id)["gang"]["generation"], 0);
  }
  BeatAll();  // the thaws answered: the cut is over
  EXPECT_EQ(Job(ids[0])["gang"]["generation"], 0);

  // Without the failure: generation 1, one image per rank, the ranks stopped.
  fail_.clear();
  asked = control_->CheckpointJob(admin_, ids[0]);
  ASSERT_TRUE(asked.ok()) << asked.status().ToString();
  for (int i = 0; i < 6; ++i) BeatAll();
  for (const std::string& id : ids) {
    const Json job = Job(id);
    EXPECT_EQ(job["state"], "checkpointed") << id;
    EXPECT_EQ(job["gang"]["generation"], 1);
    ASSERT_TRUE(job["last_checkpoint"].is_object());
  }
  EXPECT_TRUE(copies_["node-a"].empty() && copies_["node-b"].empty()) << "every rank was killed";

  // Resume: every rank restores its own image of generation 1, all together.
  ASSERT_TRUE(control_->Resume(admin_, ids[1]).ok());
  control_->Tick();
  BeatAll();
  for (const std::string& id : ids) {
    const Json job = Job(id);
    EXPECT_EQ(job["state"], "restoring");
    bool found = false;
    for (const Json& c : Sent(job["node"], "restore")) {
      if (c["job"] == id) {
        found = true;
        EXPECT_EQ(c["image"], job["last_checkpoint"]["path"]);
        EXPECT_EQ(c["rank_net"]["address"], job["gang"]["address"]) << "the same address";
      }
    }
    EXPECT_TRUE(found) << id;
  }
}

TEST_F(GangTest, ALostNodeBringsTheWholeGangBackFromItsLastCutWithoutARankRunningTwice) {
  ControlOptions options;
  options.lease_s = 6;
  options.heartbeat_s = 1;
  options.checkpoint_every_s = 30;
  ASSERT_NO_FATAL_FAILURE(Open("gang-recover", options));
  nodes_ = {"node-a", "node-b"};
  AddNode("node-a", "192.0.2.1");
  AddNode("node-b", "192.0.2.2");
  std::vector<std::string> ids = RunningGang(2, 1);
  nodes_.push_back("node-c");
  AddNode("node-c", "192.0.2.3");
  // A periodic cut: freeze, dump while frozen, thaw; the ranks keep running.
  for (int t = 0; t < 31; ++t) {
    now_ += 1;
    BeatAll();
    control_->Tick();
  }
  for (int i = 0; i < 4; ++i) BeatAll();
  for (const std::string& id : ids) {
    EXPECT_EQ(Job(id)["gang"]["generation"], 1) << id;
    EXPECT_EQ(Job(id)["state"], "running");
  }
  EXPECT_EQ(SentEverywhere("thaw"), 2);

  // Rank 1's node goes silent; the others keep beating.
  const std::string lost = Job(ids[1])["node"];
  const std::string survivor = Job(ids[0])["node"];
  const int64_t survivor_epoch = Job(ids[0])["epoch"];
  std::vector<std::string> alive;
  for (const std::string& n : nodes_) {
    if (n != lost) alive.push_back(n);
  }
  auto pass = [&](double seconds) {
    for (double t = 0; t < seconds; t += 1) {
      now_ += 1;
      for (const std::string& n : alive) Beat(n);
      control_->Tick();
    }
  };
  // Dead after one lease, recovered one lease later.
  for (int t = 0; t < 30 && Job(ids[1])["state"] != "restoring"; ++t) pass(1);
  ASSERT_EQ(Job(ids[1])["state"], "restoring");
  // The survivor is told to stop; until it answers, no rank is placed again.
  for (const std::string& n : alive) Beat(n);  // takes the kill
  control_->Tick();
  ASSERT_GE(Sent(survivor, "kill").size(), 1u);
  EXPECT_EQ(Sent(survivor, "kill")[0]["epoch"], survivor_epoch);
  EXPECT_EQ(Job(ids[0])["state"], "restoring");
  EXPECT_EQ(SentEverywhere("restore"), 0) << "no rank restored while a copy may still run";
  // A heartbeat later the kill is answered: both ranks restore generation 1, on alive nodes.
  EXPECT_NE(Job(ids[0])["reason"].get<std::string>().find("waiting until rank 0's copy"),
            std::string::npos)
      << Job(ids[0])["reason"];
  pass(2);
  std::set<std::string> restored_on;
  for (const std::string& id : ids) {
    const Json job = Job(id);
    EXPECT_NE(job["node"], lost);
    EXPECT_GT(job["epoch"].get<int64_t>(), survivor_epoch);
    restored_on.insert(job["node"].get<std::string>());
  }
  EXPECT_EQ(restored_on.size(), 2u);
  EXPECT_EQ(SentEverywhere("restore"), 2);
  EXPECT_TRUE(copies_[survivor].count(ids[0]) == 0 || copies_[survivor][ids[0]] > survivor_epoch)
      << "the old copy of rank 0 is gone before the new one";
  pass(2);
  for (const std::string& id : ids) {
    EXPECT_EQ(Job(id)["state"], "running") << id;
    EXPECT_EQ(Job(id)["recoveries"], 1) << id;
  }
}

// `paladin job migrate RANK --to NODE`: the gang frozen, the other rank dumped, the moving rank
// dumped last (its dump kills it), restored on the new node, the routes to its address switched
// only once that restore is reported, then the others thawed. One copy of the rank throughout.
TEST_F(GangTest, OneRankMovesToAThirdNodeAndTheRoutesSwitchOnlyAfterItsRestore) {
  nodes_ = {"node-a", "node-b"};
  AddNode("node-a", "192.0.2.1");
  AddNode("node-b", "192.0.2.2");
  std::vector<std::string> ids = RunningGang(2, 1, {{"gpus", 0}});
  nodes_.push_back("node-c");
  AddNode("node-c", "192.0.2.3");
  const std::string stay = Job(ids[0])["node"];
  const std::string from = Job(ids[1])["node"];
  const std::string address = Job(ids[1])["gang"]["address"];
  const std::string from_address = from == "node-a" ? "192.0.2.1" : "192.0.2.2";
  const int64_t epoch = Job(ids[1])["epoch"];
  Beat(stay);
  ASSERT_EQ(RouteOf(stay, address), from_address);

  // Refused with the reason: onto its own node, a node that does not exist.
  StatusOr<Json> r = control_->Migrate(admin_, ids[1], Json{{"to", from}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("it runs on " + from + " already"), std::string::npos);
  EXPECT_EQ(control_->Migrate(admin_, ids[1], Json{{"to", "node-x"}}).status().message(),
            "node node-x not found");

  r = control_->Migrate(admin_, ids[1], Json{{"to", "node-c"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["gang"]["moving_to"], "node-c");
  Beat(stay);
  Beat(from);  // both take their freeze
  EXPECT_EQ(SentEverywhere("freeze"), 2);
  Beat(stay);  // rank 0 frozen; rank 1 not yet: no dump
  EXPECT_EQ(SentEverywhere("checkpoint"), 0);
  Beat(from);  // rank 1 frozen too: rank 0 is dumped, leaving it frozen; rank 1 not yet
  Beat(stay);
  ASSERT_EQ(Sent(stay, "checkpoint").size(), 1u);
  EXPECT_EQ(Sent(stay, "checkpoint")[0]["mode"], "frozen");
  Beat(from);
  EXPECT_EQ(Sent(from, "checkpoint").size(), 0u) << "the moving rank is dumped last";
  Beat(stay);  // rank 0's image is in
  Beat(from);  // takes its dump, which kills it
  ASSERT_EQ(Sent(from, "checkpoint").size(), 1u);
  EXPECT_EQ(Sent(from, "checkpoint")[0]["mode"], "stop");
  EXPECT_EQ(Copies(ids[1]), 1);
  Beat(from);  // dumped and gone from there
  EXPECT_EQ(Copies(ids[1]), 0);
  Json moving = Job(ids[1]);
  EXPECT_EQ(moving["state"], "restoring");
  EXPECT_EQ(moving["node"], "node-c");
  EXPECT_GT(moving["epoch"].get<int64_t>(), epoch);
  EXPECT_EQ(moving["gang"]["generation"], 1) << "both images are one cut";
  EXPECT_EQ(Job(ids[0])["gang"]["generation"], 1);
  Beat(stay);
  EXPECT_EQ(RouteOf(stay, address), from_address) << "no route to node-c before the restore";
  EXPECT_EQ(Sent(stay, "thaw").size(), 0u);
  Beat("node-c");  // takes the restore
  ASSERT_EQ(Sent("node-c", "restore").size(), 1u);
  const Json restore = Sent("node-c", "restore")[0];
  EXPECT_EQ(restore["job"], ids[1]);
  EXPECT_EQ(restore["image"], moving["last_checkpoint"]["path"]);
  EXPECT_EQ(restore["rank_net"]["address"], address) << "the same address";
  EXPECT_EQ(restore["env"]["RANK"], "1");
  Beat(stay);
  EXPECT_EQ(RouteOf(stay, address), from_address) << "the restore is not reported yet";
  EXPECT_EQ(Sent(stay, "thaw").size(), 0u) << "the others stay frozen until then";
  EXPECT_EQ(RouteOf("node-c", address), "") << "node-c never routes its own rank away";
  Beat("node-c");  // restored: one copy, on node-c
  EXPECT_EQ(Copies(ids[1]), 1);
  EXPECT_EQ(copies_["node-c"].count(ids[1]), 1u);
  Beat(stay);  // now the route goes to node-c, and rank 0 is thawed
  EXPECT_EQ(RouteOf(stay, address), "192.0.2.3");
  EXPECT_EQ(Sent(stay, "thaw").size(), 1u);
  EXPECT_EQ(Sent(from, "thaw").size(), 0u) << "nothing of rank 1 is left there";
  Beat(stay);
  for (const std::string& id : ids) {
    const Json job = Job(id);
    EXPECT_EQ(job["state"], "running") << id;
    EXPECT_EQ(job["gang"]["moving_to"], nullptr);
  }
  EXPECT_EQ(Job(ids[1])["node"], "node-c");
  EXPECT_EQ(Job(ids[0])["node"], stay);
  const std::string events = EventsOf(ids[1]);
  EXPECT_NE(events.find("gang_rank_moved"), std::string::npos) << events;
  EXPECT_NE(events.find("moved from " + from + " to node-c"), std::string::npos) << events;
  BeatAll();
  EXPECT_TRUE(routes_[from].empty()) << "no rank of the gang is left on " << from;
}

// Any step failing before the rank's dump thaws every rank and leaves it where it was; its
// restore failing on the new node brings it back where it was, from the same image.
TEST_F(GangTest, AFailedMoveThawsTheGangWithTheRankWhereItWas) {
  nodes_ = {"node-a", "node-b", "node-c"};
  AddNode("node-a", "192.0.2.1");
  AddNode("node-b", "192.0.2.2");
  AddNode("node-c", "192.0.2.3");
  std::vector<std::string> ids = RunningGang(2, 1, {{"gpus", 0}});
  std::string target;
  for (const std::string& n : nodes_) {
    if (n != Job(ids[0])["node"] && n != Job(ids[1])["node"]) target = n;
  }
  const std::string from = Job(ids[1])["node"];
  const std::string address = Job(ids[1])["gang"]["address"];

  // The other rank's dump fails: every rank thawed, the moving one never dumped.
  fail_[ids[0] + "/checkpoint"] = "criu dump failed";
  ASSERT_TRUE(control_->Migrate(admin_, ids[1], Json{{"to", target}}).ok());
  for (int i = 0; i < 6; ++i) BeatAll();
  EXPECT_EQ(Sent(from, "checkpoint").size(), 0u);
  EXPECT_EQ(SentEverywhere("restore"), 0);
  EXPECT_EQ(SentEverywhere("thaw"), 2);
  for (const std::string& id : ids) {
    EXPECT_EQ(Job(id)["state"], "running") << id;
    EXPECT_EQ(Job(id)["gang"]["generation"], 0) << "the failed cut is not kept";
    EXPECT_EQ(Job(id)["gang"]["moving_to"], nullptr);
    EXPECT_EQ(Copies(id), 1);
  }
  EXPECT_EQ(Job(ids[1])["node"], from);
  EXPECT_NE(EventsOf(ids[1]).find("gang_move_failed"), std::string::npos);

  // The moving rank's own dump fails: it was not killed; every rank thawed, nothing moved.
  fail_.clear();
  fail_[ids[1] + "/checkpoint"] = "criu dump failed";
  ASSERT_TRUE(control_->Migrate(admin_, ids[1], Json{{"to", target}}).ok());
  for (int i = 0; i < 8; ++i) BeatAll();
  EXPECT_EQ(SentEverywhere("restore"), 0);
  EXPECT_EQ(SentEverywhere("thaw"), 4);
  EXPECT_EQ(Job(ids[1])["node"], from);
  EXPECT_EQ(Job(ids[1])["state"], "running");
  EXPECT_EQ(Copies(ids[1]), 1);

  // Its restore on the new node fails: restored again where it was, from the same image, and
  // the routes never pointed at the new node.
  fail_.clear();
  fail_[ids[1] + "/restore@" + target] = "criu restore failed";
  ASSERT_TRUE(control_->Migrate(admin_, ids[1], Json{{"to", target}}).ok());
  for (int i = 0; i < 10; ++i) {
    BeatAll();
    EXPECT_LE(Copies(ids[1]), 1);
    const std::string target_address = target == "node-a"   ? "192.0.2.1"
                                       : target == "node-b" ? "192.0.2.2"
                                                            : "192.0.2.3";
    for (const std::string& n : nodes_) EXPECT_NE(RouteOf(n, address), target_address) << n;
  }
  ASSERT_EQ(Sent(target, "restore").size(), 1u);
  ASSERT_EQ(Sent(from, "restore").size(), 1u);
  EXPECT_EQ(Sent(from, "restore")[0]["image"], Sent(target, "restore")[0]["image"]);
  EXPECT_EQ(Job(ids[1])["node"], from);
  EXPECT_EQ(Job(ids[1])["state"], "running");
  EXPECT_EQ(Job(ids[0])["state"], "running");
  EXPECT_EQ(Copies(ids[1]), 1);
  EXPECT_EQ(SentEverywhere("thaw"), 5) << "rank 0 thawed once rank 1 was back";
  EXPECT_NE(EventsOf(ids[1]).find("restored again on " + from), std::string::npos);

  // A rank holding a GPU does not move (it cannot be frozen): refused with the reason.
  std::vector<std::string> gpu_gang = RunningGang(2, 1);
  StatusOr<Json> r = control_->Migrate(admin_, gpu_gang[0], Json{{"to", target}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("only a CPU rank (gpus 0) moves"), std::string::npos)
      << r.status().message();
}

TEST(RankSubnetTest, ParsesAndRefusesWithTheReason) {
  StatusOr<RankSubnet> s = ParseRankSubnet("10.231.0.0/16");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->Hosts(), 65534);
  EXPECT_EQ(s->Address(1), "10.231.0.1");
  EXPECT_EQ(s->Address(258), "10.231.1.2");
  for (const char* bad : {"10.231.0.0", "10.231.0.1/16", "10.231.0.0/31", "10.231.0.0/4",
                          "300.0.0.0/8", "10.0.0/8", "a.b.c.d/8", "10.0.0.0/x"}) {
    EXPECT_FALSE(ParseRankSubnet(bad).ok()) << bad;
  }
  EXPECT_EQ(ParseRankSubnet("10.231.0.1/16").status().message(),
            "rank subnet '10.231.0.1/16': host bits are set (write the network's own address)");
}

}  // namespace
}  // namespace paladin::server
