// The migration orchestrator (src/server/orchestrator.h) alone, over the control plane's tables
// and a fake host whose clock the test sets: a move's steps in order (the destination reserved
// and told to listen, the source told to send, the commit decided once, the move done), an
// abort that comes first deciding the move for both sides, the timeout, and refusals that change
// nothing. No store, no agents: the commands are what the fake was asked to send.
#include "server/orchestrator.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fake_host.h"
#include "paladin/server/placement.h"

namespace paladin::server {
namespace {

NodeRecord MoveNode(const std::string& name) {
  NodeRecord n;
  n.name = name;
  n.migrate_port = 7000;
  n.address = name == "node-a" ? "192.0.2.1" : "192.0.2.2";
  n.gpus.push_back(
      GpuRecord{.index = 0, .uuid = "GPU-" + name, .model = "EMU", .memory_bytes = 80 * kGiB});
  return n;
}

// j-000001: 10 GiB on node-a/0, epoch 3.
JobRecord Running() {
  JobRecord j;
  j.seq = 1;
  j.id = "j-000001";
  j.team = "research";
  j.gpus = 1;
  j.quota_bytes = 10 * kGiB;
  j.node = "node-a";
  j.gpu = 0;
  j.gpu_indices = {0};
  j.gpu_uuid = "GPU-node-a";
  j.epoch = 3;
  j.started_at = 0.0;
  j.LoadState(JobState::kRunning);
  return j;
}

class OrchestratorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<core::Policy> policy = MakeServerPolicy("paladin");
    ASSERT_TRUE(policy.ok()) << policy.status().ToString();
    scheduler_ = std::make_unique<Scheduler>(std::move(*policy));
    nodes_.Load({MoveNode("node-a"), MoveNode("node-b")});
    jobs_.Load({Running()});
    host_.fleet = [this](bool reserve_running) {
      return BuildFleet(nodes_, jobs_, migrations_, reserve_running);
    };
    moves_ = std::make_unique<MigrationOrchestrator>(
        host_, jobs_, nodes_, migrations_, commands_, *scheduler_,
        MoveSettings{.move_mode = "auto", .migration_timeout_s = 300});
  }

  JobRecord& Job() { return *jobs_.BySeq(1); }
  MigrationRecord& Row() { return *migrations_.Find(1); }

  // Starts the move to node-b and lets the destination say it listens: the source has been
  // told to send.
  void StartedAndSending() {
    ASSERT_TRUE(moves_->Start(Job(), "node-b", -1, "asked", nullptr).ok());
    moves_->Advance(Row(), MigrationEvent{MigrationEvent::Kind::kListening, ""});
    ASSERT_EQ(Row().step, MigrationStep::kTransfer);
    host_.TakeSent();
  }

  FakeHost host_;
  JobTable jobs_;
  NodeTable nodes_{6};
  MigrationTable migrations_;
  CommandQueue commands_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<MigrationOrchestrator> moves_;
};

TEST_F(OrchestratorTest, AMoveGoesThroughItsStepsInOrder) {
  ASSERT_TRUE(moves_->Start(Job(), "node-b", -1, "asked", nullptr).ok());
  // Reserved, then at once the destination told to listen, with the job's next epoch.
  EXPECT_EQ(Row().step, MigrationStep::kMigrateInSent);
  EXPECT_EQ(Row().to_gpu, 0);
  EXPECT_EQ(Row().to_uuid, "GPU-node-b");
  EXPECT_EQ(Job().state(), JobState::kMigrating);
  EXPECT_EQ(host_.TakeSent(), (std::vector<std::string>{"node-b migrate_in"}));
  EXPECT_EQ(host_.taken[0].command.epoch, 4);
  EXPECT_EQ(host_.taken[0].command.quota_bytes, 10 * kGiB);

  moves_->Advance(Row(), MigrationEvent{MigrationEvent::Kind::kListening, ""});
  EXPECT_EQ(Row().step, MigrationStep::kTransfer);
  EXPECT_EQ(host_.TakeSent(), (std::vector<std::string>{"node-a migrate_out"}));
  EXPECT_EQ(host_.taken[1].command.to_address, "192.0.2.2");

  // The source asks: committed, the job is the destination's copy from here on.
  StatusOr<Json> commit = moves_->Commit(Row());
  ASSERT_TRUE(commit.ok());
  EXPECT_EQ((*commit)["commit"], true);
  EXPECT_EQ(Job().node, "node-b");
  EXPECT_EQ(Job().epoch, 4);
  EXPECT_EQ(host_.counts["migrations"], 1);
  // Decided once: asking again, or an abort coming later, hears the same answer.
  EXPECT_EQ((*moves_->Commit(Row()))["commit"], true);
  EXPECT_EQ((*moves_->AbortUnlessCommitted(Row()))["commit"], true);

  moves_->Advance(Row(), MigrationEvent{MigrationEvent::Kind::kMigrateOutOk, ""});
  EXPECT_EQ(Row().step, MigrationStep::kDone);
  EXPECT_EQ(Job().state(), JobState::kRunning);
  EXPECT_EQ(Job().migration_id, 0);
  EXPECT_TRUE(host_.TakeSent().empty());  // nothing killed: the source's copy ended itself
}

