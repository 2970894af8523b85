// The subset of NVML (libnvidia-ml.so.1) that Paladin calls, interposes or emulates, declared
// here so the build needs no NVIDIA headers. Layouts follow NVML's published ABI.
#ifndef PALADIN_GPU_NVML_API_H_
#define PALADIN_GPU_NVML_API_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef int nvmlReturn_t;
enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_UNKNOWN = 999,
};

typedef struct nvmlDevice_st* nvmlDevice_t;

typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

// nvmlMemory_v2_t: `version` must be kNvmlMemoryV2Version.
typedef struct nvmlMemory_v2_st {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_v2_t;
#define PALADIN_NVML_MEMORY_V2_VERSION ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24u)))

typedef struct nvmlProcessInfo_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct nvmlProcessUtilizationSample_st {
  unsigned int pid;
  unsigned long long timeStamp;  // microseconds
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct nvmlUtilization_st {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;

typedef nvmlReturn_t (*FnNvmlInit)(void);
typedef nvmlReturn_t (*FnNvmlShutdown)(void);
typedef const char* (*FnNvmlErrorString)(nvmlReturn_t result);
typedef nvmlReturn_t (*FnNvmlSystemGetDriverVersion)(char* version, unsigned int length);
typedef nvmlReturn_t (*FnNvmlDeviceGetCount)(unsigned int* count);
typedef nvmlReturn_t (*FnNvmlDeviceGetHandleByIndex)(unsigned int index, nvmlDevice_t* device);
typedef nvmlReturn_t (*FnNvmlDeviceGetHandleByUUID)(const char* uuid, nvmlDevice_t* device);
typedef nvmlReturn_t (*FnNvmlDeviceGetName)(nvmlDevice_t device, char* name, unsigned int length);
typedef nvmlReturn_t (*FnNvmlDeviceGetUUID)(nvmlDevice_t device, char* uuid, unsigned int length);
typedef nvmlReturn_t (*FnNvmlDeviceGetMemoryInfo)(nvmlDevice_t device, nvmlMemory_t* memory);
typedef nvmlReturn_t (*FnNvmlDeviceGetMemoryInfoV2)(nvmlDevice_t device, nvmlMemory_v2_t* memory);
typedef nvmlReturn_t (*FnNvmlDeviceGetComputeRunningProcesses)(nvmlDevice_t device,
                                                               unsigned int* count,
                                                               nvmlProcessInfo_t* infos);
typedef nvmlReturn_t (*FnNvmlDeviceGetProcessUtilization)(nvmlDevice_t device,
                                                          nvmlProcessUtilizationSample_t* samples,
                                                          unsigned int* count,
                                                          unsigned long long last_seen_timestamp);
typedef nvmlReturn_t (*FnNvmlDeviceGetUtilizationRates)(nvmlDevice_t device,
                                                        nvmlUtilization_t* utilization);

// Added for the emulated NVML (src/emucuda).
enum { NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96, NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96 };
enum { NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80 };

// The first nvmlProcessInfo_t layout, filled by nvmlDeviceGetComputeRunningProcesses (no suffix).
typedef struct nvmlProcessInfo_v1_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;
typedef nvmlReturn_t (*FnNvmlDeviceGetComputeRunningProcessesV1)(nvmlDevice_t device,
                                                                 unsigned int* count,
                                                                 nvmlProcessInfo_v1_t* infos);

// Events (nvmlDeviceRegisterEvents, nvmlEventSetWait_v2): the kinds Paladin watches for GPU health.
#define PALADIN_NVML_EVENT_SINGLE_BIT_ECC 0x1ull  // nvmlEventTypeSingleBitEccError
#define PALADIN_NVML_EVENT_DOUBLE_BIT_ECC 0x2ull  // nvmlEventTypeDoubleBitEccError
#define PALADIN_NVML_EVENT_XID 0x8ull             // nvmlEventTypeXidCriticalError
#define PALADIN_NVML_EVENT_HEALTH \
  (PALADIN_NVML_EVENT_SINGLE_BIT_ECC | PALADIN_NVML_EVENT_DOUBLE_BIT_ECC | PALADIN_NVML_EVENT_XID)

typedef struct nvmlEventSet_st* nvmlEventSet_t;

typedef struct nvmlEventData_st {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // the Xid for an Xid event (999: unknown), 0 otherwise
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlEventData_t;

typedef nvmlReturn_t (*FnNvmlEventSetCreate)(nvmlEventSet_t* set);
typedef nvmlReturn_t (*FnNvmlEventSetFree)(nvmlEventSet_t set);
typedef nvmlReturn_t (*FnNvmlDeviceGetSupportedEventTypes)(nvmlDevice_t device,
                                                           unsigned long long* types);
typedef nvmlReturn_t (*FnNvmlDeviceRegisterEvents)(nvmlDevice_t device, unsigned long long types,
                                                   nvmlEventSet_t set);
typedef nvmlReturn_t (*FnNvmlEventSetWait)(nvmlEventSet_t set, nvmlEventData_t* data,
                                           unsigned int timeout_ms);

// Paladin's own addition to the emulated NVML (absent from NVIDIA's): posts an event on an
// emulated device, as the hardware would, to every process watching it. `type` is one event
// kind above; `data` the Xid for an Xid event.
typedef nvmlReturn_t (*FnPaladinEmuPostEvent)(nvmlDevice_t device, unsigned long long type,
                                              unsigned long long data);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // PALADIN_GPU_NVML_API_H_
