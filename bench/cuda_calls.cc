// Times the driver calls the quota interposer sits in front of: allocation + free, and kernel
// launches (which the interposer does not hook). Loads libcuda.so.1 the way frameworks do, so the
// same binary measures the plain driver and the interposed one, depending on the library path it
// is started with (bench/interposer_overhead.sh runs both, alternating, and prints the ratios).
//
// Prints one line per measurement: "<name> <median value> <unit>".
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "paladin/gpu/cuda_api.h"

namespace {

// An empty kernel, in PTX (the driver compiles it for whatever GPU it runs on).
const char kEmptyKernelPtx[] =
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry paladin_empty()\n{\n\tret;\n}\n";

typedef CUresult (*FnCuModuleLoadData)(CUmodule* module, const void* image);

template <typename Fn>
Fn Load(void* lib, const char* name) {
  auto fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (fn == nullptr) {
    std::fprintf(stderr, "cuda_calls: the driver lacks %s\n", name);
    std::exit(1);
  }
  return fn;
}

void Check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuda_calls: %s failed with %d\n", what, r);
    std::exit(1);
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Body>
double NanosPerCall(int calls, Body body) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) body();
  const auto end = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(end - start).count() / calls;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == nullptr) {
    std::fprintf(stderr, "cuda_calls: %s\n", dlerror());
    return 1;
  }
  auto cu_init = Load<FnCuInit>(lib, "cuInit");
  auto retain = Load<FnCuDevicePrimaryCtxRetain>(lib, "cuDevicePrimaryCtxRetain");
  auto set_current = Load<FnCuCtxSetCurrent>(lib, "cuCtxSetCurrent");
  auto mem_alloc = Load<FnCuMemAlloc>(lib, "cuMemAlloc_v2");
  auto mem_free = Load<FnCuMemFree>(lib, "cuMemFree_v2");
  auto load_data = Load<FnCuModuleLoadData>(lib, "cuModuleLoadData");
  auto get_function = Load<FnCuModuleGetFunction>(lib, "cuModuleGetFunction");
  auto launch = Load<FnCuLaunchKernel>(lib, "cuLaunchKernel");
  auto sync = Load<FnCuCtxSynchronize>(lib, "cuCtxSynchronize");

  Check(cu_init(0), "cuInit");
  CUcontext ctx = nullptr;
  Check(retain(&ctx, 0), "cuDevicePrimaryCtxRetain");
  Check(set_current(ctx), "cuCtxSetCurrent");
  CUmodule module = nullptr;
  Check(load_data(&module, kEmptyKernelPtx), "cuModuleLoadData");
  CUfunction kernel = nullptr;
  Check(get_function(&kernel, module, "paladin_empty"), "cuModuleGetFunction");

  struct Size {
    const char* name;
    size_t bytes;
  };
  const Size sizes[] = {{"alloc_free_1MiB", 1u << 20}, {"alloc_free_256MiB", 256u << 20}};
  for (const Size& size : sizes) {
    std::vector<double> samples;
    for (int r = 0; r < rounds; ++r) {
      samples.push_back(NanosPerCall(200, [&] {
        CUdeviceptr p = 0;
        Check(mem_alloc(&p, size.bytes), "cuMemAlloc");
        Check(mem_free(p), "cuMemFree");
      }));
    }
    std::printf("%s %.1f ns\n", size.name, Median(samples));
  }

  std::vector<double> rates;
  for (int r = 0; r < rounds; ++r) {
    const int launches = 20000;
    const double ns = NanosPerCall(launches, [&] {
      Check(launch(kernel, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), "cuLaunchKernel");
    });
    Check(sync(), "cuCtxSynchronize");
    rates.push_back(1e9 / ns);
  }
  std::printf("launch_rate %.0f per_s\n", Median(rates));
  return 0;
}