TEST_F(OrchestratorTest, AnAbortThatComesFirstDecidesTheMoveForBothSides) {
  StartedAndSending();
  StatusOr<Json> abort = moves_->AbortUnlessCommitted(Row());
  ASSERT_TRUE(abort.ok());
  EXPECT_EQ((*abort)["commit"], false);
  EXPECT_EQ(Row().step, MigrationStep::kFailed);
  // The job runs on at its source; the destination's copy (the next epoch) is killed.
  EXPECT_EQ(Job().state(), JobState::kRunning);
  EXPECT_EQ(Job().node, "node-a");
  EXPECT_EQ(Job().epoch, 3);
  EXPECT_EQ(host_.TakeSent(), (std::vector<std::string>{"node-b kill"}));
  EXPECT_EQ(host_.taken.back().command.epoch, 4);
  // The source's commit, asked after, is refused.
  EXPECT_EQ((*moves_->Commit(Row()))["commit"], false);
  EXPECT_EQ(Job().node, "node-a");
}

TEST_F(OrchestratorTest, AnUndecidedMoveFailsAtItsTimeoutAndACommittedOneIsDone) {
  host_.now = 1000;
  StartedAndSending();
  moves_->Timeouts(1299);
  EXPECT_EQ(Row().step, MigrationStep::kTransfer);
  moves_->Timeouts(1300);
  EXPECT_EQ(Row().step, MigrationStep::kFailed);
  EXPECT_EQ(Row().error, "timed out");
  EXPECT_EQ(Job().state(), JobState::kRunning);

  host_.now = 2000;
  ASSERT_TRUE(moves_->Start(Job(), "node-b", -1, "again", nullptr).ok());
  MigrationRecord& second = *migrations_.Find(2);
  moves_->Advance(second, MigrationEvent{MigrationEvent::Kind::kListening, ""});
  ASSERT_TRUE(moves_->Commit(second).ok());
  moves_->Timeouts(2300);
  EXPECT_EQ(second.step, MigrationStep::kDone);
  EXPECT_EQ(Job().node, "node-b");
}

TEST_F(OrchestratorTest, ARefusedMoveChangesNothing) {
  EXPECT_EQ(moves_->Start(Job(), "node-z", -1, "asked", nullptr).message(),
            "node node-z not found");
  EXPECT_EQ(moves_->Start(Job(), "node-a", -1, "asked", nullptr).message(),
            "job j-000001 already runs on node-a; name another of its GPUs (node-a/GPU)");
  EXPECT_EQ(moves_->Start(Job(), "node-a", 0, "asked", nullptr).message(),
            "job j-000001 already runs on node-a/0");
  nodes_.Find("node-b")->migrate_port = 0;
  EXPECT_EQ(moves_->Start(Job(), "node-b", -1, "asked", nullptr).message(),
            "node node-b registered no migrate_port");
  EXPECT_EQ(migrations_.made(), 0);
  EXPECT_EQ(Job().state(), JobState::kRunning);
  EXPECT_TRUE(host_.TakeSent().empty());
}

}  // namespace
}  // namespace paladin::server
