// Processes as their /proc shows them. A process names itself by the first NSpid value of
// /proc/self/status (its host pid when /proc is the host's, its own namespace's pid when /proc is
// that namespace's, then with `view` naming the namespace), and is told apart from a later process
// with the same pid by its start time (field 22 of stat).
#ifndef PALADIN_EMUCUDA_HOST_PROCESS_H_
#define PALADIN_EMUCUDA_HOST_PROCESS_H_

#include <cstdint>
#include <string>

namespace paladin::emucuda {

struct HostProcess {
  uint32_t pid = 0;
  uint64_t start_time = 0;  // clock ticks after boot
  uint32_t view = 0;        // the PID namespace whose /proc numbers `pid`; 0 for the host's
};

// This process.
HostProcess SelfHostProcess();
// True when this process's /proc belongs to its own PID namespace, not the host's: then the
// pids it reads there are not host pids, and SelfHostProcess() is not its host identity.
bool ProcIsOwnPidNamespace();
// The calling thread's id in the same namespace as SelfHostProcess().pid.
uint32_t SelfThreadHostTid();
// The start time of `pid`; false when it does not exist or is a zombie.
bool LiveStartTime(uint32_t pid, uint64_t* start_time);
// True when `pid` (in this process's view) exists, is not a zombie and started at `start_time`.
bool HostProcessAlive(uint32_t pid, uint64_t start_time);
// True unless `process` is known to be gone: one of another view is judged from the host's view
// and counts as alive from inside another namespace, which cannot see it.
bool HostProcessAlive(const HostProcess& process);
// The pid to report for `process` to this process (NVML's process list): as recorded when the
// views agree, its host pid found from the host's view; 0 when this process cannot name it.
uint32_t PidSeenHere(const HostProcess& process);
// True when `pid` has a handler installed for `signo` (SigCgt in its status).
bool ProcessCatchesSignal(uint32_t pid, int signo);
// True when thread `tid` belongs to process `pid`.
bool ThreadBelongsTo(uint32_t pid, uint32_t tid);
// The first thread of `pid` whose name (comm) is `name`; 0 when there is none.
uint32_t FindThreadNamed(uint32_t pid, const char* name);

// Reads a small file (up to 64 KiB) whole; false when it cannot be opened.
bool ReadSmallFile(const std::string& path, std::string* text);

}  // namespace paladin::emucuda

#endif  // PALADIN_EMUCUDA_HOST_PROCESS_H_
