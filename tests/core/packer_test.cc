// The packer pipeline: filters name their rejections, ties follow node ranks, gangs are
// all-or-nothing.
#include "paladin/core/packer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fleet_testing.h"

namespace paladin::core {
namespace {

using test::AddTestNode;
using test::StateOf;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Scores listed nodes as given and every other node `otherwise`.
class TableScore final : public ScorePlugin {
 public:
  explicit TableScore(std::map<int32_t, double> scores, double otherwise = 0)
      : scores_(std::move(scores)), otherwise_(otherwise) {}
  std::string_view name() const override { return "TableScore"; }
  double Score(const Fleet&, const Workload&, int32_t node) override {
    auto it = scores_.find(node);
    return it == scores_.end() ? otherwise_ : it->second;
  }

 private:
  std::map<int32_t, double> scores_;
  double otherwise_;
};

Policy PolicyOf(std::map<int32_t, double> scores, double otherwise = 0,
                TieBreak tie_break = TieBreak::kLowestRank) {
  Policy p;
  p.name = "table";
  p.scores.push_back(WeightedScore{std::make_unique<TableScore>(std::move(scores), otherwise), 1});
  p.tie_break = tie_break;
  return p;
}

Policy EveryNodeTies() { return PolicyOf({}, 50); }

// --- filters ---

// One node for each default filter to reject, and a CPU-only node the GPU-model filter rejects.
class PackerFilterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AddTestNode(fleet_, "v100-node", 64000, 262144, 2, "V100M32");  // wrong model
    AddTestNode(fleet_, "cpu-node", 64000, 262144);                 // no GPUs
    AddTestNode(fleet_, "small-cpu", 2000, 262144, 2, "T4");        // CPU short
    AddTestNode(fleet_, "small-mem", 64000, 4096, 2, "T4");         // memory short
    AddTestNode(fleet_, "one-gpu", 64000, 262144, 1, "T4");         // too few GPUs
    t4_only_ = *fleet_.models().ParseAllowed("T4");
  }

  Workload TwoT4s() const {
    return Workload{.name = "job",
                    .cpu_milli = 4000,
                    .mem_mib = 8192,
                    .gpu_count = 2,
                    .gpu_milli = 1000,
                    .allowed_models = t4_only_};
  }

  Fleet fleet_;
  ModelMask t4_only_ = 0;
  Rng rng_{1};
};

TEST_F(PackerFilterTest, EachRejectionIsCountedUnderThePluginThatRejected) {
  Packer packer(EveryNodeTies());
  const Decision d = packer.Schedule(fleet_, TwoT4s(), rng_);

  EXPECT_FALSE(d.placed);
  EXPECT_FALSE(d.placement.valid());
  EXPECT_EQ(d.feasible_nodes, 0);
  ASSERT_EQ(d.rejections.size(), 4u);
  EXPECT_EQ(d.rejections[0].plugin, "GpuModel");
  EXPECT_EQ(d.rejections[0].nodes, 2);  // v100-node and cpu-node
  EXPECT_EQ(d.rejections[1].plugin, "CpuFit");
  EXPECT_EQ(d.rejections[1].nodes, 1);
  EXPECT_EQ(d.rejections[2].plugin, "MemoryFit");
  EXPECT_EQ(d.rejections[2].nodes, 1);
  EXPECT_EQ(d.rejections[3].plugin, "GpuFit");
  EXPECT_EQ(d.rejections[3].nodes, 1);
  for (const auto& r : d.rejections) EXPECT_EQ(r.first_reason, "") << "reasons were not asked for";
}

TEST_F(PackerFilterTest, ReasonsNameTheFirstRejectedNodeOfEachPlugin) {
  Packer packer(EveryNodeTies());
  const Decision d = packer.Schedule(fleet_, TwoT4s(), rng_, PackerOptions{true});

  ASSERT_EQ(d.rejections.size(), 4u);
  EXPECT_EQ(d.rejections[0].first_reason, "node v100-node has V100M32, workload allows T4");
  EXPECT_EQ(d.rejections[1].first_reason, "node small-cpu: CPU 2000m free < 4000m");
  EXPECT_EQ(d.rejections[2].first_reason, "node small-mem: memory 4096 MiB free < 8192 MiB");
  EXPECT_EQ(d.rejections[3].first_reason, "node one-gpu: 1 GPUs with 1000 milli free, 2 needed");
}

