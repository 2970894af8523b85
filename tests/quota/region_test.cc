// The accounting region's contract (include/paladin/quota/region.h): where the quota refuses,
// what release and a lowered quota do, per-process accounting and the reclaiming of dead
// processes, what Open refuses, sizes, the growth protocol between a workload and its launcher,
// and how far GrownQuota grows a quota.
#include "paladin/quota/region.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "paladin/base/size.h"
#include "paladin/quota/launch.h"

namespace paladin::quota {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

// A fresh directory per test, removed afterwards.
class RegionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/paladin-region-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  std::unique_ptr<Region> MustCreate(const RegionSettings& settings,
                                     const std::string& name = "quota.region") {
    std::string error;
    std::unique_ptr<Region> region = Region::Create(Path(name), settings, &error);
    EXPECT_NE(region, nullptr) << error;
    return region;
  }

  std::string dir_;
};

RegionSettings Settings(uint64_t quota, uint64_t granularity, uint64_t ceiling = 0,
                        uint32_t grow_wait_ms = 200) {
  RegionSettings s;
  s.quota_bytes = quota;
  s.granularity = granularity;
  s.ceiling_bytes = ceiling;
  s.grow_wait_ms = grow_wait_ms;
  return s;
}

const char kGpu0[16] = {'g', 'p', 'u', '0'};
const char kGpu1[16] = {'g', 'p', 'u', '1'};

// --- where the quota refuses ---

TEST_F(RegionTest, ExactlyTheRemainingBytesFitAndOneMoreDoesNot) {
  auto region = MustCreate(Settings(1000, 1));
  ASSERT_NE(region, nullptr);
  const int dev = region->DeviceSlot(kGpu0);
  const int proc = region->AttachProcess(SelfProcessId());
  ASSERT_GE(dev, 0);
  ASSERT_GE(proc, 0);
  ASSERT_TRUE(region->TryReserve(dev, proc, 600));
  EXPECT_FALSE(region->TryReserve(dev, proc, 401));  // one byte past the quota
  EXPECT_EQ(region->used(dev), 600u);                // a refusal counts nothing
  EXPECT_TRUE(region->TryReserve(dev, proc, 400));   // exactly the rest
  EXPECT_EQ(region->used(dev), 1000u);
  EXPECT_FALSE(region->TryReserve(dev, proc, 1));
  EXPECT_EQ(region->peak(dev), 0u);  // reserved, not yet kept
  region->NotePeak(dev);
  EXPECT_EQ(region->peak(dev), 1000u);
}

TEST_F(RegionTest, RoundsToTheGranularity) {
  auto region = MustCreate(Settings(10 * kMiB, kDefaultGranularity));
  ASSERT_NE(region, nullptr);
  EXPECT_EQ(region->granularity(), 2 * kMiB);
  EXPECT_EQ(region->Rounded(1), 2 * kMiB);
  EXPECT_EQ(region->Rounded(0), 2 * kMiB);  // a zero-byte allocation still takes a page
  EXPECT_EQ(region->Rounded(2 * kMiB), 2 * kMiB);
  EXPECT_EQ(region->Rounded(2 * kMiB + 1), 4 * kMiB);
  EXPECT_EQ(region->Rounded(10 * kMiB - 1), 10 * kMiB);

  const int dev = region->DeviceSlot(kGpu0);
  const int proc = region->AttachProcess(SelfProcessId());
  // 10 MiB + 1 byte is counted as 12 MiB: refused; 10 MiB - 1 byte as 10 MiB: fits exactly.
  EXPECT_FALSE(region->TryReserve(dev, proc, region->Rounded(10 * kMiB + 1)));
  ASSERT_TRUE(region->TryReserve(dev, proc, region->Rounded(7 * kMiB)));  // 8 MiB
  EXPECT_FALSE(region->TryReserve(dev, proc, region->Rounded(2 * kMiB + 1)));
  EXPECT_TRUE(region->TryReserve(dev, proc, region->Rounded(1)));  // the last 2 MiB
  EXPECT_EQ(region->used(dev), 10 * kMiB);
  EXPECT_FALSE(region->TryReserve(dev, proc, region->Rounded(1)));
}

