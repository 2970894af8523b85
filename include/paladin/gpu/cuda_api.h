// The subset of the CUDA driver API that Paladin calls, interposes or emulates, declared here so
// that nothing in the build needs the CUDA toolkit. Types, enum values and struct layouts follow
// the driver's published ABI (cuda.h, CUDA 12/13); only what Paladin uses is declared.
//
// Function types are declared as `Fn...` pointer typedefs: the interposer and the emulated driver
// define the real symbols, and everything else resolves them at run time with dlsym.
#ifndef PALADIN_GPU_CUDA_API_H_
#define PALADIN_GPU_CUDA_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int CUresult;
enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_OPERATING_SYSTEM = 304,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_ILLEGAL_STATE = 401,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_NOT_PERMITTED = 800,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_TIMEOUT = 909,
  CUDA_ERROR_UNKNOWN = 999,
};

typedef uint64_t cuuint64_t;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUarray_st* CUarray;
typedef struct CUstream_st* CUstream;
typedef struct CUmemPoolHandle_st* CUmemoryPool;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUctxCreateParams_st CUctxCreateParams;  // opaque here; passed through
typedef struct CUexecAffinityParam_st CUexecAffinityParam;

typedef struct CUuuid_st {
  char bytes[16];
} CUuuid;

// cuDeviceGetAttribute values used by Paladin.
typedef int CUdevice_attribute;
enum {
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
  CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
  CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY = 83,
  CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
  CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115,
};

// Virtual memory management (cuMemCreate and friends).
typedef int CUmemLocationType;
enum {
  CU_MEM_LOCATION_TYPE_INVALID = 0,
  CU_MEM_LOCATION_TYPE_DEVICE = 1,
  CU_MEM_LOCATION_TYPE_HOST = 2,
  CU_MEM_LOCATION_TYPE_HOST_NUMA = 3,
  CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT = 4,
};
typedef int CUmemAllocationType;
enum { CU_MEM_ALLOCATION_TYPE_PINNED = 1, CU_MEM_ALLOCATION_TYPE_MANAGED = 2 };
typedef int CUmemAllocationHandleType;
enum { CU_MEM_HANDLE_TYPE_NONE = 0 };
typedef int CUmemAccess_flags;
enum { CU_MEM_ACCESS_FLAGS_PROT_NONE = 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3 };
typedef int CUmemAllocationGranularity_flags;
enum { CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1 };

typedef struct CUmemLocation_st {
  CUmemLocationType type;
  int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
  CUmemAllocationType type;
  CUmemAllocationHandleType requestedHandleTypes;
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
  CUmemLocation location;
  CUmemAccess_flags flags;
} CUmemAccessDesc;

// Stream-ordered allocation and memory pools.
typedef int CUmemPool_attribute;
enum {
  CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1,
  CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC = 2,
  CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES = 3,
  CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
  CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,
  CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6,
  CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,
  CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8,
};

typedef struct CUmemPoolProps_st {
  CUmemAllocationType allocType;
  CUmemAllocationHandleType handleTypes;
  CUmemLocation location;
  void* win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
} CUmemPoolProps;

// Arrays.
typedef int CUarray_format;
enum {
  CU_AD_FORMAT_UNSIGNED_INT8 = 0x01,
  CU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
  CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
  CU_AD_FORMAT_SIGNED_INT8 = 0x08,
  CU_AD_FORMAT_SIGNED_INT16 = 0x09,
  CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
  CU_AD_FORMAT_HALF = 0x10,
  CU_AD_FORMAT_FLOAT = 0x20,
};

