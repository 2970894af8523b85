// The rebalancer: admission and growth plans on hand-built fleets with known answers, and the
// contract on random fleets (every move lands where the job fits, no job moves twice, the fleet
// is untouched, plans are deterministic, costs and pins are respected).
#include "paladin/core/rebalance.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fleet_testing.h"
#include "paladin/core/frag.h"
#include "paladin/core/policies.h"

namespace paladin::core {
namespace {

using test::AddTestNode;
using test::StateOf;
using ::testing::ElementsAre;

std::unique_ptr<Packer> BestFitPacker() {
  auto policy = MakePolicy("BestFit", PolicyContext{});
  EXPECT_TRUE(policy.ok()) << policy.status().ToString();
  return std::make_unique<Packer>(std::move(*policy));
}

// paladin needs the workload's shapes; these are the shapes the tests place.
std::unique_ptr<Packer> PaladinPacker(const std::vector<Workload>& shapes) {
  TypicalOptions all;
  all.coverage = 1.0;
  PolicyContext ctx{
      std::make_shared<const std::vector<TypicalWorkload>>(BuildTypicalWorkloads(shapes)),
      std::make_shared<const std::vector<TypicalWorkload>>(BuildTypicalWorkloads(shapes, all))};
  auto policy = MakePolicy("paladin", ctx);
  EXPECT_TRUE(policy.ok()) << policy.status().ToString();
  return std::make_unique<Packer>(std::move(*policy));
}

Workload Shared(const std::string& name, int32_t milli, ModelMask models = 0) {
  return Workload{.name = name,
                  .cpu_milli = 1000,
                  .mem_mib = 1024,
                  .gpu_count = 1,
                  .gpu_milli = milli,
                  .allowed_models = models};
}

Workload Whole(const std::string& name, int32_t gpus, ModelMask models = 0) {
  return Workload{.name = name,
                  .cpu_milli = 4000,
                  .mem_mib = 4096,
                  .gpu_count = gpus,
                  .gpu_milli = kMilliPerGpu,
                  .allowed_models = models};
}

// Reserves `shape` at `p` under `id` and returns the job as the rebalancer sees it.
MovableJob Place(Fleet& fleet, uint64_t id, const Workload& shape, Placement p,
                 double downtime_s = 10, bool movable = true) {
  EXPECT_TRUE(fleet.Reserve(id, shape, p).ok()) << fleet.Reserve(id, shape, p).ToString();
  return MovableJob{id, shape, std::move(p), downtime_s, movable};
}

const MovableJob* FindJob(const std::vector<MovableJob>& jobs, uint64_t id) {
  for (const auto& j : jobs) {
    if (j.id == id) return &j;
  }
  return nullptr;
}

// Carries `plan` out on a copy of `fleet`, checking every step; returns the copy.
Fleet ApplyPlan(const Fleet& fleet, const AdmissionPlan& plan, const Workload& w,
                const std::vector<MovableJob>& jobs) {
  Fleet copy = fleet;
  for (const Move& mv : plan.moves) {
    const MovableJob* job = FindJob(jobs, mv.job);
    if (job == nullptr) {
      ADD_FAILURE() << "the plan moves job " << mv.job << ", which is not among the jobs";
      continue;
    }
    copy.Unreserve(mv.job);
    const Status fits = copy.CheckPlacement(job->shape, mv.to);
    EXPECT_TRUE(fits.ok()) << "move of job " << mv.job << ": " << fits.ToString();
    EXPECT_TRUE(ModelAllowed(job->shape, copy.node(mv.to.node))) << "job " << mv.job;
    EXPECT_TRUE(copy.Reserve(mv.job, job->shape, mv.to).ok()) << "job " << mv.job;
  }
  const Status fits = copy.CheckPlacement(w, plan.placement);
  EXPECT_TRUE(fits.ok()) << "the workload after the moves: " << fits.ToString();
  EXPECT_TRUE(copy.Reserve(UINT64_MAX, w, plan.placement).ok());
  return copy;
}

// --- MigrationCost ---

TEST(MigrationCostTest, DowntimeIsFixedPlusCheckpointPlusRestorePlusHostStateTwice) {
  const MigrationCost cost;
  EXPECT_DOUBLE_EQ(cost.DowntimeS(0, 0), 2.0);
  // 16 GB out at 1.6 GB/s, in at 4.6 GB/s.
  EXPECT_NEAR(cost.DowntimeS(16e9, 0), 2 + 10 + 16.0 / 4.6, 1e-9);
  EXPECT_NEAR(cost.DowntimeS(16e9, 0), 15.47826, 1e-5);
  // 3.2 GB of host state written and read at 1.6 GB/s.
  EXPECT_NEAR(cost.DowntimeS(0, 3.2e9), 2 + 2 + 2, 1e-9);
  EXPECT_NEAR(cost.DowntimeS(16e9, 3.2e9), 15.47826 + 4, 1e-5);
  const MigrationCost fast{.fixed_s = 0, .gpu_out_gbps = 10, .gpu_in_gbps = 10, .disk_gbps = 10};
  EXPECT_NEAR(fast.DowntimeS(10e9, 10e9), 1 + 1 + 2, 1e-9);
}

// --- admission: a known scenario ---

// Two one-GPU nodes: A holds 500 milli, B 300 milli. A whole GPU fits nowhere until B's job
// joins A's on its GPU (500 + 300 <= 1000).
class AdmissionScenarioTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = AddTestNode(fleet_, "a", 32000, 65536, 1, "T4");
    b_ = AddTestNode(fleet_, "b", 32000, 65536, 1, "T4");
    jobs_.push_back(Place(fleet_, 1, Shared("half", 500), {a_, {0}}));
    jobs_.push_back(Place(fleet_, 2, Shared("third", 300), {b_, {0}}));
  }

