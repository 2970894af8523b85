// The FGD trace experiment: the arrival stream, the simulation's determinism and curve shape,
// and a reproduction of the paper's headline numbers on the bundled Alibaba trace.
#include "paladin/core/fgd_sim.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "fleet_testing.h"
#include "paladin/core/policies.h"
#include "paladin/trace/alibaba_csv.h"

namespace paladin::core {
namespace {

using test::AddTestNode;
using ::testing::HasSubstr;

// 20 GPUs (20000 milli) on four nodes, one of them CPU-only.
Fleet SmallFleet() {
  Fleet fleet;
  AddTestNode(fleet, "t4-a", 64000, 262144, 8, "T4");
  AddTestNode(fleet, "t4-b", 64000, 262144, 8, "T4");
  AddTestNode(fleet, "v100", 96000, 262144, 4, "V100M32");
  AddTestNode(fleet, "cpu", 32000, 65536);
  return fleet;
}

// 12 tasks asking 10500 milli-GPU in all; the largest asks 4000.
std::vector<Workload> SmallTrace() {
  std::vector<Workload> trace;
  auto add = [&](int64_t cpu, int32_t gpus, int32_t milli, ModelMask models = 0) {
    trace.push_back(Workload{.name = "task-" + std::to_string(trace.size()),
                             .cpu_milli = cpu,
                             .mem_mib = 4096,
                             .gpu_count = gpus,
                             .gpu_milli = milli,
                             .allowed_models = models});
  };
  add(4000, 0, 0);          //    0
  add(2000, 0, 0);          //    0
  add(4000, 1, 250);        //  250
  add(4000, 1, 500);        //  500
  add(6000, 1, 500);        //  500
  add(8000, 1, 750);        //  750
  add(8000, 1, 1000);       // 1000
  add(8000, 1, 1000);       // 1000
  add(16000, 2, 1000);      // 2000
  add(32000, 4, 1000);      // 4000
  add(2000, 1, 200, 0b10);  //  200, V100M32 only
  add(2000, 1, 300, 0b01);  //  300, T4 only
  return trace;
}

int64_t TotalGpuMilli(const std::vector<Workload>& ws) {
  int64_t total = 0;
  for (const Workload& w : ws) total += w.TotalGpuMilli();
  return total;
}

std::vector<std::string> NamesOf(const std::vector<Workload>& ws) {
  std::vector<std::string> names;
  for (const Workload& w : ws) names.push_back(w.name);
  return names;
}

constexpr int64_t kLargestTask = 4000;

// --- BuildFgdArrivals ---

TEST(BuildFgdArrivalsTest, TopsUpToWithinOneTaskOfTheTarget) {
  const auto trace = SmallTrace();
  ASSERT_EQ(TotalGpuMilli(trace), 10500);
  // Target 1.3 x 20000 = 26000 > 10500: tasks are drawn again until the next would overshoot.
  for (uint64_t seed : {1, 2, 3, 42}) {
    const auto arrivals = BuildFgdArrivals(trace, 20000, 1.3, seed);
    const int64_t total = TotalGpuMilli(arrivals);
    EXPECT_LE(total, 26000) << "seed " << seed;
    EXPECT_GT(total, 26000 - kLargestTask) << "seed " << seed;
    // Every task of the trace is in the stream at least once.
    const auto names = NamesOf(arrivals);
    for (const Workload& w : trace) {
      EXPECT_NE(std::find(names.begin(), names.end(), w.name), names.end()) << w.name;
    }
  }
}

TEST(BuildFgdArrivalsTest, ThinsToWithinOneTaskOfTheTarget) {
  const auto trace = SmallTrace();
  // Target 1.3 x 4000 = 5200 < 10500: tasks are removed until the total is at most the target.
  for (uint64_t seed : {1, 2, 3, 42}) {
    const auto arrivals = BuildFgdArrivals(trace, 4000, 1.3, seed);
    const int64_t total = TotalGpuMilli(arrivals);
    EXPECT_LE(total, 5200) << "seed " << seed;
    EXPECT_GT(total, 5200 - kLargestTask) << "seed " << seed;
    // No task is repeated: thinning only removes.
    auto names = NamesOf(arrivals);
    std::sort(names.begin(), names.end());
    EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end()) << "seed " << seed;
  }
}

TEST(BuildFgdArrivalsTest, TheSameSeedGivesTheSameStream) {
  const auto trace = SmallTrace();
  for (int64_t capacity : {20000, 4000}) {
    const auto a = BuildFgdArrivals(trace, capacity, 1.3, 7);
    const auto b = BuildFgdArrivals(trace, capacity, 1.3, 7);
    EXPECT_EQ(NamesOf(a), NamesOf(b)) << "capacity " << capacity;
  }
}

TEST(BuildFgdArrivalsTest, DifferentSeedsGiveDifferentStreams) {
  const auto trace = SmallTrace();
  for (int64_t capacity : {20000, 4000}) {
    const auto a = BuildFgdArrivals(trace, capacity, 1.3, 7);
    const auto b = BuildFgdArrivals(trace, capacity, 1.3, 8);
    EXPECT_NE(NamesOf(a), NamesOf(b)) << "capacity " << capacity;
  }
}

TEST(BuildFgdArrivalsTest, AnEmptyTraceGivesAnEmptyStream) {
  EXPECT_TRUE(BuildFgdArrivals(std::vector<Workload>{}, 20000, 1.3, 1).empty());
}

// --- RunFgdSim ---

void ExpectSameCurve(const std::vector<double>& a, const std::vector<double>& b,
                     const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      EXPECT_TRUE(std::isnan(a[i]) && std::isnan(b[i])) << what << " at " << i << "%";
    } else {
      EXPECT_EQ(a[i], b[i]) << what << " at " << i << "%";  // bit-identical, not just close
    }
  }
}

