// The FGD trace experiment (USENIX ATC'23, section 6): a static cluster receives a shuffled
// stream of tasks whose total GPU request reaches `target_ratio` x the cluster's GPU capacity;
// each is placed once, none departs. The GPU allocation ratio is recorded against the arrived
// GPU request, the curve the paper plots.
//
// Deterministic: the same fleet, trace, policy and seed give bit-identical results. The arrival
// stream depends on the seed only, so every policy sees the same stream for a seed.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "paladin/core/fleet.h"
#include "paladin/core/frag.h"
#include "paladin/core/policies.h"
#include "paladin/core/rebalance.h"
#include "paladin/core/rng.h"

namespace paladin::core {

struct FgdSimOptions {
  double target_ratio = 1.3;  // arrived GPU request / GPU capacity at the end of the stream
  int max_pct = 130;          // curves are recorded for arrived % = 0..max_pct
  TypicalOptions typical;
  // Optional, injected by the caller: a monotonic clock in ns, to time each decision.
  std::function<int64_t()> clock_ns;
  // Optional: builds the policy instead of MakePolicy(name) (for parameter sweeps).
  std::function<Policy(const PolicyContext&)> make_policy;
  // Let the rebalancer move placed tasks to admit one that fits nowhere (each move counts 1).
  bool rebalance = false;
  RebalanceParams rebalance_params;
  // With rebalance: every this many points of arrived load (% of capacity), fragmentation-lowering
  // moves of shared tasks (PlanDefrag), at most defrag_moves each time. 0 = never.
  double defrag_every_pct = 0;
  int defrag_moves = 50;
};

struct FgdRunResult {
  std::string policy;
  uint64_t seed = 0;
  // Index = arrived GPU request in % of capacity (rounded); NaN where the stream has no data.
  std::vector<double> alloc_pct;  // mean GPU allocation ratio, % of capacity
  std::vector<double> frag_pct;   // mean fragmentation ratio, % of idle GPU capacity
  int64_t arrivals = 0;
  int64_t placed = 0;
  int64_t moves = 0;       // tasks moved by the rebalancer
  int64_t rebalanced = 0;  // tasks admitted thanks to moves
  double final_alloc_pct = 0;
  std::vector<int64_t> decision_ns;  // per decision, when a clock was given
};

// The arrival stream for one seed: the trace's tasks, topped up by uniform draws with
// replacement (or thinned by uniform removals) until the total GPU request is as close to
// target_ratio x capacity as the next task allows, then shuffled.
std::vector<Workload> BuildFgdArrivals(std::span<const Workload> trace, int64_t gpu_milli_capacity,
                                       double target_ratio, uint64_t seed);

// Runs one policy over one seed's stream on a copy of `fleet`. `typical` is what FGD and
// paladin may know of the workload; the other policies ignore it.
StatusOr<FgdRunResult> RunFgdSim(const Fleet& fleet, std::span<const Workload> trace,
                                 std::string_view policy, uint64_t seed,
                                 const FgdSimOptions& options = {});

// The cluster's fragmentation ratio: % of idle GPU milli the typical workloads cannot use.
double ClusterFragRatioPct(const Fleet& fleet, std::span<const TypicalWorkload> typical);

}  // namespace paladin::core
