// The emulated driver's devices: the spec, names and UUIDs, attributes, CUDA_VISIBLE_DEVICES, a
// malformed spec, cuGetProcAddress and the emulated driver version.
#include <fcntl.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "emucuda_testing.h"

namespace paladin::emucuda::test {
namespace {

using EmuDeviceTest = EmuTest;

std::string Name(const Emu& emu, CUdevice device) {
  char name[128] = {};
  CHILD_OK(emu.cuDeviceGetName(name, sizeof(name), device));
  return name;
}

TEST_F(EmuDeviceTest, DevicesFollowTheSpecAndSayTheyAreEmulated) {
  EXPECT_EQ(
      RunInChild(
          Env({{"PALADIN_EMU_GPUS", "1x16GiB,1x40GiB"}}),
          [] {
            Emu emu = Emu::Load();
            int count = 0;
            CHILD_CHECK_EQ(emu.cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
            CHILD_OK(emu.cuInit(0));
            CHILD_OK(emu.cuDeviceGetCount(&count));
            CHILD_CHECK_EQ(count, 2);
            CHILD_CHECK_EQ(Name(emu, 0), std::string("Paladin Emulated GPU 16 GiB (emulated)"));
            CHILD_CHECK_EQ(Name(emu, 1), std::string("Paladin Emulated GPU 40 GiB (emulated)"));
            size_t total = 0;
            CHILD_OK(emu.cuDeviceTotalMem_v2(&total, 1));
            CHILD_CHECK_EQ(total, 40 * kGiB);
            CUuuid first{};
            CUuuid second{};
            CHILD_OK(emu.cuDeviceGetUuid_v2(&first, 0));
            CHILD_OK(emu.cuDeviceGetUuid_v2(&second, 1));
            CHILD_CHECK(std::memcmp(first.bytes, "EMU\0", 4) == 0);
            CHILD_CHECK(std::memcmp(second.bytes, "EMU\1", 4) == 0);
            CHILD_CHECK(std::memcmp(first.bytes, second.bytes, 16) != 0);
            CHILD_CHECK_EQ(emu.cuDeviceGetUuid_v2(&first, 2), CUDA_ERROR_INVALID_DEVICE);
            int version = 0;
            CHILD_OK(emu.cuDriverGetVersion(&version));
            CHILD_CHECK_EQ(version, 13000);
          }),
      0);
}

TEST_F(EmuDeviceTest, AttributesDescribeAComputeCapability90Device) {
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "2x1GiB"}}),
                       [] {
                         Emu emu = Emu::Load();
                         CHILD_OK(emu.cuInit(0));
                         auto attribute = [&](CUdevice_attribute which, CUdevice device = 0) {
                           int value = -1;
                           CHILD_OK(emu.cuDeviceGetAttribute(&value, which, device));
                           return value;
                         };
                         CHILD_CHECK_EQ(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), 9);
                         CHILD_CHECK_EQ(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), 0);
                         CHILD_CHECK_EQ(attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 132);
                         CHILD_CHECK_EQ(attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE), 32);
                         CHILD_CHECK_EQ(attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 1024);
                         CHILD_CHECK_EQ(attribute(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING), 1);
                         CHILD_CHECK_EQ(attribute(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY), 1);
                         CHILD_CHECK_EQ(
                             attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED), 1);
                         CHILD_CHECK_EQ(attribute(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED), 1);
                         CHILD_CHECK_EQ(attribute(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1), 1);
                         int value = 0;
                         CHILD_CHECK_EQ(emu.cuDeviceGetAttribute(&value, 12345, 0),
                                        CUDA_ERROR_INVALID_VALUE);
                       }),
            0);
}

