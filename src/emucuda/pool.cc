// Driver entry points for stream-ordered allocation and memory pools. A pool takes bytes from its
// device (reserved) and hands them to allocations (used); freed bytes stay cached in the pool up
// to its release threshold. Emulated streams run nothing, so frees take effect at once.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>

#include "emucuda/driver.h"
#include "emucuda/entry_points.h"
#include "emucuda/runtime.h"

namespace paladin::emucuda {
namespace {

constexpr int kPoolsIntroduced = 11020;

std::set<CUmemoryPool>& Pools() {
  static auto* pools = new std::set<CUmemoryPool>;
  return *pools;
}

CUmemoryPool DefaultPool(int ordinal) {
  static auto* defaults = new CUmemoryPool[kMaxDevices]();
  if (defaults[ordinal] == nullptr) {
    defaults[ordinal] = new CUmemPoolHandle_st;
    defaults[ordinal]->ordinal = ordinal;
    defaults[ordinal]->is_default = true;
    Pools().insert(defaults[ordinal]);
  }
  return defaults[ordinal];
}

bool ValidPool(CUmemoryPool pool) { return Pools().count(pool) != 0 && !pool->destroyed; }

void GiveBack(CUmemoryPool pool, uint64_t bytes) {
  if (bytes == 0) return;
  Runtime::Get().Uncharge(pool->ordinal, bytes);
  pool->reserved -= bytes;
}

CUresult PoolAllocate(CUmemoryPool pool, uint64_t bytes, CUdeviceptr* ptr) {
  if (ptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t size = RoundToGranularity(bytes);
  uint64_t cached = pool->reserved - pool->used;
  uint64_t need = size > cached ? size - cached : 0;
  if (pool->max_size != 0 && pool->reserved + need > pool->max_size) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Runtime& runtime = Runtime::Get();
  CUresult result = runtime.Charge(pool->ordinal, need);
  if (result != CUDA_SUCCESS) return result;
  uint64_t address = 0;
  result = MapDeviceMemory(size, &address);
  if (result != CUDA_SUCCESS) {
    runtime.Uncharge(pool->ordinal, need);
    return result;
  }
  pool->reserved += need;
  pool->used += size;
  pool->reserved_high = std::max(pool->reserved_high, pool->reserved);
  pool->used_high = std::max(pool->used_high, pool->used);
  AddAllocation(address, Allocation{size, 0, pool->ordinal, AllocKind::kPooled, nullptr, pool});
  *ptr = address;
  return CUDA_SUCCESS;
}

CUresult AllocateOnStream(CUdeviceptr* ptr, size_t bytes, CUstream stream) {
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  CUcontext ctx = nullptr;
  CUresult result = StreamContext(stream, &ctx);
  if (result != CUDA_SUCCESS) return result;
  return PoolAllocate(DefaultPool(ctx->ordinal), bytes, ptr);
}

CUresult AllocateFromPool(CUdeviceptr* ptr, size_t bytes, CUmemoryPool pool, CUstream stream) {
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  if (!ValidPool(pool)) return CUDA_ERROR_INVALID_VALUE;
  CUcontext ctx = nullptr;
  CUresult result = StreamContext(stream, &ctx);
  if (result != CUDA_SUCCESS) return result;
  return PoolAllocate(pool, bytes, ptr);
}

CUresult FreeOnStream(CUdeviceptr ptr, CUstream stream) {
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  CUcontext ctx = nullptr;
  CUresult result = StreamContext(stream, &ctx);
  if (result != CUDA_SUCCESS) return result;
  return FreeAllocation(ptr);
}

bool ValidPoolProps(const CUmemPoolProps* props) {
  return props != nullptr && props->allocType == CU_MEM_ALLOCATION_TYPE_PINNED &&
         props->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
         Runtime::Get().ValidDevice(props->location.id);
}

CUresult GetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute, void* value) {
  auto put = [value](uint64_t bytes) {
    std::memcpy(value, &bytes, sizeof(bytes));
    return CUDA_SUCCESS;
  };
  switch (attribute) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      std::memcpy(value, &pool->reuse[attribute - 1], sizeof(int));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      return put(pool->release_threshold);
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      return put(pool->reserved);
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      return put(pool->reserved_high);
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      return put(pool->used);
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      return put(pool->used_high);
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// A high-water mark can only be reset (set to 0), which makes it the current value.
CUresult SetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute, const void* value) {
  uint64_t bytes = 0;
  switch (attribute) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      std::memcpy(&pool->reuse[attribute - 1], value, sizeof(int));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      std::memcpy(&pool->release_threshold, value, sizeof(uint64_t));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      std::memcpy(&bytes, value, sizeof(bytes));
      if (bytes != 0) return CUDA_ERROR_INVALID_VALUE;
      if (attribute == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) pool->reserved_high = pool->reserved;
      if (attribute == CU_MEMPOOL_ATTR_USED_MEM_HIGH) pool->used_high = pool->used;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult DevicePool(CUmemoryPool* pool, CUdevice device) {
  Runtime& runtime = Runtime::Get();
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!runtime.ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(runtime.mu());
  *pool = DefaultPool(device);
  return CUDA_SUCCESS;
}

}  // namespace

void PoolFree(CUmemoryPool pool, uint64_t ptr, const Allocation& allocation) {
  UnmapDeviceMemory(ptr, allocation.mapped);
  pool->used -= allocation.mapped;
  if (pool->destroyed) {
    GiveBack(pool, pool->reserved - pool->used);
    if (pool->used == 0) {
      Pools().erase(pool);
      delete pool;
    }
    return;
  }
  if (pool->reserved <= pool->release_threshold) return;
  uint64_t excess = pool->reserved - pool->release_threshold;
  uint64_t cached = pool->reserved - pool->used;
  GiveBack(pool, std::min(cached, excess) / kGranularity * kGranularity);
}

}  // namespace paladin::emucuda

using paladin::emucuda::Runtime;

EMU_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  EMU_REQUIRE_DRIVER(paladin::emucuda::kPoolsIntroduced);
  EMU_API_ENTRY();
  return paladin::emucuda::AllocateOnStream(dptr, bytes, stream);
}

