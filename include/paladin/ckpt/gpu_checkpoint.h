// GPU state through the CUDA driver's checkpoint API (cuCheckpointProcess*), called by pid from
// outside the workload: lock (further CUDA calls in the process block), checkpoint (device memory
// moves into the process's own RAM and its GPU handles are released), restore (optionally onto
// other GPUs, by UUID), unlock. Loaded with dlopen: the real libcuda.so.1, or the emulated driver
// for jobs on emulated GPUs. Every call has a time limit, and runs in paladin-gpu-call, a program
// of its own (src/ckpt/gpu_call.cc), which Load finds as ckpt::FindHelperProgram says.
#ifndef PALADIN_CKPT_GPU_CHECKPOINT_H_
#define PALADIN_CKPT_GPU_CHECKPOINT_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/gpu/cuda_api.h"

namespace paladin::ckpt {

// How many of a job's processes have a driver call under way at once (PALADIN_GPU_CALLS_AT_ONCE,
// 1-64; default 8): each call is a program of its own and each process's checkpoint or restore
// moves its own device memory, so a job's processes go side by side (docs/ckpt.md, Checkpoint,
// step 2); 1 takes them one after another.
int GpuCallsAtOnce();

// Runs `call` for each process of `pids`, up to GpuCallsAtOnce() at a time, and waits for all of
// them: Ok, or the first failure in the order of `pids`.
Status ForEachProcessAtOnce(const std::vector<pid_t>& pids,
                            const std::function<Status(pid_t)>& call);

class GpuCheckpointer {
 public:
  // `driver`: "libcuda.so.1" or the emulated driver's path.
  static StatusOr<std::unique_ptr<GpuCheckpointer>> Load(const std::string& driver);

  // The processes among `pids` that hold CUDA state (GetState answers for them).
  std::vector<pid_t> CudaProcesses(const std::vector<pid_t>& pids) const;
  StatusOr<CUprocessState> State(pid_t pid) const;
  Status Lock(pid_t pid, unsigned int timeout_ms) const;
  Status Checkpoint(pid_t pid) const;
  // `remap`: pairs of GPU UUIDs ("GPU-…") old → new.
  Status Restore(pid_t pid, const std::vector<std::pair<std::string, std::string>>& remap) const;
  Status Unlock(pid_t pid) const;

 private:
  GpuCheckpointer() = default;
  std::string Describe(const char* call, pid_t pid, CUresult r) const;
  // Runs paladin-gpu-call with ARGS (its OP, PID, ...); CUDA_ERROR_TIMEOUT past TIMEOUT_MS.
  CUresult Call(const std::vector<std::string>& args, int timeout_ms, int* state = nullptr) const;

  FnCuGetErrorName error_name_ = nullptr;
  std::string driver_;  // the library paladin-gpu-call loads
  std::string helper_;  // paladin-gpu-call's path
};

}  // namespace paladin::ckpt

#endif  // PALADIN_CKPT_GPU_CHECKPOINT_H_
