// The migration transaction with fake agents: reserve -> migrate_in -> migrate_out -> commit
// (idempotent) -> done; a failure before the commit leaves the job on its source and refuses a
// late commit; drains move jobs off; checkpoints are recorded and restored after a node dies.
#include <gtest/gtest.h>

#include "harness.h"

namespace paladin::server {
namespace {

using testing::AwaitCommand;
using testing::FakeAgent;
using testing::Job;
using testing::Json;
using testing::kGiB;
using testing::WaitFor;

class MigrationTest : public ::testing::Test {
 protected:
  explicit MigrationTest(ServerOptions options = {})
      : h_("migrate", options),
        a_(h_, "node-a", 1, 16 * kGiB, 7100),
        b_(h_, "node-b", 1, 16 * kGiB, 7200) {}

  // A job running on node-a.
  std::string RunningJob() {
    EXPECT_TRUE(a_.Register().ok());
    StatusOr<Json> j =
        h_.Admin().Post("/v1/jobs", Json{{"command", {"w"}}, {"gpu_mem", "2GiB"}, {"team", "t"}});
    EXPECT_TRUE(j.ok());
    const std::string id = (*j)["id"];
    std::optional<Json> start = AwaitCommand(a_, "start", id);
    EXPECT_TRUE(start.has_value());
    a_.Obey(*start);
    EXPECT_TRUE(a_.Heartbeat().ok());
    EXPECT_EQ(Job(h_.Admin(), id)["state"], "running");
    EXPECT_TRUE(b_.Register().ok());
    return id;
  }

  testing::ServerHarness h_;
  FakeAgent a_;
  FakeAgent b_;
};

TEST_F(MigrationTest, CommitsMovesTheJobOnce) {
  const std::string id = RunningJob();
  api::Client admin = h_.Admin();
  const int64_t epoch = Job(admin, id)["epoch"];
  StatusOr<Json> asked = admin.Post("/v1/jobs/" + id + "/migrate", Json{{"to", "node-b"}});
  ASSERT_TRUE(asked.ok()) << asked.status().ToString();
  EXPECT_EQ((*asked)["state"], "migrating");
  EXPECT_EQ((*asked)["migration"]["to"], "node-b");
  // A second migration of the same job, or to a busy destination, is refused.
  EXPECT_EQ(admin.Post("/v1/jobs/" + id + "/migrate", Json{{"to", "node-b"}}).status().code(),
            StatusCode::kFailedPrecondition);

  std::optional<Json> in = AwaitCommand(b_, "migrate_in", id);
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ((*in)["port"], 7200);
  EXPECT_EQ((*in)["epoch"], epoch + 1);
  ASSERT_TRUE(b_.Heartbeat().ok());  // listening now
  std::optional<Json> out = AwaitCommand(a_, "migrate_out", id);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ((*out)["to_port"], 7200);
  EXPECT_EQ((*out)["token"], (*in)["token"]);
  const int64_t migration = (*out)["migration"];

  api::Client agent = h_.Agent();
  const std::string commit = "/v1/migrations/" + std::to_string(migration) + "/commit";
  StatusOr<Json> first = agent.Post(commit, Json::object());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ((*first)["commit"], true);
  StatusOr<Json> again = agent.Post(commit, Json::object());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)["commit"], true);
  Json moved = Job(admin, id);
  EXPECT_EQ(moved["node"], "node-b");
  EXPECT_EQ(moved["epoch"], epoch + 1);
  EXPECT_EQ(moved["migrations"], 1);

