// paladin: Paladin's default packing policy. Work in progress: starts from FGD's fragmentation
// objective, evaluated exactly (no integer truncation) with a deterministic tie-break.
#include <cmath>
#include <memory>

#include "paladin/core/policies.h"
#include "policies/internal.h"

namespace paladin::core::internal {
namespace {

struct PaladinChoice {
  double score = 0;
  std::vector<int16_t> gpus;
};

class PaladinEvaluator {
 public:
  explicit PaladinEvaluator(std::shared_ptr<const std::vector<TypicalWorkload>> typical)
      : typical_(std::move(typical)) {}

  const PaladinChoice& Evaluate(const Fleet& fleet, const Workload& w, int32_t node) {
    const Node& n = fleet.node(node);
    return cache_.Get(n, node, w, [&] { return Compute(n, w); });
  }

 private:
  PaladinChoice Compute(const Node& n, const Workload& w) const {
    const NodeView v = ViewOf(n);
    const double before = FragAmount(v, *typical_);
    PaladinChoice best;
    bool found = false;
    auto consider = [&](std::vector<int16_t> gpus) {
      const double after = FragAmount(After(v, w, gpus), *typical_);
      const double score = 100.0 / (1.0 + std::exp((after - before) / 1000));
      if (!found || score > best.score) {
        best.score = score;
        best.gpus = std::move(gpus);
        found = true;
      }
    };
    if (w.IsSharedGpu()) {
      for (int i = 0; i < v.gpu_count; ++i) {
        if (v.milli_left[static_cast<size_t>(i)] >= w.gpu_milli) {
          consider({static_cast<int16_t>(i)});
        }
      }
    } else if (w.gpu_count > 0) {
      consider(FirstFreeGpus(n, w.gpu_count));
    } else {
      consider({});
    }
    return best;
  }

  std::shared_ptr<const std::vector<TypicalWorkload>> typical_;
  PerNodeCache<PaladinChoice> cache_;
};

class PaladinScore final : public ScorePlugin {
 public:
  explicit PaladinScore(std::shared_ptr<PaladinEvaluator> e) : eval_(std::move(e)) {}
  std::string_view name() const override { return "paladin"; }
  double Score(const Fleet& fleet, const Workload& w, int32_t node) override {
    return eval_->Evaluate(fleet, w, node).score;
  }

 private:
  std::shared_ptr<PaladinEvaluator> eval_;
};

class PaladinGpuSelector final : public GpuSelector {
 public:
  explicit PaladinGpuSelector(std::shared_ptr<PaladinEvaluator> e) : eval_(std::move(e)) {}
  std::string_view name() const override { return "paladin"; }
  std::vector<int16_t> Select(const Fleet& fleet, const Workload& w, int32_t node,
                              Rng& /*rng*/) override {
    if (w.gpu_count == 0) return {};
    return eval_->Evaluate(fleet, w, node).gpus;
  }

 private:
  std::shared_ptr<PaladinEvaluator> eval_;
};

}  // namespace

Policy MakePaladinPolicy(const PolicyContext& ctx) {
  auto eval = std::make_shared<PaladinEvaluator>(ctx.typical);
  Policy p;
  p.name = "paladin";
  p.scores.push_back(WeightedScore{std::make_unique<PaladinScore>(eval), 1.0});
  p.gpu_selector = std::make_unique<PaladinGpuSelector>(eval);
  p.tie_break = TieBreak::kLowestRank;
  return p;
}

}  // namespace paladin::core::internal
