// libpaladin-cuda.so: the GPU-memory quota interposer. Internal declarations shared by its
// translation units. The library is loaded into workloads (LD_PRELOAD, and as libcuda.so.1 through
// the launcher's library directory), so it uses no exceptions and nothing beyond libc, libdl,
// pthreads and a statically linked C++ standard library. See docs/quota.md.
#ifndef PALADIN_CUDASHIM_SHIM_H_
#define PALADIN_CUDASHIM_SHIM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "paladin/gpu/cuda_api.h"
#include "paladin/quota/region.h"

#define PALADIN_EXPORT extern "C" __attribute__((visibility("default")))

namespace paladin::cudashim {

// The driver functions the interposer calls, resolved from the next driver (the real libcuda or
// the emulated one). A null entry means the driver lacks the function (or is older than it).
struct NextDriver {
  FnCuInit cuInit = nullptr;
  FnCuDriverGetVersion cuDriverGetVersion = nullptr;
  FnCuDeviceGetUuid cuDeviceGetUuid = nullptr;
  FnCuCtxGetDevice cuCtxGetDevice = nullptr;
  FnCuCtxGetCurrent cuCtxGetCurrent = nullptr;
  FnCuDevicePrimaryCtxRetain cuDevicePrimaryCtxRetain = nullptr;
  FnCuDevicePrimaryCtxRelease cuDevicePrimaryCtxRelease = nullptr;
  FnCuDevicePrimaryCtxReset cuDevicePrimaryCtxReset = nullptr;
  FnCuCtxCreate cuCtxCreate = nullptr;
  FnCuCtxCreateV3 cuCtxCreateV3 = nullptr;
  FnCuCtxCreateV4 cuCtxCreateV4 = nullptr;
  FnCuCtxDestroy cuCtxDestroy = nullptr;
  FnCuMemGetInfo cuMemGetInfo = nullptr;
  FnCuMemAlloc cuMemAlloc = nullptr;
  FnCuMemAllocPitch cuMemAllocPitch = nullptr;
  FnCuMemAllocManaged cuMemAllocManaged = nullptr;
  FnCuMemFree cuMemFree = nullptr;
  FnCuMemAllocAsync cuMemAllocAsync = nullptr;
  FnCuMemAllocAsync cuMemAllocAsyncPtsz = nullptr;
  FnCuMemAllocFromPoolAsync cuMemAllocFromPoolAsync = nullptr;
  FnCuMemAllocFromPoolAsync cuMemAllocFromPoolAsyncPtsz = nullptr;
  FnCuMemFreeAsync cuMemFreeAsync = nullptr;
  FnCuMemFreeAsync cuMemFreeAsyncPtsz = nullptr;
  FnCuMemPoolTrimTo cuMemPoolTrimTo = nullptr;
  FnCuMemPoolGetAttribute cuMemPoolGetAttribute = nullptr;
  FnCuMemPoolDestroy cuMemPoolDestroy = nullptr;
  FnCuDeviceGetMemPool cuDeviceGetMemPool = nullptr;
  FnCuMemCreate cuMemCreate = nullptr;
  FnCuMemRelease cuMemRelease = nullptr;
  FnCuMemMap cuMemMap = nullptr;
  FnCuMemUnmap cuMemUnmap = nullptr;
  FnCuArrayCreate cuArrayCreate = nullptr;
  FnCuArray3DCreate cuArray3DCreate = nullptr;
  FnCuArrayDestroy cuArrayDestroy = nullptr;
  FnCuGetProcAddress cuGetProcAddress = nullptr;
  FnCuGetProcAddressV2 cuGetProcAddressV2 = nullptr;
};

// What one counted allocation is charged as.
enum class Kind : uint8_t { kMemory, kAsync, kVmm, kArray };
struct Charge {
  int device = -1;  // region device slot
  uint64_t bytes = 0;
  Kind kind = Kind::kMemory;
  CUcontext context = nullptr;
  CUmemoryPool pool = nullptr;  // kAsync only
  int mappings = 0;             // kVmm: live cuMemMap mappings of the handle
  bool released = false;        // kVmm: cuMemRelease called while still mapped
};

// Per pool: bytes of live allocations and what is charged to the region for the pool in all
// (live allocations plus memory the pool keeps cached).
struct PoolCharge {
  int device = -1;
  uint64_t live = 0;
  uint64_t charged = 0;
};

class Shim {
 public:
  // The process-wide instance, initialised on first use (never from a library constructor).
  static Shim& Get();
  Shim() = default;
  Shim(const Shim&) = delete;
  Shim& operator=(const Shim&) = delete;

  const NextDriver& next() const { return next_; }
  void* next_handle() const { return next_handle_; }
  bool enforcing() const { return region_ != nullptr; }
  quota::Region* region() { return region_.get(); }