TEST_F(PackerFilterTest, ExplainSaysWhichPluginsRejectedHowManyNodesAndWhy) {
  Packer packer(EveryNodeTies());
  const std::string why = packer.Schedule(fleet_, TwoT4s(), rng_, PackerOptions{true}).Explain();

  EXPECT_THAT(why, AllOf(HasSubstr("no node fits"),
                         HasSubstr("GpuModel rejected 2 nodes (node v100-node has V100M32"),
                         HasSubstr("CpuFit rejected 1 node (node small-cpu"),
                         HasSubstr("MemoryFit rejected 1 node (node small-mem"),
                         HasSubstr("GpuFit rejected 1 node (node one-gpu")));
}

TEST_F(PackerFilterTest, AWorkloadGoesToTheOnlyNodeThatPassesEveryFilter) {
  const int32_t fits = AddTestNode(fleet_, "fits", 64000, 262144, 4, "T4");
  Packer packer(EveryNodeTies());
  const Decision d = packer.Schedule(fleet_, TwoT4s(), rng_);

  ASSERT_TRUE(d.placed) << d.Explain();
  EXPECT_EQ(d.placement.node, fits);
  EXPECT_THAT(d.placement.gpus, ElementsAre(0, 1));  // whole GPUs: the first free ones
  EXPECT_EQ(d.feasible_nodes, 1);
  EXPECT_THAT(d.Explain(), HasSubstr("placed on node index 5"));
}

TEST(PackerTest, ScheduleDoesNotChangeTheFleet) {
  Fleet fleet;
  AddTestNode(fleet, "n0", 8000, 8192, 2, "T4");
  const std::string before = StateOf(fleet);
  Packer packer(EveryNodeTies());
  Rng rng(1);
  const Workload w{.cpu_milli = 1000, .gpu_count = 1, .gpu_milli = 500};
  ASSERT_TRUE(packer.Schedule(fleet, w, rng).placed);
  EXPECT_EQ(StateOf(fleet), before);
}

TEST(PackerTest, CustomFiltersReplaceTheDefaults) {
  class RejectOddNodes final : public FilterPlugin {
   public:
    std::string_view name() const override { return "EvenOnly"; }
    bool Filter(const Fleet&, const Workload&, int32_t node, std::string* reason) const override {
      if (node % 2 == 0) return true;
      if (reason) *reason = "node " + std::to_string(node) + " is odd";
      return false;
    }
  };
  Fleet fleet;
  for (int i = 0; i < 4; ++i) AddTestNode(fleet, "n" + std::to_string(i), 1000, 1000);
  std::vector<std::unique_ptr<FilterPlugin>> filters;
  filters.push_back(std::make_unique<RejectOddNodes>());
  // Node 3 would score best, but it is filtered out; node 2 beats node 0.
  Packer packer(std::move(filters), PolicyOf({{0, 10}, {2, 20}, {3, 90}}));
  Rng rng(1);
  const Decision d = packer.Schedule(fleet, Workload{.cpu_milli = 1 << 30}, rng, {true});

  ASSERT_TRUE(d.placed);  // CpuFit is not among the filters any more
  EXPECT_EQ(d.placement.node, 2);
  ASSERT_EQ(d.rejections.size(), 1u);
  EXPECT_EQ(d.rejections[0].plugin, "EvenOnly");
  EXPECT_EQ(d.rejections[0].nodes, 2);
  EXPECT_EQ(d.rejections[0].first_reason, "node 1 is odd");
}

// --- scoring and ties ---

class PackerScoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 4; ++i) AddTestNode(fleet_, "n" + std::to_string(i), 8000, 8192, 2, "T4");
  }
  const Workload w_{.cpu_milli = 1000, .gpu_count = 1, .gpu_milli = 1000};
  Fleet fleet_;
  Rng rng_{1};
};

TEST_F(PackerScoreTest, TheHighestWeightedSumWins) {
  Policy p;
  p.name = "two-plugins";
  // node: 0     1     2     3
  // a:    100   0     50    50
  // b:    0     100   50    60
  // 0.5a + 2b = 50, 200, 125, 145 -> node 1 with 200.
  p.scores.push_back(WeightedScore{
      std::make_unique<TableScore>(std::map<int32_t, double>{{0, 100}, {2, 50}, {3, 50}}), 0.5});
  p.scores.push_back(WeightedScore{
      std::make_unique<TableScore>(std::map<int32_t, double>{{1, 100}, {2, 50}, {3, 60}}), 2});
  Packer packer(std::move(p));
  const Decision d = packer.Schedule(fleet_, w_, rng_);
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.placement.node, 1);
  EXPECT_DOUBLE_EQ(d.score, 200);
  EXPECT_EQ(d.feasible_nodes, 4);
}

