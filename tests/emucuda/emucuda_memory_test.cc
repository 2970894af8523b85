// The emulated driver's memory: allocation accounting and OOM, contexts and their overhead,
// capacity shared between processes, a dead process's memory, pools, VMM and arrays.
#include <signal.h>

#include <cstring>
#include <vector>

#include "emucuda_testing.h"

namespace paladin::emucuda::test {
namespace {

using EmuMemoryTest = EmuTest;

TEST_F(EmuMemoryTest, AllocationsAreCountedIn2MiBUnitsUpToTheDeviceSize) {
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "1x1GiB"}, {"PALADIN_EMU_CTX_OVERHEAD", "0"}}),
                       [] {
                         Emu emu = Emu::Load();
                         CUdeviceptr ptr = 0;
                         CHILD_CHECK_EQ(emu.cuMemAlloc_v2(&ptr, kMiB), CUDA_ERROR_NOT_INITIALIZED);
                         CHILD_OK(emu.cuInit(0));
                         CHILD_CHECK_EQ(emu.cuMemAlloc_v2(&ptr, kMiB), CUDA_ERROR_INVALID_CONTEXT);
                         emu.InitWithContext();
                         size_t free_bytes = 0;
                         size_t total_bytes = 0;
                         CHILD_OK(emu.cuMemGetInfo_v2(&free_bytes, &total_bytes));
                         CHILD_CHECK_EQ(total_bytes, kGiB);
                         CHILD_CHECK_EQ(free_bytes, kGiB);
                         CUdeviceptr one_byte = 0;
                         CUdeviceptr three_mib = 0;
                         CHILD_OK(emu.cuMemAlloc_v2(&one_byte, 1));
                         CHILD_CHECK_EQ(emu.FreeBytes(), kGiB - 2 * kMiB);
                         CHILD_OK(emu.cuMemAlloc_v2(&three_mib, 3 * kMiB));
                         CHILD_CHECK_EQ(emu.FreeBytes(), kGiB - 6 * kMiB);
                         CUdeviceptr rest = 0;
                         CHILD_OK(emu.cuMemAlloc_v2(&rest, kGiB - 6 * kMiB));
                         CHILD_CHECK_EQ(emu.FreeBytes(), 0u);
                         CHILD_CHECK_EQ(emu.cuMemAlloc_v2(&ptr, 1), CUDA_ERROR_OUT_OF_MEMORY);
                         CHILD_CHECK_EQ(emu.cuMemAlloc_v2(&ptr, 0), CUDA_ERROR_INVALID_VALUE);
                         CHILD_CHECK_EQ(emu.cuMemFree_v2(rest + 4096), CUDA_ERROR_INVALID_VALUE);
                         CHILD_OK(emu.cuMemFree_v2(rest));
                         CHILD_CHECK_EQ(emu.cuMemFree_v2(rest), CUDA_ERROR_INVALID_VALUE);
                         CHILD_OK(emu.cuMemFree_v2(one_byte));
                         CHILD_OK(emu.cuMemFree_v2(three_mib));
                         CHILD_CHECK_EQ(emu.FreeBytes(), kGiB);
                       }),
            0);
}

TEST_F(EmuMemoryTest, PitchAndManagedAllocationsAreCounted) {
  EXPECT_EQ(
      RunInChild(Env({{"PALADIN_EMU_GPUS", "1x1GiB"}, {"PALADIN_EMU_CTX_OVERHEAD", "0"}}),
                 [] {
                   Emu emu = Emu::Load();
                   emu.InitWithContext();
                   CUdeviceptr pitched = 0;
                   size_t pitch = 0;
                   CHILD_OK(emu.cuMemAllocPitch_v2(&pitched, &pitch, 1000, 3000, 4));
                   CHILD_CHECK_EQ(pitch, 1024u);
                   CHILD_CHECK_EQ(emu.FreeBytes(), kGiB - 4 * kMiB);  // 3,072,000 bytes -> 4 MiB
                   CHILD_CHECK_EQ(emu.cuMemAllocPitch_v2(&pitched, &pitch, 1000, 10, 3),
                                  CUDA_ERROR_INVALID_VALUE);
                   CUdeviceptr managed = 0;
                   CHILD_OK(emu.cuMemAllocManaged(&managed, 10 * kMiB, CU_MEM_ATTACH_GLOBAL));
                   CHILD_CHECK_EQ(emu.FreeBytes(), kGiB - 14 * kMiB);
                   reinterpret_cast<char*>(managed)[0] = 7;  // managed memory is host-accessible
                   CHILD_OK(emu.cuMemFree_v2(managed));
                   CHILD_OK(emu.cuMemFree_v2(pitched));
                   CHILD_CHECK_EQ(emu.FreeBytes(), kGiB);
                 }),
      0);
}