  // The destination runs it at the new epoch; the source's results end the transaction.
  b_.jobs()[id] = FakeAgent::Job{id, epoch + 1};
  b_.Answer(Json{{"command", (*in)["id"]}, {"ok", true}, {"detail", {{"pid", 5}}}});
  ASSERT_TRUE(b_.Heartbeat().ok());
  a_.Answer(Json{{"command", (*out)["id"]}, {"ok", true}, {"detail", {{"pause_s", 1.5}}}});
  a_.jobs().erase(id);
  ASSERT_TRUE(a_.Heartbeat().ok());
  Json done = Job(admin, id);
  EXPECT_EQ(done["state"], "running");
  EXPECT_TRUE(done["migration"].is_null());
  StatusOr<Json> events = admin.Get("/v1/events?job=" + id);
  ASSERT_TRUE(events.ok());
  EXPECT_NE(events->dump().find("\"migrated\""), std::string::npos);
  // A copy left on the source at the old epoch is killed.
  a_.jobs()[id] = FakeAgent::Job{id, epoch};
  EXPECT_TRUE(AwaitCommand(a_, "kill", id).has_value());
  StatusOr<std::string> metrics = admin.GetText("/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_NE(metrics->find("paladin_migrations_total 1"), std::string::npos);
}

// One whole move of job `id` from `from` to `to`, whose source reports `pause_s`; returns the
// migration as the job showed it while it ran (expected_pause_s, expected_basis).
Json MoveOnce(testing::ServerHarness& h, FakeAgent& from, FakeAgent& to, const std::string& id,
              const std::string& to_name, double pause_s) {
  api::Client admin = h.Admin();
  const int64_t epoch = Job(admin, id)["epoch"];
  StatusOr<Json> asked = admin.Post("/v1/jobs/" + id + "/migrate", Json{{"to", to_name}});
  EXPECT_TRUE(asked.ok()) << asked.status().ToString();
  if (!asked.ok()) return Json();
  const Json migration = (*asked)["migration"];
  std::optional<Json> in = AwaitCommand(to, "migrate_in", id);
  EXPECT_TRUE(in.has_value());
  if (!in) return migration;
  EXPECT_TRUE(to.Heartbeat().ok());
  std::optional<Json> out = AwaitCommand(from, "migrate_out", id);
  EXPECT_TRUE(out.has_value());
  if (!out) return migration;
  const std::string commit = "/v1/migrations/" + (*out)["migration"].dump() + "/commit";
  EXPECT_TRUE(h.Agent().Post(commit, Json::object()).ok());
  to.jobs()[id] = FakeAgent::Job{id, epoch + 1};
  to.Answer(Json{{"command", (*in)["id"]}, {"ok", true}, {"detail", {{"pid", 5}}}});
  EXPECT_TRUE(to.Heartbeat().ok());
  from.Answer(Json{{"command", (*out)["id"]}, {"ok", true}, {"detail", {{"pause_s", pause_s}}}});
  from.jobs().erase(id);
  EXPECT_TRUE(from.Heartbeat().ok());
  EXPECT_EQ(Job(admin, id)["node"], to_name);
  return migration;
}

// The rebalancer's cost of a move is what this fleet's moves took (issue: an honest cost model):
// each pair of nodes learns from its own measured pauses, survives a restart, and the estimate
// for the next move is within 25% of what that move measures.
TEST_F(MigrationTest, TheExpectedPauseIsLearnedFromMeasuredMoves) {
  const std::string id = RunningJob();
  // No move measured yet: the prior.
  Json first = MoveOnce(h_, a_, b_, id, "node-b", 1.1);
  EXPECT_EQ(first["expected_basis"], "prior") << first.dump();
  // a -> b measures about 1.2 s, b -> a about 3 s.
  const double ab[] = {1.3, 1.2};
  const double ba[] = {3.1, 2.9, 3.0};
  MoveOnce(h_, b_, a_, id, "node-a", ba[0]);
  for (int i = 0; i < 2; ++i) {
    Json m = MoveOnce(h_, a_, b_, id, "node-b", ab[i]);
    EXPECT_EQ(m["expected_basis"].get<std::string>().rfind("node pair", 0), 0u) << m.dump();
    EXPECT_NEAR(m["expected_pause_s"].get<double>(), ab[i], 0.25 * ab[i]) << m.dump();
    m = MoveOnce(h_, b_, a_, id, "node-a", ba[i + 1]);
    EXPECT_NEAR(m["expected_pause_s"].get<double>(), ba[i + 1], 0.25 * ba[i + 1]) << m.dump();
  }
  // What was measured is kept: after a restart the next a -> b move expects the same.
  h_.Restart();
  ASSERT_TRUE(a_.Heartbeat().ok());
  ASSERT_TRUE(b_.Heartbeat().ok());
  Json after = MoveOnce(h_, a_, b_, id, "node-b", 1.2);
  EXPECT_EQ(after["expected_basis"], "node pair, 3 move(s)") << after.dump();
  EXPECT_NEAR(after["expected_pause_s"].get<double>(), 1.2, 0.1) << after.dump();
  StatusOr<Json> events = h_.Admin().Get("/v1/events?job=" + id);
  ASSERT_TRUE(events.ok());
  EXPECT_NE(events->dump().find("paused 1.20 s, expected"), std::string::npos) << events->dump();

  // GET /v1/move-costs (admin; `paladin move-costs`, `sim dynamic --move-costs`): every
  // measured move, oldest first, with its pair, its bytes and its pause; a team cannot read it.
  StatusOr<Json> costs = h_.Admin().Get("/v1/move-costs");
  ASSERT_TRUE(costs.ok()) << costs.status().ToString();
  const Json& moves = (*costs)["moves"];
  const double want[] = {1.1, ba[0], ab[0], ba[1], ab[1], ba[2], 1.2};
  ASSERT_EQ(moves.size(), std::size(want)) << costs->dump();
  for (size_t i = 0; i < moves.size(); ++i) {
    EXPECT_EQ(moves[i]["from"], i % 2 == 0 ? "node-a" : "node-b") << i;
    EXPECT_EQ(moves[i]["to"], i % 2 == 0 ? "node-b" : "node-a") << i;
    EXPECT_NEAR(moves[i]["pause_s"].get<double>(), want[i], 1e-9) << i;
    EXPECT_GE(moves[i]["gpu_bytes"].get<double>(), 0) << i;
  }
  StatusOr<Json> as_team = h_.Client(h_.Token("team:ml")).Get("/v1/move-costs");
  EXPECT_FALSE(as_team.ok());
}

// The move's mode: post-copy when both agents registered the patched CRIU (the commands carry
// it), pre-copy when either did not, and the job's events say which the source used, why, and
// the pause it reported.
TEST_F(MigrationTest, AMoveSaysItsModeAndPause) {
  a_.post_copy = true;
  b_.post_copy = true;
  const std::string id = RunningJob();
  api::Client admin = h_.Admin();
  ASSERT_TRUE(admin.Post("/v1/jobs/" + id + "/migrate", Json{{"to", "node-b"}}).ok());
  std::optional<Json> in = AwaitCommand(b_, "migrate_in", id);
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ((*in)["move_mode"], "post-copy");
  ASSERT_TRUE(b_.Heartbeat().ok());
  std::optional<Json> out = AwaitCommand(a_, "migrate_out", id);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ((*out)["move_mode"], "post-copy");
  const int64_t migration = (*out)["migration"];
  ASSERT_TRUE(h_.Agent()
                  .Post("/v1/migrations/" + std::to_string(migration) + "/commit", Json::object())
                  .ok());
  const int64_t epoch = Job(admin, id)["epoch"];
  // The source reports first here: the "migrated" event says the mode and the pause.
  a_.Answer(Json{{"command", (*out)["id"]},
                 {"ok", true},
                 {"detail", {{"pause_s", 0.75}, {"mode", "post-copy"}, {"mode_why", "no GPU"}}}});
  a_.jobs().erase(id);
  ASSERT_TRUE(a_.Heartbeat().ok());
  b_.jobs()[id] = FakeAgent::Job{id, epoch};
  b_.Answer(Json{{"command", (*in)["id"]}, {"ok", true}, {"detail", {{"pid", 5}}}});
  ASSERT_TRUE(b_.Heartbeat().ok());
  StatusOr<Json> events = admin.Get("/v1/events?job=" + id);
  ASSERT_TRUE(events.ok());
  EXPECT_NE(events->dump().find("post-copy (no GPU), paused 0.75 s"), std::string::npos)
      << events->dump();

  // Back to node-a with node-a's agent now without the patched CRIU: pre-copy, and why.
  a_.post_copy = false;
  ASSERT_TRUE(a_.Register().ok());
  ASSERT_TRUE(admin.Post("/v1/jobs/" + id + "/migrate", Json{{"to", "node-a"}}).ok());
  std::optional<Json> back = AwaitCommand(a_, "migrate_in", id);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ((*back)["move_mode"], "pre-copy");
  StatusOr<Json> started = admin.Get("/v1/events?job=" + id);
  ASSERT_TRUE(started.ok());
  EXPECT_NE(started->dump().find("pre-copy: node node-a's agent has no post-copy CRIU"),
            std::string::npos)
      << started->dump();
}

// The mode choice of a pre-copy move, worked out from what each agent registered (the server's
// --move-mode auto):
//   a post_copy, b post_copy, both stream  -> post-copy; migrate_out's stream true (the source's
//                                             fallback for a job holding GPU state)
//   no post_copy, both stream              -> pre-copy, streamed: stream true, "stream: ..."
//   no post_copy, b does not stream        -> pre-copy by image: stream false, and why
// The source's report names the mode it used ("stream"): the events and last_move say it.
TEST_F(MigrationTest, APreCopyMoveStreamsWhereBothAgentsCan) {
  a_.stream = true;
  b_.stream = true;
  const std::string id = RunningJob();
  api::Client admin = h_.Admin();
  ASSERT_TRUE(admin.Post("/v1/jobs/" + id + "/migrate", Json{{"to", "node-b"}}).ok());
  std::optional<Json> in = AwaitCommand(b_, "migrate_in", id);
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ((*in)["move_mode"], "pre-copy");
  ASSERT_TRUE(b_.Heartbeat().ok());
  std::optional<Json> out = AwaitCommand(a_, "migrate_out", id);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ((*out)["move_mode"], "pre-copy");
  EXPECT_EQ((*out)["stream"], true);
  StatusOr<Json> started = admin.Get("/v1/events?job=" + id);
  ASSERT_TRUE(started.ok());
  EXPECT_NE(started->dump().find("stream: node node-a's agent has no post-copy CRIU "
                                 "(scripts/criu_lazy.sh); pre-copy streamed"),
            std::string::npos)
      << started->dump();
  const int64_t migration = (*out)["migration"];
  ASSERT_TRUE(h_.Agent()
                  .Post("/v1/migrations/" + std::to_string(migration) + "/commit", Json::object())
                  .ok());
  const int64_t epoch = Job(admin, id)["epoch"];
  a_.Answer(Json{{"command", (*out)["id"]},
                 {"ok", true},
                 {"detail", {{"pause_s", 0.5}, {"mode", "stream"}, {"mode_why", "streamed"}}}});
  a_.jobs().erase(id);
  ASSERT_TRUE(a_.Heartbeat().ok());
  b_.jobs()[id] = FakeAgent::Job{id, epoch};
  b_.Answer(Json{{"command", (*in)["id"]}, {"ok", true}, {"detail", {{"pid", 5}}}});
  ASSERT_TRUE(b_.Heartbeat().ok());
  StatusOr<Json> events = admin.Get("/v1/events?job=" + id);
  ASSERT_TRUE(events.ok());
  EXPECT_NE(events->dump().find("; stream (streamed), paused 0.50 s"), std::string::npos)
      << events->dump();
  EXPECT_EQ(Job(admin, id)["last_move"]["mode"], "stream") << Job(admin, id).dump();

  // Back to node-a, node-b's agent now one that does not stream: by image, and why.
  b_.stream = false;
  ASSERT_TRUE(b_.Register().ok());
  ASSERT_TRUE(admin.Post("/v1/jobs/" + id + "/migrate", Json{{"to", "node-a"}}).ok());
  std::optional<Json> back_in = AwaitCommand(a_, "migrate_in", id);
  ASSERT_TRUE(back_in.has_value());
  ASSERT_TRUE(a_.Heartbeat().ok());
  std::optional<Json> back = AwaitCommand(b_, "migrate_out", id);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ((*back)["move_mode"], "pre-copy");
  EXPECT_EQ((*back)["stream"], false);
  StatusOr<Json> again = admin.Get("/v1/events?job=" + id);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->dump().find("pre-copy by image: node node-b's agent does not stream "
                               "pre-copy moves"),
            std::string::npos)
      << again->dump();
}

