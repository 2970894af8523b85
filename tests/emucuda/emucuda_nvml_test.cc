// The emulated NVML: devices, UUID strings, memory of the whole device, per-process figures
// (including each process's context overhead), utilisation, and health events (Xid, ECC) posted
// by one process and seen by every other watching the device.
#include <cstdio>
#include <cstring>
#include <string>

#include "emucuda_testing.h"

namespace paladin::emucuda::test {
namespace {

using EmuNvmlTest = EmuTest;

nvmlDevice_t Handle(const Emu& emu, unsigned int index) {
  nvmlDevice_t device = nullptr;
  CHILD_CHECK_EQ(emu.nvmlDeviceGetHandleByIndex_v2(index, &device), NVML_SUCCESS);
  return device;
}

std::string UuidText(const CUuuid& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char text[64];
  std::snprintf(text, sizeof(text),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return text;
}

TEST_F(EmuNvmlTest, DevicesHaveEmulatedNamesAndCudaUuids) {
  EXPECT_EQ(
      RunInChild(
          Env({{"PALADIN_EMU_GPUS", "2x80GiB"}}),
          [] {
            Emu emu = Emu::Load();
            unsigned int count = 0;
            CHILD_CHECK_EQ(emu.nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
            CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
            CHILD_CHECK_EQ(emu.nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
            CHILD_CHECK_EQ(count, 2u);
            char text[96] = {};
            CHILD_CHECK_EQ(emu.nvmlDeviceGetName(Handle(emu, 1), text, sizeof(text)), NVML_SUCCESS);
            CHILD_CHECK_EQ(std::string(text),
                           std::string("Paladin Emulated GPU 80 GiB (emulated)"));
            CHILD_CHECK_EQ(emu.nvmlDeviceGetName(Handle(emu, 1), text, 8),
                           NVML_ERROR_INSUFFICIENT_SIZE);
            CHILD_CHECK_EQ(emu.nvmlSystemGetDriverVersion(text, sizeof(text)), NVML_SUCCESS);
            CHILD_CHECK_EQ(std::string(text), std::string("emulated 13.0"));
            CHILD_OK(emu.cuInit(0));
            CUuuid uuid{};
            CHILD_OK(emu.cuDeviceGetUuid_v2(&uuid, 1));
            CHILD_CHECK_EQ(emu.nvmlDeviceGetUUID(Handle(emu, 1), text, sizeof(text)), NVML_SUCCESS);
            CHILD_CHECK_EQ(std::string(text), UuidText(uuid));
            CHILD_CHECK_EQ(std::strlen(text), 40u);
            nvmlDevice_t by_uuid = nullptr;
            CHILD_CHECK_EQ(emu.nvmlDeviceGetHandleByUUID(text, &by_uuid), NVML_SUCCESS);
            CHILD_CHECK(by_uuid == Handle(emu, 1));
            CHILD_CHECK_EQ(emu.nvmlDeviceGetHandleByUUID("GPU-nope", &by_uuid),
                           NVML_ERROR_NOT_FOUND);
            nvmlDevice_t none = nullptr;
            CHILD_CHECK_EQ(emu.nvmlDeviceGetHandleByIndex_v2(2, &none),
                           NVML_ERROR_INVALID_ARGUMENT);
            CHILD_CHECK_EQ(emu.nvmlShutdown(), NVML_SUCCESS);
            CHILD_CHECK_EQ(emu.nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
            CHILD_CHECK_EQ(emu.nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
            CHILD_CHECK(std::string(emu.nvmlErrorString(NVML_ERROR_NOT_FOUND)) == "Not Found");
          }),
      0);
}

TEST_F(EmuNvmlTest, MemoryAndProcessesCoverEveryProcessAndContextOverhead) {
  auto env = Env({{"PALADIN_EMU_GPUS", "2x1GiB"}, {"PALADIN_EMU_CTX_OVERHEAD", "64MiB"}});
  EXPECT_EQ(
      RunInChild(
          env,
          [] {
            Signal ready;
            Signal done;
            pid_t other = ForkChild();
            if (other == 0) {
              Emu emu = Emu::Load();
              emu.InitWithContext(0);
              CUdeviceptr ptr = 0;
              CHILD_OK(emu.cuMemAlloc_v2(&ptr, 100 * kMiB));
              ready.Send();
              done.Wait();
              _exit(0);
            }
            ready.Wait();
            Emu emu = Emu::Load();
            emu.InitWithContext(0);
            CUdeviceptr ptr = 0;
            CHILD_OK(emu.cuMemAlloc_v2(&ptr, 10 * kMiB));
            CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
            nvmlMemory_t memory{};
            CHILD_CHECK_EQ(emu.nvmlDeviceGetMemoryInfo(Handle(emu, 0), &memory), NVML_SUCCESS);
            CHILD_CHECK_EQ(memory.total, kGiB);
            CHILD_CHECK_EQ(memory.used, 238 * kMiB);  // 2 x 64 MiB contexts, 100 + 10 MiB
            CHILD_CHECK_EQ(memory.free, kGiB - 238 * kMiB);
            nvmlMemory_v2_t memory_v2{};
            CHILD_CHECK_EQ(emu.nvmlDeviceGetMemoryInfo_v2(Handle(emu, 0), &memory_v2),
                           NVML_ERROR_INVALID_ARGUMENT);  // no version set
            memory_v2.version = PALADIN_NVML_MEMORY_V2_VERSION;
            CHILD_CHECK_EQ(emu.nvmlDeviceGetMemoryInfo_v2(Handle(emu, 0), &memory_v2),
                           NVML_SUCCESS);
            CHILD_CHECK_EQ(memory_v2.used, 238 * kMiB);
            CHILD_CHECK_EQ(memory_v2.reserved, 0u);

            unsigned int count = 0;
            CHILD_CHECK_EQ(
                emu.nvmlDeviceGetComputeRunningProcesses_v3(Handle(emu, 0), &count, nullptr),
                NVML_ERROR_INSUFFICIENT_SIZE);
            CHILD_CHECK_EQ(count, 2u);
            nvmlProcessInfo_t infos[4] = {};
            count = 4;
            CHILD_CHECK_EQ(
                emu.nvmlDeviceGetComputeRunningProcesses_v3(Handle(emu, 0), &count, infos),
                NVML_SUCCESS);
            CHILD_CHECK_EQ(count, 2u);
            unsigned long long mine = 0;
            unsigned long long theirs = 0;
            for (unsigned int i = 0; i < count; ++i) {
              if (infos[i].pid == static_cast<unsigned int>(getpid()))
                mine = infos[i].usedGpuMemory;
              if (infos[i].pid == static_cast<unsigned int>(other)) theirs = infos[i].usedGpuMemory;
              CHILD_CHECK_EQ(infos[i].gpuInstanceId, 0xFFFFFFFFu);
            }
            CHILD_CHECK_EQ(mine, 74 * kMiB);
            CHILD_CHECK_EQ(theirs, 164 * kMiB);
            nvmlProcessInfo_v1_t old_infos[4] = {};
            count = 4;
            CHILD_CHECK_EQ(
                emu.nvmlDeviceGetComputeRunningProcesses(Handle(emu, 0), &count, old_infos),
                NVML_SUCCESS);
            CHILD_CHECK_EQ(count, 2u);
            CHILD_CHECK_EQ(old_infos[0].usedGpuMemory + old_infos[1].usedGpuMemory, 238 * kMiB);
            count = 4;
            CHILD_CHECK_EQ(
                emu.nvmlDeviceGetComputeRunningProcesses_v2(Handle(emu, 1), &count, infos),
                NVML_SUCCESS);
            CHILD_CHECK_EQ(count, 0u);

            nvmlProcessUtilizationSample_t samples[4] = {};
            count = 4;
            CHILD_CHECK_EQ(emu.nvmlDeviceGetProcessUtilization(Handle(emu, 0), samples, &count, 0),
                           NVML_SUCCESS);
            CHILD_CHECK_EQ(count, 2u);
            CHILD_CHECK_EQ(samples[0].smUtil + samples[1].smUtil, 0u);
            CHILD_CHECK(samples[0].timeStamp > 0);
            count = 4;
            CHILD_CHECK_EQ(emu.nvmlDeviceGetProcessUtilization(Handle(emu, 1), samples, &count, 0),
                           NVML_ERROR_NOT_FOUND);
            nvmlUtilization_t rates{7, 7};
            CHILD_CHECK_EQ(emu.nvmlDeviceGetUtilizationRates(Handle(emu, 0), &rates), NVML_SUCCESS);
            CHILD_CHECK_EQ(rates.gpu + rates.memory, 0u);
            done.Send();
            CHILD_CHECK_EQ(WaitExit(other), 0);
            CHILD_CHECK_EQ(emu.NvmlUsed(0), 74 * kMiB);
          }),
      0);
}

}  // namespace
// Events reach every process that registered for their kind on their device, after it
// registered; a reader that falls more than the ring behind gets the newest, in order.
TEST_F(EmuNvmlTest, HealthEventsReachEveryWatcherOfTheirDeviceAndKind) {
  EXPECT_EQ(RunInChild(
                Env({{"PALADIN_EMU_GPUS", "2x1GiB"}}),
                [] {
                  Emu emu = Emu::Load();
                  CHILD_CHECK_EQ(emu.nvmlInit_v2(), NVML_SUCCESS);
                  nvmlDevice_t gpu1 = Handle(emu, 1);
                  unsigned long long supported = 0;
                  CHILD_CHECK_EQ(emu.nvmlDeviceGetSupportedEventTypes(gpu1, &supported),
                                 NVML_SUCCESS);
                  CHILD_CHECK_EQ(supported, PALADIN_NVML_EVENT_HEALTH);
                  // Posted before anyone registered: nobody hears it.
                  CHILD_CHECK_EQ(emu.paladinEmuNvmlPostEvent(gpu1, PALADIN_NVML_EVENT_XID, 31),
                                 NVML_SUCCESS);
                  nvmlEventSet_t set = nullptr;
                  CHILD_CHECK_EQ(emu.nvmlEventSetCreate(&set), NVML_SUCCESS);
                  CHILD_CHECK_EQ(emu.nvmlDeviceRegisterEvents(gpu1, 0x4 /* pstate */, set),
                                 NVML_ERROR_NOT_SUPPORTED);
                  CHILD_CHECK_EQ(
                      emu.nvmlDeviceRegisterEvents(
                          gpu1, PALADIN_NVML_EVENT_XID | PALADIN_NVML_EVENT_DOUBLE_BIT_ECC, set),
                      NVML_SUCCESS);
                  nvmlEventData_t data{};
                  CHILD_CHECK_EQ(emu.nvmlEventSetWait_v2(set, &data, 0), NVML_ERROR_TIMEOUT);

                  // Another process posts: an Xid and a double-bit ECC error on GPU 1 (registered),
                  // a single-bit one on GPU 1 (kind not registered), an Xid on GPU 0 (device not).
                  pid_t poster = ForkChild();
                  if (poster == 0) {
                    Emu other = Emu::Load();
                    CHILD_CHECK_EQ(other.nvmlInit_v2(), NVML_SUCCESS);
                    CHILD_CHECK_EQ(other.paladinEmuNvmlPostEvent(
                                       Handle(other, 1), PALADIN_NVML_EVENT_SINGLE_BIT_ECC, 0),
                                   NVML_SUCCESS);
                    CHILD_CHECK_EQ(
                        other.paladinEmuNvmlPostEvent(Handle(other, 0), PALADIN_NVML_EVENT_XID, 48),
                        NVML_SUCCESS);
                    CHILD_CHECK_EQ(
                        other.paladinEmuNvmlPostEvent(Handle(other, 1), PALADIN_NVML_EVENT_XID, 79),
                        NVML_SUCCESS);
                    CHILD_CHECK_EQ(other.paladinEmuNvmlPostEvent(
                                       Handle(other, 1), PALADIN_NVML_EVENT_DOUBLE_BIT_ECC, 5),
                                   NVML_SUCCESS);
                    CHILD_CHECK_EQ(other.paladinEmuNvmlPostEvent(Handle(other, 1), 0x4, 0),
                                   NVML_ERROR_INVALID_ARGUMENT);
                    _exit(0);
                  }
                  CHILD_CHECK_EQ(WaitExit(poster), 0);
                  CHILD_CHECK_EQ(emu.nvmlEventSetWait_v2(set, &data, 2000), NVML_SUCCESS);
                  CHILD_CHECK(data.device == gpu1);
                  CHILD_CHECK_EQ(data.eventType, PALADIN_NVML_EVENT_XID);
                  CHILD_CHECK_EQ(data.eventData, 79ull);
                  CHILD_CHECK_EQ(emu.nvmlEventSetWait_v2(set, &data, 0), NVML_SUCCESS);
                  CHILD_CHECK_EQ(data.eventType, PALADIN_NVML_EVENT_DOUBLE_BIT_ECC);
                  CHILD_CHECK_EQ(data.eventData, 0ull);  // only an Xid carries data
                  CHILD_CHECK_EQ(emu.nvmlEventSetWait_v2(set, &data, 50), NVML_ERROR_TIMEOUT);

                  // Twelve Xids while nobody reads: the ring keeps the newest eight, in order.
                  for (unsigned long long xid = 101; xid <= 112; ++xid) {
                    CHILD_CHECK_EQ(emu.paladinEmuNvmlPostEvent(gpu1, PALADIN_NVML_EVENT_XID, xid),
                                   NVML_SUCCESS);
                  }
                  for (unsigned long long xid = 105; xid <= 112; ++xid) {
                    CHILD_CHECK_EQ(emu.nvmlEventSetWait_v2(set, &data, 0), NVML_SUCCESS);
                    CHILD_CHECK_EQ(data.eventData, xid);
                  }
                  CHILD_CHECK_EQ(emu.nvmlEventSetWait_v2(set, &data, 0), NVML_ERROR_TIMEOUT);
                  CHILD_CHECK_EQ(emu.nvmlEventSetFree(set), NVML_SUCCESS);
                }),
            0);
}

}  // namespace paladin::emucuda::test
