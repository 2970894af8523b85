// Tenants on one node's emulated GPUs (issue 16, point 2): two jobs as users of their own share a
// device. Job B tries to write job A's usage file and the device file (the devices and their
// event rings), to remove or replace A's file, to post a device event, and to speak for A's
// process in NVML; each is refused. Both jobs still allocate, the device's total across them is
// right and a third allocation past the capacity is refused. Needs root (to switch users).
#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <utility>
#include <vector>

#include "../emucuda/emucuda_testing.h"
#include "paladin/supervise/supervisor.h"

namespace paladin::emucuda::test {
namespace {

// Two uids from the top of the agent's default range, which jobs of a test agent rarely reach.
constexpr uid_t kUidA = 1879113720;
constexpr uid_t kUidB = 1879113721;
constexpr unsigned long long kOverhead = 256 * kMiB;  // a primary context's default cost

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The one usage file of `uid` in `dir`; "" when there is not exactly one.
std::string UsageFileOf(const std::string& dir, uid_t uid) {
  std::string found;
  int count = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(std::to_string(uid) + ".", 0) != 0) continue;
    found = entry.path().string();
    ++count;
  }
  return count == 1 ? found : "";
}

void BecomeUser(uid_t uid) {
  CHILD_CHECK(setgroups(0, nullptr) == 0);
  CHILD_CHECK(setgid(uid) == 0);
  CHILD_CHECK(setuid(uid) == 0);
}

// -1 with errno when refused, as the attacks below report.
int TryOpen(const std::string& path, int flags) {
  int fd = open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return -1;
  close(fd);
  return 0;
}

class EmuStateSecurityTest : public EmuTest {};

