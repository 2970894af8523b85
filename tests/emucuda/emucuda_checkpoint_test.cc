// The emulated checkpoint API, driven from another process as the node agent drives it: lock,
// checkpoint (the device memory moves into the process and the devices show it gone), restore
// (possibly onto another device), unlock; the process then finds its data intact.
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "emucuda_testing.h"

namespace paladin::emucuda::test {
namespace {

using EmuCheckpointTest = EmuTest;

constexpr size_t kPayload = 100 * kMiB;

unsigned char Pattern(size_t i) { return static_cast<unsigned char>((i * 31) ^ (i >> 12)); }

// Counts API calls made by a background thread of the workload, in memory the agent sees too.
struct SharedCounter {
  std::atomic<uint64_t> calls{0};
  std::atomic<bool> stop{false};
};

SharedCounter* MapSharedCounter() {
  void* memory = mmap(nullptr, sizeof(SharedCounter), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return new (memory) SharedCounter;
}

// The workload: allocates on device 0, writes a pattern, says ready, and after `go` checks its
// data and which device it is on.
void Workload(const Signal& ready, const Signal& go, SharedCounter* counter,
              size_t expected_total) {
  Emu emu = Emu::Load();
  emu.InitWithContext(0);
  CUcontext ctx = nullptr;
  CHILD_OK(emu.cuCtxGetCurrent(&ctx));
  CUdeviceptr data = 0;
  CHILD_OK(emu.cuMemAlloc_v2(&data, kPayload));
  std::vector<unsigned char> pattern(kPayload);
  for (size_t i = 0; i < kPayload; ++i) pattern[i] = Pattern(i);
  CHILD_OK(emu.cuMemcpyHtoD_v2(data, pattern.data(), kPayload));
  std::thread busy([&] {
    emu.cuCtxSetCurrent(ctx);
    while (!counter->stop.load()) {
      if (emu.cuCtxSynchronize() == CUDA_SUCCESS) counter->calls.fetch_add(1);
    }
  });
  ready.Send();
  char verdict = go.Wait(60000);
  counter->stop.store(true);
  busy.join();
  std::vector<unsigned char> back(kPayload);
  CHILD_OK(emu.cuMemcpyDtoH_v2(back.data(), data, kPayload));
  CHILD_CHECK(back == pattern);
  CUdevice device = -1;
  CHILD_OK(emu.cuCtxGetDevice(&device));
  CHILD_CHECK_EQ(device, 0);
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  CHILD_OK(emu.cuMemGetInfo_v2(&free_bytes, &total_bytes));
  CHILD_CHECK_EQ(total_bytes, expected_total);
  if (verdict == 'm') {  // moved to physical device 1: its UUID now answers for ordinal 0
    CUuuid uuid{};
    CHILD_OK(emu.cuDeviceGetUuid_v2(&uuid, 0));
    CHILD_CHECK_EQ(static_cast<int>(uuid.bytes[3]), 1);
  }
  CUdeviceptr more = 0;
  CHILD_OK(emu.cuMemAlloc_v2(&more, kMiB));
  _exit(0);
}

CUprocessState StateOf(const Emu& emu, pid_t pid) {
  CUprocessState state = -1;
  CHILD_OK(emu.cuCheckpointProcessGetState(pid, &state));
  return state;
}

CUuuid DeviceUuid(const Emu& emu, CUdevice device) {
  CUuuid uuid{};
  CHILD_OK(emu.cuDeviceGetUuid_v2(&uuid, device));
  return uuid;
}

TEST_F(EmuCheckpointTest, CheckpointMovesTheMemoryOutAndRestoreOntoAnotherDevice) {
  auto env = Env({{"PALADIN_EMU_GPUS", "1x1GiB,1x2GiB"}, {"PALADIN_EMU_CTX_OVERHEAD", "64MiB"}});
  EXPECT_EQ(RunInChild(
                env,
                [] {
                  Signal ready;
                  Signal go;
                  SharedCounter* counter = MapSharedCounter();
                  pid_t workload = ForkChild();
                  if (workload == 0) Workload(ready, go, counter, 2 * kGiB);
                  ready.Wait();
                  Emu emu = Emu::Load();
                  CHILD_OK(emu.cuInit(0));
                  CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
                  CHILD_CHECK_EQ(emu.NvmlUsed(0), 164 * kMiB);
                  CHILD_CHECK_EQ(StateOf(emu, workload), CU_PROCESS_STATE_RUNNING);
                  int tid = 0;
                  CHILD_OK(emu.cuCheckpointProcessGetRestoreThreadId(workload, &tid));
                  CHILD_CHECK(tid > 0 && tid != workload);
                  CHILD_CHECK_EQ(emu.cuCheckpointProcessUnlock(workload, nullptr),
                                 CUDA_ERROR_ILLEGAL_STATE);
                  CHILD_CHECK_EQ(emu.cuCheckpointProcessCheckpoint(workload, nullptr),
                                 CUDA_ERROR_ILLEGAL_STATE);

                  CUcheckpointLockArgs lock{};
                  lock.timeoutMs = 5000;
                  CHILD_OK(emu.cuCheckpointProcessLock(workload, &lock));
                  CHILD_CHECK_EQ(StateOf(emu, workload), CU_PROCESS_STATE_LOCKED);
                  // A call that returned just before the lock may still be counting itself.
                  usleep(20000);
                  uint64_t calls = counter->calls.load();
                  usleep(50000);
                  CHILD_CHECK_EQ(counter->calls.load(), calls);  // API calls wait while locked
                  CHILD_CHECK_EQ(emu.cuCheckpointProcessRestore(workload, nullptr),
                                 CUDA_ERROR_ILLEGAL_STATE);

                  CHILD_OK(emu.cuCheckpointProcessCheckpoint(workload, nullptr));
                  CHILD_CHECK_EQ(StateOf(emu, workload), CU_PROCESS_STATE_CHECKPOINTED);
                  CHILD_CHECK_EQ(emu.NvmlUsed(0), 0u);
                  CHILD_CHECK_EQ(emu.NvmlUsed(1), 0u);

                  CUcheckpointGpuPair pair{DeviceUuid(emu, 0), DeviceUuid(emu, 1)};
                  CUcheckpointRestoreArgs restore{};
                  restore.gpuPairs = &pair;
                  restore.gpuPairsCount = 1;
                  CHILD_OK(emu.cuCheckpointProcessRestore(workload, &restore));
                  CHILD_CHECK_EQ(StateOf(emu, workload), CU_PROCESS_STATE_LOCKED);
                  CHILD_CHECK_EQ(emu.NvmlUsed(0), 0u);
                  CHILD_CHECK_EQ(emu.NvmlUsed(1), 164 * kMiB);
                  nvmlDevice_t second = nullptr;
                  CHILD_CHECK_EQ(emu.nvmlDeviceGetHandleByIndex_v2(1, &second), NVML_SUCCESS);
                  nvmlProcessInfo_t info{};
                  unsigned int count = 1;
                  CHILD_CHECK_EQ(emu.nvmlDeviceGetComputeRunningProcesses_v3(second, &count, &info),
                                 NVML_SUCCESS);
                  CHILD_CHECK_EQ(count, 1u);
                  CHILD_CHECK_EQ(info.pid, static_cast<unsigned int>(workload));
                  CHILD_CHECK_EQ(info.usedGpuMemory, 164 * kMiB);

                  CHILD_OK(emu.cuCheckpointProcessUnlock(workload, nullptr));
                  CHILD_CHECK_EQ(StateOf(emu, workload), CU_PROCESS_STATE_RUNNING);
                  for (int i = 0; i < 1000 && counter->calls.load() == calls; ++i) usleep(1000);
                  CHILD_CHECK(counter->calls.load() > calls);  // and go on after unlock
                  go.Send('m');
                  CHILD_CHECK_EQ(WaitExit(workload), 0);
                }),
            0);
}

// A restore that cannot fit leaves the process checkpointed and the devices untouched; the
// process's state is found again when its state file is gone (as after a CRIU restore).
TEST_F(EmuCheckpointTest, RestoreIsRefusedWhenTheTargetDeviceLacksRoom) {
  auto env = Env({{"PALADIN_EMU_GPUS", "2x1GiB"}, {"PALADIN_EMU_CTX_OVERHEAD", "64MiB"}});
  std::string control_dir = state_path() + ".ctl";
  EXPECT_EQ(RunInChild(
                env,
                [&control_dir] {
                  Signal ready;
                  Signal go;
                  SharedCounter* counter = MapSharedCounter();
                  pid_t workload = ForkChild();
                  if (workload == 0) Workload(ready, go, counter, kGiB);
                  ready.Wait();
                  Emu emu = Emu::Load();
                  emu.InitWithContext(1);
                  CUdeviceptr hog = 0;
                  CHILD_OK(emu.cuMemAlloc_v2(&hog, 800 * kMiB));  // device 1: 864 MiB of 1 GiB used
                  CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
                  CHILD_OK(emu.cuCheckpointProcessLock(workload, nullptr));
                  CHILD_OK(emu.cuCheckpointProcessCheckpoint(workload, nullptr));

                  CUcheckpointGpuPair pair{DeviceUuid(emu, 0), DeviceUuid(emu, 1)};
                  CUcheckpointRestoreArgs restore{};
                  restore.gpuPairs = &pair;
                  restore.gpuPairsCount = 1;
                  CHILD_CHECK_EQ(emu.cuCheckpointProcessRestore(workload, &restore),
                                 CUDA_ERROR_OUT_OF_MEMORY);
                  CHILD_CHECK_EQ(StateOf(emu, workload), CU_PROCESS_STATE_CHECKPOINTED);
                  CHILD_CHECK_EQ(emu.NvmlUsed(0), 0u);
                  CHILD_CHECK_EQ(emu.NvmlUsed(1), 864 * kMiB);

                  std::memset(pair.newUuid.bytes, 0x5a, 16);  // a device that does not exist
                  CHILD_CHECK_EQ(emu.cuCheckpointProcessRestore(workload, &restore),
                                 CUDA_ERROR_INVALID_DEVICE);
                  std::remove((control_dir + "/" + std::to_string(workload) + ".state").c_str());
                  CHILD_CHECK_EQ(StateOf(emu, workload), CU_PROCESS_STATE_CHECKPOINTED);

                  CHILD_OK(emu.cuCheckpointProcessRestore(workload, nullptr));  // back where it was
                  CHILD_CHECK_EQ(emu.NvmlUsed(0), 164 * kMiB);
                  CHILD_OK(emu.cuCheckpointProcessUnlock(workload, nullptr));
                  go.Send('s');
                  CHILD_CHECK_EQ(WaitExit(workload), 0);
                }),
            0);
}

// The whole text of a small file; empty when it cannot be read.
std::string FileText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The number after "key " on a line of a control state file; -1 when there is none.
long long StateField(const std::string& text, const std::string& key) {
  size_t at = text.find("\n" + key + " ");
  return at == std::string::npos ? -1 : std::atoll(text.c_str() + at + key.size() + 2);
}

// Field 22 (start time) of /proc/PID/stat as this process's /proc shows it.
long long StartTimeOf(pid_t pid) {
  std::string stat = FileText("/proc/" + std::to_string(pid) + "/stat");
  size_t at = stat.rfind(')');
  if (at == std::string::npos) return -1;
  std::istringstream fields(stat.substr(at + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
  }
  return std::atoll(field.c_str());
}

// The pid NVML lists on device 0 (which must hold exactly one process); -1 otherwise.
pid_t ListedPid(const Emu& emu) {
  nvmlDevice_t device = nullptr;
  nvmlProcessInfo_t info{};
  unsigned int count = 1;
  if (emu.nvmlDeviceGetHandleByIndex_v2(0, &device) != NVML_SUCCESS ||
      emu.nvmlDeviceGetComputeRunningProcesses_v3(device, &count, &info) != NVML_SUCCESS ||
      count != 1) {
    return -1;
  }
  return static_cast<pid_t>(info.pid);
}

// A process whose /proc is its own PID namespace's (pid 1 there) cannot name itself by host pid:
// the agent, which sees the host's /proc, still locks, checkpoints, restores and unlocks it, and
// finds its state file under the host pid with the start time it sees.
TEST_F(EmuCheckpointTest, AProcessWithItsOwnProcIsCheckpointedByItsHostPid) {
  auto env = Env({{"PALADIN_EMU_GPUS", "1x1GiB"}, {"PALADIN_EMU_CTX_OVERHEAD", "64MiB"}});
  std::string control_dir = state_path() + ".ctl";
  if (unshare(0) != 0 || geteuid() != 0) GTEST_SKIP() << "needs root for namespaces";
  EXPECT_EQ(
      RunInChild(
          env,
          [&control_dir] {
            Signal ready;
            Signal go;
            SharedCounter* counter = MapSharedCounter();
            auto* host_pid = static_cast<std::atomic<pid_t>*>(mmap(
                nullptr, sizeof(pid_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
            pid_t outer = ForkChild();
            if (outer == 0) {
              CHILD_CHECK(unshare(CLONE_NEWPID | CLONE_NEWNS) == 0);
              pid_t inner = ForkChild();
              if (inner == 0) {
                CHILD_CHECK(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0);
                CHILD_CHECK(
                    mount("proc", "/proc", "proc", MS_NOSUID | MS_NOEXEC | MS_NODEV, nullptr) == 0);
                CHILD_CHECK_EQ(std::atoi(FileText("/proc/self/stat").c_str()),
                               1);  // its own pid, as getpid() says
                CHILD_CHECK_EQ(getpid(), 1);
                Workload(ready, go, counter, kGiB);
              }
              host_pid->store(inner);
              _exit(WaitExit(inner));
            }
            ready.Wait();
            const pid_t workload = host_pid->load();
            CHILD_CHECK(workload > 1);
            Emu emu = Emu::Load();
            CHILD_OK(emu.cuInit(0));
            // Its memory stays counted, though its pid names another process here, and NVML
            // lists it by its host pid.
            CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
            CHILD_CHECK_EQ(emu.NvmlUsed(0), 164 * kMiB);
            CHILD_CHECK_EQ(ListedPid(emu), workload);
            CHILD_CHECK_EQ(StateOf(emu, workload), CU_PROCESS_STATE_RUNNING);
            int tid = 0;
            CHILD_OK(emu.cuCheckpointProcessGetRestoreThreadId(workload, &tid));
            CHILD_CHECK(
                access(
                    ("/proc/" + std::to_string(workload) + "/task/" + std::to_string(tid)).c_str(),
                    F_OK) == 0);
            CHILD_CHECK(tid != workload);
            CHILD_CHECK(access((control_dir + "/1.state").c_str(), F_OK) != 0);

            CHILD_OK(emu.cuCheckpointProcessLock(workload, nullptr));
            CHILD_CHECK_EQ(StateOf(emu, workload), CU_PROCESS_STATE_LOCKED);
            CHILD_OK(emu.cuCheckpointProcessCheckpoint(workload, nullptr));
            CHILD_CHECK_EQ(StateOf(emu, workload), CU_PROCESS_STATE_CHECKPOINTED);
            CHILD_OK(emu.cuCheckpointProcessRestore(workload, nullptr));
            CHILD_CHECK_EQ(StateOf(emu, workload), CU_PROCESS_STATE_LOCKED);
            CHILD_OK(emu.cuCheckpointProcessUnlock(workload, nullptr));
            CHILD_CHECK_EQ(StateOf(emu, workload), CU_PROCESS_STATE_RUNNING);
            CHILD_CHECK_EQ(emu.NvmlUsed(0), 164 * kMiB);
            CHILD_CHECK_EQ(ListedPid(emu), workload);

            const std::string state =
                FileText(control_dir + "/" + std::to_string(workload) + ".state");
            CHILD_CHECK_EQ(StateField(state, "pid"), workload);
            CHILD_CHECK_EQ(StateField(state, "start_time"), StartTimeOf(workload));
            CHILD_CHECK_EQ(StateField(state, "tid"), tid);
            go.Send('s');  // the workload checks its device memory byte for byte
            CHILD_CHECK_EQ(WaitExit(outer), 0);
          }),
      0);
}

// Threads allocating and freeing all the time while the agent checkpoints and restores the
// process over and over: every byte is accounted for at the end.
TEST_F(EmuCheckpointTest, RepeatedCyclesUnderConcurrentAllocationLoseNoBytes) {
  auto env = Env({{"PALADIN_EMU_GPUS", "2x1GiB"}, {"PALADIN_EMU_CTX_OVERHEAD", "64MiB"}});
  EXPECT_EQ(RunInChild(env,
                       [] {
                         Signal ready;
                         Signal go;
                         SharedCounter* counter = MapSharedCounter();
                         pid_t workload = ForkChild();
                         if (workload == 0) {
                           Emu emu = Emu::Load();
                           emu.InitWithContext(0);
                           CUcontext ctx = nullptr;
                           CHILD_OK(emu.cuCtxGetCurrent(&ctx));
                           std::vector<std::thread> threads;
                           for (int t = 0; t < 4; ++t) {
                             threads.emplace_back([&] {
                               emu.cuCtxSetCurrent(ctx);
                               while (!counter->stop.load()) {
                                 CUdeviceptr ptr = 0;
                                 if (emu.cuMemAlloc_v2(&ptr, 3 * kMiB) != CUDA_SUCCESS) continue;
                                 CHILD_OK(emu.cuMemsetD8_v2(ptr, 1, 3 * kMiB));
                                 CHILD_OK(emu.cuMemFree_v2(ptr));
                                 counter->calls.fetch_add(1);
                               }
                             });
                           }
                           ready.Send();
                           go.Wait(60000);
                           for (std::thread& thread : threads) thread.join();
                           CHILD_CHECK_EQ(emu.FreeBytes(), kGiB - 64 * kMiB);
                           _exit(0);
                         }
                         ready.Wait();
                         Emu emu = Emu::Load();
                         CHILD_OK(emu.cuInit(0));
                         CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
                         CUcheckpointGpuPair there{DeviceUuid(emu, 0), DeviceUuid(emu, 1)};
                         CUcheckpointGpuPair back{DeviceUuid(emu, 1), DeviceUuid(emu, 0)};
                         for (int cycle = 0; cycle < 20; ++cycle) {
                           uint64_t calls = counter->calls.load();
                           for (int i = 0; i < 1000 && counter->calls.load() == calls; ++i)
                             usleep(1000);
                           CUcheckpointRestoreArgs restore{};
                           restore.gpuPairs = cycle % 2 == 0 ? &there : &back;
                           restore.gpuPairsCount = 1;
                           CHILD_OK(emu.cuCheckpointProcessLock(workload, nullptr));
                           CHILD_OK(emu.cuCheckpointProcessCheckpoint(workload, nullptr));
                           CHILD_CHECK_EQ(emu.NvmlUsed(0) + emu.NvmlUsed(1), 0u);
                           CHILD_OK(emu.cuCheckpointProcessRestore(workload, &restore));
                           CHILD_OK(emu.cuCheckpointProcessUnlock(workload, nullptr));
                         }
                         counter->stop.store(true);
                         go.Send();
                         CHILD_CHECK_EQ(WaitExit(workload), 0);
                         CHILD_CHECK_EQ(emu.NvmlUsed(0), 0u);
                         CHILD_CHECK_EQ(emu.NvmlUsed(1), 0u);
                       }),
            0);
}

TEST_F(EmuCheckpointTest, ProcessesWithoutTheEmulatedDriverAreNotCudaProcesses) {
  EXPECT_EQ(RunInChild(Env(),
                       [] {
                         Emu emu = Emu::Load();
                         CUprocessState state = -1;
                         CHILD_CHECK_EQ(emu.cuCheckpointProcessGetState(getppid(), &state),
                                        CUDA_ERROR_INVALID_VALUE);
                         CHILD_CHECK_EQ(emu.cuCheckpointProcessLock(getppid(), nullptr),
                                        CUDA_ERROR_INVALID_VALUE);
                         CHILD_CHECK_EQ(emu.cuCheckpointProcessGetState(0, &state),
                                        CUDA_ERROR_INVALID_VALUE);
                       }),
            0);
}

// A child forked from a CUDA process inherits the signal handler but not the control thread: it
// is answered at once, not after a timeout.
TEST_F(EmuCheckpointTest, AChildForkedFromACudaProcessIsNotOne) {
  EXPECT_EQ(RunInChild(Env(),
                       [] {
                         Emu emu = Emu::Load();
                         CHILD_OK(emu.cuInit(0));
                         Signal done;
                         pid_t forked = ForkChild();
                         if (forked == 0) {
                           done.Wait();
                           _exit(0);
                         }
                         CUprocessState state = -1;
                         CHILD_CHECK_EQ(emu.cuCheckpointProcessGetState(forked, &state),
                                        CUDA_ERROR_INVALID_VALUE);
                         CHILD_OK(emu.cuCheckpointProcessGetState(getpid(), &state));
                         CHILD_CHECK_EQ(state, CU_PROCESS_STATE_RUNNING);
                         done.Send();
                         CHILD_CHECK_EQ(WaitExit(forked), 0);
                       }),
            0);
}

}  // namespace
}  // namespace paladin::emucuda::test