TEST_F(PackerScoreTest, WithoutRanksATieGoesToTheLowestNodeIndex) {
  Packer packer(EveryNodeTies());
  EXPECT_EQ(packer.Schedule(fleet_, w_, rng_).placement.node, 0);
}

TEST_F(PackerScoreTest, ATieGoesToTheTiedNodeOfLowestRank) {
  Packer packer(EveryNodeTies());
  packer.SetNodeRanks({3, 1, 0, 2});  // node 2 has rank 0
  EXPECT_EQ(packer.Schedule(fleet_, w_, rng_).placement.node, 2);
}

TEST_F(PackerScoreTest, RanksOnlyBreakTiesAmongTheBest) {
  // Nodes 1 and 3 tie on 80; node 2 has the lowest rank overall but a lower score.
  Packer packer(PolicyOf({{1, 80}, {3, 80}}, 10));
  packer.SetNodeRanks({1, 5, 0, 4});
  EXPECT_EQ(packer.Schedule(fleet_, w_, rng_).placement.node, 3);  // rank 4 < rank 5
}

TEST_F(PackerScoreTest, UniformTieBreakPicksOnlyAmongTheTiedNodes) {
  Packer packer(PolicyOf({{1, 80}, {3, 80}}, 10, TieBreak::kUniformRandom));
  std::map<int32_t, int> picks;
  for (int i = 0; i < 200; ++i) ++picks[packer.Schedule(fleet_, w_, rng_).placement.node];
  EXPECT_EQ(picks.size(), 2u);  // both tied nodes get picked, and nothing else does
  EXPECT_GT(picks[1], 0);
  EXPECT_GT(picks[3], 0);
}

// --- gangs ---

// Refuses every gang and records what it was shown.
class RefuseAll final : public PermitPlugin {
 public:
  std::string_view name() const override { return "RefuseAll"; }
  bool Permit(const Fleet& fleet, std::span<const Workload> gang,
              std::span<const Placement> placements, std::string* reason) const override {
    seen_members = gang.size();
    seen_placements = placements.size();
    seen_used_milli = fleet.GpuMilliUsed();
    *reason = "not today";
    return false;
  }
  mutable size_t seen_members = 0, seen_placements = 0;
  mutable int64_t seen_used_milli = 0;
};

class PackerGangTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AddTestNode(fleet_, "a", 32000, 65536, 2, "T4");
    AddTestNode(fleet_, "b", 32000, 65536, 2, "T4");
    // Something already running, so "as before" is not just "empty".
    PALADIN_ASSERT_OK(fleet_.Reserve(
        100, Workload{.cpu_milli = 1000, .gpu_count = 1, .gpu_milli = 300}, Placement{0, {0}}));
    before_ = StateOf(fleet_);
  }

  static Workload Member(const std::string& name, int gpus) {
    return Workload{
        .name = name, .cpu_milli = 4000, .mem_mib = 1024, .gpu_count = gpus, .gpu_milli = 1000};
  }

  Fleet fleet_;
  Rng rng_{1};
  std::string before_;
};

TEST_F(PackerGangTest, AGangThatFitsIsReservedUnderItsIds) {
  // One whole GPU free on a (GPU 0 is shared), two on b: room for three 1-GPU members.
  const std::vector<Workload> gang = {Member("m0", 1), Member("m1", 1), Member("m2", 1)};
  const std::vector<uint64_t> ids = {1, 2, 3};
  Packer packer(EveryNodeTies());
  std::vector<Placement> placements;
  PALADIN_ASSERT_OK(packer.ScheduleGang(fleet_, gang, ids, rng_, {}, &placements));

  ASSERT_EQ(placements.size(), 3u);
  for (uint64_t id : ids) EXPECT_TRUE(fleet_.IsReserved(id));
  EXPECT_EQ(fleet_.GpuMilliUsed(), 300 + 3 * 1000);
  // Members see each other: all three landed on different GPUs.
  EXPECT_EQ(fleet_.node(0).FullyFreeGpus() + fleet_.node(1).FullyFreeGpus(), 0);
}