// One scenario per malformed spec: no device, one line on stderr naming the variable.
TEST_F(EmuDeviceTest, AMalformedSpecMeansNoDeviceAndOneLineOnStderr) {
  for (const char* spec : {"3xfoo", "", "0x80GiB", "2x", "80GiB", "17x1GiB", "2x1MiB", "2x80XB"}) {
    std::string log = state_path() + ".log";
    EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", spec}}),
                         [&] {
                           int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
                           CHILD_CHECK(fd >= 0 && dup2(fd, STDERR_FILENO) == STDERR_FILENO);
                           Emu emu = Emu::Load();
                           int count = -1;
                           CHILD_CHECK_EQ(emu.cuInit(0), CUDA_ERROR_NO_DEVICE);
                           CHILD_CHECK_EQ(emu.cuInit(0), CUDA_ERROR_NO_DEVICE);
                           CHILD_CHECK_EQ(emu.cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
                           CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_ERROR_UNKNOWN);
                         }),
              0)
        << "spec '" << spec << "'";
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    std::string line = text.str();
    EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << line;
    EXPECT_NE(line.find("paladin-emucuda: PALADIN_EMU_GPUS='" + std::string(spec) + "': "),
              std::string::npos)
        << line;
    EXPECT_NE(line.find("; expected e.g. 2x80GiB"), std::string::npos) << line;
    std::remove(log.c_str());
  }
}

TEST_F(EmuDeviceTest, SizesAcceptBinaryAndDecimalUnits) {
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "1x1.5GiB, 1x2048M ,1x3GB,1x1T"}}),
                       [] {
                         Emu emu = Emu::Load();
                         CHILD_OK(emu.cuInit(0));
                         size_t total[4] = {};
                         for (int i = 0; i < 4; ++i)
                           CHILD_OK(emu.cuDeviceTotalMem_v2(&total[i], i));
                         CHILD_CHECK_EQ(total[0], 1536 * kMiB);
                         CHILD_CHECK_EQ(total[1], 2 * kGiB);
                         CHILD_CHECK_EQ(total[2], 3000000000ull);
                         CHILD_CHECK_EQ(total[3], 1024 * kGiB);
                         CHILD_CHECK_EQ(Name(emu, 0),
                                        std::string("Paladin Emulated GPU 1.50 GiB (emulated)"));
                       }),
            0);
}

TEST_F(EmuDeviceTest, CudaVisibleDevicesSelectsAndOrdersDevices) {
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "3x1GiB"}, {"CUDA_VISIBLE_DEVICES", "2,0"}}),
                       [] {
                         Emu emu = Emu::Load();
                         CHILD_OK(emu.cuInit(0));
                         int count = 0;
                         CHILD_OK(emu.cuDeviceGetCount(&count));
                         CHILD_CHECK_EQ(count, 2);
                         CUuuid uuid{};
                         CHILD_OK(emu.cuDeviceGetUuid_v2(&uuid, 0));
                         CHILD_CHECK_EQ(static_cast<int>(uuid.bytes[3]), 2);
                         CHILD_OK(emu.cuDeviceGetUuid_v2(&uuid, 1));
                         CHILD_CHECK_EQ(static_cast<int>(uuid.bytes[3]), 0);
                         unsigned int nvml_count = 0;  // NVML ignores CUDA_VISIBLE_DEVICES
                         CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
                         CHILD_CHECK_EQ(emu.nvmlDeviceGetCount_v2(&nvml_count), NVML_SUCCESS);
                         CHILD_CHECK_EQ(nvml_count, 3u);
                       }),
            0);
}

TEST_F(EmuDeviceTest, CudaVisibleDevicesAcceptsUuidsAndStopsAtAnUnknownEntry) {
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "3x1GiB"}}),
                       [] {
                         Emu::Load().cuInit(0);  // creates the state file
                       }),
            0);
  // "GPU-454d5501" is a prefix of device 1's UUID ("EMU" then the index 1).
  EXPECT_EQ(RunInChild(
                Env({{"PALADIN_EMU_GPUS", "3x1GiB"}, {"CUDA_VISIBLE_DEVICES", "GPU-454d5501,7,0"}}),
                [] {
                  Emu emu = Emu::Load();
                  CHILD_OK(emu.cuInit(0));
                  int count = 0;
                  CHILD_OK(emu.cuDeviceGetCount(&count));
                  CHILD_CHECK_EQ(count, 1);
                }),
            0);
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "3x1GiB"}, {"CUDA_VISIBLE_DEVICES", ""}}),
                       [] { CHILD_CHECK_EQ(Emu::Load().cuInit(0), CUDA_ERROR_NO_DEVICE); }),
            0);
}

