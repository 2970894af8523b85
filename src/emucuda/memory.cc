// Driver entry points for linear memory, managed memory, arrays and copies. Device memory is host
// memory: each allocation is a fresh private mapping whose address is the device pointer, and the
// device counts it rounded up to the 2 MiB granularity.
#include <sys/mman.h>

#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "emucuda/driver.h"
#include "emucuda/entry_points.h"
#include "emucuda/runtime.h"

namespace paladin::emucuda {
namespace {

std::map<uint64_t, Allocation>& Allocations() {
  static auto* allocations = new std::map<uint64_t, Allocation>;
  return *allocations;
}

std::set<CUarray>& Arrays() {
  static auto* arrays = new std::set<CUarray>;
  return *arrays;
}

CUresult ChargeAndMap(int ordinal, uint64_t counted, uint64_t* address) {
  Runtime& runtime = Runtime::Get();
  CUresult result = runtime.Charge(ordinal, counted);
  if (result != CUDA_SUCCESS) return result;
  result = MapDeviceMemory(counted, address);
  if (result != CUDA_SUCCESS) runtime.Uncharge(ordinal, counted);
  return result;
}

// Counts and maps `bytes` on the device of the calling thread's context, then records it with
// `record(ctx, counted, address)`, all under the runtime's lock.
template <typename Record>
CUresult MapInContext(uint64_t bytes, bool out_ok, Record record) {
  CUcontext ctx = CurrentContext();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (!out_ok || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t counted = RoundToGranularity(bytes);
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  uint64_t address = 0;
  CUresult result = ChargeAndMap(ctx->ordinal, counted, &address);
  if (result != CUDA_SUCCESS) return result;
  record(ctx, counted, address);
  return CUDA_SUCCESS;
}

// Counts and maps `bytes` in the calling thread's context.
CUresult AllocateInContext(uint64_t bytes, AllocKind kind, CUdeviceptr* ptr) {
  return MapInContext(bytes, ptr != nullptr, [&](CUcontext ctx, uint64_t counted, uint64_t at) {
    AddAllocation(at, Allocation{counted, counted, ctx->ordinal, kind, ctx, nullptr});
    *ptr = at;
  });
}

unsigned int FormatBytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 0;
  }
}

// Width x max(Height,1) x max(Depth,1) x channels x element size; 0 when invalid.
uint64_t ArrayBytes(size_t width, size_t height, size_t depth, CUarray_format format,
                    unsigned int channels) {
  unsigned int element = FormatBytes(format);
  if (width == 0 || element == 0 || (channels != 1 && channels != 2 && channels != 4)) return 0;
  uint64_t bytes = static_cast<uint64_t>(element) * channels;
  for (uint64_t factor : {static_cast<uint64_t>(width), static_cast<uint64_t>(height),
                          static_cast<uint64_t>(depth)}) {
    if (__builtin_mul_overflow(bytes, factor == 0 ? 1 : factor, &bytes)) return 0;
  }
  return bytes;
}

CUresult CreateArray(CUarray* array, uint64_t bytes) {
  return MapInContext(bytes, array != nullptr, [&](CUcontext ctx, uint64_t counted, uint64_t at) {
    auto* created = new CUarray_st;
    created->ptr = at;
    created->bytes = counted;
    created->counted = counted;
    created->ordinal = ctx->ordinal;
    created->ctx = ctx;
    Arrays().insert(created);
    *array = created;
  });
}

void DestroyArray(CUarray array) {
  UnmapDeviceMemory(array->ptr, array->bytes);
  Runtime::Get().Uncharge(array->ordinal, array->counted);
  Arrays().erase(array);
  delete array;
}

// Copies need a context, like the real driver's; ranges are checked before copying.
CUresult CheckCopy(std::initializer_list<uint64_t> device_ranges, size_t bytes) {
  if (CurrentContext() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  for (uint64_t ptr : device_ranges) {
    if (!DeviceRangeValid(ptr, bytes)) return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

}  // namespace

CUresult MapDeviceMemory(uint64_t bytes, uint64_t* ptr) {
  void* address = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (address == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  *ptr = reinterpret_cast<uint64_t>(address);
  return CUDA_SUCCESS;
}

void UnmapDeviceMemory(uint64_t ptr, uint64_t bytes) { munmap(HostPointer(ptr), bytes); }

void AddAllocation(uint64_t ptr, const Allocation& allocation) { Allocations()[ptr] = allocation; }

CUresult FreeAllocation(uint64_t ptr) {
  auto found = Allocations().find(ptr);
  if (found == Allocations().end()) return CUDA_ERROR_INVALID_VALUE;
  Allocation allocation = found->second;
  Allocations().erase(found);
  if (allocation.kind == AllocKind::kPooled) {
    PoolFree(allocation.pool, ptr, allocation);
    return CUDA_SUCCESS;
  }
  UnmapDeviceMemory(ptr, allocation.mapped);
  Runtime::Get().Uncharge(allocation.ordinal, allocation.counted);
  return CUDA_SUCCESS;
}

void FreeContextMemory(CUcontext ctx) {
  std::map<uint64_t, Allocation>& allocations = Allocations();
  for (auto it = allocations.begin(); it != allocations.end();) {
    uint64_t ptr = it->first;
    bool owned = it->second.ctx == ctx;
    ++it;
    if (owned) FreeAllocation(ptr);
  }
  std::set<CUarray>& arrays = Arrays();
  for (auto it = arrays.begin(); it != arrays.end();) {
    CUarray array = *it++;
    if (array->ctx == ctx) DestroyArray(array);
  }
}

bool DeviceRangeValid(uint64_t ptr, uint64_t bytes) {
  uint64_t end = 0;
  if (__builtin_add_overflow(ptr, bytes, &end)) return false;
  const std::map<uint64_t, Allocation>& allocations = Allocations();
  auto after = allocations.upper_bound(ptr);
  if (after != allocations.begin()) {
    auto it = std::prev(after);
    if (end <= it->first + it->second.mapped) return true;
  }
  return VmmRangeAccessible(ptr, bytes);
}

}  // namespace paladin::emucuda

using paladin::emucuda::AllocKind;
using paladin::emucuda::CheckCopy;
using paladin::emucuda::CurrentContext;
using paladin::emucuda::HostPointer;
using paladin::emucuda::Runtime;

EMU_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  EMU_API_ENTRY();
  return paladin::emucuda::AllocateInContext(bytes, AllocKind::kLinear, dptr);
}

EMU_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width_bytes,
                                       size_t height, unsigned int element_size) {
  EMU_API_ENTRY();
  if (pitch == nullptr || width_bytes == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_size != 4 && element_size != 8 && element_size != 16) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t row = (width_bytes + 511) / 512 * 512;
  size_t bytes = 0;
  if (row < width_bytes || __builtin_mul_overflow(row, height, &bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUresult result = paladin::emucuda::AllocateInContext(bytes, AllocKind::kLinear, dptr);
  if (result == CUDA_SUCCESS) *pitch = row;
  return result;
}

EMU_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  EMU_REQUIRE_DRIVER(6000);
  EMU_API_ENTRY();
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return paladin::emucuda::AllocateInContext(bytes, AllocKind::kManaged, dptr);
}

EMU_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  EMU_API_ENTRY();
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  return paladin::emucuda::FreeAllocation(dptr);
}

EMU_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  EMU_API_ENTRY();
  Runtime& runtime = Runtime::Get();
  CUcontext ctx = CurrentContext();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int physical = runtime.Physical(ctx->ordinal);
  *total_bytes = runtime.state()->total(physical);
  *free_bytes = runtime.state()->free(physical);
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuArrayCreate_v2(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc) {
  EMU_API_ENTRY();
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t bytes =
      paladin::emucuda::ArrayBytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels);
  return paladin::emucuda::CreateArray(array, bytes);
}

