// Scheduling with fake agents over loopback: jobs go where the core packer puts them, with the
// quotas asked for; reports drive states, usage, logs and accounting; stale copies are killed;
// team quotas hold jobs back; a dead node's jobs start over elsewhere.
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

std::string Submit(api::Client& c, int64_t bytes, const std::string& team = "ml",
                   int priority = 0) {
  StatusOr<Json> j = c.Post("/v1/jobs", Json{{"command", {"python3", "train.py"}},
                                             {"team", team},
                                             {"gpu_mem", bytes},
                                             {"priority", priority}});
  EXPECT_TRUE(j.ok()) << j.status().ToString();
  return j.ok() ? (*j)["id"].get<std::string>() : "";
}

TEST(SchedulingTest, StartsGoWhereThePackerSaysWithTheQuotasAsked) {
  testing::ServerHarness h("sched");
  api::Client admin = h.Admin();
  FakeAgent a(h, "node-a", 1, 16 * kGiB);
  FakeAgent b(h, "node-b", 1, 16 * kGiB);
  ASSERT_TRUE(a.Register().ok());
  ASSERT_TRUE(b.Register().ok());

  const std::string j1 = Submit(admin, 10 * kGiB);
  ASSERT_TRUE(WaitFor([&] { return Job(admin, j1)["state"] == "starting"; }));
  const std::string j2 = Submit(admin, 10 * kGiB);
  ASSERT_TRUE(WaitFor([&] { return Job(admin, j2)["state"] == "starting"; }));
  // Two 10 GiB jobs cannot share a 16 GiB GPU.
  EXPECT_NE(Job(admin, j1)["node"], Job(admin, j2)["node"]);
  const std::string j3 = Submit(admin, 6 * kGiB);
  ASSERT_TRUE(WaitFor([&] { return Job(admin, j3)["state"] == "starting"; }));
  const std::string j4 = Submit(admin, 7 * kGiB);
  ASSERT_TRUE(WaitFor([&] {
    return !Job(admin, j4)["reason"].get<std::string>().empty() &&
           Job(admin, j4)["reason"] != "waiting for the scheduler";
  }));
  Json pending = Job(admin, j4);
  EXPECT_EQ(pending["state"], "pending");
  EXPECT_NE(pending["reason"].get<std::string>().find("no node fits"), std::string::npos)
      << pending["reason"];
  StatusOr<Json> explain = admin.Get("/v1/jobs/" + j4 + "/explain");
  ASSERT_TRUE(explain.ok());
  EXPECT_EQ((*explain)["state"], "pending");
  EXPECT_FALSE((*explain)["migratable"].get<bool>());

  // Every start command went to the node the job's record names, with the quota asked for.
  std::map<std::string, int64_t> per_gpu;
  for (const std::string& id : {j1, j2, j3}) {
    Json job = Job(admin, id);
    FakeAgent& agent = job["node"] == "node-a" ? a : b;
    std::optional<Json> start = AwaitCommand(agent, "start", id);
    ASSERT_TRUE(start.has_value()) << id;
    EXPECT_EQ((*start)["gpu_index"], job["gpu"]);
    EXPECT_EQ((*start)["quota_bytes"], job["quota_bytes"]);
    EXPECT_EQ((*start)["epoch"], job["epoch"]);
    EXPECT_EQ((*start)["command"], Json({"python3", "train.py"}));
    // A fixed size is a hard limit: the quota does not grow past what was asked.
    EXPECT_EQ((*start)["ceiling_bytes"], job["quota_bytes"]);
    per_gpu[job["node"].get<std::string>()] += job["quota_bytes"].get<int64_t>();
  }
  EXPECT_EQ(Job(admin, j1)["quota_bytes"], 10 * kGiB);
  EXPECT_EQ(Job(admin, j3)["quota_bytes"], 6 * kGiB);
  for (const auto& [node, bytes] : per_gpu) EXPECT_LE(bytes, 16 * kGiB) << node;

  // The agents start them; reports make them running.
  for (FakeAgent* agent : {&a, &b}) {
    for (const Json& c : agent->commands()) agent->Obey(c);
    agent->commands().clear();
    ASSERT_TRUE(agent->Heartbeat().ok());
  }
  EXPECT_EQ(Job(admin, j1)["state"], "running");
  EXPECT_FALSE(Job(admin, j1)["started_at"].is_null());

  // Usage, logs (a MISMATCH line counts as a failed state verification), then an exit.
  FakeAgent& owner = Job(admin, j1)["node"] == "node-a" ? a : b;
  owner.jobs()[j1].used_bytes = 3 * kGiB;
  owner.jobs()[j1].stdout_text = "step 1\nMISMATCH at step 2\n";
  ASSERT_TRUE(owner.Heartbeat().ok());
  EXPECT_EQ(Job(admin, j1)["used_bytes"], 3 * kGiB);
  StatusOr<Json> logs = admin.Get("/v1/jobs/" + j1 + "/logs?tail=1");
  ASSERT_TRUE(logs.ok());
  EXPECT_EQ((*logs)["text"], "MISMATCH at step 2\n");
  StatusOr<Json> usage = admin.Get("/v1/jobs/" + j1 + "/usage");
  ASSERT_TRUE(usage.ok());
  ASSERT_FALSE((*usage)["samples"].empty());
  EXPECT_EQ((*usage)["samples"].back()["quota_bytes"], 10 * kGiB);  // one sample per 2 s
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  owner.jobs()[j1].state = "exited";
  owner.jobs()[j1].exit_code = 0;
  ASSERT_TRUE(owner.Heartbeat().ok());
  Json done = Job(admin, j1);
  EXPECT_EQ(done["state"], "succeeded");
  EXPECT_EQ(done["exit_code"], 0);
  EXPECT_FALSE(done["ended_at"].is_null());
  // The 7 GiB job now fits where j1 was.
  ASSERT_TRUE(WaitFor([&] { return Job(admin, j4)["state"] == "starting"; }));

  StatusOr<Json> summary = admin.Get("/v1/summary");
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ((*summary)["state_verifications_failed"], 1);
  EXPECT_EQ((*summary)["jobs_lost"], 0);
  EXPECT_EQ((*summary)["nodes_alive"], 2);
  StatusOr<Json> teams = admin.Get("/v1/teams");
  ASSERT_TRUE(teams.ok());
  bool seen = false;
  for (const Json& t : (*teams)["teams"]) {
    if (t["name"] != "ml") continue;
    seen = true;
    const double gpu_hours = t["usage"]["gpu_hours"];
    EXPECT_GT(gpu_hours, 0);
    EXPECT_GT(t["usage"]["gpu_mem_hours_allocated"].get<double>(),
              t["usage"]["gpu_mem_hours_used"].get<double>());
    EXPECT_EQ(t["usage"]["jobs"], 4);
    // j1 alone ran start..end; all jobs together cannot have used more GPU time than wall time
    // since the first start, times the jobs that held a GPU.
    const double span = done["ended_at"].get<double>() - done["submitted_at"].get<double>();
    EXPECT_LE(gpu_hours * 3600, 4 * (span + 5));
  }
  EXPECT_TRUE(seen);
  StatusOr<std::string> metrics = admin.GetText("/metrics");
  ASSERT_TRUE(metrics.ok());
  for (const char* series :
       {"paladin_jobs{state=\"running\"}",
        "paladin_gpu_memory_bytes{node=\"node-a\",gpu=\"0\",kind=\"total\"}",
        "paladin_job_gpu_memory_bytes{job=", "paladin_migrations_total", "paladin_recoveries_total",
        "paladin_schedule_decision_seconds_count", "paladin_api_request_seconds{quantile="}) {
    EXPECT_NE(metrics->find(series), std::string::npos) << series;
  }
}

