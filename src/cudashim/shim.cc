#include "shim.h"

#include <dlfcn.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "paladin/base/process.h"
#include "paladin/base/size.h"
#include "paladin/gpu/nvml_api.h"
#include "paladin/gpu/uuid.h"

namespace paladin::cudashim {

namespace {

Shim* g_shim = nullptr;
pthread_once_t g_once = PTHREAD_ONCE_INIT;

// The name the launcher's library directory gives the next driver (see docs/quota.md).
constexpr const char* kNextDriver = "libpaladin-cuda-next.so.1";
constexpr const char* kNextNvml = "libpaladin-nvml-next.so.1";
// How long an allocation that does not fit waits for killed processes of the workload to finish
// exiting, so that their bytes come back rather than the allocation being refused.
constexpr int kDyingWaitMs = 5000;

uint64_t NowMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000u + static_cast<uint64_t>(ts.tv_nsec) / 1000000u;
}

void WriteLine(const std::string& line) {
  std::string out = "paladin-cuda: " + line + "\n";
  ssize_t ignored = write(STDERR_FILENO, out.data(), out.size());
  (void)ignored;
}

void CreateShim() { g_shim = new Shim(); }  // never destroyed: hooks may run during exit

std::string VersionText(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

}  // namespace

Shim& Shim::Get() {
  pthread_once(&g_once, [] {
    CreateShim();
    g_shim->Init();
    pthread_atfork(nullptr, nullptr, [] { g_shim->AfterFork(); });
  });
  return *g_shim;
}

void Shim::Init() {
  for (auto& slot : ordinal_slot_) slot.store(-2);
  if (const char* text = getenv("PALADIN_CTX_OVERHEAD")) {
    uint64_t bytes = 0;
    if (base::ParseSize(text, &bytes)) {
      context_overhead_default_ = bytes;
    } else {
      WriteLine(std::string("PALADIN_CTX_OVERHEAD='") + text +
                "' is not a size; using the default " +
                base::FormatSize(context_overhead_default_));
    }
  }
  LoadNext();
  OpenRegion();
  atexit([] {
    if (g_shim->region_ != nullptr && g_shim->proc_ >= 0)
      g_shim->region_->DetachProcess(g_shim->proc_);
  });
}

void Shim::LoadNext() {
  next_handle_ = dlopen(kNextDriver, RTLD_NOW | RTLD_NOLOAD);
  if (next_handle_ == nullptr) next_handle_ = dlopen(kNextDriver, RTLD_NOW);
  if (next_handle_ == nullptr) {
    WriteLine(std::string("cannot load the CUDA driver behind the interposer (") + kNextDriver +
              "): " + dlerror());
    return;
  }
  auto version = reinterpret_cast<FnCuDriverGetVersion>(dlsym(next_handle_, "cuDriverGetVersion"));
  if (version == nullptr || version(&driver_version_) != CUDA_SUCCESS) driver_version_ = 0;

  // Each function with the driver API version that introduced it: an older driver has it missing.
  struct Want {
    void** slot;
    const char* name;
    int since;
  };
  NextDriver& n = next_;
  const Want wants[] = {
      {reinterpret_cast<void**>(&n.cuInit), "cuInit", 0},
      {reinterpret_cast<void**>(&n.cuDriverGetVersion), "cuDriverGetVersion", 0},
      {reinterpret_cast<void**>(&n.cuDeviceGetUuid), "cuDeviceGetUuid", 9020},
      {reinterpret_cast<void**>(&n.cuCtxGetDevice), "cuCtxGetDevice", 0},
      {reinterpret_cast<void**>(&n.cuCtxGetCurrent), "cuCtxGetCurrent", 4000},
      {reinterpret_cast<void**>(&n.cuDevicePrimaryCtxRetain), "cuDevicePrimaryCtxRetain", 7000},
      {reinterpret_cast<void**>(&n.cuDevicePrimaryCtxRelease), "cuDevicePrimaryCtxRelease_v2",
       11000},
      {reinterpret_cast<void**>(&n.cuDevicePrimaryCtxReset), "cuDevicePrimaryCtxReset_v2", 11000},
      {reinterpret_cast<void**>(&n.cuCtxCreate), "cuCtxCreate_v2", 3020},
      {reinterpret_cast<void**>(&n.cuCtxCreateV3), "cuCtxCreate_v3", 11040},
      {reinterpret_cast<void**>(&n.cuCtxCreateV4), "cuCtxCreate_v4", 12050},
      {reinterpret_cast<void**>(&n.cuCtxDestroy), "cuCtxDestroy_v2", 4000},
      {reinterpret_cast<void**>(&n.cuMemGetInfo), "cuMemGetInfo_v2", 3020},
      {reinterpret_cast<void**>(&n.cuMemAlloc), "cuMemAlloc_v2", 3020},
      {reinterpret_cast<void**>(&n.cuMemAllocPitch), "cuMemAllocPitch_v2", 3020},
      {reinterpret_cast<void**>(&n.cuMemAllocManaged), "cuMemAllocManaged", 6000},
      {reinterpret_cast<void**>(&n.cuMemFree), "cuMemFree_v2", 3020},
      {reinterpret_cast<void**>(&n.cuMemAllocAsync), "cuMemAllocAsync", 11020},
      {reinterpret_cast<void**>(&n.cuMemAllocAsyncPtsz), "cuMemAllocAsync_ptsz", 11020},
      {reinterpret_cast<void**>(&n.cuMemAllocFromPoolAsync), "cuMemAllocFromPoolAsync", 11020},
      {reinterpret_cast<void**>(&n.cuMemAllocFromPoolAsyncPtsz), "cuMemAllocFromPoolAsync_ptsz",
       11020},
      {reinterpret_cast<void**>(&n.cuMemFreeAsync), "cuMemFreeAsync", 11020},
      {reinterpret_cast<void**>(&n.cuMemFreeAsyncPtsz), "cuMemFreeAsync_ptsz", 11020},
      {reinterpret_cast<void**>(&n.cuMemPoolTrimTo), "cuMemPoolTrimTo", 11020},
      {reinterpret_cast<void**>(&n.cuMemPoolGetAttribute), "cuMemPoolGetAttribute", 11020},
      {reinterpret_cast<void**>(&n.cuMemPoolDestroy), "cuMemPoolDestroy", 11020},
      {reinterpret_cast<void**>(&n.cuDeviceGetMemPool), "cuDeviceGetMemPool", 11020},
      {reinterpret_cast<void**>(&n.cuMemCreate), "cuMemCreate", 10020},
      {reinterpret_cast<void**>(&n.cuMemRelease), "cuMemRelease", 10020},
      {reinterpret_cast<void**>(&n.cuMemMap), "cuMemMap", 10020},
      {reinterpret_cast<void**>(&n.cuMemUnmap), "cuMemUnmap", 10020},
      {reinterpret_cast<void**>(&n.cuArrayCreate), "cuArrayCreate_v2", 3020},
      {reinterpret_cast<void**>(&n.cuArray3DCreate), "cuArray3DCreate_v2", 3020},
      {reinterpret_cast<void**>(&n.cuArrayDestroy), "cuArrayDestroy", 0},
      {reinterpret_cast<void**>(&n.cuGetProcAddress), "cuGetProcAddress", 11030},
      {reinterpret_cast<void**>(&n.cuGetProcAddressV2), "cuGetProcAddress_v2", 12000},
  };
  for (const Want& w : wants) {
    if (driver_version_ != 0 && driver_version_ < w.since) continue;  // older than the function
    *w.slot = dlsym(next_handle_, w.name);
  }
}

void Shim::OpenRegion() {
  std::string error;
  const char* path = getenv("PALADIN_QUOTA_REGION");
  const char* size = getenv("PALADIN_GPU_MEM");
  quota::RegionSettings closed;  // quota 0: every allocation is refused
  if (path != nullptr && path[0] != '\0') {
    region_ = quota::Region::Open(path, &error);
    if (region_ == nullptr) {
      WriteLine(error + "; refusing GPU allocations (the quota is unknown)");
      region_ = quota::Region::CreatePrivate(closed);
      closed_ = true;
    }
  } else if (size != nullptr && size[0] != '\0') {
    quota::RegionSettings settings;
    if (!base::ParseSize(size, &settings.quota_bytes)) {
      WriteLine(std::string("PALADIN_GPU_MEM='") + size +
                "' is not a size (expected e.g. 10GiB); refusing GPU allocations");
      settings = closed;
      closed_ = true;
    }
    settings.grow_wait_ms = 0;
    region_ = quota::Region::CreatePrivate(settings);
  } else {
    WriteLine(
        "no quota set (PALADIN_QUOTA_REGION and PALADIN_GPU_MEM are unset): GPU memory is "
        "not limited");
    return;
  }
  if (region_ == nullptr) return;
  proc_ = region_->AttachProcess(base::SelfProcessId());
  if (proc_ < 0) {
    WriteLine("accounting region " + region_->path() +
              ": no free process slot; refusing GPU allocations");
    region_ = quota::Region::CreatePrivate(closed);
    closed_ = true;
    if (region_ != nullptr) proc_ = region_->AttachProcess(base::SelfProcessId());
  }
}

void Shim::AfterFork() {
  // The child is a new process: it has no allocations of its own yet, and a slot of its own.
  charges_.clear();
  pools_.clear();
  contexts_.clear();
  primary_retains_.clear();
  primary_context_.clear();
  if (region_ != nullptr) proc_ = region_->AttachProcess(base::SelfProcessId());
}

void Shim::SayOnce(const char* key, const std::string& line) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!said_.emplace(key, true).second) return;
  }
  WriteLine(line);
}