TEST_F(RegionTest, ZeroGranularityMeansBytes) {
  auto region = MustCreate(Settings(100, 0));
  ASSERT_NE(region, nullptr);
  EXPECT_EQ(region->granularity(), 1u);
  EXPECT_EQ(region->Rounded(3), 3u);
}

TEST_F(RegionTest, ReleaseReturnsTheBudget) {
  auto region = MustCreate(Settings(8 * kMiB, kDefaultGranularity));
  const int dev = region->DeviceSlot(kGpu0);
  const int proc = region->AttachProcess(SelfProcessId());
  ASSERT_TRUE(region->TryReserve(dev, proc, 8 * kMiB));
  region->NotePeak(dev);
  EXPECT_FALSE(region->TryReserve(dev, proc, 2 * kMiB));
  region->Release(dev, proc, 8 * kMiB, false);
  EXPECT_EQ(region->used(dev), 0u);
  EXPECT_EQ(region->process_used(proc, dev), 0u);
  EXPECT_TRUE(region->TryReserve(dev, proc, 8 * kMiB));
  EXPECT_EQ(region->peak(dev), 8 * kMiB);  // the peak stays
}

TEST_F(RegionTest, ReleasingMoreThanCountedClampsAtZero) {
  auto region = MustCreate(Settings(8 * kMiB, 1));
  const int dev = region->DeviceSlot(kGpu0);
  const int proc = region->AttachProcess(SelfProcessId());
  ASSERT_TRUE(region->TryReserve(dev, proc, 100));
  region->Release(dev, proc, 1000, false);
  EXPECT_EQ(region->used(dev), 0u);
  EXPECT_EQ(region->process_used(proc, dev), 0u);
}

TEST_F(RegionTest, LoweringTheQuotaBelowUseRefusesButFreesNothing) {
  auto region = MustCreate(Settings(100, 1));
  const int dev = region->DeviceSlot(kGpu0);
  const int proc = region->AttachProcess(SelfProcessId());
  ASSERT_TRUE(region->TryReserve(dev, proc, 80));
  region->SetQuota(40);
  EXPECT_EQ(region->quota(), 40u);
  EXPECT_EQ(region->used(dev), 80u);  // nothing is taken away
  EXPECT_FALSE(region->TryReserve(dev, proc, 1));
  region->Release(dev, proc, 50, false);  // 30 left: 10 fit again
  EXPECT_FALSE(region->TryReserve(dev, proc, 11));
  EXPECT_TRUE(region->TryReserve(dev, proc, 10));
  // Raising it lets more in.
  region->SetQuota(100);
  EXPECT_TRUE(region->TryReserve(dev, proc, 60));
}

TEST_F(RegionTest, ForceReserveCountsPastTheQuota) {
  auto region = MustCreate(Settings(100, 1));
  const int dev = region->DeviceSlot(kGpu0);
  const int proc = region->AttachProcess(SelfProcessId());
  region->ForceReserve(dev, proc, 150, true);
  EXPECT_EQ(region->used(dev), 150u);
  EXPECT_EQ(region->process_context_bytes(proc, dev), 150u);
  EXPECT_FALSE(region->TryReserve(dev, proc, 1));
  region->Release(dev, proc, 150, true);
  EXPECT_EQ(region->process_context_bytes(proc, dev), 0u);
  EXPECT_TRUE(region->TryReserve(dev, proc, 100));
}

TEST_F(RegionTest, TheQuotaIsPerGpu) {
  auto region = MustCreate(Settings(100, 1));
  const int dev0 = region->DeviceSlot(kGpu0);
  const int dev1 = region->DeviceSlot(kGpu1);
  ASSERT_NE(dev0, dev1);
  EXPECT_EQ(region->DeviceSlot(kGpu0), dev0);  // the same GPU keeps its slot
  EXPECT_EQ(region->FindDevice(kGpu1), dev1);
  EXPECT_EQ(region->device_count(), 2);
  const char unknown[16] = {'n', 'o', 'n', 'e'};
  EXPECT_EQ(region->FindDevice(unknown), -1);
  char uuid[16];
  region->DeviceUuid(dev1, uuid);
  EXPECT_EQ(memcmp(uuid, kGpu1, 16), 0);

  const int proc = region->AttachProcess(SelfProcessId());
  EXPECT_TRUE(region->TryReserve(dev0, proc, 100));
  EXPECT_TRUE(region->TryReserve(dev1, proc, 100));
  EXPECT_FALSE(region->TryReserve(dev1, proc, 1));
}

