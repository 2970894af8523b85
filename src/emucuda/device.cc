// Driver entry points: initialisation, version, error strings, device queries.
#include <cstring>

#include "emucuda/driver.h"
#include "emucuda/entry_points.h"
#include "emucuda/runtime.h"

namespace paladin::emucuda {
namespace {

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};

constexpr ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE",
     "no CUDA-capable device is detected (emulated driver)"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM",
     "OS call failed or operation not supported on this OS"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE",
     "the operation cannot be performed in the present state"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_TIMEOUT, "CUDA_ERROR_TIMEOUT", "the operation timed out"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const ErrorText* FindError(CUresult code) {
  for (const ErrorText& error : kErrors) {
    if (error.code == code) return &error;
  }
  return nullptr;
}

// The emulated chip: an H100-class part (compute capability 9.0, 132 SMs).
CUresult Attribute(CUdevice_attribute attribute, int ordinal, int* value) {
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = 1024;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *value = 32;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = 132;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      *value = Runtime::Get().Physical(ordinal);
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *value = 9;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *value = 0;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
      *value = 1;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      *value = DriverHas(10020) ? 1 : 0;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      *value = DriverHas(11020) ? 1 : 0;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace
}  // namespace paladin::emucuda

using paladin::emucuda::Runtime;

EMU_EXPORT CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Runtime& runtime = Runtime::Get();
  runtime.gate().EnterShared();
  CUresult result = runtime.Init();
  runtime.gate().ExitShared();
  return result;
}

EMU_EXPORT CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = paladin::emucuda::ProcessConfig().driver_version;
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuGetErrorString(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* found = paladin::emucuda::FindError(error);
  *str = found != nullptr ? found->text : nullptr;
  return found != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EMU_EXPORT CUresult cuGetErrorName(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* found = paladin::emucuda::FindError(error);
  *str = found != nullptr ? found->name : nullptr;
  return found != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EMU_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  EMU_API_ENTRY();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!Runtime::Get().ValidDevice(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuDeviceGetCount(int* count) {
  EMU_API_ENTRY();
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = Runtime::Get().device_count();
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuDeviceGetName(char* name, int length, CUdevice device) {
  EMU_API_ENTRY();
  Runtime& runtime = Runtime::Get();
  if (name == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!runtime.ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  const char* full = runtime.state()->name(runtime.Physical(device));
  size_t copy = std::min(std::strlen(full), static_cast<size_t>(length) - 1);
  std::memcpy(name, full, copy);
  name[copy] = '\0';
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice device) {
  EMU_API_ENTRY();
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!Runtime::Get().ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  *uuid = Runtime::Get().Uuid(device);
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice device) {
  return cuDeviceGetUuid(uuid, device);
}

EMU_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice device) {
  EMU_API_ENTRY();
  Runtime& runtime = Runtime::Get();
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!runtime.ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = runtime.state()->total(runtime.Physical(device));
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute,
                                         CUdevice device) {
  EMU_API_ENTRY();
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!Runtime::Get().ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  return paladin::emucuda::Attribute(attribute, device, value);
}
