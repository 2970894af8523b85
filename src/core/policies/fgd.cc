// FGD: Fragmentation Gradient Descent (Weng et al., USENIX ATC'23). A node's score is
// 100 * sigmoid((F(before) - F(after)) / 1000), truncated to an integer as in the artifact, where
// F is the expected fragmentation against the typical workloads (frag.h). For a shared-GPU
// request every GPU that fits is tried and the best one kept.
#include <cmath>
#include <memory>

#include "paladin/core/policies.h"
#include "policies/internal.h"

namespace paladin::core {
namespace {

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

FgdChoice FgdScore(const NodeView& v, const Workload& w, std::span<const TypicalWorkload> typical) {
  const double before = FragAmount(v, typical);
  FgdChoice best;
  if (w.IsSharedGpu()) {
    bool found = false;
    for (int i = 0; i < v.gpu_count; ++i) {
      if (!v.GpuFits(i, w)) continue;
      const int16_t g = static_cast<int16_t>(i);
      const double after = FragAmount(After(v, w, std::span<const int16_t>(&g, 1)), typical);
      const double score = std::trunc(Sigmoid((before - after) / 1000) * 100);
      if (!found || score > best.score) {
        best.score = score;
        best.gpus = {g};
        best.frag_delta = after - before;
        found = true;
      }
    }
    return best;
  }
  std::vector<int16_t> gpus;
  if (w.gpu_count > 0) {
    gpus = TightestGpus(v, w);
    if (gpus.empty()) return best;
  }
  const double after = FragAmount(After(v, w, gpus), typical);
  best.score = std::trunc(Sigmoid((before - after) / 1000) * 100);
  best.frag_delta = after - before;
  best.gpus = std::move(gpus);  // for whole GPUs the selector hands out the first free ones
  return best;
}

namespace internal {
namespace {

class FgdEvaluator {
 public:
  explicit FgdEvaluator(std::shared_ptr<const std::vector<TypicalWorkload>> typical)
      : typical_(std::move(typical)) {}

  const FgdChoice& Evaluate(const Fleet& fleet, const Workload& w, int32_t node) {
    const Node& n = fleet.node(node);
    return cache_.Get(n, node, w, [&] { return FgdScore(ViewOf(n), w, *typical_); });
  }

 private:
  std::shared_ptr<const std::vector<TypicalWorkload>> typical_;
  PerNodeCache<FgdChoice> cache_;
};

}  // namespace

Policy MakeFgdPolicy(const PolicyContext& ctx) {
  auto eval = std::make_shared<FgdEvaluator>(ctx.typical);
  Policy p;
  p.name = "FGD";
  p.scores.push_back(
      WeightedScore{std::make_unique<EvaluatorScore<FgdEvaluator>>("FGD", eval), 1.0});
  // For whole GPUs FGD charges the tightest that fit, which are the first fully free ones.
  p.gpu_selector = std::make_unique<EvaluatorGpuSelector<FgdEvaluator>>("fgd", eval);
  return p;
}

}  // namespace internal
}  // namespace paladin::core