// Post-copy agents that stream: migrate_out asks post-copy, with streaming as the source's
// fallback (a job holding GPU state).
TEST_F(MigrationTest, APostCopyMoveFallsBackToStreaming) {
  a_.post_copy = a_.stream = true;
  b_.post_copy = b_.stream = true;
  const std::string id = RunningJob();
  ASSERT_TRUE(h_.Admin().Post("/v1/jobs/" + id + "/migrate", Json{{"to", "node-b"}}).ok());
  ASSERT_TRUE(AwaitCommand(b_, "migrate_in", id).has_value());
  ASSERT_TRUE(b_.Heartbeat().ok());
  std::optional<Json> out = AwaitCommand(a_, "migrate_out", id);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ((*out)["move_mode"], "post-copy");
  EXPECT_EQ((*out)["stream"], true);
}

// --move-mode image: never post-copy, never streamed, whatever the agents can.
class ImageMoveModeTest : public MigrationTest {
 protected:
  static ServerOptions Options() {
    ServerOptions o;
    o.move_mode = "image";
    return o;
  }
  ImageMoveModeTest() : MigrationTest(Options()) {}
};

TEST_F(ImageMoveModeTest, MovesByImage) {
  a_.post_copy = a_.stream = true;
  b_.post_copy = b_.stream = true;
  const std::string id = RunningJob();
  ASSERT_TRUE(h_.Admin().Post("/v1/jobs/" + id + "/migrate", Json{{"to", "node-b"}}).ok());
  ASSERT_TRUE(AwaitCommand(b_, "migrate_in", id).has_value());
  ASSERT_TRUE(b_.Heartbeat().ok());
  std::optional<Json> out = AwaitCommand(a_, "migrate_out", id);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ((*out)["move_mode"], "pre-copy");
  EXPECT_EQ((*out)["stream"], false);
  StatusOr<Json> events = h_.Admin().Get("/v1/events?job=" + id);
  ASSERT_TRUE(events.ok());
  EXPECT_NE(events->dump().find("pre-copy: the server's --move-mode is image"), std::string::npos)
      << events->dump();
}