  std::optional<AdmissionPlan> Plan(double max_cost = 1e9, RebalanceParams params = {}) {
    Rng rng(7);
    return Rebalancer(params).PlanAdmission(fleet_, whole_, jobs_, *packer_, rng, max_cost);
  }

  Fleet fleet_;
  int32_t a_ = -1, b_ = -1;
  std::vector<MovableJob> jobs_;
  Workload whole_ = Whole("whole", 1);
  std::unique_ptr<Packer> packer_ = BestFitPacker();
};

TEST_F(AdmissionScenarioTest, TheWholeGpuFitsNowhereBeforeTheMove) {
  Rng rng(1);
  EXPECT_FALSE(packer_->Schedule(fleet_, whole_, rng).placed);
}

TEST_F(AdmissionScenarioTest, MovesTheSmallerJobOntoTheOtherGpu) {
  const std::string before = StateOf(fleet_);
  auto plan = Plan();
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->moves.size(), 1u);
  const Move& mv = plan->moves[0];
  EXPECT_EQ(mv.job, 2u);  // the cheaper one: same downtime, smaller share
  EXPECT_EQ(mv.from.node, b_);
  EXPECT_THAT(mv.from.gpus, ElementsAre(0));
  EXPECT_EQ(mv.to.node, a_);
  EXPECT_THAT(mv.to.gpus, ElementsAre(0));
  EXPECT_DOUBLE_EQ(mv.downtime_s, 10);
  EXPECT_EQ(plan->placement.node, b_);
  EXPECT_THAT(plan->placement.gpus, ElementsAre(0));
  EXPECT_DOUBLE_EQ(plan->cost, 10 * 0.3);
  EXPECT_EQ(StateOf(fleet_), before);  // planning changes nothing

  const Fleet after = ApplyPlan(fleet_, *plan, whole_, jobs_);
  EXPECT_EQ(after.node(a_).gpus[0].milli_left, 200);
  EXPECT_EQ(after.node(b_).gpus[0].milli_left, 0);
}

TEST_F(AdmissionScenarioTest, MaxCostBelowTheCheapestMoveGivesNoPlan) {
  // Moving job 2 costs 10 s x 0.3 = 3 GPU-s; moving job 1 costs 5.
  const std::string before = StateOf(fleet_);
  EXPECT_FALSE(Plan(2.99).has_value());
  EXPECT_EQ(StateOf(fleet_), before);
  auto plan = Plan(3.0);
  ASSERT_TRUE(plan.has_value());
  EXPECT_DOUBLE_EQ(plan->cost, 3.0);
  EXPECT_EQ(StateOf(fleet_), before);
}

// Where a move's cost depends on the node pair (the server's measured moves), a plan is costed
// by the pair's figure for the destination tried; the source's (downtime_s) only ranks the jobs
// before one is known. Job 2's move to node a is slow here (40 s): moving job 1 to node b
// instead (10 s x 0.5) is now the cheaper plan.
TEST_F(AdmissionScenarioTest, ThePairsCostDecidesThePlan) {
  jobs_[1].downtime_to = [this](int32_t to) { return to == a_ ? 40.0 : 10.0; };
  auto plan = Plan();
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].job, 1u);
  EXPECT_EQ(plan->moves[0].to.node, b_);
  EXPECT_DOUBLE_EQ(plan->moves[0].downtime_s, 10);
  EXPECT_DOUBLE_EQ(plan->cost, 10 * 0.5);
  // Job 1's move to node b as slow: job 2's pair (12) and job 1's (20) both exceed a bound of
  // 10 that the source's figures (3 and 5) would pass.
  jobs_[0].downtime_to = [this](int32_t to) { return to == b_ ? 40.0 : 10.0; };
  EXPECT_FALSE(Plan(10.0).has_value());
  plan = Plan();
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->moves[0].job, 2u);
  EXPECT_DOUBLE_EQ(plan->moves[0].downtime_s, 40);
  EXPECT_DOUBLE_EQ(plan->cost, 40 * 0.3);
}

