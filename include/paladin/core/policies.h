// Placement policies. Each is a small score plugin (plus a GPU selector) over the packer's
// pipeline; the score functions are exposed for table tests.
//
// Baselines, as defined by the FGD artifact (USENIX ATC'23) so that published runs can be
// reproduced: every baseline score is an integer in [0, 100] and ties are broken uniformly.
//   Random         any feasible node, any fitting GPU
//   DotProduct     Tetris-style alignment of free vs requested (CPU, GPU), least aligned wins
//   GpuClustering  put alike GPU requests together (shared with shared, 2-GPU with 2-GPU, ...)
//   GpuPacking     prefer partly used GPUs, then partly used nodes, then empty nodes
//   BestFit        least free CPU and GPU left after placement
//   FGD            least growth of expected fragmentation against the typical workloads
// Ours:
//   paladin        see PaladinPolicy in policies/paladin.cc and docs/packing.md
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "paladin/core/frag.h"
#include "paladin/core/packer.h"

namespace paladin::core {

struct PolicyContext {
  // The workload's distribution of shapes: what FGD (and paladin) may know about the future.
  // `typical` is FGD's cut (the most frequent shapes covering 95% of tasks); `shapes` is the
  // whole distribution (every shape with its count), which paladin weighs differently.
  std::shared_ptr<const std::vector<TypicalWorkload>> typical;
  std::shared_ptr<const std::vector<TypicalWorkload>> shapes;
};

// paladin's knobs: one set for every trace (docs/packing.md says how they were chosen).
struct PaladinParams {
  // The workload's CPU per GPU over the fleet's, at or above which the fleet is CPU-bound.
  double cpu_bound_ratio = 0.95;
  // GPU-bound fleets: granularity (milli-GPU) of the stranding tie-breaker under FGD's score.
  double tiebreak_quantum_milli = 400;
  // CPU-bound fleets: granularity (milli-GPU) of the stranding + fragmentation score.
  double cpu_bound_quantum_milli = 100;
  // GPU-bound fleets: FGD's fragmentation also counts a typical task as blocked on a node whose
  // free host memory is under this fraction of the task shape's mean memory (0 = FGD's own).
  double memory_fraction = 0.5;
};
Policy MakePaladinPolicy(const PolicyContext& ctx, const PaladinParams& params);

// Canonical names, in the order reports list them.
const std::vector<std::string>& PolicyNames();
// Accepts any capitalisation; an unknown name is an error listing the valid ones.
StatusOr<Policy> MakePolicy(std::string_view name, const PolicyContext& ctx);
StatusOr<std::string> CanonicalPolicyName(std::string_view name);

// Normalisation constants of the FGD artifact: the largest node it assumes.
inline constexpr double kMaxSpecCpuMilli = 128000;
inline constexpr double kMaxSpecGpuMilli = 8000;

// Score functions (node state before placement, workload) -> [0, 100].
double DotProductScore(const Node& n, const Workload& w);
double BestFitScore(const Node& n, const Workload& w);
double GpuClusteringScore(const Node& n, const Workload& w);
double GpuPackingScore(const Node& n, const Workload& w);

struct FgdChoice {
  double score = 0;           // integer in [0, 100]: 100 * sigmoid(drop in fragmentation / 1000)
  std::vector<int16_t> gpus;  // the GPUs FGD would use on this node
  double frag_delta = 0;      // F(after) - F(before), milli-GPU
};
FgdChoice FgdScore(const NodeView& v, const Workload& w, std::span<const TypicalWorkload> typical);

}  // namespace paladin::core
