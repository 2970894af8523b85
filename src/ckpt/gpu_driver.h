// The GPU driver's checkpoint API as the checkpoint engine uses it for one job: which driver
// (real or emulated), the emulated driver's control files, and giving processes their GPU back.
#ifndef PALADIN_SRC_CKPT_GPU_DRIVER_H_
#define PALADIN_SRC_CKPT_GPU_DRIVER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/ckpt/gpu_checkpoint.h"

namespace paladin::ckpt {

// The driver whose checkpoint API handles this job's GPU processes, or null for a CPU job
// (`gpu` is the job record's mode: "", "emulated" or the real driver's).
StatusOr<std::unique_ptr<GpuCheckpointer>> DriverFor(const std::string& gpu,
                                                     const std::string& emu_state,
                                                     const std::string& emu_gpus);

// Removes the emulated driver's control files of `pids` that a process of another user left
// (see gpu_driver.cc); nothing for a real GPU.
void ClearForeignControlFiles(const std::string& gpu, const std::string& emu_state,
                              const std::vector<pid_t>& pids);

// Puts every locked or checkpointed process of `pids` back to running on its GPU.
void ResumeGpu(const GpuCheckpointer& gpu, const std::vector<pid_t>& pids);

}  // namespace paladin::ckpt

#endif  // PALADIN_SRC_CKPT_GPU_DRIVER_H_