TEST_F(AdmissionScenarioTest, APinnedJobIsNeverMoved) {
  jobs_[1].movable = false;  // job 2 stays on b: job 1 must go there instead
  auto plan = Plan();
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].job, 1u);
  EXPECT_EQ(plan->moves[0].to.node, b_);
  EXPECT_EQ(plan->placement.node, a_);
  EXPECT_DOUBLE_EQ(plan->cost, 10 * 0.5);
  ApplyPlan(fleet_, *plan, whole_, jobs_);
  // Job 1 alone costs 5: under that, nothing.
  EXPECT_FALSE(Plan(4.99).has_value());

  jobs_[0].movable = false;  // both pinned
  const std::string before = StateOf(fleet_);
  EXPECT_FALSE(Plan().has_value());
  EXPECT_EQ(StateOf(fleet_), before);
}

TEST_F(AdmissionScenarioTest, JobsNotReservedInTheFleetAreIgnored) {
  jobs_[1].id = 99;  // the fleet knows no reservation 99
  auto plan = Plan();
  ASSERT_TRUE(plan.has_value());
  for (const Move& mv : plan->moves) EXPECT_NE(mv.job, 99u);
}

TEST_F(AdmissionScenarioTest, TheSamePlanForTheSameSeed) {
  auto first = Plan();
  auto second = Plan();
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(second.has_value());
  ASSERT_EQ(first->moves.size(), second->moves.size());
  EXPECT_EQ(first->placement.node, second->placement.node);
  EXPECT_EQ(first->placement.gpus, second->placement.gpus);
  EXPECT_EQ(first->cost, second->cost);
}

// "admits one workload by moving at most max_moves of jobs": with max_moves 0 no job may move.
TEST_F(AdmissionScenarioTest, MaxMovesZeroMovesNothing) {
  auto plan = Plan(1e9, RebalanceParams{.max_moves = 0});
  EXPECT_FALSE(plan.has_value()) << "a plan of " << plan->moves.size() << " moves";
}

// --- admission: GPU models ---

TEST(AdmissionModelTest, AJobIsNeverMovedToANodeOfAModelItExcludes) {
  Fleet fleet;
  const int32_t t4 = AddTestNode(fleet, "t4", 32000, 65536, 1, "T4");
  const int32_t v100 = AddTestNode(fleet, "v100", 32000, 65536, 1, "V100M32");
  const ModelMask t4_only = *fleet.models().ParseAllowed("T4");
  const ModelMask v100_only = *fleet.models().ParseAllowed("V100M32");
  std::vector<MovableJob> jobs = {
      Place(fleet, 1, Shared("any", 500), {t4, {0}}),
      // The cheaper job to move, but only V100s will do.
      Place(fleet, 2, Shared("v100-only", 300, v100_only), {v100, {0}}),
  };
  auto packer = BestFitPacker();
  const Rebalancer rebalancer;
  const std::string before = StateOf(fleet);

  Rng rng(3);
  const Workload any = Whole("whole", 1);
  auto plan = rebalancer.PlanAdmission(fleet, any, jobs, *packer, rng, 1e9);
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].job, 1u);
  EXPECT_EQ(plan->moves[0].to.node, v100);
  EXPECT_EQ(plan->placement.node, t4);
  ApplyPlan(fleet, *plan, any, jobs);
  EXPECT_EQ(StateOf(fleet), before);

  // A whole V100 needs job 2 off the V100 node, and it has nowhere else to go.
  EXPECT_FALSE(rebalancer.PlanAdmission(fleet, Whole("w", 1, v100_only), jobs, *packer, rng, 1e9));
  // A whole T4: job 1 moves to the V100 (it allows any model).
  auto t4_plan = rebalancer.PlanAdmission(fleet, Whole("w", 1, t4_only), jobs, *packer, rng, 1e9);
  ASSERT_TRUE(t4_plan.has_value());
  EXPECT_EQ(t4_plan->placement.node, t4);
  EXPECT_EQ(StateOf(fleet), before);
}

