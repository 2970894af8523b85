// The checkpoint API as a caller (the node agent) uses it on another process, by host pid:
// write the request file, signal the process, wait for its state file to show the request done.
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "emucuda/config.h"
#include "emucuda/control_files.h"
#include "emucuda/driver.h"
#include "emucuda/entry_points.h"
#include "emucuda/host_process.h"
#include "emucuda/runtime.h"

namespace paladin::emucuda {
namespace {

constexpr int kCheckpointIntroduced = 12080;
constexpr uint32_t kDefaultWaitMs = 30000;
constexpr uint32_t kQueryWaitMs = 2000;
constexpr uint32_t kPollMs = 2;

std::string CallerControlDir() { return ControlDir(ProcessConfig().state_path); }

uint64_t RealtimeNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

void SleepMs(uint32_t ms) {
  timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
}

// The state file of `pid`, when it was written by the process that has that pid now.
bool ReadLiveState(const std::string& dir, uint32_t pid, ControlState* state) {
  std::string text;
  return ReadSmallFile(StateFilePath(dir, pid), &text) && ParseState(text, state) &&
         state->pid == pid && HostProcessAlive(pid, state->start_time);
}

// The thread to signal, so that the workload's own threads are never interrupted: the control
// thread the state file names, else the one named so (a process just restored by CRIU has new
// pids and no state file yet); 0 when neither is found.
uint32_t ControlThreadOf(uint32_t pid, uint32_t known_tid) {
  if (known_tid != 0 && ThreadBelongsTo(pid, known_tid)) return known_tid;
  return FindThreadNamed(pid, kControlThreadName);
}

// Signals thread `tid` of `pid` (the whole process when tid is 0) with the request's sequence
// number, by which a process that cannot name itself by host pid finds its request.
bool SendSignal(uint32_t pid, uint32_t tid, uint64_t seq) {
  union sigval value {};
  static_assert(sizeof(value) == sizeof(seq));
  std::memcpy(&value, &seq, sizeof(seq));  // the whole 64-bit value travels in sival_ptr
  if (tid != 0) {
    siginfo_t info{};
    info.si_signo = ControlSignal();
    info.si_code = SI_QUEUE;
    info.si_pid = getpid();
    info.si_uid = getuid();
    info.si_value = value;
    if (syscall(SYS_rt_tgsigqueueinfo, pid, tid, ControlSignal(), &info) == 0) return true;
  }
  return sigqueue(static_cast<pid_t>(pid), ControlSignal(), value) == 0;
}

uint64_t MonotonicMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000u + static_cast<uint64_t>(ts.tv_nsec) / 1000000u;
}

// Waits up to `wait_ms` of real time (a busy machine stretches every sleep: counting polls would
// stretch the limit with them).
CUresult AwaitResult(const std::string& dir, uint32_t pid, uint64_t seq, uint32_t wait_ms) {
  const uint64_t deadline = MonotonicMs() + wait_ms;
  for (uint32_t polls = 0;; ++polls) {
    std::string text;
    ControlState state;
    if (ReadSmallFile(StateFilePath(dir, pid), &text) && ParseState(text, &state) &&
        state.seq == seq) {
      return state.result;
    }
    if (MonotonicMs() >= deadline) return CUDA_ERROR_TIMEOUT;
    uint64_t start_time = 0;
    if (polls % 50 == 0 && !LiveStartTime(pid, &start_time)) return CUDA_ERROR_INVALID_VALUE;
    SleepMs(kPollMs);
  }
}

CUresult RunOp(int pid, ControlRequest request, uint32_t wait_ms) {
  if (pid <= 0) return CUDA_ERROR_INVALID_VALUE;
  auto target = static_cast<uint32_t>(pid);
  // Only a process whose emulated driver installed its handler may get the signal (for any
  // other, SIGRTMAX-3 would be fatal) and only one with a control thread can answer (a child
  // forked from a CUDA process inherits the handler, not the thread).
  if (!ProcessCatchesSignal(target, ControlSignal()) ||
      FindThreadNamed(target, kControlThreadName) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::string dir = CallerControlDir();
  ControlState known;
  bool live = ReadLiveState(dir, target, &known);
  request.seq = RealtimeNs();
  if (live && request.seq <= known.seq) request.seq = known.seq + 1;
  // The target as this caller sees it: a target whose /proc is its own namespace's answers
  // under these, so that ReadLiveState (pid and start time) holds for it.
  const uint32_t tid = ControlThreadOf(target, live ? known.tid : 0);
  request.host_pid = target;
  request.host_tid = tid;
  if (tid == 0 || !LiveStartTime(target, &request.start_time)) return CUDA_ERROR_INVALID_VALUE;
  EnsureControlDir(dir);
  if (!WriteFileAtomically(RequestPath(dir, target), FormatRequest(request))) {
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  if (!SendSignal(target, tid, request.seq)) return CUDA_ERROR_INVALID_VALUE;
  return AwaitResult(dir, target, request.seq, wait_ms);
}

CUresult Simple(int pid, ControlOp op) {
  ControlRequest request;
  request.op = op;
  return RunOp(pid, request, kDefaultWaitMs);
}

// The state of `pid`; asks the process (a query request) when its state file is missing or
// stale, as after a CRIU restore under a new pid.
CUresult CurrentState(int pid, ControlState* state) {
  if (pid <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::string dir = CallerControlDir();
  if (ReadLiveState(dir, static_cast<uint32_t>(pid), state)) return CUDA_SUCCESS;
  ControlRequest query;
  query.op = ControlOp::kQuery;
  if (RunOp(pid, query, kQueryWaitMs) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  return ReadLiveState(dir, static_cast<uint32_t>(pid), state) ? CUDA_SUCCESS
                                                               : CUDA_ERROR_INVALID_VALUE;
}

}  // namespace
}  // namespace paladin::emucuda

using paladin::emucuda::ControlOp;
using paladin::emucuda::ControlRequest;
using paladin::emucuda::ControlState;
using paladin::emucuda::kCheckpointIntroduced;

EMU_EXPORT CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs* args) {
  EMU_REQUIRE_DRIVER(kCheckpointIntroduced);
  ControlRequest request;
  request.op = ControlOp::kLock;
  request.timeout_ms = args != nullptr ? args->timeoutMs : 0;
  uint32_t wait_ms =
      (request.timeout_ms != 0 ? request.timeout_ms : paladin::emucuda::kDefaultWaitMs) + 2000;
  return paladin::emucuda::RunOp(pid, request, wait_ms);
}

EMU_EXPORT CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs* /*args*/) {
  EMU_REQUIRE_DRIVER(kCheckpointIntroduced);
  return paladin::emucuda::Simple(pid, ControlOp::kCheckpoint);
}

EMU_EXPORT CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs* args) {
  EMU_REQUIRE_DRIVER(kCheckpointIntroduced);
  ControlRequest request;
  request.op = ControlOp::kRestore;
  // The process joins the emulated GPUs of whoever restores it (a line of text: no newline), at
  // the path it sees them at: PALADIN_EMU_TARGET_STATE when the caller's path is not the
  // target's (a container's mount of the node's state file), else the caller's own.
  const char* target_view = std::getenv("PALADIN_EMU_TARGET_STATE");
  const std::string state_path = target_view != nullptr && *target_view != '\0'
                                     ? std::string(target_view)
                                     : paladin::emucuda::StatePathFromEnv();
  if (state_path.find('\n') == std::string::npos) request.state_path = state_path;
  if (args != nullptr && args->gpuPairsCount > 0) {
    if (args->gpuPairs == nullptr || args->gpuPairsCount > 64) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < args->gpuPairsCount; ++i) {
      request.pairs.push_back({args->gpuPairs[i].oldUuid, args->gpuPairs[i].newUuid});
    }
  }
  return paladin::emucuda::RunOp(pid, request, paladin::emucuda::kDefaultWaitMs);
}

EMU_EXPORT CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs* /*args*/) {
  EMU_REQUIRE_DRIVER(kCheckpointIntroduced);
  return paladin::emucuda::Simple(pid, ControlOp::kUnlock);
}

EMU_EXPORT CUresult cuCheckpointProcessGetState(int pid, CUprocessState* state) {
  EMU_REQUIRE_DRIVER(kCheckpointIntroduced);
  if (state == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ControlState current;
  CUresult result = paladin::emucuda::CurrentState(pid, &current);
  if (result == CUDA_SUCCESS) *state = current.state;
  return result;
}

EMU_EXPORT CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int* tid) {
  EMU_REQUIRE_DRIVER(kCheckpointIntroduced);
  if (tid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ControlState current;
  CUresult result = paladin::emucuda::CurrentState(pid, &current);
  if (result == CUDA_SUCCESS) *tid = static_cast<int>(current.tid);
  return result;
}