TEST_F(RegionTest, AllDeviceSlotsTaken) {
  auto region = MustCreate(Settings(100, 1));
  char uuid[16] = {};
  for (int i = 0; i < kMaxDevices; ++i) {
    uuid[0] = static_cast<char>(i + 1);
    EXPECT_EQ(region->DeviceSlot(uuid), i);
  }
  uuid[0] = 100;
  EXPECT_EQ(region->DeviceSlot(uuid), -1);
}

// --- processes ---

TEST_F(RegionTest, CountsPerProcessAndDetachGivesBackOnlyThatProcesssBytes) {
  auto region = MustCreate(Settings(1000, 1));
  const int dev = region->DeviceSlot(kGpu0);
  const int a = region->AttachProcess(SelfProcessId());
  const int b = region->AttachProcess(SelfProcessId());
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  ASSERT_NE(a, b);
  ASSERT_TRUE(region->TryReserve(dev, a, 300));
  region->ForceReserve(dev, a, 50, true);
  ASSERT_TRUE(region->TryReserve(dev, b, 600));
  EXPECT_EQ(region->process_used(a, dev), 350u);
  EXPECT_EQ(region->process_context_bytes(a, dev), 50u);
  EXPECT_EQ(region->process_used(b, dev), 600u);
  EXPECT_EQ(region->used(dev), 950u);
  // The two processes share one quota.
  EXPECT_FALSE(region->TryReserve(dev, b, 51));

  region->DetachProcess(a);
  EXPECT_EQ(region->used(dev), 600u);
  EXPECT_EQ(region->process(a).pid, 0u);  // the slot is free
  EXPECT_EQ(region->process(b).pid, SelfProcessId().pid);
  EXPECT_TRUE(region->TryReserve(dev, b, 400));
  region->DetachProcess(a);  // twice: nothing more is given back
  EXPECT_EQ(region->used(dev), 1000u);
}

TEST_F(RegionTest, ProcessTableFull) {
  auto region = MustCreate(Settings(1000, 1));
  for (int i = 0; i < kMaxProcesses; ++i) ASSERT_EQ(region->AttachProcess(SelfProcessId()), i);
  EXPECT_EQ(region->AttachProcess(SelfProcessId()), -1);  // all alive: nothing to sweep
  region->DetachProcess(7);
  EXPECT_EQ(region->AttachProcess(SelfProcessId()), 7);
}

TEST(ProcessIdentity, SelfIsAliveAndAReusedPidIsNot) {
  const ProcessId self = SelfProcessId();
  EXPECT_GT(self.pid, 0u);
  EXPECT_GT(self.start_time, 0u);
  EXPECT_TRUE(ProcessAlive(self));
  ProcessId other_start = self;
  other_start.start_time += 12345;  // same pid, another process's start time
  EXPECT_FALSE(ProcessAlive(other_start));
  EXPECT_FALSE(ProcessAlive(ProcessId{}));
}

// A child that attaches to the region, reserves `bytes` and exits without detaching.
pid_t ChildThatReservesAndExits(const std::string& path, uint64_t bytes, const char uuid[16]) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  std::string error;
  std::unique_ptr<Region> region = Region::Open(path, &error);
  int code = 1;
  if (region != nullptr) {
    const int proc = region->AttachProcess(SelfProcessId());
    const int dev = region->DeviceSlot(uuid);
    if (proc >= 0 && dev >= 0 && region->TryReserve(dev, proc, bytes)) code = 0;
  }
  _exit(code);
}