TEST_F(EmuDeviceTest, GetProcAddressMapsBaseNamesToTheRightVariants) {
  EXPECT_EQ(
      RunInChild(
          Env(),
          [] {
            Emu emu = Emu::Load();
            // Works before cuInit.
            auto lookup = [&](const char* symbol, int version, cuuint64_t flags) {
              void* fn = reinterpret_cast<void*>(1);
              CUdriverProcAddressQueryResult status = -1;
              CUresult result = emu.cuGetProcAddress_v2(symbol, &fn, version, flags, &status);
              CHILD_CHECK_EQ(result, CUDA_SUCCESS);
              CHILD_CHECK_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
              return fn;
            };
            CHILD_CHECK(lookup("cuMemAlloc", 13000, 0) == emu.Symbol("cuMemAlloc_v2"));
            CHILD_CHECK(lookup("cuMemGetInfo", 12000, 0) == emu.Symbol("cuMemGetInfo_v2"));
            CHILD_CHECK(lookup("cuCtxCreate", 12050, 0) == emu.Symbol("cuCtxCreate_v4"));
            CHILD_CHECK(lookup("cuCtxCreate", 12040, 0) == emu.Symbol("cuCtxCreate_v2"));
            CHILD_CHECK(lookup("cuDeviceGetUuid", 11040, 0) == emu.Symbol("cuDeviceGetUuid_v2"));
            CHILD_CHECK(lookup("cuDeviceGetUuid", 11030, 0) == emu.Symbol("cuDeviceGetUuid"));
            CHILD_CHECK(
                lookup("cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ==
                emu.Symbol("cuMemAllocAsync_ptsz"));
            CHILD_CHECK(lookup("cuMemAllocAsync", 12000, 0) == emu.Symbol("cuMemAllocAsync"));
            // No per-thread variant: the per-thread flag gets the plain one.
            CHILD_CHECK(
                lookup("cuMemcpyHtoD", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ==
                emu.Symbol("cuMemcpyHtoD_v2"));
            CHILD_CHECK(lookup("cuGetProcAddress", 12000, 0) == emu.Symbol("cuGetProcAddress_v2"));
            CHILD_CHECK(lookup("cuGetProcAddress", 11080, 0) == emu.Symbol("cuGetProcAddress"));
            CHILD_CHECK(lookup("cuMemAlloc_v2", 12000, 0) == emu.Symbol("cuMemAlloc_v2"));
            CHILD_CHECK(lookup("cuCtxCreate_v3", 12000, 0) == emu.Symbol("cuCtxCreate_v3"));
            CHILD_CHECK(lookup("cuCheckpointProcessLock", 12080, 0) ==
                        emu.Symbol("cuCheckpointProcessLock"));
            void* fn = nullptr;
            CHILD_OK(emu.cuGetProcAddress("cuMemFree", &fn, 12000, 0));
            CHILD_CHECK(fn == emu.Symbol("cuMemFree_v2"));
          }),
      0);
}

TEST_F(EmuDeviceTest, GetProcAddressReportsUnknownSymbolsAndVersionsTooLow) {
  EXPECT_EQ(RunInChild(Env(),
                       [] {
                         Emu emu = Emu::Load();
                         auto status_of = [&](const char* symbol, int version) {
                           void* fn = reinterpret_cast<void*>(1);
                           CUdriverProcAddressQueryResult status = -1;
                           CHILD_CHECK_EQ(emu.cuGetProcAddress_v2(symbol, &fn, version, 0, &status),
                                          CUDA_ERROR_NOT_FOUND);
                           CHILD_CHECK(fn == nullptr);
                           return status;
                         };
                         CHILD_CHECK_EQ(status_of("cuNoSuchFunction", 13000),
                                        CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
                         CHILD_CHECK_EQ(status_of("cuMemAllocAsync", 11000),
                                        CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
                         CHILD_CHECK_EQ(status_of("cuCheckpointProcessLock", 12000),
                                        CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
                         void* fn = nullptr;
                         CHILD_CHECK_EQ(emu.cuGetProcAddress(nullptr, &fn, 13000, 0),
                                        CUDA_ERROR_INVALID_VALUE);
                         CHILD_CHECK_EQ(emu.cuGetProcAddress("cuInit", nullptr, 13000, 0),
                                        CUDA_ERROR_INVALID_VALUE);
                       }),
            0);
}

// An older emulated driver lacks what came later, directly and through cuGetProcAddress.
TEST_F(EmuDeviceTest, AnOlderDriverVersionHidesLaterFunctions) {
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_DRIVER_VERSION", "11000"}}),
                       [] {
                         Emu emu = Emu::Load();
                         emu.InitWithContext();
                         int version = 0;
                         CHILD_OK(emu.cuDriverGetVersion(&version));
                         CHILD_CHECK_EQ(version, 11000);
                         CUdeviceptr ptr = 0;
                         CHILD_CHECK_EQ(emu.cuMemAllocAsync(&ptr, kMiB, nullptr),
                                        CUDA_ERROR_NOT_SUPPORTED);
                         CHILD_CHECK_EQ(emu.cuMemFreeAsync(ptr, nullptr), CUDA_ERROR_NOT_SUPPORTED);
                         CUmemoryPool pool = nullptr;
                         CHILD_CHECK_EQ(emu.cuDeviceGetDefaultMemPool(&pool, 0),
                                        CUDA_ERROR_NOT_SUPPORTED);
                         int pools = -1;
                         CHILD_OK(emu.cuDeviceGetAttribute(
                             &pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0));
                         CHILD_CHECK_EQ(pools, 0);
                         void* fn = nullptr;
                         CHILD_CHECK_EQ(emu.cuGetProcAddress("cuMemAlloc", &fn, 11000, 0),
                                        CUDA_ERROR_NOT_SUPPORTED);  // itself from 11.3
                         CHILD_OK(emu.cuMemAlloc_v2(&ptr, kMiB));
                       }),
            0);
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_DRIVER_VERSION", "12000"}}),
                       [] {
                         Emu emu = Emu::Load();
                         void* fn = reinterpret_cast<void*>(1);
                         CUdriverProcAddressQueryResult status = -1;
                         CHILD_CHECK_EQ(emu.cuGetProcAddress_v2("cuCheckpointProcessLock", &fn,
                                                                13000, 0, &status),
                                        CUDA_ERROR_NOT_FOUND);
                         CHILD_CHECK_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
                         CHILD_OK(emu.cuGetProcAddress_v2("cuCtxCreate", &fn, 13000, 0, &status));
                         CHILD_CHECK(fn == emu.Symbol("cuCtxCreate_v2"));  // v4 came with 12.5
                         CHILD_CHECK_EQ(emu.cuCheckpointProcessGetState(1, nullptr),
                                        CUDA_ERROR_NOT_SUPPORTED);
                       }),
            0);
}

TEST_F(EmuDeviceTest, ErrorNamesAndModulesAndLaunches) {
  EXPECT_EQ(RunInChild(Env(),
                       [] {
                         Emu emu = Emu::Load();
                         const char* name = nullptr;
                         CHILD_OK(emu.cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &name));
                         CHILD_CHECK_EQ(std::string(name), std::string("CUDA_ERROR_OUT_OF_MEMORY"));
                         CHILD_CHECK_EQ(emu.cuGetErrorName(4242, &name), CUDA_ERROR_INVALID_VALUE);
                         emu.InitWithContext();
                         CUmodule module = nullptr;
                         CUfunction function = nullptr;
                         char image[] = "emulated";
                         CHILD_OK(emu.cuModuleLoadData(&module, image));
                         CHILD_OK(emu.cuModuleGetFunction(&function, module, "any_kernel"));
                         CUstream stream = nullptr;
                         CHILD_OK(emu.cuStreamCreate(&stream, 0));
                         CHILD_OK(emu.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, stream,
                                                     nullptr, nullptr));
                         CHILD_CHECK_EQ(emu.cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, stream,
                                                           nullptr, nullptr),
                                        CUDA_ERROR_INVALID_HANDLE);
                         CHILD_OK(emu.cuStreamDestroy_v2(stream));
                         CHILD_CHECK_EQ(emu.cuStreamDestroy_v2(stream), CUDA_ERROR_INVALID_HANDLE);
                       }),
            0);
}

}  // namespace
}  // namespace paladin::emucuda::test
