// Helpers for the emulated driver's tests. The library reads its environment once per process,
// so every scenario runs in a forked child that sets its environment, loads the library with
// dlopen (as a workload loads libcuda.so.1) and exits 0 when every check held.
#ifndef PALADIN_TESTS_EMUCUDA_EMUCUDA_TESTING_H_
#define PALADIN_TESTS_EMUCUDA_EMUCUDA_TESTING_H_

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "paladin/gpu/cuda_api.h"
#include "paladin/gpu/nvml_api.h"

namespace paladin::emucuda::test {

constexpr unsigned long long kMiB = 1ull << 20;
constexpr unsigned long long kGiB = 1ull << 30;

// A failed check in a child prints where and exits 1; the parent test then fails.
#define CHILD_CHECK(condition)                                                           \
  do {                                                                                   \
    if (!(condition)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition); \
      std::fflush(stderr);                                                               \
      _exit(1);                                                                          \
    }                                                                                    \
  } while (0)

#define CHILD_CHECK_EQ(actual, expected)                                                        \
  do {                                                                                          \
    auto child_actual = (actual);                                                               \
    auto child_expected = (expected);                                                           \
    if (!(child_actual == child_expected)) {                                                    \
      std::ostringstream child_message;                                                         \
      child_message << #actual << " is " << child_actual << ", expected " << #expected << " = " \
                    << child_expected;                                                          \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, child_message.str().c_str());     \
      std::fflush(stderr);                                                                      \
      _exit(1);                                                                                 \
    }                                                                                           \
  } while (0)

#define CHILD_OK(call) CHILD_CHECK_EQ((call), CUDA_SUCCESS)