TEST_F(PackerGangTest, WhenTheLastMemberDoesNotFitTheFleetIsExactlyAsBefore) {
  // Three whole GPUs are free; the members ask for 1 + 2 + 1.
  const std::vector<Workload> gang = {Member("m0", 1), Member("m1", 2), Member("last", 1)};
  const std::vector<uint64_t> ids = {1, 2, 3};
  Packer packer(EveryNodeTies());
  std::vector<Placement> placements = {Placement{7, {7}}};
  const Status st = packer.ScheduleGang(fleet_, gang, ids, rng_, {}, &placements);

  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("gang member last does not fit"),
                                  HasSubstr("GpuFit rejected 2 nodes")));
  EXPECT_EQ(StateOf(fleet_), before_);
  for (uint64_t id : ids) EXPECT_FALSE(fleet_.IsReserved(id));
  EXPECT_TRUE(fleet_.IsReserved(100));
  EXPECT_EQ(placements.size(), 1u) << "placements are only written on success";
}

TEST_F(PackerGangTest, ARefusingPermitPluginRollsTheGangBack) {
  const std::vector<Workload> gang = {Member("m0", 1), Member("m1", 2)};
  const std::vector<uint64_t> ids = {1, 2};
  Packer packer(EveryNodeTies());
  RefuseAll refuse;
  const Status st = packer.ScheduleGang(fleet_, gang, ids, rng_, {&refuse}, nullptr);

  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("RefuseAll refused the gang: not today"));
  // The permit plugin ran after every member was reserved.
  EXPECT_EQ(refuse.seen_members, 2u);
  EXPECT_EQ(refuse.seen_placements, 2u);
  EXPECT_EQ(refuse.seen_used_milli, 300 + 3000);
  EXPECT_EQ(StateOf(fleet_), before_);
  for (uint64_t id : ids) EXPECT_FALSE(fleet_.IsReserved(id));
}

// Reserving an id that is already held with the same placement is a no-op, so a gang member
// given the id of a running workload "reserves" nothing; rolling the gang back must still not
// release the running workload.
TEST_F(PackerGangTest, ARollbackNeverReleasesAReservationTheGangDidNotMake) {
  // Reservation 100 (set up above) holds 300 milli of GPU 0 on node a. The first member has the
  // same shape and id; the best-fit selector puts it on that same GPU, the same placement.
  const std::vector<Workload> gang = {
      Workload{.name = "reuses-100", .cpu_milli = 1000, .gpu_count = 1, .gpu_milli = 300},
      Member("too-big", 8)};
  const std::vector<uint64_t> ids = {100, 1};
  Packer packer(EveryNodeTies());
  const Status st = packer.ScheduleGang(fleet_, gang, ids, rng_, {}, nullptr);

  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(fleet_.IsReserved(100)) << "the running workload's reservation was released";
  EXPECT_EQ(StateOf(fleet_), before_);
}

// At most one member per node: the best-fit policy would put both members on b (its two free
// GPUs fit tighter), but MaxPerNode keeps the second member off the node holding the first.
TEST_F(PackerGangTest, MaxPerNodeSpreadsTheMembersInsteadOfRefusingThem) {
  const std::vector<Workload> gang = {Member("r0", 1), Member("r1", 1)};
  const std::vector<uint64_t> ids = {1, 2};
  Packer packer(EveryNodeTies());
  MaxPerNodePermit one(1);
  std::vector<Placement> placements;
  PALADIN_ASSERT_OK(packer.ScheduleGang(fleet_, gang, ids, rng_, {&one}, &placements));
  ASSERT_EQ(placements.size(), 2u);
  EXPECT_NE(placements[0].node, placements[1].node);
}

TEST_F(PackerGangTest, MaxPerNodeRollsBackAGangWithMoreMembersThanNodesAllow) {
  // Two nodes, at most one member each: the third member has nowhere to go.
  const std::vector<Workload> gang = {Member("r0", 1), Member("r1", 1), Member("r2", 1)};
  const std::vector<uint64_t> ids = {1, 2, 3};
  Packer packer(EveryNodeTies());
  MaxPerNodePermit one(1);
  const Status st = packer.ScheduleGang(fleet_, gang, ids, rng_, {&one}, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("gang member r2 does not fit"),
                                  HasSubstr("MaxPerNode kept it off 2 nodes")));
  EXPECT_EQ(StateOf(fleet_), before_);
  for (uint64_t id : ids) EXPECT_FALSE(fleet_.IsReserved(id));
}