TEST_F(RegionTest, SweepDeadReclaimsTheBytesOfAnExitedProcess) {
  auto region = MustCreate(Settings(1000, 1));
  const int dev = region->DeviceSlot(kGpu0);
  const int self = region->AttachProcess(SelfProcessId());
  ASSERT_TRUE(region->TryReserve(dev, self, 100));

  const pid_t child = ChildThatReservesAndExits(Path("quota.region"), 700, kGpu0);
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the child could not reserve";
  EXPECT_EQ(region->used(dev), 800u);
  EXPECT_FALSE(region->TryReserve(dev, self, 201));

  EXPECT_EQ(region->SweepDead(), 1);
  EXPECT_EQ(region->used(dev), 100u);  // this (live) process keeps its bytes
  EXPECT_EQ(region->process_used(self, dev), 100u);
  EXPECT_EQ(region->SweepDead(), 0);
  EXPECT_TRUE(region->TryReserve(dev, self, 900));
}

// A killed process is reclaimed by a sweep that waits for it to finish exiting (a killed workload
// tears down its memory for a while on a busy machine), before its parent has reaped it.
TEST_F(RegionTest, SweepWaitsForAKilledProcessToEndItsExit) {
  auto region = MustCreate(Settings(1000, 1));
  const int dev = region->DeviceSlot(kGpu0);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::string error;
    std::unique_ptr<Region> own = Region::Open(Path("quota.region"), &error);
    const int proc = own == nullptr ? -1 : own->AttachProcess(SelfProcessId());
    const bool reserved = proc >= 0 && own->TryReserve(own->DeviceSlot(kGpu0), proc, 700);
    // Memory to tear down on exit.
    std::vector<char> ballast(256 * kMiB, 1);
    const char said = reserved ? 'y' : 'n';
    if (write(ready[1], &said, 1) != 1) _exit(1);
    for (;;) pause();
  }
  close(ready[1]);
  char said = 0;
  ASSERT_EQ(read(ready[0], &said, 1), 1);
  close(ready[0]);
  ASSERT_EQ(said, 'y') << "the child could not reserve";
  EXPECT_EQ(region->used(dev), 700u);
  EXPECT_FALSE(ProcessDying(SelfProcessId()));

  ASSERT_EQ(kill(child, SIGKILL), 0);
  EXPECT_EQ(region->SweepDead(10000), 1);
  EXPECT_EQ(region->used(dev), 0u);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
}

TEST_F(RegionTest, AttachSweepsTheDeadWhenTheTableIsFull) {
  auto region = MustCreate(Settings(1000, 1));
  const int dev = region->DeviceSlot(kGpu0);
  for (int i = 0; i < kMaxProcesses - 1; ++i) ASSERT_GE(region->AttachProcess(SelfProcessId()), 0);
  const pid_t child = ChildThatReservesAndExits(Path("quota.region"), 10, kGpu0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(region->used(dev), 10u);
  EXPECT_GE(region->AttachProcess(SelfProcessId()), 0);  // the dead child's slot
  EXPECT_EQ(region->used(dev), 0u);
}

// --- opening ---

TEST_F(RegionTest, OpenSeesWhatCreateWrote) {
  auto created = MustCreate(Settings(3 * kGiB, kDefaultGranularity, 5 * kGiB, 321));
  std::string error;
  auto opened = Region::Open(Path("quota.region"), &error);
  ASSERT_NE(opened, nullptr) << error;
  EXPECT_EQ(opened->path(), Path("quota.region"));
  EXPECT_EQ(opened->quota(), 3 * kGiB);
  EXPECT_EQ(opened->ceiling(), 5 * kGiB);
  EXPECT_EQ(opened->granularity(), kDefaultGranularity);
  EXPECT_EQ(opened->grow_wait_ms(), 321u);
  // One shared region: a reservation through one mapping is seen through the other.
  const int dev = created->DeviceSlot(kGpu0);
  const int proc = opened->AttachProcess(SelfProcessId());
  EXPECT_EQ(opened->FindDevice(kGpu0), dev);
  ASSERT_TRUE(opened->TryReserve(dev, proc, 2 * kMiB));
  EXPECT_EQ(created->used(dev), 2 * kMiB);
  created->SetQuota(kGiB);
  EXPECT_EQ(opened->quota(), kGiB);
}

TEST_F(RegionTest, CreateRefusesAnExistingFile) {
  auto first = MustCreate(Settings(100, 1));
  std::string error;
  EXPECT_EQ(Region::Create(Path("quota.region"), Settings(100, 1), &error), nullptr);
  EXPECT_NE(error.find(Path("quota.region")), std::string::npos) << error;
}

TEST_F(RegionTest, OpenRefusesAMissingFile) {
  std::string error;
  EXPECT_EQ(Region::Open(Path("missing.region"), &error), nullptr);
  EXPECT_NE(error.find(Path("missing.region")), std::string::npos) << error;
  EXPECT_NE(error.find("No such file"), std::string::npos) << error;
}

TEST_F(RegionTest, OpenRefusesATruncatedFile) {
  MustCreate(Settings(100, 1)).reset();
  const std::string path = Path("quota.region");
  const auto full = fs::file_size(path);
  fs::resize_file(path, full / 2);
  std::string error;
  EXPECT_EQ(Region::Open(path, &error), nullptr);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("size " + std::to_string(full / 2)), std::string::npos) << error;

  std::ofstream(Path("empty.region")).close();
  error.clear();
  EXPECT_EQ(Region::Open(Path("empty.region"), &error), nullptr);
  EXPECT_NE(error.find("size 0"), std::string::npos) << error;
}