EMU_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  return cuMemAllocAsync(dptr, bytes, stream);
}

EMU_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  EMU_REQUIRE_DRIVER(paladin::emucuda::kPoolsIntroduced);
  EMU_API_ENTRY();
  return paladin::emucuda::FreeOnStream(dptr, stream);
}

EMU_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  return cuMemFreeAsync(dptr, stream);
}

EMU_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                            CUstream stream) {
  EMU_REQUIRE_DRIVER(paladin::emucuda::kPoolsIntroduced);
  EMU_API_ENTRY();
  return paladin::emucuda::AllocateFromPool(dptr, bytes, pool, stream);
}

EMU_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                                 CUstream stream) {
  return cuMemAllocFromPoolAsync(dptr, bytes, pool, stream);
}

EMU_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  EMU_REQUIRE_DRIVER(paladin::emucuda::kPoolsIntroduced);
  EMU_API_ENTRY();
  if (pool == nullptr || !paladin::emucuda::ValidPoolProps(props)) return CUDA_ERROR_INVALID_VALUE;
  auto* created = new CUmemPoolHandle_st;
  created->ordinal = props->location.id;
  created->max_size = props->maxSize;
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  paladin::emucuda::Pools().insert(created);
  *pool = created;
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  EMU_REQUIRE_DRIVER(paladin::emucuda::kPoolsIntroduced);
  EMU_API_ENTRY();
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  if (!paladin::emucuda::ValidPool(pool) || pool->is_default) return CUDA_ERROR_INVALID_VALUE;
  paladin::emucuda::GiveBack(pool, pool->reserved - pool->used);
  if (pool->used != 0) {
    pool->destroyed = true;  // released when its last allocation is freed
    return CUDA_SUCCESS;
  }
  paladin::emucuda::Pools().erase(pool);
  delete pool;
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t min_bytes_to_keep) {
  EMU_REQUIRE_DRIVER(paladin::emucuda::kPoolsIntroduced);
  EMU_API_ENTRY();
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  if (!paladin::emucuda::ValidPool(pool)) return CUDA_ERROR_INVALID_VALUE;
  uint64_t keep =
      min_bytes_to_keep / paladin::emucuda::kGranularity * paladin::emucuda::kGranularity;
  uint64_t target = std::max(keep, pool->used);
  if (pool->reserved > target) paladin::emucuda::GiveBack(pool, pool->reserved - target);
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute,
                                          void* value) {
  EMU_REQUIRE_DRIVER(paladin::emucuda::kPoolsIntroduced);
  EMU_API_ENTRY();
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  if (!paladin::emucuda::ValidPool(pool) || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return paladin::emucuda::SetAttribute(pool, attribute, value);
}

EMU_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute,
                                          void* value) {
  EMU_REQUIRE_DRIVER(paladin::emucuda::kPoolsIntroduced);
  EMU_API_ENTRY();
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  if (!paladin::emucuda::ValidPool(pool) || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return paladin::emucuda::GetAttribute(pool, attribute, value);
}

EMU_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice device) {
  EMU_REQUIRE_DRIVER(paladin::emucuda::kPoolsIntroduced);
  EMU_API_ENTRY();
  return paladin::emucuda::DevicePool(pool, device);
}

EMU_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice device) {
  EMU_REQUIRE_DRIVER(paladin::emucuda::kPoolsIntroduced);
  EMU_API_ENTRY();
  return paladin::emucuda::DevicePool(pool, device);
}
