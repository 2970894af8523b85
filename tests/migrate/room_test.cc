// What a streaming move announces to the destination's page server, which decides from it where
// the pages go (tmpfs or disk): a GPU job's device memory, which the driver's checkpoint puts in
// its host memory before the dump, counts by its quota region (migrate::JobDeviceBytes).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "paladin/base/process.h"
#include "paladin/quota/region.h"
#include "stream.h"

namespace paladin::migrate {
namespace {

namespace fs = std::filesystem;

class JobDeviceBytesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "paladin-room-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // A quota region at dir_/region whose process holds `first` bytes on one GPU and `second` on
  // another; the job's record names it.
  ckpt::JobRecord JobHolding(uint64_t first, uint64_t second) {
    std::string error;
    region_ = quota::Region::Create(dir_ + "/region", quota::RegionSettings{}, &error);
    EXPECT_NE(region_, nullptr) << error;
    ckpt::JobRecord job;
    if (region_ == nullptr) return job;
    const char gpu0[16] = {'a'};
    const char gpu1[16] = {'b'};
    const int slot0 = region_->DeviceSlot(gpu0);
    const int slot1 = region_->DeviceSlot(gpu1);
    const int proc = region_->AttachProcess(base::SelfProcessId());
    EXPECT_GE(proc, 0);
    region_->ForceReserve(slot0, proc, first, false);
    region_->ForceReserve(slot1, proc, second, false);
    job.region = dir_ + "/region";
    return job;
  }
  std::string dir_;
  std::unique_ptr<quota::Region> region_;
};

TEST_F(JobDeviceBytesTest, CountsWhatTheRegionHoldsOnEachGpu) {
  ckpt::JobRecord job = JobHolding(uint64_t{64} << 20, uint64_t{3} << 30);
  EXPECT_EQ(JobDeviceBytes(job), (uint64_t{64} << 20) + (uint64_t{3} << 30));
  job.region.clear();
  EXPECT_EQ(JobDeviceBytes(job), 0u);  // no region: no GPU memory counted
  job.region = dir_ + "/missing";
  EXPECT_EQ(JobDeviceBytes(job), 0u);
}

// The job's processes can write their region: a count beyond any GPU's is taken as 1 TiB, so
// the sum cannot wrap around into a small announcement.
TEST_F(JobDeviceBytesTest, AnImpossibleCountIsBounded) {
  const ckpt::JobRecord job = JobHolding(~uint64_t{0} - 10, 20);
  EXPECT_EQ(JobDeviceBytes(job), (uint64_t{1} << 40) + 20);
}

}  // namespace
}  // namespace paladin::migrate
