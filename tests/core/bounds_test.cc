// How much room is left above a policy: ResourceUpperBoundPct (a bound no placement can beat) and
// OfflineSortedAllocPct (what placing the stream largest-first reaches). Expected bounds are
// worked out in comments from the relaxation in bounds.h: allocated GPU <= min(capacity, arrived
// GPU, best fractional choice of tasks within the GPU nodes' total CPU, the same for memory).
#include "paladin/core/bounds.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "fleet_testing.h"
#include "paladin/core/fgd_sim.h"
#include "paladin/core/frag.h"
#include "paladin/core/packer.h"
#include "paladin/core/policies.h"
#include "paladin/core/rng.h"

namespace paladin::core {
namespace {

using test::AddTestNode;
using ::testing::HasSubstr;

constexpr int64_t kPlentyMem = 1 << 20;  // MiB: host memory that never binds

Workload Task(int64_t cpu, int32_t gpus, int32_t milli, int64_t mem = 0) {
  return Workload{.cpu_milli = cpu, .mem_mib = mem, .gpu_count = gpus, .gpu_milli = milli};
}

std::vector<Workload> Repeat(const Workload& w, int n) { return std::vector<Workload>(n, w); }

std::vector<Workload> Concat(std::vector<Workload> a, const std::vector<Workload>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

PolicyContext ContextFor(const std::vector<Workload>& workloads) {
  TypicalOptions all;
  all.coverage = 1.0;
  return PolicyContext{
      std::make_shared<const std::vector<TypicalWorkload>>(BuildTypicalWorkloads(workloads)),
      std::make_shared<const std::vector<TypicalWorkload>>(BuildTypicalWorkloads(workloads, all))};
}

// --- ResourceUpperBoundPct: worked examples ---

TEST(ResourceUpperBoundPctTest, CpuBinds) {
  // 1 node, 8 GPUs, 16000m CPU. 8 tasks of (8000m, 1 GPU): GPU alone would allow all 8, but
  // the node's CPU feeds only 16000 / 8000 = 2 of them: 2000 of 8000 milli-GPU = 25%.
  // (Dual: lambda = 1000 / 8000 gives 0.125 x 16000 = 2000.)
  Fleet fleet;
  AddTestNode(fleet, "n", 16000, kPlentyMem, 8, "T4");
  EXPECT_DOUBLE_EQ(ResourceUpperBoundPct(fleet, Repeat(Task(8000, 1, 1000), 8)), 25.0);
}

TEST(ResourceUpperBoundPctTest, MemoryBinds) {
  // 1 node, 4 GPUs, CPU to spare, 32768 MiB. 4 tasks of (1000m, 16384 MiB, 1 GPU): memory
  // holds 2 of them: 2000 of 4000 = 50%. CPU (4 x 1000 of 64000) does not bind.
  Fleet fleet;
  AddTestNode(fleet, "n", 64000, 32768, 4, "T4");
  EXPECT_DOUBLE_EQ(ResourceUpperBoundPct(fleet, Repeat(Task(1000, 1, 1000, 16384), 4)), 50.0);
}

TEST(ResourceUpperBoundPctTest, NothingBindsSoTheBoundIsTheArrivedGpuCappedAt100) {
  // 8 GPUs, CPU and memory to spare. 6 whole-GPU tasks arrive: 6000 of 8000 = 75%.
  Fleet fleet;
  AddTestNode(fleet, "n", 128000, kPlentyMem, 8, "T4");
  EXPECT_DOUBLE_EQ(ResourceUpperBoundPct(fleet, Repeat(Task(1000, 1, 1000, 1024), 6)), 75.0);
  // Shares count by their milli: 3 x 500 + 2 x 2 GPUs = 1500 + 4000 = 5500 -> 68.75%.
  EXPECT_DOUBLE_EQ(ResourceUpperBoundPct(fleet, Concat(Repeat(Task(1000, 1, 500), 3),
                                                       Repeat(Task(1000, 2, 1000), 2))),
                   68.75);
  // 12 whole GPUs arrive for 8: the capacity caps it at 100%.
  EXPECT_DOUBLE_EQ(ResourceUpperBoundPct(fleet, Repeat(Task(1000, 1, 1000, 1024), 12)), 100.0);
}

TEST(ResourceUpperBoundPctTest, TasksWithoutCpuCountFully) {
  // As in CpuBinds, 8 tasks of (8000m, 1 GPU) can add only 2000 on 16000m. 3 more tasks of
  // (0m, 1 GPU) need no CPU and count fully: 2000 + 3000 = 5000 of 8000 = 62.5%.
  // (Dual at lambda = 0.125: 0.125 x 16000 + 3000 = 5000; at lambda = 0: 11000.)
  Fleet fleet;
  AddTestNode(fleet, "n", 16000, kPlentyMem, 8, "T4");
  EXPECT_DOUBLE_EQ(ResourceUpperBoundPct(
                       fleet, Concat(Repeat(Task(8000, 1, 1000), 8), Repeat(Task(0, 1, 1000), 3))),
                   62.5);
  // Tasks asking neither CPU nor memory are bound by GPU alone: 8 of 8 = 100%.
  EXPECT_DOUBLE_EQ(ResourceUpperBoundPct(fleet, Repeat(Task(0, 1, 1000), 8)), 100.0);
}

TEST(ResourceUpperBoundPctTest, TheCpuRelaxationIsFractional) {
  // 8 GPUs, 20000m CPU. A = (8000m, 2 GPUs) gives 0.25 milli-GPU per milli-CPU, B = (8000m,
  // 1 GPU) gives 0.125. The best fractional choice spends CPU on A first.
  //   3 A + 4 B: 20000 / 8000 = 2.5 A = 5000 of 8000 = 62.5%.
  //     (Dual: lambda = 0.25 gives 0.25 x 20000 = 5000; lambda = 0.125 gives
  //     2500 + 3 x (2000 - 1000) = 5500; lambda = 0 gives all 10000 arrived.)
  //   2 A + 4 B: 2 A use 16000m for 4000, the last 4000m buy half a B: 4500 = 56.25%.
  //     (Dual: lambda = 0.125 gives 2500 + 2 x 1000 = 4500.)
  // Integral placements reach only 4000 in both cases: the bound is loose, never wrong.
  Fleet fleet;
  AddTestNode(fleet, "n", 20000, kPlentyMem, 8, "T4");
  const auto arrivals = Concat(Repeat(Task(8000, 2, 1000), 3), Repeat(Task(8000, 1, 1000), 4));
  EXPECT_DOUBLE_EQ(ResourceUpperBoundPct(fleet, arrivals), 62.5);
  const auto fewer_a = Concat(Repeat(Task(8000, 2, 1000), 2), Repeat(Task(8000, 1, 1000), 4));
  EXPECT_DOUBLE_EQ(ResourceUpperBoundPct(fleet, fewer_a), 56.25);
}

TEST(ResourceUpperBoundPctTest, CpuOnlyNodesAndTasksDoNotLoosenIt) {
  // CpuBinds plus a CPU-only node with 1,000,000m: GPU tasks cannot use that CPU, so the bound
  // stays 25%. CPU-only tasks ask no GPU: they change nothing either.
  Fleet fleet;
  AddTestNode(fleet, "n", 16000, kPlentyMem, 8, "T4");
  AddTestNode(fleet, "cpu", 1000000, kPlentyMem);
  const auto arrivals = Concat(Repeat(Task(8000, 1, 1000), 8), Repeat(Task(4000, 0, 0), 5));
  EXPECT_DOUBLE_EQ(ResourceUpperBoundPct(fleet, arrivals), 25.0);
}

TEST(ResourceUpperBoundPctTest, NoGpusOrNoTasks) {
  Fleet cpu_only;
  AddTestNode(cpu_only, "cpu", 64000, kPlentyMem);
  EXPECT_DOUBLE_EQ(ResourceUpperBoundPct(cpu_only, Repeat(Task(1000, 1, 1000), 2)), 0.0);
  Fleet fleet;
  AddTestNode(fleet, "n", 64000, kPlentyMem, 4, "T4");
  EXPECT_DOUBLE_EQ(ResourceUpperBoundPct(fleet, std::vector<Workload>{}), 0.0);
}

// --- ResourceUpperBoundPct: never below what a policy reaches ---

// 1 to 4 GPU nodes with CPU and memory from scarce to ample (so that each of GPU, CPU and memory
// binds in some fleets), sometimes a CPU-only node.
Fleet RandomFleet(Rng& rng) {
  Fleet fleet;
  const char* models[] = {"T4", "V100M32"};
  const int gpu_counts[] = {1, 2, 4, 8};
  const int nodes = 1 + static_cast<int>(rng.Uniform(4));
  for (int i = 0; i < nodes; ++i) {
    AddTestNode(fleet, "gpu-" + std::to_string(i), 8000 * static_cast<int64_t>(1 + rng.Uniform(8)),
                16384 * static_cast<int64_t>(1 + rng.Uniform(8)), gpu_counts[rng.Uniform(4)],
                models[rng.Uniform(2)]);
  }
  if (rng.Uniform(2) == 0) AddTestNode(fleet, "cpu", 64000, 262144);
  return fleet;
}

// CPU-only, shared and whole-GPU tasks, some asking no CPU or no memory, some pinned to a model.
std::vector<Workload> RandomStream(Rng& rng, int count) {
  std::vector<Workload> out;
  for (int i = 0; i < count; ++i) {
    Workload w;
    w.name = "t" + std::to_string(i);
    w.cpu_milli = 2000 * static_cast<int64_t>(rng.Uniform(9));  // 0..16000
    w.mem_mib = 4096 * static_cast<int64_t>(rng.Uniform(9));    // 0..32768
    const uint64_t kind = rng.Uniform(10);
    if (kind < 1) {
      // CPU-only
    } else if (kind < 6) {
      w.gpu_count = 1;
      w.gpu_milli = static_cast<int32_t>(100 * (1 + rng.Uniform(10)));  // 100..1000
    } else {
      w.gpu_count = 1 << rng.Uniform(3);  // 1, 2, 4
      w.gpu_milli = 1000;
    }
    if (w.gpu_count > 0 && rng.Uniform(4) == 0) w.allowed_models = ModelMask{1} << rng.Uniform(2);
    out.push_back(std::move(w));
  }
  return out;
}

// Places `arrivals` in order with `policy`, as RunFgdSim does; returns the final allocation %.
double PlaceAll(const Fleet& pristine, const std::vector<Workload>& arrivals,
                const std::string& policy, const PolicyContext& ctx, uint64_t seed) {
  auto made = MakePolicy(policy, ctx);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  if (!made.ok()) return 0;
  Packer packer(std::move(made).value());
  Fleet fleet = pristine;
  Rng rng(seed);
  for (size_t i = 0; i < arrivals.size(); ++i) {
    const Decision d = packer.Schedule(fleet, arrivals[i], rng);
    if (d.placed) {
      const Status st = fleet.Reserve(i, arrivals[i], d.placement);
      EXPECT_TRUE(st.ok()) << policy << ": " << st.ToString();
    }
  }
  return 100.0 * static_cast<double>(fleet.GpuMilliUsed()) /
         static_cast<double>(fleet.GpuMilliCapacity());
}

TEST(ResourceUpperBoundPctTest, NoPolicyEverExceedsItOnRandomFleetsAndStreams) {
  Rng rng(20240601);
  int binding = 0;  // trials where the bound is below both 100% and the arrived GPU
  for (int trial = 0; trial < 25; ++trial) {
    const Fleet fleet = RandomFleet(rng);
    const std::vector<Workload> arrivals =
        RandomStream(rng, 10 + static_cast<int>(rng.Uniform(40)));
    const double bound = ResourceUpperBoundPct(fleet, arrivals);
    int64_t arrived = 0;
    for (const Workload& w : arrivals) arrived += w.TotalGpuMilli();
    const double arrived_pct =
        100.0 * static_cast<double>(arrived) / static_cast<double>(fleet.GpuMilliCapacity());
    EXPECT_LE(bound, 100.0 + 1e-9) << "trial " << trial;
    EXPECT_LE(bound, arrived_pct + 1e-9) << "trial " << trial;
    if (bound < std::min(100.0, arrived_pct) - 1e-6) ++binding;

    const PolicyContext ctx = ContextFor(arrivals);
    for (const std::string& policy : PolicyNames()) {
      const double reached = PlaceAll(fleet, arrivals, policy, ctx, 100 + trial);
      EXPECT_LE(reached, bound + 1e-9) << policy << " trial " << trial;
    }
    auto offline = OfflineSortedAllocPct(fleet, arrivals, "paladin", ctx);
    PALADIN_ASSERT_OK(offline);
    EXPECT_LE(*offline, bound + 1e-9) << "offline, trial " << trial;
  }
  // The sweep must exercise the CPU and memory terms, not only min(100, arrived).
  EXPECT_GT(binding, 0);
}

TEST(ResourceUpperBoundPctTest, NoPolicyInTheFgdSimulationExceedsIt) {
  // RunFgdSim's stream for a seed is BuildFgdArrivals(trace, capacity, 1.3, seed): the bound of
  // that stream caps the run's final allocation.
  Rng rng(77);
  for (int trial = 0; trial < 4; ++trial) {
    const Fleet fleet = RandomFleet(rng);
    std::vector<Workload> trace = RandomStream(rng, 30);
    trace.push_back(Task(4000, 1, 500));  // at least one GPU task
    const uint64_t seed = 42 + static_cast<uint64_t>(trial);
    const auto arrivals = BuildFgdArrivals(trace, fleet.GpuMilliCapacity(), 1.3, seed);
    const double bound = ResourceUpperBoundPct(fleet, arrivals);
    for (const std::string& policy : PolicyNames()) {
      auto r = RunFgdSim(fleet, trace, policy, seed);
      PALADIN_ASSERT_OK(r);
      EXPECT_LE(r->final_alloc_pct, bound + 1e-9) << policy << " trial " << trial;
    }
  }
}

// --- OfflineSortedAllocPct ---

TEST(OfflineSortedAllocPctTest, AnUnknownPolicyIsAnError) {
  Fleet fleet;
  AddTestNode(fleet, "n", 64000, kPlentyMem, 4, "T4");
  const auto arrivals = Repeat(Task(1000, 1, 1000), 2);
  auto r = OfflineSortedAllocPct(fleet, arrivals, "Tetris", ContextFor(arrivals));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("Tetris"));
}

TEST(OfflineSortedAllocPctTest, FgdAndPaladinWithoutTypicalShapesAreAnError) {
  Fleet fleet;
  AddTestNode(fleet, "n", 64000, kPlentyMem, 4, "T4");
  const auto arrivals = Repeat(Task(1000, 1, 1000), 2);
  EXPECT_FALSE(OfflineSortedAllocPct(fleet, arrivals, "paladin", PolicyContext{}).ok());
  EXPECT_FALSE(OfflineSortedAllocPct(fleet, arrivals, "FGD", PolicyContext{}).ok());
}

// Two nodes of 2 GPUs and 8000m CPU each. The stream: two (8000m, 1 GPU) tasks, then two
// (0m, 2 GPUs) tasks.
//   Online, in arrival order, any policy: each 1-GPU task takes a whole node's CPU, so they end
//   up on different nodes; each node is left with 1 GPU and the 2-GPU tasks fit nowhere:
//   2000 of 4000 = 50%.
//   Offline, largest first: the 2-GPU tasks take both nodes whole; the 1-GPU tasks then fit
//   nowhere: 4000 of 4000 = 100%.
TEST(OfflineSortedAllocPctTest, LargestFirstBeatsAnArrivalOrderThatStrandsGpus) {
  Fleet fleet;
  AddTestNode(fleet, "a", 8000, kPlentyMem, 2, "T4");
  AddTestNode(fleet, "b", 8000, kPlentyMem, 2, "T4");
  const std::vector<Workload> arrivals = {Task(8000, 1, 1000), Task(8000, 1, 1000),
                                          Task(0, 2, 1000), Task(0, 2, 1000)};
  const PolicyContext ctx = ContextFor(arrivals);
  // The bound does not see node boundaries: 4000 of 4000, CPU-wise 2 x 1000 + 2 x 2000.
  EXPECT_DOUBLE_EQ(ResourceUpperBoundPct(fleet, arrivals), 100.0);
  for (const std::string& policy : PolicyNames()) {
    EXPECT_DOUBLE_EQ(PlaceAll(fleet, arrivals, policy, ctx, 1), 50.0) << policy << " online";
    auto offline = OfflineSortedAllocPct(fleet, arrivals, policy, ctx);
    PALADIN_ASSERT_OK(offline);
    EXPECT_DOUBLE_EQ(*offline, 100.0) << policy << " offline";
  }
}

TEST(OfflineSortedAllocPctTest, IsDeterministicAndIgnoresTheArrivalOrder) {
  Rng rng(5);
  const Fleet fleet = RandomFleet(rng);
  const std::vector<Workload> arrivals = RandomStream(rng, 40);
  const PolicyContext ctx = ContextFor(arrivals);
  auto first = OfflineSortedAllocPct(fleet, arrivals, "paladin", ctx);
  auto again = OfflineSortedAllocPct(fleet, arrivals, "paladin", ctx);
  PALADIN_ASSERT_OK(first);
  PALADIN_ASSERT_OK(again);
  EXPECT_EQ(*first, *again);

  // Every task below has its own GPU request, so the sorted order (and the result) cannot
  // depend on the order they are given in.
  Fleet small;
  AddTestNode(small, "n", 32000, kPlentyMem, 4, "T4");
  std::vector<Workload> distinct = {Task(1000, 1, 300), Task(2000, 1, 700), Task(3000, 2, 1000),
                                    Task(4000, 1, 1000), Task(5000, 1, 500)};
  auto forward = OfflineSortedAllocPct(small, distinct, "BestFit", ContextFor(distinct));
  std::reverse(distinct.begin(), distinct.end());
  auto backward = OfflineSortedAllocPct(small, distinct, "BestFit", ContextFor(distinct));
  PALADIN_ASSERT_OK(forward);
  PALADIN_ASSERT_OK(backward);
  EXPECT_EQ(*forward, *backward);
}

TEST(OfflineSortedAllocPctTest, DoesNotChangeTheFleetItIsGiven) {
  Fleet fleet;
  AddTestNode(fleet, "n", 64000, kPlentyMem, 4, "T4");
  const std::string before = test::StateOf(fleet);
  const auto arrivals = Repeat(Task(1000, 1, 1000), 3);
  auto r = OfflineSortedAllocPct(fleet, arrivals, "FGD", ContextFor(arrivals));
  PALADIN_ASSERT_OK(r);
  EXPECT_DOUBLE_EQ(*r, 75.0);
  EXPECT_EQ(test::StateOf(fleet), before);
}

}  // namespace
}  // namespace paladin::core
