// How much room is left above a policy: a valid upper bound on the GPU allocation any placement
// of an arrival stream can reach, and what an offline packer that sees the whole stream reaches.
#pragma once

#include <span>

#include "paladin/core/fleet.h"
#include "paladin/core/policies.h"

namespace paladin::core {

// An upper bound (% of GPU capacity) on the GPU share any placement of `arrivals` on `fleet` can
// allocate. It relaxes placement to the fleet's totals: the allocated GPU is at most the
// capacity, and, for CPU and for memory separately, at most the best fractional choice of tasks
// that fits the fleet's total of that resource (weak duality: for every lambda >= 0,
// allocated <= lambda * capacity + sum_i max(0, gpu_i - lambda * need_i); minimised over lambda).
// Ignores node boundaries, so it is loose but never wrong.
double ResourceUpperBoundPct(const Fleet& fleet, std::span<const Workload> arrivals);

// An offline reference: the same tasks placed largest-GPU-request first (then largest CPU) with
// `policy`. Not a bound; it shows what knowing the whole stream in advance buys.
StatusOr<double> OfflineSortedAllocPct(const Fleet& fleet, std::span<const Workload> arrivals,
                                       const std::string& policy, const PolicyContext& ctx);

}  // namespace paladin::core
