// gpu::Nvml's health events over the emulated NVML, as the node agent uses them: what each event
// means for the GPU, watching every GPU, and an event posted by another process heard here.
#include <string>
#include <vector>

#include "emucuda_testing.h"
#include "paladin/gpu/nvml.h"

namespace paladin::emucuda::test {
namespace {

using gpu::HealthEvent;
using gpu::JudgeHealthEvent;

TEST(JudgeHealthEventTest, HardwareFaultsMakeAGpuUnhealthyApplicationErrorsDoNot) {
  for (uint64_t xid : {48, 63, 64, 74, 79, 94, 95, 119, 120, 999}) {
    const gpu::HealthVerdict v = JudgeHealthEvent({"GPU-x", PALADIN_NVML_EVENT_XID, xid, false});
    EXPECT_TRUE(v.unhealthy) << xid;
    EXPECT_EQ(v.fault, "xid " + std::to_string(xid));
  }
  for (uint64_t xid : {13, 31, 43, 45, 68, 109}) {
    EXPECT_FALSE(JudgeHealthEvent({"GPU-x", PALADIN_NVML_EVENT_XID, xid, false}).unhealthy) << xid;
  }
  EXPECT_TRUE(JudgeHealthEvent({"GPU-x", PALADIN_NVML_EVENT_DOUBLE_BIT_ECC, 0, false}).unhealthy);
  EXPECT_EQ(JudgeHealthEvent({"GPU-x", PALADIN_NVML_EVENT_DOUBLE_BIT_ECC, 0, false}).fault,
            "ecc double-bit");
  EXPECT_FALSE(JudgeHealthEvent({"GPU-x", PALADIN_NVML_EVENT_SINGLE_BIT_ECC, 0, false}).unhealthy);
  const gpu::HealthVerdict lost = JudgeHealthEvent({"", 0, 0, true});
  EXPECT_TRUE(lost.unhealthy);
  EXPECT_EQ(lost.fault, "gpu lost");
}

using NvmlHealthTest = EmuTest;

TEST_F(NvmlHealthTest, WatchesEveryGpuAndHearsEventsPostedByAnotherProcess) {
  EXPECT_EQ(
      RunInChild(
          Env({{"PALADIN_EMU_GPUS", "2x1GiB"}}),
          [] {
            StatusOr<std::unique_ptr<gpu::Nvml>> nvml = gpu::Nvml::Load(PALADIN_EMUCUDA_PATH);
            CHILD_CHECK(nvml.ok());
            StatusOr<std::vector<gpu::GpuInfo>> gpus = (*nvml)->Gpus();
            CHILD_CHECK(gpus.ok() && gpus->size() == 2);
            const std::string uuid0 = (*gpus)[0].uuid;
            const std::string uuid1 = (*gpus)[1].uuid;
            CHILD_CHECK(!(*nvml)->WaitHealthEvent(0).ok());  // not watching yet
            StatusOr<std::vector<std::string>> watched = (*nvml)->WatchHealth({uuid0, uuid1});
            CHILD_CHECK(watched.ok());
            CHILD_CHECK_EQ(watched->size(), 2u);
            CHILD_CHECK_EQ((*watched)[1], uuid1 + ": xid, ecc double-bit, ecc single-bit");
            CHILD_CHECK(!(*nvml)->WatchHealth({"GPU-nope"}).ok());

            StatusOr<std::optional<HealthEvent>> none = (*nvml)->WaitHealthEvent(20);
            CHILD_CHECK(none.ok() && !none->has_value());

            pid_t poster = ForkChild();
            if (poster == 0) {
              StatusOr<std::unique_ptr<gpu::Nvml>> other = gpu::Nvml::Load(PALADIN_EMUCUDA_PATH);
              CHILD_CHECK(other.ok());
              CHILD_CHECK((*other)->PostEmulatedEvent(uuid1, PALADIN_NVML_EVENT_XID, 79).ok());
              CHILD_CHECK(
                  (*other)->PostEmulatedEvent(uuid0, PALADIN_NVML_EVENT_DOUBLE_BIT_ECC, 0).ok());
              CHILD_CHECK(!(*other)->PostEmulatedEvent(uuid0, 0x4, 0).ok());
              CHILD_CHECK(!(*other)->PostEmulatedEvent("GPU-nope", 0x8, 79).ok());
              _exit(0);
            }
            CHILD_CHECK_EQ(WaitExit(poster), 0);
            StatusOr<std::optional<HealthEvent>> first = (*nvml)->WaitHealthEvent(2000);
            StatusOr<std::optional<HealthEvent>> second = (*nvml)->WaitHealthEvent(2000);
            CHILD_CHECK(first.ok() && first->has_value());
            CHILD_CHECK(second.ok() && second->has_value());
            // One ring per device: the order across devices is the watcher's.
            const HealthEvent& on1 = (*first)->uuid == uuid1 ? **first : **second;
            const HealthEvent& on0 = (*first)->uuid == uuid1 ? **second : **first;
            CHILD_CHECK_EQ(on1.uuid, uuid1);
            CHILD_CHECK_EQ(on1.type, PALADIN_NVML_EVENT_XID);
            CHILD_CHECK_EQ(on1.data, 79u);
            CHILD_CHECK_EQ(on0.uuid, uuid0);
            CHILD_CHECK_EQ(on0.type, PALADIN_NVML_EVENT_DOUBLE_BIT_ECC);
            CHILD_CHECK((*nvml)->Probe(uuid0).ok());
          }),
      0);
}

}  // namespace
}  // namespace paladin::emucuda::test