TEST(RunFgdSimTest, EveryPolicyIsDeterministicForASeed) {
  const Fleet fleet = SmallFleet();
  const auto trace = SmallTrace();
  for (const std::string& policy : PolicyNames()) {
    auto first = RunFgdSim(fleet, trace, policy, 5);
    auto second = RunFgdSim(fleet, trace, policy, 5);
    PALADIN_ASSERT_OK(first);
    PALADIN_ASSERT_OK(second);
    EXPECT_EQ(first->policy, policy);
    EXPECT_EQ(first->placed, second->placed) << policy;
    EXPECT_EQ(first->final_alloc_pct, second->final_alloc_pct) << policy;
    ExpectSameCurve(first->alloc_pct, second->alloc_pct, policy + " alloc");
    ExpectSameCurve(first->frag_pct, second->frag_pct, policy + " frag");
  }
}

TEST(RunFgdSimTest, AllocationNeverFallsAndNeverExceedsCapacity) {
  const Fleet fleet = SmallFleet();
  const auto trace = SmallTrace();
  for (const std::string& policy : PolicyNames()) {
    for (uint64_t seed : {1, 2}) {
      auto r = RunFgdSim(fleet, trace, policy, seed);
      PALADIN_ASSERT_OK(r);
      const std::string what = policy + " seed " + std::to_string(seed);
      ASSERT_EQ(r->alloc_pct.size(), 131u) << what;  // arrived 0..130 %
      ASSERT_EQ(r->frag_pct.size(), 131u) << what;
      double last = 0;
      int defined = 0;
      for (size_t pct = 0; pct < r->alloc_pct.size(); ++pct) {
        const double a = r->alloc_pct[pct];
        if (std::isnan(a)) continue;
        ++defined;
        EXPECT_GE(a, last) << what << " falls at " << pct << "%";
        EXPECT_LE(a, 100.0) << what << " at " << pct << "%";
        last = a;
      }
      EXPECT_GT(defined, 50) << what;
      EXPECT_LE(r->final_alloc_pct, 100.0) << what;
      EXPECT_GE(r->final_alloc_pct, last) << what;
      EXPECT_LE(r->placed, r->arrivals) << what;
    }
  }
}

TEST(RunFgdSimTest, EveryPolicySeesTheSameStreamForASeed) {
  const Fleet fleet = SmallFleet();
  const auto trace = SmallTrace();
  const auto expected = BuildFgdArrivals(trace, fleet.GpuMilliCapacity(), 1.3, 9);
  for (const std::string& policy : PolicyNames()) {
    auto r = RunFgdSim(fleet, trace, policy, 9);
    PALADIN_ASSERT_OK(r);
    EXPECT_EQ(r->arrivals, static_cast<int64_t>(expected.size())) << policy;
  }
}

