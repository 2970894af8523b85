// The emulated NVML: the devices of the shared state file as NVML shows them, with the memory
// use and the processes of every process using them. It ignores CUDA_VISIBLE_DEVICES, like the
// real NVML, and needs no cuInit. Emulated kernels do no work, so utilisation is always 0.
#include <time.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <type_traits>
#include <vector>

#include "emucuda/driver.h"
#include "emucuda/runtime.h"
#include "paladin/gpu/nvml_api.h"

struct nvmlDevice_st {
  int index;
};

// An event set: the kinds registered per device, and how far this set has read each device's
// events in the shared state file.
struct nvmlEventSet_st {
  std::mutex mu;
  unsigned long long types[paladin::emucuda::kMaxDevices] = {};
  uint64_t read[paladin::emucuda::kMaxDevices] = {};
  std::deque<nvmlEventData_t> pending;
};

namespace paladin::emucuda {
namespace {

constexpr unsigned int kNotAvailable = 0xFFFFFFFFu;  // gpu/compute instance ids without MIG

std::atomic<int> g_nvml_users{0};

nvmlDevice_st* Handles() {
  static auto* handles = [] {
    auto* created = new nvmlDevice_st[kMaxDevices];
    for (int i = 0; i < kMaxDevices; ++i) created[i].index = i;
    return created;
  }();
  return handles;
}

// Enters the driver's gate (a checkpoint may be replacing the state) and checks nvmlInit.
class NvmlScope {
 public:
  NvmlScope() {
    Runtime::Get().gate().EnterShared();
    state_ = g_nvml_users.load() > 0 ? Runtime::Get().state() : nullptr;
  }
  ~NvmlScope() { Runtime::Get().gate().ExitShared(); }
  NvmlScope(const NvmlScope&) = delete;
  NvmlScope& operator=(const NvmlScope&) = delete;

  SharedState* state() const { return state_; }
  // The device index of a handle: UNINITIALIZED before nvmlInit, INVALID_ARGUMENT when the
  // handle is not one of ours.
  nvmlReturn_t Index(nvmlDevice_t device, int* index) const {
    if (state_ == nullptr) return NVML_ERROR_UNINITIALIZED;
    nvmlDevice_st* handles = Handles();
    if (device < handles || device >= handles + kMaxDevices) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->index >= state_->device_count()) return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
  }

