// Usage measurement for one workload: what the interposer counts per GPU (from the accounting
// region), what NVML measures for the workload's processes, and the host memory and CPU time of
// its process tree (from its cgroup when it has one, else from /proc). The node
// agent and `paladin top` read workloads through this one API; `paladin run --usage-log` writes
// its samples as CSV (docs/formats/usage-log.md).
#ifndef PALADIN_QUOTA_USAGE_H_
#define PALADIN_QUOTA_USAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "paladin/gpu/nvml.h"
#include "paladin/quota/region.h"

namespace paladin::quota {

struct GpuUsage {
  std::string uuid;
  uint64_t quota_bytes = 0;
  uint64_t counted_bytes = 0;       // the interposer's count (allocations + contexts)
  uint64_t counted_peak_bytes = 0;  // since the workload started
  uint64_t context_bytes = 0;       // of counted_bytes, what its contexts cost
  uint64_t nvml_bytes = 0;          // NVML's per-process figure, summed over the workload
  uint32_t sm_util_pct = 0;         // NVML's per-process SM utilisation, summed
  bool nvml_available = false;
};

struct WorkloadUsage {
  std::vector<GpuUsage> gpus;
  std::vector<uint32_t> pids;  // the workload's processes (host pids)
  uint64_t host_rss_bytes = 0;
  double cpu_seconds = 0;  // user + system, all processes, since they started
  uint64_t refusals = 0;
  uint64_t grows = 0;
};

// Samples the workload whose accounting is `region` and whose process tree starts at `root`.
// `nvml` may be null (no NVML figures). With `cgroup` (the workload's group name under
// paladin/), host memory and CPU come from the group, else from the process tree in /proc.
WorkloadUsage SampleUsage(const Region& region, const gpu::Nvml* nvml, uint32_t root,
                          const std::string& cgroup = "");

}  // namespace paladin::quota

#endif  // PALADIN_QUOTA_USAGE_H_
