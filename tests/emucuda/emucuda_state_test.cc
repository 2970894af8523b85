// The device file and the usage files: re-initialised when the spec changes and nobody uses it,
// kept (with one line on stderr) while processes do; processes in their own PID namespace appear
// under their host pid; a usage file per process, counted at most up to the device's capacity,
// junk in the usage folder ignored; an earlier version refused with a line.
#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <chrono>
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

// The usage file's record (docs/emucuda.md), as a forger would write it.
struct ForgedRecord {
  uint64_t magic = 0x5355554d45444c50ull;  // "PLDEMUUS"
  uint32_t version = 4;
  uint32_t pid = 0;
  uint64_t start_time = 0;
  uint32_t view = 0;
  uint32_t pad = 0;
  uint64_t used_bytes[16] = {};
  uint32_t contexts[16] = {};
  uint64_t checksum = 0;

  void Seal() {
    uint64_t hash = 0xcbf29ce484222325ull;
    const auto* bytes = reinterpret_cast<const unsigned char*>(this);
    for (size_t i = 0; i < offsetof(ForgedRecord, checksum); ++i) {
      hash ^= bytes[i];
      hash *= 0x100000001b3ull;
    }
    checksum = hash;
  }
};
static_assert(sizeof(ForgedRecord) == 232);

std::vector<std::string> UsageFiles(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

void WriteFile(const std::string& path, const void* data, size_t size) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(write(fd, data, size), static_cast<ssize_t>(size));
  close(fd);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_F(EmuStateTest, EachProcessCountsInAUsageFileOfItsOwnRemovedAtExit) {
  const std::string usage = state_path() + ".usage";
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "1x1GiB"}}),
                       [&] {
                         Emu emu = Emu::Load();
                         emu.InitWithContext();
                         CUdeviceptr ptr = 0;
                         CHILD_OK(emu.cuMemAlloc_v2(&ptr, 100 * kMiB));
                         const std::vector<std::string> names = UsageFiles(usage);
                         CHILD_CHECK_EQ(names.size(), 1u);
                         const std::string prefix = std::to_string(geteuid()) + ".";
                         CHILD_CHECK_EQ(names[0].rfind(prefix, 0), 0u);
                         CHILD_CHECK_EQ(names[0].size(), prefix.size() + 16);
                         struct stat file {};
                         CHILD_CHECK(stat((usage + "/" + names[0]).c_str(), &file) == 0);
                         CHILD_CHECK_EQ(file.st_mode & 07777, 0644u);
                         CHILD_CHECK_EQ(file.st_size, 232);
                         struct stat device {};
                         CHILD_CHECK(stat(state_path().c_str(), &device) == 0);
                         CHILD_CHECK_EQ(device.st_mode & 0022, 0u);  // only its owner writes
                         exit(0);  // the exit handler gives everything back
                       }),
            0);
  EXPECT_TRUE(UsageFiles(usage).empty());
}

// A process killed outright leaves its file; the next look finds it dead, leaves its bytes out
// and removes the file (its own user's).
TEST_F(EmuStateTest, ADeadProcessUsageFileIsRemovedAndItsBytesReturned) {
  const std::string usage = state_path() + ".usage";
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "1x1GiB"}}),
                       [] {
                         Emu emu = Emu::Load();
                         emu.InitWithContext();
                         CUdeviceptr ptr = 0;
                         CHILD_OK(emu.cuMemAlloc_v2(&ptr, 700 * kMiB));
                         _exit(0);
                       }),
            0);
  EXPECT_EQ(UsageFiles(usage).size(), 1u);
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "1x1GiB"}}),
                       [] {
                         Emu emu = Emu::Load();
                         CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
                         CHILD_CHECK_EQ(emu.NvmlUsed(0), 0u);
                         emu.InitWithContext();
                         CUdeviceptr ptr = 0;
                         CHILD_OK(emu.cuMemAlloc_v2(&ptr, 700 * kMiB));
                       }),
            0);
}

