#include "emucuda/checkpoint_target.h"

#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "emucuda/config.h"
#include "emucuda/control_files.h"
#include "emucuda/host_process.h"
#include "emucuda/runtime.h"

namespace paladin::emucuda {
namespace {

constexpr uint32_t kDefaultLockTimeoutMs = 30000;

// Written by the signal handler: lock-free atomics in process-private memory.
std::atomic<uint64_t> g_signalled_seq{0};
std::atomic<uint32_t> g_wakeups{0};
std::atomic<uint32_t> g_started{0};

// What the control thread knows about its process. Guarded by TargetMutex().
struct Target {
  CUprocessState state = CU_PROCESS_STATE_RUNNING;
  uint64_t last_seq = 0;
  HostProcess self;
  uint32_t tid = 0;
  std::string dir;
};

Target& TheTarget() {
  static auto* target = new Target;
  return *target;
}

std::mutex& TargetMutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

void OnControlSignal(int /*signo*/, siginfo_t* info, void* /*context*/) {
  int saved_errno = errno;
  uint64_t seq = 0;
  std::memcpy(&seq, &info->si_value, sizeof(seq));
  g_signalled_seq.store(seq);
  g_wakeups.fetch_add(1);
  FutexWake(&g_wakeups);
  errno = saved_errno;
}

void WriteOwnState(const Target& target, CUresult result) {
  ControlState state{target.self.pid, target.self.start_time, target.tid,
                     target.last_seq, target.state,           result};
  EnsureControlDir(target.dir);
  WriteFileAtomically(StateFilePath(target.dir, target.self.pid), FormatState(state));
}

// After a restore the process may have another pid (and folder): its old state file goes, if it
// is still its own (on another machine, that pid may be someone else's).
void ForgetOldStateFile(const Target& before, const Target& now) {
  if (before.self.pid == 0 || (before.self.pid == now.self.pid && before.dir == now.dir)) return;
  std::string path = StateFilePath(before.dir, before.self.pid);
  std::string text;
  ControlState old;
  if (ReadSmallFile(path, &text) && ParseState(text, &old) &&
      old.start_time == before.self.start_time) {
    unlink(path.c_str());
  }
}

// Whose name the process answers under: its host pid as its /proc says, or, when its /proc is its
// own PID namespace's, the identity the caller put in the request (the caller sees the host's).
void SetIdentity(Target& target, const ControlRequest& request) {
  if (ProcIsOwnPidNamespace()) {
    target.self = {request.host_pid, request.start_time};
    target.tid = request.host_tid;
    return;
  }
  target.self = SelfHostProcess();
  target.tid = SelfThreadHostTid();
}

double RealtimeSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// The real driver's checkpoint and restore take time in proportion to the device memory they
// move (docs/emucuda.md, "Checkpoint API"): with a rate set, the emulated call takes as long, and
// says when it ran by the wall clock, so that a test sees whether the calls on a job's processes
// ran one after another or side by side.
void TakeDriverTime(const char* call, uint64_t bytes, uint64_t rate) {
  if (rate == 0) return;
  const double began = RealtimeSeconds();
  const double seconds = static_cast<double>(bytes) / static_cast<double>(rate);
  timespec left{
      static_cast<time_t>(seconds),
      static_cast<long>((seconds - static_cast<double>(static_cast<time_t>(seconds))) * 1e9)};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
  LogLine("%s of %llu bytes at %llu bytes/s ran from %.3f to %.3f", call,
          static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(rate), began,
          RealtimeSeconds());
}

CUresult Restore(Target& target, const ControlRequest& request) {
  Runtime& runtime = Runtime::Get();
  CUresult result = runtime.ReattachForRestore(request.pairs, request.state_path);
  if (result != CUDA_SUCCESS) return result;
  TakeDriverTime("restore", runtime.HeldBytes(), ProcessConfig().restore_rate);
  Target before = target;
  SetIdentity(target, request);
  target.dir = runtime.control_dir();
  target.state = CU_PROCESS_STATE_LOCKED;
  ForgetOldStateFile(before, target);
  return CUDA_SUCCESS;
}

CUresult Perform(Target& target, const ControlRequest& request) {
  Runtime& runtime = Runtime::Get();
  switch (request.op) {
    case ControlOp::kQuery:
      return CUDA_SUCCESS;
    case ControlOp::kLock: {
      if (target.state != CU_PROCESS_STATE_RUNNING) return CUDA_ERROR_ILLEGAL_STATE;
      uint32_t timeout = request.timeout_ms != 0 ? request.timeout_ms : kDefaultLockTimeoutMs;
      if (!runtime.gate().EnterExclusive(timeout)) return CUDA_ERROR_TIMEOUT;
      target.state = CU_PROCESS_STATE_LOCKED;
      return CUDA_SUCCESS;
    }
    case ControlOp::kCheckpoint:
      if (target.state != CU_PROCESS_STATE_LOCKED) return CUDA_ERROR_ILLEGAL_STATE;
      TakeDriverTime("checkpoint", runtime.HeldBytes(), ProcessConfig().checkpoint_rate);
      runtime.DetachForCheckpoint();
      target.state = CU_PROCESS_STATE_CHECKPOINTED;
      return CUDA_SUCCESS;
    case ControlOp::kRestore:
      if (target.state != CU_PROCESS_STATE_CHECKPOINTED) return CUDA_ERROR_ILLEGAL_STATE;
      return Restore(target, request);
    case ControlOp::kUnlock:
      if (target.state != CU_PROCESS_STATE_LOCKED) return CUDA_ERROR_ILLEGAL_STATE;
      target.state = CU_PROCESS_STATE_RUNNING;
      runtime.gate().ExitExclusive();
      return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

// The request that woke the control thread: the one under the host pid the process has now (after
// a CRIU restore it is not the one it had when it last wrote its state), or, when its /proc is
// its own namespace's and that pid is unknown to it, the one carrying the signal's sequence number.
bool TakeRequest(const std::string& dir, ControlRequest* request) {
  std::string path;
  std::string text;
  if (ProcIsOwnPidNamespace()) {
    if (!FindRequestBySeq(dir, g_signalled_seq.load(), request, &path)) return false;
  } else {
    path = RequestPath(dir, SelfHostProcess().pid);
    if (!ReadSmallFile(path, &text) || !ParseRequest(text, request)) return false;
  }
  unlink(path.c_str());
  return true;
}

void HandleRequest() {
  Target& target = TheTarget();
  const std::string dir = Runtime::Get().control_dir();
  ControlRequest request;
  if (!TakeRequest(dir, &request)) return;
  std::lock_guard<std::mutex> lock(TargetMutex());
  if (request.seq == target.last_seq) return;
  Target before = target;
  SetIdentity(target, request);
  if (target.self.pid == 0) {
    target = before;  // a request without the caller's view of us: nobody to answer to
    return;
  }
  if (target.self.pid != before.self.pid) {
    // Restored by CRIU under another pid: answer under the new one (the caller waits there).
    target.dir = dir;
    ForgetOldStateFile(before, target);
  }
  CUresult result = Perform(target, request);
  target.last_seq = request.seq;
  WriteOwnState(target, result);
}

void BlockAllButControlSignal() {
  sigset_t mask;
  sigfillset(&mask);
  sigdelset(&mask, ControlSignal());
  pthread_sigmask(SIG_SETMASK, &mask, nullptr);
}

void* ControlThread(void* /*unused*/) {
  BlockAllButControlSignal();
  pthread_setname_np(pthread_self(), kControlThreadName);
  {
    std::lock_guard<std::mutex> lock(TargetMutex());
    Target& target = TheTarget();
    target.dir = Runtime::Get().control_dir();
    // A process that cannot name itself by host pid writes no state until a caller names it:
    // the caller finds its control thread by name meanwhile.
    if (!ProcIsOwnPidNamespace()) {
      target.self = SelfHostProcess();
      target.tid = SelfThreadHostTid();
      WriteOwnState(target, CUDA_SUCCESS);
    }
  }
  g_started.store(1);
  FutexWake(&g_started);
  uint32_t seen = 0;
  while (true) {
    uint32_t now = g_wakeups.load();
    if (now == seen) {
      FutexWait(&g_wakeups, seen);
      continue;
    }
    seen = now;
    HandleRequest();
  }
  return nullptr;
}

void InstallHandler() {
  struct sigaction action {};
  action.sa_sigaction = &OnControlSignal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(ControlSignal(), &action, nullptr);
}

}  // namespace

void StartCheckpointControl() {
  InstallHandler();
  pthread_t thread;
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attributes, size_t{256} << 10);
  int error = pthread_create(&thread, &attributes, &ControlThread, nullptr);
  pthread_attr_destroy(&attributes);
  if (error != 0) {
    LogLine("cannot start the checkpoint control thread; checkpoints of this process will fail");
    return;
  }
  // The state file says "RUNNING" before cuInit returns, so a caller may lock at once.
  for (int waited_ms = 0; g_started.load() == 0 && waited_ms < 2000; ++waited_ms) {
    timespec ms{0, 1000000};
    nanosleep(&ms, nullptr);
  }
}

void RemoveOwnStateFile() {
  std::unique_lock<std::mutex> lock(TargetMutex(), std::try_to_lock);
  if (!lock.owns_lock() || TheTarget().dir.empty() || TheTarget().self.pid == 0) return;
  unlink(StateFilePath(TheTarget().dir, TheTarget().self.pid).c_str());
}

}  // namespace paladin::emucuda
