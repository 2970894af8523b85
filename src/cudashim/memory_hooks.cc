// Allocation hooks: every path that takes GPU memory is admitted against the workload's quota
// before the driver is called, and given back when the driver frees it. Sizes are counted
// rounded up to the region's granularity (docs/quota.md, "What is counted").
#include "shim.h"

namespace paladin::cudashim {
namespace {

// Admits `bytes` on the current device, calls `allocate`, and records the charge under the key
// `allocate` produced. Pass-through when the workload has no quota.
template <typename Allocate, typename Key>
CUresult Counted(uint64_t bytes, Kind kind, const char* function, Allocate allocate, Key key) {
  Shim& shim = Shim::Get();
  if (!shim.enforcing()) return allocate();
  int device = -1;
  CUcontext context = nullptr;
  if (shim.CurrentDevice(&device, &context) != CUDA_SUCCESS) return allocate();  // its own error
  const uint64_t counted = shim.region()->Rounded(bytes);
  CUresult r = shim.Admit(device, counted, function);
  if (r != CUDA_SUCCESS) return r;
  r = allocate();
  if (r != CUDA_SUCCESS) {
    shim.Unadmit(device, counted);
    return r;
  }
  shim.Track(key(), {device, counted, kind, context, nullptr});
  shim.Kept(device);
  return r;
}

// Frees through `release` and gives back what was charged for `key`.
template <typename Release>
CUresult Uncounted(uint64_t key, Release release) {
  Shim& shim = Shim::Get();
  CUresult r = release();
  if (r != CUDA_SUCCESS || !shim.enforcing()) return r;
  Charge charge;
  if (shim.Untrack(key, &charge)) shim.Uncharge(charge.device, charge.bytes, false);
  return r;
}

template <typename Real>
CUresult AllocAsync(Real real, const char* name, CUdeviceptr* dptr, size_t bytes, CUstream stream,
                    CUmemoryPool pool) {
  Shim& shim = Shim::Get();
  if (!shim.enforcing()) return real(dptr, bytes, stream);
  int device = -1;
  CUcontext context = nullptr;
  if (shim.CurrentDevice(&device, &context) != CUDA_SUCCESS) return real(dptr, bytes, stream);
  if (pool == nullptr) {
    CUdevice ordinal = 0;
    if (shim.next().cuDeviceGetMemPool == nullptr || shim.next().cuCtxGetDevice(&ordinal) != 0 ||
        shim.next().cuDeviceGetMemPool(&pool, ordinal) != CUDA_SUCCESS) {
      pool = nullptr;
    }
  }
  const uint64_t counted = shim.region()->Rounded(bytes);
  // Memory the pool already holds (and is charged for) is reused first.
  const uint64_t shortfall = shim.PoolShortfall(pool, device, counted);
  if (shortfall > 0) {
    CUresult r = shim.Admit(device, shortfall, name);
    if (r != CUDA_SUCCESS) return r;
  }
  CUresult r = real(dptr, bytes, stream);
  if (r != CUDA_SUCCESS) {
    if (shortfall > 0) shim.Unadmit(device, shortfall);
    return r;
  }
  shim.Track(*dptr, {device, counted, Kind::kAsync, context, pool});
  shim.PoolAllocated(pool, counted, shortfall);
  shim.Kept(device);
  return r;
}

CUresult FreeAsync(FnCuMemFreeAsync real, CUdeviceptr dptr, CUstream stream) {
  Shim& shim = Shim::Get();
  CUresult r = real(dptr, stream);
  if (r != CUDA_SUCCESS || !shim.enforcing()) return r;
  Charge charge;
  if (!shim.Untrack(dptr, &charge)) return r;
  if (charge.kind == Kind::kAsync) {
    shim.PoolFreed(charge.pool, charge.bytes);
  } else {
    shim.Uncharge(charge.device, charge.bytes, false);  // cuMemAlloc memory freed stream-ordered
  }
  return r;
}

uint64_t ArrayBytes(size_t width, size_t height, size_t depth, CUarray_format format,
                    unsigned int channels) {
  uint64_t element = 4;
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      element = 1;
      break;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      element = 2;
      break;
    default:
      element = 4;  // 32-bit formats; other formats are counted as 4 bytes a channel
  }
  return static_cast<uint64_t>(width) * (height == 0 ? 1 : height) * (depth == 0 ? 1 : depth) *
         (channels == 0 ? 1 : channels) * element;
}

}  // namespace
}  // namespace paladin::cudashim

using paladin::cudashim::AllocAsync;
using paladin::cudashim::ArrayBytes;
using paladin::cudashim::Counted;
using paladin::cudashim::FreeAsync;
using paladin::cudashim::Kind;
using paladin::cudashim::Shim;
using paladin::cudashim::Uncounted;

