#include "paladin/gpu/nvml.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include "paladin/gpu/uuid.h"

namespace paladin::gpu {

std::string FormatGpuUuid(const char bytes[16]) {
  char text[kUuidTextSize];
  FormatUuid(bytes, text);
  return text;
}

bool ParseGpuUuid(const std::string& text, char bytes[16]) {
  return ParseUuid(text.c_str(), bytes);
}

namespace {
template <typename Fn>
bool Resolve(void* handle, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(handle, name));
  return *out != nullptr;
}
}  // namespace

StatusOr<std::unique_ptr<Nvml>> Nvml::Load(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return NotFound("cannot load NVML (" + library + "): " + dlerror());
  std::unique_ptr<Nvml> n(new Nvml());
  n->handle_ = handle;
  const bool complete = Resolve(handle, "nvmlInit_v2", &n->init_) &&
                        Resolve(handle, "nvmlShutdown", &n->shutdown_) &&
                        Resolve(handle, "nvmlDeviceGetCount_v2", &n->count_) &&
                        Resolve(handle, "nvmlDeviceGetHandleByIndex_v2", &n->by_index_) &&
                        Resolve(handle, "nvmlDeviceGetHandleByUUID", &n->by_uuid_) &&
                        Resolve(handle, "nvmlDeviceGetName", &n->name_) &&
                        Resolve(handle, "nvmlDeviceGetUUID", &n->uuid_) &&
                        Resolve(handle, "nvmlDeviceGetMemoryInfo", &n->memory_);
  if (!complete) {
    return FailedPrecondition(library + " lacks NVML functions Paladin needs (too old an NVML?)");
  }
  // Optional: older or restricted NVMLs may lack these.
  Resolve(handle, "nvmlErrorString", &n->error_string_);
  Resolve(handle, "nvmlSystemGetDriverVersion", &n->driver_version_);
  Resolve(handle, "nvmlDeviceGetComputeRunningProcesses_v3", &n->processes_);
  Resolve(handle, "nvmlDeviceGetProcessUtilization", &n->process_util_);
  Resolve(handle, "nvmlDeviceGetUtilizationRates", &n->util_);
  Resolve(handle, "nvmlEventSetCreate", &n->event_set_create_);
  Resolve(handle, "nvmlEventSetFree", &n->event_set_free_);
  Resolve(handle, "nvmlDeviceGetSupportedEventTypes", &n->supported_events_);
  Resolve(handle, "nvmlDeviceRegisterEvents", &n->register_events_);
  Resolve(handle, "nvmlEventSetWait_v2", &n->event_wait_);
  Resolve(handle, "paladinEmuNvmlPostEvent", &n->emu_post_event_);
  nvmlReturn_t r = n->init_();
  if (r != NVML_SUCCESS) {
    n->init_ = nullptr;  // nothing to shut down
    return FailedPrecondition("NVML (" + library + ") failed to initialise: " + n->Error(r));
  }
  return n;
}

Nvml::~Nvml() {
  if (event_set_ != nullptr && event_set_free_ != nullptr) event_set_free_(event_set_);
  if (init_ != nullptr && shutdown_ != nullptr) shutdown_();
  // The library stays loaded: NVML does not support being unloaded and reloaded cleanly.
}

std::string Nvml::Error(nvmlReturn_t r) const {
  if (error_string_ != nullptr) {
    if (const char* s = error_string_(r)) return s;
  }
  return "NVML error " + std::to_string(r);
}

std::string Nvml::driver_version() const {
  char buf[96] = {0};
  if (driver_version_ == nullptr || driver_version_(buf, sizeof buf) != NVML_SUCCESS) return "?";
  return buf;
}

StatusOr<GpuInfo> Nvml::Info(nvmlDevice_t device, int index) const {
  GpuInfo g;
  g.index = index;
  char buf[128] = {0};
  nvmlReturn_t r = uuid_(device, buf, sizeof buf);
  if (r != NVML_SUCCESS) return Internal("nvmlDeviceGetUUID: " + Error(r));
  g.uuid = buf;
  memset(buf, 0, sizeof buf);
  if (name_(device, buf, sizeof buf) == NVML_SUCCESS) g.name = buf;
  nvmlMemory_t mem{};
  r = memory_(device, &mem);
  if (r != NVML_SUCCESS) return Internal("nvmlDeviceGetMemoryInfo: " + Error(r));
  g.total_bytes = mem.total;
  g.used_bytes = mem.used;
  g.free_bytes = mem.free;
  nvmlUtilization_t util{};
  if (util_ != nullptr && util_(device, &util) == NVML_SUCCESS) g.utilisation_pct = util.gpu;
  return g;
}

