#include "paladin/core/rebalance.h"

#include <algorithm>
#include <limits>

#include "paladin/core/policies.h"

namespace paladin::core {
namespace {

constexpr uint64_t kTrialId = std::numeric_limits<uint64_t>::max() - 1;

double GpuShare(const Workload& w) { return static_cast<double>(w.TotalGpuMilli()) / kMilliPerGpu; }

// Whether the node could ever hold `w`, empty.
bool Capable(const Node& n, const Workload& w) {
  return ModelAllowed(w, n) && n.cpu_milli >= w.cpu_milli && n.mem_mib >= w.mem_mib &&
         n.gpu_count() >= w.gpu_count;
}

// Puts the victims back where they were. Their old homes were freed by the trial, so this cannot
// fail unless the caller's bookkeeping is broken.
void Restore(Fleet& fleet, std::span<const MovableJob* const> victims) {
  for (const MovableJob* v : victims) {
    fleet.Unreserve(v->id);
    (void)fleet.Reserve(v->id, v->shape, v->placement);
  }
}

}  // namespace

std::optional<AdmissionPlan> Rebalancer::PlanAdmission(Fleet& fleet, const Workload& w,
                                                       std::span<const MovableJob> jobs,
                                                       Packer& packer, Rng& rng,
                                                       double max_cost) const {
  // Movable jobs per node, cheapest to move first.
  std::vector<std::vector<const MovableJob*>> on_node(fleet.size());
  for (const auto& j : jobs) {
    if (j.movable && j.placement.valid() && fleet.IsReserved(j.id)) {
      on_node[static_cast<size_t>(j.placement.node)].push_back(&j);
    }
  }
  const auto cost_of = [](const MovableJob* j) { return j->downtime_s * GpuShare(j->shape); };
  // Candidate nodes: able to hold w once their movable jobs leave, ranked by how far w is from
  // fitting now (the least missing first: fewest moves), then by node index.
  struct NodeCandidate {
    int32_t node;
    double shortfall;
  };
  std::vector<NodeCandidate> candidates;
  for (int32_t i = 0; i < static_cast<int32_t>(fleet.size()); ++i) {
    const Node& n = fleet.node(i);
    auto& here = on_node[static_cast<size_t>(i)];
    if (here.empty() || !Capable(n, w)) continue;
    int64_t milli = n.GpuMilliLeft(), cpu = n.cpu_left, mem = n.mem_left;
    for (const MovableJob* j : here) {
      milli += j->shape.TotalGpuMilli();
      cpu += j->shape.cpu_milli;
      mem += j->shape.mem_mib;
    }
    if (milli < w.TotalGpuMilli() || cpu < w.cpu_milli || mem < w.mem_mib) continue;
    double shortfall = 0;
    if (w.cpu_milli > 0) {
      shortfall += static_cast<double>(std::max<int64_t>(0, w.cpu_milli - n.cpu_left)) /
                   static_cast<double>(w.cpu_milli);
    }
    if (w.mem_mib > 0) {
      shortfall += static_cast<double>(std::max<int64_t>(0, w.mem_mib - n.mem_left)) /
                   static_cast<double>(w.mem_mib);
    }
    if (w.gpu_count > 0) {
      // GPUs that could take w's share now, against how many it needs.
      int ready = 0;
      int32_t best_free = 0;
      for (const Gpu& g : n.gpus) {
        if (g.milli_left >= w.gpu_milli) ++ready;
        best_free = std::max(best_free, g.milli_left);
      }
      shortfall += static_cast<double>(std::max(0, w.gpu_count - ready)) / w.gpu_count;
      if (ready == 0) {
        shortfall += static_cast<double>(w.gpu_milli - best_free) / kMilliPerGpu;
      }
    }
    std::stable_sort(here.begin(), here.end(), [&](const MovableJob* a, const MovableJob* b) {
      return cost_of(a) < cost_of(b) || (cost_of(a) == cost_of(b) && a->id < b->id);
    });
    candidates.push_back({i, shortfall});
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const auto& a, const auto& b) { return a.shortfall < b.shortfall; });
  if (static_cast<int>(candidates.size()) > params_.max_candidate_nodes) {
    candidates.resize(static_cast<size_t>(params_.max_candidate_nodes));
  }