PALADIN_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  Shim& shim = Shim::Get();
  auto real = shim.next().cuMemGetInfo;
  if (real == nullptr) return shim.Missing("cuMemGetInfo_v2");
  size_t real_free = 0;
  size_t real_total = 0;
  CUresult r = real(&real_free, &real_total);
  if (r != CUDA_SUCCESS || !shim.enforcing()) {
    if (r == CUDA_SUCCESS) {
      if (free_bytes != nullptr) *free_bytes = real_free;
      if (total_bytes != nullptr) *total_bytes = real_total;
    }
    return r;
  }
  int device = -1;
  const uint64_t quota = shim.region()->quota();
  uint64_t used = 0;
  if (shim.CurrentDevice(&device, nullptr) == CUDA_SUCCESS) used = shim.region()->used(device);
  // Never negative, even when a lowered quota leaves the workload above it.
  uint64_t free_in_quota = used < quota ? quota - used : 0;
  if (free_in_quota > real_free) free_in_quota = real_free;
  if (free_bytes != nullptr) *free_bytes = free_in_quota;
  if (total_bytes != nullptr) *total_bytes = quota;
  return CUDA_SUCCESS;
}

PALADIN_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  auto real = Shim::Get().next().cuMemAlloc;
  if (real == nullptr) return Shim::Get().Missing("cuMemAlloc_v2");
  return Counted(
      bytes, Kind::kMemory, "cuMemAlloc", [&] { return real(dptr, bytes); }, [&] { return *dptr; });
}

PALADIN_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  auto real = Shim::Get().next().cuMemAllocManaged;
  if (real == nullptr) return Shim::Get().Missing("cuMemAllocManaged");
  return Counted(
      bytes, Kind::kMemory, "cuMemAllocManaged", [&] { return real(dptr, bytes, flags); },
      [&] { return *dptr; });
}

PALADIN_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width,
                                           size_t height, unsigned int element_size) {
  Shim& shim = Shim::Get();
  auto real = shim.next().cuMemAllocPitch;
  if (real == nullptr) return shim.Missing("cuMemAllocPitch_v2");
  // The pitch is the driver's choice: admit the rows padded to 512 bytes, then charge the rest
  // if the driver padded more.
  const uint64_t padded = (static_cast<uint64_t>(width) + 511) / 512 * 512 * height;
  CUresult r = Counted(
      padded, Kind::kMemory, "cuMemAllocPitch",
      [&] { return real(dptr, pitch, width, height, element_size); }, [&] { return *dptr; });
  if (r == CUDA_SUCCESS && shim.enforcing()) {
    const uint64_t actual = shim.region()->Rounded(static_cast<uint64_t>(*pitch) * height);
    paladin::cudashim::Charge charge;
    if (shim.Untrack(*dptr, &charge)) {
      if (actual > charge.bytes) shim.ForceCharge(charge.device, actual - charge.bytes, false);
      if (actual > charge.bytes) charge.bytes = actual;
      shim.Track(*dptr, charge);
    }
  }
  return r;
}

PALADIN_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  auto real = Shim::Get().next().cuMemFree;
  if (real == nullptr) return Shim::Get().Missing("cuMemFree_v2");
  return Uncounted(dptr, [&] { return real(dptr); });
}

PALADIN_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  auto real = Shim::Get().next().cuMemAllocAsync;
  if (real == nullptr) return Shim::Get().Missing("cuMemAllocAsync");
  return AllocAsync(real, "cuMemAllocAsync", dptr, bytes, stream, nullptr);
}

PALADIN_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  auto real = Shim::Get().next().cuMemAllocAsyncPtsz;
  if (real == nullptr) return Shim::Get().Missing("cuMemAllocAsync_ptsz");
  return AllocAsync(real, "cuMemAllocAsync", dptr, bytes, stream, nullptr);
}

PALADIN_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                                CUstream stream) {
  auto real = Shim::Get().next().cuMemAllocFromPoolAsync;
  if (real == nullptr) return Shim::Get().Missing("cuMemAllocFromPoolAsync");
  auto bound = [real, pool](CUdeviceptr* p, size_t n, CUstream s) { return real(p, n, pool, s); };
  return AllocAsync(bound, "cuMemAllocFromPoolAsync", dptr, bytes, stream, pool);
}

PALADIN_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes,
                                                     CUmemoryPool pool, CUstream stream) {
  auto real = Shim::Get().next().cuMemAllocFromPoolAsyncPtsz;
  if (real == nullptr) return Shim::Get().Missing("cuMemAllocFromPoolAsync_ptsz");
  auto bound = [real, pool](CUdeviceptr* p, size_t n, CUstream s) { return real(p, n, pool, s); };
  return AllocAsync(bound, "cuMemAllocFromPoolAsync", dptr, bytes, stream, pool);
}