// An agent whose workloads run as an unprivileged user cannot have them checkpointed by CRIU:
// explain says so, and a move is refused before anything is reserved.
TEST_F(MigrationTest, AnUnprivilegedNodesJobsAreNotMoved) {
  a_.checkpointable = false;
  const std::string id = RunningJob();
  StatusOr<Json> explain = h_.Admin().Get("/v1/jobs/" + id + "/explain");
  ASSERT_TRUE(explain.ok()) << explain.status().ToString();
  EXPECT_EQ((*explain)["migratable"], false);
  EXPECT_NE((*explain)["why_not_migratable"].get<std::string>().find("unprivileged"),
            std::string::npos);
  StatusOr<Json> moved = h_.Admin().Post("/v1/jobs/" + id + "/migrate", Json{{"to", "node-b"}});
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(Job(h_.Admin(), id)["node"], "node-a");
  EXPECT_EQ(Job(h_.Admin(), id)["state"], "running");
}

TEST_F(MigrationTest, AFailureBeforeTheCommitKeepsTheJobOnItsSource) {
  const std::string id = RunningJob();
  api::Client admin = h_.Admin();
  ASSERT_TRUE(admin.Post("/v1/jobs/" + id + "/migrate", Json{{"to", "node-b"}}).ok());
  std::optional<Json> in = AwaitCommand(b_, "migrate_in", id);
  ASSERT_TRUE(in.has_value());
  ASSERT_TRUE(b_.Heartbeat().ok());  // listening now
  std::optional<Json> out = AwaitCommand(a_, "migrate_out", id);
  ASSERT_TRUE(out.has_value());
  a_.Answer(Json{{"command", (*out)["id"]}, {"ok", false}, {"error", "transfer refused"}});
  ASSERT_TRUE(a_.Heartbeat().ok());
  Json job = Job(admin, id);
  EXPECT_EQ(job["state"], "running");
  EXPECT_EQ(job["node"], "node-a");
  EXPECT_EQ(job["migrations"], 0);
  StatusOr<Json> late =
      h_.Agent().Post("/v1/migrations/" + (*out)["migration"].dump() + "/commit", Json::object());
  ASSERT_TRUE(late.ok());
  EXPECT_EQ((*late)["commit"], false);
  StatusOr<Json> summary = admin.Get("/v1/summary");
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ((*summary)["migrations_failed"], 1);
  // The destination is told to drop its copy.
  EXPECT_TRUE(AwaitCommand(b_, "kill", id).has_value());
}