// The library's functions, resolved by name with dlsym.
struct Emu {
  void* handle = nullptr;
#define EMU_TEST_FUNCTIONS(X)                                                        \
  X(FnCuInit, cuInit)                                                                \
  X(FnCuDriverGetVersion, cuDriverGetVersion)                                        \
  X(FnCuGetErrorName, cuGetErrorName)                                                \
  X(FnCuDeviceGet, cuDeviceGet)                                                      \
  X(FnCuDeviceGetCount, cuDeviceGetCount)                                            \
  X(FnCuDeviceGetName, cuDeviceGetName)                                              \
  X(FnCuDeviceGetUuid, cuDeviceGetUuid_v2)                                           \
  X(FnCuDeviceTotalMem, cuDeviceTotalMem_v2)                                         \
  X(FnCuDeviceGetAttribute, cuDeviceGetAttribute)                                    \
  X(FnCuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain)                            \
  X(FnCuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2)                       \
  X(FnCuCtxCreate, cuCtxCreate_v2)                                                   \
  X(FnCuCtxDestroy, cuCtxDestroy_v2)                                                 \
  X(FnCuCtxSetCurrent, cuCtxSetCurrent)                                              \
  X(FnCuCtxGetCurrent, cuCtxGetCurrent)                                              \
  X(FnCuCtxGetDevice, cuCtxGetDevice)                                                \
  X(FnCuCtxSynchronize, cuCtxSynchronize)                                            \
  X(FnCuMemGetInfo, cuMemGetInfo_v2)                                                 \
  X(FnCuMemAlloc, cuMemAlloc_v2)                                                     \
  X(FnCuMemAllocPitch, cuMemAllocPitch_v2)                                           \
  X(FnCuMemAllocManaged, cuMemAllocManaged)                                          \
  X(FnCuMemFree, cuMemFree_v2)                                                       \
  X(FnCuMemAllocAsync, cuMemAllocAsync)                                              \
  X(FnCuMemAllocAsync, cuMemAllocAsync_ptsz)                                         \
  X(FnCuMemFreeAsync, cuMemFreeAsync)                                                \
  X(FnCuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync)                              \
  X(FnCuMemPoolCreate, cuMemPoolCreate)                                              \
  X(FnCuMemPoolDestroy, cuMemPoolDestroy)                                            \
  X(FnCuMemPoolTrimTo, cuMemPoolTrimTo)                                              \
  X(FnCuMemPoolSetAttribute, cuMemPoolSetAttribute)                                  \
  X(FnCuMemPoolGetAttribute, cuMemPoolGetAttribute)                                  \
  X(FnCuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool)                          \
  X(FnCuDeviceGetMemPool, cuDeviceGetMemPool)                                        \
  X(FnCuMemCreate, cuMemCreate)                                                      \
  X(FnCuMemRelease, cuMemRelease)                                                    \
  X(FnCuMemAddressReserve, cuMemAddressReserve)                                      \
  X(FnCuMemAddressFree, cuMemAddressFree)                                            \
  X(FnCuMemMap, cuMemMap)                                                            \
  X(FnCuMemUnmap, cuMemUnmap)                                                        \
  X(FnCuMemSetAccess, cuMemSetAccess)                                                \
  X(FnCuMemGetAllocationGranularity, cuMemGetAllocationGranularity)                  \
  X(FnCuArrayCreate, cuArrayCreate_v2)                                               \
  X(FnCuArray3DCreate, cuArray3DCreate_v2)                                           \
  X(FnCuArrayDestroy, cuArrayDestroy)                                                \
  X(FnCuMemcpyHtoD, cuMemcpyHtoD_v2)                                                 \
  X(FnCuMemcpyDtoH, cuMemcpyDtoH_v2)                                                 \
  X(FnCuMemcpyDtoD, cuMemcpyDtoD_v2)                                                 \
  X(FnCuMemsetD8, cuMemsetD8_v2)                                                     \
  X(FnCuStreamCreate, cuStreamCreate)                                                \
  X(FnCuStreamDestroy, cuStreamDestroy_v2)                                           \
  X(FnCuModuleLoadData, cuModuleLoadData)                                            \
  X(FnCuModuleGetFunction, cuModuleGetFunction)                                      \
  X(FnCuLaunchKernel, cuLaunchKernel)                                                \
  X(FnCuGetProcAddress, cuGetProcAddress)                                            \
  X(FnCuGetProcAddressV2, cuGetProcAddress_v2)                                       \
  X(FnCuCheckpointProcessLock, cuCheckpointProcessLock)                              \
  X(FnCuCheckpointProcessCheckpoint, cuCheckpointProcessCheckpoint)                  \
  X(FnCuCheckpointProcessRestore, cuCheckpointProcessRestore)                        \
  X(FnCuCheckpointProcessUnlock, cuCheckpointProcessUnlock)                          \
  X(FnCuCheckpointProcessGetState, cuCheckpointProcessGetState)                      \
  X(FnCuCheckpointProcessGetRestoreThreadId, cuCheckpointProcessGetRestoreThreadId)  \
  X(FnNvmlInit, nvmlInit_v2)                                                         \
  X(FnNvmlShutdown, nvmlShutdown)                                                    \
  X(FnNvmlErrorString, nvmlErrorString)                                              \
  X(FnNvmlSystemGetDriverVersion, nvmlSystemGetDriverVersion)                        \
  X(FnNvmlDeviceGetCount, nvmlDeviceGetCount_v2)                                     \
  X(FnNvmlDeviceGetHandleByIndex, nvmlDeviceGetHandleByIndex_v2)                     \
  X(FnNvmlDeviceGetHandleByUUID, nvmlDeviceGetHandleByUUID)                          \
  X(FnNvmlDeviceGetName, nvmlDeviceGetName)                                          \
  X(FnNvmlDeviceGetUUID, nvmlDeviceGetUUID)                                          \
  X(FnNvmlDeviceGetMemoryInfo, nvmlDeviceGetMemoryInfo)                              \
  X(FnNvmlDeviceGetMemoryInfoV2, nvmlDeviceGetMemoryInfo_v2)                         \
  X(FnNvmlDeviceGetComputeRunningProcesses, nvmlDeviceGetComputeRunningProcesses_v3) \
  X(FnNvmlDeviceGetComputeRunningProcesses, nvmlDeviceGetComputeRunningProcesses_v2) \
  X(FnNvmlDeviceGetComputeRunningProcessesV1, nvmlDeviceGetComputeRunningProcesses)  \
  X(FnNvmlDeviceGetProcessUtilization, nvmlDeviceGetProcessUtilization)              \
  X(FnNvmlDeviceGetUtilizationRates, nvmlDeviceGetUtilizationRates)                  \
  X(FnNvmlEventSetCreate, nvmlEventSetCreate)                                        \
  X(FnNvmlEventSetFree, nvmlEventSetFree)                                            \
  X(FnNvmlDeviceGetSupportedEventTypes, nvmlDeviceGetSupportedEventTypes)            \
  X(FnNvmlDeviceRegisterEvents, nvmlDeviceRegisterEvents)                            \
  X(FnNvmlEventSetWait, nvmlEventSetWait_v2)                                         \
  X(FnPaladinEmuPostEvent, paladinEmuNvmlPostEvent)
#define EMU_TEST_MEMBER(type, name) type name = nullptr;
  EMU_TEST_FUNCTIONS(EMU_TEST_MEMBER)
#undef EMU_TEST_MEMBER

