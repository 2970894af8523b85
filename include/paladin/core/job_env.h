// What a job may put in its environment. A team's variables reach only the job's own
// unprivileged processes (ckpt::StartWorkload applies them after the switch of user), never a
// privileged one; this check refuses, in addition, the variables that would steer the dynamic
// loader or glibc (LD_PRELOAD, LD_LIBRARY_PATH, GCONV_PATH, ...: they could load code ahead of the
// quota interposer) and the ones Paladin sets itself (PALADIN_*, CUDA_VISIBLE_DEVICES, CUDA_MPS_*).
// The list and its reasons: docs/agent.md, "A job's environment".
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "paladin/base/status.h"

namespace paladin::core {

inline constexpr size_t kMaxJobEnvVariables = 512;
inline constexpr size_t kMaxJobEnvNameBytes = 255;
inline constexpr size_t kMaxJobEnvValueBytes = size_t{128} * 1024;  // the kernel's limit per string
inline constexpr size_t kMaxJobEnvTotalBytes = size_t{1024} * 1024;

// Why `name` may not be set by a job, or "" when it may. Names must also be well formed
// (CheckJobEnv).
std::string RefusedJobEnvName(std::string_view name);

// Every variable well formed (a name of [A-Za-z_][A-Za-z0-9_]*, no NUL in the value), not refused
// and within the limits above. The error names the first variable that is wrong and why.
Status CheckJobEnv(const std::vector<std::pair<std::string, std::string>>& env);

}  // namespace paladin::core
