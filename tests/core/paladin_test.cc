// paladin, the default packing policy (src/core/policies/paladin.cc), on hand-built fleets whose
// decisions are worked out in comments, then its contract on random fleets in both of its modes.
//
// The formulas, from paladin.cc (F = FragAmount, S = StrandedAmount, both in frag.h;
// sig(x) = 100 / (1 + e^(-x / 1000)); q(x, k) = k * floor(x / k)):
//   rho = (CPU per milli-GPU the shapes ask, weighted by count) / (CPU per milli-GPU the fleet has)
//   GPU-bound (rho < 0.95): trunc(sig(F_before - F_after)) + 0.9 * sig(q(S_before - S_after, 400))
//                           / 100, with F over ctx.typical (memory fraction 0.5: a shape is
//                           also blocked where free host memory < 0.5 x its mean memory) and S
//                           over GPU shapes weighted by count x GPUs per task;
//   CPU-bound (rho >= 0.95): sig(q((S + F)_before - (S + F)_after, 100)), over GPU shapes
//                           weighted by count;
//   equal scores go to the node of lowest rank (node index unless Packer::SetNodeRanks).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "fleet_testing.h"
#include "paladin/core/frag.h"
#include "paladin/core/packer.h"
#include "paladin/core/policies.h"
#include "paladin/core/rng.h"

