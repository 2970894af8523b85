// The control plane's decisions in time, with the clock injected (ControlOptions::clock): no
// HTTP, no sleeps. A node silent for longer than the lease is dead; its jobs are placed elsewhere
// only one more lease later (by then the node's own fence has stopped them), never sooner.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "control_fixture.h"

namespace paladin::server {
namespace {

using testing::kGiB;

class LeaseTest : public testing::ControlTest {
 protected:
  void SetUp() override {
    ControlOptions options;
    options.lease_s = 6;
    options.heartbeat_s = 1;
    ASSERT_NO_FATAL_FAILURE(Open("lease", options));
  }

  // A heartbeat of `node` that runs every start it is given and reports its jobs running.
  void Beat(const std::string& node) {
    Json results = Json::array();
    for (const Json& c : pending_[node]) results.push_back(Done(c));
    pending_[node] = Json::array();
    Json jobs = Json::array();
    for (const auto& [id, epoch] : running_[node]) {
      jobs.push_back(CopyReport(id, epoch, "running", 0, 8 * kGiB));
    }
    StatusOr<Json> r = control_->Heartbeat(
        admin_, node, Json{{"gpus", Json::array()}, {"jobs", jobs}, {"results", results}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (const Json& c : (*r)["commands"]) {
      if (c["kind"] != "start") continue;
      pending_[node].push_back(c);
      running_[node][c["job"].get<std::string>()] = c["epoch"].get<int64_t>();
    }
  }

  Json Job(const std::string& id) {
    StatusOr<Json> j = control_->GetJob(admin_, id);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? *j : Json::object();
  }

  std::string NodeState(const std::string& name) {
    StatusOr<Json> nodes = control_->Nodes(admin_);
    EXPECT_TRUE(nodes.ok());
    for (const Json& n : (*nodes)["nodes"]) {
      if (n["name"] == name) return n["state"].get<std::string>();
    }
    return "?";
  }

  std::map<std::string, Json> pending_;
  std::map<std::string, std::map<std::string, int64_t>> running_;
};

TEST_F(LeaseTest, ASilentNodesJobMovesOnlyOneLeaseAfterTheNodeIsDeclaredDead) {
  Register("node-a");
  StatusOr<Json> submitted =
      control_->Submit(admin_, Json{{"name", "train"}, {"command", {"w"}}, {"gpu_mem", "8GiB"}});
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  const std::string id = (*submitted)["id"];
  control_->Tick();
  Beat("node-a");  // takes the start
  Beat("node-a");  // answers it, reports the job running
  ASSERT_EQ(Job(id)["state"], "running");
  ASSERT_EQ(Job(id)["node"], "node-a");
  Register("node-b");
  const double last_beat_a = now_;

  // node-a goes silent; node-b keeps beating every second.
  auto advance_to = [&](double t) {
    while (now_ + 1 <= t) {
      now_ += 1;
      Beat("node-b");
      control_->Tick();
    }
    now_ = t;
    Beat("node-b");
    control_->Tick();
  };
  advance_to(last_beat_a + 6);  // exactly one lease: not dead yet
  EXPECT_EQ(NodeState("node-a"), "alive");
  EXPECT_EQ(Job(id)["node"], "node-a");

  advance_to(last_beat_a + 6.5);  // past the lease: dead, but its job is left where it is
  EXPECT_EQ(NodeState("node-a"), "dead");
  EXPECT_EQ(Job(id)["node"], "node-a") << "the node's fence may not have stopped it yet";
  EXPECT_EQ(Job(id)["state"], "running");

  advance_to(last_beat_a + 12.4);  // 5.9 s after it was declared dead: still not moved
  EXPECT_EQ(Job(id)["node"], "node-a");

  advance_to(last_beat_a + 12.6);  // a whole lease after: placed again, on node-b
  EXPECT_EQ(Job(id)["node"], "node-b");
  EXPECT_EQ(Job(id)["state"], "starting");
  Beat("node-b");
  Beat("node-b");
  EXPECT_EQ(Job(id)["state"], "running");
  EXPECT_EQ(Job(id)["restarts"], 1) << "no checkpoint: it started over, and says so";
}

TEST_F(LeaseTest, ANodeThatBeatsWithinTheLeaseStaysAlive) {
  Register("node-a");
  for (int i = 0; i < 100; ++i) {
    now_ += 5.9;  // just inside the lease, 100 times
    Beat("node-a");
    control_->Tick();
    ASSERT_EQ(NodeState("node-a"), "alive") << "after beat " << i;
  }
}

}  // namespace
}  // namespace paladin::server