 private:
  SharedState* state_;
};

nvmlReturn_t CopyString(const std::string& text, char* out, unsigned int length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (length < text.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, text.c_str(), text.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t Init() {
  Runtime& runtime = Runtime::Get();
  runtime.gate().EnterShared();
  SharedState* state = runtime.AttachState();
  if (state != nullptr) g_nvml_users.fetch_add(1);
  runtime.gate().ExitShared();
  return state != nullptr ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

nvmlReturn_t Count(unsigned int* count) {
  NvmlScope scope;
  if (scope.state() == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = static_cast<unsigned int>(scope.state()->device_count());
  return NVML_SUCCESS;
}

nvmlReturn_t HandleByIndex(unsigned int index, nvmlDevice_t* device) {
  NvmlScope scope;
  if (scope.state() == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (device == nullptr || index >= static_cast<unsigned int>(scope.state()->device_count())) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *device = &Handles()[index];
  return NVML_SUCCESS;
}

// Fills `infos` with the live processes on the device (bytes include their contexts' overhead),
// following NVML's protocol: too small a buffer sets *count and returns INSUFFICIENT_SIZE.
template <typename Info, typename Fill>
nvmlReturn_t RunningProcesses(nvmlDevice_t device, unsigned int* count, Info* infos, Fill fill) {
  NvmlScope scope;
  int index = 0;
  if (nvmlReturn_t error = scope.Index(device, &index); error != NVML_SUCCESS) return error;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::vector<SharedState::ProcessUsage> usage = scope.state()->ProcessesOn(index);
  unsigned int capacity = *count;
  *count = static_cast<unsigned int>(usage.size());
  if (capacity < usage.size()) return NVML_ERROR_INSUFFICIENT_SIZE;
  if (!usage.empty() && infos == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (size_t i = 0; i < usage.size(); ++i) fill(&infos[i], usage[i]);
  return NVML_SUCCESS;
}

void FillInfo(nvmlProcessInfo_t* info, const SharedState::ProcessUsage& usage) {
  info->pid = usage.pid;
  info->usedGpuMemory = usage.bytes;
  info->gpuInstanceId = kNotAvailable;
  info->computeInstanceId = kNotAvailable;
}

void FillInfoV1(nvmlProcessInfo_v1_t* info, const SharedState::ProcessUsage& usage) {
  info->pid = usage.pid;
  info->usedGpuMemory = usage.bytes;
}

constexpr unsigned long long kEmulatedEventTypes = PALADIN_NVML_EVENT_HEALTH;
constexpr int kEventPollMs = 5;

// Moves the events posted since the set last looked into its queue, keeping the registered kinds.
void CollectEvents(const NvmlScope& scope, nvmlEventSet_st* set) {
  for (int d = 0; d < scope.state()->device_count(); ++d) {
    if (set->types[d] == 0) continue;
    SharedState::EventRead read = scope.state()->EventsAfter(d, set->read[d]);
    set->read[d] = read.next;
    for (const SharedState::Event& e : read.events) {
      if ((e.type & set->types[d]) == 0) continue;
      set->pending.push_back(
          nvmlEventData_t{&Handles()[d], e.type, e.data, kNotAvailable, kNotAvailable});
    }
  }
}

void SleepMs(int ms) {
  timespec ts{0, ms * 1000000L};
  nanosleep(&ts, nullptr);
}

unsigned long long NowMicros() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<unsigned long long>(ts.tv_sec) * 1000000ull +
         static_cast<unsigned long long>(ts.tv_nsec) / 1000u;
}

}  // namespace
}  // namespace paladin::emucuda

#define EMU_NVML_EXPORT extern "C" __attribute__((visibility("default")))

// Each export has the type of its pointer typedef in paladin/gpu/nvml_api.h.
#define EMU_NVML_DECLARE(FnType, symbol) EMU_NVML_EXPORT std::remove_pointer_t<FnType> symbol
EMU_NVML_DECLARE(FnNvmlInit, nvmlInit);
EMU_NVML_DECLARE(FnNvmlInit, nvmlInit_v2);
EMU_NVML_DECLARE(FnNvmlShutdown, nvmlShutdown);
EMU_NVML_DECLARE(FnNvmlErrorString, nvmlErrorString);
EMU_NVML_DECLARE(FnNvmlSystemGetDriverVersion, nvmlSystemGetDriverVersion);
EMU_NVML_DECLARE(FnNvmlDeviceGetCount, nvmlDeviceGetCount);
EMU_NVML_DECLARE(FnNvmlDeviceGetCount, nvmlDeviceGetCount_v2);
EMU_NVML_DECLARE(FnNvmlDeviceGetHandleByIndex, nvmlDeviceGetHandleByIndex);
EMU_NVML_DECLARE(FnNvmlDeviceGetHandleByIndex, nvmlDeviceGetHandleByIndex_v2);
EMU_NVML_DECLARE(FnNvmlDeviceGetHandleByUUID, nvmlDeviceGetHandleByUUID);
EMU_NVML_DECLARE(FnNvmlDeviceGetName, nvmlDeviceGetName);
EMU_NVML_DECLARE(FnNvmlDeviceGetUUID, nvmlDeviceGetUUID);
EMU_NVML_DECLARE(FnNvmlDeviceGetMemoryInfo, nvmlDeviceGetMemoryInfo);
EMU_NVML_DECLARE(FnNvmlDeviceGetMemoryInfoV2, nvmlDeviceGetMemoryInfo_v2);
EMU_NVML_DECLARE(FnNvmlDeviceGetComputeRunningProcesses, nvmlDeviceGetComputeRunningProcesses_v3);
EMU_NVML_DECLARE(FnNvmlDeviceGetComputeRunningProcesses, nvmlDeviceGetComputeRunningProcesses_v2);
EMU_NVML_DECLARE(FnNvmlDeviceGetComputeRunningProcessesV1, nvmlDeviceGetComputeRunningProcesses);
EMU_NVML_DECLARE(FnNvmlDeviceGetProcessUtilization, nvmlDeviceGetProcessUtilization);
EMU_NVML_DECLARE(FnNvmlDeviceGetUtilizationRates, nvmlDeviceGetUtilizationRates);
EMU_NVML_DECLARE(FnNvmlEventSetCreate, nvmlEventSetCreate);
EMU_NVML_DECLARE(FnNvmlEventSetFree, nvmlEventSetFree);
EMU_NVML_DECLARE(FnNvmlDeviceGetSupportedEventTypes, nvmlDeviceGetSupportedEventTypes);
EMU_NVML_DECLARE(FnNvmlDeviceRegisterEvents, nvmlDeviceRegisterEvents);
EMU_NVML_DECLARE(FnNvmlEventSetWait, nvmlEventSetWait_v2);
EMU_NVML_DECLARE(FnPaladinEmuPostEvent, paladinEmuNvmlPostEvent);
#undef EMU_NVML_DECLARE

using paladin::emucuda::NvmlScope;
using paladin::emucuda::SharedState;

EMU_NVML_EXPORT nvmlReturn_t nvmlInit_v2() { return paladin::emucuda::Init(); }

EMU_NVML_EXPORT nvmlReturn_t nvmlInit() { return paladin::emucuda::Init(); }

EMU_NVML_EXPORT nvmlReturn_t nvmlShutdown() {
  std::atomic<int>& users = paladin::emucuda::g_nvml_users;
  int current = users.load();
  while (current > 0 && !users.compare_exchange_weak(current, current - 1)) {
  }
  return current > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

EMU_NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_UNKNOWN:
      return "Unknown Error (emulated NVML: no emulated device)";
    default:
      return "Unknown Error";
  }
}

EMU_NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  NvmlScope scope;
  if (scope.state() == nullptr) return NVML_ERROR_UNINITIALIZED;
  int driver = paladin::emucuda::ProcessConfig().driver_version;
  char text[64];
  std::snprintf(text, sizeof(text), "emulated %d.%d", driver / 1000, (driver % 1000) / 10);
  return paladin::emucuda::CopyString(text, version, length);
}

EMU_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  return paladin::emucuda::Count(count);
}

EMU_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) {
  return paladin::emucuda::Count(count);
}

