// Table tests of the policies' score functions on hand-built nodes. Each expected value is
// worked out in a comment from the formulas in src/core/policies/baselines.cc and fgd.cc, with
// the artifact's normalisation constants: 128000 milli-CPU and 8000 milli-GPU per node.
#include "paladin/core/policies.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "fleet_testing.h"

namespace paladin::core {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A T4 node (model 0) with `cpu_left` and one GPU per entry of `milli_left`.
Node NodeWith(int64_t cpu_left, std::initializer_list<int32_t> milli_left) {
  Node n;
  n.name = "n";
  n.cpu_milli = n.cpu_left = cpu_left;
  n.mem_mib = n.mem_left = 1 << 20;
  n.model = milli_left.size() > 0 ? 0 : kNoModel;
  for (int32_t m : milli_left) n.gpus.push_back(Gpu{m, 0, 0});
  return n;
}

NodeView ViewWith(int64_t cpu_left, std::initializer_list<int32_t> milli_left) {
  return ViewOf(NodeWith(cpu_left, milli_left));
}

Workload CpuOnly(int64_t cpu) { return Workload{.cpu_milli = cpu}; }
Workload Shared(int64_t cpu, int32_t milli) {
  return Workload{.cpu_milli = cpu, .gpu_count = 1, .gpu_milli = milli};
}
Workload Whole(int64_t cpu, int32_t gpus) {
  return Workload{.cpu_milli = cpu, .gpu_count = gpus, .gpu_milli = 1000};
}

struct ScoreCase {
  const char* what;
  Node node;
  Workload w;
  double expected;
};

// --- DotProduct: trunc(100 * (1 - (cpu_left/128000 * cpu/128000 + gpu_left/8000 * gpu/8000) / 2))

TEST(DotProductScoreTest, Table) {
  const ScoreCase cases[] = {
      // (0.5 * 0.0625 + 0.25 * 0.125) / 2 = 0.03125 -> trunc(96.875) = 96
      {"half-free node, 1 GPU", NodeWith(64000, {1000, 1000}), Whole(8000, 1), 96},
      // (1 * 0.5 + 0.125 * 0) / 2 = 0.25 -> 75
      {"CPU-only pod", NodeWith(128000, {1000}), CpuOnly(64000), 75},
      // (0.25 * 0.125 + 0.1875 * 0.0625) / 2 = 0.021484375 -> trunc(97.85) = 97
      {"shared pod", NodeWith(32000, {500, 1000, 0, 0}), Shared(16000, 500), 97},
      // (1 * 1 + 1 * 1) / 2 = 1 -> 0: the pod is exactly the free vector
      {"perfectly aligned", NodeWith(128000, {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}),
       Whole(128000, 8), 0},
      // CPU short -> 0
      {"CPU short", NodeWith(4000, {1000}), Whole(8000, 1), 0},
  };
  for (const ScoreCase& c : cases) EXPECT_EQ(DotProductScore(c.node, c.w), c.expected) << c.what;
}

// --- BestFit: trunc(100 * (1 - ((cpu_left - cpu)/128000 + (gpu_left - gpu)/8000) / 2))

TEST(BestFitScoreTest, Table) {
  const ScoreCase cases[] = {
      // (56000/128000 + 1000/8000) / 2 = (0.4375 + 0.125) / 2 = 0.28125 -> trunc(71.875) = 71
      {"half-free node, 1 GPU", NodeWith(64000, {1000, 1000}), Whole(8000, 1), 71},
      // (64000/128000 + 2000/8000) / 2 = (0.5 + 0.25) / 2 = 0.375 -> trunc(62.5) = 62
      {"2 of 4 GPUs", NodeWith(96000, {1000, 1000, 1000, 1000}), Whole(32000, 2), 62},
      // nothing left -> 100
      {"exact fit", NodeWith(16000, {500}), Shared(16000, 500), 100},
      // (128000/128000 + 8000/8000) / 2 = 1 -> 0
      {"empty full-size node, nothing asked",
       NodeWith(128000, {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}), CpuOnly(0), 0},
  };
  for (const ScoreCase& c : cases) EXPECT_EQ(BestFitScore(c.node, c.w), c.expected) << c.what;
}

// --- GpuClustering: base = 25 * (8000 - gpu_left) / 8000 (integer division), plus
//   75 when only this kind is here, 50 when this kind and others are, 25 on an empty node,
//   0 when only other kinds are.

Node WithAffinity(Node n, std::initializer_list<std::pair<int, int>> tag_counts) {
  for (auto [tag, count] : tag_counts) {
    n.affinity.count[static_cast<size_t>(tag)] = count;
    n.affinity.distinct += count > 0 ? 1 : 0;
  }
  return n;
}

TEST(GpuClusteringScoreTest, FourBands) {
  const ScoreCase cases[] = {
      // gpu_left 3500: base 25 * 4500 / 8000 = 14; only shared work here: 14 + 75 = 89
      {"only the same kind", WithAffinity(NodeWith(8000, {500, 1000, 1000, 1000}), {{0, 1}}),
       Shared(1000, 500), 89},
      // gpu_left 2500: base 25 * 5500 / 8000 = 17; shared and 1-GPU work: 17 + 50 = 67
      {"the same kind and others",
       WithAffinity(NodeWith(8000, {500, 0, 1000, 1000}), {{0, 1}, {1, 1}}), Shared(1000, 500), 67},
      // gpu_left 4000: base 25 * 4000 / 8000 = 12; empty: 12 + 25 = 37
      {"an empty node", NodeWith(8000, {1000, 1000, 1000, 1000}), Shared(1000, 500), 37},
      // gpu_left 2000: base 25 * 6000 / 8000 = 18; only 2-GPU work, the pod is shared: 18 + 0
      {"only other kinds", WithAffinity(NodeWith(8000, {0, 0, 1000, 1000}), {{2, 1}}),
       Shared(1000, 500), 18},
      // A 2-GPU pod matches tag 2: 18 + 75 = 93
      {"a 2-GPU pod among 2-GPU work", WithAffinity(NodeWith(8000, {0, 0, 1000, 1000}), {{2, 1}}),
       Whole(1000, 2), 93},
      {"CPU-only pods have no kind", NodeWith(8000, {1000, 1000}), CpuOnly(1000), 0},
  };
  for (const ScoreCase& c : cases) {
    EXPECT_EQ(GpuClusteringScore(c.node, c.w), c.expected) << c.what;
  }
}

// --- GpuPacking: an untouched node scores max(33 - free GPUs, free GPUs); a pod that must open
//   whole GPUs on a used node max(50 - GPUs opened, 33); a pod that fits in partly used GPUs
//   max(100 - (sum of their free %) / 10, 50).

TEST(GpuPackingScoreTest, ThreeCases) {
  const ScoreCase cases[] = {
      // untouched 4-GPU node: max(33 - 4, 4) = 29
      {"untouched 4-GPU node", NodeWith(8000, {1000, 1000, 1000, 1000}), Shared(1000, 500), 29},
      // untouched 8-GPU node: max(33 - 8, 8) = 25 (smaller nodes first)
      {"untouched 8-GPU node", NodeWith(8000, {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}),
       Whole(1000, 1), 25},
      // used node, 2 whole GPUs to open: max(50 - 2, 33) = 48
      {"opens 2 GPUs", NodeWith(8000, {500, 1000, 1000, 1000}), Whole(1000, 2), 48},
      // used node, 1 whole GPU to open: 49
      {"opens 1 GPU", NodeWith(8000, {500, 1000, 1000, 1000}), Whole(1000, 1), 49},
      // the shared pod's tightest fitting GPU is a free one (300 is too small): 49
      {"shared pod opens a GPU", NodeWith(8000, {300, 1000}), Shared(1000, 500), 49},
      // tightest fitting GPU has 600 free = 60%: max(100 - 60 / 10, 50) = 94
      {"shared pod in a used GPU", NodeWith(8000, {300, 600, 1000, 1000}), Shared(1000, 500), 94},
      // no GPU holds 500 -> 0
      {"does not fit", NodeWith(8000, {300, 200}), Shared(1000, 500), 0},
      {"CPU-only pod", NodeWith(8000, {1000}), CpuOnly(1000), 0},
  };
  for (const ScoreCase& c : cases) EXPECT_EQ(GpuPackingScore(c.node, c.w), c.expected) << c.what;
}

// --- FGD: trunc(100 * sigmoid((F(before) - F(after)) / 1000)), F from frag.h.

std::vector<TypicalWorkload> OnlyWholeGpuTasks(int64_t cpu = 0) {
  return {TypicalWorkload{
      .cpu_milli = cpu, .gpu_milli = 1000, .gpu_count = 1, .count = 1, .freq = 1.0}};
}

TEST(FgdScoreTest, ASharedPodTakesTheTightestGpuThatHoldsIt) {
  // Typical work takes whole GPUs. Free: 300, 600, 1000 (idle 1900); only GPU 2 holds a typical
  // task, so F(before) = 300 + 600 = 900.
  //   GPU 0 (300) cannot hold 500.
  //   GPU 1: free 300, 100, 1000 -> F = 400; drop 500 -> trunc(100 * sigmoid(0.5)) = 62.
  //   GPU 2: free 300, 600, 500 -> no GPU holds a typical task -> F = 1400; -> sigmoid(-0.5) = 37.
  const FgdChoice c =
      FgdScore(ViewWith(64000, {300, 600, 1000}), Shared(1000, 500), OnlyWholeGpuTasks());
  EXPECT_THAT(c.gpus, ElementsAre(1));
  EXPECT_EQ(c.score, 62);
  EXPECT_DOUBLE_EQ(c.frag_delta, -500);
}

TEST(FgdScoreTest, ASharedPodAvoidsStrandingWhatTypicalSharedTasksNeed) {
  // Typical work takes 500 milli. Free: 600, 1000; both hold 500, so F(before) = 0.
  //   GPU 0: free 100, 1000 -> 100 stranded; -> trunc(100 * sigmoid(-0.1)) = 47.
  //   GPU 1: free 600, 500 -> both still hold 500, F = 0 -> 50.
  const std::vector<TypicalWorkload> typical = {
      {.cpu_milli = 0, .gpu_milli = 500, .gpu_count = 1, .count = 1, .freq = 1.0}};
  const FgdChoice c = FgdScore(ViewWith(64000, {600, 1000}), Shared(1000, 500), typical);
  EXPECT_THAT(c.gpus, ElementsAre(1));
  EXPECT_EQ(c.score, 50);
  EXPECT_DOUBLE_EQ(c.frag_delta, 0);
}

TEST(FgdScoreTest, AWholeGpuPodIsChargedWithTheFirstFreeGpus) {
  // Free: 1000, 1000 with whole-GPU typical work: F(before) = 0; after GPU 0 is taken the other
  // still holds a typical task: F = 0 -> 50.
  const FgdChoice c = FgdScore(ViewWith(64000, {1000, 1000}), Whole(1000, 1), OnlyWholeGpuTasks());
  EXPECT_THAT(c.gpus, ElementsAre(0));
  EXPECT_EQ(c.score, 50);
}

TEST(FgdScoreTest, ACpuOnlyPodIsScoredByTheGpusItsCpuStrands) {
  // Typical work: 1 whole GPU and 8000m CPU. The node has 16000m and two free GPUs: F = 0.
  const NodeView v = ViewWith(16000, {1000, 1000});
  // 12000m leaves 4000m < 8000m: no typical task fits, all 2000 idle milli are stranded.
  //   trunc(100 * sigmoid(-2)) = trunc(11.92) = 11
  const FgdChoice big = FgdScore(v, CpuOnly(12000), OnlyWholeGpuTasks(8000));
  EXPECT_EQ(big.score, 11);
  EXPECT_DOUBLE_EQ(big.frag_delta, 2000);
  EXPECT_TRUE(big.gpus.empty());
  // 4000m leaves 12000m: typical tasks still fit, F stays 0 -> 50.
  const FgdChoice small = FgdScore(v, CpuOnly(4000), OnlyWholeGpuTasks(8000));
  EXPECT_EQ(small.score, 50);
  EXPECT_DOUBLE_EQ(small.frag_delta, 0);
  // A node without GPUs has nothing to strand -> 50.
  EXPECT_EQ(FgdScore(ViewWith(16000, {}), CpuOnly(12000), OnlyWholeGpuTasks(8000)).score, 50);
}

TEST(FgdScoreTest, APodThatDoesNotFitGetsNoGpus) {
  const FgdChoice shared = FgdScore(ViewWith(64000, {300}), Shared(1000, 500), OnlyWholeGpuTasks());
  EXPECT_TRUE(shared.gpus.empty());
  const FgdChoice whole = FgdScore(ViewWith(64000, {1000}), Whole(1000, 2), OnlyWholeGpuTasks());
  EXPECT_TRUE(whole.gpus.empty());
  EXPECT_EQ(whole.score, 0);
}

// --- the registry ---

TEST(MakePolicyTest, UnknownNameListsTheValidOnes) {
  auto p = MakePolicy("Tetris", PolicyContext{});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("unknown policy 'Tetris'"));
  for (const std::string& name : PolicyNames()) {
    EXPECT_THAT(p.status().message(), HasSubstr(name));
  }
}

