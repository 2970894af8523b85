// What each pod holds on its node's GPUs, measured (docs/kubernetes.md, "Usage measured per
// pod"): `paladin k8s node --usage` reads NVML's processes of every GPU (host pids), finds each
// process's pod from its cgroup, and writes the sum per pod into the pod's annotation
// paladin.io/gpu-memory-used (bytes), which Paladin's scheduler reports to the server with the
// pod. Only Paladin writes it (the webhook refuses it from anyone else).
//
// Thread safety: pure functions, and ApiClient calls.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/k8s/api.h"

namespace paladin::k8s {

inline constexpr char kGpuUsedAnnotation[] = "paladin.io/gpu-memory-used";

// The UID of the pod whose cgroup a /proc/PID/cgroup text names ("" when none): the kubelet's
// cgroupfs layout (.../kubepods/burstable/pod<UID>/<container>) and its systemd one
// (...kubepods-burstable-pod<UID with '_'>.slice/...), either cgroup version.
std::string PodUidOfCgroup(std::string_view cgroup);

// A GPU process as NVML lists it: host pid, bytes.
struct GpuProcessUse {
  uint32_t pid = 0;
  uint64_t used_bytes = 0;
};
// The bytes each pod's processes hold, by pod UID; `cgroup_of` reads /proc/PID/cgroup ("" when
// the process is gone). Processes of no pod are left out.
std::map<std::string, uint64_t> UsageByPod(const std::vector<GpuProcessUse>& processes,
                                           const std::function<std::string(uint32_t)>& cgroup_of);

// Writes each of `node`'s pods' measured use into its annotation: the pods of `used` (by UID),
// and 0 for a pod whose annotation says more than it now holds. A value within 1 MiB of the
// annotation's is left alone (no write every pass). Returns a line per pod written.
StatusOr<std::vector<std::string>> PublishPodUsage(const ApiClient& client, const std::string& node,
                                                   const std::map<std::string, uint64_t>& used);

}  // namespace paladin::k8s
