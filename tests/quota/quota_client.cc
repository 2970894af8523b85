// quota_client: a scriptable CUDA driver-API client for the quota tests. It loads the driver the
// way frameworks do (dlopen("libcuda.so.1")) and resolves each function either with dlsym
// (--dlsym, the default) or the way the CUDA runtime does (--proc-address: only cuGetProcAddress
// is looked up with dlsym, every other function by its base name through cuGetProcAddress).
//
// --ptds asks for the per-thread-default-stream variants (what the runtime does for code built
// with --default-stream per-thread): cuGetProcAddress with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_
// STREAM, or the _ptsz symbols of the stream-ordered allocator with dlsym.
//
// It runs the steps given on its command line, in order, and prints one line per step, e.g.
//   quota_client --proc-address init alloc 512MiB info free 0
//   init ok / alloc 536870912 ok / info free 469762048 total 1073741824 / free 0 ok
// A CUresult other than CUDA_SUCCESS is printed ("alloc 536870912 error 2") and is not fatal. The
// client exits 1 when a step cannot be carried out for any other reason (a malformed step, a
// driver function that cannot be resolved, an index with no allocation, a timeout waiting for a
// file), after saying why on stderr.
//
// Steps (SIZE takes B, KiB/K, MiB/M, GiB/G suffixes; I is a 0-based index into the successful
// allocations of that kind):
//   init                cuInit(0), retain device 0's primary context, make it current
//   alloc SIZE          cuMemAlloc                      free I       cuMemFree
//   managed SIZE        cuMemAllocManaged (freed with free I, counted in the alloc list)
//   pitch W H           cuMemAllocPitch, W bytes by H rows of 4-byte elements (freed with free I)
//   async SIZE          cuMemAllocAsync on the NULL stream   freeasync I   cuMemFreeAsync + sync
//   threshold SIZE      the default pool's release threshold
//   trim SIZE           cuMemPoolTrimTo(default pool, SIZE)
//   vmm SIZE            cuMemCreate on device 0 + reserve + map + set access + write/read a byte
//   vmmfree I           unmap + free the address range + cuMemRelease
//   vmmearly SIZE       as vmm, but releases the handle right after mapping it (the memory lives
//                       until it is unmapped), as CUDA's samples and several allocators do
//   vmmunmap I          unmap + free the address range of a vmmearly allocation
//   array W H           cuArrayCreate, CU_AD_FORMAT_FLOAT, 1 channel   arrayfree I
//   info                cuMemGetInfo: "info free <bytes> total <bytes>"
//   nvml                device 0's nvmlDeviceGetMemoryInfo through libnvidia-ml.so.1:
//                       "nvml free <bytes> used <bytes> total <bytes>"
//   ctx                 cuCtxCreate an extra context (the primary one stays current)
//   ctxfree I           cuCtxDestroy the I-th extra context
//   current I|primary   make the I-th extra context (or the primary one) current
//   release             cuDevicePrimaryCtxRelease(device 0); its memory goes with it
//   fill I / check I    write / verify a byte pattern over allocation I (cuMemcpyHtoD/DtoH)
//   touch PATH          create a file          waitfor PATH   poll up to 30 s for it to exist
//   sleep MS
//
// This program is loaded with the interposer preloaded, so it is built without sanitizers and
// links nothing of Paladin's; it uses the driver API declarations only.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "paladin/gpu/cuda_api.h"
#include "paladin/gpu/nvml_api.h"

namespace {

// CUDA_VERSION the runtime asks cuGetProcAddress for (CUDA 12.8).
constexpr int kRequestedVersion = 12080;
constexpr size_t kChunk = 1 << 20;

[[noreturn]] void Die(const std::string& why) {
  std::fflush(stdout);
  std::fprintf(stderr, "quota_client: %s\n", why.c_str());
  std::exit(1);
}

bool ParseSize(const std::string& text, uint64_t* bytes) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || value < 0 || text[0] == '-') return false;
  const std::string unit(end);
  double scale = 0;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit == "K" || unit == "KiB") {
    scale = 1024.0;
  } else if (unit == "M" || unit == "MiB") {
    scale = 1024.0 * 1024;
  } else if (unit == "G" || unit == "GiB") {
    scale = 1024.0 * 1024 * 1024;
  }
  if (scale == 0) return false;
  *bytes = static_cast<uint64_t>(value * scale + 0.5);
  return true;
}