TEST_F(MigrationTest, ARestartFailsAnUncommittedMigration) {
  const std::string id = RunningJob();
  ASSERT_TRUE(h_.Admin().Post("/v1/jobs/" + id + "/migrate", Json{{"to", "node-b"}}).ok());
  std::optional<Json> in = AwaitCommand(b_, "migrate_in", id);
  ASSERT_TRUE(in.has_value());
  h_.Restart();
  Json job = Job(h_.Admin(), id);
  EXPECT_EQ(job["state"], "running");
  EXPECT_EQ(job["node"], "node-a");
  StatusOr<Json> late =
      h_.Agent().Post("/v1/migrations/" + (*in)["migration"].dump() + "/commit", Json::object());
  ASSERT_TRUE(late.ok());
  EXPECT_EQ((*late)["commit"], false);
}

TEST_F(MigrationTest, DrainMovesJobsOff) {
  const std::string id = RunningJob();
  api::Client admin = h_.Admin();
  StatusOr<Json> drained = admin.Post("/v1/nodes/node-a/drain", Json::object());
  ASSERT_TRUE(drained.ok()) << drained.status().ToString();
  EXPECT_EQ((*drained)["state"], "draining");
  std::optional<Json> in = AwaitCommand(b_, "migrate_in", id);
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ(Job(admin, id)["state"], "migrating");
}