TEST_F(EmuStateSecurityTest, AJobCannotWriteAnotherJobsOrTheDevicesState) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run jobs as users of their own";
  const std::string state = state_path();
  const std::string usage = state + ".usage";
  // The node agent (root) makes the devices, then opens the usage folder to its jobs' users.
  ASSERT_EQ(RunInChild(Env({{"PALADIN_EMU_GPUS", "1x4GiB"}}),
                       [] {
                         Emu emu = Emu::Load();
                         CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
                       }),
            0);
  supervise::ShareUsageDir(state);
  struct stat st {};
  ASSERT_EQ(stat(usage.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777u);
  ASSERT_EQ(stat(state.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);

  int results[2] = {-1, -1};  // tried, refused: from job B
  int result_pipe[2];
  ASSERT_EQ(pipe(result_pipe), 0);
  const int status = RunInChild(Env({{"PALADIN_EMU_GPUS", "1x4GiB"}}), [&] {
    Signal a_ready;
    Signal a_done;
    pid_t job_a = ForkChild();
    if (job_a == 0) {
      BecomeUser(kUidA);
      Emu emu = Emu::Load();
      emu.InitWithContext();
      CUdeviceptr ptr = 0;
      CHILD_OK(emu.cuMemAlloc_v2(&ptr, kGiB));
      a_ready.Send();
      a_done.Wait(60000);
      exit(0);
    }
    a_ready.Wait();
    const std::string a_file = UsageFileOf(usage, kUidA);
    CHILD_CHECK(!a_file.empty());
    const std::string a_before = ReadAll(a_file);
    const std::string device_before = ReadAll(state);

    Signal b_done;
    pid_t job_b = ForkChild();
    if (job_b == 0) {
      BecomeUser(kUidB);
      Emu emu = Emu::Load();
      emu.InitWithContext();
      CUdeviceptr ptr = 0;
      CHILD_OK(emu.cuMemAlloc_v2(&ptr, kGiB));
      CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
      nvmlDevice_t device = nullptr;
      CHILD_CHECK_EQ(emu.nvmlDeviceGetHandleByIndex_v2(0, &device), NVML_SUCCESS);

      using Attack = std::pair<const char*, std::function<int()>>;
      const std::vector<Attack> attacks = {
          {"write A's usage file", [&] { return TryOpen(a_file, O_WRONLY); }},
          {"truncate A's usage file", [&] { return truncate(a_file.c_str(), 0); }},
          {"remove A's usage file", [&] { return unlink(a_file.c_str()); }},
          {"replace A's usage file",
           [&] { return rename(a_file.c_str(), (usage + "/moved").c_str()); }},
          {"make A's usage file writable", [&] { return chmod(a_file.c_str(), 0666); }},
          {"write the device file", [&] { return TryOpen(state, O_RDWR); }},
          {"truncate the device file", [&] { return truncate(state.c_str(), 0); }},
          {"map the device file writable",
           [&] {
             int fd = open(state.c_str(), O_RDONLY | O_CLOEXEC);
             if (fd < 0) return -1;
             void* map = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
             const int saved = errno;
             close(fd);
             if (map != MAP_FAILED) munmap(map, 4096);
             errno = saved;
             return map == MAP_FAILED ? -1 : 0;
           }},
          {"replace the device file",
           [&] { return rename(state.c_str(), (state + ".x").c_str()); }},
          {"post a device event",
           [&] {
             const nvmlReturn_t r = emu.paladinEmuNvmlPostEvent(device, 1ull << 3, 79);
             errno = r == NVML_ERROR_NO_PERMISSION ? EACCES : 0;
             return r == NVML_SUCCESS ? 0 : -1;
           }},
          {"speak for A's process in NVML",
           [&] {
             // A usage file of B's naming A's process with 2 GiB more: NVML must not list it.
             std::string mine = ReadAll(UsageFileOf(usage, kUidB));
             CHILD_CHECK_EQ(mine.size(), 232u);
             uint32_t a_pid = static_cast<uint32_t>(job_a);
             std::memcpy(mine.data() + 12, &a_pid, 4);
             std::string a_record = ReadAll(a_file);
             std::memcpy(mine.data() + 16, a_record.data() + 16, 8);  // A's start time
             uint64_t bytes = 3 * kGiB;
             std::memcpy(mine.data() + 32, &bytes, 8);
             uint64_t hash = 0xcbf29ce484222325ull;
             for (size_t i = 0; i < 224; ++i) {
               hash ^= static_cast<unsigned char>(mine[i]);
               hash *= 0x100000001b3ull;
             }
             std::memcpy(mine.data() + 224, &hash, 8);
             const std::string forged = usage + "/" + std::to_string(kUidB) + ".00000000000000f0";
             std::ofstream(forged, std::ios::binary) << mine;
             nvmlProcessInfo_t infos[4]{};
             unsigned int count = 4;
             CHILD_CHECK_EQ(emu.nvmlDeviceGetComputeRunningProcesses_v3(device, &count, infos),
                            NVML_SUCCESS);
             int listed = 0;
             for (unsigned int i = 0; i < count; ++i) {
               if (infos[i].pid != a_pid) continue;
               ++listed;
               CHILD_CHECK_EQ(infos[i].usedGpuMemory, kGiB + kOverhead);
             }
             std::remove(forged.c_str());
             errno = EACCES;
             return listed == 1 ? -1 : 0;
           }},
      };
      int refused = 0;
      for (const Attack& attack : attacks) {
        errno = 0;
        const int rc = attack.second();
        const bool ok = rc != 0 && (errno == EACCES || errno == EPERM);
        refused += ok ? 1 : 0;
        std::fprintf(stderr, "%s: %s\n", attack.first,
                     ok ? "refused" : (rc == 0 ? "ALLOWED" : std::strerror(errno)));
      }
      const int counts[2] = {static_cast<int>(attacks.size()), refused};
      CHILD_CHECK(write(result_pipe[1], counts, sizeof(counts)) == sizeof(counts));

      // Both jobs count on the device: 2 x (1 GiB + a context) of 4 GiB.
      CHILD_CHECK_EQ(emu.NvmlUsed(0), 2 * (kGiB + kOverhead));
      CHILD_CHECK_EQ(emu.FreeBytes(), 4 * kGiB - 2 * (kGiB + kOverhead));
      CUdeviceptr more = 0;
      CHILD_CHECK_EQ(emu.cuMemAlloc_v2(&more, 2 * kGiB), CUDA_ERROR_OUT_OF_MEMORY);
      CHILD_OK(emu.cuMemAlloc_v2(&more, kGiB));
      b_done.Wait(60000);
      exit(0);
    }
    // A's file and the device file are as they were; then B's exit gives its bytes back.
    b_done.Send();
    CHILD_CHECK_EQ(WaitExit(job_b), 0);
    CHILD_CHECK(ReadAll(a_file) == a_before);
    CHILD_CHECK(ReadAll(state) == device_before);
    Emu emu = Emu::Load();
    CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
    CHILD_CHECK_EQ(emu.NvmlUsed(0), kGiB + kOverhead);
    a_done.Send();
    CHILD_CHECK_EQ(WaitExit(job_a), 0);
    CHILD_CHECK_EQ(emu.NvmlUsed(0), 0u);
  });
  EXPECT_EQ(status, 0);
  close(result_pipe[1]);
  ASSERT_EQ(read(result_pipe[0], results, sizeof(results)), static_cast<ssize_t>(sizeof(results)));
  close(result_pipe[0]);
  EXPECT_EQ(results[1], results[0]) << "an attack was allowed (see the lines above)";
  std::printf("security: emulated GPU state: tried %d, refused %d\n", results[0], results[1]);
}

}  // namespace
}  // namespace paladin::emucuda::test