// Higher-priority work that cannot fit preempts lower-priority work: the lower job is
// checkpointed and stopped, the higher one starts in its room, and the lower one is restored from
// its checkpoint when room returns. Equal priority never preempts.
TEST(SchedulingTest, HigherPriorityPreemptsByCheckpointAndTheVictimResumes) {
  testing::ServerHarness h("preempt");
  api::Client admin = h.Admin();
  FakeAgent a(h, "node-a", 1, 16 * kGiB, 7100);
  ASSERT_TRUE(a.Register().ok());
  auto obey_all = [&] {
    for (const Json& c : a.commands()) {
      if (c["kind"] == "start" || c["kind"] == "restore") a.Obey(c);
    }
    a.commands().clear();
    ASSERT_TRUE(a.Heartbeat().ok());
  };
  const std::string low = Submit(admin, 10 * kGiB, "ml", 0);
  ASSERT_TRUE(AwaitCommand(a, "start", low).has_value());
  obey_all();
  ASSERT_EQ(Job(admin, low)["state"], "running");

  // The same priority waits.
  const std::string same = Submit(admin, 10 * kGiB, "ml", 0);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(a.Heartbeat().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (const Json& c : a.commands()) EXPECT_NE(c["kind"], "checkpoint") << c.dump();
  EXPECT_EQ(Job(admin, same)["state"], "pending");
  ASSERT_TRUE(admin.Post("/v1/jobs/" + same + "/cancel", Json::object()).ok());

  // A higher priority preempts: the low job gets a stopping checkpoint.
  const std::string high = Submit(admin, 10 * kGiB, "ml", 5);
  std::optional<Json> ckpt = AwaitCommand(a, "checkpoint", low);
  ASSERT_TRUE(ckpt.has_value());
  EXPECT_EQ((*ckpt)["mode"], "stop");
  Json victim = Job(admin, low);
  EXPECT_EQ(victim["state"], "checkpointing");
  EXPECT_NE(victim["reason"].get<std::string>().find("preempted by " + high), std::string::npos)
      << victim["reason"];
  EXPECT_EQ(Job(admin, high)["state"], "pending");  // no room until the low job has stopped
  const std::string dir = (*ckpt)["dir"];
  a.Answer(Json{{"command", (*ckpt)["id"]}, {"ok", true}, {"detail", {{"path", dir}}}});
  a.jobs().erase(low);
  a.commands().clear();
  ASSERT_TRUE(a.Heartbeat().ok());

  // The high job starts in its room; the low one waits to be restored.
  ASSERT_TRUE(AwaitCommand(a, "start", high).has_value());
  victim = Job(admin, low);
  EXPECT_EQ(victim["state"], "restoring");
  EXPECT_TRUE(victim["node"].is_null());
  EXPECT_EQ(victim["last_checkpoint"]["path"], dir);
  obey_all();
  EXPECT_EQ(Job(admin, high)["state"], "running");

  // Room returns: the low job is restored from its checkpoint.
  a.jobs()[high].state = "exited";
  a.jobs()[high].exit_code = 0;
  ASSERT_TRUE(a.Heartbeat().ok());
  std::optional<Json> restore = AwaitCommand(a, "restore", low);
  ASSERT_TRUE(restore.has_value());
  EXPECT_EQ((*restore)["image"], dir);
  obey_all();
  victim = Job(admin, low);
  EXPECT_EQ(victim["state"], "running");
  EXPECT_EQ(victim["restarts"], 0);  // resumed, not started over
  StatusOr<Json> events = admin.Get("/v1/events?job=" + low);
  ASSERT_TRUE(events.ok());
  std::string kinds;
  for (const Json& e : (*events)["events"]) kinds += e["kind"].get<std::string>() + " ";
  EXPECT_NE(kinds.find("preempted"), std::string::npos) << kinds;
  EXPECT_NE(kinds.find("resumed"), std::string::npos) << kinds;
}

TEST(SchedulingTest, StaleReportsGetAKill) {
  testing::ServerHarness h("stale");
  api::Client admin = h.Admin();
  FakeAgent a(h, "node-a", 1, 16 * kGiB);
  FakeAgent b(h, "node-b", 1, 16 * kGiB);
  ASSERT_TRUE(a.Register().ok());
  const std::string id = Submit(admin, 2 * kGiB);
  std::optional<Json> start = AwaitCommand(a, "start", id);
  ASSERT_TRUE(start.has_value());
  a.Obey(*start);
  ASSERT_TRUE(a.Heartbeat().ok());
  const int64_t epoch = Job(admin, id)["epoch"];
  // An older epoch of the same job on its own node.
  FakeAgent::Job old = a.jobs()[id];
  a.jobs()[id].epoch = epoch - 1;
  std::optional<Json> kill = AwaitCommand(a, "kill", id);
  ASSERT_TRUE(kill.has_value());
  EXPECT_EQ((*kill)["epoch"], epoch - 1);
  a.jobs()[id] = old;
  // Another node reporting the job, and a job nobody knows.
  ASSERT_TRUE(b.Register().ok());
  b.jobs()[id] = old;
  b.jobs()["j-000777"] = FakeAgent::Job{"j-000777", 1};
  EXPECT_TRUE(AwaitCommand(b, "kill", id).has_value());
  EXPECT_TRUE(AwaitCommand(b, "kill", "j-000777").has_value());
  // The rightful copy is left alone.
  EXPECT_EQ(Job(admin, id)["state"], "running");
  EXPECT_EQ(Job(admin, id)["node"], "node-a");
}

TEST(SchedulingTest, TeamQuotasHoldJobsBack) {
  testing::ServerHarness h("quota");
  api::Client admin = h.Admin();
  ASSERT_TRUE(admin.Put("/v1/teams/small", Json{{"max_gpus", 1}, {"max_gpu_mem", "4GiB"}}).ok());
  FakeAgent a(h, "node-a", 2, 16 * kGiB);
  ASSERT_TRUE(a.Register().ok());
  const std::string first = Submit(admin, 3 * kGiB, "small");
  ASSERT_TRUE(WaitFor([&] { return Job(admin, first)["state"] == "starting"; }));
  const std::string second = Submit(admin, 3 * kGiB, "small");
  ASSERT_TRUE(WaitFor([&] {
    return Job(admin, second)["reason"].get<std::string>().find("team small quota") !=
           std::string::npos;
  }));
  EXPECT_EQ(Job(admin, second)["state"], "pending");
  StatusOr<Json> cancelled = admin.Post("/v1/jobs/" + first + "/cancel", Json::object());
  ASSERT_TRUE(cancelled.ok());
  // The agent kills it; the server then marks it cancelled and the next job goes.
  std::optional<Json> kill = AwaitCommand(a, "kill", first);
  ASSERT_TRUE(kill.has_value());
  a.Obey(*kill);
  ASSERT_TRUE(a.Heartbeat().ok());
  EXPECT_EQ(Job(admin, first)["state"], "cancelled");
  ASSERT_TRUE(WaitFor([&] { return Job(admin, second)["state"] == "starting"; }));
}

TEST(SchedulingTest, AutoJobsAreSizedFromTheirClassHistory) {
  testing::ServerHarness h("auto");
  api::Client admin = h.Admin();
  FakeAgent a(h, "node-a", 1, 40 * kGiB);
  ASSERT_TRUE(a.Register().ok());
  StatusOr<Json> first = admin.Post(
      "/v1/jobs",
      Json{{"command", {"/usr/bin/python3", "a.py"}}, {"team", "t"}, {"gpu_mem", "auto"}});
  ASSERT_TRUE(first.ok());
  const std::string id = (*first)["id"];
  EXPECT_EQ((*first)["quota_bytes"], 4 * kGiB);
  EXPECT_EQ((*first)["gpu_mem_request"], "auto");
  std::optional<Json> start = AwaitCommand(a, "start", id);
  ASSERT_TRUE(start.has_value());
  a.Obey(*start);
  a.jobs()[id].used_bytes = 5 * kGiB;
  a.jobs()[id].quota_bytes = 6 * kGiB;
  a.jobs()[id].quota_grows = 1;
  ASSERT_TRUE(a.Heartbeat().ok());
  Json running = Job(admin, id);
  EXPECT_EQ(running["quota_grows"], 1);
  EXPECT_GT(running["predicted_bytes"].get<int64_t>(), 0);
  a.jobs()[id].state = "exited";
  a.jobs()[id].exit_code = 0;
  ASSERT_TRUE(a.Heartbeat().ok());
  StatusOr<Json> second = admin.Post(
      "/v1/jobs", Json{{"command", {"python3", "b.py"}}, {"team", "t"}, {"gpu_mem", "auto"}});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)["quota_bytes"], static_cast<int64_t>(5 * kGiB * 1.2));
  StatusOr<Json> events = admin.Get("/v1/events?job=" + id);
  ASSERT_TRUE(events.ok());
  std::set<std::string> kinds;
  for (const Json& e : (*events)["events"]) kinds.insert(e["kind"]);
  for (const char* k : {"submitted", "placed", "predicted", "started", "quota_grown", "ended"}) {
    EXPECT_TRUE(kinds.count(k)) << k;
  }
}