typedef struct CUDA_ARRAY_DESCRIPTOR_st {
  size_t Width;
  size_t Height;
  CUarray_format Format;
  unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct CUDA_ARRAY3D_DESCRIPTOR_st {
  size_t Width;
  size_t Height;
  size_t Depth;
  CUarray_format Format;
  unsigned int NumChannels;
  unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

// cuGetProcAddress.
enum {
  CU_GET_PROC_ADDRESS_DEFAULT = 0,
  CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1,
  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2,
};
typedef int CUdriverProcAddressQueryResult;
enum {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};

// The checkpoint API (driver 550+; CUDA 12.8 added GPU remapping on restore).
typedef int CUprocessState;
enum {
  CU_PROCESS_STATE_RUNNING = 0,
  CU_PROCESS_STATE_LOCKED = 1,
  CU_PROCESS_STATE_CHECKPOINTED = 2,
  CU_PROCESS_STATE_FAILED = 3,
};
typedef struct CUcheckpointLockArgs_st {
  unsigned int timeoutMs;  // 0: no timeout
  unsigned int reserved0;
  cuuint64_t reserved1[7];
} CUcheckpointLockArgs;
typedef struct CUcheckpointCheckpointArgs_st {
  cuuint64_t reserved[8];
} CUcheckpointCheckpointArgs;
typedef struct CUcheckpointGpuPair_st {
  CUuuid oldUuid;
  CUuuid newUuid;
} CUcheckpointGpuPair;
typedef struct CUcheckpointRestoreArgs_st {
  CUcheckpointGpuPair* gpuPairs;
  unsigned int gpuPairsCount;
  char reserved[52 - sizeof(CUcheckpointGpuPair*)];
  cuuint64_t reserved1;
} CUcheckpointRestoreArgs;
typedef struct CUcheckpointUnlockArgs_st {
  cuuint64_t reserved[8];
} CUcheckpointUnlockArgs;

// Function pointer types, named after the symbol they are resolved from.
typedef CUresult (*FnCuInit)(unsigned int flags);
typedef CUresult (*FnCuDriverGetVersion)(int* version);
typedef CUresult (*FnCuGetErrorString)(CUresult error, const char** str);
typedef CUresult (*FnCuGetErrorName)(CUresult error, const char** str);
typedef CUresult (*FnCuDeviceGet)(CUdevice* device, int ordinal);
typedef CUresult (*FnCuDeviceGetCount)(int* count);
typedef CUresult (*FnCuDeviceGetName)(char* name, int len, CUdevice dev);
typedef CUresult (*FnCuDeviceGetUuid)(CUuuid* uuid, CUdevice dev);
typedef CUresult (*FnCuDeviceTotalMem)(size_t* bytes, CUdevice dev);
typedef CUresult (*FnCuDeviceGetAttribute)(int* value, CUdevice_attribute attrib, CUdevice dev);
typedef CUresult (*FnCuDevicePrimaryCtxRetain)(CUcontext* ctx, CUdevice dev);
typedef CUresult (*FnCuDevicePrimaryCtxRelease)(CUdevice dev);
typedef CUresult (*FnCuDevicePrimaryCtxReset)(CUdevice dev);
typedef CUresult (*FnCuCtxCreate)(CUcontext* ctx, unsigned int flags, CUdevice dev);
typedef CUresult (*FnCuCtxCreateV3)(CUcontext* ctx, CUexecAffinityParam* params, int num_params,
                                    unsigned int flags, CUdevice dev);
typedef CUresult (*FnCuCtxCreateV4)(CUcontext* ctx, CUctxCreateParams* params, unsigned int flags,
                                    CUdevice dev);
typedef CUresult (*FnCuCtxDestroy)(CUcontext ctx);
typedef CUresult (*FnCuCtxSetCurrent)(CUcontext ctx);
typedef CUresult (*FnCuCtxGetCurrent)(CUcontext* ctx);
typedef CUresult (*FnCuCtxGetDevice)(CUdevice* dev);
typedef CUresult (*FnCuCtxSynchronize)(void);
typedef CUresult (*FnCuMemGetInfo)(size_t* free_bytes, size_t* total_bytes);
typedef CUresult (*FnCuMemAlloc)(CUdeviceptr* dptr, size_t bytes);
typedef CUresult (*FnCuMemAllocPitch)(CUdeviceptr* dptr, size_t* pitch, size_t width_bytes,
                                      size_t height, unsigned int element_size);
typedef CUresult (*FnCuMemAllocManaged)(CUdeviceptr* dptr, size_t bytes, unsigned int flags);
typedef CUresult (*FnCuMemFree)(CUdeviceptr dptr);
typedef CUresult (*FnCuMemAllocAsync)(CUdeviceptr* dptr, size_t bytes, CUstream stream);
typedef CUresult (*FnCuMemAllocFromPoolAsync)(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                              CUstream stream);
typedef CUresult (*FnCuMemFreeAsync)(CUdeviceptr dptr, CUstream stream);
typedef CUresult (*FnCuMemPoolCreate)(CUmemoryPool* pool, const CUmemPoolProps* props);
typedef CUresult (*FnCuMemPoolDestroy)(CUmemoryPool pool);
typedef CUresult (*FnCuMemPoolTrimTo)(CUmemoryPool pool, size_t min_bytes_to_keep);
typedef CUresult (*FnCuMemPoolSetAttribute)(CUmemoryPool pool, CUmemPool_attribute attr,
                                            void* value);
typedef CUresult (*FnCuMemPoolGetAttribute)(CUmemoryPool pool, CUmemPool_attribute attr,
                                            void* value);
typedef CUresult (*FnCuDeviceGetDefaultMemPool)(CUmemoryPool* pool, CUdevice dev);
typedef CUresult (*FnCuDeviceGetMemPool)(CUmemoryPool* pool, CUdevice dev);
typedef CUresult (*FnCuMemCreate)(CUmemGenericAllocationHandle* handle, size_t size,
                                  const CUmemAllocationProp* prop, unsigned long long flags);
typedef CUresult (*FnCuMemRelease)(CUmemGenericAllocationHandle handle);
typedef CUresult (*FnCuMemAddressReserve)(CUdeviceptr* ptr, size_t size, size_t alignment,
                                          CUdeviceptr addr, unsigned long long flags);
typedef CUresult (*FnCuMemAddressFree)(CUdeviceptr ptr, size_t size);
typedef CUresult (*FnCuMemMap)(CUdeviceptr ptr, size_t size, size_t offset,
                               CUmemGenericAllocationHandle handle, unsigned long long flags);
typedef CUresult (*FnCuMemUnmap)(CUdeviceptr ptr, size_t size);
typedef CUresult (*FnCuMemSetAccess)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                     size_t count);
typedef CUresult (*FnCuMemGetAllocationGranularity)(size_t* granularity,
                                                    const CUmemAllocationProp* prop,
                                                    CUmemAllocationGranularity_flags option);
typedef CUresult (*FnCuArrayCreate)(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc);
typedef CUresult (*FnCuArray3DCreate)(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc);
typedef CUresult (*FnCuArrayDestroy)(CUarray array);
typedef CUresult (*FnCuMemcpyHtoD)(CUdeviceptr dst, const void* src, size_t bytes);
typedef CUresult (*FnCuMemcpyDtoH)(void* dst, CUdeviceptr src, size_t bytes);
typedef CUresult (*FnCuMemcpyDtoD)(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
typedef CUresult (*FnCuMemsetD8)(CUdeviceptr dst, unsigned char value, size_t count);
typedef CUresult (*FnCuStreamCreate)(CUstream* stream, unsigned int flags);
typedef CUresult (*FnCuStreamDestroy)(CUstream stream);
typedef CUresult (*FnCuStreamSynchronize)(CUstream stream);
typedef CUresult (*FnCuLaunchKernel)(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                                     unsigned int grid_z, unsigned int block_x,
                                     unsigned int block_y, unsigned int block_z,
                                     unsigned int shared_bytes, CUstream stream, void** params,
                                     void** extra);
typedef CUresult (*FnCuModuleGetFunction)(CUfunction* f, CUmodule module, const char* name);
typedef CUresult (*FnCuGetProcAddress)(const char* symbol, void** pfn, int cuda_version,
                                       cuuint64_t flags);
typedef CUresult (*FnCuGetProcAddressV2)(const char* symbol, void** pfn, int cuda_version,
                                         cuuint64_t flags, CUdriverProcAddressQueryResult* status);
typedef CUresult (*FnCuCheckpointProcessLock)(int pid, CUcheckpointLockArgs* args);
typedef CUresult (*FnCuCheckpointProcessCheckpoint)(int pid, CUcheckpointCheckpointArgs* args);
typedef CUresult (*FnCuCheckpointProcessRestore)(int pid, CUcheckpointRestoreArgs* args);
typedef CUresult (*FnCuCheckpointProcessUnlock)(int pid, CUcheckpointUnlockArgs* args);
typedef CUresult (*FnCuCheckpointProcessGetState)(int pid, CUprocessState* state);
typedef CUresult (*FnCuCheckpointProcessGetRestoreThreadId)(int pid, int* tid);

// Added for the emulated driver (src/emucuda): a few more values and entry points.
enum { CU_MEM_ACCESS_FLAGS_PROT_READ = 1 };
enum { CU_MEM_ATTACH_GLOBAL = 0x1, CU_MEM_ATTACH_HOST = 0x2, CU_MEM_ATTACH_SINGLE = 0x4 };
enum { CU_STREAM_DEFAULT = 0x0, CU_STREAM_NON_BLOCKING = 0x1 };
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
typedef CUresult (*FnCuCtxPushCurrent)(CUcontext ctx);
typedef CUresult (*FnCuCtxPopCurrent)(CUcontext* ctx);
typedef CUresult (*FnCuModuleLoadData)(CUmodule* module, const void* image);
typedef CUresult (*FnCuModuleUnload)(CUmodule module);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // PALADIN_GPU_CUDA_API_H_
