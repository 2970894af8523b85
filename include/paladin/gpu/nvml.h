// NVML loaded at run time (dlopen): the real libnvidia-ml.so.1, or the emulated driver, which
// implements the same functions over its emulated GPUs. Paladin's own programs read GPUs through
// this class only; nothing links against NVML.
//
// Thread safety: after Load, every method may be called from any thread.
#ifndef PALADIN_GPU_NVML_H_
#define PALADIN_GPU_NVML_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/gpu/nvml_api.h"

namespace paladin::gpu {

struct GpuInfo {
  int index = 0;
  std::string uuid;  // "GPU-xxxxxxxx-..."
  std::string name;  // an emulated GPU's name says so
  uint64_t total_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t free_bytes = 0;
  uint32_t utilisation_pct = 0;
};

struct GpuProcess {
  uint32_t pid = 0;  // host pid
  uint64_t used_bytes = 0;
  uint32_t sm_util_pct = 0;
};

class Nvml {
 public:
  // Loads NVML from `library` ("libnvidia-ml.so.1", or a path) and initialises it.
  static StatusOr<std::unique_ptr<Nvml>> Load(const std::string& library);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  std::string driver_version() const;
  StatusOr<std::vector<GpuInfo>> Gpus() const;
  StatusOr<GpuInfo> GpuByUuid(const std::string& uuid) const;
  // Compute processes on the GPU with their memory and (where sampled) SM utilisation.
  StatusOr<std::vector<GpuProcess>> Processes(const std::string& uuid) const;

 private:
  Nvml() = default;
  StatusOr<GpuInfo> Info(nvmlDevice_t device, int index) const;
  std::string Error(nvmlReturn_t r) const;

  void* handle_ = nullptr;
  FnNvmlInit init_ = nullptr;
  FnNvmlShutdown shutdown_ = nullptr;
  FnNvmlErrorString error_string_ = nullptr;
  FnNvmlSystemGetDriverVersion driver_version_ = nullptr;
  FnNvmlDeviceGetCount count_ = nullptr;
  FnNvmlDeviceGetHandleByIndex by_index_ = nullptr;
  FnNvmlDeviceGetHandleByUUID by_uuid_ = nullptr;
  FnNvmlDeviceGetName name_ = nullptr;
  FnNvmlDeviceGetUUID uuid_ = nullptr;
  FnNvmlDeviceGetMemoryInfo memory_ = nullptr;
  FnNvmlDeviceGetComputeRunningProcesses processes_ = nullptr;
  FnNvmlDeviceGetProcessUtilization process_util_ = nullptr;
  FnNvmlDeviceGetUtilizationRates util_ = nullptr;
};

// Formats 16 UUID bytes as NVML and CUDA_VISIBLE_DEVICES write them; parses the same.
std::string FormatGpuUuid(const char bytes[16]);
bool ParseGpuUuid(const std::string& text, char bytes[16]);

}  // namespace paladin::gpu

#endif  // PALADIN_GPU_NVML_H_