// The core's preemption planner decides (the simulator's too): it takes victims in the server's
// order (the most recently started first) until the job fits, then leaves in place those the job
// turns out not to need. Here the newest 4 GiB job alone frees too little; with the 8 GiB one the
// high job fits, and then the 4 GiB one is not needed after all: only the 8 GiB job is stopped.
TEST(SchedulingTest, PreemptionStopsOnlyTheJobsTheCorePlannerNeeds) {
  testing::ServerHarness h("preempt-least");
  api::Client admin = h.Admin();
  FakeAgent a(h, "node-a", 1, 16 * kGiB, 7100);
  ASSERT_TRUE(a.Register().ok());
  auto start = [&](int64_t bytes) {
    const std::string id = Submit(admin, bytes, "ml", 0);
    std::optional<Json> c = AwaitCommand(a, "start", id);
    EXPECT_TRUE(c.has_value());
    if (c) a.Obey(*c);
    a.commands().clear();
    EXPECT_TRUE(a.Heartbeat().ok());
    EXPECT_TRUE(WaitFor([&] { return Job(admin, id)["state"] == "running"; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // distinct start times
    return id;
  };
  const std::string oldest = start(4 * kGiB);
  const std::string big = start(8 * kGiB);
  const std::string newest = start(4 * kGiB);  // the GPU is full: 16 of 16 GiB

  const std::string high = Submit(admin, 8 * kGiB, "ml", 5);
  ASSERT_TRUE(AwaitCommand(a, "checkpoint", big).has_value());
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(a.Heartbeat().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (const Json& c : a.commands()) {
    if (c["kind"] == "checkpoint") {
      EXPECT_EQ(c["job"], big) << c.dump();
    }
  }
  EXPECT_EQ(Job(admin, newest)["state"], "running");
  EXPECT_EQ(Job(admin, oldest)["state"], "running");
  EXPECT_EQ(Job(admin, big)["state"], "checkpointing");
  EXPECT_EQ(Job(admin, high)["state"], "pending") << "room comes once the 8 GiB job has stopped";
}

TEST(SchedulingTest, DeadNodesJobsStartOverElsewhere) {
  ServerOptions options;
  options.lease_s = 1;
  options.heartbeat_s = 0.2;
  testing::ServerHarness h("dead", options);
  api::Client admin = h.Admin();
  FakeAgent a(h, "node-a", 1, 16 * kGiB);
  ASSERT_TRUE(a.Register().ok());
  const std::string id = Submit(admin, 2 * kGiB);
  std::optional<Json> start = AwaitCommand(a, "start", id);
  ASSERT_TRUE(start.has_value());
  a.Obey(*start);
  ASSERT_TRUE(a.Heartbeat().ok());
  FakeAgent b(h, "node-b", 1, 16 * kGiB);
  ASSERT_TRUE(b.Register().ok());
  // node-a goes silent; node-b keeps heartbeating.
  std::optional<Json> restart;
  ASSERT_TRUE(WaitFor([&] {
    EXPECT_TRUE(b.Heartbeat().ok());
    for (const Json& c : b.commands()) {
      if (c["kind"] == "start" && c["job"] == id) restart = c;
    }
    return restart.has_value();
  }));
  Json job = Job(admin, id);
  EXPECT_EQ(job["node"], "node-b");
  EXPECT_EQ(job["restarts"], 1);
  EXPECT_GT((*restart)["epoch"].get<int64_t>(), (*start)["epoch"].get<int64_t>());
  StatusOr<Json> nodes = admin.Get("/v1/nodes");
  ASSERT_TRUE(nodes.ok());
  for (const Json& n : (*nodes)["nodes"]) {
    if (n["name"] == "node-a") {
      EXPECT_EQ(n["state"], "dead");
    }
  }
  // node-a comes back still running its old copy: it is told to kill it.
  EXPECT_TRUE(AwaitCommand(a, "kill", id).has_value());
  StatusOr<Json> summary = admin.Get("/v1/summary");
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ((*summary)["jobs_lost"], 0);
}

}  // namespace
}  // namespace paladin::server

namespace paladin::server {
namespace {

// A restore that fails is never a resume and never a silent start from zero: by default the job
// stays checkpointed with the reason (and `resume` may try again); with on_restore_failure
// "restart" it starts over, as an event of its own.
TEST(SchedulingTest, AFailedRestoreIsReportedAndFollowsTheJobsPolicy) {
  testing::ServerHarness h("restore-failed");
  api::Client admin = h.Admin();
  FakeAgent a(h, "node-a", 1, 16 * kGiB, 7110);
  ASSERT_TRUE(a.Register().ok());
  EXPECT_FALSE(admin
                   .Post("/v1/jobs", Json{{"command", {"x"}},
                                          {"team", "ml"},
                                          {"gpu_mem", kGiB},
                                          {"on_restore_failure", "retry"}})
                   .ok());
  for (const std::string policy : {"stop", "restart"}) {
    SCOPED_TRACE(policy);
    StatusOr<Json> submitted = admin.Post("/v1/jobs", Json{{"command", {"python3", "train.py"}},
                                                           {"team", "ml"},
                                                           {"gpu_mem", 2 * kGiB},
                                                           {"on_restore_failure", policy}});
    ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
    const std::string id = (*submitted)["id"];
    EXPECT_EQ((*submitted)["on_restore_failure"], policy);
    std::optional<Json> start = AwaitCommand(a, "start", id);
    ASSERT_TRUE(start.has_value());
    a.Obey(*start);
    a.commands().clear();
    ASSERT_TRUE(a.Heartbeat().ok());
    ASSERT_EQ(Job(admin, id)["state"], "running");
    ASSERT_TRUE(admin.Post("/v1/jobs/" + id + "/checkpoint", Json::object()).ok());
    std::optional<Json> ckpt = AwaitCommand(a, "checkpoint", id);
    ASSERT_TRUE(ckpt.has_value());
    a.Answer(
        Json{{"command", (*ckpt)["id"]}, {"ok", true}, {"detail", {{"path", (*ckpt)["dir"]}}}});
    a.jobs().erase(id);
    ASSERT_TRUE(a.Heartbeat().ok());
    ASSERT_TRUE(WaitFor([&] { return Job(admin, id)["state"] == "checkpointed"; }));
    ASSERT_TRUE(admin.Post("/v1/jobs/" + id + "/resume", Json::object()).ok());
    std::optional<Json> restore = AwaitCommand(a, "restore", id);
    ASSERT_TRUE(restore.has_value());
    a.Answer(Json{{"command", (*restore)["id"]},
                  {"ok", false},
                  {"error", "CRIU: restore failed: injected"},
                  {"detail", Json::object()}});
    a.commands().clear();
    ASSERT_TRUE(a.Heartbeat().ok());
    const std::string expected = policy == "stop" ? "checkpointed" : "pending";
    ASSERT_TRUE(WaitFor([&] {
      const std::string state = Job(admin, id)["state"];
      return state == expected || state == "starting" || state == "running";
    }));
    Json j = Job(admin, id);
    const std::string reason = j["reason"];
    StatusOr<Json> events = admin.Get("/v1/events?job=" + id);
    ASSERT_TRUE(events.ok());
    std::string kinds;
    for (const Json& e : (*events)["events"]) kinds += e["kind"].get<std::string>() + " ";
    EXPECT_NE(kinds.find("restore_failed"), std::string::npos) << kinds;
    EXPECT_EQ(kinds.find("resumed"), std::string::npos) << kinds;
    if (policy == "stop") {
      EXPECT_EQ(j["state"], "checkpointed");
      EXPECT_EQ(j["restarts"], 0);
      EXPECT_NE(reason.find("injected"), std::string::npos) << reason;
      EXPECT_EQ(kinds.find("started_over"), std::string::npos) << kinds;
      // Nothing starts it behind the user's back.
      for (int i = 0; i < 5; ++i) ASSERT_TRUE(a.Heartbeat().ok());
      for (const Json& c : a.commands()) {
        EXPECT_FALSE(c["kind"] == "start" && c["job"] == id) << c.dump();
      }
    } else {
      EXPECT_EQ(j["restarts"], 1);
      EXPECT_NE(kinds.find("started_over"), std::string::npos) << kinds;
      ASSERT_TRUE(AwaitCommand(a, "start", id).has_value());
    }
    ASSERT_TRUE(admin.Post("/v1/jobs/" + id + "/cancel", Json::object()).ok());
    for (const Json& c : a.commands()) {
      if (c["kind"] == "kill" || c["kind"] == "start") a.Obey(c);
    }
    a.commands().clear();
    a.jobs().clear();
    ASSERT_TRUE(a.Heartbeat().ok());
  }
}

}  // namespace
}  // namespace paladin::server