  std::optional<AdmissionPlan> best;
  std::vector<const MovableJob*> victims;
  // Tries moving `victims` off `node`; on success fills *plan. The fleet is restored either way.
  const auto trial = [&](int32_t node, AdmissionPlan* plan) {
    for (const MovableJob* v : victims) fleet.Unreserve(v->id);
    PackerOptions only;
    only.only_node = node;
    const Decision d = packer.Schedule(fleet, w, rng, only);
    bool ok = d.placed && fleet.Reserve(kTrialId, w, d.placement).ok();
    plan->moves.clear();
    plan->cost = 0;
    std::vector<uint64_t> placed;
    if (ok) {
      plan->placement = d.placement;
      PackerOptions away;
      away.exclude_node = node;
      for (const MovableJob* v : victims) {
        const Decision dv = packer.Schedule(fleet, v->shape, rng, away);
        if (!dv.placed || !fleet.Reserve(v->id, v->shape, dv.placement).ok()) {
          ok = false;
          break;
        }
        placed.push_back(v->id);
        const double downtime = v->DowntimeTo(dv.placement.node);
        plan->moves.push_back({v->id, v->placement, dv.placement, downtime});
        plan->cost += downtime * GpuShare(v->shape);
      }
    }
    for (uint64_t id : placed) fleet.Unreserve(id);
    fleet.Unreserve(kTrialId);
    Restore(fleet, victims);
    return ok;
  };

  PackerOptions only;
  for (const auto& c : candidates) {
    const auto& here = on_node[static_cast<size_t>(c.node)];
    AdmissionPlan plan;
    bool found = false;
    // One job first, then pairs; the cheapest that works on this node.
    for (size_t a = 0; a < here.size() && !found && params_.max_moves >= 1; ++a) {
      victims = {here[a]};
      if (cost_of(here[a]) > max_cost) break;  // sorted by cost: the rest cost more
      found = trial(c.node, &plan);
    }
    if (params_.max_moves >= 2) {
      for (size_t a = 0; a < here.size() && !found; ++a) {
        for (size_t b = a + 1; b < here.size() && !found; ++b) {
          if (cost_of(here[a]) + cost_of(here[b]) > max_cost) break;
          victims = {here[a], here[b]};
          found = trial(c.node, &plan);
        }
      }
    }
    // Then clear the node greedily, cheapest first, until w fits (wide jobs need whole nodes).
    if (!found && params_.max_moves > 2) {
      victims.clear();
      double cost = 0;
      only.only_node = c.node;
      for (const MovableJob* v : here) {
        if (static_cast<int>(victims.size()) >= params_.max_moves) break;
        cost += cost_of(v);
        if (cost > max_cost) break;
        victims.push_back(v);
        for (const MovableJob* x : victims) fleet.Unreserve(x->id);
        const bool fits = packer.Schedule(fleet, w, rng, only).placed;
        Restore(fleet, victims);
        if (fits) {
          found = trial(c.node, &plan);
          break;
        }
      }
    }
    if (found && plan.cost <= max_cost && (!best || plan.cost < best->cost)) best = plan;
  }
  return best;
}

std::optional<PreemptionPlan> Rebalancer::PlanPreemption(Fleet& fleet, const Workload& w,
                                                         std::span<const MovableJob> jobs,
                                                         Packer& packer, Rng& rng) const {
  std::vector<std::vector<const MovableJob*>> on_node(fleet.size());
  for (const auto& j : jobs) {
    if (j.movable && j.placement.valid() && fleet.IsReserved(j.id)) {
      on_node[static_cast<size_t>(j.placement.node)].push_back(&j);
    }
  }
  std::optional<PreemptionPlan> best;
  const auto better = [](const PreemptionPlan& a, const PreemptionPlan& b) {
    if (a.gpu_share != b.gpu_share) return a.gpu_share < b.gpu_share;
    return a.victims.size() < b.victims.size();
  };
  PackerOptions only;
  std::vector<const MovableJob*> victims;
  for (int32_t i = 0; i < static_cast<int32_t>(fleet.size()); ++i) {
    const auto& here = on_node[static_cast<size_t>(i)];
    if (here.empty() || !Capable(fleet.node(i), w)) continue;
    only.only_node = i;
    // Take victims in the caller's order until w fits.
    victims.clear();
    bool fits = false;
    for (const MovableJob* v : here) {
      if (static_cast<int>(victims.size()) >= params_.max_preempted) break;
      fleet.Unreserve(v->id);
      victims.push_back(v);
      if (packer.Schedule(fleet, w, rng, only).placed) {
        fits = true;
        break;
      }
    }
    if (!fits) {
      Restore(fleet, victims);
      continue;
    }
    // Leave in place the victims w turns out not to need, the caller's last choices first.
    for (size_t k = victims.size(); k-- > 0;) {
      const MovableJob* v = victims[k];
      (void)fleet.Reserve(v->id, v->shape, v->placement);
      if (packer.Schedule(fleet, w, rng, only).placed) {
        victims.erase(victims.begin() + static_cast<std::ptrdiff_t>(k));
      } else {
        fleet.Unreserve(v->id);
      }
    }
    PreemptionPlan plan;
    const Decision d = packer.Schedule(fleet, w, rng, only);
    plan.placement = d.placement;
    for (const MovableJob* v : victims) {
      plan.victims.push_back(v->id);
      plan.gpu_share += GpuShare(v->shape);
      plan.cost += v->downtime_s * GpuShare(v->shape);
    }
    Restore(fleet, victims);
    if (d.placed && (!best || better(plan, *best))) best = std::move(plan);
  }
  return best;
}

