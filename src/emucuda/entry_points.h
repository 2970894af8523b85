// Declarations of every driver entry point the library exports, each with the type of its
// pointer typedef in paladin/gpu/cuda_api.h: a definition whose signature strays from the
// published ABI does not compile.
#ifndef PALADIN_EMUCUDA_ENTRY_POINTS_H_
#define PALADIN_EMUCUDA_ENTRY_POINTS_H_

#include <type_traits>

#include "emucuda/driver.h"
#include "paladin/gpu/cuda_api.h"

#define EMU_DECLARE(FnType, symbol) EMU_EXPORT std::remove_pointer_t<FnType> symbol

EMU_DECLARE(FnCuInit, cuInit);
EMU_DECLARE(FnCuDriverGetVersion, cuDriverGetVersion);
EMU_DECLARE(FnCuGetErrorString, cuGetErrorString);
EMU_DECLARE(FnCuGetErrorName, cuGetErrorName);
EMU_DECLARE(FnCuDeviceGet, cuDeviceGet);
EMU_DECLARE(FnCuDeviceGetCount, cuDeviceGetCount);
EMU_DECLARE(FnCuDeviceGetName, cuDeviceGetName);
EMU_DECLARE(FnCuDeviceGetUuid, cuDeviceGetUuid);
EMU_DECLARE(FnCuDeviceGetUuid, cuDeviceGetUuid_v2);
EMU_DECLARE(FnCuDeviceTotalMem, cuDeviceTotalMem_v2);
EMU_DECLARE(FnCuDeviceGetAttribute, cuDeviceGetAttribute);
EMU_DECLARE(FnCuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
EMU_DECLARE(FnCuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2);
EMU_DECLARE(FnCuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2);
EMU_DECLARE(FnCuCtxCreate, cuCtxCreate_v2);
EMU_DECLARE(FnCuCtxCreateV3, cuCtxCreate_v3);
EMU_DECLARE(FnCuCtxCreateV4, cuCtxCreate_v4);
EMU_DECLARE(FnCuCtxDestroy, cuCtxDestroy_v2);
EMU_DECLARE(FnCuCtxSetCurrent, cuCtxSetCurrent);
EMU_DECLARE(FnCuCtxGetCurrent, cuCtxGetCurrent);
EMU_DECLARE(FnCuCtxPushCurrent, cuCtxPushCurrent_v2);
EMU_DECLARE(FnCuCtxPopCurrent, cuCtxPopCurrent_v2);
EMU_DECLARE(FnCuCtxGetDevice, cuCtxGetDevice);
EMU_DECLARE(FnCuCtxSynchronize, cuCtxSynchronize);
EMU_DECLARE(FnCuMemGetInfo, cuMemGetInfo_v2);
EMU_DECLARE(FnCuMemAlloc, cuMemAlloc_v2);
EMU_DECLARE(FnCuMemAllocPitch, cuMemAllocPitch_v2);
EMU_DECLARE(FnCuMemAllocManaged, cuMemAllocManaged);
EMU_DECLARE(FnCuMemFree, cuMemFree_v2);
EMU_DECLARE(FnCuMemAllocAsync, cuMemAllocAsync);
EMU_DECLARE(FnCuMemAllocAsync, cuMemAllocAsync_ptsz);
EMU_DECLARE(FnCuMemFreeAsync, cuMemFreeAsync);
EMU_DECLARE(FnCuMemFreeAsync, cuMemFreeAsync_ptsz);
EMU_DECLARE(FnCuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync);
EMU_DECLARE(FnCuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz);
EMU_DECLARE(FnCuMemPoolCreate, cuMemPoolCreate);
EMU_DECLARE(FnCuMemPoolDestroy, cuMemPoolDestroy);
EMU_DECLARE(FnCuMemPoolTrimTo, cuMemPoolTrimTo);
EMU_DECLARE(FnCuMemPoolSetAttribute, cuMemPoolSetAttribute);
EMU_DECLARE(FnCuMemPoolGetAttribute, cuMemPoolGetAttribute);
EMU_DECLARE(FnCuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool);
EMU_DECLARE(FnCuDeviceGetMemPool, cuDeviceGetMemPool);
EMU_DECLARE(FnCuMemCreate, cuMemCreate);
EMU_DECLARE(FnCuMemRelease, cuMemRelease);
EMU_DECLARE(FnCuMemAddressReserve, cuMemAddressReserve);
EMU_DECLARE(FnCuMemAddressFree, cuMemAddressFree);
EMU_DECLARE(FnCuMemMap, cuMemMap);
EMU_DECLARE(FnCuMemUnmap, cuMemUnmap);
EMU_DECLARE(FnCuMemSetAccess, cuMemSetAccess);
EMU_DECLARE(FnCuMemGetAllocationGranularity, cuMemGetAllocationGranularity);
EMU_DECLARE(FnCuArrayCreate, cuArrayCreate_v2);
EMU_DECLARE(FnCuArray3DCreate, cuArray3DCreate_v2);
EMU_DECLARE(FnCuArrayDestroy, cuArrayDestroy);
EMU_DECLARE(FnCuMemcpyHtoD, cuMemcpyHtoD_v2);
EMU_DECLARE(FnCuMemcpyDtoH, cuMemcpyDtoH_v2);
EMU_DECLARE(FnCuMemcpyDtoD, cuMemcpyDtoD_v2);
EMU_DECLARE(FnCuMemsetD8, cuMemsetD8_v2);
EMU_DECLARE(FnCuStreamCreate, cuStreamCreate);
EMU_DECLARE(FnCuStreamDestroy, cuStreamDestroy_v2);
EMU_DECLARE(FnCuStreamSynchronize, cuStreamSynchronize);
EMU_DECLARE(FnCuModuleLoadData, cuModuleLoadData);
EMU_DECLARE(FnCuModuleUnload, cuModuleUnload);
EMU_DECLARE(FnCuModuleGetFunction, cuModuleGetFunction);
EMU_DECLARE(FnCuLaunchKernel, cuLaunchKernel);
EMU_DECLARE(FnCuGetProcAddress, cuGetProcAddress);
EMU_DECLARE(FnCuGetProcAddressV2, cuGetProcAddress_v2);
EMU_DECLARE(FnCuCheckpointProcessLock, cuCheckpointProcessLock);
EMU_DECLARE(FnCuCheckpointProcessCheckpoint, cuCheckpointProcessCheckpoint);
EMU_DECLARE(FnCuCheckpointProcessRestore, cuCheckpointProcessRestore);
EMU_DECLARE(FnCuCheckpointProcessUnlock, cuCheckpointProcessUnlock);
EMU_DECLARE(FnCuCheckpointProcessGetState, cuCheckpointProcessGetState);
EMU_DECLARE(FnCuCheckpointProcessGetRestoreThreadId, cuCheckpointProcessGetRestoreThreadId);

#undef EMU_DECLARE

#endif  // PALADIN_EMUCUDA_ENTRY_POINTS_H_