CUresult Shim::Missing(const char* function) {
  std::string why =
      next_handle_ == nullptr
          ? "no CUDA driver is loaded"
          : "the CUDA driver (API " + VersionText(driver_version_) + ") does not provide it";
  SayOnce(function, std::string(function) + ": " + why + "; returning CUDA_ERROR_NOT_SUPPORTED");
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult Shim::CurrentDevice(int* slot, CUcontext* context) {
  *slot = -1;
  if (next_.cuCtxGetDevice == nullptr) return Missing("cuCtxGetDevice");
  CUdevice ordinal = 0;
  CUresult r = next_.cuCtxGetDevice(&ordinal);
  if (r != CUDA_SUCCESS) return r;
  if (context != nullptr && next_.cuCtxGetCurrent != nullptr) next_.cuCtxGetCurrent(context);
  *slot = SlotForOrdinal(ordinal);
  return *slot >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

int Shim::SlotForOrdinal(CUdevice ordinal) {
  if (ordinal < 0 || ordinal >= 64 || region_ == nullptr) return -1;
  int slot = ordinal_slot_[ordinal].load();
  if (slot != -2) return slot;
  CUuuid uuid{};
  if (next_.cuDeviceGetUuid == nullptr || next_.cuDeviceGetUuid(&uuid, ordinal) != CUDA_SUCCESS) {
    // No UUID to key the accounting on: count per ordinal instead.
    memset(uuid.bytes, 0, sizeof uuid.bytes);
    uuid.bytes[0] = static_cast<char>(ordinal + 1);
  }
  slot = region_->DeviceSlot(uuid.bytes);
  if (slot < 0) SayOnce("slots", "accounting region: more than 16 GPUs; refusing on the rest");
  ordinal_slot_[ordinal].store(slot);
  return slot;
}

CUresult Shim::Admit(int device, uint64_t bytes, const char* function) {
  quota::Region& r = *region_;
  if (r.TryReserve(device, proc_, bytes)) return CUDA_SUCCESS;
  if (r.SweepDead(kDyingWaitMs) > 0 && r.TryReserve(device, proc_, bytes)) return CUDA_SUCCESS;
  TrimPools();
  if (r.TryReserve(device, proc_, bytes)) return CUDA_SUCCESS;
  for (int attempt = 0; attempt < 3 && r.ceiling() > r.quota(); ++attempt) {
    const uint64_t used = r.used(device);
    const uint64_t shortfall = used + bytes > r.quota() ? used + bytes - r.quota() : bytes;
    if (!r.RequestGrowth(shortfall)) break;
    if (r.TryReserve(device, proc_, bytes)) return CUDA_SUCCESS;
  }
  r.NoteRefusal(bytes);
  if (closed_) return CUDA_ERROR_OUT_OF_MEMORY;  // why was said once, when the region failed
  const uint64_t now = NowMs();
  uint64_t last = last_refusal_note_ms_.load();
  if (now - last >= 1000 && last_refusal_note_ms_.compare_exchange_strong(last, now)) {
    WriteLine(std::string(function) + " of " + base::FormatSize(bytes) +
              " refused: the workload uses " + base::FormatSize(r.used(device)) + " of its " +
              base::FormatSize(r.quota()) + " GPU-memory quota (CUDA_ERROR_OUT_OF_MEMORY)");
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

void Shim::Track(uint64_t key, const Charge& charge) {
  std::lock_guard<std::mutex> lock(mu_);
  charges_[key] = charge;
}

bool Shim::Untrack(uint64_t key, Charge* charge) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = charges_.find(key);
  if (it == charges_.end()) return false;
  *charge = it->second;
  charges_.erase(it);
  return true;
}

void Shim::DropContext(CUcontext context) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = charges_.begin(); it != charges_.end();) {
    if (it->second.context == context && it->second.kind != Kind::kAsync) {
      region_->Release(it->second.device, proc_, it->second.bytes, false);
      it = charges_.erase(it);
    } else {
      ++it;
    }
  }
}

void Shim::Mapped(CUdeviceptr ptr, CUmemGenericAllocationHandle handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = charges_.find(handle);
  if (it == charges_.end()) return;
  ++it->second.mappings;
  mappings_[ptr] = handle;
}

bool Shim::Unmapped(CUdeviceptr ptr, Charge* release) {
  std::lock_guard<std::mutex> lock(mu_);
  auto m = mappings_.find(ptr);
  if (m == mappings_.end()) return false;
  const CUmemGenericAllocationHandle handle = m->second;
  mappings_.erase(m);
  auto it = charges_.find(handle);
  if (it == charges_.end()) return false;
  if (it->second.mappings > 0) --it->second.mappings;
  if (it->second.mappings > 0 || !it->second.released) return false;
  *release = it->second;
  charges_.erase(it);
  return true;
}

bool Shim::ReleasedHandle(CUmemGenericAllocationHandle handle, Charge* release) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = charges_.find(handle);
  if (it == charges_.end()) return false;
  if (it->second.mappings > 0) {
    it->second.released = true;  // the memory lives until its last mapping goes
    return false;
  }
  *release = it->second;
  charges_.erase(it);
  return true;
}

