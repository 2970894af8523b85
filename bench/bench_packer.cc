// Packer speed on the full 1,213-node FGD cluster: one whole trace run per iteration, per policy.
// Reports decisions per second, the p99 latency of one decision, and the run time relative to
// the Random policy measured in the same process (these machines are shared and noisy: compare
// ratios, not absolute numbers, across runs).
//
//   build/release/bench/bench_packer [--benchmark_filter=FGD]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include "paladin/core/fgd_sim.h"
#include "paladin/core/policies.h"
#include "paladin/trace/alibaba_csv.h"

namespace {

using namespace paladin;

struct Inputs {
  core::Fleet fleet;
  std::vector<core::Workload> pods;
};

const Inputs& Load() {
  static const Inputs inputs = [] {
    const std::string dir = std::string(PALADIN_SOURCE_DATA_DIR) + "/alibaba-gpu-2023/";
    auto fleet = trace::ReadNodeCsv(dir + "openb_node_list_gpu_node.csv");
    if (!fleet.ok()) {
      std::fprintf(stderr, "%s\n", fleet.status().ToString().c_str());
      std::exit(1);
    }
    auto pods = trace::ReadPodCsv(dir + "openb_pod_list_default.csv", fleet->models());
    if (!pods.ok()) {
      std::fprintf(stderr, "%s\n", pods.status().ToString().c_str());
      std::exit(1);
    }
    return Inputs{std::move(fleet).value(), std::move(pods).value()};
  }();
  return inputs;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::map<std::string, double>& SecondsPerRun() {
  static std::map<std::string, double> m;
  return m;
}

void BM_FgdRun(benchmark::State& state, const std::string& policy) {
  const Inputs& in = Load();
  core::FgdSimOptions opts;
  opts.clock_ns = NowNs;
  std::vector<int64_t> ns;
  int64_t decisions = 0;
  uint64_t seed = 42;
  for (auto _ : state) {
    auto r = core::RunFgdSim(in.fleet, in.pods, policy, seed++, opts);
    if (!r.ok()) {
      state.SkipWithError(r.status().message().c_str());
      return;
    }
    decisions += r->arrivals;
    ns.insert(ns.end(), r->decision_ns.begin(), r->decision_ns.end());
  }
  state.SetItemsProcessed(decisions);
  std::sort(ns.begin(), ns.end());
  if (!ns.empty()) {
    state.counters["p50_us"] = static_cast<double>(ns[ns.size() / 2]) / 1e3;
    state.counters["p99_us"] = static_cast<double>(ns[ns.size() * 99 / 100]) / 1e3;
  }
  double total = 0;
  for (int64_t v : ns) total += static_cast<double>(v);
  const double per_run = total * 1e-9 / static_cast<double>(state.iterations());
  SecondsPerRun()[policy] = per_run;
  state.counters["s_per_run"] = per_run;
  auto& m = SecondsPerRun();
  if (m.count("Random") && m["Random"] > 0) state.counters["x_Random"] = per_run / m["Random"];
}

int Register() {
  for (const auto& p : core::PolicyNames()) {
    benchmark::RegisterBenchmark(("FgdRun/" + p).c_str(), BM_FgdRun, p)
        ->Unit(benchmark::kSecond)
        ->Iterations(3);
  }
  return 0;
}
const int kRegistered = Register();

}  // namespace

BENCHMARK_MAIN();