EMU_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                           nvmlDevice_t* device) {
  return paladin::emucuda::HandleByIndex(index, device);
}

EMU_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return paladin::emucuda::HandleByIndex(index, device);
}

EMU_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  NvmlScope scope;
  if (scope.state() == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < scope.state()->device_count(); ++i) {
    if (strcasecmp(paladin::emucuda::UuidString(scope.state()->uuid(i)).c_str(), uuid) == 0) {
      *device = &paladin::emucuda::Handles()[i];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

EMU_NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                                               unsigned int length) {
  NvmlScope scope;
  int index = 0;
  if (nvmlReturn_t error = scope.Index(device, &index); error != NVML_SUCCESS) return error;
  return paladin::emucuda::CopyString(scope.state()->name(index), name, length);
}

EMU_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                               unsigned int length) {
  NvmlScope scope;
  int index = 0;
  if (nvmlReturn_t error = scope.Index(device, &index); error != NVML_SUCCESS) return error;
  return paladin::emucuda::CopyString(paladin::emucuda::UuidString(scope.state()->uuid(index)),
                                      uuid, length);
}

EMU_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  NvmlScope scope;
  int index = 0;
  if (nvmlReturn_t error = scope.Index(device, &index); error != NVML_SUCCESS) return error;
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  memory->total = scope.state()->total(index);
  memory->free = scope.state()->free(index);
  memory->used = memory->total - memory->free;
  return NVML_SUCCESS;
}

EMU_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                        nvmlMemory_v2_t* memory) {
  NvmlScope scope;
  int index = 0;
  if (nvmlReturn_t error = scope.Index(device, &index); error != NVML_SUCCESS) return error;
  if (memory == nullptr || memory->version != PALADIN_NVML_MEMORY_V2_VERSION) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  memory->total = scope.state()->total(index);
  memory->reserved = 0;
  memory->free = scope.state()->free(index);
  memory->used = memory->total - memory->free;
  return NVML_SUCCESS;
}

EMU_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                     unsigned int* count,
                                                                     nvmlProcessInfo_t* infos) {
  return paladin::emucuda::RunningProcesses(device, count, infos, &paladin::emucuda::FillInfo);
}

EMU_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                                     unsigned int* count,
                                                                     nvmlProcessInfo_t* infos) {
  return paladin::emucuda::RunningProcesses(device, count, infos, &paladin::emucuda::FillInfo);
}

EMU_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                                  unsigned int* count,
                                                                  nvmlProcessInfo_v1_t* infos) {
  return paladin::emucuda::RunningProcesses(device, count, infos, &paladin::emucuda::FillInfoV1);
}

