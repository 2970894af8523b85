// paladin-demo-workload: the workload `paladin demo` submits. It holds GPU memory and host memory
// whose contents it can check, mutates both every step, and checks them before each mutation,
// so a checkpoint, migration or recovery that loses or corrupts state shows at once:
//
//   gen 17 ok dev 0 GPU-454d5500-... device 64 MiB host 8 MiB
//
// Generations only count up; one that restarted from scratch would start again at gen 1. A wrong
// word prints "MISMATCH ..." and exits 3; a driver error prints "ERROR <call> <code>" and exits
// 2; an allocation refused past the quota (CUDA_ERROR_OUT_OF_MEMORY) prints "OOM ..." and exits
// 4. With --gens N it ends after N generations, printing "DONE gen N: every generation verified".
//
// With --grow-mib M --grow-at G it allocates M MiB more at generation G (a model growing), which
// is how the demo shows a quota grown in place.
//
// It loads the driver as frameworks do (dlopen libcuda.so.1), so it runs on a real GPU or on the
// emulated driver, under Paladin's quota interposer; it links nothing of Paladin's.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <csignal>
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

// The word at `index` of buffer `buffer` in generation `gen`.
uint64_t Pattern(uint64_t buffer, uint64_t index, uint64_t gen) {
  uint64_t x = (index + 1 + (buffer << 40)) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  return x + gen * 0xD1B54A32D192ED03ull;
}

struct Args {
  uint64_t mib = 64;
  uint64_t host_mib = 8;
  uint64_t grow_mib = 0;
  uint64_t grow_at = 0;
  uint64_t gens = 0;  // 0: forever
  int every_ms = 200;
};

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    const char* value = argv[++i];
    if (flag == "--mib") {
      a->mib = std::strtoull(value, nullptr, 10);
    } else if (flag == "--host-mib") {
      a->host_mib = std::strtoull(value, nullptr, 10);
    } else if (flag == "--grow-mib") {
      a->grow_mib = std::strtoull(value, nullptr, 10);
    } else if (flag == "--grow-at") {
      a->grow_at = std::strtoull(value, nullptr, 10);
    } else if (flag == "--gens") {
      a->gens = std::strtoull(value, nullptr, 10);
    } else if (flag == "--every-ms") {
      a->every_ms = std::atoi(value);
    } else if (flag == "--tag") {
      // Ignored: lets a test find this process by its command line.
    } else {
      return false;
    }
  }
  return a->mib > 0 && a->every_ms >= 0;
}

struct Driver {
  FnCuMemAlloc alloc;
  FnCuMemcpyHtoD htod;
  FnCuMemcpyDtoH dtoh;
};

// One device buffer, written and checked through a small host scratch buffer, so the process's
// host memory (and its checkpoint image) holds the device contents once, not twice.
struct Buffer {
  static constexpr size_t kChunkWords = (1u << 20) / sizeof(uint64_t);
  uint64_t id = 0;
  CUdeviceptr ptr = 0;
  size_t words = 0;

  void Write(const Driver& d, uint64_t gen, std::vector<uint64_t>* scratch) const {
    for (size_t at = 0; at < words; at += kChunkWords) {
      const size_t n = std::min(kChunkWords, words - at);
      for (size_t i = 0; i < n; ++i) (*scratch)[i] = Pattern(id, at + i, gen);
      Check("cuMemcpyHtoD",
            d.htod(ptr + at * sizeof(uint64_t), scratch->data(), n * sizeof(uint64_t)));
    }
  }
  bool Verify(const Driver& d, uint64_t gen, std::vector<uint64_t>* scratch) const {
    for (size_t at = 0; at < words; at += kChunkWords) {
      const size_t n = std::min(kChunkWords, words - at);
      std::memset(scratch->data(), 0, n * sizeof(uint64_t));
      Check("cuMemcpyDtoH",
            d.dtoh(scratch->data(), ptr + at * sizeof(uint64_t), n * sizeof(uint64_t)));
      for (size_t i = 0; i < n; ++i) {
        if ((*scratch)[i] != Pattern(id, at + i, gen)) {
          std::printf("MISMATCH gen %" PRIu64 " device buffer %" PRIu64 " word %zu: %016" PRIx64
                      ", expected %016" PRIx64 "\n",
                      gen, id, at + i, (*scratch)[i], Pattern(id, at + i, gen));
          return false;
        }
      }
    }
    return true;
  }
};

// Allocates `mib` MiB; false when the quota refuses it.
bool Allocate(const Driver& d, uint64_t id, uint64_t mib, uint64_t gen,
              std::vector<uint64_t>* scratch, Buffer* out) {
  out->id = id;
  const CUresult r = d.alloc(&out->ptr, mib << 20);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return false;
  Check("cuMemAlloc", r);
  out->words = (mib << 20) / sizeof(uint64_t);
  out->Write(d, gen, scratch);
  return true;
}

