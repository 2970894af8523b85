// The driver calls of Paladin's test and demo workloads (paladin-demo-workload, ckpt_gpu): they
// load libcuda.so.1 as frameworks do (dlopen + dlsym), so they run on a real GPU or the emulated
// driver, under the quota interposer, and link nothing of Paladin's. A failure prints
// "ERROR <call> <code>" on stdout and exits 2.
#pragma once

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "paladin/gpu/cuda_api.h"
#include "paladin/gpu/uuid.h"

namespace paladin::workload {

inline void*& Driver() {
  static void* driver = nullptr;
  return driver;
}

// Loads libcuda.so.1 (or exits 2).
inline void LoadDriver() {
  Driver() = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (Driver() == nullptr) {
    std::printf("ERROR dlopen %s\n", dlerror());
    std::exit(2);
  }
}

template <typename Fn>
Fn Resolve(const char* name) {
  void* fn = dlsym(Driver(), name);
  if (fn == nullptr) {
    std::printf("ERROR dlsym %s\n", name);
    std::exit(2);
  }
  return reinterpret_cast<Fn>(fn);
}

inline void Check(const char* call, CUresult r) {
  if (r == CUDA_SUCCESS) return;
  std::printf("ERROR %s %d\n", call, r);
  std::fflush(stdout);
  std::exit(2);
}

inline std::string FormatUuid(const CUuuid& uuid) {
  char text[gpu::kUuidTextSize];
  gpu::FormatUuid(uuid.bytes, text);
  return text;
}

}  // namespace paladin::workload
