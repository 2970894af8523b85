// libpaladin-nvml.so: NVML memory queries seen from inside a workload report its quota, not the
// whole GPU: total = the quota, used = what the workload's processes hold, free = the rest (never
// negative, never more than the GPU has free). Everything else in NVML passes through: this
// library's next dependency is the real NVML (or the emulated one), found by dlsym on the handle.
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "paladin/gpu/nvml_api.h"
#include "paladin/gpu/uuid.h"
#include "paladin/quota/region.h"

#define PALADIN_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct NvmlShim {
  void* next = nullptr;
  FnNvmlDeviceGetMemoryInfo get_memory = nullptr;
  FnNvmlDeviceGetMemoryInfoV2 get_memory_v2 = nullptr;
  FnNvmlDeviceGetUUID get_uuid = nullptr;
  std::unique_ptr<paladin::quota::Region> region;
};

NvmlShim* g_nvml = nullptr;
pthread_once_t g_once = PTHREAD_ONCE_INIT;

void Say(const std::string& line) {
  std::string out = "paladin-nvml: " + line + "\n";
  ssize_t ignored = write(STDERR_FILENO, out.data(), out.size());
  (void)ignored;
}

void Init() {
  g_nvml = new NvmlShim();
  NvmlShim& s = *g_nvml;
  s.next = dlopen("libpaladin-nvml-next.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (s.next == nullptr) s.next = dlopen("libpaladin-nvml-next.so.1", RTLD_NOW);
  if (s.next != nullptr) {
    s.get_memory =
        reinterpret_cast<FnNvmlDeviceGetMemoryInfo>(dlsym(s.next, "nvmlDeviceGetMemoryInfo"));
    s.get_memory_v2 =
        reinterpret_cast<FnNvmlDeviceGetMemoryInfoV2>(dlsym(s.next, "nvmlDeviceGetMemoryInfo_v2"));
    s.get_uuid = reinterpret_cast<FnNvmlDeviceGetUUID>(dlsym(s.next, "nvmlDeviceGetUUID"));
  }
  const char* path = getenv("PALADIN_QUOTA_REGION");
  if (path != nullptr && path[0] != '\0') {
    std::string error;
    s.region = paladin::quota::Region::Open(path, &error);
    if (s.region == nullptr) Say(error + "; memory queries report the whole GPU");
  }
}

NvmlShim& Get() {
  pthread_once(&g_once, Init);
  return *g_nvml;
}

// The quota view of `device`, or false when the workload has no quota there.
bool QuotaView(nvmlDevice_t device, unsigned long long real_free, unsigned long long* total,
               unsigned long long* used, unsigned long long* free_bytes) {
  NvmlShim& s = Get();
  if (s.region == nullptr || s.get_uuid == nullptr) return false;
  char text[96];
  char uuid[16];
  if (s.get_uuid(device, text, sizeof text) != NVML_SUCCESS || !paladin::gpu::ParseUuid(text, uuid))
    return false;
  const int slot = s.region->FindDevice(uuid);
  // Before the workload has used any GPU, every GPU shows its quota; afterwards, the ones it
  // uses do and the others show what they have.
  if (slot < 0 && s.region->device_count() > 0) return false;
  const unsigned long long quota = s.region->quota();
  const unsigned long long in_use = slot >= 0 ? s.region->used(slot) : 0;
  unsigned long long left = in_use < quota ? quota - in_use : 0;
  if (left > real_free) left = real_free;
  *total = quota;
  *used = in_use;
  *free_bytes = left;
  return true;
}

}  // namespace

PALADIN_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  NvmlShim& s = Get();
  if (s.get_memory == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  nvmlReturn_t r = s.get_memory(device, memory);
  if (r != NVML_SUCCESS || memory == nullptr) return r;
  QuotaView(device, memory->free, &memory->total, &memory->used, &memory->free);
  return r;
}

PALADIN_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                       nvmlMemory_v2_t* memory) {
  NvmlShim& s = Get();
  if (s.get_memory_v2 == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  nvmlReturn_t r = s.get_memory_v2(device, memory);
  if (r != NVML_SUCCESS || memory == nullptr) return r;
  if (QuotaView(device, memory->free, &memory->total, &memory->used, &memory->free)) {
    memory->reserved = 0;
  }
  return r;
}