StatusOr<std::vector<GpuInfo>> Nvml::Gpus() const {
  unsigned int count = 0;
  nvmlReturn_t r = count_(&count);
  if (r != NVML_SUCCESS) return Internal("nvmlDeviceGetCount: " + Error(r));
  std::vector<GpuInfo> gpus;
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    r = by_index_(i, &device);
    if (r != NVML_SUCCESS) return Internal("nvmlDeviceGetHandleByIndex: " + Error(r));
    StatusOr<GpuInfo> info = Info(device, static_cast<int>(i));
    if (!info.ok()) return info.status();
    gpus.push_back(std::move(*info));
  }
  return gpus;
}

StatusOr<GpuInfo> Nvml::GpuByUuid(const std::string& uuid) const {
  StatusOr<std::vector<GpuInfo>> gpus = Gpus();
  if (!gpus.ok()) return gpus.status();
  for (GpuInfo& g : *gpus) {
    if (g.uuid == uuid) return std::move(g);
  }
  return NotFound("no GPU with UUID " + uuid);
}

StatusOr<std::vector<GpuProcess>> Nvml::Processes(const std::string& uuid) const {
  nvmlDevice_t device = nullptr;
  nvmlReturn_t r = by_uuid_(uuid.c_str(), &device);
  if (r != NVML_SUCCESS) return NotFound("no GPU with UUID " + uuid + ": " + Error(r));
  std::vector<GpuProcess> out;
  if (processes_ == nullptr) return out;
  std::vector<nvmlProcessInfo_t> infos(64);
  unsigned int count = static_cast<unsigned int>(infos.size());
  r = processes_(device, &count, infos.data());
  if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
    infos.resize(count + 16);
    count = static_cast<unsigned int>(infos.size());
    r = processes_(device, &count, infos.data());
  }
  if (r != NVML_SUCCESS) return Internal("nvmlDeviceGetComputeRunningProcesses: " + Error(r));
  for (unsigned int i = 0; i < count; ++i) out.push_back({infos[i].pid, infos[i].usedGpuMemory, 0});
  if (process_util_ != nullptr) {
    std::vector<nvmlProcessUtilizationSample_t> samples(128);
    unsigned int n = static_cast<unsigned int>(samples.size());
    if (process_util_(device, samples.data(), &n, 0) == NVML_SUCCESS) {
      for (unsigned int i = 0; i < n; ++i) {
        for (GpuProcess& p : out) {
          if (p.pid == samples[i].pid) p.sm_util_pct = samples[i].smUtil;
        }
      }
    }
  }
  return out;
}

namespace {

// Xids that an application's own errors cause; the GPU itself is fine.
bool ApplicationXid(uint64_t xid) {
  switch (xid) {
    case 13:   // graphics engine exception (an illegal instruction or address in a kernel)
    case 31:   // GPU memory page fault (a kernel's bad pointer)
    case 43:   // GPU stopped processing (the context was reset after a fault)
    case 45:   // preemptive cleanup (a process killed while it had work queued)
    case 68:   // video decoder exception
    case 109:  // context switch timeout (a kernel that does not yield)
      return true;
    default:
      return false;
  }
}

std::string EventKinds(uint64_t types) {
  std::string kinds;
  auto add = [&kinds](const char* kind) {
    kinds += (kinds.empty() ? "" : ", ") + std::string(kind);
  };
  if ((types & PALADIN_NVML_EVENT_XID) != 0) add("xid");
  if ((types & PALADIN_NVML_EVENT_DOUBLE_BIT_ECC) != 0) add("ecc double-bit");
  if ((types & PALADIN_NVML_EVENT_SINGLE_BIT_ECC) != 0) add("ecc single-bit");
  return kinds;
}

}  // namespace

HealthVerdict JudgeHealthEvent(const HealthEvent& event) {
  if (event.gpu_lost) return {true, "gpu lost"};
  switch (event.type) {
    case PALADIN_NVML_EVENT_XID: {
      const std::string fault = "xid " + std::to_string(event.data);
      return {!ApplicationXid(event.data), fault};
    }
    case PALADIN_NVML_EVENT_DOUBLE_BIT_ECC:
      return {true, "ecc double-bit"};
    case PALADIN_NVML_EVENT_SINGLE_BIT_ECC:
      return {false, "ecc single-bit"};
    default:
      return {false, "nvml event " + std::to_string(event.type)};
  }
}

