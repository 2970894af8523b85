// The gangs' coordinator (src/server/gangs.h) alone, over the control plane's tables and a fake
// host: the steps of a coordinated checkpoint (freeze every rank, dump each once all are frozen,
// thaw all once all are dumped), a failed dump giving the cut up with every rank thawed and the
// last generation kept, and a lost node bringing the whole gang back from its cut. No store, no
// agents, no server: the clock is the fake's, the commands are what it was asked to send.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fake_host.h"
#include "paladin/server/placement.h"
#include "server/gangs.h"

namespace paladin::server {
namespace {

NodeRecord GangNode(const std::string& name) {
  NodeRecord n;
  n.name = name;
  n.address = "192.0.2." + std::to_string(name.back() - 'a' + 1);
  return n;
}

// Rank R of gang j-000001 (two ranks, one per node), running on NODE since t=0.
JobRecord Rank(int r, const std::string& node) {
  JobRecord j;
  j.seq = r + 1;
  j.id = "j-00000" + std::to_string(r + 1);
  j.team = "research";
  j.node = node;
  j.epoch = 7;
  j.started_at = 0.0;
  j.LoadState(JobState::kRunning);
  GangMember g;
  g.gang = "j-000001";
  g.rank = r;
  g.ranks = 2;
  g.port = 29500;
  g.address = "10.231.0." + std::to_string(r + 1);
  j.gang = g;
  return j;
}

class GangCoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<core::Policy> policy = MakeServerPolicy("paladin");
    ASSERT_TRUE(policy.ok()) << policy.status().ToString();
    scheduler_ = std::make_unique<Scheduler>(std::move(*policy));
    nodes_.Load({GangNode("node-a"), GangNode("node-b")});
    std::vector<JobRecord> ranks = {Rank(0, "node-a"), Rank(1, "node-b")};
    jobs_.Load(std::move(ranks));
    moves_ = std::make_unique<MigrationOrchestrator>(host_, jobs_, nodes_, migrations_, commands_,
                                                     *scheduler_, MoveSettings{});
    gangs_ = std::make_unique<GangCoordinator>(
        host_, jobs_, nodes_, teams_, *moves_, *scheduler_, subnet_,
        GangSettings{.checkpoint_every_s = 600, .rank_subnet = "10.231.0.0/16"});
  }

  JobRecord& R(int r) { return *jobs_.BySeq(r + 1); }

  // The agent's answer to the last command sent to rank R's node.
  void Answer(int r, bool ok, const Json& detail = Json::object()) {
    const Sent* last = nullptr;
    for (const Sent& s : host_.taken) {
      if (s.job == R(r).id) last = &s;
    }
    ASSERT_NE(last, nullptr);
    CommandRecord c;
    c.id = 1;
    c.node = last->node;
    c.job = last->job;
    c.command = last->command;
    api::CommandResult result{.ok = ok, .error = ok ? "" : "criu: dump failed"};
    result.detail = detail;
    EXPECT_TRUE(gangs_->ApplyResult(R(r), c, result));
  }

  FakeHost host_;
  JobTable jobs_;
  NodeTable nodes_{6};
  TeamBook teams_{nullptr};
  MigrationTable migrations_;
  CommandQueue commands_;
  RankSubnet subnet_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<MigrationOrchestrator> moves_;
  std::unique_ptr<GangCoordinator> gangs_;
};