TEST(AdmissionWideTest, ClearsAWholeNodeForAMultiGpuWorkload) {
  // Two 2-GPU nodes, each GPU a quarter full; a 2-GPU workload needs one node emptied, which
  // takes two moves (a pair), onto the other node's GPUs.
  Fleet fleet;
  AddTestNode(fleet, "a", 32000, 65536, 2, "T4");
  AddTestNode(fleet, "b", 32000, 65536, 2, "T4");
  std::vector<MovableJob> jobs;
  uint64_t id = 1;
  for (int32_t node : {0, 1}) {
    for (int16_t g : {0, 1}) jobs.push_back(Place(fleet, id++, Shared("q", 250), {node, {g}}));
  }
  auto packer = BestFitPacker();
  const Workload w = Whole("pair", 2);
  const std::string before = StateOf(fleet);
  Rng rng(5);
  auto plan = Rebalancer().PlanAdmission(fleet, w, jobs, *packer, rng, 1e9);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->moves.size(), 2u);
  std::set<uint64_t> moved;
  for (const Move& mv : plan->moves) {
    moved.insert(mv.job);
    EXPECT_NE(mv.to.node, plan->placement.node);
    EXPECT_EQ(mv.from.node, plan->placement.node);
  }
  EXPECT_EQ(moved.size(), 2u);
  EXPECT_DOUBLE_EQ(plan->cost, 2 * 10 * 0.25);
  ApplyPlan(fleet, *plan, w, jobs);
  EXPECT_EQ(StateOf(fleet), before);

  // With one move allowed, a 2-GPU node cannot be cleared.
  EXPECT_FALSE(Rebalancer(RebalanceParams{.max_moves = 1})
                   .PlanAdmission(fleet, w, jobs, *packer, rng, 1e9)
                   .has_value());
  EXPECT_EQ(StateOf(fleet), before);
}

// --- preemption: a known scenario ---

// Two 2-GPU nodes: A holds two whole-GPU jobs (ids 1, 2), B a half-GPU job on each GPU (ids 3,
// 4). No node has a free GPU, so a 2-GPU workload needs jobs checkpointed off one node.
class PreemptionScenarioTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = AddTestNode(fleet_, "a", 32000, 65536, 2, "T4");
    b_ = AddTestNode(fleet_, "b", 32000, 65536, 2, "T4");
    jobs_.push_back(Place(fleet_, 1, Whole("w1", 1), {a_, {0}}, 30));
    jobs_.push_back(Place(fleet_, 2, Whole("w2", 1), {a_, {1}}, 30));
    jobs_.push_back(Place(fleet_, 3, Shared("h3", 500), {b_, {0}}, 10));
    jobs_.push_back(Place(fleet_, 4, Shared("h4", 500), {b_, {1}}, 10));
  }

  std::optional<PreemptionPlan> Plan(const Workload& w, RebalanceParams params = {}) {
    Rng rng(9);
    const std::string before = StateOf(fleet_);
    auto plan = Rebalancer(params).PlanPreemption(fleet_, w, jobs_, *packer_, rng);
    EXPECT_EQ(StateOf(fleet_), before) << "planning changed the fleet";
    return plan;
  }

  Fleet fleet_;
  int32_t a_ = -1, b_ = -1;
  std::vector<MovableJob> jobs_;
  std::unique_ptr<Packer> packer_ = BestFitPacker();
};

TEST_F(PreemptionScenarioTest, TakesTheNodeThatDisturbsTheLeastGpuShare) {
  const Workload pair = Whole("pair", 2);
  auto plan = Plan(pair);
  ASSERT_TRUE(plan.has_value());
  // Node B's two half-GPU jobs hold 1.0 GPU between them; node A's two whole jobs hold 2.0.
  EXPECT_EQ(plan->placement.node, b_);
  EXPECT_THAT(plan->victims, ElementsAre(3, 4));
  EXPECT_DOUBLE_EQ(plan->gpu_share, 1.0);
  EXPECT_DOUBLE_EQ(plan->cost, 2 * 10 * 0.5);
  // Carried out: the victims leave, the workload fits where the plan says.
  Fleet copy = fleet_;
  for (uint64_t v : plan->victims) copy.Unreserve(v);
  EXPECT_TRUE(copy.CheckPlacement(pair, plan->placement).ok());
}

TEST_F(PreemptionScenarioTest, LeavesInPlaceTheVictimsTheWorkloadDoesNotNeed) {
  // 600 milli needs one of B's jobs gone (A would lose a whole GPU): the first listed on B is
  // taken, the second is left alone.
  auto plan = Plan(Shared("half", 600));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->placement.node, b_);
  ASSERT_EQ(plan->victims.size(), 1u);
  EXPECT_DOUBLE_EQ(plan->gpu_share, 0.5);
  // The caller's order decides which: listed 4 before 3, job 4 goes.
  std::swap(jobs_[2], jobs_[3]);
  auto swapped = Plan(Shared("half", 600));
  ASSERT_TRUE(swapped.has_value());
  EXPECT_THAT(swapped->victims, ElementsAre(4));
}

TEST_F(PreemptionScenarioTest, NeverTakesPinnedJobsAndRespectsTheLimit) {
  jobs_[2].movable = false;  // job 3 is pinned: B cannot be cleared, A can
  auto plan = Plan(Whole("pair", 2));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->placement.node, a_);
  EXPECT_THAT(plan->victims, ElementsAre(1, 2));
  // One victim allowed: no node can be cleared for two GPUs.
  EXPECT_FALSE(Plan(Whole("pair", 2), RebalanceParams{.max_preempted = 1}).has_value());
  // A workload no node could ever hold gets no plan.
  EXPECT_FALSE(Plan(Whole("four", 4)).has_value());
}