// Root opens a job's region by name in a directory the job may own: what the job puts there in
// the region's place is refused, and nothing it points at is mapped or written.
TEST_F(RegionTest, OpenRefusesALinkAFifoAndASecondName) {
  MustCreate(Settings(100, 1)).reset();
  const std::string real = Path("quota.region");
  auto read_all = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string before = read_all(real);

  fs::create_symlink(real, Path("link.region"));
  std::string error;
  EXPECT_EQ(Region::Open(Path("link.region"), &error), nullptr);
  EXPECT_NE(error.find(Path("link.region")), std::string::npos) << error;
  EXPECT_NE(error.find("symbolic link"), std::string::npos) << error;

  ASSERT_EQ(mkfifo(Path("fifo.region").c_str(), 0600), 0);
  error.clear();
  EXPECT_EQ(Region::Open(Path("fifo.region"), &error), nullptr);  // returns: no reader to wait for
  EXPECT_NE(error.find("not a regular file"), std::string::npos) << error;

  fs::create_hard_link(real, Path("second.region"));
  error.clear();
  EXPECT_EQ(Region::Open(Path("second.region"), &error), nullptr);
  EXPECT_NE(error.find("one name"), std::string::npos) << error;
  error.clear();
  EXPECT_EQ(Region::Open(real, &error), nullptr);  // either name: the file has two
  fs::remove(Path("second.region"));
  error.clear();
  EXPECT_NE(Region::Open(real, &error), nullptr) << error;
  EXPECT_EQ(read_all(real), before);
}

TEST_F(RegionTest, OpenRefusesWrongMagic) {
  MustCreate(Settings(100, 1)).reset();
  const std::string path = Path("quota.region");
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.write("NOTQUOTA", 8);
  }
  std::string error;
  EXPECT_EQ(Region::Open(path, &error), nullptr);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("bad magic"), std::string::npos) << error;
}

TEST_F(RegionTest, OpenRefusesAnotherVersion) {
  MustCreate(Settings(100, 1)).reset();
  const std::string path = Path("quota.region");
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);  // the version follows the 8-byte magic
    const uint32_t version = kRegionVersion + 1;
    f.write(reinterpret_cast<const char*>(&version), sizeof version);
  }
  std::string error;
  EXPECT_EQ(Region::Open(path, &error), nullptr);
  EXPECT_NE(error.find("version"), std::string::npos) << error;
}

TEST(PrivateRegion, EnforcesLikeASharedOne) {
  auto region = Region::CreatePrivate(Settings(4 * kMiB, kDefaultGranularity));
  ASSERT_NE(region, nullptr);
  const int dev = region->DeviceSlot(kGpu0);
  const int proc = region->AttachProcess(SelfProcessId());
  EXPECT_TRUE(region->TryReserve(dev, proc, region->Rounded(3 * kMiB)));
  EXPECT_FALSE(region->TryReserve(dev, proc, region->Rounded(1)));
}

// --- sizes ---

