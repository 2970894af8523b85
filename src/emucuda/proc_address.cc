// cuGetProcAddress and cuGetProcAddress_v2: the table of every entry point by base name, with
// the driver version that introduced each variant and the CUDA version from which a base-name
// lookup returns it. Works before cuInit, like the real driver's.
#include <cstring>

#include "emucuda/config.h"
#include "emucuda/driver.h"
#include "emucuda/entry_points.h"
#include "emucuda/runtime.h"

namespace paladin::emucuda {
namespace {

constexpr int kExactNameOnly = 1 << 30;  // select_from of a variant no base name returns

struct ProcEntry {
  const char* base;
  const char* symbol;
  void* function;
  int introduced;   // driver version that has it
  int select_from;  // lowest cudaVersion for which the base name returns it
  bool per_thread;  // the per-thread-default-stream variant
};

// The cast checks each function against its published pointer type.
#define EMU_PROC(base, symbol, FnType, introduced, select_from, per_thread)             \
  ProcEntry {                                                                           \
    base, #symbol, reinterpret_cast<void*>(static_cast<FnType>(&(symbol))), introduced, \
        select_from, per_thread                                                         \
  }
#define EMU_PLAIN(symbol, FnType) EMU_PROC(#symbol, symbol, FnType, 3020, 3020, false)

const ProcEntry kEntries[] = {
    EMU_PLAIN(cuInit, FnCuInit),
    EMU_PLAIN(cuDriverGetVersion, FnCuDriverGetVersion),
    EMU_PLAIN(cuGetErrorString, FnCuGetErrorString),
    EMU_PLAIN(cuGetErrorName, FnCuGetErrorName),
    EMU_PLAIN(cuDeviceGet, FnCuDeviceGet),
    EMU_PLAIN(cuDeviceGetCount, FnCuDeviceGetCount),
    EMU_PLAIN(cuDeviceGetName, FnCuDeviceGetName),
    EMU_PLAIN(cuDeviceGetUuid, FnCuDeviceGetUuid),
    EMU_PROC("cuDeviceGetUuid", cuDeviceGetUuid_v2, FnCuDeviceGetUuid, 3020, 11040, false),
    EMU_PROC("cuDeviceTotalMem", cuDeviceTotalMem_v2, FnCuDeviceTotalMem, 3020, 3020, false),
    EMU_PLAIN(cuDeviceGetAttribute, FnCuDeviceGetAttribute),
    EMU_PLAIN(cuDevicePrimaryCtxRetain, FnCuDevicePrimaryCtxRetain),
    EMU_PROC("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2, FnCuDevicePrimaryCtxRelease,
             3020, 3020, false),
    EMU_PROC("cuDevicePrimaryCtxReset", cuDevicePrimaryCtxReset_v2, FnCuDevicePrimaryCtxReset, 3020,
             3020, false),
    EMU_PROC("cuCtxCreate", cuCtxCreate_v2, FnCuCtxCreate, 3020, 3020, false),
    EMU_PROC("cuCtxCreate", cuCtxCreate_v3, FnCuCtxCreateV3, 3020, kExactNameOnly, false),
    EMU_PROC("cuCtxCreate", cuCtxCreate_v4, FnCuCtxCreateV4, 12050, 12050, false),
    EMU_PROC("cuCtxDestroy", cuCtxDestroy_v2, FnCuCtxDestroy, 3020, 3020, false),
    EMU_PLAIN(cuCtxSetCurrent, FnCuCtxSetCurrent),
    EMU_PLAIN(cuCtxGetCurrent, FnCuCtxGetCurrent),
    EMU_PROC("cuCtxPushCurrent", cuCtxPushCurrent_v2, FnCuCtxPushCurrent, 3020, 3020, false),
    EMU_PROC("cuCtxPopCurrent", cuCtxPopCurrent_v2, FnCuCtxPopCurrent, 3020, 3020, false),
    EMU_PLAIN(cuCtxGetDevice, FnCuCtxGetDevice),
    EMU_PLAIN(cuCtxSynchronize, FnCuCtxSynchronize),
    EMU_PROC("cuMemGetInfo", cuMemGetInfo_v2, FnCuMemGetInfo, 3020, 3020, false),
    EMU_PROC("cuMemAlloc", cuMemAlloc_v2, FnCuMemAlloc, 3020, 3020, false),
    EMU_PROC("cuMemAllocPitch", cuMemAllocPitch_v2, FnCuMemAllocPitch, 3020, 3020, false),
    EMU_PROC("cuMemAllocManaged", cuMemAllocManaged, FnCuMemAllocManaged, 6000, 6000, false),
    EMU_PROC("cuMemFree", cuMemFree_v2, FnCuMemFree, 3020, 3020, false),
    EMU_PROC("cuMemAllocAsync", cuMemAllocAsync, FnCuMemAllocAsync, 11020, 11020, false),
    EMU_PROC("cuMemAllocAsync", cuMemAllocAsync_ptsz, FnCuMemAllocAsync, 11020, 11020, true),
    EMU_PROC("cuMemFreeAsync", cuMemFreeAsync, FnCuMemFreeAsync, 11020, 11020, false),
    EMU_PROC("cuMemFreeAsync", cuMemFreeAsync_ptsz, FnCuMemFreeAsync, 11020, 11020, true),
    EMU_PROC("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync, FnCuMemAllocFromPoolAsync, 11020,
             11020, false),
    EMU_PROC("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync_ptsz, FnCuMemAllocFromPoolAsync,
             11020, 11020, true),
    EMU_PROC("cuMemPoolCreate", cuMemPoolCreate, FnCuMemPoolCreate, 11020, 11020, false),
    EMU_PROC("cuMemPoolDestroy", cuMemPoolDestroy, FnCuMemPoolDestroy, 11020, 11020, false),
    EMU_PROC("cuMemPoolTrimTo", cuMemPoolTrimTo, FnCuMemPoolTrimTo, 11020, 11020, false),
    EMU_PROC("cuMemPoolSetAttribute", cuMemPoolSetAttribute, FnCuMemPoolSetAttribute, 11020, 11020,
             false),
    EMU_PROC("cuMemPoolGetAttribute", cuMemPoolGetAttribute, FnCuMemPoolGetAttribute, 11020, 11020,
             false),
    EMU_PROC("cuDeviceGetDefaultMemPool", cuDeviceGetDefaultMemPool, FnCuDeviceGetDefaultMemPool,
             11020, 11020, false),
    EMU_PROC("cuDeviceGetMemPool", cuDeviceGetMemPool, FnCuDeviceGetMemPool, 11020, 11020, false),
    EMU_PROC("cuMemCreate", cuMemCreate, FnCuMemCreate, 10020, 10020, false),
    EMU_PROC("cuMemRelease", cuMemRelease, FnCuMemRelease, 10020, 10020, false),
    EMU_PROC("cuMemAddressReserve", cuMemAddressReserve, FnCuMemAddressReserve, 10020, 10020,
             false),
    EMU_PROC("cuMemAddressFree", cuMemAddressFree, FnCuMemAddressFree, 10020, 10020, false),
    EMU_PROC("cuMemMap", cuMemMap, FnCuMemMap, 10020, 10020, false),
    EMU_PROC("cuMemUnmap", cuMemUnmap, FnCuMemUnmap, 10020, 10020, false),
    EMU_PROC("cuMemSetAccess", cuMemSetAccess, FnCuMemSetAccess, 10020, 10020, false),
    EMU_PROC("cuMemGetAllocationGranularity", cuMemGetAllocationGranularity,
             FnCuMemGetAllocationGranularity, 10020, 10020, false),
    EMU_PROC("cuArrayCreate", cuArrayCreate_v2, FnCuArrayCreate, 3020, 3020, false),
    EMU_PROC("cuArray3DCreate", cuArray3DCreate_v2, FnCuArray3DCreate, 3020, 3020, false),
    EMU_PLAIN(cuArrayDestroy, FnCuArrayDestroy),
    EMU_PROC("cuMemcpyHtoD", cuMemcpyHtoD_v2, FnCuMemcpyHtoD, 3020, 3020, false),
    EMU_PROC("cuMemcpyDtoH", cuMemcpyDtoH_v2, FnCuMemcpyDtoH, 3020, 3020, false),
    EMU_PROC("cuMemcpyDtoD", cuMemcpyDtoD_v2, FnCuMemcpyDtoD, 3020, 3020, false),
    EMU_PROC("cuMemsetD8", cuMemsetD8_v2, FnCuMemsetD8, 3020, 3020, false),
    EMU_PLAIN(cuStreamCreate, FnCuStreamCreate),
    EMU_PROC("cuStreamDestroy", cuStreamDestroy_v2, FnCuStreamDestroy, 3020, 3020, false),
    EMU_PLAIN(cuStreamSynchronize, FnCuStreamSynchronize),
    EMU_PLAIN(cuModuleLoadData, FnCuModuleLoadData),
    EMU_PLAIN(cuModuleUnload, FnCuModuleUnload),
    EMU_PLAIN(cuModuleGetFunction, FnCuModuleGetFunction),
    EMU_PLAIN(cuLaunchKernel, FnCuLaunchKernel),
    EMU_PROC("cuGetProcAddress", cuGetProcAddress, FnCuGetProcAddress, 11030, 11030, false),
    EMU_PROC("cuGetProcAddress", cuGetProcAddress_v2, FnCuGetProcAddressV2, 12000, 12000, false),
    EMU_PROC("cuCheckpointProcessLock", cuCheckpointProcessLock, FnCuCheckpointProcessLock, 12080,
             12080, false),
    EMU_PROC("cuCheckpointProcessCheckpoint", cuCheckpointProcessCheckpoint,
             FnCuCheckpointProcessCheckpoint, 12080, 12080, false),
    EMU_PROC("cuCheckpointProcessRestore", cuCheckpointProcessRestore, FnCuCheckpointProcessRestore,
             12080, 12080, false),
    EMU_PROC("cuCheckpointProcessUnlock", cuCheckpointProcessUnlock, FnCuCheckpointProcessUnlock,
             12080, 12080, false),
    EMU_PROC("cuCheckpointProcessGetState", cuCheckpointProcessGetState,
             FnCuCheckpointProcessGetState, 12080, 12080, false),
    EMU_PROC("cuCheckpointProcessGetRestoreThreadId", cuCheckpointProcessGetRestoreThreadId,
             FnCuCheckpointProcessGetRestoreThreadId, 12080, 12080, false),
};

#undef EMU_PLAIN
#undef EMU_PROC

struct Lookup {
  CUresult result;
  void* function;
  CUdriverProcAddressQueryResult status;
};

Lookup Found(const ProcEntry& entry) {
  return {CUDA_SUCCESS, entry.function, CU_GET_PROC_ADDRESS_SUCCESS};
}

Lookup NotFound(CUdriverProcAddressQueryResult status) {
  return {CUDA_ERROR_NOT_FOUND, nullptr, status};
}

bool HasPerThreadVariant(const char* base) {
  for (const ProcEntry& entry : kEntries) {
    if (entry.per_thread && std::strcmp(entry.base, base) == 0) return true;
  }
  return false;
}

// A base name: of the variants the emulated driver has, the newest one `cuda_version` selects.
Lookup ByBaseName(const char* base, int cuda_version, bool per_thread) {
  bool any = false;
  const ProcEntry* best = nullptr;
  bool want_per_thread = per_thread && HasPerThreadVariant(base);
  for (const ProcEntry& entry : kEntries) {
    if (std::strcmp(entry.base, base) != 0 || entry.per_thread != want_per_thread) continue;
    if (!DriverHas(entry.introduced) || entry.select_from == kExactNameOnly) continue;
    any = true;
    if (entry.select_from <= cuda_version &&
        (best == nullptr || entry.select_from > best->select_from)) {
      best = &entry;
    }
  }
  if (best != nullptr) return Found(*best);
  return NotFound(any ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                      : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

// An exact versioned name such as "cuMemAlloc_v2".
Lookup ByExactName(const char* symbol, int cuda_version) {
  for (const ProcEntry& entry : kEntries) {
    if (std::strcmp(entry.symbol, symbol) != 0) continue;
    if (!DriverHas(entry.introduced)) return NotFound(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    if (entry.introduced > cuda_version) {
      return NotFound(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    }
    return Found(entry);
  }
  return NotFound(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

bool IsBaseName(const char* symbol) {
  for (const ProcEntry& entry : kEntries) {
    if (std::strcmp(entry.base, symbol) == 0) return true;
  }
  return false;
}

CUresult GetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                        CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr || flags > 3) return CUDA_ERROR_INVALID_VALUE;
  bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  Lookup lookup = IsBaseName(symbol) ? ByBaseName(symbol, cuda_version, per_thread)
                                     : ByExactName(symbol, cuda_version);
  *pfn = lookup.function;
  if (status != nullptr) *status = lookup.status;
  return lookup.result;
}

}  // namespace
}  // namespace paladin::emucuda

EMU_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version,
                                     cuuint64_t flags) {
  EMU_REQUIRE_DRIVER(11030);
  return paladin::emucuda::GetProcAddress(symbol, pfn, cuda_version, flags, nullptr);
}

EMU_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                        cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  EMU_REQUIRE_DRIVER(12000);
  return paladin::emucuda::GetProcAddress(symbol, pfn, cuda_version, flags, status);
}