TEST_F(EmuMemoryTest, CopiesAndMemsetMoveBytesAndCheckPointers) {
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "1x1GiB"}}),
                       [] {
                         Emu emu = Emu::Load();
                         emu.InitWithContext();
                         std::vector<unsigned char> in(3 * kMiB);
                         for (size_t i = 0; i < in.size(); ++i)
                           in[i] = static_cast<unsigned char>(i * 7);
                         CUdeviceptr a = 0;
                         CUdeviceptr b = 0;
                         CHILD_OK(emu.cuMemAlloc_v2(&a, in.size()));
                         CHILD_OK(emu.cuMemAlloc_v2(&b, in.size()));
                         CHILD_OK(emu.cuMemcpyHtoD_v2(a, in.data(), in.size()));
                         CHILD_OK(emu.cuMemcpyDtoD_v2(b, a, in.size()));
                         std::vector<unsigned char> out(in.size());
                         CHILD_OK(emu.cuMemcpyDtoH_v2(out.data(), b, out.size()));
                         CHILD_CHECK(out == in);
                         CHILD_OK(emu.cuMemsetD8_v2(b + 10, 0xab, 5));
                         CHILD_OK(emu.cuMemcpyDtoH_v2(out.data(), b, 16));
                         CHILD_CHECK_EQ(static_cast<int>(out[12]), 0xab);
                         CHILD_CHECK_EQ(static_cast<int>(out[15]), static_cast<int>(in[15]));
                         unsigned char host[8] = {};
                         CHILD_CHECK_EQ(
                             emu.cuMemcpyDtoH_v2(host, reinterpret_cast<CUdeviceptr>(host), 8),
                             CUDA_ERROR_INVALID_VALUE);
                         CHILD_CHECK_EQ(emu.cuMemcpyHtoD_v2(a + 4 * kMiB, host, 8),
                                        CUDA_ERROR_INVALID_VALUE);
                       }),
            0);
}

TEST_F(EmuMemoryTest, ALargeAllocationCostsNoHostMemoryUntilTouched) {
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "1x80GiB"}}),
                       [] {
                         Emu emu = Emu::Load();
                         emu.InitWithContext();
                         CUdeviceptr big = 0;
                         CHILD_OK(emu.cuMemAlloc_v2(&big, 40 * kGiB));
                         auto* bytes = reinterpret_cast<unsigned char*>(big);
                         bytes[0] = 1;
                         bytes[40 * kGiB - 1] = 2;
                         CHILD_CHECK_EQ(bytes[40 * kGiB - 1] + bytes[0], 3);
                         CHILD_OK(emu.cuMemFree_v2(big));
                       }),
            0);
}