EMU_EXPORT CUresult cuArray3DCreate_v2(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  EMU_API_ENTRY();
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t bytes = paladin::emucuda::ArrayBytes(desc->Width, desc->Height, desc->Depth,
                                                desc->Format, desc->NumChannels);
  return paladin::emucuda::CreateArray(array, bytes);
}

EMU_EXPORT CUresult cuArrayDestroy(CUarray array) {
  EMU_API_ENTRY();
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  if (paladin::emucuda::Arrays().count(array) == 0) return CUDA_ERROR_INVALID_HANDLE;
  paladin::emucuda::DestroyArray(array);
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  EMU_API_ENTRY();
  if (bytes == 0) return CUDA_SUCCESS;
  if (src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult result = CheckCopy({dst}, bytes);
  if (result == CUDA_SUCCESS) std::memcpy(HostPointer(dst), src, bytes);
  return result;
}

EMU_EXPORT CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  EMU_API_ENTRY();
  if (bytes == 0) return CUDA_SUCCESS;
  if (dst == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult result = CheckCopy({src}, bytes);
  if (result == CUDA_SUCCESS) std::memcpy(dst, HostPointer(src), bytes);
  return result;
}

EMU_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  EMU_API_ENTRY();
  if (bytes == 0) return CUDA_SUCCESS;
  CUresult result = CheckCopy({dst, src}, bytes);
  if (result == CUDA_SUCCESS) {
    std::memmove(HostPointer(dst), HostPointer(src), bytes);
  }
  return result;
}

EMU_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t count) {
  EMU_API_ENTRY();
  if (count == 0) return CUDA_SUCCESS;
  CUresult result = CheckCopy({dst}, count);
  if (result == CUDA_SUCCESS) std::memset(HostPointer(dst), value, count);
  return result;
}
