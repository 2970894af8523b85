// Driver entry points for virtual memory management. A physical allocation (cuMemCreate) is a
// memfd counted on its device; cuMemAddressReserve reserves inaccessible address space; cuMemMap
// maps the memfd there (still inaccessible) and cuMemSetAccess opens it.
#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <mutex>

#include "emucuda/driver.h"
#include "emucuda/entry_points.h"
#include "emucuda/runtime.h"

namespace paladin::emucuda {
namespace {

constexpr int kVmmIntroduced = 10020;

struct PhysicalMemory {
  int fd = -1;
  uint64_t size = 0;
  int ordinal = 0;
  int mappings = 0;
  bool released = false;  // by cuMemRelease; the bytes go when the last mapping does
};

struct Mapping {
  uint64_t size = 0;
  CUmemGenericAllocationHandle handle = 0;
  int prot = PROT_NONE;
};

std::map<CUmemGenericAllocationHandle, PhysicalMemory>& Handles() {
  static auto* handles = new std::map<CUmemGenericAllocationHandle, PhysicalMemory>;
  return *handles;
}

std::map<uint64_t, Mapping>& Mappings() {
  static auto* mappings = new std::map<uint64_t, Mapping>;
  return *mappings;
}

std::map<uint64_t, uint64_t>& Reservations() {
  static auto* reservations = new std::map<uint64_t, uint64_t>;
  return *reservations;
}

bool Granular(uint64_t bytes) { return bytes % kGranularity == 0; }

bool DeviceLocation(const CUmemLocation& location) {
  return location.type == CU_MEM_LOCATION_TYPE_DEVICE && Runtime::Get().ValidDevice(location.id);
}

void FinishRelease(CUmemGenericAllocationHandle handle) {
  PhysicalMemory& memory = Handles()[handle];
  close(memory.fd);
  Runtime::Get().Uncharge(memory.ordinal, memory.size);
  Handles().erase(handle);
}

// The mapping that contains `ptr`, or end().
std::map<uint64_t, Mapping>::iterator MappingAt(uint64_t ptr) {
  std::map<uint64_t, Mapping>& mappings = Mappings();
  auto after = mappings.upper_bound(ptr);
  if (after == mappings.begin()) return mappings.end();
  auto it = std::prev(after);
  return ptr < it->first + it->second.size ? it : mappings.end();
}

// True when [ptr, ptr + size) lies inside one reservation.
bool InsideReservation(uint64_t ptr, uint64_t size) {
  std::map<uint64_t, uint64_t>& reservations = Reservations();
  auto after = reservations.upper_bound(ptr);
  if (after == reservations.begin()) return false;
  auto it = std::prev(after);
  return ptr + size <= it->first + it->second;
}

bool OverlapsMapping(uint64_t ptr, uint64_t size) {
  auto next = Mappings().lower_bound(ptr);
  if (next != Mappings().end() && next->first < ptr + size) return true;
  return MappingAt(ptr) != Mappings().end();
}

// True when contiguous mappings cover [ptr, ptr + size) exactly from a mapping's start.
bool CoveredByMappings(uint64_t ptr, uint64_t size, bool from_start) {
  uint64_t cursor = ptr;
  while (cursor < ptr + size) {
    auto it = MappingAt(cursor);
    if (it == Mappings().end()) return false;
    if (cursor == ptr && from_start && it->first != ptr) return false;
    cursor = it->first + it->second.size;
  }
  return !from_start || cursor == ptr + size;
}

CUresult ReserveAddress(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr hint) {
  if (ptr == nullptr || size == 0 || !Granular(size)) return CUDA_ERROR_INVALID_VALUE;
  if (alignment == 0) alignment = kGranularity;
  if ((alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  size_t length = size + alignment;
  void* base = mmap(HostPointer(hint), length, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t start = reinterpret_cast<uint64_t>(base);
  uint64_t aligned = (start + alignment - 1) / alignment * alignment;
  if (aligned > start) munmap(base, aligned - start);
  uint64_t tail = start + length - (aligned + size);
  if (tail > 0) munmap(HostPointer(aligned + size), tail);
  Reservations()[aligned] = size;
  *ptr = aligned;
  return CUDA_SUCCESS;
}

CUresult MapPhysical(CUdeviceptr ptr, size_t size, size_t offset,
                     CUmemGenericAllocationHandle handle) {
  auto found = Handles().find(handle);
  if (found == Handles().end() || found->second.released) return CUDA_ERROR_INVALID_HANDLE;
  PhysicalMemory& memory = found->second;
  if (size == 0 || !Granular(size) || !Granular(offset) || !Granular(ptr) ||
      offset + size > memory.size || !InsideReservation(ptr, size) || OverlapsMapping(ptr, size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  void* mapped = mmap(HostPointer(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, memory.fd,
                      static_cast<off_t>(offset));
  if (mapped == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  Mappings()[ptr] = Mapping{size, handle, PROT_NONE};
  ++memory.mappings;
  return CUDA_SUCCESS;
}

CUresult UnmapRange(CUdeviceptr ptr, size_t size) {
  if (size == 0 || !CoveredByMappings(ptr, size, true)) return CUDA_ERROR_INVALID_VALUE;
  void* reserved = mmap(HostPointer(ptr), size, PROT_NONE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (reserved == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  for (auto it = Mappings().lower_bound(ptr); it != Mappings().end() && it->first < ptr + size;) {
    CUmemGenericAllocationHandle handle = it->second.handle;
    it = Mappings().erase(it);
    PhysicalMemory& memory = Handles()[handle];
    if (--memory.mappings == 0 && memory.released) FinishRelease(handle);
  }
  return CUDA_SUCCESS;
}

CUresult SetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (desc == nullptr || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  int prot = PROT_NONE;
  for (size_t i = 0; i < count; ++i) {
    if (!DeviceLocation(desc[i].location)) return CUDA_ERROR_INVALID_DEVICE;
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      prot = PROT_READ | PROT_WRITE;
    } else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ) {
      prot |= PROT_READ;
    } else if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (!CoveredByMappings(ptr, size, false)) return CUDA_ERROR_INVALID_VALUE;
  if (mprotect(HostPointer(ptr), size, prot) != 0) return CUDA_ERROR_INVALID_VALUE;
  for (auto it = MappingAt(ptr); it != Mappings().end() && it->first < ptr + size; ++it) {
    it->second.prot = prot;
  }
  return CUDA_SUCCESS;
}

CUresult CreatePhysical(CUmemGenericAllocationHandle* handle, size_t size,
                        const CUmemAllocationProp* prop) {
  if (handle == nullptr || prop == nullptr || size == 0 || !Granular(size) ||
      prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || !DeviceLocation(prop->location)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Runtime& runtime = Runtime::Get();
  CUresult result = runtime.Charge(prop->location.id, size);
  if (result != CUDA_SUCCESS) return result;
  int fd = memfd_create("paladin-emu-vmm", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    runtime.Uncharge(prop->location.id, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  static CUmemGenericAllocationHandle next_handle = 0x10000;
  *handle = next_handle++;
  Handles()[*handle] = PhysicalMemory{fd, size, prop->location.id, 0, false};
  return CUDA_SUCCESS;
}

}  // namespace

bool VmmRangeAccessible(uint64_t ptr, uint64_t bytes) {
  uint64_t cursor = ptr;
  while (cursor < ptr + bytes) {
    auto it = MappingAt(cursor);
    if (it == Mappings().end() || it->second.prot != (PROT_READ | PROT_WRITE)) return false;
    cursor = it->first + it->second.size;
  }
  return bytes > 0;
}

}  // namespace paladin::emucuda

using paladin::emucuda::kVmmIntroduced;
using paladin::emucuda::Runtime;

EMU_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                const CUmemAllocationProp* prop, unsigned long long flags) {
  EMU_REQUIRE_DRIVER(kVmmIntroduced);
  EMU_API_ENTRY();
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  return paladin::emucuda::CreatePhysical(handle, size, prop);
}

EMU_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  EMU_REQUIRE_DRIVER(kVmmIntroduced);
  EMU_API_ENTRY();
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  auto found = paladin::emucuda::Handles().find(handle);
  if (found == paladin::emucuda::Handles().end() || found->second.released) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  found->second.released = true;
  if (found->second.mappings == 0) paladin::emucuda::FinishRelease(handle);
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                        CUdeviceptr addr, unsigned long long /*flags*/) {
  EMU_REQUIRE_DRIVER(kVmmIntroduced);
  EMU_API_ENTRY();
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  return paladin::emucuda::ReserveAddress(ptr, size, alignment, addr);
}

EMU_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  EMU_REQUIRE_DRIVER(kVmmIntroduced);
  EMU_API_ENTRY();
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  auto found = paladin::emucuda::Reservations().find(ptr);
  if (found == paladin::emucuda::Reservations().end() || found->second != size ||
      paladin::emucuda::OverlapsMapping(ptr, size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  munmap(paladin::emucuda::HostPointer(ptr), size);
  paladin::emucuda::Reservations().erase(found);
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                             CUmemGenericAllocationHandle handle, unsigned long long flags) {
  EMU_REQUIRE_DRIVER(kVmmIntroduced);
  EMU_API_ENTRY();
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  return paladin::emucuda::MapPhysical(ptr, size, offset, handle);
}

EMU_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  EMU_REQUIRE_DRIVER(kVmmIntroduced);
  EMU_API_ENTRY();
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  return paladin::emucuda::UnmapRange(ptr, size);
}

EMU_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                   size_t count) {
  EMU_REQUIRE_DRIVER(kVmmIntroduced);
  EMU_API_ENTRY();
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  return paladin::emucuda::SetAccess(ptr, size, desc, count);
}

EMU_EXPORT CUresult cuMemGetAllocationGranularity(size_t* granularity,
                                                  const CUmemAllocationProp* prop,
                                                  CUmemAllocationGranularity_flags option) {
  EMU_REQUIRE_DRIVER(kVmmIntroduced);
  EMU_API_ENTRY();
  if (granularity == nullptr || prop == nullptr ||
      !paladin::emucuda::DeviceLocation(prop->location)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
      option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *granularity = paladin::emucuda::kGranularity;
  return CUDA_SUCCESS;
}