TEST(MaxPerNodePermitTest, RefusesPlacementsOverTheBoundAndSaysWhere) {
  Fleet fleet;
  AddTestNode(fleet, "a", 32000, 65536, 4, "T4");
  AddTestNode(fleet, "b", 32000, 65536, 4, "T4");
  MaxPerNodePermit two(2);
  const std::vector<Workload> gang(3);
  std::string reason;
  // Worked out: a holds 2 (allowed), b holds 1.
  const std::vector<Placement> ok = {Placement{0, {0}}, Placement{0, {1}}, Placement{1, {0}}};
  EXPECT_TRUE(two.Permit(fleet, gang, ok, &reason));
  // a holds 3 > 2.
  const std::vector<Placement> bad = {Placement{0, {0}}, Placement{0, {1}}, Placement{0, {2}}};
  EXPECT_FALSE(two.Permit(fleet, gang, bad, &reason));
  EXPECT_EQ(reason, "node a would hold more than 2 members");
  EXPECT_TRUE(two.AllowsMemberOn(fleet, std::span(ok).first(1), 0));
  EXPECT_FALSE(two.AllowsMemberOn(fleet, std::span(ok).first(2), 0));
  EXPECT_TRUE(two.AllowsMemberOn(fleet, std::span(ok).first(2), 1));
}

TEST_F(PackerGangTest, IdsMustMatchTheGang) {
  const std::vector<Workload> gang = {Member("m0", 1), Member("m1", 1)};
  const std::vector<uint64_t> ids = {1};
  Packer packer(EveryNodeTies());
  EXPECT_EQ(packer.ScheduleGang(fleet_, gang, ids, rng_, {}, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(StateOf(fleet_), before_);
}

// --- GPU selectors ---

TEST(GpuSelectorTest, BestFitTakesTheTightestSharedGpuAndTheFirstFreeWholeOnes) {
  Fleet fleet;
  AddTestNode(fleet, "n", 64000, 65536, 4, "T4");
  PALADIN_ASSERT_OK(fleet.Reserve(1, Workload{.gpu_count = 1, .gpu_milli = 200}, {0, {0}}));
  PALADIN_ASSERT_OK(fleet.Reserve(2, Workload{.gpu_count = 1, .gpu_milli = 600}, {0, {2}}));
  // Free milli per GPU: 800, 1000, 400, 1000.
  Rng rng(1);
  auto best_fit = MakeBestFitGpuSelector();
  EXPECT_THAT(best_fit->Select(fleet, Workload{.gpu_count = 1, .gpu_milli = 300}, 0, rng),
              ElementsAre(2));  // 400 is the tightest that holds 300
  EXPECT_THAT(best_fit->Select(fleet, Workload{.gpu_count = 1, .gpu_milli = 500}, 0, rng),
              ElementsAre(0));  // 400 is too small; 800 next
  EXPECT_THAT(best_fit->Select(fleet, Workload{.gpu_count = 2, .gpu_milli = 1000}, 0, rng),
              ElementsAre(1, 3));
  EXPECT_THAT(best_fit->Select(fleet, Workload{.gpu_count = 3, .gpu_milli = 1000}, 0, rng),
              ElementsAre());
  EXPECT_THAT(FirstFreeGpus(fleet.node(0), Workload{.gpu_count = 1, .gpu_milli = 1000}),
              ElementsAre(1));
}

TEST(GpuSelectorTest, RandomOnlyPicksGpusThatFit) {
  Fleet fleet;
  AddTestNode(fleet, "n", 64000, 65536, 4, "T4");
  PALADIN_ASSERT_OK(fleet.Reserve(1, Workload{.gpu_count = 1, .gpu_milli = 800}, {0, {1}}));
  // Free milli per GPU: 1000, 200, 1000, 1000. A 500-milli request fits GPUs 0, 2 and 3.
  Rng rng(3);
  auto random = MakeRandomGpuSelector();
  std::map<int16_t, int> picks;
  for (int i = 0; i < 300; ++i) {
    const auto gpus = random->Select(fleet, Workload{.gpu_count = 1, .gpu_milli = 500}, 0, rng);
    ASSERT_EQ(gpus.size(), 1u);
    ++picks[gpus[0]];
  }
  EXPECT_EQ(picks.count(1), 0u);
  EXPECT_EQ(picks.size(), 3u);
}

}  // namespace
}  // namespace paladin::core