// --- growth ---

class GrowthTest : public ::testing::Test {
 protected:
  std::optional<Move> Grow(const MovableJob& job, int32_t milli) {
    Workload grown = job.shape;
    grown.gpu_milli = milli;
    Rng rng(11);
    const std::string before = StateOf(fleet_);
    auto mv = Rebalancer().PlanGrowth(fleet_, job, grown, *packer_, rng);
    EXPECT_EQ(StateOf(fleet_), before);
    if (mv) {
      Fleet copy = fleet_;
      copy.Unreserve(job.id);
      EXPECT_TRUE(copy.CheckPlacement(grown, mv->to).ok())
          << copy.CheckPlacement(grown, mv->to).ToString();
      EXPECT_EQ(mv->job, job.id);
      EXPECT_EQ(mv->from.node, job.placement.node);
      EXPECT_EQ(mv->from.gpus, job.placement.gpus);
      EXPECT_DOUBLE_EQ(mv->downtime_s, job.downtime_s);
    }
    return mv;
  }

  Fleet fleet_;
  std::unique_ptr<Packer> packer_ = BestFitPacker();
};

TEST_F(GrowthTest, AJobThatCannotGrowOnItsGpuMovesWhereTheGrownShapeFits) {
  const int32_t a = AddTestNode(fleet_, "a", 32000, 65536, 1, "T4");
  const int32_t b = AddTestNode(fleet_, "b", 32000, 65536, 1, "T4");
  const MovableJob job = Place(fleet_, 1, Shared("grows", 500), {a, {0}}, 7);
  Place(fleet_, 2, Shared("neighbour", 300), {a, {0}});
  auto mv = Grow(job, 800);  // 800 + 300 > 1000 on a
  ASSERT_TRUE(mv.has_value());
  EXPECT_EQ(mv->to.node, b);
  EXPECT_THAT(mv->to.gpus, ElementsAre(0));
  EXPECT_DOUBLE_EQ(mv->downtime_s, 7);
}

TEST_F(GrowthTest, MovesToAnotherGpuOfTheSameNode) {
  const int32_t a = AddTestNode(fleet_, "a", 32000, 65536, 2, "T4");
  const MovableJob job = Place(fleet_, 1, Shared("grows", 500), {a, {0}});
  Place(fleet_, 2, Shared("neighbour", 300), {a, {0}});
  auto mv = Grow(job, 800);
  ASSERT_TRUE(mv.has_value());
  EXPECT_EQ(mv->to.node, a);
  EXPECT_THAT(mv->to.gpus, ElementsAre(1));
}

TEST_F(GrowthTest, NothingWhenTheGrownShapeFitsNowhere) {
  const int32_t a = AddTestNode(fleet_, "a", 32000, 65536, 1, "T4");
  const int32_t b = AddTestNode(fleet_, "b", 32000, 65536, 1, "T4");
  const MovableJob job = Place(fleet_, 1, Shared("grows", 500), {a, {0}});
  Place(fleet_, 2, Shared("neighbour", 300), {a, {0}});
  Place(fleet_, 3, Shared("other", 300), {b, {0}});  // b has 700 left
  EXPECT_FALSE(Grow(job, 800).has_value());
}

TEST_F(GrowthTest, NothingWhenTheOnlyFitIsWhereItIs) {
  const int32_t a = AddTestNode(fleet_, "a", 32000, 65536, 1, "T4");
  const int32_t b = AddTestNode(fleet_, "b", 32000, 65536, 1, "T4");
  const MovableJob job = Place(fleet_, 1, Shared("grows", 500), {a, {0}});
  Place(fleet_, 2, Whole("full", 1), {b, {0}});
  EXPECT_FALSE(Grow(job, 800).has_value());  // grows in place: the caller's business
}

TEST_F(GrowthTest, PinnedOrUnknownJobsAreNotMoved) {
  const int32_t a = AddTestNode(fleet_, "a", 32000, 65536, 1, "T4");
  AddTestNode(fleet_, "b", 32000, 65536, 1, "T4");
  MovableJob job = Place(fleet_, 1, Shared("grows", 500), {a, {0}});
  Place(fleet_, 2, Shared("neighbour", 300), {a, {0}});
  job.movable = false;
  EXPECT_FALSE(Grow(job, 800).has_value());
  job.movable = true;
  job.id = 42;  // not reserved
  EXPECT_FALSE(Grow(job, 800).has_value());
}

