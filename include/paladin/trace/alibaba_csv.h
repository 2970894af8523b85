// Readers for the Alibaba GPU cluster trace v2023 ("openb", the FGD trace) CSV files.
//
// Node list: sn,cpu_milli,memory_mib,gpu,model
// Pod list:  name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,creation_time,
//            deletion_time,scheduled_time] (the multigpu variants carry only the first five)
//
// Columns are found by header name, in any order; extra columns are ignored. Every error names
// the file, the line and the field, and nothing is returned from a file with a bad row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/core/fleet.h"

namespace paladin::trace {

// Loads the nodes into a new fleet, interning their GPU models.
StatusOr<core::Fleet> ReadNodeCsv(const std::string& path);
StatusOr<core::Fleet> ParseNodeCsv(const std::string& text, const std::string& source);

// Loads the tasks; gpu_spec model names must be models of `models` (the fleet's).
StatusOr<std::vector<core::Workload>> ReadPodCsv(const std::string& path,
                                                 const core::GpuModelTable& models);
StatusOr<std::vector<core::Workload>> ParsePodCsv(const std::string& text,
                                                  const std::string& source,
                                                  const core::GpuModelTable& models);

// The times of each task (seconds from the trace's origin), in file order. A pod list without
// the time columns (the multigpu variants) gives an empty vector, not an error. Empty
// scheduled_time (never scheduled) or deletion_time (still there) read as -1.
struct PodTimes {
  int64_t creation_s = -1;
  int64_t scheduled_s = -1;
  int64_t deletion_s = -1;
};
StatusOr<std::vector<PodTimes>> ParsePodTimes(const std::string& text, const std::string& source);
StatusOr<std::vector<PodTimes>> ReadPodTimes(const std::string& path);

}  // namespace paladin::trace