// As a container's first process (pid 1 of its namespace) it would ignore SIGTERM and SIGINT:
// the kernel drops a signal to a namespace's init that has no handler, and a pod's deletion would
// wait out its grace period before SIGKILL. There, it ends on them, as it does elsewhere.
void EndOnTermAsInit() {
  if (getpid() != 1) return;
  struct sigaction action = {};
  action.sa_handler = [](int signal) { _exit(128 + signal); };
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: paladin-demo-workload [--mib N] [--host-mib N] [--grow-mib N --grow-at "
                 "GEN] [--gens N] [--every-ms N] [--tag TEXT]\n");
    return 1;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  EndOnTermAsInit();
  paladin::workload::LoadDriver();
  auto init = Resolve<FnCuInit>("cuInit");
  auto device_get = Resolve<FnCuDeviceGet>("cuDeviceGet");
  auto get_uuid = Resolve<FnCuDeviceGetUuid>("cuDeviceGetUuid");
  auto retain = Resolve<FnCuDevicePrimaryCtxRetain>("cuDevicePrimaryCtxRetain");
  auto set_current = Resolve<FnCuCtxSetCurrent>("cuCtxSetCurrent");
  auto ctx_device = Resolve<FnCuCtxGetDevice>("cuCtxGetDevice");
  const Driver driver{Resolve<FnCuMemAlloc>("cuMemAlloc_v2"),
                      Resolve<FnCuMemcpyHtoD>("cuMemcpyHtoD_v2"),
                      Resolve<FnCuMemcpyDtoH>("cuMemcpyDtoH_v2")};

  Check("cuInit", init(0));
  CUdevice dev0 = 0;
  Check("cuDeviceGet", device_get(&dev0, 0));
  CUcontext ctx = nullptr;
  Check("cuDevicePrimaryCtxRetain", retain(&ctx, dev0));
  Check("cuCtxSetCurrent", set_current(ctx));

  uint64_t gen = 1;
  std::vector<uint64_t> scratch(Buffer::kChunkWords);
  std::vector<Buffer> buffers(1);
  if (!Allocate(driver, 0, args.mib, gen, &scratch, &buffers[0])) {
    std::printf("OOM allocating %" PRIu64 " MiB: refused past the GPU-memory quota\n", args.mib);
    return 4;
  }
  // Host state: a buffer of words that must follow the same generations.
  std::vector<uint64_t> host((args.host_mib << 20) / sizeof(uint64_t));
  for (size_t i = 0; i < host.size(); ++i) host[i] = Pattern(1000, i, gen);
  std::printf("started: %" PRIu64 " MiB on the GPU, %" PRIu64 " MiB of host state, gen 1\n",
              args.mib, args.host_mib);

  uint64_t device_mib = args.mib;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(args.every_ms));
    for (Buffer& b : buffers) {
      if (!b.Verify(driver, gen, &scratch)) return 3;
    }
    for (size_t i = 0; i < host.size(); ++i) {
      if (host[i] != Pattern(1000, i, gen)) {
        std::printf("MISMATCH gen %" PRIu64 " host word %zu\n", gen, i);
        return 3;
      }
    }
    ++gen;
    for (Buffer& b : buffers) b.Write(driver, gen, &scratch);
    for (size_t i = 0; i < host.size(); ++i) host[i] = Pattern(1000, i, gen);
    if (args.grow_mib > 0 && gen == args.grow_at) {
      Buffer grown;
      if (!Allocate(driver, buffers.size(), args.grow_mib, gen, &scratch, &grown)) {
        std::printf("OOM growing by %" PRIu64 " MiB at gen %" PRIu64
                    ": refused past the GPU-memory quota\n",
                    args.grow_mib, gen);
        return 4;
      }
      buffers.push_back(grown);
      device_mib += args.grow_mib;
      std::printf("grew by %" PRIu64 " MiB at gen %" PRIu64 "\n", args.grow_mib, gen);
    }
    CUdevice dev = -1;
    CUuuid uuid{};
    Check("cuCtxGetDevice", ctx_device(&dev));
    Check("cuDeviceGetUuid", get_uuid(&uuid, dev));
    std::printf("gen %" PRIu64 " ok dev %d %s device %" PRIu64 " MiB host %" PRIu64 " MiB\n",
                gen - 1, dev, FormatUuid(uuid).c_str(), device_mib, args.host_mib);
    if (args.gens > 0 && gen > args.gens) {
      std::printf("DONE gen %" PRIu64 ": every generation verified\n", gen - 1);
      return 0;
    }
  }
}
