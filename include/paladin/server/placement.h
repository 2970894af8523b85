// What the server's scheduling loop hands the core packer, shared with Paladin's Kubernetes
// scheduler (src/k8s/scheduler.cc) so that a pod and a job of the same size are packed by the
// same policy with the same shape: one packer, not a second implementation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/core/frag.h"
#include "paladin/core/packer.h"

namespace paladin::server {

// The shapes the packing policy expects to see (FGD and paladin weigh fragmentation against
// them): shared GPUs in eighths, quarters and halves, and whole GPUs.
std::shared_ptr<const std::vector<core::TypicalWorkload>> DefaultShapes();

// The policy `name` (a core::PolicyNames() entry) over DefaultShapes(), as the server uses it.
StatusOr<core::Policy> MakeServerPolicy(const std::string& name);

// A job's or pod's shape for the packer: `gpus` GPUs with `quota_bytes` of memory on each. A
// single GPU's share is the quota over `gpu_memory` (the GPU's size), rounded up; several GPUs,
// or an unknown size, take whole GPUs.
core::Workload GpuShape(const std::string& name, const std::string& team, int32_t priority,
                        int32_t gpus, int64_t quota_bytes, int64_t gpu_memory);

}  // namespace paladin::server