TEST_F(GrowthTest, RespectsTheGpuModel) {
  const int32_t a = AddTestNode(fleet_, "a", 32000, 65536, 1, "T4");
  AddTestNode(fleet_, "v", 32000, 65536, 1, "V100M32");
  const int32_t c = AddTestNode(fleet_, "c", 32000, 65536, 1, "T4");
  const ModelMask t4_only = *fleet_.models().ParseAllowed("T4");
  const MovableJob job = Place(fleet_, 1, Shared("grows", 500, t4_only), {a, {0}});
  Place(fleet_, 2, Shared("neighbour", 300), {a, {0}});
  Place(fleet_, 3, Shared("other", 200), {c, {0}});
  EXPECT_FALSE(Grow(job, 900).has_value());  // only the V100 has room
  auto mv = Grow(job, 750);                  // a has 700 free without the job, c 800
  ASSERT_TRUE(mv.has_value());
  EXPECT_EQ(mv->to.node, c);
}

// --- the contract on random fleets ---

struct Scenario {
  Fleet fleet;
  std::vector<MovableJob> jobs;
  Workload w;
  bool ok = false;  // w fits nowhere as it is
};

// Four or five nodes of one, two or four GPUs, of two models; random shared and whole-GPU jobs,
// some pinned to a model, some pinned in place; and a workload that fits nowhere.
Scenario RandomScenario(uint64_t seed, Packer& packer) {
  Scenario s;
  Rng rng(seed);
  const char* models[] = {"A", "B"};
  const int gpu_counts[] = {1, 2, 4};
  const int nodes = 4 + static_cast<int>(rng.Uniform(2));
  for (int i = 0; i < nodes; ++i) {
    AddTestNode(s.fleet, "n" + std::to_string(i), 8000 * static_cast<int64_t>(2 + rng.Uniform(4)),
                65536, gpu_counts[rng.Uniform(3)], models[rng.Uniform(2)]);
  }
  auto random_models = [&]() -> ModelMask {
    const uint64_t r = rng.Uniform(4);
    return r < 2 ? 0 : ModelMask{1} << (r - 2);
  };
  const int count = 6 + static_cast<int>(rng.Uniform(12));
  for (int i = 0; i < count; ++i) {
    Workload j;
    j.name = "j" + std::to_string(i);
    j.cpu_milli = 1000 * static_cast<int64_t>(1 + rng.Uniform(6));
    j.mem_mib = 1024 * static_cast<int64_t>(1 + rng.Uniform(8));
    j.gpu_count = 1;
    j.gpu_milli = static_cast<int32_t>(100 * (1 + rng.Uniform(10)));
    if (rng.Uniform(5) == 0) j.gpu_count = 2, j.gpu_milli = kMilliPerGpu;
    j.allowed_models = random_models();
    const Decision d = packer.Schedule(s.fleet, j, rng);
    if (!d.placed) continue;
    const uint64_t id = 100 + static_cast<uint64_t>(i);
    EXPECT_TRUE(s.fleet.Reserve(id, j, d.placement).ok());
    s.jobs.push_back(MovableJob{id, j, d.placement, 1.0 + static_cast<double>(rng.Uniform(60)),
                                rng.Uniform(5) != 0});
  }
  for (int attempt = 0; attempt < 20 && !s.ok; ++attempt) {
    s.w = Workload{.name = "w",
                   .cpu_milli = 1000 * static_cast<int64_t>(1 + rng.Uniform(8)),
                   .mem_mib = 2048,
                   .gpu_count = 1 + static_cast<int32_t>(rng.Uniform(2)),
                   .gpu_milli = kMilliPerGpu,
                   .allowed_models = random_models()};
    if (s.w.gpu_count == 1) s.w.gpu_milli = static_cast<int32_t>(500 + 100 * rng.Uniform(6));
    s.ok = !packer.Schedule(s.fleet, s.w, rng).placed;
  }
  return s;
}

void ExpectSamePlan(const std::optional<AdmissionPlan>& a, const std::optional<AdmissionPlan>& b) {
  ASSERT_EQ(a.has_value(), b.has_value());
  if (!a) return;
  ASSERT_EQ(a->moves.size(), b->moves.size());
  for (size_t i = 0; i < a->moves.size(); ++i) {
    EXPECT_EQ(a->moves[i].job, b->moves[i].job);
    EXPECT_EQ(a->moves[i].to.node, b->moves[i].to.node);
    EXPECT_EQ(a->moves[i].to.gpus, b->moves[i].to.gpus);
    EXPECT_EQ(a->moves[i].downtime_s, b->moves[i].downtime_s);
  }
  EXPECT_EQ(a->placement.node, b->placement.node);
  EXPECT_EQ(a->placement.gpus, b->placement.gpus);
  EXPECT_EQ(a->cost, b->cost);
}

class RebalanceContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Packer> MakePacker() {
    if (GetParam() == "BestFit") return BestFitPacker();
    std::vector<Workload> shapes = {Shared("s", 300), Shared("s", 500), Whole("w", 1),
                                    Whole("w", 2)};
    return PaladinPacker(shapes);
  }
};