// A GPU its agent reports unhealthy (an NVML Xid or ECC event) loses its jobs to a healthy GPU
// and gets no new ones. The admin's fault injection reaches the agent with its kind.
TEST_F(MigrationTest, AnUnhealthyGpusJobsMoveOff) {
  const std::string id = RunningJob();
  api::Client admin = h_.Admin();
  StatusOr<Json> injected =
      admin.Post("/v1/nodes/node-a/gpus/0/fault", Json{{"kind", "ecc"}, {"code", 0}});
  ASSERT_TRUE(injected.ok()) << injected.status().ToString();
  std::optional<Json> fault = AwaitCommand(a_, "fault", "");
  ASSERT_TRUE(fault.has_value());
  EXPECT_EQ((*fault)["fault_kind"], "ecc");
  EXPECT_EQ((*fault)["gpu_index"], 0);
  EXPECT_FALSE(admin.Post("/v1/nodes/node-a/gpus/0/fault", Json{{"kind", "melted"}}).ok());

  a_.gpu_reports = Json::array(
      {{{"index", 0}, {"healthy", false}, {"fault", "ecc double-bit"}, {"used_bytes", 0}}});
  ASSERT_TRUE(a_.Heartbeat().ok());
  std::optional<Json> in = AwaitCommand(b_, "migrate_in", id);
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ(Job(admin, id)["state"], "migrating");
  StatusOr<Json> nodes = admin.Get("/v1/nodes");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  Json node_a;
  for (const Json& n : (*nodes)["nodes"]) {
    if (n["name"] == "node-a") node_a = n;
  }
  ASSERT_TRUE(node_a.is_object()) << nodes->dump();
  EXPECT_EQ(node_a["gpus"][0]["healthy"], false) << node_a.dump();
  EXPECT_EQ(node_a["gpus"][0]["fault"], "ecc double-bit") << node_a.dump();

  // A new job goes to the healthy GPU.
  StatusOr<Json> next =
      admin.Post("/v1/jobs", Json{{"command", {"w"}}, {"gpu_mem", "1GiB"}, {"team", "t"}});
  ASSERT_TRUE(next.ok());
  const std::string next_id = (*next)["id"];
  EXPECT_TRUE(AwaitCommand(b_, "start", next_id).has_value());
  for (const Json& c : a_.commands()) EXPECT_NE(c.value("job", ""), next_id) << c.dump();
}

class CheckpointTest : public MigrationTest {
 protected:
  static ServerOptions Options() {
    ServerOptions o;
    o.lease_s = 1;
    o.heartbeat_s = 0.2;
    o.checkpoint_every_s = 0.5;
    o.keep_checkpoints = 2;
    return o;
  }
  CheckpointTest() : MigrationTest(Options()) {}
};

TEST_F(CheckpointTest, PeriodicCheckpointsAndRecoveryFromADeadNode) {
  const std::string id = RunningJob();
  api::Client admin = h_.Admin();
  // Three periodic checkpoints, each answered with its directory.
  std::set<int64_t> answered;
  std::vector<std::string> dirs;
  ASSERT_TRUE(WaitFor([&] {
    EXPECT_TRUE(a_.Heartbeat().ok());
    EXPECT_TRUE(b_.Heartbeat().ok());
    for (const Json& c : a_.commands()) {
      if (c["kind"] != "checkpoint" || answered.count(c["id"].get<int64_t>())) continue;
      answered.insert(c["id"].get<int64_t>());
      EXPECT_EQ(c["mode"], "keep");
      const std::string dir = c["dir"];
      std::filesystem::create_directories(dir);
      dirs.push_back(dir);
      a_.Answer(Json{{"command", c["id"]},
                     {"ok", true},
                     {"detail", {{"path", dir}, {"bytes", 1000}, {"seconds", 0.1}}}});
    }
    return answered.size() >= 3 && Job(admin, id)["checkpoints"].get<int>() >= 3;
  }));
  Json job = Job(admin, id);
  ASSERT_FALSE(job["last_checkpoint"].is_null());
  EXPECT_EQ(job["last_checkpoint"]["path"], dirs[2]);
  EXPECT_NE(dirs[0].find(id + "/0001"), std::string::npos);
  // Only the newest two are kept.
  ASSERT_TRUE(WaitFor([&] { return !std::filesystem::exists(dirs[0]); }));
  EXPECT_TRUE(std::filesystem::exists(dirs[2]));

  // node-a dies; after another lease its job is restored on node-b from its last checkpoint.
  std::optional<Json> restore;
  ASSERT_TRUE(WaitFor([&] {
    EXPECT_TRUE(b_.Heartbeat().ok());
    for (const Json& c : b_.commands()) {
      if (c["kind"] == "restore" && c["job"] == id) restore = c;
    }
    return restore.has_value();
  }));
  const std::string last = Job(admin, id)["last_checkpoint"]["path"];
  EXPECT_EQ((*restore)["image"], last);
  EXPECT_EQ(Job(admin, id)["state"], "restoring");
  b_.Obey(*restore);
  ASSERT_TRUE(b_.Heartbeat().ok());
  job = Job(admin, id);
  EXPECT_EQ(job["state"], "running");
  EXPECT_EQ(job["node"], "node-b");
  EXPECT_EQ(job["recoveries"], 1);
  StatusOr<Json> summary = admin.Get("/v1/summary");
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ((*summary)["recoveries"], 1);
  EXPECT_EQ((*summary)["jobs_lost"], 0);
}