uint64_t SizeArg(const std::string& step, const std::string& text) {
  uint64_t bytes = 0;
  if (!ParseSize(text, &bytes)) Die(step + ": '" + text + "' is not a size");
  return bytes;
}

uint64_t NumberArg(const std::string& step, const std::string& text) {
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || text[0] == '-') {
    Die(step + ": '" + text + "' is not a number");
  }
  return value;
}

// Resolves driver functions by dlsym or through cuGetProcAddress, on first use.
class Driver {
 public:
  Driver(bool proc_address, bool per_thread)
      : proc_address_(proc_address), per_thread_(per_thread) {
    handle_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (handle_ == nullptr) Die(std::string("cannot load libcuda.so.1: ") + dlerror());
    if (!proc_address_) return;
    get_proc_v2_ = reinterpret_cast<FnCuGetProcAddressV2>(dlsym(handle_, "cuGetProcAddress_v2"));
    get_proc_ = reinterpret_cast<FnCuGetProcAddress>(dlsym(handle_, "cuGetProcAddress"));
    if (get_proc_v2_ == nullptr && get_proc_ == nullptr) {
      Die("libcuda.so.1 has neither cuGetProcAddress_v2 nor cuGetProcAddress");
    }
  }

  // `symbol` is what dlsym looks up; `base` what cuGetProcAddress is asked for.
  template <typename Fn>
  Fn Get(const char* symbol, const char* base) {
    void* fn = nullptr;
    if (!proc_address_) {
      std::string name = symbol;
      if (per_thread_ && (name == "cuMemAllocAsync" || name == "cuMemFreeAsync")) name += "_ptsz";
      fn = dlsym(handle_, name.c_str());
      if (fn == nullptr) Die("dlsym(" + name + ") failed: " + dlerror());
      return reinterpret_cast<Fn>(fn);
    }
    const cuuint64_t flags =
        per_thread_ ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    CUresult r = CUDA_ERROR_NOT_SUPPORTED;
    if (get_proc_v2_ != nullptr) {
      CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
      r = get_proc_v2_(base, &fn, kRequestedVersion, flags, &status);
      if (r == CUDA_SUCCESS && status != CU_GET_PROC_ADDRESS_SUCCESS) {
        Die(std::string("cuGetProcAddress_v2(") + base + ") status " + std::to_string(status));
      }
    }
    // A driver older than 12.0 has only the first version (as the runtime falls back to it).
    if (r == CUDA_ERROR_NOT_SUPPORTED && get_proc_ != nullptr) {
      r = get_proc_(base, &fn, kRequestedVersion, flags);
    }
    if (r != CUDA_SUCCESS || fn == nullptr) {
      Die(std::string("cuGetProcAddress(") + base + ") failed: " + std::to_string(r));
    }
    return reinterpret_cast<Fn>(fn);
  }

 private:
  bool proc_address_;
  bool per_thread_;
  void* handle_ = nullptr;
  FnCuGetProcAddressV2 get_proc_v2_ = nullptr;
  FnCuGetProcAddress get_proc_ = nullptr;
};