  // Says once per `key` (a function or condition name) on stderr, prefixed "paladin-cuda: ".
  void SayOnce(const char* key, const std::string& line);
  // Returns CUDA_ERROR_NOT_SUPPORTED for a function the driver lacks, saying so once.
  CUresult Missing(const char* function);

  // The region device slot of the current context's device (-1 with the driver's error when there
  // is no current context).
  CUresult CurrentDevice(int* slot, CUcontext* context);
  // The region device slot for a device ordinal.
  int SlotForOrdinal(CUdevice ordinal);

  // Counts `bytes` on `device` within the quota. Before refusing: reclaims the bytes of dead
  // processes of the workload, trims this process's pool caches, asks the launcher to grow the
  // quota. Returns CUDA_SUCCESS or CUDA_ERROR_OUT_OF_MEMORY (and says why, rate-limited).
  CUresult Admit(int device, uint64_t bytes, const char* function);
  void Unadmit(int device, uint64_t bytes) { region_->Release(device, proc_, bytes, false); }
  void ForceCharge(int device, uint64_t bytes, bool context) {
    region_->ForceReserve(device, proc_, bytes, context);
  }
  void Uncharge(int device, uint64_t bytes, bool context) {
    region_->Release(device, proc_, bytes, context);
  }

  // Allocation bookkeeping (keyed by pointer, VMM handle or array handle).
  void Track(uint64_t key, const Charge& charge);
  bool Untrack(uint64_t key, Charge* charge);
  // Gives back everything charged to a context the driver has destroyed.
  void DropContext(CUcontext context);

  // VMM: physical memory lives until the handle is released and its last mapping is gone.
  void Mapped(CUdeviceptr ptr, CUmemGenericAllocationHandle handle);
  bool Unmapped(CUdeviceptr ptr, Charge* release);
  bool ReleasedHandle(CUmemGenericAllocationHandle handle, Charge* release);
  // Raises the device's recorded peak once admitted bytes are really kept.
  void Kept(int device) { region_->NotePeak(device); }

  // Pool bookkeeping for stream-ordered allocations.
  uint64_t PoolShortfall(CUmemoryPool pool, int device, uint64_t bytes);
  void PoolAllocated(CUmemoryPool pool, uint64_t bytes, uint64_t precharged);
  void PoolFreed(CUmemoryPool pool, uint64_t bytes);
  void PoolForget(CUmemoryPool pool);
  // Re-reads the pool's reserved size and charges max(live, reserved).
  void SyncPool(CUmemoryPool pool);
  void TrimPools();

  // Context overhead: what a new context on `device` costs, measured with NVML where possible.
  uint64_t MeasureContextOverhead(CUdevice ordinal, int device);
  void ContextCreated(CUcontext ctx, int device, uint64_t charged);
  void ContextDestroyed(CUcontext ctx);
  // Primary contexts: counted once per device per process. Retained returns the count after
  // this retain; Released returns the primary context when its last reference went (or null).
  int PrimaryRetained(CUdevice ordinal);
  void SetPrimaryContext(CUdevice ordinal, CUcontext ctx);
  CUcontext PrimaryReleased(CUdevice ordinal, bool reset);

  void AfterFork();

 private:
  void Init();
  void LoadNext();
  void OpenRegion();

  NextDriver next_;
  void* next_handle_ = nullptr;
  int driver_version_ = 0;
  std::unique_ptr<quota::Region> region_;
  int proc_ = -1;
  bool closed_ = false;  // the quota is unknown: every allocation is refused
  uint64_t context_overhead_default_ = 512ull << 20;

  std::mutex mu_;
  std::unordered_map<uint64_t, Charge> charges_;
  std::unordered_map<CUdeviceptr, CUmemGenericAllocationHandle> mappings_;
  std::unordered_map<CUmemoryPool, PoolCharge> pools_;
  std::unordered_map<CUcontext, std::pair<int, uint64_t>> contexts_;  // device, overhead
  std::unordered_map<int, int> primary_retains_;                      // ordinal -> count
  std::unordered_map<int, CUcontext> primary_context_;                // ordinal -> ctx
  std::unordered_map<std::string, bool> said_;
  std::atomic<int> ordinal_slot_[64];
  std::atomic<uint64_t> last_refusal_note_ms_{0};
};

// What cuGetProcAddress hands out for `symbol`: the interposer's hook where it has one for the
// function the driver resolved (`fn`), `fn` itself otherwise.
void* SubstituteHook(const char* symbol, int cuda_version, cuuint64_t flags, void* fn);

}  // namespace paladin::cudashim

#endif  // PALADIN_CUDASHIM_SHIM_H_
