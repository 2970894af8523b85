#include "paladin/core/packer.h"

#include <algorithm>
#include <map>

namespace paladin::core {
namespace {

bool GpuFits(const Gpu& g, const Workload& w) {
  if (g.milli_left < w.gpu_milli) return false;
  return w.gpu_mem_mib == 0 || g.mem_total_mib == 0 || g.mem_left_mib >= w.gpu_mem_mib;
}

class GpuModelFilter final : public FilterPlugin {
 public:
  std::string_view name() const override { return "GpuModel"; }
  bool Filter(const Fleet& fleet, const Workload& w, int32_t node,
              std::string* reason) const override {
    const Node& n = fleet.node(node);
    if (w.gpu_count > 0 && n.gpu_count() == 0) {
      if (reason) *reason = "node " + n.name + " has no GPUs";
      return false;
    }
    if (ModelAllowed(w, n)) return true;
    if (reason) {
      *reason = "node " + n.name + " has " + fleet.models().Name(n.model) + ", workload allows " +
                fleet.models().MaskToString(w.allowed_models);
    }
    return false;
  }
};

class CpuFitFilter final : public FilterPlugin {
 public:
  std::string_view name() const override { return "CpuFit"; }
  bool Filter(const Fleet& fleet, const Workload& w, int32_t node,
              std::string* reason) const override {
    const Node& n = fleet.node(node);
    if (n.cpu_left >= w.cpu_milli) return true;
    if (reason) {
      *reason = "node " + n.name + ": CPU " + std::to_string(n.cpu_left) + "m free < " +
                std::to_string(w.cpu_milli) + "m";
    }
    return false;
  }
};

class MemoryFitFilter final : public FilterPlugin {
 public:
  std::string_view name() const override { return "MemoryFit"; }
  bool Filter(const Fleet& fleet, const Workload& w, int32_t node,
              std::string* reason) const override {
    const Node& n = fleet.node(node);
    if (n.mem_left >= w.mem_mib) return true;
    if (reason) {
      *reason = "node " + n.name + ": memory " + std::to_string(n.mem_left) + " MiB free < " +
                std::to_string(w.mem_mib) + " MiB";
    }
    return false;
  }
};

class GpuFitFilter final : public FilterPlugin {
 public:
  std::string_view name() const override { return "GpuFit"; }
  bool Filter(const Fleet& fleet, const Workload& w, int32_t node,
              std::string* reason) const override {
    if (w.gpu_count == 0) return true;
    const Node& n = fleet.node(node);
    int fitting = 0;
    for (const Gpu& g : n.gpus) fitting += GpuFits(g, w) ? 1 : 0;
    if (fitting >= w.gpu_count) return true;
    if (reason) {
      *reason = "node " + n.name + ": " + std::to_string(fitting) + " GPUs with " +
                std::to_string(w.gpu_milli) + " milli" +
                (w.gpu_mem_mib > 0 ? " and " + std::to_string(w.gpu_mem_mib) + " MiB" : "") +
                " free, " + std::to_string(w.gpu_count) + " needed";
    }
    return false;
  }
};

class BestFitGpuSelector final : public GpuSelector {
 public:
  std::string_view name() const override { return "best-fit"; }
  std::vector<int16_t> Select(const Fleet& fleet, const Workload& w, int32_t node,
                              Rng& /*rng*/) override {
    const Node& n = fleet.node(node);
    if (w.gpu_count == 0) return {};
    if (!w.IsSharedGpu()) return FirstFreeGpus(n, w);
    int best = -1;
    for (int i = 0; i < n.gpu_count(); ++i) {
      const Gpu& g = n.gpus[static_cast<size_t>(i)];
      if (!GpuFits(g, w)) continue;
      if (best < 0 || g.milli_left < n.gpus[static_cast<size_t>(best)].milli_left) best = i;
    }
    if (best < 0) return {};
    return {static_cast<int16_t>(best)};
  }
};

class RandomGpuSelector final : public GpuSelector {
 public:
  std::string_view name() const override { return "random"; }
  std::vector<int16_t> Select(const Fleet& fleet, const Workload& w, int32_t node,
                              Rng& rng) override {
    const Node& n = fleet.node(node);
    if (w.gpu_count == 0) return {};
    if (!w.IsSharedGpu()) return FirstFreeGpus(n, w);
    int chosen = -1;
    uint64_t seen = 0;
    for (int i = 0; i < n.gpu_count(); ++i) {
      if (!GpuFits(n.gpus[static_cast<size_t>(i)], w)) continue;
      if (rng.Uniform(++seen) == 0) chosen = i;
    }
    if (chosen < 0) return {};
    return {static_cast<int16_t>(chosen)};
  }
};

}  // namespace

std::vector<int16_t> FirstFreeGpus(const Node& n, const Workload& w) {
  std::vector<int16_t> out;
  for (int i = 0; i < n.gpu_count() && static_cast<int>(out.size()) < w.gpu_count; ++i) {
    const Gpu& g = n.gpus[static_cast<size_t>(i)];
    if (g.milli_left == kMilliPerGpu && GpuFits(g, w)) out.push_back(static_cast<int16_t>(i));
  }
  if (static_cast<int>(out.size()) < w.gpu_count) out.clear();
  return out;
}

std::vector<std::unique_ptr<FilterPlugin>> DefaultFilters() {
  std::vector<std::unique_ptr<FilterPlugin>> f;
  f.push_back(std::make_unique<GpuModelFilter>());
  f.push_back(std::make_unique<CpuFitFilter>());
  f.push_back(std::make_unique<MemoryFitFilter>());
  f.push_back(std::make_unique<GpuFitFilter>());
  return f;
}

std::unique_ptr<GpuSelector> MakeBestFitGpuSelector() {
  return std::make_unique<BestFitGpuSelector>();
}
std::unique_ptr<GpuSelector> MakeRandomGpuSelector() {
  return std::make_unique<RandomGpuSelector>();
}

Packer::Packer(Policy policy) : Packer(DefaultFilters(), std::move(policy)) {}

Packer::Packer(std::vector<std::unique_ptr<FilterPlugin>> filters, Policy policy)
    : filters_(std::move(filters)), policy_(std::move(policy)) {
  if (!policy_.gpu_selector) policy_.gpu_selector = MakeBestFitGpuSelector();
}

int32_t Packer::Rank(int32_t node) const {
  return static_cast<size_t>(node) < ranks_.size() ? ranks_[static_cast<size_t>(node)] : node;
}

Decision Packer::Schedule(const Fleet& fleet, const Workload& w, Rng& rng,
                          const PackerOptions& options) {
  Decision d;
  d.rejections.resize(filters_.size());
  for (size_t f = 0; f < filters_.size(); ++f) d.rejections[f].plugin = filters_[f]->name();

  feasible_.clear();
  const auto node_count = static_cast<int32_t>(fleet.size());
  for (int32_t i = 0; i < node_count; ++i) {
    if ((options.only_node >= 0 && i != options.only_node) || i == options.exclude_node) continue;
    if (std::find(options.exclude_nodes.begin(), options.exclude_nodes.end(), i) !=
        options.exclude_nodes.end()) {
      continue;
    }
    bool pass = true;
    for (size_t f = 0; f < filters_.size(); ++f) {
      FilterRejections& r = d.rejections[f];
      std::string* reason = options.collect_reasons && r.nodes == 0 ? &r.first_reason : nullptr;
      if (!filters_[f]->Filter(fleet, w, i, reason)) {
        ++r.nodes;
        pass = false;
        break;
      }
    }
    if (pass) feasible_.push_back(i);
  }
  d.feasible_nodes = static_cast<int32_t>(feasible_.size());
  if (feasible_.empty()) return d;

  for (auto& s : policy_.scores) s.plugin->PreScore(fleet, w, feasible_, rng);

  int32_t best = -1;
  double best_score = 0;
  uint64_t ties = 0;
  for (int32_t node : feasible_) {
    double total = 0;
    for (auto& s : policy_.scores) total += s.weight * s.plugin->Score(fleet, w, node);
    if (best < 0 || total > best_score) {
      best = node;
      best_score = total;
      ties = 1;
    } else if (total == best_score) {
      if (policy_.tie_break == TieBreak::kUniformRandom) {
        if (rng.Uniform(++ties) == 0) best = node;
      } else if (Rank(node) < Rank(best)) {
        best = node;
      }
    }
  }

  d.placement.node = best;
  d.placement.gpus = policy_.gpu_selector->Select(fleet, w, best, rng);
  d.score = best_score;
  d.placed = static_cast<int>(d.placement.gpus.size()) == w.gpu_count;
  if (!d.placed) d.placement = Placement{};
  return d;
}

Status Packer::ScheduleGang(Fleet& fleet, std::span<const Workload> gang,
                            std::span<const uint64_t> ids, Rng& rng,
                            const std::vector<const PermitPlugin*>& permits,
                            std::vector<Placement>* placements) {
  if (gang.size() != ids.size()) return InvalidArgument("gang and ids differ in length");
  for (size_t i = 0; i < ids.size(); ++i) {
    // A rollback must only release what this call reserved.
    if (fleet.IsReserved(ids[i])) {
      return AlreadyExists("gang member " + gang[i].name + ": reservation id " +
                           std::to_string(ids[i]) + " is already in use");
    }
    for (size_t j = 0; j < i; ++j) {
      if (ids[j] == ids[i]) return InvalidArgument("gang reservation ids repeat");
    }
  }
  std::vector<Placement> placed;
  auto rollback = [&](size_t count) {
    for (size_t i = 0; i < count; ++i) fleet.Unreserve(ids[i]);
  };
  std::vector<int32_t> kept_off;
  for (size_t i = 0; i < gang.size(); ++i) {
    // The nodes a permit plugin keeps this member off, given the members placed so far.
    kept_off.clear();
    std::string kept_by;
    for (int32_t n = 0; n < static_cast<int32_t>(fleet.size()); ++n) {
      for (const PermitPlugin* p : permits) {
        if (!p->AllowsMemberOn(fleet, placed, n)) {
          kept_off.push_back(n);
          if (kept_by.empty()) kept_by = std::string(p->name());
          break;
        }
      }
    }
    PackerOptions options{true};
    options.exclude_nodes = kept_off;
    Decision d = Schedule(fleet, gang[i], rng, options);
    if (!d.placed) {
      rollback(i);
      std::string why = d.Explain();
      if (!kept_off.empty()) {
        why += "; " + kept_by + " kept it off " + std::to_string(kept_off.size()) + " node" +
               (kept_off.size() == 1 ? "" : "s");
      }
      return ResourceExhausted("gang member " + gang[i].name + " does not fit: " + why);
    }
    Status st = fleet.Reserve(ids[i], gang[i], d.placement);
    if (!st.ok()) {
      rollback(i);
      return st;
    }
    placed.push_back(d.placement);
  }
  for (const PermitPlugin* p : permits) {
    std::string reason;
    if (!p->Permit(fleet, gang, placed, &reason)) {
      rollback(gang.size());
      return FailedPrecondition(std::string(p->name()) + " refused the gang: " + reason);
    }
  }
  if (placements) *placements = std::move(placed);
  return Status::Ok();
}

bool MaxPerNodePermit::AllowsMemberOn(const Fleet& /*fleet*/, std::span<const Placement> placed,
                                      int32_t node) const {
  const auto on_node = std::count_if(placed.begin(), placed.end(),
                                     [node](const Placement& p) { return p.node == node; });
  return on_node < max_;
}

bool MaxPerNodePermit::Permit(const Fleet& fleet, std::span<const Workload> /*gang*/,
                              std::span<const Placement> placements, std::string* reason) const {
  std::map<int32_t, int32_t> per_node;
  for (const Placement& p : placements) {
    if (++per_node[p.node] > max_) {
      if (reason != nullptr) {
        *reason = "node " + fleet.node(p.node).name + " would hold more than " +
                  std::to_string(max_) + " members";
      }
      return false;
    }
  }
  return true;
}

std::string Decision::Explain() const {
  if (placed) {
    return "placed on node index " + std::to_string(placement.node) + " with score " +
           std::to_string(score) + " among " + std::to_string(feasible_nodes) + " feasible nodes";
  }
  std::string out = feasible_nodes > 0
                        ? "a node passed the filters but its GPUs could not be chosen"
                        : "no node fits:";
  for (const auto& r : rejections) {
    if (r.nodes == 0) continue;
    out += " " + r.plugin + " rejected " + std::to_string(r.nodes) + " node" +
           (r.nodes == 1 ? "" : "s");
    if (!r.first_reason.empty()) out += " (" + r.first_reason + ")";
    out += ";";
  }
  if (!out.empty() && out.back() == ';') out.pop_back();
  return out;
}

}  // namespace paladin::core
