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
  nvmlReturn_t r = n->init_();
  if (r != NVML_SUCCESS) {
    n->init_ = nullptr;  // nothing to shut down
    return FailedPrecondition("NVML (" + library + ") failed to initialise: " + n->Error(r));
  }
  return n;
}

Nvml::~Nvml() {
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

}  // namespace paladin::gpu
