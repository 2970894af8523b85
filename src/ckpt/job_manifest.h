// What a checkpoint's manifest says of the job it holds, read from the running job: its record,
// this node and CRIU, and the GPU memory its processes hold.
#ifndef PALADIN_SRC_CKPT_JOB_MANIFEST_H_
#define PALADIN_SRC_CKPT_JOB_MANIFEST_H_

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "paladin/ckpt/criu.h"
#include "paladin/ckpt/image.h"
#include "paladin/ckpt/workload.h"

namespace paladin::ckpt {

// The manifest of `job` (whose root is `root_pid`) dumped by `criu` on this node, now; without
// its files, logs, uid, stopped processes and GPUs, which the checkpoint adds.
Manifest DescribeJob(const JobRecord& job, const Criu& criu, int64_t root_pid);

// Adds the GPUs the job's processes (`pids`) hold memory on, from NVML (real or emulated), and
// the driver; nothing for a CPU job or where NVML does not answer.
void DescribeGpus(const JobRecord& job, const std::vector<pid_t>& pids, Manifest* m);

}  // namespace paladin::ckpt

#endif  // PALADIN_SRC_CKPT_JOB_MANIFEST_H_