TEST_P(RebalanceContractTest, AdmissionPlansAreValidDeterministicAndLeaveTheFleetAlone) {
  auto packer = MakePacker();
  const RebalanceParams params{.max_moves = 4};
  const Rebalancer rebalancer(params);
  int scenarios = 0, plans = 0, multi_move = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Scenario s = RandomScenario(seed, *packer);
    if (!s.ok || s.jobs.empty()) continue;
    ++scenarios;
    const std::string before = StateOf(s.fleet);
    Rng rng(seed);
    const double max_cost = seed % 4 == 0 ? 20.0 : 1e9;
    auto plan = rebalancer.PlanAdmission(s.fleet, s.w, s.jobs, *packer, rng, max_cost);
    ASSERT_EQ(StateOf(s.fleet), before);
    Rng again(seed);
    ExpectSamePlan(plan, rebalancer.PlanAdmission(s.fleet, s.w, s.jobs, *packer, again, max_cost));
    ASSERT_EQ(StateOf(s.fleet), before);
    if (!plan) continue;
    ++plans;
    multi_move += plan->moves.size() > 1 ? 1 : 0;
    EXPECT_LE(static_cast<int>(plan->moves.size()), params.max_moves);
    EXPECT_FALSE(plan->moves.empty());
    std::set<uint64_t> ids;
    double cost = 0;
    for (const Move& mv : plan->moves) {
      EXPECT_TRUE(ids.insert(mv.job).second) << "job " << mv.job << " moves twice";
      EXPECT_NE(mv.to.node, plan->placement.node) << "job " << mv.job;
      const MovableJob* job = FindJob(s.jobs, mv.job);
      ASSERT_NE(job, nullptr);
      EXPECT_TRUE(job->movable) << "pinned job " << mv.job << " moved";
      EXPECT_EQ(mv.from.node, job->placement.node);
      EXPECT_EQ(mv.from.gpus, job->placement.gpus);
      EXPECT_EQ(mv.downtime_s, job->downtime_s);
      cost += job->downtime_s * static_cast<double>(job->shape.TotalGpuMilli()) / kMilliPerGpu;
    }
    EXPECT_NEAR(plan->cost, cost, 1e-9);
    EXPECT_LE(plan->cost, max_cost);
    ApplyPlan(s.fleet, *plan, s.w, s.jobs);
  }
  // Not vacuous: most scenarios are real, and plans of one and of several moves occur.
  EXPECT_GT(scenarios, 100);
  EXPECT_GT(plans, 20);
  EXPECT_GT(multi_move, 0);
}

TEST_P(RebalanceContractTest, PreemptionPlansFreeEnoughAndTakeOnlyMovableJobsOnce) {
  auto packer = MakePacker();
  const Rebalancer rebalancer(RebalanceParams{.max_preempted = 6});
  int plans = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Scenario s = RandomScenario(seed, *packer);
    if (!s.ok || s.jobs.empty()) continue;
    const std::string before = StateOf(s.fleet);
    Rng rng(seed);
    auto plan = rebalancer.PlanPreemption(s.fleet, s.w, s.jobs, *packer, rng);
    ASSERT_EQ(StateOf(s.fleet), before);
    Rng again(seed);
    auto twice = rebalancer.PlanPreemption(s.fleet, s.w, s.jobs, *packer, again);
    ASSERT_EQ(plan.has_value(), twice.has_value());
    if (!plan) continue;
    ++plans;
    EXPECT_EQ(plan->victims, twice->victims);
    EXPECT_EQ(plan->placement.node, twice->placement.node);
    EXPECT_EQ(plan->placement.gpus, twice->placement.gpus);
    EXPECT_LE(plan->victims.size(), 6u);
    std::set<uint64_t> ids;
    Fleet copy = s.fleet;
    double share = 0;
    for (uint64_t v : plan->victims) {
      EXPECT_TRUE(ids.insert(v).second) << "job " << v << " taken twice";
      const MovableJob* job = FindJob(s.jobs, v);
      ASSERT_NE(job, nullptr);
      EXPECT_TRUE(job->movable) << "pinned job " << v << " preempted";
      EXPECT_EQ(job->placement.node, plan->placement.node) << "a victim off another node";
      share += static_cast<double>(job->shape.TotalGpuMilli()) / kMilliPerGpu;
      copy.Unreserve(v);
    }
    EXPECT_NEAR(plan->gpu_share, share, 1e-9);
    EXPECT_TRUE(copy.CheckPlacement(s.w, plan->placement).ok())
        << copy.CheckPlacement(s.w, plan->placement).ToString();
    // Minimal: with any one victim put back, the workload no longer fits on the node.
    PackerOptions only;
    only.only_node = plan->placement.node;
    for (uint64_t v : plan->victims) {
      const MovableJob* job = FindJob(s.jobs, v);
      Fleet back = copy;
      ASSERT_TRUE(back.Reserve(v, job->shape, job->placement).ok());
      Rng any(seed);
      EXPECT_FALSE(packer->Schedule(back, s.w, any, only).placed)
          << "victim " << v << " was not needed";
    }
  }
  EXPECT_GT(plans, 20);
}

