// What a streaming move announces to the destination's page server, which decides from it where
// the pages go (tmpfs or disk): a GPU job's device memory, which the driver's checkpoint puts in
// its host memory before the dump, counts by its quota region (migrate::JobDeviceBytes).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

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
  std::string dir_;
};

TEST_F(JobDeviceBytesTest, CountsWhatTheRegionHoldsOnEachGpu) {
  quota::RegionSettings settings;
  settings.quota_bytes = uint64_t{8} << 30;
  std::string error;
  std::unique_ptr<quota::Region> region = quota::Region::Create(dir_ + "/region", settings, &error);
  ASSERT_NE(region, nullptr) << error;
  const char gpu0[16] = {'a'};
  const char gpu1[16] = {'b'};
  const int slot0 = region->DeviceSlot(gpu0);
  const int slot1 = region->DeviceSlot(gpu1);
  const int proc = region->AttachProcess(quota::SelfProcessId());
  ASSERT_GE(proc, 0);
  region->ForceReserve(slot0, proc, uint64_t{64} << 20, false);
  region->ForceReserve(slot1, proc, uint64_t{3} << 30, false);

  ckpt::JobRecord job;
  EXPECT_EQ(JobDeviceBytes(job), 0u);  // no region: no GPU memory counted
  job.region = dir_ + "/region";
  EXPECT_EQ(JobDeviceBytes(job), (uint64_t{64} << 20) + (uint64_t{3} << 30));
  job.region = dir_ + "/missing";
  EXPECT_EQ(JobDeviceBytes(job), 0u);
}

// The job's processes can write their region: a count beyond any GPU's is taken as 1 TiB, so
// the sum cannot wrap around into a small announcement.
TEST_F(JobDeviceBytesTest, AnImpossibleCountIsBounded) {
  std::string error;
  std::unique_ptr<quota::Region> region =
      quota::Region::Create(dir_ + "/region", quota::RegionSettings{}, &error);
  ASSERT_NE(region, nullptr) << error;
  const char gpu0[16] = {'a'};
  const char gpu1[16] = {'b'};
  const int slot0 = region->DeviceSlot(gpu0);
  const int slot1 = region->DeviceSlot(gpu1);
  const int proc = region->AttachProcess(quota::SelfProcessId());
  region->ForceReserve(slot0, proc, ~uint64_t{0} - 10, false);
  region->ForceReserve(slot1, proc, 20, false);
  ckpt::JobRecord job;
  job.region = dir_ + "/region";
  EXPECT_EQ(JobDeviceBytes(job), (uint64_t{1} << 40) + 20);
}

}  // namespace
}  // namespace paladin::migrate