TEST_F(MigrationTest, CheckpointStopAndResume) {
  const std::string id = RunningJob();
  api::Client admin = h_.Admin();
  StatusOr<Json> asked = admin.Post("/v1/jobs/" + id + "/checkpoint", Json::object());
  ASSERT_TRUE(asked.ok()) << asked.status().ToString();
  EXPECT_EQ((*asked)["state"], "checkpointing");
  std::optional<Json> c = AwaitCommand(a_, "checkpoint", id);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ((*c)["mode"], "stop");
  a_.Answer(Json{{"command", (*c)["id"]}, {"ok", true}, {"detail", {{"path", (*c)["dir"]}}}});
  a_.jobs().erase(id);
  ASSERT_TRUE(a_.Heartbeat().ok());
  EXPECT_EQ(Job(admin, id)["state"], "checkpointed");
  EXPECT_TRUE(Job(admin, id)["node"].is_null());
  EXPECT_EQ(admin.Post("/v1/jobs/" + id + "/checkpoint", Json::object()).status().code(),
            StatusCode::kFailedPrecondition);
  StatusOr<Json> resumed = admin.Post("/v1/jobs/" + id + "/resume", Json::object());
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ((*resumed)["state"], "restoring");
  std::optional<Json> restore;
  ASSERT_TRUE(WaitFor([&] {
    for (FakeAgent* agent : {&a_, &b_}) {
      EXPECT_TRUE(agent->Heartbeat().ok());
      for (const Json& cmd : agent->commands()) {
        if (cmd["kind"] == "restore" && cmd["job"] == id) restore = cmd;
      }
    }
    return restore.has_value();
  }));
  EXPECT_EQ((*restore)["image"], (*c)["dir"]);
}

// The events of `kind` the server recorded for job `id`.
std::vector<Json> EventsOf(const api::Client& c, const std::string& id, const std::string& kind) {
  std::vector<Json> found;
  StatusOr<Json> events = c.Get("/v1/events?job=" + id);
  EXPECT_TRUE(events.ok()) << events.status().ToString();
  if (!events.ok()) return found;
  for (const Json& e : (*events)["events"]) {
    if (e["kind"] == kind) found.push_back(e);
  }
  return found;
}

// A stopping checkpoint that fails on the agent (here: listing the job's connections, before
// anything was dumped) leaves the job as it was before it: running on its node, the failure in
// its events; and it can be checkpointed again. So does a preemption's, and a periodic one's.
TEST_F(MigrationTest, AFailedCheckpointPutsTheJobBack) {
  const std::string id = RunningJob();
  api::Client admin = h_.Admin();
  const int64_t epoch = Job(admin, id)["epoch"];
  ASSERT_TRUE(admin.Post("/v1/jobs/" + id + "/checkpoint", Json::object()).ok());
  EXPECT_EQ(Job(admin, id)["state"], "checkpointing");
  std::optional<Json> c = AwaitCommand(a_, "checkpoint", id);
  ASSERT_TRUE(c.has_value());
  const std::string error =
      "listing the job's TCP connections: /proc/1000/net/tcp: Permission denied; the job keeps "
      "running";
  a_.Answer(Json{{"command", (*c)["id"]}, {"ok", false}, {"error", error}});
  ASSERT_TRUE(a_.Heartbeat().ok());
  Json job = Job(admin, id);
  EXPECT_EQ(job["state"], "running");
  EXPECT_EQ(job["node"], "node-a");
  EXPECT_EQ(job["epoch"], epoch);
  EXPECT_TRUE(job["last_checkpoint"].is_null());
  EXPECT_NE(job["reason"].get<std::string>().find("checkpoint failed"), std::string::npos)
      << job.dump();
  std::vector<Json> failed = EventsOf(admin, id, "checkpoint_failed");
  ASSERT_EQ(failed.size(), 1u);
  const std::string message = failed[0]["message"];
  EXPECT_NE(message.find("Permission denied"), std::string::npos) << message;
  EXPECT_NE(message.find("the job is running on node-a"), std::string::npos) << message;

  // Its heartbeats keep it running; a second checkpoint is taken, and this one succeeds.
  ASSERT_TRUE(a_.Heartbeat().ok());
  EXPECT_EQ(Job(admin, id)["state"], "running");
  a_.commands().clear();
  ASSERT_TRUE(admin.Post("/v1/jobs/" + id + "/checkpoint", Json::object()).ok());
  c = AwaitCommand(a_, "checkpoint", id);
  ASSERT_TRUE(c.has_value());
  a_.Answer(Json{{"command", (*c)["id"]}, {"ok", true}, {"detail", {{"path", (*c)["dir"]}}}});
  a_.jobs().erase(id);
  ASSERT_TRUE(a_.Heartbeat().ok());
  EXPECT_EQ(Job(admin, id)["state"], "checkpointed");
  EXPECT_EQ(EventsOf(admin, id, "checkpoint_failed").size(), 1u);
}