std::optional<Move> Rebalancer::PlanGrowth(Fleet& fleet, const MovableJob& job,
                                           const Workload& grown, Packer& packer, Rng& rng) const {
  if (!job.movable || !fleet.IsReserved(job.id)) return std::nullopt;
  fleet.Unreserve(job.id);
  const Decision d = packer.Schedule(fleet, grown, rng);
  const MovableJob* self = &job;
  Restore(fleet, std::span<const MovableJob* const>(&self, 1));
  if (!d.placed) return std::nullopt;
  if (d.placement.node == job.placement.node && d.placement.gpus == job.placement.gpus) {
    return std::nullopt;  // in place: the caller's business, not a move
  }
  return Move{job.id, job.placement, d.placement, job.DowntimeTo(d.placement.node)};
}

std::vector<Move> Rebalancer::PlanDefrag(Fleet& fleet, std::span<const MovableJob> jobs,
                                         std::span<const TypicalWorkload> typical, int max_moves,
                                         double min_gain_milli) const {
  const auto n = static_cast<int32_t>(fleet.size());
  std::vector<double> frag(fleet.size());
  for (int32_t i = 0; i < n; ++i)
    frag[static_cast<size_t>(i)] = FragAmount(ViewOf(fleet.node(i)), typical);
  // Candidate jobs: shared-GPU jobs on the most fragmented nodes.
  std::vector<const MovableJob*> cands;
  for (const auto& j : jobs) {
    if (j.movable && j.placement.valid() && j.shape.IsSharedGpu() && fleet.IsReserved(j.id)) {
      cands.push_back(&j);
    }
  }
  std::stable_sort(cands.begin(), cands.end(), [&](const MovableJob* a, const MovableJob* b) {
    const double fa = frag[static_cast<size_t>(a->placement.node)];
    const double fb = frag[static_cast<size_t>(b->placement.node)];
    return fa > fb || (fa == fb && a->id < b->id);
  });
  const size_t limit = static_cast<size_t>(std::max(0, params_.max_candidate_nodes)) * 4;
  if (cands.size() > limit) cands.resize(limit);

  std::vector<Move> moves;
  std::vector<std::pair<const MovableJob*, Placement>> applied;  // to roll back
  for (const MovableJob* j : cands) {
    if (static_cast<int>(moves.size()) >= max_moves) break;
    const int32_t from = j->placement.node;
    const Placement now = [&] {
      for (const auto& [job, p] : applied) {
        if (job == j) return p;
      }
      return j->placement;
    }();
    if (now.node != from) continue;  // already moved in this plan
    fleet.Unreserve(j->id);
    const double gain_from =
        frag[static_cast<size_t>(from)] - FragAmount(ViewOf(fleet.node(from)), typical);
    double best_gain = min_gain_milli;
    Placement best;
    for (int32_t b = 0; b < n; ++b) {
      if (b == from) continue;
      const Node& node = fleet.node(b);
      if (!ModelAllowed(j->shape, node) || node.cpu_left < j->shape.cpu_milli ||
          node.mem_left < j->shape.mem_mib || node.GpuMilliLeft() < j->shape.gpu_milli) {
        continue;
      }
      const FgdChoice c = FgdScore(ViewOf(node), j->shape, typical);
      if (c.gpus.empty()) continue;
      const double gain = gain_from - c.frag_delta;
      if (gain > best_gain) {
        best_gain = gain;
        best = Placement{b, c.gpus};
      }
    }
    if (best.valid() && fleet.Reserve(j->id, j->shape, best).ok()) {
      frag[static_cast<size_t>(from)] = FragAmount(ViewOf(fleet.node(from)), typical);
      frag[static_cast<size_t>(best.node)] = FragAmount(ViewOf(fleet.node(best.node)), typical);
      moves.push_back({j->id, j->placement, best, j->DowntimeTo(best.node)});
      applied.emplace_back(j, best);
    } else {
      (void)fleet.Reserve(j->id, j->shape, j->placement);
    }
  }
  // Roll back, newest first.
  for (auto it = applied.rbegin(); it != applied.rend(); ++it) fleet.Unreserve(it->first->id);
  for (const auto& [job, p] : applied) (void)fleet.Reserve(job->id, job->shape, job->placement);
  return moves;
}

}  // namespace paladin::core
