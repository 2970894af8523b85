#include "paladin/ckpt/gpu_checkpoint.h"

#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "paladin/gpu/nvml.h"

namespace paladin::ckpt {

namespace {

constexpr int kCallTimeoutMs = 300 * 1000;  // a 100+ GiB checkpoint at the driver's 1.6 GB/s

// Runs one driver call in a child process so that a call that never returns is killed after
// `timeout_ms` instead of hanging Paladin (the checkpoint API works by pid from any process).
FnCuInit g_init = nullptr;

template <typename Call>
CUresult Bounded(Call call, int timeout_ms) {
  int fds[2];
  if (pipe(fds) != 0) return CUDA_ERROR_OPERATING_SYSTEM;
  const pid_t child = fork();
  if (child < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  if (child == 0) {
    close(fds[0]);
    // The driver is initialised in the child only: a CUDA driver must not be used across fork.
    if (g_init != nullptr) g_init(0);
    const CUresult r = call();
    ssize_t ignored = write(fds[1], &r, sizeof r);
    (void)ignored;
    _exit(0);
  }
  close(fds[1]);
  pollfd p{fds[0], POLLIN, 0};
  CUresult r = CUDA_ERROR_TIMEOUT;
  if (poll(&p, 1, timeout_ms) > 0 && read(fds[0], &r, sizeof r) != sizeof r) {
    r = CUDA_ERROR_UNKNOWN;
  }
  close(fds[0]);
  if (r == CUDA_ERROR_TIMEOUT) kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return r;
}

}  // namespace

StatusOr<std::unique_ptr<GpuCheckpointer>> GpuCheckpointer::Load(const std::string& driver) {
  void* lib = dlopen(driver.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return NotFound("cannot load the CUDA driver (" + driver + "): " + dlerror());
  std::unique_ptr<GpuCheckpointer> g(new GpuCheckpointer());
  auto init = reinterpret_cast<FnCuInit>(dlsym(lib, "cuInit"));
  g->error_name_ = reinterpret_cast<FnCuGetErrorName>(dlsym(lib, "cuGetErrorName"));
  g->lock_ = reinterpret_cast<FnCuCheckpointProcessLock>(dlsym(lib, "cuCheckpointProcessLock"));
  g->checkpoint_ = reinterpret_cast<FnCuCheckpointProcessCheckpoint>(
      dlsym(lib, "cuCheckpointProcessCheckpoint"));
  g->restore_ =
      reinterpret_cast<FnCuCheckpointProcessRestore>(dlsym(lib, "cuCheckpointProcessRestore"));
  g->unlock_ =
      reinterpret_cast<FnCuCheckpointProcessUnlock>(dlsym(lib, "cuCheckpointProcessUnlock"));
  g->state_ =
      reinterpret_cast<FnCuCheckpointProcessGetState>(dlsym(lib, "cuCheckpointProcessGetState"));
  if (g->lock_ == nullptr || g->checkpoint_ == nullptr || g->restore_ == nullptr ||
      g->unlock_ == nullptr || g->state_ == nullptr) {
    return FailedPrecondition(driver +
                              " has no checkpoint API (cuCheckpointProcess*: driver 550 or newer)");
  }
  g_init = init;
  return g;
}

std::string GpuCheckpointer::Describe(const char* call, pid_t pid, CUresult r) const {
  const char* name = nullptr;
  if (error_name_ != nullptr) error_name_(r, &name);
  return std::string(call) + "(pid " + std::to_string(pid) +
         "): " + (name != nullptr ? name : "CUDA error " + std::to_string(r));
}

std::vector<pid_t> GpuCheckpointer::CudaProcesses(const std::vector<pid_t>& pids) const {
  std::vector<pid_t> cuda;
  for (pid_t pid : pids) {
    if (State(pid).ok()) cuda.push_back(pid);
  }
  return cuda;
}

StatusOr<CUprocessState> GpuCheckpointer::State(pid_t pid) const {
  CUprocessState s = CU_PROCESS_STATE_RUNNING;
  CUresult r = Bounded(
      [&] {
        CUresult got = state_(pid, &s);
        return got == CUDA_SUCCESS ? static_cast<CUresult>(-1 - s) : got;  // state in the result
      },
      30 * 1000);
  if (r < 0) return static_cast<CUprocessState>(-1 - r);
  if (r != CUDA_SUCCESS) return Internal(Describe("cuCheckpointProcessGetState", pid, r));
  return s;
}

Status GpuCheckpointer::Lock(pid_t pid, unsigned int timeout_ms) const {
  CUcheckpointLockArgs args{};
  args.timeoutMs = timeout_ms;
  CUresult r = Bounded([&] { return lock_(pid, &args); }, static_cast<int>(timeout_ms) + 5000);
  return r == CUDA_SUCCESS ? Status::Ok() : Internal(Describe("cuCheckpointProcessLock", pid, r));
}

Status GpuCheckpointer::Checkpoint(pid_t pid) const {
  CUcheckpointCheckpointArgs args{};
  CUresult r = Bounded([&] { return checkpoint_(pid, &args); }, kCallTimeoutMs);
  return r == CUDA_SUCCESS ? Status::Ok()
                           : Internal(Describe("cuCheckpointProcessCheckpoint", pid, r));
}

Status GpuCheckpointer::Restore(
    pid_t pid, const std::vector<std::pair<std::string, std::string>>& remap) const {
  std::vector<CUcheckpointGpuPair> pairs;
  for (const auto& [from, to] : remap) {
    CUcheckpointGpuPair pair{};
    if (!gpu::ParseGpuUuid(from, pair.oldUuid.bytes) ||
        !gpu::ParseGpuUuid(to, pair.newUuid.bytes)) {
      return InvalidArgument(std::string("GPU map ")
                                 .append(from)
                                 .append("=")
                                 .append(to)
                                 .append(": not GPU UUIDs (GPU-xxxxxxxx-…)"));
    }
    pairs.push_back(pair);
  }
  CUcheckpointRestoreArgs args{};
  args.gpuPairs = pairs.empty() ? nullptr : pairs.data();
  args.gpuPairsCount = static_cast<unsigned int>(pairs.size());
  CUresult r = Bounded([&] { return restore_(pid, &args); }, kCallTimeoutMs);
  return r == CUDA_SUCCESS ? Status::Ok()
                           : Internal(Describe("cuCheckpointProcessRestore", pid, r));
}

Status GpuCheckpointer::Unlock(pid_t pid) const {
  CUcheckpointUnlockArgs args{};
  CUresult r = Bounded([&] { return unlock_(pid, &args); }, 30 * 1000);
  return r == CUDA_SUCCESS ? Status::Ok() : Internal(Describe("cuCheckpointProcessUnlock", pid, r));
}

}  // namespace paladin::ckpt