TEST_F(EmuMemoryTest, ContextsCostTheirOverheadUntilDestroyed) {
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "1x1GiB"}}),
                       [] {
                         Emu emu = Emu::Load();
                         emu.InitWithContext();  // the primary context: 256 MiB by default
                         CHILD_CHECK_EQ(emu.FreeBytes(), 768 * kMiB);
                         CUcontext again = nullptr;
                         CHILD_OK(emu.cuDevicePrimaryCtxRetain(&again, 0));  // the same context
                         CHILD_CHECK_EQ(emu.FreeBytes(), 768 * kMiB);
                         CUcontext created = nullptr;
                         CHILD_OK(emu.cuCtxCreate_v2(&created, 0, 0));
                         CHILD_CHECK(created != again);
                         CHILD_CHECK_EQ(emu.FreeBytes(), 512 * kMiB);
                         CUdeviceptr ptr = 0;
                         CHILD_OK(emu.cuMemAlloc_v2(&ptr, 100 * kMiB));  // in the created context
                         CHILD_CHECK_EQ(emu.FreeBytes(), 412 * kMiB);
                         CHILD_OK(emu.cuCtxDestroy_v2(created));  // frees its memory too
                         CHILD_OK(emu.cuCtxSetCurrent(again));
                         CHILD_CHECK_EQ(emu.FreeBytes(), 768 * kMiB);
                         CHILD_CHECK_EQ(emu.cuCtxDestroy_v2(created), CUDA_ERROR_INVALID_CONTEXT);
                         CUdevice device = -1;
                         CHILD_OK(emu.cuCtxGetDevice(&device));
                         CHILD_CHECK_EQ(device, 0);
                         CHILD_OK(emu.cuDevicePrimaryCtxRelease_v2(0));
                         CHILD_OK(emu.cuDevicePrimaryCtxRelease_v2(0));
                         CHILD_CHECK_EQ(emu.cuDevicePrimaryCtxRelease_v2(0),
                                        CUDA_ERROR_INVALID_CONTEXT);
                         CHILD_CHECK_EQ(emu.cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
                       }),
            0);
  EXPECT_EQ(
      RunInChild(Env({{"PALADIN_EMU_GPUS", "1x1GiB"}, {"PALADIN_EMU_CTX_OVERHEAD", "600MiB"}}),
                 [] {
                   Emu emu = Emu::Load();
                   emu.InitWithContext();
                   CUcontext created = nullptr;
                   CHILD_CHECK_EQ(emu.cuCtxCreate_v2(&created, 0, 0), CUDA_ERROR_OUT_OF_MEMORY);
                 }),
      0);
}

TEST_F(EmuMemoryTest, ProcessesShareOneDevicesCapacity) {
  auto env = Env({{"PALADIN_EMU_GPUS", "1x1GiB"}, {"PALADIN_EMU_CTX_OVERHEAD", "0"}});
  EXPECT_EQ(RunInChild(env,
                       [] {
                         Signal ready;
                         Signal done;
                         pid_t other = ForkChild();
                         if (other == 0) {
                           Emu emu = Emu::Load();
                           emu.InitWithContext();
                           CUdeviceptr ptr = 0;
                           CHILD_OK(emu.cuMemAlloc_v2(&ptr, 600 * kMiB));
                           ready.Send();
                           done.Wait();
                           CHILD_OK(emu.cuMemFree_v2(ptr));
                           _exit(0);
                         }
                         ready.Wait();
                         Emu emu = Emu::Load();
                         emu.InitWithContext();
                         CHILD_CHECK_EQ(emu.FreeBytes(), 424 * kMiB);
                         CUdeviceptr ptr = 0;
                         CHILD_CHECK_EQ(emu.cuMemAlloc_v2(&ptr, 600 * kMiB),
                                        CUDA_ERROR_OUT_OF_MEMORY);
                         CHILD_OK(emu.cuMemAlloc_v2(&ptr, 400 * kMiB));
                         CHILD_CHECK_EQ(emu.FreeBytes(), 24 * kMiB);
                         done.Send();
                         CHILD_CHECK_EQ(WaitExit(other), 0);
                         CHILD_CHECK_EQ(emu.FreeBytes(), 624 * kMiB);
                       }),
            0);
}

// The driver frees a process's memory when it ends, however it ends.
TEST_F(EmuMemoryTest, ADeadProcessesMemoryIsReturned) {
  auto env = Env({{"PALADIN_EMU_GPUS", "1x1GiB"}, {"PALADIN_EMU_CTX_OVERHEAD", "0"}});
  EXPECT_EQ(
      RunInChild(env,
                 [] {
                   Signal ready;
                   pid_t killed = ForkChild();
                   if (killed == 0) {
                     Emu emu = Emu::Load();
                     emu.InitWithContext();
                     CUdeviceptr ptr = 0;
                     CHILD_OK(emu.cuMemAlloc_v2(&ptr, 700 * kMiB));
                     ready.Send();
                     pause();
                     _exit(0);
                   }
                   ready.Wait();
                   Emu emu = Emu::Load();
                   CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
                   CHILD_CHECK_EQ(emu.NvmlUsed(0), 700 * kMiB);
                   kill(killed, SIGKILL);
                   CHILD_CHECK_EQ(WaitExit(killed), 128 + SIGKILL);
                   CHILD_CHECK_EQ(emu.NvmlUsed(0), 0u);
                   // A process that ends without its exit handlers, not yet reaped (a zombie).
                   pid_t zombie = ForkChild();
                   if (zombie == 0) {
                     Emu child = Emu::Load();
                     child.InitWithContext();
                     CUdeviceptr ptr = 0;
                     CHILD_OK(child.cuMemAlloc_v2(&ptr, 700 * kMiB));
                     ready.Send();
                     _exit(0);
                   }
                   ready.Wait();
                   emu.InitWithContext();  // after the fork: a child may not use its parent's CUDA
                   // An allocation that lacks room sweeps the dead first.
                   CUdeviceptr ptr = 0;
                   for (int i = 0; i < 200 && emu.cuMemAlloc_v2(&ptr, 700 * kMiB) != CUDA_SUCCESS;
                        ++i) {
                     usleep(5000);  // until the zombie has exited
                   }
                   CHILD_CHECK_EQ(emu.FreeBytes(), 324 * kMiB);
                   CHILD_CHECK_EQ(WaitExit(zombie), 0);
                 }),
      0);
}