TEST(MakePolicyTest, NamesAreCaseInsensitive) {
  const PolicyContext ctx{
      std::make_shared<const std::vector<TypicalWorkload>>(OnlyWholeGpuTasks())};
  struct Case {
    const char* given;
    const char* canonical;
  };
  for (const Case& c :
       {Case{"bestfit", "BestFit"}, Case{"BESTFIT", "BestFit"}, Case{"fgd", "FGD"},
        Case{"Paladin", "paladin"}, Case{"gpupacking", "GpuPacking"}, Case{"random", "Random"}}) {
    auto p = MakePolicy(c.given, ctx);
    PALADIN_ASSERT_OK(p);
    EXPECT_EQ(p->name, c.canonical) << c.given;
    auto canonical = CanonicalPolicyName(c.given);
    PALADIN_ASSERT_OK(canonical);
    EXPECT_EQ(*canonical, c.canonical);
  }
}

TEST(MakePolicyTest, EveryListedNameMakesAPolicyOfThatName) {
  const PolicyContext ctx{
      std::make_shared<const std::vector<TypicalWorkload>>(OnlyWholeGpuTasks())};
  EXPECT_THAT(PolicyNames(), ElementsAre("Random", "DotProduct", "GpuClustering", "GpuPacking",
                                         "BestFit", "FGD", "paladin"));
  for (const std::string& name : PolicyNames()) {
    auto p = MakePolicy(name, ctx);
    PALADIN_ASSERT_OK(p);
    EXPECT_EQ(p->name, name);
    EXPECT_FALSE(p->scores.empty()) << name;
    EXPECT_NE(p->gpu_selector, nullptr) << name;
  }
}

TEST(MakePolicyTest, FragmentationPoliciesNeedTheTypicalWorkloads) {
  for (const char* name : {"FGD", "paladin"}) {
    EXPECT_EQ(MakePolicy(name, PolicyContext{}).status().code(), StatusCode::kFailedPrecondition)
        << name;
    const PolicyContext empty{std::make_shared<const std::vector<TypicalWorkload>>()};
    EXPECT_EQ(MakePolicy(name, empty).status().code(), StatusCode::kFailedPrecondition) << name;
  }
}

}  // namespace
}  // namespace paladin::core
