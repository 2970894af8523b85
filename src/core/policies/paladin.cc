// paladin: Paladin's default packing policy (see docs/packing.md).
#include <algorithm>
#include <cmath>
#include <memory>

#include "paladin/core/policies.h"
#include "policies/internal.h"

namespace paladin::core {
namespace internal {
namespace {

struct PaladinChoice {
  double score = 0;
  std::vector<int16_t> gpus;
};

std::vector<TypicalWorkload> WeighShapes(const std::vector<TypicalWorkload>& shapes,
                                         const PaladinParams& params) {
  std::vector<TypicalWorkload> out;
  double total = 0;
  for (const TypicalWorkload& t : shapes) {
    if (t.gpu_count == 0 && !params.include_cpu_only) continue;
    TypicalWorkload w = t;
    w.freq = static_cast<double>(t.count);
    if (params.weight_by_gpu_demand) w.freq *= static_cast<double>(t.gpu_count) * t.gpu_milli;
    if (params.exp_b == 2) w.freq *= static_cast<double>(std::max(1, t.gpu_count));
    if (params.exp_b == 3) w.freq *= std::sqrt(static_cast<double>(std::max(1, t.gpu_count)));
    total += w.freq;
    out.push_back(w);
  }
  for (auto& t : out) t.freq = total > 0 ? t.freq / total : 0;
  return out;
}

class PaladinEvaluator {
 public:
  PaladinEvaluator(const PolicyContext& ctx, const PaladinParams& params)
      : params_(params),
        weighted_(WeighShapes(ctx.shapes ? *ctx.shapes : *ctx.typical, params)),
        fgd_typical_(*ctx.typical) {}

  const PaladinChoice& Evaluate(const Fleet& fleet, const Workload& w, int32_t node) {
    const Node& n = fleet.node(node);
    return cache_.Get(n, node, w, [&] { return Compute(n, w); });
  }

 private:
  double Measure(const NodeView& v) const {
    if (params_.measure == 1) return StrandedAmount(v, weighted_);
    if (params_.measure == 2) return StrandedAmount(v, weighted_) + FragAmount(v, fgd_typical_);
    if (params_.measure == 3) return StrandedAmount(v, weighted_) + FragAmount(v, weighted_);
    return FragAmount(v, weighted_);
  }
  PaladinChoice Compute(const Node& n, const Workload& w) const {
    const NodeView v = ViewOf(n);
    const double before = Measure(v);
    const int64_t idle_before = v.IdleMilli();
    const bool node_in_use = idle_before < static_cast<int64_t>(v.gpu_count) * kMilliPerGpu;
    PaladinChoice best;
    bool found = false;
    auto consider = [&](std::vector<int16_t> gpus) {
      const NodeView a = After(v, w, gpus);
      const double after = Measure(a);
      const double gain = before - after;
      const double q = params_.exp_a > 0 ? params_.exp_a * std::floor(gain / params_.exp_a) : gain;
      double score = 100.0 / (1.0 + std::exp(-q / 1000));
      // Secondary terms, each < 1 point so they only order what the primary ties.
      if (v.gpu_count > 0) {
        const double cap = v.gpu_count * double{kMilliPerGpu};
        const double used_after = 1.0 - static_cast<double>(a.IdleMilli()) / cap;
        score += params_.packing_bonus * used_after;
        (void)node_in_use;
      }
      if (params_.exp_b == 1 && v.gpu_count > 0) {
        // Prefer the GPU left with the least free share (best fit within the node).
        int32_t tight = kMilliPerGpu;
        for (int16_t g : gpus) tight = std::min(tight, a.milli_left[static_cast<size_t>(g)]);
        score += params_.exp_b * (1.0 - tight / double{kMilliPerGpu});
      }
      if (!found || score > best.score) {
        best.score = score;
        best.gpus = std::move(gpus);
        found = true;
      }
    };
    if (w.IsSharedGpu()) {
      for (int i = 0; i < v.gpu_count; ++i) {
        if (v.GpuFits(i, w)) consider({static_cast<int16_t>(i)});
      }
    } else if (w.gpu_count > 0) {
      std::vector<int16_t> gpus = FirstFreeGpus(n, w);
      if (!gpus.empty()) consider(std::move(gpus));
    } else {
      consider({});
    }
    return best;
  }

  PaladinParams params_;
  std::vector<TypicalWorkload> weighted_;
  std::vector<TypicalWorkload> fgd_typical_;
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
  return core::MakePaladinPolicy(ctx, PaladinParams{});
}

}  // namespace internal

Policy MakePaladinPolicy(const PolicyContext& ctx, const PaladinParams& params) {
  auto eval = std::make_shared<internal::PaladinEvaluator>(ctx, params);
  Policy p;
  p.name = "paladin";
  p.scores.push_back(WeightedScore{std::make_unique<internal::PaladinScore>(eval), 1.0});
  p.gpu_selector = std::make_unique<internal::PaladinGpuSelector>(eval);
  p.tie_break = TieBreak::kLowestRank;
  return p;
}

}  // namespace paladin::core