TEST(RunFgdSimTest, AnInjectedClockTimesEachDecision) {
  int64_t now = 0;
  FgdSimOptions options;
  options.clock_ns = [&now] { return now += 5; };  // every reading is 5 ns after the last
  auto r = RunFgdSim(SmallFleet(), SmallTrace(), "BestFit", 3, options);
  PALADIN_ASSERT_OK(r);
  ASSERT_EQ(static_cast<int64_t>(r->decision_ns.size()), r->arrivals);
  for (int64_t ns : r->decision_ns) EXPECT_EQ(ns, 5);

  auto untimed = RunFgdSim(SmallFleet(), SmallTrace(), "BestFit", 3);
  PALADIN_ASSERT_OK(untimed);
  EXPECT_TRUE(untimed->decision_ns.empty());
}

TEST(RunFgdSimTest, BadInputIsAnError) {
  const Fleet fleet = SmallFleet();
  const auto trace = SmallTrace();

  auto unknown = RunFgdSim(fleet, trace, "Tetris", 1);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown policy 'Tetris'"));
  EXPECT_THAT(unknown.status().message(), HasSubstr("BestFit"));

  EXPECT_EQ(RunFgdSim(fleet, std::vector<Workload>{}, "BestFit", 1).status().code(),
            StatusCode::kInvalidArgument);
  Fleet no_gpus;
  AddTestNode(no_gpus, "cpu", 32000, 65536);
  EXPECT_EQ(RunFgdSim(no_gpus, trace, "BestFit", 1).status().code(), StatusCode::kInvalidArgument);
}

// A trace of CPU-only tasks can never reach the GPU target. The run must still end (with an
// error or a result); the child is killed by SIGALRM if it does not.
TEST(RunFgdSimDeathTest, ATraceWithoutGpuTasksStillEnds) {
  const Fleet fleet = SmallFleet();
  const std::vector<Workload> cpu_only = {Workload{.name = "cpu-task", .cpu_milli = 1000}};
  EXPECT_EXIT(
      {
        ::alarm(3);
        auto r = RunFgdSim(fleet, cpu_only, "BestFit", 1);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "")
      << "RunFgdSim did not return within 3 s on a trace whose tasks ask no GPU";
}

TEST(ClusterFragRatioPctTest, IsTheShareOfIdleGpuTheTypicalTasksCannotUse) {
  Fleet fleet;
  AddTestNode(fleet, "n", 64000, 65536, 2, "T4");
  PALADIN_ASSERT_OK(fleet.Reserve(1, Workload{.gpu_count = 1, .gpu_milli = 700}, {0, {0}}));
  // Idle: 300 + 1000. Typical whole-GPU tasks can use only GPU 1: 300 / 1300 stranded.
  const std::vector<TypicalWorkload> whole = {
      {.gpu_milli = 1000, .gpu_count = 1, .count = 1, .freq = 1}};
  EXPECT_DOUBLE_EQ(ClusterFragRatioPct(fleet, whole), 100.0 * 300 / 1300);
  // CPU-only typical tasks can use none of it.
  const std::vector<TypicalWorkload> cpu = {{.cpu_milli = 1000, .count = 1, .freq = 1}};
  EXPECT_DOUBLE_EQ(ClusterFragRatioPct(fleet, cpu), 100.0);
}

// --- the bundled Alibaba trace: the FGD paper's numbers ---

TEST(RunFgdSimTest, ReproducesThePublishedAllocationAtFullLoadOnTheBundledTrace) {
  const std::string dir = PALADIN_SOURCE_DATA_DIR "/alibaba-gpu-2023/";
  auto fleet = trace::ReadNodeCsv(dir + "openb_node_list_gpu_node.csv");
  PALADIN_ASSERT_OK(fleet);
  auto pods = trace::ReadPodCsv(dir + "openb_pod_list_default.csv", fleet->models());
  PALADIN_ASSERT_OK(pods);

  // Means over the artifact's seeds at 100% arrived GPU request; one seed stays within 2 points.
  const std::map<std::string, double> published = {{"FGD", 95.23}, {"BestFit", 92.86}};
  for (const auto& [policy, mean] : published) {
    auto r = RunFgdSim(*fleet, *pods, policy, 42);
    PALADIN_ASSERT_OK(r);
    ASSERT_FALSE(std::isnan(r->alloc_pct[100])) << policy;
    EXPECT_NEAR(r->alloc_pct[100], mean, 2.0) << policy;
  }
}

}  // namespace
}  // namespace paladin::core