uint64_t Shim::PoolShortfall(CUmemoryPool pool, int device, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  PoolCharge& p = pools_[pool];
  p.device = device;
  const uint64_t need = p.live + bytes;
  return need > p.charged ? need - p.charged : 0;
}

void Shim::PoolAllocated(CUmemoryPool pool, uint64_t bytes, uint64_t precharged) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    PoolCharge& p = pools_[pool];
    p.live += bytes;
    p.charged += precharged;
  }
  SyncPool(pool);
}

void Shim::PoolFreed(CUmemoryPool pool, uint64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    PoolCharge& p = pools_[pool];
    p.live = p.live >= bytes ? p.live - bytes : 0;
  }
  SyncPool(pool);
}

void Shim::PoolForget(CUmemoryPool pool) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pools_.find(pool);
  if (it == pools_.end()) return;
  if (it->second.device >= 0) region_->Release(it->second.device, proc_, it->second.charged, false);
  pools_.erase(it);
}

void Shim::SyncPool(CUmemoryPool pool) {
  cuuint64_t reserved = 0;
  if (next_.cuMemPoolGetAttribute == nullptr ||
      next_.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) !=
          CUDA_SUCCESS) {
    reserved = 0;
  }
  std::lock_guard<std::mutex> lock(mu_);
  PoolCharge& p = pools_[pool];
  if (p.device < 0) return;
  const uint64_t pool_bytes = reserved == 0 ? 0 : region_->Rounded(reserved);
  const uint64_t target = p.live > pool_bytes ? p.live : pool_bytes;
  if (target > p.charged) {
    region_->ForceReserve(p.device, proc_, target - p.charged, false);
  } else if (target < p.charged) {
    region_->Release(p.device, proc_, p.charged - target, false);
  }
  p.charged = target;
}

