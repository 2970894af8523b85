// cuGetProcAddress hooks. The CUDA runtime (and PyTorch through it) finds driver functions with
// cuGetProcAddress rather than dlsym, so every function it asks for is resolved by the driver
// first and then replaced by the interposer's hook when the interposer counts that function.
// Anything else passes through untouched.
#include <dlfcn.h>

#include <cstring>

#include "shim.h"

// The hooks defined in memory_hooks.cc and context_hooks.cc.
extern "C" {
CUresult cuMemGetInfo_v2(size_t*, size_t*);
CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CUresult cuMemAllocManaged(CUdeviceptr*, size_t, unsigned int);
CUresult cuMemAllocPitch_v2(CUdeviceptr*, size_t*, size_t, size_t, unsigned int);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemAllocAsync(CUdeviceptr*, size_t, CUstream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr*, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
CUresult cuMemPoolTrimTo(CUmemoryPool, size_t);
CUresult cuMemPoolDestroy(CUmemoryPool);
CUresult cuMemCreate(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                     unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuArrayCreate_v2(CUarray*, const CUDA_ARRAY_DESCRIPTOR*);
CUresult cuArray3DCreate_v2(CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*);
CUresult cuArrayDestroy(CUarray);
CUresult cuDevicePrimaryCtxRetain(CUcontext*, CUdevice);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice);
CUresult cuCtxCreate_v2(CUcontext*, unsigned int, CUdevice);
CUresult cuCtxCreate_v3(CUcontext*, CUexecAffinityParam*, int, unsigned int, CUdevice);
CUresult cuCtxCreate_v4(CUcontext*, CUctxCreateParams*, unsigned int, CUdevice);
CUresult cuCtxDestroy_v2(CUcontext);
CUresult cuGetProcAddress_v2(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
}

namespace paladin::cudashim {
namespace {

// One hooked function: the name callers ask for (without a version suffix), the driver's symbol
// it resolves to, the driver API version from which a request gets this variant, whether it is
// the per-thread-default-stream variant, and the hook.
struct Hook {
  const char* base;
  const char* symbol;
  int since;
  bool per_thread;
  void* hook;
  void* real;  // resolved on first use
};

#define PALADIN_HOOK(base, symbol, since, per_thread) \
  { base, #symbol, since, per_thread, reinterpret_cast<void*>(&(symbol)), nullptr }

Hook g_hooks[] = {
    PALADIN_HOOK("cuMemGetInfo", cuMemGetInfo_v2, 3020, false),
    PALADIN_HOOK("cuMemAlloc", cuMemAlloc_v2, 3020, false),
    PALADIN_HOOK("cuMemAllocManaged", cuMemAllocManaged, 6000, false),
    PALADIN_HOOK("cuMemAllocPitch", cuMemAllocPitch_v2, 3020, false),
    PALADIN_HOOK("cuMemFree", cuMemFree_v2, 3020, false),
    PALADIN_HOOK("cuMemAllocAsync", cuMemAllocAsync, 11020, false),
    PALADIN_HOOK("cuMemAllocAsync", cuMemAllocAsync_ptsz, 11020, true),
    PALADIN_HOOK("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync, 11020, false),
    PALADIN_HOOK("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync_ptsz, 11020, true),
    PALADIN_HOOK("cuMemFreeAsync", cuMemFreeAsync, 11020, false),
    PALADIN_HOOK("cuMemFreeAsync", cuMemFreeAsync_ptsz, 11020, true),
    PALADIN_HOOK("cuMemPoolTrimTo", cuMemPoolTrimTo, 11020, false),
    PALADIN_HOOK("cuMemPoolDestroy", cuMemPoolDestroy, 11020, false),
    PALADIN_HOOK("cuMemCreate", cuMemCreate, 10020, false),
    PALADIN_HOOK("cuMemRelease", cuMemRelease, 10020, false),
    PALADIN_HOOK("cuMemMap", cuMemMap, 10020, false),
    PALADIN_HOOK("cuMemUnmap", cuMemUnmap, 10020, false),
    PALADIN_HOOK("cuArrayCreate", cuArrayCreate_v2, 3020, false),
    PALADIN_HOOK("cuArray3DCreate", cuArray3DCreate_v2, 3020, false),
    PALADIN_HOOK("cuArrayDestroy", cuArrayDestroy, 2000, false),
    PALADIN_HOOK("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain, 7000, false),
    PALADIN_HOOK("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2, 11000, false),
    PALADIN_HOOK("cuDevicePrimaryCtxReset", cuDevicePrimaryCtxReset_v2, 11000, false),
    PALADIN_HOOK("cuCtxCreate", cuCtxCreate_v4, 12050, false),
    PALADIN_HOOK("cuCtxCreate", cuCtxCreate_v3, 11040, false),
    PALADIN_HOOK("cuCtxCreate", cuCtxCreate_v2, 3020, false),
    PALADIN_HOOK("cuCtxDestroy", cuCtxDestroy_v2, 4000, false),
};

#undef PALADIN_HOOK

pthread_once_t g_resolved = PTHREAD_ONCE_INIT;

void ResolveReal() {
  void* next = Shim::Get().next_handle();
  for (Hook& h : g_hooks) h.real = next != nullptr ? dlsym(next, h.symbol) : nullptr;
}

// The name without a "_vN", "_ptsz" or "_ptds" suffix.
bool SameBase(const char* symbol, const char* base) {
  const size_t n = strlen(base);
  if (strncmp(symbol, base, n) != 0) return false;
  const char* rest = symbol + n;
  return *rest == '\0' || strncmp(rest, "_v", 2) == 0 || strcmp(rest, "_ptsz") == 0 ||
         strcmp(rest, "_ptds") == 0;
}

}  // namespace

void* SubstituteHook(const char* symbol, int cuda_version, cuuint64_t flags, void* fn) {
  if (fn == nullptr || symbol == nullptr) return fn;
  pthread_once(&g_resolved, ResolveReal);
  // The driver's own choice of variant, recognised by address.
  for (const Hook& h : g_hooks) {
    if (h.real == fn) return h.hook;
  }
  // A driver that hands out internal addresses: choose the variant by name, version and flags,
  // the way the driver does, newest first.
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0 ||
                          strstr(symbol, "_ptsz") != nullptr;
  for (const Hook& h : g_hooks) {
    if (strcmp(symbol, h.symbol) == 0) return h.hook;  // an exact versioned name
    if (!SameBase(symbol, h.base) || cuda_version < h.since) continue;
    if (h.per_thread != per_thread) {
      // Per-thread variants exist only for stream-ordered calls.
      bool has_variant = false;
      for (const Hook& other : g_hooks) {
        has_variant |=
            &other != &h && strcmp(other.base, h.base) == 0 && other.per_thread == per_thread;
      }
      if (has_variant) continue;
    }
    return h.hook;
  }
  return fn;
}

}  // namespace paladin::cudashim

using paladin::cudashim::Shim;
using paladin::cudashim::SubstituteHook;

PALADIN_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version,
                                         cuuint64_t flags) {
  Shim& shim = Shim::Get();
  auto real = shim.next().cuGetProcAddress;
  if (real == nullptr) return shim.Missing("cuGetProcAddress");
  CUresult r = real(symbol, pfn, cuda_version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr) {
    *pfn = SubstituteHook(symbol, cuda_version, flags, *pfn);
    // The runtime may look up cuGetProcAddress itself: it gets these hooks too.
    if (symbol != nullptr && strcmp(symbol, "cuGetProcAddress") == 0 && *pfn != nullptr) {
      *pfn = cuda_version >= 12000 && shim.next().cuGetProcAddressV2 != nullptr
                 ? reinterpret_cast<void*>(&cuGetProcAddress_v2)
                 : reinterpret_cast<void*>(&cuGetProcAddress);
    }
  }
  return r;
}

PALADIN_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                            cuuint64_t flags,
                                            CUdriverProcAddressQueryResult* status) {
  Shim& shim = Shim::Get();
  auto real = shim.next().cuGetProcAddressV2;
  if (real == nullptr) return shim.Missing("cuGetProcAddress_v2");
  CUresult r = real(symbol, pfn, cuda_version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr) {
    *pfn = SubstituteHook(symbol, cuda_version, flags, *pfn);
    if (symbol != nullptr && strcmp(symbol, "cuGetProcAddress") == 0 && *pfn != nullptr) {
      *pfn = cuda_version >= 12000 ? reinterpret_cast<void*>(&cuGetProcAddress_v2)
                                   : reinterpret_cast<void*>(&cuGetProcAddress);
    }
  }
  return r;
}