TEST(ParseSize, AcceptsSizesWithUnits) {
  struct Case {
    const char* text;
    uint64_t bytes;
  };
  const Case cases[] = {
      {"4096", 4096},
      {"0", 0},
      {"4096B", 4096},
      {"1K", 1024},
      {"1KiB", 1024},
      {"512MiB", 512 * kMiB},
      {"512M", 512 * kMiB},
      {"10GiB", 10 * kGiB},
      {"10G", 10 * kGiB},
      {"1.5GiB", 3 * kGiB / 2},
      {"0.5MiB", kMiB / 2},
      {"2TiB", 2ull << 40},
      {"1T", 1ull << 40},
      {"1KB", 1000},
      {"1MB", 1000000},
      {"10GB", 10000000000ull},
      {"1TB", 1000000000000ull},
      {"10gib", 10 * kGiB},  // units are case-insensitive
      {"10 GiB", 10 * kGiB},
      {" 64MiB ", 64 * kMiB},
  };
  for (const Case& c : cases) {
    uint64_t bytes = 12345;
    EXPECT_TRUE(base::ParseSize(c.text, &bytes)) << "'" << c.text << "'";
    EXPECT_EQ(bytes, c.bytes) << "'" << c.text << "'";
  }
}

TEST(ParseSize, RefusesAnythingElse) {
  const char* bad[] = {"",       "abc", "-1",  "-1GiB", "+5",   "10XB",        "GiB",  "1.5.5GiB",
                       "10 G B", " ",   "nan", "inf",   "1e30", "99999999TiB", "1GiBx"};
  for (const char* text : bad) {
    uint64_t bytes = 12345;
    EXPECT_FALSE(base::ParseSize(text, &bytes)) << "'" << text << "' parsed as " << bytes;
  }
}

// strtod also reads hexadecimal ("0x10" = 16) and hexadecimal floats: not sizes.
TEST(ParseSize, RefusesHexadecimal) {
  for (const char* text : {"0x10", "0x10MiB", "0x1p4"}) {
    uint64_t bytes = 12345;
    EXPECT_FALSE(base::ParseSize(text, &bytes)) << "'" << text << "' parsed as " << bytes;
  }
}

TEST(FormatSize, WholeUnitsAndTwoDecimals) {
  struct Case {
    uint64_t bytes;
    const char* text;
  };
  const Case cases[] = {
      {0, "0 B"},
      {4096, "4096 B"},
      {kMiB - 1, "1048575 B"},
      {kMiB, "1 MiB"},
      {512 * kMiB, "512 MiB"},
      {kMiB + kMiB / 2, "1.50 MiB"},
      {kGiB, "1 GiB"},
      {10 * kGiB, "10 GiB"},
      {3 * kGiB / 2, "1.50 GiB"},
      {kGiB + 1, "1.00 GiB"},
  };
  for (const Case& c : cases) EXPECT_EQ(base::FormatSize(c.bytes), c.text) << c.bytes;
}

TEST(FormatSize, ParsesBack) {
  for (uint64_t bytes : {uint64_t{4096}, 2 * kMiB, 512 * kMiB, 10 * kGiB}) {
    std::string text = base::FormatSize(bytes);
    uint64_t parsed = 0;
    ASSERT_TRUE(base::ParseSize(text, &parsed)) << text;
    EXPECT_EQ(parsed, bytes) << text;
  }
}

// --- growth on demand ---

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST_F(RegionTest, RequestGrowthAnsweredByTheLauncher) {
  auto region = MustCreate(Settings(100, 1, 1000, 5000));
  std::string error;
  auto workload = Region::Open(Path("quota.region"), &error);
  ASSERT_NE(workload, nullptr) << error;
  region->SetListening(true);
  std::atomic<uint64_t> asked{0};
  std::thread launcher([&] {
    uint64_t shortfall = 0;
    uint32_t ticket = 0;
    for (int i = 0; i < 100; ++i) {  // up to 10 s
      if (region->WaitGrowthRequest(100, &shortfall, &ticket)) {
        asked = shortfall;
        region->SetQuota(region->quota() + shortfall);
        region->AnswerGrowth(ticket, true);
        return;
      }
    }
  });
  const int dev = workload->DeviceSlot(kGpu0);
  const int proc = workload->AttachProcess(SelfProcessId());
  ASSERT_TRUE(workload->TryReserve(dev, proc, 100));
  ASSERT_FALSE(workload->TryReserve(dev, proc, 50));
  EXPECT_TRUE(workload->RequestGrowth(50));
  launcher.join();
  EXPECT_EQ(asked.load(), 50u);
  EXPECT_EQ(workload->quota(), 150u);
  EXPECT_EQ(workload->grows(), 1u);
  EXPECT_TRUE(workload->TryReserve(dev, proc, 50));
}

