// The server's scheduler (src/server/scheduler.h) alone, on a known fleet built from node and job
// records: where a waiting job goes, the team quota's refusal, whom a higher-priority job
// preempts, the admission plan's move, a gang all or none, the size after an OOM. No store, no
// agents, no clock: each decision is read straight from what the scheduler answers.
#include "server/scheduler.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "paladin/server/placement.h"

namespace paladin::server {
namespace {

NodeRecord Node(const std::string& name, int gpus = 1) {
  NodeRecord n;
  n.name = name;
  n.migrate_port = 7000;
  for (int g = 0; g < gpus; ++g) {
    n.gpus.push_back(GpuRecord{.index = g,
                               .uuid = "GPU-" + name + "-" + std::to_string(g),
                               .model = "EMU",
                               .memory_bytes = 80 * kGiB});
  }
  return n;
}

JobRecord Job(int64_t seq, const std::string& team, int priority, int64_t quota, JobState state,
              const std::string& node = "", int gpu = -1) {
  JobRecord j;
  j.seq = seq;
  j.id = "j-00000" + std::to_string(seq);
  j.team = team;
  j.priority = priority;
  j.gpus = 1;
  j.quota_bytes = quota;
  j.node = node;
  j.gpu = gpu;
  if (gpu >= 0) j.gpu_indices = {gpu};
  j.LoadState(state);
  return j;
}

StatusOr<core::Policy> Policy() { return MakeServerPolicy("paladin"); }

// Two nodes of one 80 GiB GPU each. Team vision runs j-1 (60 GiB on node-a, started at 100) and
// j-2 (40 GiB on node-b, started at 200), both at priority 0; team research's j-3 (50 GiB,
// priority 5) and vision's j-4 (10 GiB, priority 0) wait. Free: 20 GiB on node-a, 40 on node-b.
class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<core::Policy> policy = Policy();
    ASSERT_TRUE(policy.ok()) << policy.status().ToString();
    scheduler_ = std::make_unique<Scheduler>(std::move(*policy));
    nodes_.Load({Node("node-a"), Node("node-b")});
    std::vector<JobRecord> jobs;
    jobs.push_back(Job(1, "vision", 0, 60 * kGiB, JobState::kRunning, "node-a", 0));
    jobs.push_back(Job(2, "vision", 0, 40 * kGiB, JobState::kRunning, "node-b", 0));
    jobs.push_back(Job(3, "research", 5, 50 * kGiB, JobState::kPending));
    jobs.push_back(Job(4, "vision", 0, 10 * kGiB, JobState::kPending));
    jobs[0].started_at = 100;
    jobs[1].started_at = 200;
    jobs_.Load(std::move(jobs));
  }

  FleetView View() { return BuildFleet(nodes_, jobs_, migrations_, true); }
  JobRecord& J(int64_t seq) { return *jobs_.BySeq(seq); }

  std::unique_ptr<Scheduler> scheduler_;
  NodeTable nodes_{6};
  JobTable jobs_;
  MigrationTable migrations_;
  TeamBook teams_{nullptr};
};

TEST_F(SchedulerTest, TheFleetBooksWhatRunsOnTheAliveNodes) {
  FleetView view = View();
  ASSERT_EQ(view.names, (std::vector<std::string>{"node-a", "node-b"}));
  EXPECT_EQ(view.LargestGpuMemory(), 80 * kGiB);
  ASSERT_TRUE(view.fleet.HoldingOf(1).has_value());
  EXPECT_EQ(view.fleet.HoldingOf(1)->placement.node, view.index["node-a"]);
  EXPECT_EQ(view.fleet.HoldingOf(1)->workload.gpu_milli, 750);  // 60 of 80 GiB
  EXPECT_FALSE(view.fleet.HoldingOf(3).has_value());            // waiting: nowhere
  nodes_.Find("node-b")->draining = true;
  EXPECT_EQ(View().names, std::vector<std::string>{"node-a"});
}

TEST_F(SchedulerTest, WaitingJobsGoByPriorityThenSubmission) {
  std::vector<JobRecord> more;
  more.push_back(Job(5, "vision", 5, kGiB, JobState::kRestoring));               // waiting for room
  more.push_back(Job(6, "vision", 9, kGiB, JobState::kRestoring, "node-a", 0));  // restoring there
  // Added as seqs 5 and 6.
  for (JobRecord& j : more) jobs_.Add(std::move(j));
  std::vector<int64_t> order;
  for (const JobRecord* j : Scheduler::WaitingOrder(jobs_)) order.push_back(j->seq);
  EXPECT_EQ(order, (std::vector<int64_t>{3, 5, 4}));
}