// A usage file counts at most the device's capacity, however many bytes it claims; what is not a
// usage file (other names, links, FIFOs, other sizes, hard links, another user's name) counts
// nothing and blocks nobody.
TEST_F(EmuStateTest, AUsageFileCountsAtMostTheCapacityAndJunkCountsNothing) {
  const std::string usage = state_path() + ".usage";
  const std::string uid = std::to_string(geteuid());
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "1x1GiB"}}),
                       [] {
                         Emu emu = Emu::Load();
                         CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
                       }),
            0);
  ForgedRecord huge;
  huge.pid = static_cast<uint32_t>(getpid());  // alive, and this user's
  huge.start_time = [] {
    std::string stat = ReadText("/proc/self/stat");
    std::istringstream fields(stat.substr(stat.rfind(')') + 2));
    std::string field;
    for (int i = 3; i <= 22; ++i) fields >> field;
    return std::stoull(field);
  }();
  huge.used_bytes[0] = ~0ull;
  huge.Seal();
  const std::string forged = usage + "/" + uid + ".00000000000000aa";
  WriteFile(forged, &huge, sizeof(huge));
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "1x1GiB"}}),
                       [] {
                         Emu emu = Emu::Load();
                         CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
                         CHILD_CHECK_EQ(emu.NvmlUsed(0), kGiB);  // capped, not wrapped round
                         CHILD_OK(emu.cuInit(0));
                         CUcontext ctx = nullptr;
                         CHILD_CHECK_EQ(emu.cuDevicePrimaryCtxRetain(&ctx, 0),
                                        CUDA_ERROR_OUT_OF_MEMORY);
                       }),
            0);
  std::remove(forged.c_str());

  ForgedRecord good = huge;
  good.used_bytes[0] = 512 * kMiB;
  good.Seal();
  const std::string kept = usage + "/.kept";  // a dot-name is never read
  WriteFile(kept, &good, sizeof(good));
  WriteFile(usage + "/junk", &good, sizeof(good));
  WriteFile(usage + "/" + uid + ".00000000000000zz", &good, sizeof(good));
  WriteFile(usage + "/" + std::to_string(geteuid() + 1) + ".00000000000000bb", &good,
            sizeof(good));  // named for another user than its owner
  WriteFile(usage + "/" + uid + ".00000000000000cc", &good, sizeof(good) - 8);
  ForgedRecord torn = good;
  torn.used_bytes[0] = 0;  // the checksum is of 512 MiB
  WriteFile(usage + "/" + uid + ".00000000000000c0", &torn, sizeof(torn));
  ASSERT_EQ(symlink(kept.c_str(), (usage + "/" + uid + ".00000000000000dd").c_str()), 0);
  ASSERT_EQ(link(kept.c_str(), (usage + "/" + uid + ".00000000000000ee").c_str()), 0);
  ASSERT_EQ(mkfifo((usage + "/" + uid + ".00000000000000ff").c_str(), 0644), 0);
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "1x1GiB"}}),
                       [] {
                         Emu emu = Emu::Load();
                         CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
                         CHILD_CHECK_EQ(emu.NvmlUsed(0), 0u);
                         emu.InitWithContext();
                         CUdeviceptr ptr = 0;
                         CHILD_OK(emu.cuMemAlloc_v2(&ptr, 700 * kMiB));
                       }),
            0);
}

// Every check-then-add holds the device file's flock: a charge waits for a holder, and one held
// for longer than a charge may wait refuses the charge rather than hanging.
TEST_F(EmuStateTest, ChargesWaitForTheDeviceFileLock) {
  EXPECT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "1x1GiB"}}),
                       [&] {
                         Emu emu = Emu::Load();
                         emu.InitWithContext();
                         int fd = open(state_path().c_str(), O_RDONLY | O_CLOEXEC);
                         CHILD_CHECK(fd >= 0 && flock(fd, LOCK_EX) == 0);
                         Signal locked;
                         pid_t holder = ForkChild();
                         if (holder == 0) {
                           // The lock belongs to the open file: this child's copy holds it.
                           usleep(300 * 1000);
                           flock(fd, LOCK_UN);
                           _exit(0);
                         }
                         close(fd);
                         const auto start = std::chrono::steady_clock::now();
                         CUdeviceptr ptr = 0;
                         CHILD_OK(emu.cuMemAlloc_v2(&ptr, 100 * kMiB));
                         const auto waited = std::chrono::steady_clock::now() - start;
                         CHILD_CHECK(waited >= std::chrono::milliseconds(200));
                         CHILD_CHECK_EQ(WaitExit(holder), 0);
                       }),
            0);
}

TEST_F(EmuStateTest, AStateFileOfAnEarlierVersionIsRefusedWithALine) {
  struct {
    uint64_t magic = 0x5453554d45444c50ull;  // "PLDEMUST"
    uint32_t version = 3;
    uint32_t size = 60056;
  } head;
  std::string bytes(60056, '\0');
  std::memcpy(bytes.data(), &head, sizeof(head));
  WriteFile(state_path(), bytes.data(), bytes.size());
  const std::string log = state_path() + ".log";
  EXPECT_EQ(RunInChild(Env(),
                       [&] {
                         int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
                         CHILD_CHECK(fd >= 0 && dup2(fd, STDERR_FILENO) == STDERR_FILENO);
                         Emu emu = Emu::Load();
                         CHILD_CHECK_EQ(emu.cuInit(0), CUDA_ERROR_NO_DEVICE);
                       }),
            0);
  const std::string line = ReadText(log);
  EXPECT_NE(line.find("is a device-state file of version 3; this driver reads version 4: remove "
                      "it"),
            std::string::npos)
      << line;
  std::remove(log.c_str());
}

}  // namespace
}  // namespace paladin::emucuda::test
