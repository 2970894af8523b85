// The files through which a checkpoint caller (the agent) and a CUDA process talk, in the control
// folder "<state path>.ctl/": the caller writes "<pid>.req" and signals the process; the process
// writes "<pid>.state" (its state, the sequence number of the last request it handled and that
// request's result). Both are small text files written atomically (temporary file + rename), so a
// reader never sees half a file and nobody holds a descriptor open between requests. Format:
// docs/emucuda.md.
#ifndef PALADIN_EMUCUDA_CONTROL_FILES_H_
#define PALADIN_EMUCUDA_CONTROL_FILES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "emucuda/runtime.h"
#include "paladin/gpu/cuda_api.h"

namespace paladin::emucuda {

enum class ControlOp { kQuery, kLock, kCheckpoint, kRestore, kUnlock };

struct ControlRequest {
  uint64_t seq = 0;
  ControlOp op = ControlOp::kQuery;
  uint32_t timeout_ms = 0;  // lock: how long to wait for the threads inside the driver
  std::vector<GpuPair> pairs;
  // restore: the emulated GPUs' state file of whoever restores the process (its node's GPUs),
  // which may not be the one named in the process's environment (the node it came from).
  std::string state_path;
  // The target as the caller sees it (its view of /proc is the host's). A process whose /proc is
  // its own PID namespace's cannot name itself by host pid: it answers under these.
  uint32_t host_pid = 0;
  uint32_t host_tid = 0;
  uint64_t start_time = 0;
};

struct ControlState {
  uint32_t pid = 0;  // host pid of the process
  uint64_t start_time = 0;
  uint32_t tid = 0;  // host tid of its control thread
  uint64_t seq = 0;  // last request handled
  CUprocessState state = CU_PROCESS_STATE_RUNNING;
  CUresult result = CUDA_SUCCESS;  // of that request
};

// The name of the control thread of a CUDA process (its comm).
inline constexpr const char* kControlThreadName = "paladin-emu-ctl";

// The signal a caller sends to a CUDA process after writing its request: SIGRTMAX-3.
int ControlSignal();

std::string RequestPath(const std::string& dir, uint32_t pid);
std::string StateFilePath(const std::string& dir, uint32_t pid);
// Creates the control folder if needed.
void EnsureControlDir(const std::string& dir);
bool WriteFileAtomically(const std::string& path, const std::string& text);
// The request in `dir` whose sequence number is `seq` and whose file is named after the host pid
// it carries; its path goes to *path. False when there is none.
bool FindRequestBySeq(const std::string& dir, uint64_t seq, ControlRequest* request,
                      std::string* path);

std::string FormatRequest(const ControlRequest& request);
bool ParseRequest(const std::string& text, ControlRequest* request);
std::string FormatState(const ControlState& state);
bool ParseState(const std::string& text, ControlState* state);

}  // namespace paladin::emucuda

#endif  // PALADIN_EMUCUDA_CONTROL_FILES_H_