namespace paladin::core {
namespace {

using test::AddTestNode;
using test::StateOf;
using ::testing::ElementsAre;

constexpr int64_t kPlentyMem = 1 << 20;  // MiB of host memory: never binds here

double Sig(double milli) { return 100.0 / (1.0 + std::exp(-milli / 1000)); }

// A shape of the workload, as the simulator learns it: `count` tasks of (cpu, gpus x milli).
TypicalWorkload Shape(int64_t cpu, int32_t gpus, int32_t milli, int64_t count, double freq) {
  return TypicalWorkload{
      .cpu_milli = cpu, .gpu_milli = milli, .gpu_count = gpus, .count = count, .freq = freq};
}

// FGD and paladin both see `shapes` (FGD's cut and the whole distribution are the same here).
PolicyContext ContextOf(std::vector<TypicalWorkload> shapes) {
  auto s = std::make_shared<const std::vector<TypicalWorkload>>(std::move(shapes));
  return PolicyContext{s, s};
}

Workload Task(std::string name, int64_t cpu, int32_t gpus, int32_t milli) {
  return Workload{.name = std::move(name), .cpu_milli = cpu, .gpu_count = gpus, .gpu_milli = milli};
}

Decision Decide(Policy policy, const Fleet& fleet, const Workload& w,
                std::vector<int32_t> ranks = {}) {
  Packer packer(std::move(policy));
  if (!ranks.empty()) packer.SetNodeRanks(std::move(ranks));
  Rng rng(1);
  return packer.Schedule(fleet, w, rng);
}

Policy Fgd(const PolicyContext& ctx) {
  auto p = MakePolicy("FGD", ctx);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

// --- (a) GPU-bound: FGD leads, stranding breaks its ties ---

// Shapes: (4000m, 1 GPU) only, so the workload asks 4 milli-CPU per milli-GPU. Fleet: "tight"
// (16000m, 4 GPUs) and "roomy" (32000m, 4 GPUs): 48000 / 8000 = 6 per milli-GPU. rho = 4 / 6
// = 0.67 < 0.95: GPU-bound.
//
// The task (8000m, 1 whole GPU), on either node, leaves 3 whole GPUs and at least 8000m CPU, so
// every typical task still fits: F stays 0, FGD's gain is 0 and its score is trunc(sig(0)) = 50
// on both. FGD ties; the lower index ("tight") wins for FGD.
//
// Stranding: before, each node feeds 4 typical tasks (16000 / 4000 = 4, 32000 / 4000 = 8) with
// its 4 GPUs: S = 0. After, "tight" has 8000m for 8000 / 4000 = 2 tasks on 3 free GPUs: one GPU
// (1000) strands, gain -1000, q(-1000, 400) = -1200. "roomy" has 24000m for 6 tasks on 3 GPUs:
// S stays 0, gain 0.
//   tight: 50 + 0.9 * sig(-1200) / 100 = 50 + 0.9 * 0.2315 = 50.208
//   roomy: 50 + 0.9 * sig(0) / 100     = 50 + 0.45         = 50.45   <- paladin's choice
// The placement on "tight" would leave CPU for fewer copies of the typical task than GPUs.
Fleet TightAndRoomy() {
  Fleet fleet;
  AddTestNode(fleet, "tight", 16000, kPlentyMem, 4, "T4");
  AddTestNode(fleet, "roomy", 32000, kPlentyMem, 4, "T4");
  return fleet;
}

PolicyContext GpuBoundShapes() { return ContextOf({Shape(4000, 1, 1000, 10, 1.0)}); }

TEST(PaladinGpuBoundTest, AmongFgdTiesPrefersTheNodeWhoseStrandingGrowsLeast) {
  const Fleet fleet = TightAndRoomy();
  const PolicyContext ctx = GpuBoundShapes();
  const Workload w = Task("cpu-heavy", 8000, 1, 1000);

  const Decision fgd = Decide(Fgd(ctx), fleet, w);
  ASSERT_TRUE(fgd.placed) << fgd.Explain();
  EXPECT_EQ(fgd.placement.node, 0) << "FGD ties at 50 and takes the lowest index";
  EXPECT_EQ(fgd.score, 50);

  const Decision d = Decide(MakePaladinPolicy(ctx, PaladinParams{}), fleet, w);
  ASSERT_TRUE(d.placed) << d.Explain();
  EXPECT_EQ(d.placement.node, 1) << "paladin avoids stranding a GPU of 'tight'";
  EXPECT_THAT(d.placement.gpus, ElementsAre(0));
  EXPECT_NEAR(d.score, 50 + 0.9 * Sig(0) / 100, 1e-9);
}

TEST(PaladinGpuBoundTest, TheScoreIsFgdsIntegerPlusATieBreakerBelowOnePoint) {
  const Fleet fleet = TightAndRoomy();
  const PolicyContext ctx = GpuBoundShapes();
  const Workload w = Task("cpu-heavy", 8000, 1, 1000);
  Policy p = MakePaladinPolicy(ctx, PaladinParams{});
  ASSERT_EQ(p.scores.size(), 1u);
  ScorePlugin& score = *p.scores[0].plugin;
  EXPECT_NEAR(score.Score(fleet, w, 0), 50 + 0.9 * Sig(-1200) / 100, 1e-9);
  EXPECT_NEAR(score.Score(fleet, w, 1), 50 + 0.9 * Sig(0) / 100, 1e-9);
}

// Host memory counts in paladin's fragmentation, not in FGD's.
//
// Shape (4000m, 1 whole GPU), mean memory 30720 MiB. "small-mem" (32000m, 40960 MiB, 2 GPUs)
// and "big-mem" (32000m, 204800 MiB, 2 GPUs): rho = 4 / (64000 / 4000) = 0.25, GPU-bound. The
// task (4000m, 1 whole GPU, 30720 MiB) fits both.
//   FGD: after it, either node has a free GPU and 28000m: F stays 0, both score 50, node 0 wins.
//   paladin: a typical task is blocked where free memory < 0.5 x 30720 = 15360 MiB. After the
//     task, small-mem has 10240 MiB: its free GPU counts, F 0 -> 1000, trunc(sig(-1000)) = 26;
//     big-mem keeps 174080 MiB: F stays 0, 50. Stranding cannot tell them apart: small-mem
//     strands one GPU by memory before (40960 / 30720 = 1 copy on 2 GPUs) and after (0 copies
//     on 1 GPU), gain 0, as on big-mem; both tie-breakers are 0.9 * sig(0) / 100 = 0.45.
//   small-mem: 26.45, big-mem: 50.45 <- paladin's choice. With memory_fraction = 0 the scores
//   are FGD's and node 0 wins.
TEST(PaladinGpuBoundTest, HostMemoryCountsInItsFragmentation) {
  Fleet fleet;
  AddTestNode(fleet, "small-mem", 32000, 40960, 2, "T4");
  AddTestNode(fleet, "big-mem", 32000, 204800, 2, "T4");
  TypicalWorkload shape = Shape(4000, 1, 1000, 10, 1.0);
  shape.mem_mib = 30720;
  const PolicyContext ctx = ContextOf({shape});
  Workload w = Task("memory-heavy", 4000, 1, 1000);
  w.mem_mib = 30720;

  const Decision fgd = Decide(Fgd(ctx), fleet, w);
  ASSERT_TRUE(fgd.placed) << fgd.Explain();
  EXPECT_EQ(fgd.placement.node, 0);
  EXPECT_EQ(fgd.score, 50);

  Policy p = MakePaladinPolicy(ctx, PaladinParams{});
  ScorePlugin& score = *p.scores[0].plugin;
  EXPECT_NEAR(score.Score(fleet, w, 0), 26 + 0.9 * Sig(0) / 100, 1e-9);
  EXPECT_NEAR(score.Score(fleet, w, 1), 50 + 0.9 * Sig(0) / 100, 1e-9);
  const Decision d = Decide(MakePaladinPolicy(ctx, PaladinParams{}), fleet, w);
  ASSERT_TRUE(d.placed) << d.Explain();
  EXPECT_EQ(d.placement.node, 1) << "paladin keeps small-mem's second GPU usable";

  PaladinParams fgd_frag;
  fgd_frag.memory_fraction = 0;
  const Decision without = Decide(MakePaladinPolicy(ctx, fgd_frag), fleet, w);
  ASSERT_TRUE(without.placed) << without.Explain();
  EXPECT_EQ(without.placement.node, 0);
}

// Stranding gains are quantised to 400 milli, so near-ties still fall to the node rank (keeping
// placements concentrated).
//
// Shape (2000m, 1 GPU x 250 milli). "plenty" (64000m, 2 GPUs) and "short" (9000m, 2 GPUs):
// rho = (2000 / 250) / (73000 / 2000) = 8 / 36.5 = 0.22, GPU-bound. The task (1000m, 250 milli)
// leaves every GPU with >= 250 free and >= 2000m CPU: F = 0 before and after, FGD ties at 50.
//   plenty: copies min(8 by GPU, 32 by CPU) = 8 before, min(7, 63) = 7 after: S = 0 -> 0,
//           gain 0.
//   short:  copies min(8, 9000 / 2000 = 4) = 4 before (S = 2000 - 1000 = 1000), min(7,
//           8000 / 2000 = 4) = 4 after (S = 1750 - 1000 = 750): gain +250.
// q(250, 400) = 0 = q(0, 400): both score 50.45 and the lower rank wins. With a 100-milli
// quantum, q(250, 100) = 200 and "short" wins: its otherwise stranded GPU share gets used.
TEST(PaladinGpuBoundTest, QuantisedStrandingNearTiesFallToTheNodeRank) {
  Fleet fleet;
  AddTestNode(fleet, "plenty", 64000, kPlentyMem, 2, "T4");
  AddTestNode(fleet, "short", 9000, kPlentyMem, 2, "T4");
  const PolicyContext ctx = ContextOf({Shape(2000, 1, 250, 1, 1.0)});
  const Workload w = Task("quarter", 1000, 1, 250);

  const Decision by_index = Decide(MakePaladinPolicy(ctx, PaladinParams{}), fleet, w);
  ASSERT_TRUE(by_index.placed) << by_index.Explain();
  EXPECT_EQ(by_index.placement.node, 0);
  EXPECT_NEAR(by_index.score, 50.45, 1e-9);

  const Decision by_rank = Decide(MakePaladinPolicy(ctx, PaladinParams{}), fleet, w, {1, 0});
  ASSERT_TRUE(by_rank.placed) << by_rank.Explain();
  EXPECT_EQ(by_rank.placement.node, 1) << "node 1 has the lower rank";

  PaladinParams fine;
  fine.tiebreak_quantum_milli = 100;
  const Decision d = Decide(MakePaladinPolicy(ctx, fine), fleet, w);
  ASSERT_TRUE(d.placed) << d.Explain();
  EXPECT_EQ(d.placement.node, 1);
  EXPECT_NEAR(d.score, 50 + 0.9 * Sig(200) / 100, 1e-9);
}

// On a GPU-bound fleet FGD's integer score leads: for every feasible node, the integer part of
// paladin's score is FGD's score there (the shapes here carry no memory, so the memory fraction
// changes nothing). Checked for many tasks on a random fleet being filled.
TEST(PaladinGpuBoundTest, FgdsScoreLeadsOnEveryNode) {
  Fleet fleet;
  AddTestNode(fleet, "a", 96000, 262144, 8, "T4");
  AddTestNode(fleet, "b", 64000, 262144, 4, "T4");
  AddTestNode(fleet, "c", 128000, 262144, 8, "V100M32");
  AddTestNode(fleet, "d", 32000, 131072, 2, "V100M32");
  AddTestNode(fleet, "cpu", 64000, 262144);
  // The shapes ask (16000 + 24000 + 32000 + 2000) / (2000 + 3000 + 4000 + 250) = 8m per
  // milli-GPU; the fleet has 384000 / 22000 = 17.5: rho = 0.46, GPU-bound.
  const std::vector<TypicalWorkload> shapes = {
      Shape(4000, 1, 500, 4, 0.4), Shape(8000, 1, 1000, 3, 0.3), Shape(16000, 2, 1000, 2, 0.2),
      Shape(2000, 1, 250, 1, 0.1)};
  const PolicyContext ctx = ContextOf(shapes);
  Policy policy = MakePaladinPolicy(ctx, PaladinParams{});
  ScorePlugin& score = *policy.scores[0].plugin;
  const auto filters = DefaultFilters();

  Rng rng(31);
  Packer placer(MakePaladinPolicy(ctx, PaladinParams{}));
  int checked = 0;
  for (uint64_t id = 0; id < 60; ++id) {
    const int32_t shares[] = {250, 500, 1000};
    Workload w = Task("w" + std::to_string(id), 1000 * static_cast<int64_t>(1 + rng.Uniform(12)), 1,
                      shares[rng.Uniform(3)]);
    if (rng.Uniform(4) == 0) {
      w.gpu_count = 2;
      w.gpu_milli = 1000;
    } else if (rng.Uniform(8) == 0) {
      w.gpu_count = 0;
      w.gpu_milli = 0;
    }
    for (int32_t node = 0; node < static_cast<int32_t>(fleet.size()); ++node) {
      bool feasible = true;
      for (const auto& f : filters) feasible = feasible && f->Filter(fleet, w, node, nullptr);
      if (!feasible) continue;
      const double fgd = FgdScore(ViewOf(fleet.node(node)), w, shapes).score;
      const double ours = score.Score(fleet, w, node);
      EXPECT_EQ(std::trunc(ours), fgd) << w.name << " on " << fleet.node(node).name;
      EXPECT_LT(ours - fgd, 0.9 + 1e-12) << w.name << " on " << fleet.node(node).name;
      ++checked;
    }
    const Decision d = placer.Schedule(fleet, w, rng);
    if (d.placed) PALADIN_ASSERT_OK(fleet.Reserve(id, w, d.placement));
  }
  EXPECT_GT(checked, 60);
}

// --- (b) CPU-bound: stranding plus fragmentation leads ---

// Shapes: T1 = (12000m, 1 GPU) x3 and T2 = (8000m, 1 GPU x 500 milli) x3, weight 0.5 each. They
// ask (36000 + 24000) / (3000 + 1500) = 13.3m per milli-GPU. Fleet: "roomy" (24000m, 2 GPUs) and
// "short" (8000m, 2 GPUs): 32000 / 4000 = 8. rho = 1.67 >= 0.95: CPU-bound.
// The task: (8000m, 1 GPU x 500 milli).
//
//                    roomy before  roomy after   short before  short after
//   CPU left            24000         16000          8000           0
//   GPUs free        1000, 1000    500, 1000     1000, 1000     500, 1000
//   F for T1                0           500          2000 (*)     1500 (*)
//   F for T2                0             0             0         1500 (*)
//   S for T1     min(2,2)=2: 0   min(1,1)=1: 500  0 copies: 2000  0 copies: 1500
//   S for T2     min(4,3)=3: 500 min(3,2)=2: 500  min(4,1)=1: 1500 0 copies: 1500
//   (*) too little CPU for one copy: all idle GPU counts.
//   F (x0.5 each)           0           250          1000           1500
//   S (x0.5 each)         250           500          1750           1500
//
// FGD: roomy gains -250 -> trunc(sig(-250)) = 43; short gains -500 -> 37. FGD picks roomy.
// paladin, CPU-bound: S + F grows by 500 on roomy (q = -500 -> sig = 37.75) and by 250 on short
// (q(-250, 100) = -300 -> sig = 42.56). paladin picks short: its GPUs were stranded for T1 and
// most of T2 anyway, whereas on roomy the task eats the CPU of a copy of each shape.
Fleet RoomyAndShort() {
  Fleet fleet;
  AddTestNode(fleet, "roomy", 24000, kPlentyMem, 2, "T4");
  AddTestNode(fleet, "short", 8000, kPlentyMem, 2, "T4");
  return fleet;
}

PolicyContext CpuBoundShapes() {
  return ContextOf({Shape(12000, 1, 1000, 3, 0.5), Shape(8000, 1, 500, 3, 0.5)});
}

TEST(PaladinCpuBoundTest, CpuStrandingOverridesFgdsChoice) {
  const Fleet fleet = RoomyAndShort();
  const PolicyContext ctx = CpuBoundShapes();
  const Workload w = Task("half", 8000, 1, 500);

  const Decision fgd = Decide(Fgd(ctx), fleet, w);
  ASSERT_TRUE(fgd.placed) << fgd.Explain();
  EXPECT_EQ(fgd.placement.node, 0);
  EXPECT_EQ(fgd.score, 43);

  const Decision d = Decide(MakePaladinPolicy(ctx, PaladinParams{}), fleet, w);
  ASSERT_TRUE(d.placed) << d.Explain();
  EXPECT_EQ(d.placement.node, 1) << "paladin puts the task where its GPU was stranded anyway";
  EXPECT_NEAR(d.score, Sig(-300), 1e-9);

  // Not a tie broken by rank: with the ranks reversed the choice stands.
  const Decision reversed = Decide(MakePaladinPolicy(ctx, PaladinParams{}), fleet, w, {1, 0});
  EXPECT_EQ(reversed.placement.node, 1);
}

// The same fleet and task with the CPU-bound threshold out of reach: the GPU-bound mode follows
// FGD's integer score (43 on roomy, 37 on short) to roomy, with tie-breaker q(-250, 400) = -400:
// 43 + 0.9 * sig(-400) / 100 = 43.361. So the choice above is the CPU-bound mode's doing.
TEST(PaladinCpuBoundTest, TheModeFollowsTheCpuBoundRatio) {
  const Fleet fleet = RoomyAndShort();
  const PolicyContext ctx = CpuBoundShapes();
  const Workload w = Task("half", 8000, 1, 500);

  PaladinParams never_cpu_bound;
  never_cpu_bound.cpu_bound_ratio = 1e9;
  const Decision gpu_mode = Decide(MakePaladinPolicy(ctx, never_cpu_bound), fleet, w);
  ASSERT_TRUE(gpu_mode.placed) << gpu_mode.Explain();
  EXPECT_EQ(gpu_mode.placement.node, 0);
  EXPECT_NEAR(gpu_mode.score, 43 + 0.9 * Sig(-400) / 100, 1e-9);

  // rho = (60000 / 4500) / (32000 / 4000) = 13.33 / 8 = 1.67: a threshold of 1.6 is reached
  // (CPU-bound), 1.7 is not (GPU-bound).
  PaladinParams at_1_6;
  at_1_6.cpu_bound_ratio = 1.6;
  EXPECT_EQ(Decide(MakePaladinPolicy(ctx, at_1_6), fleet, w).placement.node, 1);
  PaladinParams at_1_7;
  at_1_7.cpu_bound_ratio = 1.7;
  EXPECT_EQ(Decide(MakePaladinPolicy(ctx, at_1_7), fleet, w).placement.node, 0);
}

// The threshold is inclusive (rho >= cpu_bound_ratio). Shape (8000m, 1 GPU); two nodes of
// (32000m, 4 GPUs): 64000 / 8000 = 8m per milli-GPU, as the shape asks: rho = 1 exactly.
// "busy" already runs a CPU-only task of 12000m (20000m left, CPU for 2 typical tasks on 4 GPUs:
// S = 2000). The task (4000m, 1 GPU) there leaves 16000m for 2 tasks on 3 GPUs: S = 1000, gain
// +1000 (F stays 0 everywhere: CPU >= 8000m and whole GPUs). On "idle" S stays 0, gain 0.
//   CPU-bound: busy sig(1000) = 73.1, idle sig(0) = 50.
//   GPU-bound: FGD ties at 50; busy 50 + 0.9 * sig(q(1000, 400) = 800) / 100 = 50.62.
// Both modes pick "busy"; the score tells which mode decided.
TEST(PaladinCpuBoundTest, RhoEqualToTheThresholdIsCpuBound) {
  Fleet fleet;
  AddTestNode(fleet, "idle", 32000, kPlentyMem, 4, "T4");
  AddTestNode(fleet, "busy", 32000, kPlentyMem, 4, "T4");
  PALADIN_ASSERT_OK(fleet.Reserve(1, Task("cpu-job", 12000, 0, 0), Placement{1, {}}));
  const PolicyContext ctx = ContextOf({Shape(8000, 1, 1000, 5, 1.0)});
  const Workload w = Task("light", 4000, 1, 1000);

  PaladinParams at_one;
  at_one.cpu_bound_ratio = 1.0;
  for (const PaladinParams& params : {PaladinParams{}, at_one}) {
    const Decision d = Decide(MakePaladinPolicy(ctx, params), fleet, w);
    ASSERT_TRUE(d.placed) << d.Explain();
    EXPECT_EQ(d.placement.node, 1);
    EXPECT_NEAR(d.score, Sig(1000), 1e-9) << "threshold " << params.cpu_bound_ratio;
  }
  PaladinParams above_one;
  above_one.cpu_bound_ratio = 1.01;
  const Decision d = Decide(MakePaladinPolicy(ctx, above_one), fleet, w);
  ASSERT_TRUE(d.placed) << d.Explain();
  EXPECT_EQ(d.placement.node, 1);
  EXPECT_NEAR(d.score, 50 + 0.9 * Sig(800) / 100, 1e-9);

  // FGD sees nothing here (0 gain on both) and takes the lowest index.
  EXPECT_EQ(Decide(Fgd(ctx), fleet, w).placement.node, 0);
}

// One packer may decide for several fleets (policy_contract_test.cc). The mode depends on the
// fleet's capacities, so a packer that first decided for a GPU-bound fleet must still treat a
// CPU-bound fleet as CPU-bound: its decisions there must be a fresh packer's.
TEST(PaladinCpuBoundTest, APackerReusedOnAnotherFleetChoosesTheModeFromThatFleet) {
  const PolicyContext ctx = CpuBoundShapes();
  const Workload w = Task("half", 8000, 1, 500);
  Fleet gpu_bound;  // 256000m for 2000 milli-GPU: 128m per milli-GPU, rho = 0.1
  AddTestNode(gpu_bound, "big", 256000, kPlentyMem, 2, "T4");

  Packer reused(MakePaladinPolicy(ctx, PaladinParams{}));
  Rng rng(1);
  ASSERT_TRUE(reused.Schedule(gpu_bound, w, rng).placed);
  const Decision again = reused.Schedule(RoomyAndShort(), w, rng);
  const Decision fresh = Decide(MakePaladinPolicy(ctx, PaladinParams{}), RoomyAndShort(), w);
  ASSERT_TRUE(fresh.placed);
  ASSERT_TRUE(again.placed);
  EXPECT_EQ(again.placement.node, fresh.placement.node)
      << "the reused packer kept the first fleet's GPU-bound mode";
  EXPECT_EQ(again.score, fresh.score);
}

// --- (c) legal placements in both modes ---

// CPU-poorer nodes than the contract suite's, so that both of paladin's modes are exercised.
Fleet RandomFleet(uint64_t seed) {
  return test::RandomMixedFleet(seed, {16000, 32000, 64000, 128000});
}
std::vector<Workload> RandomWorkloads(uint64_t seed, int count) {
  return test::RandomMixedWorkloads(seed, count, 1000, /*two_models=*/false);
}

PolicyContext ContextFromWorkloads(const std::vector<Workload>& ws) {
  TypicalOptions all;
  all.coverage = 1.0;
  return PolicyContext{
      std::make_shared<const std::vector<TypicalWorkload>>(BuildTypicalWorkloads(ws)),
      std::make_shared<const std::vector<TypicalWorkload>>(BuildTypicalWorkloads(ws, all))};
}

struct ModeCase {
  const char* name;
  double cpu_bound_ratio;  // 0: always CPU-bound; huge: never; 0.95: paladin's default
};
void PrintTo(const ModeCase& c, std::ostream* os) {
  *os << c.name << " (cpu_bound_ratio " << c.cpu_bound_ratio << ")";
}

class PaladinModesTest : public ::testing::TestWithParam<ModeCase> {
 protected:
  Policy NewPolicy(const PolicyContext& ctx) const {
    PaladinParams params;
    params.cpu_bound_ratio = GetParam().cpu_bound_ratio;
    return MakePaladinPolicy(ctx, params);
  }
};

using test::Outcome;

TEST_P(PaladinModesTest, NothingGoesNegativeAndEveryPlacementIsLegal) {
  for (uint64_t seed : {1, 2, 3}) {
    Fleet fleet = RandomFleet(100 + seed);
    const auto workloads = RandomWorkloads(200 + seed, 250);
    Packer packer(NewPolicy(ContextFromWorkloads(workloads)));
    Rng rng(seed);
    int placed = 0;
    for (size_t i = 0; i < workloads.size(); ++i) {
      const Workload& w = workloads[i];
      const Decision d = packer.Schedule(fleet, w, rng);
      if (!d.placed) continue;
      ++placed;
      ASSERT_TRUE(ModelAllowed(w, fleet.node(d.placement.node))) << w.name;
      ASSERT_EQ(static_cast<int>(d.placement.gpus.size()), w.gpu_count) << w.name;
      PALADIN_ASSERT_OK(fleet.CheckPlacement(w, d.placement));
      PALADIN_ASSERT_OK(fleet.Reserve(i, w, d.placement));
      EXPECT_GE(d.score, 0) << w.name;
      EXPECT_LE(d.score, 100) << w.name;
      const Node& n = fleet.node(d.placement.node);
      ASSERT_GE(n.cpu_left, 0) << n.name << " after " << w.name;
      ASSERT_GE(n.mem_left, 0) << n.name << " after " << w.name;
      for (const Gpu& g : n.gpus) {
        ASSERT_GE(g.milli_left, 0) << n.name << " after " << w.name;
        ASSERT_GE(g.mem_left_mib, 0) << n.name << " after " << w.name;
      }
    }
    EXPECT_GT(placed, 25) << "seed " << seed;
    EXPECT_LT(placed, 250) << "seed " << seed << ": the fleet should fill up";
  }
}

// GPU 0 has the share but not the memory; GPU 1 has both: GPU 1 it must be, in either mode.
TEST_P(PaladinModesTest, AGpuWithoutEnoughFreeMemoryIsNotChosen) {
  Fleet fleet;
  fleet.models().SetMemoryMib(*fleet.models().Intern("T4"), 15109);
  AddTestNode(fleet, "t4", 64000, 262144, 2, "T4");
  PALADIN_ASSERT_OK(fleet.Reserve(
      1, Workload{.gpu_count = 1, .gpu_milli = 600, .gpu_mem_mib = 14000}, Placement{0, {0}}));
  PALADIN_ASSERT_OK(fleet.Reserve(
      2, Workload{.gpu_count = 1, .gpu_milli = 300, .gpu_mem_mib = 1000}, Placement{0, {1}}));
  // GPU 0: 400 milli and 1109 MiB free; GPU 1: 700 milli and 14109 MiB free. Without memory,
  // GPU 0 is the tighter fit for 300 milli (and the one FGD-style scores prefer).
  const Workload w{.name = "needs-4000-mib",
                   .cpu_milli = 1000,
                   .gpu_count = 1,
                   .gpu_milli = 300,
                   .gpu_mem_mib = 4000};
  const PolicyContext ctx = ContextOf({Shape(4000, 1, 300, 1, 1.0)});
  const Decision d = Decide(NewPolicy(ctx), fleet, w);
  ASSERT_TRUE(d.placed) << d.Explain();
  EXPECT_THAT(d.placement.gpus, ElementsAre(1));
  PALADIN_EXPECT_OK(fleet.Reserve(3, w, d.placement));

  // A task asking more memory than any GPU has left is turned away.
  const Workload too_big{.cpu_milli = 1000, .gpu_count = 1, .gpu_milli = 100, .gpu_mem_mib = 15000};
  EXPECT_FALSE(Decide(NewPolicy(ctx), fleet, too_big).placed);
}

// Whole-GPU tasks take fully free GPUs that also hold the memory they ask.
TEST_P(PaladinModesTest, WholeGpusAreFullyFreeOnes) {
  Fleet fleet;
  AddTestNode(fleet, "n", 64000, 262144, 4, "T4");
  PALADIN_ASSERT_OK(
      fleet.Reserve(1, Workload{.gpu_count = 1, .gpu_milli = 100}, Placement{0, {1}}));
  const PolicyContext ctx = ContextOf({Shape(4000, 2, 1000, 1, 1.0)});
  const Decision d = Decide(NewPolicy(ctx), fleet, Task("two", 8000, 2, 1000));
  ASSERT_TRUE(d.placed) << d.Explain();
  EXPECT_THAT(d.placement.gpus, ElementsAre(0, 2));
}

TEST_P(PaladinModesTest, CpuOnlyWorkGetsNoGpus) {
  Fleet fleet;
  AddTestNode(fleet, "gpu", 64000, 262144, 2, "T4");
  AddTestNode(fleet, "cpu", 64000, 262144);
  const PolicyContext ctx = ContextOf({Shape(4000, 1, 500, 1, 1.0)});
  const Decision d = Decide(NewPolicy(ctx), fleet, Task("cpu-job", 4000, 0, 0));
  ASSERT_TRUE(d.placed) << d.Explain();
  EXPECT_TRUE(d.placement.gpus.empty());
}

// --- (d) deterministic ---

TEST_P(PaladinModesTest, TheSameInputsGiveTheSameDecisions) {
  const Fleet pristine = RandomFleet(9);
  const auto workloads = RandomWorkloads(10, 250);
  auto run = [&](Fleet& fleet) {
    Packer packer(NewPolicy(ContextFromWorkloads(workloads)));
    Rng rng(7);
    std::vector<Outcome> out;
    for (size_t i = 0; i < workloads.size(); ++i) {
      const Decision d = packer.Schedule(fleet, workloads[i], rng);
      out.push_back({d.placed, d.placement.node, d.placement.gpus, d.score});
      if (d.placed) {
        EXPECT_TRUE(fleet.Reserve(i, workloads[i], d.placement).ok());
      }
    }
    return out;
  };
  Fleet first = pristine;
  Fleet second = pristine;
  const std::vector<Outcome> a = run(first);
  const std::vector<Outcome> b = run(second);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(a[i] == b[i]) << "decision " << i << " differs";
  EXPECT_EQ(StateOf(first), StateOf(second));
}

INSTANTIATE_TEST_SUITE_P(Modes, PaladinModesTest,
                         ::testing::Values(ModeCase{"Default", 0.95},
                                           ModeCase{"AlwaysCpuBound", 0.0},
                                           ModeCase{"NeverCpuBound", 1e9}),
                         [](const ::testing::TestParamInfo<ModeCase>& param_info) {
                           return std::string(param_info.param.name);
                         });

// With no whole-distribution shapes paladin falls back to FGD's typical cut.
TEST(PaladinContextTest, WithoutShapesItUsesTheTypicalCut) {
  const Fleet fleet = TightAndRoomy();
  PolicyContext ctx = GpuBoundShapes();
  ctx.shapes = nullptr;
  const Decision d =
      Decide(MakePaladinPolicy(ctx, PaladinParams{}), fleet, Task("cpu-heavy", 8000, 1, 1000));
  ASSERT_TRUE(d.placed) << d.Explain();
  EXPECT_EQ(d.placement.node, 1);
}

}  // namespace
}  // namespace paladin::core
