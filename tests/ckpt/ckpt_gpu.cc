// ckpt_gpu: a workload on the (emulated) GPU for the checkpoint tests. It loads the driver the
// way frameworks do (dlopen("libcuda.so.1") + dlsym), prints every device's UUID, allocates
// device memory on device 0, fills it with a pattern that depends on a generation number, and
// then, every --every-ms, copies it back, checks it against the current generation, writes the
// next generation and prints one line:
//   gen 17 ok dev 0 GPU-454d5500-... free 805306368 pid 2 proc 2
// with the UUID of the device its context is on now (cuCtxGetDevice + cuDeviceGetUuid), so a
// restore onto another GPU shows, and its pid as getpid() and as /proc/self/stat say (the same
// when its /proc is its own PID namespace's). A wrong word prints "MISMATCH ..." and exits 3; a
// driver error prints "ERROR <call> <code>" and exits 2. Generations only ever count up: a
// restarted program would start again at gen 1.
//
// Usage: ckpt_gpu [--mib N] [--every-ms N]
//
// It runs on the emulated driver loaded as libcuda.so.1, so it is built without sanitizers and
// links nothing of Paladin's; it uses the driver API declarations only.
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "demo/driver_calls.h"
#include "paladin/gpu/cuda_api.h"

namespace {

using paladin::workload::Check;
using paladin::workload::FormatUuid;
using paladin::workload::Resolve;

// The word at `index` in generation `gen`.
uint64_t Pattern(uint64_t index, uint64_t gen) {
  uint64_t x = (index + 1) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  return x + gen * 0xD1B54A32D192ED03ull;
}

}  // namespace

// The pid /proc/self/stat names; -1 when it cannot be read.
int ProcSelfPid() {
  FILE* stat = std::fopen("/proc/self/stat", "re");
  if (stat == nullptr) return -1;
  int pid = -1;
  if (std::fscanf(stat, "%d", &pid) != 1) pid = -1;
  std::fclose(stat);
  return pid;
}

int main(int argc, char** argv) {
  uint64_t mib = 64;
  int every_ms = 100;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--mib" && i + 1 < argc) {
      mib = std::strtoull(argv[++i], nullptr, 10);
    } else if (flag == "--every-ms" && i + 1 < argc) {
      every_ms = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: ckpt_gpu [--mib N] [--every-ms N]\n");
      return 1;
    }
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  paladin::workload::LoadDriver();
  auto init = Resolve<FnCuInit>("cuInit");
  auto device_count = Resolve<FnCuDeviceGetCount>("cuDeviceGetCount");
  auto device_get = Resolve<FnCuDeviceGet>("cuDeviceGet");
  auto get_uuid = Resolve<FnCuDeviceGetUuid>("cuDeviceGetUuid");
  auto retain = Resolve<FnCuDevicePrimaryCtxRetain>("cuDevicePrimaryCtxRetain");
  auto set_current = Resolve<FnCuCtxSetCurrent>("cuCtxSetCurrent");
  auto ctx_device = Resolve<FnCuCtxGetDevice>("cuCtxGetDevice");
  auto mem_info = Resolve<FnCuMemGetInfo>("cuMemGetInfo_v2");
  auto alloc = Resolve<FnCuMemAlloc>("cuMemAlloc_v2");
  auto htod = Resolve<FnCuMemcpyHtoD>("cuMemcpyHtoD_v2");
  auto dtoh = Resolve<FnCuMemcpyDtoH>("cuMemcpyDtoH_v2");

  Check("cuInit", init(0));
  int count = 0;
  Check("cuDeviceGetCount", device_count(&count));
  for (int d = 0; d < count; ++d) {
    CUdevice dev = 0;
    CUuuid uuid{};
    Check("cuDeviceGet", device_get(&dev, d));
    Check("cuDeviceGetUuid", get_uuid(&uuid, dev));
    std::printf("device %d %s\n", d, FormatUuid(uuid).c_str());
  }
  CUdevice dev0 = 0;
  Check("cuDeviceGet", device_get(&dev0, 0));
  CUcontext ctx = nullptr;
  Check("cuDevicePrimaryCtxRetain", retain(&ctx, dev0));
  Check("cuCtxSetCurrent", set_current(ctx));

  const size_t bytes = mib << 20;
  const size_t words = bytes / sizeof(uint64_t);
  CUdeviceptr ptr = 0;
  Check("cuMemAlloc", alloc(&ptr, bytes));
  std::vector<uint64_t> host(words);
  uint64_t gen = 1;
  for (size_t i = 0; i < words; ++i) host[i] = Pattern(i, gen);
  Check("cuMemcpyHtoD", htod(ptr, host.data(), bytes));
  std::printf("allocated %zu bytes, gen 1 written\n", bytes);

  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(every_ms));
    std::memset(host.data(), 0, bytes);
    Check("cuMemcpyDtoH", dtoh(host.data(), ptr, bytes));
    for (size_t i = 0; i < words; ++i) {
      if (host[i] != Pattern(i, gen)) {
        std::printf("MISMATCH gen %" PRIu64 " word %zu: %016" PRIx64 ", expected %016" PRIx64 "\n",
                    gen, i, host[i], Pattern(i, gen));
        return 3;
      }
    }
    ++gen;
    for (size_t i = 0; i < words; ++i) host[i] = Pattern(i, gen);
    Check("cuMemcpyHtoD", htod(ptr, host.data(), bytes));
    CUdevice dev = -1;
    CUuuid uuid{};
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    Check("cuCtxGetDevice", ctx_device(&dev));
    Check("cuDeviceGetUuid", get_uuid(&uuid, dev));
    Check("cuMemGetInfo", mem_info(&free_bytes, &total_bytes));
    std::printf("gen %" PRIu64 " ok dev %d %s free %zu pid %d proc %d\n", gen - 1, dev,
                FormatUuid(uuid).c_str(), free_bytes, static_cast<int>(getpid()), ProcSelfPid());
  }
}