TEST_F(GangCoordinatorTest, ACutFreezesEveryRankThenDumpsEachThenThawsThemAll) {
  host_.now = 500;  // started at 0, cuts every 600 s: not due yet
  gangs_->PeriodicCheckpoints(host_.now);
  EXPECT_TRUE(host_.TakeSent().empty());

  host_.now = 700;
  gangs_->PeriodicCheckpoints(host_.now);
  EXPECT_EQ(host_.TakeSent(), (std::vector<std::string>{"node-a freeze", "node-b freeze"}));
  EXPECT_EQ(R(0).gang->cut_in_flight, 1);

  // No dump until every rank is frozen: nothing moves between them then.
  Answer(0, true);
  EXPECT_TRUE(host_.TakeSent().empty());
  Answer(1, true);
  EXPECT_EQ(host_.TakeSent(),
            (std::vector<std::string>{"node-a checkpoint frozen", "node-b checkpoint frozen"}));
  EXPECT_EQ(host_.taken[2].command.dir, "/ck/j-000001/1");

  // Every image in: one cut, generation 1, each rank's checkpoint recorded, all thawed.
  Answer(0, true, {{"path", "/ck/j-000001/1"}, {"bytes", 100}});
  EXPECT_TRUE(host_.TakeSent().empty());
  Answer(1, true, {{"path", "/ck/j-000002/1"}, {"bytes", 200}});
  EXPECT_EQ(host_.TakeSent(), (std::vector<std::string>{"node-a thaw", "node-b thaw"}));
  for (int r : {0, 1}) {
    EXPECT_EQ(R(r).gang->generation, 1);
    ASSERT_TRUE(R(r).last_checkpoint.has_value());
  }
  EXPECT_EQ(R(1).last_checkpoint->path, "/ck/j-000002/1");
  EXPECT_EQ(host_.counts["gang_checkpoints"], 1);

  Answer(0, true);
  Answer(1, true);
  for (int r : {0, 1}) {
    EXPECT_EQ(R(r).gang->cut_in_flight, 0);
    EXPECT_EQ(R(r).state(), JobState::kRunning);
  }
}

TEST_F(GangCoordinatorTest, AFailedDumpThawsEveryRankAndKeepsTheLastGeneration) {
  ASSERT_TRUE(gangs_->Checkpoint(R(0)).ok());  // asked: the ranks stop after the cut
  EXPECT_EQ(R(0).state(), JobState::kCheckpointing);
  host_.TakeSent();
  Answer(0, true);
  Answer(1, true);
  host_.TakeSent();  // the two dumps

  // Rank 1's dump fails while rank 0's still runs: rank 1 is thawed at once, rank 0 once its
  // dump answers; both run on, generation 0 kept.
  Answer(1, false);
  EXPECT_EQ(host_.TakeSent(), (std::vector<std::string>{"node-b thaw"}));
  EXPECT_EQ(R(0).gang->cut_phase, CutPhase::kThawPending);
  for (int r : {0, 1}) EXPECT_EQ(R(r).state(), JobState::kRunning);
  Answer(0, true, {{"path", "/ck/j-000001/1"}, {"bytes", 100}});
  EXPECT_EQ(host_.TakeSent(), (std::vector<std::string>{"node-a thaw"}));
  for (int r : {0, 1}) {
    EXPECT_EQ(R(r).gang->generation, 0);
    EXPECT_FALSE(R(r).last_checkpoint.has_value());
  }
  EXPECT_EQ(host_.counts["gang_checkpoint_failures"], 1);
}

TEST_F(GangCoordinatorTest, ALostNodeBringsTheWholeGangBackFromItsCut) {
  for (int r : {0, 1}) {
    R(r).gang->generation = 3;
    R(r).last_checkpoint = CheckpointRef{.path = "/ck/gen3", .at = 900, .bytes = 1};
  }
  gangs_->Recover(R(1), "node-b");
  // The survivor on node-a is killed (its image of the cut is its way back); nothing is sent to
  // the dead node. Both wait to restore generation 3, neither restarts from scratch.
  EXPECT_EQ(host_.TakeSent(), (std::vector<std::string>{"node-a kill"}));
  EXPECT_EQ(R(0).gang->stopping_node, "node-a");
  for (int r : {0, 1}) {
    EXPECT_EQ(R(r).state(), JobState::kRestoring);
    EXPECT_EQ(R(r).restarts, 0);
  }
  EXPECT_EQ(host_.released, (std::vector<std::string>{"j-000001", "j-000002"}));

  // Placed again only once the survivor's kill is answered (a rank never runs twice).
  FleetView view;
  EXPECT_FALSE(gangs_->TryPlace(view, "j-000001"));
  EXPECT_NE(R(0).reason.find("until rank 0's copy on node-a is gone"), std::string::npos)
      << R(0).reason;
}

}  // namespace
}  // namespace paladin::server
