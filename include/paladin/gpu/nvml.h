// NVML loaded at run time (dlopen): the real libnvidia-ml.so.1, or the emulated driver, which
// implements the same functions over its emulated GPUs. Paladin's own programs read GPUs through
// this class only; nothing links against NVML.
//
// Thread safety: after Load, every method may be called from any thread.
#ifndef PALADIN_GPU_NVML_H_
#define PALADIN_GPU_NVML_H_

#include <cstdint>
#include <memory>
#include <optional>
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

// One NVML health event (Xid, ECC), or the loss of a GPU.
struct HealthEvent {
  std::string uuid;       // the GPU's; empty when NVML did not say which
  uint64_t type = 0;      // PALADIN_NVML_EVENT_*; 0 with gpu_lost
  uint64_t data = 0;      // the Xid, for an Xid event
  bool gpu_lost = false;  // NVML answered GPU_IS_LOST while waiting
};

// What an event means for the GPU: whether it makes the GPU unhealthy (its jobs are moved off and
// nothing new is placed on it), and words for the fault ("xid 79", "ecc double-bit").
//   - Xids an application causes (13, 31, 43, 45, 68, 109: its own exceptions, page faults,
//     timeouts) leave the GPU healthy: the job at fault sees the error, the GPU is fine.
//   - Every other Xid (79 fallen off the bus, 48 double-bit ECC, 63/64 row remapping, 74
//     NVLink, 94/95 contained/uncontained ECC, 119/120 GSP, 999 unknown, ...) marks it unhealthy.
//   - A double-bit (uncorrectable) ECC error marks it unhealthy; a single-bit one, corrected by
//     the hardware, does not.
//   - A lost GPU is unhealthy.
struct HealthVerdict {
  bool unhealthy = false;
  std::string fault;
};
HealthVerdict JudgeHealthEvent(const HealthEvent& event);

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

  // Health events. WatchHealth registers the GPUs with these UUIDs for the Xid and ECC events
  // each supports, and says per GPU what it listens to ("GPU-...: xid, ecc"); an error when NVML
  // has no event API or no GPU supports any of them. Then WaitHealthEvent, from one thread,
  // returns the next event, or nullopt after `timeout_ms` without one.
  StatusOr<std::vector<std::string>> WatchHealth(const std::vector<std::string>& uuids);
  StatusOr<std::optional<HealthEvent>> WaitHealthEvent(unsigned int timeout_ms);
  // Posts an event on an emulated GPU as its hardware would (the emulated NVML only; an error on
  // NVIDIA's). `type` is one PALADIN_NVML_EVENT_*, `data` the Xid.
  // Whether NVML can still read the GPU (after GPU_IS_LOST: which one was lost).
  Status Probe(const std::string& uuid) const;
  Status PostEmulatedEvent(const std::string& uuid, uint64_t type, uint64_t data);

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
  FnNvmlEventSetCreate event_set_create_ = nullptr;
  FnNvmlEventSetFree event_set_free_ = nullptr;
  FnNvmlDeviceGetSupportedEventTypes supported_events_ = nullptr;
  FnNvmlDeviceRegisterEvents register_events_ = nullptr;
  FnNvmlEventSetWait event_wait_ = nullptr;
  FnPaladinEmuPostEvent emu_post_event_ = nullptr;
  nvmlEventSet_t event_set_ = nullptr;  // WatchHealth
};

// Formats 16 UUID bytes as NVML and CUDA_VISIBLE_DEVICES write them; parses the same.
std::string FormatGpuUuid(const char bytes[16]);
bool ParseGpuUuid(const std::string& text, char bytes[16]);

}  // namespace paladin::gpu

#endif  // PALADIN_GPU_NVML_H_
