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

// FGD ignores host memory; with mem_fraction > 0 a typical task is also blocked where the node's
// free memory is under mem_fraction x the shape's mean memory. Node: 2 free GPUs, 10240 MiB.
// Shapes (weight 0.5 each): A = 1 whole GPU, mean 40960 MiB; B = 500 milli, mean 8192 MiB.
//   fraction 0:   both fit                                  -> 0
//   fraction 0.5: A needs 20480 > 10240: its 2000 idle count; B needs 4096 -> 0.5 * 2000 = 1000
//   fraction 1:   B needs 8192 <= 10240, still fits         -> 1000
//   fraction 0.5 with 3000 MiB free: B (4096) is blocked too -> 2000
TEST(FragAmountTest, HostMemoryCountsOnlyWithAMemoryFraction) {
  NodeView v = View(0, 64000, {1000, 1000});
  v.mem_left = 10240;
  TypicalWorkload a = Typical(1000, 1, 1000, 0.5);
  a.mem_mib = 40960;
  TypicalWorkload b = Typical(1000, 1, 500, 0.5);
  b.mem_mib = 8192;
  const std::vector<TypicalWorkload> typical = {a, b};
  EXPECT_DOUBLE_EQ(FragAmount(v, typical), 0);
  EXPECT_DOUBLE_EQ(FragAmount(v, typical, 0.5), 1000);
  EXPECT_DOUBLE_EQ(FragAmount(v, typical, 1.0), 1000);
  v.mem_left = 3000;
  EXPECT_DOUBLE_EQ(FragAmount(v, typical, 0.5), 2000);
  EXPECT_DOUBLE_EQ(FragAmount(v, typical), 0) << "FGD's own measure never looks at memory";
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

// --- StrandedAmount ---
//
// For each shape: copies = how many it could still take by GPU (1-GPU shapes: the sum over GPUs
// of floor(free share / shape share); k-GPU shapes: whole free GPUs / k), capped by CPU
// (cpu_left / cpu, when the shape asks CPU) and by host memory (mem_left / mem, when it asks
// memory). usable = copies x k x share; stranded = idle - usable; weighted by freq. CPU-only
// shapes and shapes the node's model does not serve use nothing: all idle GPU is stranded.

// Like View() but with host memory too (StrandedAmount reads mem_left; View() leaves it 0).
NodeView ViewWithMemory(ModelId model, int64_t cpu_left, int64_t mem_left,
                        std::initializer_list<int32_t> milli_left) {
  NodeView v = View(model, cpu_left, milli_left);
  v.mem_left = mem_left;
  return v;
}

TypicalWorkload ShapeWithMemory(int64_t cpu, int64_t mem, int32_t gpus, int32_t milli,
                                double freq = 1.0) {
  TypicalWorkload t = Typical(cpu, gpus, milli, freq);
  t.mem_mib = mem;
  return t;
}

constexpr int64_t kPlentyMem = int64_t{1} << 30;

TEST(StrandedAmountTest, Table) {
  struct Case {
    const char* what;
    NodeView v;
    std::vector<TypicalWorkload> shapes;
    double expected;
  };
  const Case cases[] = {
      // 4 free GPUs would take 4 copies of (4000m, 1 GPU), but 10000m CPU feeds only
      // floor(10000 / 4000) = 2: usable 2 x 1000, stranded 4000 - 2000 = 2000.
      {"CPU allows only k copies",
       ViewWithMemory(0, 10000, kPlentyMem, {1000, 1000, 1000, 1000}),
       {Typical(4000, 1, 1000)},
       2000},
      // The same node with CPU for all four: nothing stranded.
      {"CPU allows every copy",
       ViewWithMemory(0, 16000, kPlentyMem, {1000, 1000, 1000, 1000}),
       {Typical(4000, 1, 1000)},
       0},
      // Shared shape: GPUs give 2 + 2 = 4 copies of 500, CPU 6000 / 2000 = 3: usable 1500 of
      // 2000 idle, 500 stranded.
      {"CPU caps a shared shape",
       ViewWithMemory(0, 6000, kPlentyMem, {1000, 1000}),
       {Typical(2000, 1, 500)},
       500},
      // GPU shares alone: floor(1000/500) + floor(700/500) + floor(300/500) = 2 + 1 + 0 = 3
      // copies, usable 1500 of 2000 idle: the 200 left on GPU 1 and the 300 on GPU 2 strand.
      {"share remainders strand",
       ViewWithMemory(0, 64000, kPlentyMem, {1000, 700, 300}),
       {Typical(1000, 1, 500)},
       500},
      // Host memory: 40000 MiB / 16384 MiB = 2 copies of 4: 2000 stranded.
      {"memory allows only k copies",
       ViewWithMemory(0, 64000, 40000, {1000, 1000, 1000, 1000}),
       {ShapeWithMemory(1000, 16384, 1, 1000)},
       2000},
      // A shape with no memory request is not limited by memory, even with none left.
      {"no memory asked, none needed",
       ViewWithMemory(0, 64000, 0, {1000, 1000}),
       {ShapeWithMemory(1000, 0, 1, 1000)},
       0},
      // A shape with no CPU request is not limited by CPU, even with none left.
      {"no CPU asked, none needed",
       ViewWithMemory(0, 0, kPlentyMem, {1000, 1000}),
       {Typical(0, 1, 500)},
       0},
      // GPUs 4 copies, memory 40000 / 16384 = 2, CPU 8000 / 8000 = 1: the tightest wins,
      // 1 copy, usable 1000 of 4000, 3000 stranded.
      {"the tighter of CPU and memory",
       ViewWithMemory(0, 8000, 40000, {1000, 1000, 1000, 1000}),
       {ShapeWithMemory(8000, 16384, 1, 1000)},
       3000},
      // 2-GPU shape, GPUs {1000, 1000, 1000, 600}: 3 whole free GPUs -> 3 / 2 = 1 copy, usable
      // 2000 of 3600 idle: 1600 stranded (the third free GPU and the 600).
      {"multi-GPU shapes count whole free GPUs",
       ViewWithMemory(0, 64000, kPlentyMem, {1000, 1000, 1000, 600}),
       {Typical(1000, 2, 1000)},
       1600},
      // Partly used GPUs never hold a multi-GPU copy even together: {900, 900, 900, 900} has
      // 3600 idle milli and 0 whole free GPUs.
      {"partly used GPUs hold no multi-GPU copy",
       ViewWithMemory(0, 64000, kPlentyMem, {900, 900, 900, 900}),
       {Typical(1000, 2, 1000)},
       3600},
      // 4-GPU shape on 3 whole free GPUs: 0 copies, all 3600 idle strands.
      {"too few whole GPUs",
       ViewWithMemory(0, 64000, kPlentyMem, {1000, 1000, 1000, 600}),
       {Typical(1000, 4, 1000)},
       3600},
      // 2-GPU shape with CPU for one copy on 4 free GPUs: min(4 / 2, 12000 / 8000) = 1 copy,
      // 2000 of 4000 stranded.
      {"CPU caps a multi-GPU shape",
       ViewWithMemory(0, 12000, kPlentyMem, {1000, 1000, 1000, 1000}),
       {Typical(8000, 2, 1000)},
       2000},
      // CPU-only shapes use no GPU: everything idle (1000 + 500) strands.
      {"CPU-only shape strands everything",
       ViewWithMemory(0, 64000, kPlentyMem, {1000, 500}),
       {Typical(1000, 0, 0)},
       1500},
      // Allowed only on model 1; the node is model 0.
      {"model mismatch strands everything",
       ViewWithMemory(0, 64000, kPlentyMem, {1000, 1000}),
       {Typical(1000, 1, 500, 1.0, 0b10)},
       2000},
      {"model match",
       ViewWithMemory(1, 64000, kPlentyMem, {1000, 1000}),
       {Typical(1000, 1, 500, 1.0, 0b10)},
       0},
      // A model-pinned shape on a node whose model is unknown cannot run there.
      {"pinned shape, node without a model",
       ViewWithMemory(kNoModel, 64000, kPlentyMem, {1000, 1000}),
       {Typical(1000, 1, 500, 1.0, 0b1)},
       2000},
      // Weighted: 0.25 x 2000 (the CPU-limited 1-GPU shape) + 0.75 x 4000 (CPU-only).
      {"frequency weighted",
       ViewWithMemory(0, 10000, kPlentyMem, {1000, 1000, 1000, 1000}),
       {Typical(4000, 1, 1000, 0.25), Typical(1000, 0, 0, 0.75)},
       0.25 * 2000 + 0.75 * 4000},
      {"no idle GPU", ViewWithMemory(0, 0, 0, {0, 0}), {Typical(4000, 1, 500)}, 0},
      {"no GPUs at all", ViewWithMemory(kNoModel, 64000, kPlentyMem, {}), {Typical(1000, 0, 0)}, 0},
      {"no shapes", ViewWithMemory(0, 64000, kPlentyMem, {1000}), {}, 0},
  };
  for (const Case& c : cases) {
    EXPECT_DOUBLE_EQ(StrandedAmount(c.v, c.shapes), c.expected) << c.what;
  }
}

// Where FGD sees nothing (a typical task still fits once), stranding sees that CPU runs out
// after a few copies: 4 free GPUs, CPU for 2 tasks of (4000m, 1 GPU).
TEST(StrandedAmountTest, SeesCpuRunningOutAfterTheFirstCopyWhereFragAmountDoesNot) {
  const NodeView v = ViewWithMemory(0, 10000, kPlentyMem, {1000, 1000, 1000, 1000});
  const std::vector<TypicalWorkload> shape = {Typical(4000, 1, 1000)};
  EXPECT_DOUBLE_EQ(FragAmount(v, shape), 0);
  EXPECT_DOUBLE_EQ(StrandedAmount(v, shape), 2000);
}

// StrandedAmount is the stricter measure (frag.h): on any node and for any shapes it is at least
// FragAmount and at most the idle GPU. Checked on random nodes and shapes.
TEST(StrandedAmountTest, LiesBetweenFragAmountAndIdle) {
  uint64_t state = 12345;
  auto next = [&state](uint64_t n) {  // a small LCG: enough for a property sweep
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  const int32_t shares[] = {100, 250, 300, 500, 700, 1000};
  for (int trial = 0; trial < 2000; ++trial) {
    NodeView v;
    v.model = static_cast<ModelId>(next(2));
    v.cpu_left = 1000 * static_cast<int64_t>(next(33));
    v.mem_left = 4096 * static_cast<int64_t>(next(17));
    v.gpu_count = 1 + static_cast<int>(next(8));
    for (int i = 0; i < v.gpu_count; ++i) {
      v.milli_left[static_cast<size_t>(i)] =
          next(3) == 0 ? 1000 : 100 * static_cast<int32_t>(next(11));
      v.gpu_mem_left[static_cast<size_t>(i)] = NodeView::kUntrackedMemory;
    }
    std::vector<TypicalWorkload> shapes;
    const int count = 1 + static_cast<int>(next(4));
    for (int k = 0; k < count; ++k) {
      TypicalWorkload t;
      const uint64_t kind = next(4);
      t.gpu_count = kind == 0 ? 0 : kind == 1 ? 1 + static_cast<int32_t>(next(4)) : 1;
      t.gpu_milli = t.gpu_count == 0 ? 0 : t.gpu_count > 1 ? 1000 : shares[next(6)];
      t.cpu_milli = 1000 * static_cast<int64_t>(next(17));
      t.mem_mib = 4096 * static_cast<int64_t>(next(5));
      t.allowed_models = next(3) == 0 ? ModelMask{1} << next(2) : 0;
      t.count = 1;
      t.freq = 1.0 / count;
      shapes.push_back(t);
    }
    const double stranded = StrandedAmount(v, shapes);
    EXPECT_GE(stranded, FragAmount(v, shapes) - 1e-9) << "trial " << trial;
    EXPECT_LE(stranded, static_cast<double>(v.IdleMilli()) + 1e-9) << "trial " << trial;
    EXPECT_GE(stranded, 0) << "trial " << trial;
  }
}

}  // namespace
}  // namespace paladin::core