TEST_F(RegionTest, RequestGrowthWithNoListenerReturnsFalseAtOnce) {
  auto region = MustCreate(Settings(100, 1, 1000, 20000));
  region->SetListening(false);  // its launcher has gone
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(region->RequestGrowth(50));
  EXPECT_LT(SecondsSince(start), 10.0);  // well before grow_wait_ms (20 s)
  EXPECT_EQ(region->quota(), 100u);
}

// The launcher starts the workload first and its grower after: a request made in between waits
// for the grower's answer (a region made with a ceiling above its quota listens from the start).
TEST_F(RegionTest, ARequestBeforeTheGrowerRunsWaitsForItsAnswer) {
  auto region = MustCreate(Settings(100, 1, 1000, 10000));
  auto none = MustCreate(Settings(100, 1, 100, 10000), "no-ceiling.region");
  EXPECT_FALSE(none->RequestGrowth(50));  // no room to grow: nobody to ask
  std::atomic<bool> grown{false};
  const auto start = std::chrono::steady_clock::now();
  std::thread workload([&] { grown = region->RequestGrowth(50); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<std::string> lines;
  QuotaGrower grower(region.get(), nullptr,
                     [&](const std::string& line) { lines.push_back(line); });
  grower.Start();
  workload.join();
  grower.Stop();
  EXPECT_TRUE(grown.load());  // answered (no NVML here: not grown, but answered)
  EXPECT_GE(SecondsSince(start), 0.25);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("not grown"), std::string::npos) << lines[0];
}

TEST_F(RegionTest, RequestGrowthNeverAnsweredReturnsFalseAfterTheWait) {
  auto region = MustCreate(Settings(100, 1, 1000, 200));
  region->SetListening(true);  // a launcher that listens but never answers
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(region->RequestGrowth(50));
  EXPECT_GE(SecondsSince(start), 0.15);
  EXPECT_EQ(region->quota(), 100u);
  EXPECT_EQ(region->grows(), 0u);
}

TEST_F(RegionTest, RequestGrowthReturnsWhenTheLauncherStopsListening) {
  auto region = MustCreate(Settings(100, 1, 1000, 20000));
  region->SetListening(true);
  std::thread launcher([&] {
    uint64_t shortfall = 0;
    uint32_t ticket = 0;
    for (int i = 0; i < 100 && !region->WaitGrowthRequest(100, &shortfall, &ticket); ++i) {
    }
    region->SetListening(false);  // goes away without answering
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(region->RequestGrowth(50));
  EXPECT_LT(SecondsSince(start), 15.0);
  launcher.join();
}

TEST_F(RegionTest, QuotaGrowerWithoutNvmlAnswersButDoesNotGrow) {
  auto region = MustCreate(Settings(100, 1, 1000, 5000));
  std::vector<std::string> lines;
  std::mutex mu;
  QuotaGrower grower(region.get(), nullptr, [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(line);
  });
  grower.Start();
  EXPECT_TRUE(region->RequestGrowth(50));  // answered: no
  grower.Stop();
  EXPECT_EQ(region->quota(), 100u);
  EXPECT_EQ(region->grows(), 0u);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("not grown"), std::string::npos) << lines[0];
  // Stopped: no one listens any more.
  EXPECT_FALSE(region->RequestGrowth(50));
}

TEST(GrownQuota, Table) {
  constexpr uint64_t kStep = 256 * kMiB;
  constexpr uint64_t kPlenty = 80 * kGiB;
  struct Case {
    const char* what;
    uint64_t quota, ceiling, shortfall, gpu_free, step, expected;
  };
  const Case cases[] = {
      {"no ceiling above the quota", kGiB, kGiB, 100 * kMiB, kPlenty, kStep, kGiB},
      {"ceiling below the quota", 2 * kGiB, kGiB, 100 * kMiB, kPlenty, kStep, 2 * kGiB},
      {"nothing asked", kGiB, 4 * kGiB, 0, kPlenty, kStep, kGiB},
      {"rounded up to the step", kGiB, 4 * kGiB, 100 * kMiB, kPlenty, kStep, kGiB + kStep},
      {"exactly a step", kGiB, 4 * kGiB, kStep, kPlenty, kStep, kGiB + kStep},
      {"just over a step", kGiB, 4 * kGiB, kStep + 1, kPlenty, kStep, kGiB + 2 * kStep},
      {"capped at the ceiling", kGiB, kGiB + 200 * kMiB, 100 * kMiB, kPlenty, kStep,
       kGiB + 200 * kMiB},
      {"the ceiling leaves exactly the shortfall", kGiB, kGiB + 100 * kMiB, 100 * kMiB, kPlenty,
       kStep, kGiB + 100 * kMiB},
      {"the ceiling leaves less than the shortfall", kGiB, kGiB + 50 * kMiB, 100 * kMiB, kPlenty,
       kStep, kGiB},
      {"the GPU has the shortfall but not the step", kGiB, 4 * kGiB, 100 * kMiB, 150 * kMiB, kStep,
       kGiB + 100 * kMiB},
      {"the GPU has exactly the shortfall", kGiB, 4 * kGiB, 100 * kMiB, 100 * kMiB, kStep,
       kGiB + 100 * kMiB},
      {"the GPU lacks the shortfall", kGiB, 4 * kGiB, 100 * kMiB, 99 * kMiB, kStep, kGiB},
      {"the GPU has nothing free", kGiB, 4 * kGiB, 100 * kMiB, 0, kStep, kGiB},
      {"step 0 grows by the shortfall", kGiB, 4 * kGiB, 100 * kMiB + 1, kPlenty, 0,
       kGiB + 100 * kMiB + 1},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(GrownQuota(c.quota, c.ceiling, c.shortfall, c.gpu_free, c.step), c.expected)
        << c.what;
  }
}

// Checkpoint and restore: a frozen slot keeps its bytes through sweeps while its process is
// gone, and is bound to the restored process by its pid inside the workload's namespace.
TEST_F(RegionTest, FrozenSlotsSurviveSweepsAndBindToTheRestoredProcess) {
  auto region = MustCreate(Settings(1000, 1));
  const int dev = region->DeviceSlot(kGpu0);
  const pid_t child = ChildThatReservesAndExits(Path("quota.region"), 700, kGpu0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(region->FreezeProcesses(), 1);
  EXPECT_EQ(region->SweepDead(), 0);  // dead, but in a checkpoint
  EXPECT_EQ(region->used(dev), 700u);

  // "Restored": this process plays the restored child (same namespace pid, new host pid).
  ProcessId restored = SelfProcessId();
  restored.ns_pid = static_cast<uint32_t>(child);
  ProcessId stranger = SelfProcessId();
  stranger.ns_pid = static_cast<uint32_t>(child) + 1;
  EXPECT_EQ(region->ThawProcesses({stranger}), 0);
  EXPECT_EQ(region->ThawProcesses({restored}), 1);
  EXPECT_EQ(region->SweepDead(), 0);  // bound to a live process now
  EXPECT_EQ(region->used(dev), 700u);
  EXPECT_FALSE(region->TryReserve(dev, 0, 301));

  // Restored onto another GPU: the counters follow it.
  EXPECT_TRUE(region->RenameDevice(kGpu0, kGpu1));
  EXPECT_EQ(region->FindDevice(kGpu1), dev);
  EXPECT_EQ(region->FindDevice(kGpu0), -1);
  EXPECT_EQ(region->used(dev), 700u);
}

TEST_F(RegionTest, ReleaseFrozenGivesBackWhatACheckpointHeld) {
  auto region = MustCreate(Settings(1000, 1));
  const int dev = region->DeviceSlot(kGpu0);
  const pid_t child = ChildThatReservesAndExits(Path("quota.region"), 400, kGpu0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(region->FreezeProcesses(), 1);
  EXPECT_EQ(region->ReleaseFrozen(), 1);
  EXPECT_EQ(region->used(dev), 0u);
}

}  // namespace
}  // namespace paladin::quota
