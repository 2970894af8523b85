// The driver's process-local objects (contexts, allocations, pools, streams, modules) and the
// helpers the entry-point files share. Unless a function says otherwise, the caller holds
// Runtime::mu() and is inside the gate.
#ifndef PALADIN_EMUCUDA_DRIVER_H_
#define PALADIN_EMUCUDA_DRIVER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "paladin/gpu/cuda_api.h"

// Exported C entry points: the only symbols the library shows.
#define EMU_EXPORT extern "C" __attribute__((visibility("default")))

struct CUctx_st {
  int ordinal = 0;
  bool primary = false;
  std::atomic<bool> alive{false};
  int retains = 0;  // primary contexts only
};

struct CUstream_st {
  CUcontext ctx = nullptr;
};

struct CUfunc_st {
  std::string name;
};

struct CUmod_st {
  CUcontext ctx = nullptr;
  std::map<std::string, CUfunc_st*> functions;
};

struct CUarray_st {
  uint64_t ptr = 0;
  uint64_t bytes = 0;    // mapped
  uint64_t counted = 0;  // counted on the device
  int ordinal = 0;
  CUcontext ctx = nullptr;
};

struct CUmemPoolHandle_st {
  int ordinal = 0;
  bool is_default = false;
  bool destroyed = false;  // by cuMemPoolDestroy, while allocations were still out
  uint64_t max_size = 0;   // 0: up to the device
  uint64_t reserved = 0;   // taken from the device
  uint64_t used = 0;       // in live allocations
  uint64_t reserved_high = 0;
  uint64_t used_high = 0;
  uint64_t release_threshold = 0;
  int reuse[3] = {1, 1, 1};  // CU_MEMPOOL_ATTR_REUSE_*
};

namespace paladin::emucuda {

// A device pointer is the host address of the emulated device memory.
inline void* HostPointer(uint64_t ptr) {
  return reinterpret_cast<void*>(ptr);  // NOLINT(performance-no-int-to-ptr)
}

enum class AllocKind { kLinear, kManaged, kPooled };

struct Allocation {
  uint64_t mapped = 0;   // length of the host mapping
  uint64_t counted = 0;  // bytes counted on the device by this allocation (0 when pooled)
  int ordinal = 0;
  AllocKind kind = AllocKind::kLinear;
  CUcontext ctx = nullptr;      // the context it dies with (null when pooled)
  CUmemoryPool pool = nullptr;  // pooled only
};

// --- contexts (context.cc) ---
// The calling thread's current context, or null when it has none or it was destroyed.
// Needs no lock.
CUcontext CurrentContext();
// True for a context this process created and has not destroyed.
bool IsLiveContext(CUcontext ctx);

// --- memory (memory.cc) ---
// A fresh private, no-reserve mapping of `bytes` (a 40 GiB allocation uses no RAM until touched).
// Needs no lock.
CUresult MapDeviceMemory(uint64_t bytes, uint64_t* ptr);
void UnmapDeviceMemory(uint64_t ptr, uint64_t bytes);
void AddAllocation(uint64_t ptr, const Allocation& allocation);
// Frees any allocation (linear, managed or pooled); CUDA_ERROR_INVALID_VALUE when unknown.
CUresult FreeAllocation(uint64_t ptr);
// Frees what the context's allocations and arrays hold (its destruction).
void FreeContextMemory(CUcontext ctx);
// True when [ptr, ptr + bytes) lies inside one allocation or in VMM mappings open to access.
bool DeviceRangeValid(uint64_t ptr, uint64_t bytes);

// --- pools (pool.cc) ---
void PoolFree(CUmemoryPool pool, uint64_t ptr, const Allocation& allocation);

// --- VMM (vmm.cc) ---
bool VmmRangeAccessible(uint64_t ptr, uint64_t bytes);

// --- streams (stream.cc) ---
// The context a stream belongs to: the current one for the null, legacy and per-thread streams.
CUresult StreamContext(CUstream stream, CUcontext* ctx);

}  // namespace paladin::emucuda

#endif  // PALADIN_EMUCUDA_DRIVER_H_