TEST_F(EmuMemoryTest, ExitingNormallyGivesBackEverything) {
  auto env = Env({{"PALADIN_EMU_GPUS", "1x1GiB"}});
  EXPECT_EQ(RunInChild(env,
                       [] {
                         Emu emu = Emu::Load();
                         emu.InitWithContext();
                         CUdeviceptr ptr = 0;
                         CHILD_OK(emu.cuMemAlloc_v2(&ptr, 100 * kMiB));
                         std::exit(0);
                       }),
            0);
  EXPECT_EQ(RunInChild(env,
                       [] {
                         Emu emu = Emu::Load();
                         CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
                         CHILD_CHECK_EQ(emu.NvmlUsed(0), 0u);
                       }),
            0);
}

uint64_t PoolAttribute(const Emu& emu, CUmemoryPool pool, CUmemPool_attribute attribute) {
  cuuint64_t value = 0;
  CHILD_OK(emu.cuMemPoolGetAttribute(pool, attribute, &value));
  return value;
}

TEST_F(EmuMemoryTest, PoolsCacheFreedBytesUpToTheirReleaseThreshold) {
  EXPECT_EQ(
      RunInChild(
          Env({{"PALADIN_EMU_GPUS", "1x1GiB"}, {"PALADIN_EMU_CTX_OVERHEAD", "0"}}),
          [] {
            Emu emu = Emu::Load();
            emu.InitWithContext();
            CUmemoryPool pool = nullptr;
            CUmemoryPool current = nullptr;
            CHILD_OK(emu.cuDeviceGetDefaultMemPool(&pool, 0));
            CHILD_OK(emu.cuDeviceGetMemPool(&current, 0));
            CHILD_CHECK(pool == current);
            CUdeviceptr a = 0;
            CHILD_OK(emu.cuMemAllocAsync(&a, 10 * kMiB, nullptr));
            CHILD_CHECK_EQ(PoolAttribute(emu, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
                           10 * kMiB);
            CHILD_CHECK_EQ(PoolAttribute(emu, pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 10 * kMiB);
            CHILD_OK(emu.cuMemFreeAsync(a, nullptr));  // threshold 0: all goes back
            CHILD_CHECK_EQ(PoolAttribute(emu, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
            CHILD_CHECK_EQ(emu.FreeBytes(), kGiB);
            cuuint64_t threshold = 64 * kMiB;
            CHILD_OK(
                emu.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
            CHILD_OK(emu.cuMemAllocAsync_ptsz(&a, 20 * kMiB, nullptr));
            CHILD_OK(emu.cuMemFreeAsync(a, nullptr));
            CHILD_CHECK_EQ(PoolAttribute(emu, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
                           20 * kMiB);
            CHILD_CHECK_EQ(PoolAttribute(emu, pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0u);
            CHILD_CHECK_EQ(emu.FreeBytes(), kGiB - 20 * kMiB);      // cached bytes stay counted
            CHILD_OK(emu.cuMemAllocAsync(&a, 10 * kMiB, nullptr));  // from the cache
            CHILD_CHECK_EQ(emu.FreeBytes(), kGiB - 20 * kMiB);
            CHILD_OK(emu.cuMemPoolTrimTo(pool, 0));  // keeps what is in use
            CHILD_CHECK_EQ(PoolAttribute(emu, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
                           10 * kMiB);
            CHILD_CHECK_EQ(PoolAttribute(emu, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 20 * kMiB);
            CHILD_CHECK_EQ(PoolAttribute(emu, pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 20 * kMiB);
            cuuint64_t zero = 0;
            CHILD_OK(emu.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
            CHILD_CHECK_EQ(PoolAttribute(emu, pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 10 * kMiB);
            CHILD_CHECK_EQ(emu.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &zero),
                           CUDA_ERROR_INVALID_VALUE);
            CHILD_OK(emu.cuMemFree_v2(a));  // cuMemFree takes stream-ordered memory too
            CHILD_OK(emu.cuMemPoolTrimTo(pool, 3 * kMiB));
            CHILD_CHECK_EQ(PoolAttribute(emu, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
                           2 * kMiB);
            CHILD_OK(emu.cuMemPoolTrimTo(pool, 0));
            CHILD_CHECK_EQ(emu.FreeBytes(), kGiB);
          }),
      0);
}

TEST_F(EmuMemoryTest, CreatedPoolsAllocateAndDieWithTheirLastAllocation) {
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "1x1GiB"}, {"PALADIN_EMU_CTX_OVERHEAD", "0"}}),
                       [] {
                         Emu emu = Emu::Load();
                         emu.InitWithContext();
                         CUmemPoolProps props{};
                         props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
                         props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
                         props.maxSize = 16 * kMiB;
                         CUmemoryPool pool = nullptr;
                         CHILD_OK(emu.cuMemPoolCreate(&pool, &props));
                         CUdeviceptr a = 0;
                         CHILD_OK(emu.cuMemAllocFromPoolAsync(&a, 12 * kMiB, pool, nullptr));
                         CUdeviceptr b = 0;
                         CHILD_CHECK_EQ(emu.cuMemAllocFromPoolAsync(&b, 8 * kMiB, pool, nullptr),
                                        CUDA_ERROR_OUT_OF_MEMORY);  // past the pool's maxSize
                         CHILD_CHECK_EQ(emu.cuMemAllocAsync(&b, 2 * kGiB, nullptr),
                                        CUDA_ERROR_OUT_OF_MEMORY);
                         CHILD_OK(emu.cuMemPoolDestroy(pool));  // deferred: `a` is still out
                         CHILD_CHECK_EQ(emu.cuMemAllocFromPoolAsync(&b, kMiB, pool, nullptr),
                                        CUDA_ERROR_INVALID_VALUE);
                         CHILD_CHECK_EQ(emu.FreeBytes(), kGiB - 12 * kMiB);
                         CHILD_OK(emu.cuMemFreeAsync(a, nullptr));
                         CHILD_CHECK_EQ(emu.FreeBytes(), kGiB);
                         props.location.id = 3;
                         CHILD_CHECK_EQ(emu.cuMemPoolCreate(&pool, &props),
                                        CUDA_ERROR_INVALID_VALUE);
                       }),
            0);
}

TEST_F(EmuMemoryTest, VirtualMemoryMapsPhysicalMemoryAfterAccessIsGranted) {
  EXPECT_EQ(
      RunInChild(
          Env({{"PALADIN_EMU_GPUS", "1x1GiB"}, {"PALADIN_EMU_CTX_OVERHEAD", "0"}}),
          [] {
            Emu emu = Emu::Load();
            emu.InitWithContext();
            CUmemAllocationProp prop{};
            prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
            prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
            size_t granularity = 0;
            CHILD_OK(emu.cuMemGetAllocationGranularity(&granularity, &prop,
                                                       CU_MEM_ALLOC_GRANULARITY_MINIMUM));
            CHILD_CHECK_EQ(granularity, 2 * kMiB);
            CUmemGenericAllocationHandle handle = 0;
            CHILD_CHECK_EQ(emu.cuMemCreate(&handle, 3 * kMiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
            CHILD_OK(emu.cuMemCreate(&handle, 4 * kMiB, &prop, 0));
            CHILD_CHECK_EQ(emu.FreeBytes(), kGiB - 4 * kMiB);
            CUdeviceptr base = 0;
            CHILD_OK(emu.cuMemAddressReserve(&base, 8 * kMiB, 0, 0, 0));
            CHILD_CHECK_EQ(base % (2 * kMiB), 0u);
            CHILD_OK(emu.cuMemMap(base, 4 * kMiB, 0, handle, 0));
            CHILD_OK(emu.cuMemMap(base + 4 * kMiB, 4 * kMiB, 0, handle, 0));  // aliased
            CHILD_CHECK_EQ(emu.cuMemMap(base, 2 * kMiB, 0, handle, 0), CUDA_ERROR_INVALID_VALUE);
            const char message[] = "written through the first mapping";
            CHILD_CHECK_EQ(emu.cuMemcpyHtoD_v2(base, message, sizeof(message)),
                           CUDA_ERROR_INVALID_VALUE);  // not accessible yet
            CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0},
                                   CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
            CHILD_OK(emu.cuMemSetAccess(base, 8 * kMiB, &access, 1));
            CHILD_OK(emu.cuMemcpyHtoD_v2(base, message, sizeof(message)));
            char read_back[sizeof(message)] = {};
            CHILD_OK(emu.cuMemcpyDtoH_v2(read_back, base + 4 * kMiB, sizeof(message)));
            CHILD_CHECK(std::memcmp(read_back, message, sizeof(message)) == 0);
            CHILD_OK(emu.cuMemRelease(handle));  // still mapped: still counted
            CHILD_CHECK_EQ(emu.FreeBytes(), kGiB - 4 * kMiB);
            CHILD_CHECK_EQ(emu.cuMemAddressFree(base, 8 * kMiB), CUDA_ERROR_INVALID_VALUE);
            CHILD_OK(emu.cuMemUnmap(base, 4 * kMiB));
            CHILD_OK(emu.cuMemUnmap(base + 4 * kMiB, 4 * kMiB));
            CHILD_CHECK_EQ(emu.FreeBytes(), kGiB);
            CHILD_OK(emu.cuMemAddressFree(base, 8 * kMiB));
            prop.location.id = 1;
            CHILD_CHECK_EQ(emu.cuMemCreate(&handle, 4 * kMiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
            prop.location.id = 0;
            CHILD_CHECK_EQ(emu.cuMemCreate(&handle, 2 * kGiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
          }),
      0);
}

TEST_F(EmuMemoryTest, ArraysAreCountedByTheirElementSize) {
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "1x1GiB"}, {"PALADIN_EMU_CTX_OVERHEAD", "0"}}),
                       [] {
                         Emu emu = Emu::Load();
                         emu.InitWithContext();
                         CUDA_ARRAY_DESCRIPTOR flat{1024, 1024, CU_AD_FORMAT_FLOAT, 4};  // 16 MiB
                         CUarray first = nullptr;
                         CHILD_OK(emu.cuArrayCreate_v2(&first, &flat));
                         CHILD_CHECK_EQ(emu.FreeBytes(), kGiB - 16 * kMiB);
                         CUDA_ARRAY3D_DESCRIPTOR cube{256, 256, 20, CU_AD_FORMAT_HALF,
                                                      2,   0};  // 5 MiB -> 6
                         CUarray second = nullptr;
                         CHILD_OK(emu.cuArray3DCreate_v2(&second, &cube));
                         CHILD_CHECK_EQ(emu.FreeBytes(), kGiB - 22 * kMiB);
                         CUDA_ARRAY3D_DESCRIPTOR line{10, 0, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
                         CUarray third = nullptr;
                         CHILD_OK(emu.cuArray3DCreate_v2(&third, &line));
                         CHILD_CHECK_EQ(emu.FreeBytes(), kGiB - 24 * kMiB);
                         CUDA_ARRAY_DESCRIPTOR bad{16, 16, 0x77, 1};
                         CUarray invalid = nullptr;
                         CHILD_CHECK_EQ(emu.cuArrayCreate_v2(&invalid, &bad),
                                        CUDA_ERROR_INVALID_VALUE);
                         CHILD_OK(emu.cuArrayDestroy(first));
                         CHILD_OK(emu.cuArrayDestroy(second));
                         CHILD_OK(emu.cuArrayDestroy(third));
                         CHILD_CHECK_EQ(emu.cuArrayDestroy(third), CUDA_ERROR_INVALID_HANDLE);
                         CHILD_CHECK_EQ(emu.FreeBytes(), kGiB);
                       }),
            0);
}

}  // namespace
}  // namespace paladin::emucuda::test
