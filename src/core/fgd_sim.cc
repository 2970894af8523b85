#include "paladin/core/fgd_sim.h"

#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "paladin/core/packer.h"
#include "paladin/core/policies.h"

namespace paladin::core {
namespace {

// Separate streams: arrivals depend on the seed alone; decisions on (seed, policy's stream).
constexpr uint64_t kArrivalStream = 0x61727269'76616c73ULL;
constexpr uint64_t kDecisionStream = 0x64656369'73696f6eULL;
constexpr uint64_t kRankStream = 0x6e6f6465'72616e6bULL;

}  // namespace

std::vector<Workload> BuildFgdArrivals(std::span<const Workload> trace, int64_t gpu_milli_capacity,
                                       double target_ratio, uint64_t seed) {
  Rng rng(seed ^ kArrivalStream);
  std::vector<Workload> out(trace.begin(), trace.end());
  if (trace.empty()) return out;
  const double target = target_ratio * static_cast<double>(gpu_milli_capacity);
  double total = 0;
  int64_t trace_gpu = 0;
  for (const Workload& w : out) {
    total += static_cast<double>(w.TotalGpuMilli());
    trace_gpu += w.TotalGpuMilli();
  }
  if (trace_gpu == 0) return out;  // nothing to scale by; RunFgdSim refuses such traces
  if (total < target) {
    while (true) {
      const Workload& pick = trace[rng.Uniform(trace.size())];
      if (total + static_cast<double>(pick.TotalGpuMilli()) > target) break;
      total += static_cast<double>(pick.TotalGpuMilli());
      out.push_back(pick);
    }
  } else {
    while (total > target && !out.empty()) {
      const size_t i = rng.Uniform(out.size());
      total -= static_cast<double>(out[i].TotalGpuMilli());
      std::swap(out[i], out.back());  // order is irrelevant: the stream is shuffled below
      out.pop_back();
    }
  }
  rng.Shuffle(out);
  return out;
}

double ClusterFragRatioPct(const Fleet& fleet, std::span<const TypicalWorkload> typical) {
  double frag = 0;
  for (const Node& n : fleet.nodes()) frag += FragAmount(ViewOf(n), typical);
  const int64_t idle = fleet.GpuMilliCapacity() - fleet.GpuMilliUsed();
  return idle > 0 ? 100.0 * frag / static_cast<double>(idle) : 0.0;
}

StatusOr<FgdRunResult> RunFgdSim(const Fleet& fleet, std::span<const Workload> trace,
                                 std::string_view policy, uint64_t seed,
                                 const FgdSimOptions& options) {
  if (fleet.GpuMilliCapacity() <= 0) return InvalidArgument("the fleet has no GPUs");
  if (trace.empty()) return InvalidArgument("the trace has no tasks");
  bool any_gpu = false;
  for (const Workload& w : trace) any_gpu = any_gpu || w.gpu_count > 0;
  if (!any_gpu) {
    return InvalidArgument("the trace has no GPU tasks: nothing to measure GPU allocation with");
  }
  auto typical = std::make_shared<const std::vector<TypicalWorkload>>(
      BuildTypicalWorkloads(trace, options.typical));
  TypicalOptions all_shapes = options.typical;
  all_shapes.coverage = 1.0;
  auto shapes = std::make_shared<const std::vector<TypicalWorkload>>(
      BuildTypicalWorkloads(trace, all_shapes));
  const PolicyContext ctx{typical, shapes};
  auto made =
      options.make_policy ? StatusOr<Policy>(options.make_policy(ctx)) : MakePolicy(policy, ctx);
  if (!made.ok()) return made.status();
  Packer packer(std::move(made).value());
  std::vector<int32_t> ranks(fleet.size());
  for (size_t i = 0; i < ranks.size(); ++i) ranks[i] = static_cast<int32_t>(i);
  Rng rank_rng(seed ^ kRankStream);
  rank_rng.Shuffle(ranks);
  packer.SetNodeRanks(std::move(ranks));

  Fleet state = fleet;
  const std::vector<Workload> arrivals =
      BuildFgdArrivals(trace, fleet.GpuMilliCapacity(), options.target_ratio, seed);
  Rng rng(seed ^ kDecisionStream);

  const auto capacity = static_cast<double>(fleet.GpuMilliCapacity());
  const size_t buckets = static_cast<size_t>(options.max_pct) + 1;
  std::vector<double> alloc_sum(buckets, 0), frag_sum(buckets, 0);
  std::vector<int64_t> hits(buckets, 0);

  // Fragmentation is kept per node and refreshed only where a placement lands.
  std::vector<double> node_frag(state.size());
  double frag_total = 0;
  for (size_t i = 0; i < state.size(); ++i) {
    node_frag[i] = FragAmount(ViewOf(state.node(static_cast<int32_t>(i))), *typical);
    frag_total += node_frag[i];
  }

  FgdRunResult r;
  r.policy = packer.policy().name + (options.rebalance ? "+rebalance" : "");
  const Rebalancer rebalancer(options.rebalance_params);
  std::vector<MovableJob> placed;  // what the rebalancer may move: every placed task
  double next_defrag_pct = options.defrag_every_pct;
  const auto refresh = [&](int32_t node) {
    const auto i = static_cast<size_t>(node);
    frag_total -= node_frag[i];
    node_frag[i] = FragAmount(ViewOf(state.node(node)), *typical);
    frag_total += node_frag[i];
  };
  // Carries out one move of a placed task.
  const auto apply_move = [&](const Move& mv) -> Status {
    MovableJob& job = placed[static_cast<size_t>(mv.job)];
    state.Unreserve(mv.job);
    PALADIN_RETURN_IF_ERROR(state.Reserve(mv.job, job.shape, mv.to));
    refresh(mv.from.node);
    refresh(mv.to.node);
    job.placement = mv.to;
    ++r.moves;
    return Status::Ok();
  };
  r.seed = seed;
  if (options.clock_ns) r.decision_ns.reserve(arrivals.size());
  int64_t arrived = 0;
  for (size_t k = 0; k < arrivals.size(); ++k) {
    const Workload& w = arrivals[k];
    arrived += w.TotalGpuMilli();
    const int64_t t0 = options.clock_ns ? options.clock_ns() : 0;
    if (options.rebalance && options.defrag_every_pct > 0 &&
        100.0 * static_cast<double>(arrived) / capacity >= next_defrag_pct) {
      next_defrag_pct += options.defrag_every_pct;
      for (const Move& mv :
           rebalancer.PlanDefrag(state, placed, *typical, options.defrag_moves, 1.0)) {
        PALADIN_RETURN_IF_ERROR(apply_move(mv));
      }
    }
    Decision d = packer.Schedule(state, w, rng);
    if (!d.placed && options.rebalance && w.gpu_count > 0) {
      // Every move costs the same here (no downtime in this protocol): the plan with the fewest
      // GPU-shares moved wins.
      auto plan = rebalancer.PlanAdmission(state, w, placed, packer, rng,
                                           std::numeric_limits<double>::infinity());
      if (plan) {
        for (const Move& mv : plan->moves) {
          PALADIN_RETURN_IF_ERROR(apply_move(mv));
        }
        d.placed = true;
        d.placement = plan->placement;
        ++r.rebalanced;
      }
    }
    if (options.clock_ns) r.decision_ns.push_back(options.clock_ns() - t0);
    if (d.placed) {
      PALADIN_RETURN_IF_ERROR(state.Reserve(k, w, d.placement));
      ++r.placed;
      refresh(d.placement.node);
    }
    if (options.rebalance) {
      // Ids are arrival indices; unplaced tasks keep a slot that is never movable.
      placed.push_back({k, w, d.placed ? d.placement : Placement{}, 1.0, d.placed});
    }
    // Bucket by arrived % rounded to nearest (ties to even), as the artifact's analysis does.
    const double arrived_pct = 100.0 * static_cast<double>(arrived) / capacity;
    const double bucket = std::nearbyint(arrived_pct);
    if (bucket >= 0 && bucket < static_cast<double>(buckets)) {
      const auto b = static_cast<size_t>(bucket);
      alloc_sum[b] += 100.0 * static_cast<double>(state.GpuMilliUsed()) / capacity;
      const double idle = capacity - static_cast<double>(state.GpuMilliUsed());
      frag_sum[b] += idle > 0 ? 100.0 * frag_total / idle : 0.0;
      ++hits[b];
    }
  }
  r.arrivals = static_cast<int64_t>(arrivals.size());
  r.final_alloc_pct = 100.0 * static_cast<double>(state.GpuMilliUsed()) / capacity;

  // A bucket the stream skipped (one big task can jump a percent) borrows its neighbours.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  r.alloc_pct.assign(buckets, nan);
  r.frag_pct.assign(buckets, nan);
  for (size_t b = 0; b < buckets; ++b) {
    double a = alloc_sum[b], f = frag_sum[b];
    int64_t h = hits[b];
    if (h == 0) {
      for (size_t nb : {b - 1, b + 1}) {
        if (nb < buckets) {
          a += alloc_sum[nb];
          f += frag_sum[nb];
          h += hits[nb];
        }
      }
    }
    if (h > 0) {
      r.alloc_pct[b] = a / static_cast<double>(h);
      r.frag_pct[b] = f / static_cast<double>(h);
    }
  }
  return r;
}

}  // namespace paladin::core