void Shim::TrimPools() {
  if (next_.cuMemPoolTrimTo == nullptr) return;
  std::vector<CUmemoryPool> cached;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [pool, charge] : pools_) {
      if (charge.charged > charge.live) cached.push_back(pool);
    }
  }
  for (CUmemoryPool pool : cached) {
    next_.cuMemPoolTrimTo(pool, 0);
    SyncPool(pool);
  }
}

uint64_t Shim::MeasureContextOverhead(CUdevice ordinal, int device) {
  // What NVML says this process holds on the device, less what the interposer already counts for
  // it, is what the new context costs. Without NVML: the documented default.
  void* nvml = dlopen(kNextNvml, RTLD_NOW);
  if (nvml == nullptr) return context_overhead_default_;
  auto init = reinterpret_cast<FnNvmlInit>(dlsym(nvml, "nvmlInit_v2"));
  auto by_uuid =
      reinterpret_cast<FnNvmlDeviceGetHandleByUUID>(dlsym(nvml, "nvmlDeviceGetHandleByUUID"));
  auto procs = reinterpret_cast<FnNvmlDeviceGetComputeRunningProcesses>(
      dlsym(nvml, "nvmlDeviceGetComputeRunningProcesses_v3"));
  uint64_t measured = 0;
  CUuuid uuid{};
  if (init != nullptr && by_uuid != nullptr && procs != nullptr && init() == NVML_SUCCESS &&
      next_.cuDeviceGetUuid != nullptr && next_.cuDeviceGetUuid(&uuid, ordinal) == CUDA_SUCCESS) {
    char text[gpu::kUuidTextSize];
    gpu::FormatUuid(uuid.bytes, text);
    nvmlDevice_t handle = nullptr;
    nvmlProcessInfo_t infos[256];
    unsigned int count = 256;
    const uint32_t self = base::SelfProcessId().pid;
    if (by_uuid(text, &handle) == NVML_SUCCESS && procs(handle, &count, infos) == NVML_SUCCESS) {
      for (unsigned int i = 0; i < count; ++i) {
        if (infos[i].pid == self) measured = infos[i].usedGpuMemory;
      }
    }
    auto shutdown = reinterpret_cast<FnNvmlShutdown>(dlsym(nvml, "nvmlShutdown"));
    if (shutdown != nullptr) shutdown();
  }
  dlclose(nvml);
  const uint64_t counted = region_->process_used(proc_, device);
  if (measured > counted) return measured - counted;
  return context_overhead_default_;
}

void Shim::ContextCreated(CUcontext ctx, int device, uint64_t charged) {
  std::lock_guard<std::mutex> lock(mu_);
  contexts_[ctx] = {device, charged};
}

void Shim::ContextDestroyed(CUcontext ctx) {
  std::pair<int, uint64_t> entry{-1, 0};
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = contexts_.find(ctx);
    if (it == contexts_.end()) return;
    entry = it->second;
    contexts_.erase(it);
  }
  region_->Release(entry.first, proc_, entry.second, true);
  DropContext(ctx);
}

int Shim::PrimaryRetained(CUdevice ordinal) {
  std::lock_guard<std::mutex> lock(mu_);
  return ++primary_retains_[ordinal];
}

void Shim::SetPrimaryContext(CUdevice ordinal, CUcontext ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  primary_context_[ordinal] = ctx;
}

CUcontext Shim::PrimaryReleased(CUdevice ordinal, bool reset) {
  std::lock_guard<std::mutex> lock(mu_);
  int& count = primary_retains_[ordinal];
  if (count == 0) return nullptr;
  count = reset ? 0 : count - 1;
  return count == 0 ? primary_context_[ordinal] : nullptr;
}

}  // namespace paladin::cudashim
