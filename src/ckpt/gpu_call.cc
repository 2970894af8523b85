// paladin-gpu-call: one call of the CUDA driver's checkpoint API, made by a program of its own
// (ckpt::GpuCheckpointer starts it for every call and kills it past the call's time limit).
//
// Why a program and not a fork of the caller: the caller (the node agent) has many threads, and
// a forked child inherits every lock another thread held at that instant (a sanitizer's allocator,
// a library's mutex), so its first allocation can wait forever. A program started afresh holds
// none, and the driver is initialised in it only (a CUDA driver must not be used across fork).
//
// Usage: paladin-gpu-call DRIVER OP PID [ARG...]
//   DRIVER: the library to load (libcuda.so.1, or the emulated driver's path).
//   OP: state | lock TIMEOUT_MS | checkpoint | restore [OLD=NEW ...] | unlock
//       (OLD, NEW: GPU UUIDs as 32 hexadecimal digits, the pairs a restore remaps).
// Prints "result N" (the CUresult) and, for state, "state S"; exits 0 when it made the call, 2
// when the arguments are wrong or the driver lacks the call.
//
// Plain flags, no sanitizers, no Paladin libraries (only the header of the driver's types).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "paladin/gpu/cuda_api.h"

namespace {

int Usage(const char* why) {
  std::fprintf(stderr, "paladin-gpu-call: %s\nusage: paladin-gpu-call DRIVER OP PID [ARG...]\n",
               why);
  return 2;
}

// LEN characters at HEX: 32 hexadecimal digits, the 16 bytes of a UUID.
bool ParseUuid(const char* hex, size_t len, CUuuid* uuid) {
  if (len != 2 * sizeof(uuid->bytes)) return false;
  for (size_t i = 0; i < sizeof(uuid->bytes); ++i) {
    unsigned int byte = 0;
    if (std::sscanf(hex + 2 * i, "%2x", &byte) != 1) return false;
    uuid->bytes[i] = static_cast<char>(byte);
  }
  return true;
}

void* Symbol(void* lib, const char* name) { return lib != nullptr ? dlsym(lib, name) : nullptr; }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return Usage("missing arguments");
  const char* op = argv[2];
  char* end = nullptr;
  const long pid = std::strtol(argv[3], &end, 10);
  if (*end != '\0' || pid <= 0) return Usage("PID is not a process id");
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "paladin-gpu-call: cannot load %s: %s\n", argv[1], dlerror());
    return 2;
  }
  if (auto init = reinterpret_cast<FnCuInit>(Symbol(lib, "cuInit"))) init(0);
  CUresult r = CUDA_SUCCESS;
  if (std::strcmp(op, "state") == 0) {
    auto call =
        reinterpret_cast<FnCuCheckpointProcessGetState>(Symbol(lib, "cuCheckpointProcessGetState"));
    if (call == nullptr) return Usage("the driver has no cuCheckpointProcessGetState");
    CUprocessState state = CU_PROCESS_STATE_RUNNING;
    r = call(static_cast<int>(pid), &state);
    if (r == CUDA_SUCCESS) std::printf("state %d\n", static_cast<int>(state));
  } else if (std::strcmp(op, "lock") == 0) {
    auto call = reinterpret_cast<FnCuCheckpointProcessLock>(Symbol(lib, "cuCheckpointProcessLock"));
    if (call == nullptr || argc != 5) return Usage("lock: the driver's call or TIMEOUT_MS missing");
    CUcheckpointLockArgs args{};
    args.timeoutMs = static_cast<unsigned int>(std::strtoul(argv[4], nullptr, 10));
    r = call(static_cast<int>(pid), &args);
  } else if (std::strcmp(op, "checkpoint") == 0) {
    auto call = reinterpret_cast<FnCuCheckpointProcessCheckpoint>(
        Symbol(lib, "cuCheckpointProcessCheckpoint"));
    if (call == nullptr) return Usage("the driver has no cuCheckpointProcessCheckpoint");
    CUcheckpointCheckpointArgs args{};
    r = call(static_cast<int>(pid), &args);
  } else if (std::strcmp(op, "restore") == 0) {
    auto call =
        reinterpret_cast<FnCuCheckpointProcessRestore>(Symbol(lib, "cuCheckpointProcessRestore"));
    if (call == nullptr) return Usage("the driver has no cuCheckpointProcessRestore");
    std::vector<CUcheckpointGpuPair> pairs;
    for (int i = 4; i < argc; ++i) {
      const char* equals = std::strchr(argv[i], '=');
      CUcheckpointGpuPair pair{};
      if (equals == nullptr) return Usage("restore: a pair is not OLD=NEW");
      if (!ParseUuid(argv[i], static_cast<size_t>(equals - argv[i]), &pair.oldUuid) ||
          !ParseUuid(equals + 1, std::strlen(equals + 1), &pair.newUuid)) {
        return Usage("restore: a UUID is not 32 hexadecimal digits");
      }
      pairs.push_back(pair);
    }
    CUcheckpointRestoreArgs args{};
    args.gpuPairs = pairs.empty() ? nullptr : pairs.data();
    args.gpuPairsCount = static_cast<unsigned int>(pairs.size());
    r = call(static_cast<int>(pid), &args);
  } else if (std::strcmp(op, "unlock") == 0) {
    auto call =
        reinterpret_cast<FnCuCheckpointProcessUnlock>(Symbol(lib, "cuCheckpointProcessUnlock"));
    if (call == nullptr) return Usage("the driver has no cuCheckpointProcessUnlock");
    CUcheckpointUnlockArgs args{};
    r = call(static_cast<int>(pid), &args);
  } else {
    return Usage("OP is none of state, lock, checkpoint, restore, unlock");
  }
  std::printf("result %d\n", static_cast<int>(r));
  return std::fflush(stdout) == 0 ? 0 : 2;
}
