#include "paladin/ckpt/gpu_checkpoint.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "paladin/ckpt/subprocess.h"
#include "paladin/ckpt/workload.h"
#include "paladin/gpu/nvml.h"

namespace paladin::ckpt {

namespace {

constexpr int kCallTimeoutMs = 300 * 1000;  // a 100+ GiB checkpoint at the driver's 1.6 GB/s

int64_t MonotonicMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// A UUID as paladin-gpu-call reads it: 32 hexadecimal digits.
std::string HexBytes(const CUuuid& uuid) {
  std::string hex;
  char two[3];
  for (char byte : uuid.bytes) {
    std::snprintf(two, sizeof two, "%02x", static_cast<unsigned char>(byte));
    hex += two;
  }
  return hex;
}

}  // namespace

int GpuCallsAtOnce() {
  constexpr int kDefault = 8;
  const char* text = std::getenv("PALADIN_GPU_CALLS_AT_ONCE");
  if (text == nullptr || *text == '\0') return kDefault;
  char* end = nullptr;
  const long n = std::strtol(text, &end, 10);
  if (end != text && *end == '\0' && n >= 1 && n <= 64) return static_cast<int>(n);
  static std::once_flag said;
  std::call_once(said, [text] {
    std::fprintf(stderr,
                 "paladin: PALADIN_GPU_CALLS_AT_ONCE='%s' is not a count from 1 to 64; %d\n", text,
                 kDefault);
  });
  return kDefault;
}

Status ForEachProcessAtOnce(const std::vector<pid_t>& pids,
                            const std::function<Status(pid_t)>& call) {
  std::vector<Status> results(pids.size(), Status::Ok());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < pids.size();) results[i] = call(pids[i]);
  };
  const size_t helpers = std::min(pids.size(), static_cast<size_t>(GpuCallsAtOnce()));
  std::vector<std::thread> threads;
  for (size_t t = 1; t < helpers; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  for (const Status& s : results) {
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

// One driver call in paladin-gpu-call (src/ckpt/gpu_call.cc: why a program of its own), killed
// after `timeout_ms` instead of hanging Paladin (the checkpoint API works by pid from any
// process). Its answer: "result N" and, for a state, "state S" (into *state).
CUresult GpuCheckpointer::Call(const std::vector<std::string>& args, int timeout_ms,
                               int* state) const {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return CUDA_ERROR_OPERATING_SYSTEM;
  std::vector<std::string> words = {helper_, driver_};
  words.insert(words.end(), args.begin(), args.end());
  const ExecArgs exec(words, {});
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t child = -1;
  const int spawned =
      posix_spawn(&child, helper_.c_str(), &actions, nullptr, exec.argv(), exec.envp());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (spawned != 0) {
    close(fds[0]);
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  std::string out;
  const int64_t deadline = MonotonicMs() + timeout_ms;
  bool timed_out = true;
  for (int64_t left = timeout_ms; left > 0; left = deadline - MonotonicMs()) {
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    char chunk[256];
    const ssize_t n = read(fds[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      timed_out = false;  // the program closed its output: it has ended
      break;
    }
    out.append(chunk, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (timed_out) kill(child, SIGKILL);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) return CUDA_ERROR_TIMEOUT;
  int result = CUDA_ERROR_UNKNOWN;
  const size_t at = out.find("result ");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || at == std::string::npos ||
      std::sscanf(out.c_str() + at, "result %d", &result) != 1) {
    return CUDA_ERROR_UNKNOWN;
  }
  const size_t state_at = out.find("state ");
  if (state != nullptr && state_at != std::string::npos) {
    std::sscanf(out.c_str() + state_at, "state %d", state);
  }
  return static_cast<CUresult>(result);
}

StatusOr<std::unique_ptr<GpuCheckpointer>> GpuCheckpointer::Load(const std::string& driver) {
  void* lib = dlopen(driver.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return NotFound("cannot load the CUDA driver (" + driver + "): " + dlerror());
  for (const char* call :
       {"cuCheckpointProcessLock", "cuCheckpointProcessCheckpoint", "cuCheckpointProcessRestore",
        "cuCheckpointProcessUnlock", "cuCheckpointProcessGetState"}) {
    if (dlsym(lib, call) == nullptr) {
      return FailedPrecondition(
          driver + " has no checkpoint API (cuCheckpointProcess*: driver 550 or newer)");
    }
  }
  StatusOr<std::string> helper = FindHelperProgram("paladin-gpu-call", "PALADIN_GPU_CALL");
  if (!helper.ok()) return helper.status();
  std::unique_ptr<GpuCheckpointer> g(new GpuCheckpointer());
  g->error_name_ = reinterpret_cast<FnCuGetErrorName>(dlsym(lib, "cuGetErrorName"));
  g->driver_ = driver;
  g->helper_ = *helper;
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
  int state = -1;
  CUresult r = Call({"state", std::to_string(pid)}, 30 * 1000, &state);
  if (r != CUDA_SUCCESS) return Internal(Describe("cuCheckpointProcessGetState", pid, r));
  if (state < 0) return Internal(Describe("cuCheckpointProcessGetState", pid, CUDA_ERROR_UNKNOWN));
  return static_cast<CUprocessState>(state);
}

Status GpuCheckpointer::Lock(pid_t pid, unsigned int timeout_ms) const {
  CUresult r = Call({"lock", std::to_string(pid), std::to_string(timeout_ms)},
                    static_cast<int>(timeout_ms) + 5000);
  return r == CUDA_SUCCESS ? Status::Ok() : Internal(Describe("cuCheckpointProcessLock", pid, r));
}

Status GpuCheckpointer::Checkpoint(pid_t pid) const {
  CUresult r = Call({"checkpoint", std::to_string(pid)}, kCallTimeoutMs);
  return r == CUDA_SUCCESS ? Status::Ok()
                           : Internal(Describe("cuCheckpointProcessCheckpoint", pid, r));
}

Status GpuCheckpointer::Restore(
    pid_t pid, const std::vector<std::pair<std::string, std::string>>& remap) const {
  std::vector<std::string> args = {"restore", std::to_string(pid)};
  for (const auto& [from, to] : remap) {
    CUuuid old_uuid{};
    CUuuid new_uuid{};
    if (!gpu::ParseGpuUuid(from, old_uuid.bytes) || !gpu::ParseGpuUuid(to, new_uuid.bytes)) {
      return InvalidArgument(std::string("GPU map ")
                                 .append(from)
                                 .append("=")
                                 .append(to)
                                 .append(": not GPU UUIDs (GPU-xxxxxxxx-…)"));
    }
    args.push_back(HexBytes(old_uuid) + "=" + HexBytes(new_uuid));
  }
  CUresult r = Call(args, kCallTimeoutMs);
  return r == CUDA_SUCCESS ? Status::Ok()
                           : Internal(Describe("cuCheckpointProcessRestore", pid, r));
}

Status GpuCheckpointer::Unlock(pid_t pid) const {
  CUresult r = Call({"unlock", std::to_string(pid)}, 30 * 1000);
  return r == CUDA_SUCCESS ? Status::Ok() : Internal(Describe("cuCheckpointProcessUnlock", pid, r));
}

}  // namespace paladin::ckpt
