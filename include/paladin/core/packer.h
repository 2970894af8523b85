// The packer: a pipeline of named extension points that decides where one workload goes.
//
//   filter  -> drop nodes that cannot host the workload (each rejection names its plugin)
//   score   -> rank the survivors; every score plugin returns a value in [0, 100], and the
//              packer adds them up with the policy's weights
//   select  -> pick the best node (exact ties go to the node of lowest rank, or uniformly at
//              random) and the GPUs on it
//   reserve -> the caller books the placement in the Fleet (Fleet::Reserve / Unreserve)
//   permit  -> for gangs: all members placed and permitted, or none kept
//
// Binding (starting the workload somewhere) is the caller's job, never the packer's. Policies
// are synchronous and deterministic given the Rng they are handed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "paladin/core/fleet.h"
#include "paladin/core/rng.h"

namespace paladin::core {

class FilterPlugin {
 public:
  virtual ~FilterPlugin() = default;
  virtual std::string_view name() const = 0;
  // True when `node` can host `w`. On false, and when `reason` is non-null, says why.
  virtual bool Filter(const Fleet& fleet, const Workload& w, int32_t node,
                      std::string* reason) const = 0;
};

class ScorePlugin {
 public:
  virtual ~ScorePlugin() = default;
  virtual std::string_view name() const = 0;
  // Called once per decision with the nodes that passed every filter.
  virtual void PreScore(const Fleet& /*fleet*/, const Workload& /*w*/,
                        std::span<const int32_t> /*feasible*/, Rng& /*rng*/) {}
  // A score in [0, 100] for placing `w` on `node`; higher is better.
  virtual double Score(const Fleet& fleet, const Workload& w, int32_t node) = 0;
};

// Chooses the GPUs on the chosen node.
class GpuSelector {
 public:
  virtual ~GpuSelector() = default;
  virtual std::string_view name() const = 0;
  // The GPU indices for `w` on `node` (which passed the filters). Empty for CPU-only work.
  virtual std::vector<int16_t> Select(const Fleet& fleet, const Workload& w, int32_t node,
                                      Rng& rng) = 0;
};

class PermitPlugin {
 public:
  virtual ~PermitPlugin() = default;
  virtual std::string_view name() const = 0;
  // Called after every member of a gang has been reserved. False rolls the gang back.
  virtual bool Permit(const Fleet& fleet, std::span<const Workload> gang,
                      std::span<const Placement> placements, std::string* reason) const = 0;
  // Whether the next member may go on `node` after the members `placed` so far. A permit that
  // bounds how a gang spreads says no here too, so that ScheduleGang looks elsewhere for that
  // member instead of building a gang Permit would refuse. The default allows every node.
  virtual bool AllowsMemberOn(const Fleet& /*fleet*/, std::span<const Placement> /*placed*/,
                              int32_t /*node*/) const {
    return true;
  }
};

// At most `max_per_node` members of a gang on one node (a gang's ranks per node).
class MaxPerNodePermit final : public PermitPlugin {
 public:
  explicit MaxPerNodePermit(int32_t max_per_node) : max_(max_per_node) {}
  std::string_view name() const override { return "MaxPerNode"; }
  bool Permit(const Fleet& fleet, std::span<const Workload> gang,
              std::span<const Placement> placements, std::string* reason) const override;
  bool AllowsMemberOn(const Fleet& fleet, std::span<const Placement> placed,
                      int32_t node) const override;

 private:
  int32_t max_;
};

// How the packer breaks exact ties between the best-scoring nodes.
enum class TieBreak {
  kLowestRank,     // the tied node of lowest rank (see Packer::SetNodeRanks); deterministic
  kUniformRandom,  // like the stock Kubernetes scheduler: every tied node equally likely
};

struct WeightedScore {
  std::unique_ptr<ScorePlugin> plugin;
  double weight = 1.0;
};

// A placement policy: score plugins with weights, a GPU selector and a tie-break rule.
struct Policy {
  std::string name;
  std::vector<WeightedScore> scores;
  std::unique_ptr<GpuSelector> gpu_selector;
  TieBreak tie_break = TieBreak::kLowestRank;
};

struct FilterRejections {
  std::string plugin;
  int32_t nodes = 0;         // how many nodes this plugin rejected
  std::string first_reason;  // one example, when reasons were asked for
};

struct Decision {
  bool placed = false;
  Placement placement;
  double score = 0;
  int32_t feasible_nodes = 0;
  std::vector<FilterRejections> rejections;  // one entry per filter plugin, in pipeline order
  // "no node fits: CpuFit rejected 12 nodes (node n3: CPU 2000m free < 4000m requested), ..."
  std::string Explain() const;
};

struct PackerOptions {
  bool collect_reasons = false;  // build a human reason for the first rejection of each plugin
  int32_t only_node = -1;        // >= 0: consider this node only (the rebalancer's trial moves)
  int32_t exclude_node = -1;     // >= 0: never this node (a job moving off it)
  // Never these nodes either (ScheduleGang: nodes a permit plugin keeps the next member off).
  std::span<const int32_t> exclude_nodes;
};

class Packer {
 public:
  // The default filters (GpuModel, CpuFit, MemoryFit, GpuFit) plus `policy`.
  explicit Packer(Policy policy);
  Packer(std::vector<std::unique_ptr<FilterPlugin>> filters, Policy policy);
  Packer(const Packer&) = delete;
  Packer& operator=(const Packer&) = delete;

  const Policy& policy() const { return policy_; }

  // The order in which exact ties are broken under TieBreak::kLowestRank: node i has rank
  // ranks[i] (lower wins). Empty = node index order. The FGD artifact ranks nodes by a random
  // permutation drawn per seed (it prefixes node names with it and takes the smallest name).
  void SetNodeRanks(std::vector<int32_t> ranks) { ranks_ = std::move(ranks); }

  // Decides where `w` goes. Does not change the fleet: the caller reserves the placement.
  Decision Schedule(const Fleet& fleet, const Workload& w, Rng& rng,
                    const PackerOptions& options = {});

  // Places a gang all-or-nothing: each member is scheduled and reserved in turn (so members
  // see each other) on a node every permit plugin allows it on (AllowsMemberOn), then every
  // permit plugin must agree. On any failure every member that was
  // reserved is unreserved and the fleet is exactly as before. `ids` are the reservation ids.
  Status ScheduleGang(Fleet& fleet, std::span<const Workload> gang, std::span<const uint64_t> ids,
                      Rng& rng, const std::vector<const PermitPlugin*>& permits,
                      std::vector<Placement>* placements);

 private:
  int32_t Rank(int32_t node) const;

  std::vector<std::unique_ptr<FilterPlugin>> filters_;
  Policy policy_;
  std::vector<int32_t> ranks_;
  std::vector<int32_t> feasible_;  // scratch, reused across decisions
};

std::vector<std::unique_ptr<FilterPlugin>> DefaultFilters();

// GPU selectors shared by several policies.
std::unique_ptr<GpuSelector> MakeBestFitGpuSelector();  // tightest GPU that fits
std::unique_ptr<GpuSelector> MakeRandomGpuSelector();   // any GPU that fits, uniformly

// The whole GPUs `w` takes on a node: the first fully free ones (with w's GPU memory), in index
// order. Empty when there are not enough.
std::vector<int16_t> FirstFreeGpus(const Node& n, const Workload& w);

}  // namespace paladin::core