// Declares a driver function resolved on first use: `name()` returns it.
#define DRIVER_FN(name, type, symbol, base)                            \
  type name() {                                                        \
    if (name##_ == nullptr) name##_ = driver_.Get<type>(symbol, base); \
    return name##_;                                                    \
  }                                                                    \
  type name##_ = nullptr

struct Allocation {
  CUdeviceptr ptr = 0;
  uint64_t bytes = 0;
};
struct VmmAllocation {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr ptr = 0;
  uint64_t bytes = 0;
};

class Client {
 public:
  Client(bool proc_address, bool per_thread)
      : driver_(proc_address, per_thread), proc_address_(proc_address) {}

  // Runs the step at args[*i], advancing *i past its arguments.
  void Step(const std::vector<std::string>& args, size_t* i) {
    const std::string step = args[(*i)++];
    auto arg = [&]() -> std::string {
      if (*i >= args.size()) Die(step + ": missing argument");
      return args[(*i)++];
    };
    if (step == "init") {
      Init();
    } else if (step == "alloc") {
      Alloc(SizeArg(step, arg()));
    } else if (step == "managed") {
      Managed(SizeArg(step, arg()));
    } else if (step == "pitch") {
      const uint64_t w = NumberArg(step, arg());
      Pitch(w, NumberArg(step, arg()));
    } else if (step == "free") {
      Free(NumberArg(step, arg()));
    } else if (step == "async") {
      Async(SizeArg(step, arg()));
    } else if (step == "freeasync") {
      FreeAsync(NumberArg(step, arg()));
    } else if (step == "threshold") {
      Threshold(SizeArg(step, arg()));
    } else if (step == "trim") {
      Trim(SizeArg(step, arg()));
    } else if (step == "vmm") {
      Vmm(SizeArg(step, arg()), false);
    } else if (step == "vmmearly") {
      Vmm(SizeArg(step, arg()), true);
    } else if (step == "vmmfree") {
      VmmFree(NumberArg(step, arg()), true);
    } else if (step == "vmmunmap") {
      VmmFree(NumberArg(step, arg()), false);
    } else if (step == "array") {
      const uint64_t w = NumberArg(step, arg());
      Array(w, NumberArg(step, arg()));
    } else if (step == "arrayfree") {
      ArrayFree(NumberArg(step, arg()));
    } else if (step == "info") {
      Info();
    } else if (step == "nvml") {
      Nvml();
    } else if (step == "ctx") {
      Ctx();
    } else if (step == "ctxfree") {
      CtxFree(NumberArg(step, arg()));
    } else if (step == "current") {
      const std::string which = arg();
      if (which == "primary") {
        Report("current primary", cuCtxSetCurrent()(primary_));
      } else {
        const uint64_t index = NumberArg(step, which);
        Report("current " + which, cuCtxSetCurrent()(At(contexts_, index, "current")));
      }
    } else if (step == "release") {
      Report("release", cuDevicePrimaryCtxRelease()(device_));
    } else if (step == "fill") {
      Fill(NumberArg(step, arg()));
    } else if (step == "check") {
      Check(NumberArg(step, arg()));
    } else if (step == "touch") {
      Touch(arg());
    } else if (step == "waitfor") {
      WaitFor(arg());
    } else if (step == "sleep") {
      const uint64_t ms = NumberArg(step, arg());
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      Print("sleep " + std::to_string(ms) + " ok");
    } else {
      Die("unknown step '" + step + "'");
    }
  }

 private:
  static void Print(const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  // "<what> ok" or "<what> error <r>"; returns whether it succeeded.
  static bool Report(const std::string& what, CUresult r) {
    Print(what + (r == CUDA_SUCCESS ? " ok" : " error " + std::to_string(r)));
    return r == CUDA_SUCCESS;
  }

  void Init() {
    CUresult r = cuInit()(0);
    if (r == CUDA_SUCCESS) r = cuDeviceGet()(&device_, 0);
    if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain()(&primary_, device_);
    if (r == CUDA_SUCCESS) r = cuCtxSetCurrent()(primary_);
    Report("init", r);
  }

  void Alloc(uint64_t bytes) {
    CUdeviceptr ptr = 0;
    if (Report("alloc " + std::to_string(bytes), cuMemAlloc()(&ptr, bytes))) {
      allocs_.push_back({ptr, bytes});
    }
  }

  void Managed(uint64_t bytes) {
    CUdeviceptr ptr = 0;
    if (Report("managed " + std::to_string(bytes),
               cuMemAllocManaged()(&ptr, bytes, CU_MEM_ATTACH_GLOBAL))) {
      allocs_.push_back({ptr, bytes});
    }
  }

  void Pitch(uint64_t width, uint64_t height) {
    CUdeviceptr ptr = 0;
    size_t pitch = 0;
    const std::string what = "pitch " + std::to_string(width) + " " + std::to_string(height);
    if (Report(what, cuMemAllocPitch()(&ptr, &pitch, width, height, 4))) {
      allocs_.push_back({ptr, static_cast<uint64_t>(pitch) * height});
    }
  }

  void Free(uint64_t index) {
    Allocation& a = At(allocs_, index, "free");
    if (Report("free " + std::to_string(index), cuMemFree()(a.ptr))) a.ptr = 0;
  }

  void Async(uint64_t bytes) {
    CUdeviceptr ptr = 0;
    if (Report("async " + std::to_string(bytes), cuMemAllocAsync()(&ptr, bytes, nullptr))) {
      asyncs_.push_back({ptr, bytes});
    }
  }

  void FreeAsync(uint64_t index) {
    Allocation& a = At(asyncs_, index, "freeasync");
    CUresult r = cuMemFreeAsync()(a.ptr, nullptr);
    if (r == CUDA_SUCCESS) {
      a.ptr = 0;
      r = cuStreamSynchronize()(nullptr);
    }
    Report("freeasync " + std::to_string(index), r);
  }

  CUresult DefaultPool(CUmemoryPool* pool) { return cuDeviceGetDefaultMemPool()(pool, device_); }

  void Threshold(uint64_t bytes) {
    CUmemoryPool pool = nullptr;
    CUresult r = DefaultPool(&pool);
    cuuint64_t value = bytes;
    if (r == CUDA_SUCCESS) {
      r = cuMemPoolSetAttribute()(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &value);
    }
    Report("threshold " + std::to_string(bytes), r);
  }

  void Trim(uint64_t keep) {
    CUmemoryPool pool = nullptr;
    CUresult r = DefaultPool(&pool);
    if (r == CUDA_SUCCESS) r = cuMemPoolTrimTo()(pool, keep);
    Report("trim " + std::to_string(keep), r);
  }

  // `release_early`: cuMemRelease right after mapping; the mapping keeps the memory alive.
  void Vmm(uint64_t bytes, bool release_early) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device_;
    const std::string what = (release_early ? "vmmearly " : "vmm ") + std::to_string(bytes);
    size_t granularity = 0;
    CUresult r =
        cuMemGetAllocationGranularity()(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS || granularity == 0) {
      Report(what + " (cuMemGetAllocationGranularity)", r == CUDA_SUCCESS ? CUDA_ERROR_UNKNOWN : r);
      return;
    }
    const uint64_t size = (bytes + granularity - 1) / granularity * granularity;
    VmmAllocation v{0, 0, size};
    r = cuMemCreate()(&v.handle, size, &prop, 0);
    if (r != CUDA_SUCCESS) {
      Report(what, r);
      return;
    }
    const char* stage = "cuMemAddressReserve";
    r = cuMemAddressReserve()(&v.ptr, size, 0, 0, 0);
    if (r == CUDA_SUCCESS) {
      stage = "cuMemMap";
      r = cuMemMap()(v.ptr, size, 0, v.handle, 0);
    }
    if (r == CUDA_SUCCESS) {
      stage = "cuMemSetAccess";
      CUmemAccessDesc access{};
      access.location = prop.location;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      r = cuMemSetAccess()(v.ptr, size, &access, 1);
    }
    if (r == CUDA_SUCCESS) {
      stage = "write/read";
      const unsigned char out = 0x5a;
      unsigned char in = 0;
      r = cuMemcpyHtoD()(v.ptr + size - 1, &out, 1);
      if (r == CUDA_SUCCESS) r = cuMemcpyDtoH()(&in, v.ptr + size - 1, 1);
      if (r == CUDA_SUCCESS && in != out) r = CUDA_ERROR_UNKNOWN;  // read back another byte
    }
    if (r == CUDA_SUCCESS && release_early) {
      stage = "cuMemRelease";
      r = cuMemRelease()(v.handle);
    }
    if (r != CUDA_SUCCESS) {
      Print(what + " error " + std::to_string(r) + " (" + stage + ")");
      return;
    }
    Print(what + " ok");
    vmms_.push_back(v);
  }

  // Unmaps VMM allocation `index` (of vmm and vmmearly together) and, with `release`, releases
  // its handle.
  void VmmFree(uint64_t index, bool release) {
    const char* step = release ? "vmmfree" : "vmmunmap";
    VmmAllocation& v = At(vmms_, index, step);
    CUresult r = cuMemUnmap()(v.ptr, v.bytes);
    if (r == CUDA_SUCCESS) r = cuMemAddressFree()(v.ptr, v.bytes);
    if (r == CUDA_SUCCESS && release) r = cuMemRelease()(v.handle);
    if (Report(std::string(step) + " " + std::to_string(index), r)) v = {};
  }

  void Array(uint64_t width, uint64_t height) {
    CUDA_ARRAY_DESCRIPTOR desc{};
    desc.Width = width;
    desc.Height = height;
    desc.Format = CU_AD_FORMAT_FLOAT;
    desc.NumChannels = 1;
    CUarray array = nullptr;
    if (Report("array " + std::to_string(width) + " " + std::to_string(height),
               cuArrayCreate()(&array, &desc))) {
      arrays_.push_back(array);
    }
  }

  void ArrayFree(uint64_t index) {
    CUarray& array = At(arrays_, index, "arrayfree");
    if (Report("arrayfree " + std::to_string(index), cuArrayDestroy()(array))) array = nullptr;
  }

  void Info() {
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    const CUresult r = cuMemGetInfo()(&free_bytes, &total_bytes);
    if (r != CUDA_SUCCESS) {
      Print("info error " + std::to_string(r));
      return;
    }
    Print("info free " + std::to_string(free_bytes) + " total " + std::to_string(total_bytes));
  }

  void Nvml() {
    void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (nvml == nullptr) Die(std::string("cannot load libnvidia-ml.so.1: ") + dlerror());
    auto init = reinterpret_cast<FnNvmlInit>(dlsym(nvml, "nvmlInit_v2"));
    auto by_index = reinterpret_cast<FnNvmlDeviceGetHandleByIndex>(
        dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"));
    auto memory =
        reinterpret_cast<FnNvmlDeviceGetMemoryInfo>(dlsym(nvml, "nvmlDeviceGetMemoryInfo"));
    if (init == nullptr || by_index == nullptr || memory == nullptr) {
      Die("libnvidia-ml.so.1 lacks nvmlInit_v2, nvmlDeviceGetHandleByIndex_v2 or "
          "nvmlDeviceGetMemoryInfo");
    }
    nvmlDevice_t device = nullptr;
    nvmlMemory_t info{};
    nvmlReturn_t r = init();
    if (r == NVML_SUCCESS) r = by_index(0, &device);
    if (r == NVML_SUCCESS) r = memory(device, &info);
    if (r != NVML_SUCCESS) {
      Print("nvml error " + std::to_string(r));
      return;
    }
    Print("nvml free " + std::to_string(info.free) + " used " + std::to_string(info.used) +
          " total " + std::to_string(info.total));
  }

  // cuCtxCreate: through dlsym the _v2 symbol; through cuGetProcAddress at 12.8 the driver hands
  // out cuCtxCreate_v4, whose null parameters mean the same as _v2's.
  void Ctx() {
    CUcontext ctx = nullptr;
    CUresult r;
    if (proc_address_mode()) {
      r = cuCtxCreateV4()(&ctx, nullptr, 0, device_);
    } else {
      r = cuCtxCreate()(&ctx, 0, device_);
    }
    if (Report("ctx", r)) {
      contexts_.push_back(ctx);
      cuCtxSetCurrent()(primary_);
    }
  }

  void CtxFree(uint64_t index) {
    CUcontext& ctx = At(contexts_, index, "ctxfree");
    if (Report("ctxfree " + std::to_string(index), cuCtxDestroy()(ctx))) ctx = nullptr;
    cuCtxSetCurrent()(primary_);
  }

  // The byte at `offset` of allocation `index`.
  static unsigned char Pattern(uint64_t index, uint64_t offset) {
    return static_cast<unsigned char>((offset * 131 + index * 7 + 1) & 0xff);
  }

  void Fill(uint64_t index) {
    const Allocation& a = At(allocs_, index, "fill");
    std::vector<unsigned char> buf(kChunk);
    CUresult r = CUDA_SUCCESS;
    for (uint64_t off = 0; off < a.bytes && r == CUDA_SUCCESS; off += kChunk) {
      const uint64_t n = a.bytes - off < kChunk ? a.bytes - off : kChunk;
      for (uint64_t k = 0; k < n; ++k) buf[k] = Pattern(index, off + k);
      r = cuMemcpyHtoD()(a.ptr + off, buf.data(), n);
    }
    Report("fill " + std::to_string(index), r);
  }

  void Check(uint64_t index) {
    const Allocation& a = At(allocs_, index, "check");
    std::vector<unsigned char> buf(kChunk);
    CUresult r = CUDA_SUCCESS;
    for (uint64_t off = 0; off < a.bytes && r == CUDA_SUCCESS; off += kChunk) {
      const uint64_t n = a.bytes - off < kChunk ? a.bytes - off : kChunk;
      r = cuMemcpyDtoH()(buf.data(), a.ptr + off, n);
      for (uint64_t k = 0; k < n && r == CUDA_SUCCESS; ++k) {
        if (buf[k] != Pattern(index, off + k)) {
          Print("check " + std::to_string(index) + " mismatch at " + std::to_string(off + k));
          return;
        }
      }
    }
    Report("check " + std::to_string(index), r);
  }

  static void Touch(const std::string& path) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) Die("touch " + path + ": " + std::strerror(errno));
    close(fd);
    Print("touch " + path + " ok");
  }

  static void WaitFor(const std::string& path) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    struct stat st {};
    while (stat(path.c_str(), &st) != 0) {
      if (std::chrono::steady_clock::now() > deadline) Die("waitfor " + path + ": timed out");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    Print("waitfor " + path + " ok");
  }

  template <typename T>
  static T& At(std::vector<T>& list, uint64_t index, const char* step) {
    if (index >= list.size()) {
      Die(std::string(step) + " " + std::to_string(index) + ": only " +
          std::to_string(list.size()) + " such allocation(s)");
    }
    return list[index];
  }

  bool proc_address_mode() const { return proc_address_; }

  Driver driver_;
  bool proc_address_;

  DRIVER_FN(cuInit, FnCuInit, "cuInit", "cuInit");
  DRIVER_FN(cuDeviceGet, FnCuDeviceGet, "cuDeviceGet", "cuDeviceGet");
  DRIVER_FN(cuDevicePrimaryCtxRetain, FnCuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",
            "cuDevicePrimaryCtxRetain");
  DRIVER_FN(cuDevicePrimaryCtxRelease, FnCuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2",
            "cuDevicePrimaryCtxRelease");
  DRIVER_FN(cuCtxSetCurrent, FnCuCtxSetCurrent, "cuCtxSetCurrent", "cuCtxSetCurrent");
  DRIVER_FN(cuCtxCreate, FnCuCtxCreate, "cuCtxCreate_v2", "cuCtxCreate");
  DRIVER_FN(cuCtxCreateV4, FnCuCtxCreateV4, "cuCtxCreate_v4", "cuCtxCreate");
  DRIVER_FN(cuCtxDestroy, FnCuCtxDestroy, "cuCtxDestroy_v2", "cuCtxDestroy");
  DRIVER_FN(cuMemAlloc, FnCuMemAlloc, "cuMemAlloc_v2", "cuMemAlloc");
  DRIVER_FN(cuMemAllocManaged, FnCuMemAllocManaged, "cuMemAllocManaged", "cuMemAllocManaged");
  DRIVER_FN(cuMemAllocPitch, FnCuMemAllocPitch, "cuMemAllocPitch_v2", "cuMemAllocPitch");
  DRIVER_FN(cuMemFree, FnCuMemFree, "cuMemFree_v2", "cuMemFree");
  DRIVER_FN(cuMemAllocAsync, FnCuMemAllocAsync, "cuMemAllocAsync", "cuMemAllocAsync");
  DRIVER_FN(cuMemFreeAsync, FnCuMemFreeAsync, "cuMemFreeAsync", "cuMemFreeAsync");
  DRIVER_FN(cuStreamSynchronize, FnCuStreamSynchronize, "cuStreamSynchronize",
            "cuStreamSynchronize");
  DRIVER_FN(cuDeviceGetDefaultMemPool, FnCuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool",
            "cuDeviceGetDefaultMemPool");
  DRIVER_FN(cuMemPoolSetAttribute, FnCuMemPoolSetAttribute, "cuMemPoolSetAttribute",
            "cuMemPoolSetAttribute");
  DRIVER_FN(cuMemPoolTrimTo, FnCuMemPoolTrimTo, "cuMemPoolTrimTo", "cuMemPoolTrimTo");
  DRIVER_FN(cuMemGetAllocationGranularity, FnCuMemGetAllocationGranularity,
            "cuMemGetAllocationGranularity", "cuMemGetAllocationGranularity");
  DRIVER_FN(cuMemCreate, FnCuMemCreate, "cuMemCreate", "cuMemCreate");
  DRIVER_FN(cuMemRelease, FnCuMemRelease, "cuMemRelease", "cuMemRelease");
  DRIVER_FN(cuMemAddressReserve, FnCuMemAddressReserve, "cuMemAddressReserve",
            "cuMemAddressReserve");
  DRIVER_FN(cuMemAddressFree, FnCuMemAddressFree, "cuMemAddressFree", "cuMemAddressFree");
  DRIVER_FN(cuMemMap, FnCuMemMap, "cuMemMap", "cuMemMap");
  DRIVER_FN(cuMemUnmap, FnCuMemUnmap, "cuMemUnmap", "cuMemUnmap");
  DRIVER_FN(cuMemSetAccess, FnCuMemSetAccess, "cuMemSetAccess", "cuMemSetAccess");
  DRIVER_FN(cuArrayCreate, FnCuArrayCreate, "cuArrayCreate_v2", "cuArrayCreate");
  DRIVER_FN(cuArrayDestroy, FnCuArrayDestroy, "cuArrayDestroy", "cuArrayDestroy");
  DRIVER_FN(cuMemGetInfo, FnCuMemGetInfo, "cuMemGetInfo_v2", "cuMemGetInfo");
  DRIVER_FN(cuMemcpyHtoD, FnCuMemcpyHtoD, "cuMemcpyHtoD_v2", "cuMemcpyHtoD");
  DRIVER_FN(cuMemcpyDtoH, FnCuMemcpyDtoH, "cuMemcpyDtoH_v2", "cuMemcpyDtoH");

  CUdevice device_ = 0;
  CUcontext primary_ = nullptr;
  std::vector<Allocation> allocs_;
  std::vector<Allocation> asyncs_;
  std::vector<VmmAllocation> vmms_;
  std::vector<CUarray> arrays_;
  std::vector<CUcontext> contexts_;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  bool proc_address = false;
  bool per_thread = false;
  size_t i = 0;
  for (; i < args.size() && args[i].rfind("--", 0) == 0; ++i) {
    if (args[i] == "--dlsym") {
      proc_address = false;
    } else if (args[i] == "--proc-address") {
      proc_address = true;
    } else if (args[i] == "--ptds") {
      per_thread = true;
    } else {
      Die("unknown option '" + args[i] + "' (expected --dlsym, --proc-address or --ptds)");
    }
  }
  Client client(proc_address, per_thread);
  while (i < args.size()) client.Step(args, &i);
  return 0;
}