TEST_F(SchedulerTest, AJobThatFitsIsPlacedAndBookedAtItsNodesShare) {
  FleetView view = View();
  const PlaceDecision d = scheduler_->Place(view, J(4), teams_, jobs_);
  ASSERT_TRUE(d.placed()) << d.reason;
  EXPECT_EQ(d.how.rfind(" by paladin (score ", 0), 0u) << d.how;
  ASSERT_TRUE(view.fleet.HoldingOf(4).has_value());
  EXPECT_EQ(view.fleet.HoldingOf(4)->placement.node, d.placement.node);
  EXPECT_EQ(view.fleet.HoldingOf(4)->workload.gpu_milli, 125);  // 10 of 80 GiB
}

TEST_F(SchedulerTest, AJobThatFitsNowhereSaysWhyAndIsNotBooked) {
  FleetView view = View();
  const PlaceDecision d = scheduler_->Place(view, J(3), teams_, jobs_);
  EXPECT_EQ(d.outcome, PlaceDecision::Outcome::kNoRoom);
  EXPECT_FALSE(d.reason.empty());
  EXPECT_FALSE(view.fleet.HoldingOf(3).has_value());
  FleetView empty;
  EXPECT_EQ(scheduler_->Place(empty, J(4), teams_, jobs_).reason,
            "no alive node with a healthy GPU");
}

TEST_F(SchedulerTest, TheTeamsQuotaRefusesBeforeThePackerIsAsked) {
  TeamRecord vision;
  vision.name = "vision";
  vision.max_gpu_mem = 100 * kGiB;  // j-1 and j-2 hold all of it
  teams_.Load({vision});
  FleetView view = View();
  const PlaceDecision d = scheduler_->Place(view, J(4), teams_, jobs_);
  EXPECT_EQ(d.outcome, PlaceDecision::Outcome::kRefused);
  EXPECT_EQ(d.reason,
            "team vision quota: 100 GiB of its 100 GiB GPU memory in use, this job needs 10 GiB");
  EXPECT_FALSE(view.fleet.HoldingOf(4).has_value());
  // Nor is an admission plan made for a job that waits for its team.
  J(4).reason = d.reason;
  EXPECT_TRUE(
      scheduler_->PlanAdmission(view, J(4), jobs_, nodes_, migrations_, core::MoveCostModel{})
          .empty());
}

TEST_F(SchedulerTest, AHigherPriorityJobPreemptsTheLeastRunningShareThatMakesRoom) {
  // j-3 (50 GiB) fits on node-a without j-1 (750 milli of a GPU) and on node-b without j-2 (500
  // milli): the planner disturbs the least share, j-2 on node-b.
  std::optional<PreemptDecision> plan =
      scheduler_->PlanPreemption(View(), J(3), teams_, jobs_, nodes_, core::MoveCostModel{});
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->node, "node-b");
  EXPECT_EQ(plan->victims, std::vector<int64_t>{2});
  // node-b cannot checkpoint: j-1 on node-a is the only victim there is.
  nodes_.Find("node-b")->checkpointable = false;
  plan = scheduler_->PlanPreemption(View(), J(3), teams_, jobs_, nodes_, core::MoveCostModel{});
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->node, "node-a");
  EXPECT_EQ(plan->victims, std::vector<int64_t>{1});
}

TEST_F(SchedulerTest, NoPreemptionAtEqualPriorityNorDuringAWave) {
  EXPECT_FALSE(
      scheduler_->PlanPreemption(View(), J(4), teams_, jobs_, nodes_, core::MoveCostModel{})
          .has_value());
  J(1).preempted = true;  // still checkpointing to stop: one wave at a time
  J(1).LoadState(JobState::kCheckpointing);
  EXPECT_FALSE(
      scheduler_->PlanPreemption(View(), J(3), teams_, jobs_, nodes_, core::MoveCostModel{})
          .has_value());
}

TEST_F(SchedulerTest, OnlyAPendingJobItsTeamAllowsPreempts) {
  // j-3 would preempt j-2 (above); not when its team's quota refuses it, as the room made would
  // not run it.
  TeamRecord research;
  research.name = "research";
  research.max_gpu_mem = 40 * kGiB;
  teams_.Load({research});
  EXPECT_FALSE(
      scheduler_->PlanPreemption(View(), J(3), teams_, jobs_, nodes_, core::MoveCostModel{})
          .has_value());
  research.max_gpu_mem = 50 * kGiB;  // exactly its ask: it fits
  teams_.Load({research});
  EXPECT_TRUE(scheduler_->PlanPreemption(View(), J(3), teams_, jobs_, nodes_, core::MoveCostModel{})
                  .has_value());
  // A job restoring from its checkpoint waits for room; it does not preempt.
  J(3).LoadState(JobState::kRestoring);
  EXPECT_FALSE(
      scheduler_->PlanPreemption(View(), J(3), teams_, jobs_, nodes_, core::MoveCostModel{})
          .has_value());
}

