// The baseline policies of the FGD artifact, re-implemented from their published definitions.
// Integer truncation and the normalisation constants follow that artifact on purpose: the
// scores must tie where its scores tie, or its published allocation curves cannot be reproduced.
#include <algorithm>
#include <cmath>

#include "paladin/core/policies.h"
#include "policies/internal.h"

namespace paladin::core {

double DotProductScore(const Node& n, const Workload& w) {
  if (n.cpu_left < w.cpu_milli) return 0;
  const double node_cpu = static_cast<double>(n.cpu_left) / kMaxSpecCpuMilli;
  const double node_gpu = static_cast<double>(n.GpuMilliLeft()) / kMaxSpecGpuMilli;
  const double pod_cpu = static_cast<double>(w.cpu_milli) / kMaxSpecCpuMilli;
  const double pod_gpu = static_cast<double>(w.TotalGpuMilli()) / kMaxSpecGpuMilli;
  const double alignment = (node_cpu * pod_cpu + node_gpu * pod_gpu) / 2;
  // The more aligned the free and requested vectors, the lower the score (the artifact's sign).
  // Nodes bigger than the artifact's 128-core, 8-GPU maximum would leave [0, 100]: clamp.
  return std::clamp(std::trunc(100.0 * (1 - alignment)), 0.0, 100.0);
}

double BestFitScore(const Node& n, const Workload& w) {
  const double cpu_after = static_cast<double>(n.cpu_left - w.cpu_milli);
  const double gpu_after = static_cast<double>(n.GpuMilliLeft() - w.TotalGpuMilli());
  double leftover = cpu_after / kMaxSpecCpuMilli * 0.5;
  leftover += gpu_after / kMaxSpecGpuMilli * 0.5;
  // The artifact min-max normalises these integers per decision; that keeps their order and
  // their ties, so the argmax is the same without it.
  return std::clamp(std::trunc((1.0 - leftover) * 100.0), 0.0, 100.0);
}

double GpuClusteringScore(const Node& n, const Workload& w) {
  const int tag = w.AffinityTag();
  if (tag < 0) return 0;
  const auto spec = static_cast<int64_t>(kMaxSpecGpuMilli);
  // [0, 25]: fuller nodes first (clamped for nodes beyond the artifact's 8 GPUs).
  const int64_t base = std::clamp<int64_t>(25 * (spec - n.GpuMilliLeft()) / spec, 0, 25);
  const bool same_kind_here = n.affinity.count[static_cast<size_t>(tag)] > 0;
  if (same_kind_here) return static_cast<double>(base + (n.affinity.distinct == 1 ? 75 : 50));
  return static_cast<double>(base + (n.affinity.distinct == 0 ? 25 : 0));
}

double GpuPackingScore(const Node& n, const Workload& w) {
  if (w.gpu_count == 0) return 0;
  const int fully_free = n.FullyFreeGpus();
  if (fully_free == n.gpu_count()) {  // an untouched node: last resort, smaller nodes first
    return static_cast<double>(std::max(33 - fully_free, fully_free));
  }
  const NodeView v = ViewOf(n);
  const std::vector<int16_t> use = TightestGpus(v, w);
  if (use.empty()) return 0;
  int whole_to_open = 0;
  int64_t free_pct_sum = 0;
  for (int16_t g : use) {
    const int32_t left = v.milli_left[static_cast<size_t>(g)];
    if (left == kMilliPerGpu) ++whole_to_open;
    free_pct_sum += left * 100 / kMilliPerGpu;
  }
  if (whole_to_open > 0) return static_cast<double>(std::max(50 - whole_to_open, 33));
  return static_cast<double>(std::max<int64_t>(100 - free_pct_sum / 10, 50));
}

namespace {

class RandomScore final : public ScorePlugin {
 public:
  std::string_view name() const override { return "RandomScore"; }
  void PreScore(const Fleet&, const Workload&, std::span<const int32_t> feasible,
                Rng& rng) override {
    chosen_ = feasible[rng.Uniform(feasible.size())];
  }
  double Score(const Fleet&, const Workload&, int32_t node) override {
    return node == chosen_ ? 100 : 0;
  }

 private:
  int32_t chosen_ = -1;
};

template <double (*Fn)(const Node&, const Workload&)>
class FunctionScore final : public ScorePlugin {
 public:
  explicit FunctionScore(std::string_view name) : name_(name) {}
  std::string_view name() const override { return name_; }
  double Score(const Fleet& fleet, const Workload& w, int32_t node) override {
    return Fn(fleet.node(node), w);
  }

 private:
  std::string_view name_;
};

Policy OneScore(std::string name, std::unique_ptr<ScorePlugin> s,
                std::unique_ptr<GpuSelector> gpus) {
  Policy p;
  p.name = std::move(name);
  p.scores.push_back(WeightedScore{std::move(s), 1.0});
  p.gpu_selector = std::move(gpus);
  return p;
}

}  // namespace

namespace internal {

Policy MakeRandomPolicy() {
  return OneScore("Random", std::make_unique<RandomScore>(), MakeRandomGpuSelector());
}
Policy MakeDotProductPolicy() {
  return OneScore("DotProduct", std::make_unique<FunctionScore<DotProductScore>>("DotProduct"),
                  MakeBestFitGpuSelector());
}
Policy MakeGpuClusteringPolicy() {
  return OneScore("GpuClustering",
                  std::make_unique<FunctionScore<GpuClusteringScore>>("GpuClustering"),
                  MakeBestFitGpuSelector());
}
Policy MakeGpuPackingPolicy() {
  return OneScore("GpuPacking", std::make_unique<FunctionScore<GpuPackingScore>>("GpuPacking"),
                  MakeBestFitGpuSelector());
}
Policy MakeBestFitPolicy() {
  return OneScore("BestFit", std::make_unique<FunctionScore<BestFitScore>>("BestFit"),
                  MakeBestFitGpuSelector());
}

}  // namespace internal
}  // namespace paladin::core