TEST_P(RebalanceContractTest, GrowthMovesLandWhereTheGrownShapeFits) {
  auto packer = MakePacker();
  const Rebalancer rebalancer;
  int moves = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Scenario s = RandomScenario(seed, *packer);
    if (s.jobs.empty()) continue;
    Rng pick(seed);
    const MovableJob& job = s.jobs[pick.Uniform(s.jobs.size())];
    Workload grown = job.shape;
    grown.gpu_milli = std::min<int32_t>(
        kMilliPerGpu, grown.gpu_milli + static_cast<int32_t>(100 * (1 + pick.Uniform(9))));
    const std::string before = StateOf(s.fleet);
    Rng rng(seed);
    auto mv = rebalancer.PlanGrowth(s.fleet, job, grown, *packer, rng);
    ASSERT_EQ(StateOf(s.fleet), before);
    if (!mv) continue;
    ++moves;
    EXPECT_TRUE(job.movable);
    EXPECT_FALSE(mv->to.node == job.placement.node && mv->to.gpus == job.placement.gpus);
    Fleet copy = s.fleet;
    copy.Unreserve(job.id);
    EXPECT_TRUE(copy.CheckPlacement(grown, mv->to).ok())
        << copy.CheckPlacement(grown, mv->to).ToString();
  }
  EXPECT_GT(moves, 20);
}

INSTANTIATE_TEST_SUITE_P(Policies, RebalanceContractTest, ::testing::Values("BestFit", "paladin"),
                         [](const auto& test_info) { return test_info.param; });

}  // namespace
}  // namespace paladin::core

// --- defragmentation ---

namespace paladin::core {
namespace {

double FleetFrag(const Fleet& fleet, const std::vector<TypicalWorkload>& typical) {
  double f = 0;
  for (const Node& n : fleet.nodes()) f += FragAmount(ViewOf(n), typical);
  return f;
}

// On random fleets: every planned move lands where the job fits (models included), each job moves
// at most once, the fleet's fragmentation drops at every step, only shared, movable jobs move,
// the plan is deterministic and the fleet is left as it was.
TEST(DefragTest, EveryMoveFitsLowersFragmentationAndLeavesTheFleetAlone) {
  auto packer = BestFitPacker();
  const std::vector<Workload> shapes = {Shared("s3", 300), Shared("s5", 500), Whole("w1", 1)};
  const std::vector<TypicalWorkload> typical = BuildTypicalWorkloads(shapes);
  const Rebalancer rebalancer;
  int moved_scenarios = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    Scenario s = RandomScenario(seed, *packer);
    const std::string before = StateOf(s.fleet);
    const auto moves = rebalancer.PlanDefrag(s.fleet, s.jobs, typical, 10, 1.0);
    EXPECT_EQ(StateOf(s.fleet), before) << "seed " << seed;
    EXPECT_EQ(moves.size(), rebalancer.PlanDefrag(s.fleet, s.jobs, typical, 10, 1.0).size());
    Fleet copy = s.fleet;
    std::set<uint64_t> seen;
    double frag = FleetFrag(copy, typical);
    for (const Move& mv : moves) {
      const MovableJob* job = FindJob(s.jobs, mv.job);
      ASSERT_NE(job, nullptr);
      EXPECT_TRUE(seen.insert(mv.job).second) << "job " << mv.job << " moved twice";
      EXPECT_TRUE(job->movable);
      EXPECT_TRUE(job->shape.IsSharedGpu());
      EXPECT_NE(mv.to.node, mv.from.node);
      copy.Unreserve(mv.job);
      const Status fits = copy.CheckPlacement(job->shape, mv.to);
      EXPECT_TRUE(fits.ok()) << "seed " << seed << ": " << fits.ToString();
      EXPECT_TRUE(copy.Reserve(mv.job, job->shape, mv.to).ok());
      const double after = FleetFrag(copy, typical);
      EXPECT_LT(after, frag - 1.0 + 1e-9) << "seed " << seed << ", job " << mv.job;
      frag = after;
    }
    if (!moves.empty()) ++moved_scenarios;
  }
  EXPECT_GT(moved_scenarios, 10) << "too few scenarios exercised a move";
}

TEST(DefragTest, MaxMovesBoundsThePlan) {
  auto packer = BestFitPacker();
  const std::vector<TypicalWorkload> typical = BuildTypicalWorkloads(
      std::vector<Workload>{Shared("s3", 300), Shared("s5", 500), Whole("w1", 1)});
  const Rebalancer rebalancer;
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    Scenario s = RandomScenario(seed, *packer);
    EXPECT_LE(rebalancer.PlanDefrag(s.fleet, s.jobs, typical, 1, 1.0).size(), 1u);
    EXPECT_TRUE(rebalancer.PlanDefrag(s.fleet, s.jobs, typical, 0, 1.0).empty());
  }
}

}  // namespace
}  // namespace paladin::core