TEST_F(SchedulerTest, AnAdmissionPlanMovesARunningJobToMakeRoom) {
  // j-1 and j-2 hold 30 GiB each; j-3 (60 GiB) fits only once one of them joins the other.
  J(1).quota_bytes = 30 * kGiB;
  J(2).quota_bytes = 30 * kGiB;
  J(3).quota_bytes = 60 * kGiB;
  FleetView view = View();
  ASSERT_FALSE(scheduler_->Place(view, J(3), teams_, jobs_).placed());
  const std::vector<core::Move> moves =
      scheduler_->PlanAdmission(view, J(3), jobs_, nodes_, migrations_, core::MoveCostModel{});
  ASSERT_EQ(moves.size(), 1u);
  EXPECT_NE(moves[0].from.node, moves[0].to.node);
  // Nothing while a migration is unfinished.
  migrations_.Add(MigrationRecord{});
  EXPECT_TRUE(
      scheduler_->PlanAdmission(view, J(3), jobs_, nodes_, migrations_, core::MoveCostModel{})
          .empty());
}

TEST_F(SchedulerTest, AGangIsPlacedWholeWithinItsRanksPerNodeOrNotAtAll) {
  nodes_.Load({Node("node-c"), Node("node-d")});  // two empty nodes
  std::vector<JobRecord*> ranks;
  for (int r = 0; r < 2; ++r) {
    JobRecord& j = jobs_.Add(Job(0, "research", 0, 50 * kGiB, JobState::kPending));
    j.gang = GangMember{.gang = "g-1", .rank = r, .ranks = 2, .ranks_per_node = 1};
    ranks.push_back(&j);
  }
  FleetView view = View();
  const GangDecision d = scheduler_->PlaceGang(view, ranks, teams_, jobs_);
  ASSERT_TRUE(d.placed) << d.reason;
  ASSERT_EQ(d.placements.size(), 2u);
  EXPECT_NE(d.placements[0].node, d.placements[1].node);
  EXPECT_EQ(d.how, " by paladin with its gang (2 ranks, at most 1 per node)");
  // A third 50 GiB rank on one node each: no third node has 50 GiB free.
  JobRecord& third = jobs_.Add(Job(0, "research", 0, 50 * kGiB, JobState::kPending));
  third.gang = GangMember{.gang = "g-2", .rank = 0, .ranks = 1, .ranks_per_node = 1};
  const GangDecision none = scheduler_->PlaceGang(view, {&third}, teams_, jobs_);
  EXPECT_FALSE(none.placed);
  EXPECT_EQ(none.reason.rfind("gang g-2: ", 0), 0u) << none.reason;
  EXPECT_TRUE(none.placements.empty());
}

TEST_F(SchedulerTest, AnAutoJobRefusedMemoryRestartsBiggerAtMostThreeTimes) {
  JobRecord j = Job(7, "vision", 0, 4 * kGiB, JobState::kRunning, "node-a", 0);
  j.mem_auto = true;
  j.refusals = 1;
  EXPECT_TRUE(Scheduler::RestartsAfterOom(j, 1));
  EXPECT_TRUE(Scheduler::RestartsAfterOom(j, std::nullopt));  // killed: no exit code
  EXPECT_FALSE(Scheduler::RestartsAfterOom(j, 0));            // it succeeded
  j.restarts = 3;
  EXPECT_FALSE(Scheduler::RestartsAfterOom(j, 1));
  j.restarts = 0;
  j.refusals = 0;
  EXPECT_FALSE(Scheduler::RestartsAfterOom(j, 1));  // never refused: a failure of its own
  j.refusals = 1;
  j.mem_auto = false;
  EXPECT_FALSE(Scheduler::RestartsAfterOom(j, 1));  // a fixed size is what the user asked

  StatusOr<core::PredictorFactory> factory = core::PredictorFactory::ForName("paladin");
  ASSERT_TRUE(factory.ok());
  core::ResourceSpec spec;
  spec.request = static_cast<double>(4 * kGiB);
  spec.ceiling = static_cast<double>(80 * kGiB);
  spec.window_s = 60;
  std::unique_ptr<core::Predictor> predictor = factory->Make(spec);
  const OomRestart next = Scheduler::SizeAfterOom(*predictor, 4 * kGiB, 1000);
  EXPECT_GE(next.quota_bytes, 4 * kGiB * 12 / 10);  // at least 1.2 x the quota it outgrew
  EXPECT_LE(next.quota_bytes, 80 * kGiB);
  EXPECT_EQ(next.why.rfind("paladin predictor after an OOM at 4 GiB: next-minute peak ", 0), 0u)
      << next.why;
}

}  // namespace
}  // namespace paladin::server
