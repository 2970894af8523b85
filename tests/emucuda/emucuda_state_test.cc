// The shared device-state file: re-initialised when the spec changes and nobody uses it, kept
// (with one line on stderr) while processes do; processes in their own PID namespace appear
// under their host pid.
#include <fcntl.h>
#include <sched.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "emucuda_testing.h"

namespace paladin::emucuda::test {
namespace {

using EmuStateTest = EmuTest;

constexpr int kSkipped = 77;

int DeviceCount(const Emu& emu) {
  int count = 0;
  CHILD_OK(emu.cuDeviceGetCount(&count));
  return count;
}

TEST_F(EmuStateTest, AStateFileNobodyUsesTakesTheNewSpec) {
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "1x1GiB"}}),
                       [] {
                         Emu emu = Emu::Load();
                         emu.InitWithContext();
                         CUdeviceptr ptr = 0;
                         CHILD_OK(emu.cuMemAlloc_v2(&ptr, 100 * kMiB));
                         _exit(0);  // dies without giving anything back
                       }),
            0);
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "2x2GiB"}}),
                       [] {
                         Emu emu = Emu::Load();
                         CHILD_OK(emu.cuInit(0));
                         CHILD_CHECK_EQ(DeviceCount(emu), 2);
                         size_t total = 0;
                         CHILD_OK(emu.cuDeviceTotalMem_v2(&total, 1));
                         CHILD_CHECK_EQ(total, 2 * kGiB);
                         CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
                         CHILD_CHECK_EQ(emu.NvmlUsed(0), 0u);
                       }),
            0);
}

TEST_F(EmuStateTest, AStateFileInUseKeepsItsDevicesAndSaysSo) {
  std::string log = state_path() + ".log";
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "1x1GiB"}}),
                       [&] {
                         Signal ready;
                         Signal done;
                         pid_t user = ForkChild();
                         if (user == 0) {
                           Emu emu = Emu::Load();
                           emu.InitWithContext();
                           ready.Send();
                           done.Wait();
                           _exit(0);
                         }
                         ready.Wait();
                         setenv("PALADIN_EMU_GPUS", "2x2GiB", 1);
                         int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
                         CHILD_CHECK(fd >= 0 && dup2(fd, STDERR_FILENO) == STDERR_FILENO);
                         Emu emu = Emu::Load();
                         CHILD_OK(emu.cuInit(0));
                         CHILD_CHECK_EQ(DeviceCount(emu), 1);
                         done.Send();
                         CHILD_CHECK_EQ(WaitExit(user), 0);
                       }),
            0);
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  std::string line = text.str();
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << line;
  EXPECT_NE(line.find("asks for 2x2 GiB"), std::string::npos) << line;
  EXPECT_NE(line.find("in use with 1x1 GiB; using those"), std::string::npos) << line;
  std::remove(log.c_str());
}

// The workload runs as pid 1 of a new PID namespace; /proc stays the host's, so NVML and the
// checkpoint API know it by its host pid.
TEST_F(EmuStateTest, AProcessInItsOwnPidNamespaceIsKnownByItsHostPid) {
  int status = RunInChild(Env({{"PALADIN_EMU_GPUS", "1x1GiB"}}), [] {
    if (unshare(CLONE_NEWPID) != 0) _exit(kSkipped);
    Signal ready;
    Signal done;
    pid_t workload = ForkChild();
    if (workload == 0) {
      CHILD_CHECK_EQ(getpid(), 1);
      Emu emu = Emu::Load();
      emu.InitWithContext();
      ready.Send();
      done.Wait();
      _exit(0);
    }
    ready.Wait();
    Emu emu = Emu::Load();
    CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t device = nullptr;
    CHILD_CHECK_EQ(emu.nvmlDeviceGetHandleByIndex_v2(0, &device), NVML_SUCCESS);
    nvmlProcessInfo_t info{};
    unsigned int count = 1;
    CHILD_CHECK_EQ(emu.nvmlDeviceGetComputeRunningProcesses_v3(device, &count, &info),
                   NVML_SUCCESS);
    CHILD_CHECK_EQ(count, 1u);
    CHILD_CHECK_EQ(info.pid, static_cast<unsigned int>(workload));
    CHILD_OK(emu.cuCheckpointProcessLock(workload, nullptr));
    CHILD_OK(emu.cuCheckpointProcessUnlock(workload, nullptr));
    done.Send();
    CHILD_CHECK_EQ(WaitExit(workload), 0);
  });
  if (status == kSkipped) GTEST_SKIP() << "no permission to create a PID namespace";
  EXPECT_EQ(status, 0);
}

}  // namespace
}  // namespace paladin::emucuda::test
