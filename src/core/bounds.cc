#include "paladin/core/bounds.h"

#include <algorithm>
#include <vector>

#include "paladin/core/packer.h"

namespace paladin::core {
namespace {

// min over lambda >= 0 of lambda * cap + sum_i max(0, g_i - lambda * r_i). The function is convex
// and piecewise linear in lambda with breakpoints at g_i / r_i, so checking 0 and every
// breakpoint finds the minimum.
double DualBound(const std::vector<std::pair<double, double>>& gpu_need, double cap) {
  std::vector<double> lambdas = {0.0};
  for (const auto& [g, r] : gpu_need) {
    if (r > 0 && g > 0) lambdas.push_back(g / r);
  }
  std::sort(lambdas.begin(), lambdas.end());
  // Sweep lambda upwards keeping sum over active tasks (g_i - lambda r_i > 0) incrementally.
  std::vector<std::pair<double, std::pair<double, double>>> by_ratio;  // (ratio, (g, r))
  double always = 0;  // tasks needing none of the resource always count fully
  for (const auto& [g, r] : gpu_need) {
    if (g <= 0) continue;
    if (r <= 0) {
      always += g;
    } else {
      by_ratio.push_back({g / r, {g, r}});
    }
  }
  std::sort(by_ratio.begin(), by_ratio.end());
  double sum_g = 0, sum_r = 0;  // over tasks with ratio > lambda
  for (const auto& e : by_ratio) {
    sum_g += e.second.first;
    sum_r += e.second.second;
  }
  double best = always + sum_g;  // lambda = 0
  size_t k = 0;
  for (double lambda : lambdas) {
    while (k < by_ratio.size() && by_ratio[k].first <= lambda) {
      sum_g -= by_ratio[k].second.first;
      sum_r -= by_ratio[k].second.second;
      ++k;
    }
    best = std::min(best, lambda * cap + always + sum_g - lambda * sum_r);
  }
  return best;
}

}  // namespace

double ResourceUpperBoundPct(const Fleet& fleet, std::span<const Workload> arrivals) {
  double cpu_cap = 0, mem_cap = 0;
  for (const Node& n : fleet.nodes()) {
    if (n.gpu_count() == 0) continue;  // GPU tasks cannot use CPU-only nodes
    cpu_cap += static_cast<double>(n.cpu_milli);
    mem_cap += static_cast<double>(n.mem_mib);
  }
  std::vector<std::pair<double, double>> by_cpu, by_mem;
  double total_gpu = 0;
  for (const Workload& w : arrivals) {
    const auto g = static_cast<double>(w.TotalGpuMilli());
    total_gpu += g;
    by_cpu.push_back({g, static_cast<double>(w.cpu_milli)});
    by_mem.push_back({g, static_cast<double>(w.mem_mib)});
  }
  const auto cap = static_cast<double>(fleet.GpuMilliCapacity());
  double bound = std::min(cap, total_gpu);
  bound = std::min(bound, DualBound(by_cpu, cpu_cap));
  bound = std::min(bound, DualBound(by_mem, mem_cap));
  return cap > 0 ? 100.0 * bound / cap : 0.0;
}

StatusOr<double> OfflineSortedAllocPct(const Fleet& fleet, std::span<const Workload> arrivals,
                                       const std::string& policy, const PolicyContext& ctx) {
  auto made = MakePolicy(policy, ctx);
  if (!made.ok()) return made.status();
  Packer packer(std::move(made).value());
  std::vector<Workload> order(arrivals.begin(), arrivals.end());
  std::stable_sort(order.begin(), order.end(), [](const Workload& a, const Workload& b) {
    if (a.TotalGpuMilli() != b.TotalGpuMilli()) return a.TotalGpuMilli() > b.TotalGpuMilli();
    return a.cpu_milli > b.cpu_milli;
  });
  Fleet state = fleet;
  Rng rng(1);
  for (size_t i = 0; i < order.size(); ++i) {
    Decision d = packer.Schedule(state, order[i], rng);
    if (d.placed) PALADIN_RETURN_IF_ERROR(state.Reserve(i, order[i], d.placement));
  }
  const auto cap = static_cast<double>(fleet.GpuMilliCapacity());
  return cap > 0 ? 100.0 * static_cast<double>(state.GpuMilliUsed()) / cap : 0.0;
}

}  // namespace paladin::core
