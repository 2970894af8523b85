// GPU fragmentation as FGD defines it: typical workloads learnt from a trace, and the idle GPU
// share of a node that those typical workloads could not use.
#include "paladin/core/frag.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <initializer_list>
#include <vector>

namespace paladin::core {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// --- BuildTypicalWorkloads ---

Workload Shape(int64_t cpu, int32_t gpus, int32_t milli, ModelMask models = 0) {
  return Workload{
      .cpu_milli = cpu, .gpu_count = gpus, .gpu_milli = milli, .allowed_models = models};
}

// 10 workloads: A x5, B x3, C x1, D x1.
std::vector<Workload> TenWorkloads() {
  const Workload a = Shape(4000, 1, 500), b = Shape(8000, 1, 1000), c = Shape(2000, 0, 0),
                 d = Shape(16000, 2, 1000);
  return {a, a, a, a, a, b, b, b, c, d};
}

TEST(BuildTypicalWorkloadsTest, KeepsTheMostFrequentShapesUntilCoverage) {
  // Coverage 0.8 of 10 = 8: A (5) then B (5 + 3 = 8) reach it.
  const auto typical = BuildTypicalWorkloads(TenWorkloads(), {.coverage = 0.8});
  ASSERT_EQ(typical.size(), 2u);
  EXPECT_EQ(typical[0].cpu_milli, 4000);
  EXPECT_EQ(typical[0].gpu_milli, 500);
  EXPECT_EQ(typical[0].count, 5);
  EXPECT_DOUBLE_EQ(typical[0].freq, 5.0 / 8);
  EXPECT_EQ(typical[1].cpu_milli, 8000);
  EXPECT_EQ(typical[1].count, 3);
  EXPECT_DOUBLE_EQ(typical[1].freq, 3.0 / 8);
}

TEST(BuildTypicalWorkloadsTest, FrequenciesSumToOne) {
  for (double coverage : {0.3, 0.5, 0.8, 0.9, 0.95, 1.0}) {
    const auto typical = BuildTypicalWorkloads(TenWorkloads(), {.coverage = coverage});
    double sum = 0;
    for (const auto& t : typical) sum += t.freq;
    EXPECT_DOUBLE_EQ(sum, 1.0) << "coverage " << coverage;
  }
}

TEST(BuildTypicalWorkloadsTest, EqualCountsAreOrderedLargerShapeFirst) {
  // Coverage 0.95 of 10 = 9.5 needs all four shapes; C and D both occur once and D (16000m)
  // comes before C (2000m).
  const auto typical = BuildTypicalWorkloads(TenWorkloads(), {.coverage = 0.95});
  ASSERT_EQ(typical.size(), 4u);
  EXPECT_EQ(typical[2].cpu_milli, 16000);
  EXPECT_EQ(typical[3].cpu_milli, 2000);
  EXPECT_DOUBLE_EQ(typical[0].freq, 0.5);
  EXPECT_DOUBLE_EQ(typical[3].freq, 0.1);
}

TEST(BuildTypicalWorkloadsTest, CpuOnlyWorkCanBeLeftOut) {
  // Without C, 9 workloads: coverage 1.0 keeps A, B, D with frequencies 5/9, 3/9, 1/9.
  const auto typical =
      BuildTypicalWorkloads(TenWorkloads(), {.coverage = 1.0, .include_cpu_only = false});
  ASSERT_EQ(typical.size(), 3u);
  for (const auto& t : typical) EXPECT_GT(t.gpu_count, 0);
  EXPECT_DOUBLE_EQ(typical[2].freq, 1.0 / 9);
}

TEST(BuildTypicalWorkloadsTest, ShapesIgnoreMemoryButNotAllowedModels) {
  Workload small_mem = Shape(4000, 1, 500);
  small_mem.mem_mib = 1024;
  Workload big_mem = small_mem;
  big_mem.mem_mib = 65536;
  const Workload pinned = Shape(4000, 1, 500, /*models=*/0b10);
  const auto typical =
      BuildTypicalWorkloads(std::vector<Workload>{small_mem, big_mem, pinned}, {.coverage = 1.0});
  ASSERT_EQ(typical.size(), 2u);
  EXPECT_EQ(typical[0].count, 2);
  EXPECT_EQ(typical[0].allowed_models, 0u);
  EXPECT_EQ(typical[1].allowed_models, 0b10u);
}

TEST(BuildTypicalWorkloadsTest, NoWorkloadsNoTypicalOnes) {
  EXPECT_THAT(BuildTypicalWorkloads(std::vector<Workload>{}), IsEmpty());
}

// --- FragAmount ---

NodeView View(ModelId model, int64_t cpu_left, std::initializer_list<int32_t> milli_left) {
  NodeView v;
  v.model = model;
  v.cpu_left = cpu_left;
  for (int32_t m : milli_left) v.milli_left[static_cast<size_t>(v.gpu_count++)] = m;
  return v;
}

TypicalWorkload Typical(int64_t cpu, int32_t gpus, int32_t milli, double freq = 1.0,
                        ModelMask models = 0) {
  return TypicalWorkload{.cpu_milli = cpu,
                         .gpu_milli = milli,
                         .gpu_count = gpus,
                         .allowed_models = models,
                         .count = 1,
                         .freq = freq};
}

TEST(FragAmountTest, Table) {
  struct Case {
    const char* what;
    NodeView v;
    std::vector<TypicalWorkload> typical;
    double expected;
  };
  const Case cases[] = {
      // The task needs 4000m, the node has 2000m: all idle GPU (1000 + 500) counts.
      {"typical task lacks CPU", View(0, 2000, {1000, 500}), {Typical(4000, 1, 500)}, 1500},
      // GPU 0 holds 500; GPUs 1 and 2 (300 + 200 free) do not: they are stranded.
      {"GPUs with too little free share",
       View(0, 64000, {1000, 300, 200}),
       {Typical(1000, 1, 500)},
       500},
      // A typical task that needs no GPU can use none of the idle GPU.
      {"CPU-only typical task", View(0, 64000, {1000, 500}), {Typical(1000, 0, 0)}, 1500},
      // Allowed only on model 1; the node is model 0.
      {"wrong model", View(0, 64000, {1000, 1000}), {Typical(1000, 1, 500, 1.0, 0b10)}, 2000},
      {"right model", View(1, 64000, {1000, 1000}), {Typical(1000, 1, 500, 1.0, 0b10)}, 0},
      // Needs two whole GPUs; only one is free: all 1600 idle milli count.
      {"too few GPUs hold the task", View(0, 64000, {1000, 600}), {Typical(1000, 2, 1000)}, 1600},
      // Weighted: 0.5 * 500 (stranded for the 500-milli task) + 0.5 * 1500 (CPU-only task).
      {"frequency weighted",
       View(0, 64000, {1000, 300, 200}),
       {Typical(1000, 1, 500, 0.5), Typical(1000, 0, 0, 0.5)},
       0.5 * 500 + 0.5 * 1500},
      {"no idle GPU", View(0, 0, {0, 0}), {Typical(4000, 1, 500)}, 0},
      {"no GPUs at all", View(kNoModel, 64000, {}), {Typical(1000, 0, 0)}, 0},
  };
  for (const Case& c : cases) EXPECT_DOUBLE_EQ(FragAmount(c.v, c.typical), c.expected) << c.what;
}

TEST(FragAmountTest, ViewOfCopiesWhatFragmentationLooksAt) {
  Node n;
  n.model = 3;
  n.cpu_left = 12345;
  n.gpus = {Gpu{700, 0, 0}, Gpu{0, 0, 0}, Gpu{1000, 0, 0}};
  const NodeView v = ViewOf(n);
  EXPECT_EQ(v.model, 3);
  EXPECT_EQ(v.cpu_left, 12345);
  EXPECT_EQ(v.gpu_count, 3);
  EXPECT_EQ(v.IdleMilli(), 1700);
}

TEST(FragAmountTest, AfterTakesTheWorkloadsCpuAndGpuShare) {
  const NodeView v = View(0, 8000, {1000, 1000, 600});
  const Workload w{.cpu_milli = 3000, .gpu_count = 1, .gpu_milli = 400};
  const int16_t gpu = 2;
  const NodeView after = After(v, w, std::span<const int16_t>(&gpu, 1));
  EXPECT_EQ(after.cpu_left, 5000);
  EXPECT_EQ(after.milli_left[2], 200);
  EXPECT_EQ(after.milli_left[0], 1000);
  EXPECT_EQ(v.milli_left[2], 600) << "the original view is untouched";
}

TEST(TightestGpusTest, PicksTheLeastFreeGpusThatFitLowestIndexFirst) {
  const NodeView v = View(0, 8000, {1000, 300, 600, 600});
  EXPECT_THAT(TightestGpus(v, Workload{.gpu_count = 1, .gpu_milli = 500}), ElementsAre(2));
  EXPECT_THAT(TightestGpus(v, Workload{.gpu_count = 2, .gpu_milli = 500}), ElementsAre(2, 3));
  EXPECT_THAT(TightestGpus(v, Workload{.gpu_count = 1, .gpu_milli = 1000}), ElementsAre(0));
  EXPECT_THAT(TightestGpus(v, Workload{.gpu_count = 2, .gpu_milli = 1000}), IsEmpty());
}

}  // namespace
}  // namespace paladin::core
