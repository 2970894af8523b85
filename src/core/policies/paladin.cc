// paladin: Paladin's default packing policy. Design and measurements: docs/packing.md.
//
// It knows what FGD knows (the cluster's current state and the workload's distribution of task
// shapes, never the tasks still to come) and looks at one more thing FGD ignores: how much idle
// GPU a node strands once its CPU or memory runs out after a few more tasks, not just before the
// next one ("stranding", StrandedAmount in frag.h).
//
// Which signal leads depends on what binds the fleet. From the shape distribution and the
// fleet's capacities it computes rho = (CPU per GPU the workload asks) / (CPU per GPU the fleet
// has).
//  - GPU-bound (rho < cpu_bound_ratio): FGD's integer score leads, with host memory counted in
//    its fragmentation (a typical task is blocked where the node lacks half its shape's mean
//    memory; FGD sees GPU share and CPU only); among nodes it ties, the one whose stranding grows
//    least wins (quantised, so near-ties still fall to the node rank and placements stay
//    concentrated); then the node rank.
//  - CPU-bound (rho >= cpu_bound_ratio): the drop in stranding plus fragmentation over all shapes
//    leads, quantised; then the node rank.
// Shapes are weighed by count (times GPUs per task in the tie-breaker); CPU-only shapes strand
// no GPU and are left out of stranding.
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

// GPU shapes with weights proportional to count, or count x GPUs per task.
std::vector<TypicalWorkload> GpuShapes(const std::vector<TypicalWorkload>& shapes,
                                       bool times_gpu_count) {
  std::vector<TypicalWorkload> out;
  double total = 0;
  for (const TypicalWorkload& t : shapes) {
    if (t.gpu_count == 0) continue;
    TypicalWorkload w = t;
    w.freq = static_cast<double>(t.count) * (times_gpu_count ? t.gpu_count : 1);
    total += w.freq;
    out.push_back(w);
  }
  for (auto& t : out) t.freq = total > 0 ? t.freq / total : 0;
  return out;
}

double Quantise(double x, double quantum) {
  return quantum > 0 ? quantum * std::floor(x / quantum) : x;
}

double Sigmoid100(double milli) { return 100.0 / (1.0 + std::exp(-milli / 1000)); }

class PaladinEvaluator {
 public:
  PaladinEvaluator(const PolicyContext& ctx, const PaladinParams& params)
      : params_(params),
        all_shapes_(ctx.shapes ? *ctx.shapes
                               : (ctx.typical ? *ctx.typical : std::vector<TypicalWorkload>{})),
        fgd_typical_(ctx.typical ? *ctx.typical : std::vector<TypicalWorkload>{}),
        by_count_(GpuShapes(all_shapes_, false)),
        by_gpus_(GpuShapes(all_shapes_, true)) {}

  // Called once per decision: the mode follows the fleet being scheduled (a packer may serve
  // several fleets), and cached scores are dropped when it changes.
  void PrepareFor(const Fleet& fleet) {
    double have_cpu = 0, have_gpu = 0;
    for (const Node& n : fleet.nodes()) {
      have_cpu += static_cast<double>(n.cpu_milli);
      have_gpu += static_cast<double>(n.gpu_count()) * kMilliPerGpu;
    }
    if (mode_chosen_ && have_cpu == fleet_cpu_ && have_gpu == fleet_gpu_) return;
    mode_chosen_ = true;
    fleet_cpu_ = have_cpu;
    fleet_gpu_ = have_gpu;
    const bool was = cpu_bound_;
    cpu_bound_ = ChooseCpuBound(have_cpu, have_gpu);
    if (was != cpu_bound_) cache_ = PerNodeCache<PaladinChoice>();
  }

  const PaladinChoice& Evaluate(const Fleet& fleet, const Workload& w, int32_t node) {
    if (!mode_chosen_) PrepareFor(fleet);
    const Node& n = fleet.node(node);
    return cache_.Get(n, node, w, [&] { return Compute(n, w); });
  }

 private:
  bool ChooseCpuBound(double have_cpu, double have_gpu) const {
    double want_cpu = 0, want_gpu = 0;
    for (const TypicalWorkload& t : all_shapes_) {
      want_cpu += static_cast<double>(t.count) * static_cast<double>(t.cpu_milli);
      want_gpu += static_cast<double>(t.count) * t.gpu_count * t.gpu_milli;
    }
    if (want_gpu <= 0 || have_gpu <= 0 || have_cpu <= 0) return false;
    const double rho = (want_cpu / want_gpu) / (have_cpu / have_gpu);
    return rho >= params_.cpu_bound_ratio;
  }

  // Higher is better; only the order matters to the packer.
  double Score(const NodeView& before, const NodeView& after) const {
    if (cpu_bound_) {
      const double gain = StrandedAmount(before, by_count_) + FragAmount(before, by_count_) -
                          StrandedAmount(after, by_count_) - FragAmount(after, by_count_);
      return Sigmoid100(Quantise(gain, params_.cpu_bound_quantum_milli));
    }
    const double fgd_gain = FragAmount(before, fgd_typical_, params_.memory_fraction) -
                            FragAmount(after, fgd_typical_, params_.memory_fraction);
    const double stranding_gain =
        StrandedAmount(before, by_gpus_) - StrandedAmount(after, by_gpus_);
    // FGD's integer score, then a tie-breaker worth less than one of its points.
    return std::trunc(Sigmoid100(fgd_gain)) +
           0.9 * Sigmoid100(Quantise(stranding_gain, params_.tiebreak_quantum_milli)) / 100.0;
  }

  PaladinChoice Compute(const Node& n, const Workload& w) const {
    const NodeView v = ViewOf(n);
    PaladinChoice best;
    bool found = false;
    auto consider = [&](std::vector<int16_t> gpus) {
      const double score = Score(v, After(v, w, gpus));
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
  std::vector<TypicalWorkload> all_shapes_;
  std::vector<TypicalWorkload> fgd_typical_;
  std::vector<TypicalWorkload> by_count_;
  std::vector<TypicalWorkload> by_gpus_;
  bool mode_chosen_ = false;
  bool cpu_bound_ = false;
  double fleet_cpu_ = 0, fleet_gpu_ = 0;
  PerNodeCache<PaladinChoice> cache_;
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
  using Eval = internal::PaladinEvaluator;
  p.scores.push_back(
      WeightedScore{std::make_unique<internal::EvaluatorScore<Eval>>("paladin", eval), 1.0});
  p.gpu_selector = std::make_unique<internal::EvaluatorGpuSelector<Eval>>("paladin", eval);
  p.tie_break = TieBreak::kLowestRank;
  return p;
}

}  // namespace paladin::core