  // Loads the library (in the calling child) and resolves every function; exits 1 on failure.
  static Emu Load() {
    Emu emu;
    emu.handle = dlopen(PALADIN_EMUCUDA_PATH, RTLD_NOW | RTLD_LOCAL);
    CHILD_CHECK(emu.handle != nullptr);
#define EMU_TEST_RESOLVE(type, name)                           \
  emu.name = reinterpret_cast<type>(dlsym(emu.handle, #name)); \
  CHILD_CHECK(emu.name != nullptr);
    EMU_TEST_FUNCTIONS(EMU_TEST_RESOLVE)
#undef EMU_TEST_RESOLVE
    return emu;
  }

  void* Symbol(const char* name) const { return dlsym(handle, name); }

  // cuInit, then retains the primary context of `device` and makes it current.
  void InitWithContext(CUdevice device = 0) const {
    CUcontext ctx = nullptr;
    CHILD_OK(cuInit(0));
    CHILD_OK(cuDevicePrimaryCtxRetain(&ctx, device));
    CHILD_OK(cuCtxSetCurrent(ctx));
  }

  size_t FreeBytes() const {
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    CHILD_OK(cuMemGetInfo_v2(&free_bytes, &total_bytes));
    return free_bytes;
  }

  // Bytes NVML says are in use on device `index` (NVML must be initialised).
  unsigned long long NvmlUsed(unsigned int index) const {
    nvmlDevice_t device = nullptr;
    nvmlMemory_t memory{};
    CHILD_CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(index, &device), NVML_SUCCESS);
    CHILD_CHECK_EQ(nvmlDeviceGetMemoryInfo(device, &memory), NVML_SUCCESS);
    return memory.used;
  }
};

// A one-way pipe for telling a forked process "go on".
class Signal {
 public:
  Signal() { CHILD_CHECK(pipe(fds_) == 0); }
  void Send(char code = 'x') const { CHILD_CHECK(write(fds_[1], &code, 1) == 1); }
  // The next code sent; exits the process after `timeout_ms` without one.
  char Wait(int timeout_ms = 20000) const {
    pollfd poll_fd{fds_[0], POLLIN, 0};
    int ready = 0;
    do {
      ready = poll(&poll_fd, 1, timeout_ms);
    } while (ready < 0 && errno == EINTR);
    CHILD_CHECK(ready == 1);
    char code = 0;
    ssize_t got = 0;
    do {
      got = read(fds_[0], &code, 1);
    } while (got < 0 && errno == EINTR);
    CHILD_CHECK(got == 1);
    return code;
  }

 private:
  int fds_[2] = {-1, -1};
};

// fork(), with the child killed when its parent dies (a failed check leaves no process behind).
inline pid_t ForkChild() {
  pid_t parent = getpid();
  pid_t child = fork();
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    pid_t now = getppid();  // 0 for the first process of a new PID namespace
    if (now != parent && now != 0) _exit(1);
  }
  return child;
}

// Runs `scenario` in a forked child with the variables of `env` set (and CUDA_VISIBLE_DEVICES
// unset unless given); returns its exit status (0 when every check held).
inline int RunInChild(const std::map<std::string, std::string>& env,
                      const std::function<void()>& scenario) {
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t child = ForkChild();
  if (child == 0) {
    unsetenv("CUDA_VISIBLE_DEVICES");
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    scenario();
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(0);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits for a forked process and returns its exit status as RunInChild does.
inline int WaitExit(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Gives each test its own device-state file, removed (with its control and usage folders)
// afterwards.
class EmuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    state_path_ = "/dev/shm/paladin-emu-test-" + std::to_string(getpid()) + "-" +
                  info->test_suite_name() + "-" + info->name() + ".state";
    Cleanup();
  }
  void TearDown() override { Cleanup(); }

  // The environment of a scenario: this test's state file plus `more`.
  std::map<std::string, std::string> Env(std::map<std::string, std::string> more = {}) const {
    more["PALADIN_EMU_STATE"] = state_path_;
    return more;
  }
  const std::string& state_path() const { return state_path_; }

 private:
  void Cleanup() const {
    std::error_code ignored;
    std::filesystem::remove(state_path_, ignored);
    std::filesystem::remove_all(state_path_ + ".ctl", ignored);
    std::filesystem::remove_all(state_path_ + ".usage", ignored);
  }

  std::string state_path_;
};

}  // namespace paladin::emucuda::test

#endif  // PALADIN_TESTS_EMUCUDA_EMUCUDA_TESTING_H_