PALADIN_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  auto real = Shim::Get().next().cuMemFreeAsync;
  if (real == nullptr) return Shim::Get().Missing("cuMemFreeAsync");
  return FreeAsync(real, dptr, stream);
}

PALADIN_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  auto real = Shim::Get().next().cuMemFreeAsyncPtsz;
  if (real == nullptr) return Shim::Get().Missing("cuMemFreeAsync_ptsz");
  return FreeAsync(real, dptr, stream);
}

PALADIN_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  Shim& shim = Shim::Get();
  auto real = shim.next().cuMemPoolTrimTo;
  if (real == nullptr) return shim.Missing("cuMemPoolTrimTo");
  CUresult r = real(pool, keep);
  if (r == CUDA_SUCCESS && shim.enforcing()) shim.SyncPool(pool);
  return r;
}

PALADIN_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  Shim& shim = Shim::Get();
  auto real = shim.next().cuMemPoolDestroy;
  if (real == nullptr) return shim.Missing("cuMemPoolDestroy");
  CUresult r = real(pool);
  if (r == CUDA_SUCCESS && shim.enforcing()) shim.PoolForget(pool);
  return r;
}

PALADIN_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                    const CUmemAllocationProp* prop, unsigned long long flags) {
  Shim& shim = Shim::Get();
  auto real = shim.next().cuMemCreate;
  if (real == nullptr) return shim.Missing("cuMemCreate");
  // Only memory placed on a GPU counts; host-located VMM memory is the host's.
  if (!shim.enforcing() || prop == nullptr || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return real(handle, size, prop, flags);
  }
  const int device = shim.SlotForOrdinal(prop->location.id);
  if (device < 0) return real(handle, size, prop, flags);
  const uint64_t counted = shim.region()->Rounded(size);
  CUresult r = shim.Admit(device, counted, "cuMemCreate");
  if (r != CUDA_SUCCESS) return r;
  r = real(handle, size, prop, flags);
  if (r != CUDA_SUCCESS) {
    shim.Unadmit(device, counted);
    return r;
  }
  shim.Track(*handle, {device, counted, Kind::kVmm, nullptr, nullptr});
  shim.Kept(device);
  return r;
}

PALADIN_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  Shim& shim = Shim::Get();
  auto real = shim.next().cuMemRelease;
  if (real == nullptr) return shim.Missing("cuMemRelease");
  CUresult r = real(handle);
  paladin::cudashim::Charge charge;
  if (r == CUDA_SUCCESS && shim.enforcing() && shim.ReleasedHandle(handle, &charge)) {
    shim.Uncharge(charge.device, charge.bytes, false);
  }
  return r;
}

PALADIN_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                 CUmemGenericAllocationHandle handle, unsigned long long flags) {
  Shim& shim = Shim::Get();
  auto real = shim.next().cuMemMap;
  if (real == nullptr) return shim.Missing("cuMemMap");
  CUresult r = real(ptr, size, offset, handle, flags);
  if (r == CUDA_SUCCESS && shim.enforcing()) shim.Mapped(ptr, handle);
  return r;
}

PALADIN_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  Shim& shim = Shim::Get();
  auto real = shim.next().cuMemUnmap;
  if (real == nullptr) return shim.Missing("cuMemUnmap");
  CUresult r = real(ptr, size);
  paladin::cudashim::Charge charge;
  if (r == CUDA_SUCCESS && shim.enforcing() && shim.Unmapped(ptr, &charge)) {
    shim.Uncharge(charge.device, charge.bytes, false);
  }
  return r;
}

PALADIN_EXPORT CUresult cuArrayCreate_v2(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc) {
  auto real = Shim::Get().next().cuArrayCreate;
  if (real == nullptr) return Shim::Get().Missing("cuArrayCreate_v2");
  if (desc == nullptr) return real(array, desc);
  const uint64_t bytes = ArrayBytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels);
  return Counted(
      bytes, Kind::kArray, "cuArrayCreate", [&] { return real(array, desc); },
      [&] { return reinterpret_cast<uint64_t>(*array); });
}

PALADIN_EXPORT CUresult cuArray3DCreate_v2(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  auto real = Shim::Get().next().cuArray3DCreate;
  if (real == nullptr) return Shim::Get().Missing("cuArray3DCreate_v2");
  if (desc == nullptr) return real(array, desc);
  const uint64_t bytes =
      ArrayBytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels);
  return Counted(
      bytes, Kind::kArray, "cuArray3DCreate", [&] { return real(array, desc); },
      [&] { return reinterpret_cast<uint64_t>(*array); });
}

PALADIN_EXPORT CUresult cuArrayDestroy(CUarray array) {
  auto real = Shim::Get().next().cuArrayDestroy;
  if (real == nullptr) return Shim::Get().Missing("cuArrayDestroy");
  return Uncounted(reinterpret_cast<uint64_t>(array), [&] { return real(array); });
}