TEST_F(CheckpointTest, AFailedPeriodicCheckpointIsAnEventAndTheNextOneFollows) {
  const std::string id = RunningJob();
  api::Client admin = h_.Admin();
  std::optional<Json> first = AwaitCommand(a_, "checkpoint", id);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ((*first)["mode"], "keep");
  a_.Answer(Json{{"command", (*first)["id"]},
                 {"ok", false},
                 {"error", "closing the connection to 10.0.0.9:443: No such process"}});
  ASSERT_TRUE(a_.Heartbeat().ok());
  EXPECT_EQ(Job(admin, id)["state"], "running");
  ASSERT_EQ(EventsOf(admin, id, "checkpoint_failed").size(), 1u);
  // The failure does not hold the next period's checkpoint back.
  a_.commands().clear();
  std::optional<Json> next = AwaitCommand(a_, "checkpoint", id);
  ASSERT_TRUE(next.has_value());
  EXPECT_NE((*next)["id"], (*first)["id"]);
}

}  // namespace
}  // namespace paladin::server

namespace paladin::server {
namespace {

// The fleet's commit under a lost source: the destination's abort and the source's commit meet
// under one lock, whichever comes first decides, and both hear that one answer, again and again.
TEST_F(MigrationTest, AbortAndCommitAgreeWhicheverComesFirst) {
  api::Client admin = h_.Admin();
  api::Client agent = h_.Agent();
  const std::string id = RunningJob();
  // Abort first: the move fails, the job stays on its source, a later commit hears "no".
  ASSERT_TRUE(admin.Post("/v1/jobs/" + id + "/migrate", Json{{"to", "node-b"}}).ok());
  ASSERT_TRUE(AwaitCommand(b_, "migrate_in", id).has_value());
  ASSERT_TRUE(b_.Heartbeat().ok());
  std::optional<Json> out = AwaitCommand(a_, "migrate_out", id);
  ASSERT_TRUE(out.has_value());
  const std::string first = "/v1/migrations/" + (*out)["migration"].dump();
  StatusOr<Json> aborted = agent.Post(first + "/abort", Json::object());
  ASSERT_TRUE(aborted.ok()) << aborted.status().ToString();
  EXPECT_EQ((*aborted)["commit"], false);
  StatusOr<Json> late = agent.Post(first + "/commit", Json::object());
  ASSERT_TRUE(late.ok());
  EXPECT_EQ((*late)["commit"], false);
  StatusOr<Json> again = agent.Post(first + "/abort", Json::object());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)["commit"], false);
  Json j = Job(admin, id);
  EXPECT_EQ(j["node"], "node-a");
  EXPECT_NE(j["state"], "migrating");

  // Commit first: an abort that comes after it hears "committed", and the job has moved.
  b_.commands().clear();
  a_.commands().clear();
  ASSERT_TRUE(WaitFor([&] { return Job(admin, id)["state"] == "running"; }));
  ASSERT_TRUE(admin.Post("/v1/jobs/" + id + "/migrate", Json{{"to", "node-b"}}).ok());
  ASSERT_TRUE(AwaitCommand(b_, "migrate_in", id).has_value());
  ASSERT_TRUE(b_.Heartbeat().ok());
  out = AwaitCommand(a_, "migrate_out", id);
  ASSERT_TRUE(out.has_value());
  const std::string second = "/v1/migrations/" + (*out)["migration"].dump();
  ASSERT_NE(second, first);
  StatusOr<Json> committed = agent.Post(second + "/commit", Json::object());
  ASSERT_TRUE(committed.ok());
  EXPECT_EQ((*committed)["commit"], true);
  StatusOr<Json> too_late = agent.Post(second + "/abort", Json::object());
  ASSERT_TRUE(too_late.ok());
  EXPECT_EQ((*too_late)["commit"], true);
  EXPECT_EQ(Job(admin, id)["node"], "node-b");
  EXPECT_EQ(agent.Post("/v1/migrations/999999/abort", Json::object()).status().code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace paladin::server
