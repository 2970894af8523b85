// Reader for the per-pod usage series of the Alibaba GenAI serving trace (2026, "GenTD26"):
//   pod_gpu_memory_used_bytes_anon.csv  timestamp_anon,value,container_ip   GPU memory, bytes
//   pod_memory_util_anon.csv            value,timestamp_anon,container_ip   host memory, share of
//                                                                           the container's limit
//   pod_gpu_duty_cycle_anon.csv         value,timestamp_anon,container_ip   GPU busy, percent
// Columns are found by name. One series per pod (container_ip), sorted by time; a pod's repeated
// timestamps keep their largest value (the trace has two such pairs). Rows with no pod id cannot be
// attributed (the host-memory file has 49): they are skipped and counted in *skipped. Readings a
// hair below zero (down to -1 MiB, -0.001, -0.1%) are rounding noise and read as zero. Any other
// bad row is an error naming file:line:field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/core/predict_eval.h"

namespace paladin::trace {

enum class GenAiMetric { kGpuMemBytes, kHostMemShare, kGpuDutyPct };

// The file name of a metric inside the usage directory.
const char* GenAiFileName(GenAiMetric metric);

StatusOr<std::vector<core::UsageSeries>> ReadGenAiUsage(const std::string& dir, GenAiMetric metric,
                                                        int64_t* skipped = nullptr);
StatusOr<std::vector<core::UsageSeries>> ParseGenAiUsage(const std::string& text,
                                                         const std::string& source,
                                                         GenAiMetric metric,
                                                         int64_t* skipped = nullptr);

}  // namespace paladin::trace