// One sample per live process on the device, all idle; NOT_FOUND when there is none (as NVML).
EMU_NVML_EXPORT nvmlReturn_t
nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t* samples,
                                unsigned int* count, unsigned long long /*last_seen_timestamp*/) {
  NvmlScope scope;
  int index = 0;
  if (nvmlReturn_t error = scope.Index(device, &index); error != NVML_SUCCESS) return error;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::vector<SharedState::ProcessUsage> usage = scope.state()->ProcessesOn(index);
  if (usage.empty()) return NVML_ERROR_NOT_FOUND;
  unsigned int capacity = *count;
  *count = static_cast<unsigned int>(usage.size());
  if (samples == nullptr || capacity < usage.size()) return NVML_ERROR_INSUFFICIENT_SIZE;
  unsigned long long now = paladin::emucuda::NowMicros();
  for (size_t i = 0; i < usage.size(); ++i) {
    samples[i] = nvmlProcessUtilizationSample_t{usage[i].pid, now, 0, 0, 0, 0};
  }
  return NVML_SUCCESS;
}

EMU_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                           nvmlUtilization_t* utilization) {
  NvmlScope scope;
  int index = 0;
  if (nvmlReturn_t error = scope.Index(device, &index); error != NVML_SUCCESS) return error;
  if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  utilization->gpu = 0;
  utilization->memory = 0;
  return NVML_SUCCESS;
}

// Events: Xid and ECC events are posted on an emulated device by paladinEmuNvmlPostEvent (the
// node agent's `fault` command, or a test); every event set registered for them sees them.
EMU_NVML_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  NvmlScope scope;
  if (scope.state() == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *set = new nvmlEventSet_st();
  return NVML_SUCCESS;
}

EMU_NVML_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  delete set;
  return NVML_SUCCESS;
}

EMU_NVML_EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                              unsigned long long* types) {
  NvmlScope scope;
  int index = 0;
  if (nvmlReturn_t error = scope.Index(device, &index); error != NVML_SUCCESS) return error;
  if (types == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *types = paladin::emucuda::kEmulatedEventTypes;
  return NVML_SUCCESS;
}

// As NVML: registering a kind the device does not support fails with NOT_SUPPORTED and registers
// nothing. Events posted before registration are not delivered.
EMU_NVML_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                                      nvmlEventSet_t set) {
  NvmlScope scope;
  int index = 0;
  if (nvmlReturn_t error = scope.Index(device, &index); error != NVML_SUCCESS) return error;
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if ((types & ~paladin::emucuda::kEmulatedEventTypes) != 0) return NVML_ERROR_NOT_SUPPORTED;
  std::lock_guard<std::mutex> lock(set->mu);
  if (set->types[index] == 0) set->read[index] = scope.state()->LastEvent(index);
  set->types[index] |= types;
  return NVML_SUCCESS;
}

EMU_NVML_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                                 unsigned int timeout_ms) {
  if (set == nullptr || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned int waited_ms = 0;
  while (true) {
    {
      // The gate is entered per look, not for the whole wait: a checkpoint must not wait on it.
      NvmlScope scope;
      if (scope.state() == nullptr) return NVML_ERROR_UNINITIALIZED;
      std::lock_guard<std::mutex> lock(set->mu);
      paladin::emucuda::CollectEvents(scope, set);
      if (!set->pending.empty()) {
        *data = set->pending.front();
        set->pending.pop_front();
        return NVML_SUCCESS;
      }
    }
    if (waited_ms >= timeout_ms) return NVML_ERROR_TIMEOUT;
    paladin::emucuda::SleepMs(paladin::emucuda::kEventPollMs);
    waited_ms += paladin::emucuda::kEventPollMs;
  }
}

EMU_NVML_EXPORT nvmlReturn_t paladinEmuNvmlPostEvent(nvmlDevice_t device, unsigned long long type,
                                                     unsigned long long data) {
  NvmlScope scope;
  int index = 0;
  if (nvmlReturn_t error = scope.Index(device, &index); error != NVML_SUCCESS) return error;
  if (type != PALADIN_NVML_EVENT_SINGLE_BIT_ECC && type != PALADIN_NVML_EVENT_DOUBLE_BIT_ECC &&
      type != PALADIN_NVML_EVENT_XID) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  // The event ring is the device's: only who may write the device file (its owner, root) posts.
  if (scope.state()->PostEvent(index, type, type == PALADIN_NVML_EVENT_XID ? data : 0) == 0) {
    return NVML_ERROR_NO_PERMISSION;
  }
  return NVML_SUCCESS;
}