StatusOr<std::vector<std::string>> Nvml::WatchHealth(const std::vector<std::string>& uuids) {
  if (event_set_create_ == nullptr || register_events_ == nullptr || event_wait_ == nullptr) {
    return FailedPrecondition("this NVML has no event API (nvmlEventSetWait_v2)");
  }
  if (event_set_ == nullptr) {
    nvmlReturn_t r = event_set_create_(&event_set_);
    if (r != NVML_SUCCESS) {
      event_set_ = nullptr;
      return Internal("nvmlEventSetCreate: " + Error(r));
    }
  }
  std::vector<std::string> watched;
  std::string refused;
  for (const std::string& uuid : uuids) {
    nvmlDevice_t device = nullptr;
    nvmlReturn_t r = by_uuid_(uuid.c_str(), &device);
    if (r != NVML_SUCCESS) return NotFound("no GPU with UUID " + uuid + ": " + Error(r));
    unsigned long long supported = PALADIN_NVML_EVENT_HEALTH;
    if (supported_events_ != nullptr && supported_events_(device, &supported) != NVML_SUCCESS) {
      supported = PALADIN_NVML_EVENT_HEALTH;  // unknown: try them all
    }
    uint64_t types = supported & PALADIN_NVML_EVENT_HEALTH;
    r = types == 0 ? NVML_ERROR_NOT_SUPPORTED : register_events_(device, types, event_set_);
    // ECC events are refused where ECC is off; Xid alone is still worth having.
    if (r == NVML_ERROR_NOT_SUPPORTED && (types & PALADIN_NVML_EVENT_XID) != 0) {
      types = PALADIN_NVML_EVENT_XID;
      r = register_events_(device, types, event_set_);
    }
    if (r != NVML_SUCCESS) {
      refused += (refused.empty() ? "" : "; ") + uuid + ": " + Error(r);
      continue;
    }
    watched.push_back(uuid + ": " + EventKinds(types));
  }
  if (watched.empty() && !uuids.empty()) {
    return FailedPrecondition("no GPU accepts health events (" + refused + ")");
  }
  return watched;
}

StatusOr<std::optional<HealthEvent>> Nvml::WaitHealthEvent(unsigned int timeout_ms) {
  if (event_set_ == nullptr) return FailedPrecondition("WatchHealth was not called");
  nvmlEventData_t data{};
  nvmlReturn_t r = event_wait_(event_set_, &data, timeout_ms);
  if (r == NVML_ERROR_TIMEOUT) return std::optional<HealthEvent>();
  HealthEvent event;
  if (r == NVML_ERROR_GPU_IS_LOST) {
    event.gpu_lost = true;
  } else if (r != NVML_SUCCESS) {
    return Internal("nvmlEventSetWait_v2: " + Error(r));
  } else {
    event.type = data.eventType;
    event.data = data.eventData;
  }
  if (data.device != nullptr) {
    char buf[128] = {0};
    if (uuid_(data.device, buf, sizeof buf) == NVML_SUCCESS) event.uuid = buf;
  }
  return std::optional<HealthEvent>(std::move(event));
}

Status Nvml::Probe(const std::string& uuid) const {
  nvmlDevice_t device = nullptr;
  nvmlReturn_t r = by_uuid_(uuid.c_str(), &device);
  if (r != NVML_SUCCESS) return NotFound("no GPU with UUID " + uuid + ": " + Error(r));
  nvmlMemory_t mem{};
  r = memory_(device, &mem);
  if (r != NVML_SUCCESS) return Unavailable(uuid + ": " + Error(r));
  return Status::Ok();
}

Status Nvml::PostEmulatedEvent(const std::string& uuid, uint64_t type, uint64_t data) {
  if (emu_post_event_ == nullptr) {
    return FailedPrecondition("events are posted on emulated GPUs only; this NVML is NVIDIA's");
  }
  nvmlDevice_t device = nullptr;
  nvmlReturn_t r = by_uuid_(uuid.c_str(), &device);
  if (r != NVML_SUCCESS) return NotFound("no GPU with UUID " + uuid + ": " + Error(r));
  r = emu_post_event_(device, type, data);
  if (r != NVML_SUCCESS) return InvalidArgument("cannot post the event: " + Error(r));
  return Status::Ok();
}

}  // namespace paladin::gpu
