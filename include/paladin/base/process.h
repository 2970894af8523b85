// A process's identity as /proc shows it: its pid in the view it was read from, its start time
// (so a reused pid is never taken for a live process), its pid in its own PID namespace (kept
// by a restore) and which namespaces those are. The accounting region records it per process
// (docs/formats/quota-region.md); the checkpointer, the emulated driver and the node agent judge
// processes by it. Exception-free and position-independent (paladin/base): the preloaded
// libraries use it too.
#ifndef PALADIN_BASE_PROCESS_H_
#define PALADIN_BASE_PROCESS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace paladin::base {

// A process's identity: its pid as the /proc it was read from numbers it and its start time
// (clock ticks since boot), so that a reused pid is never mistaken for a live process. A job
// whose /proc is its own PID namespace's cannot see host pids: its processes name themselves in
// their namespace, and `view` says which (docs/formats/quota-region.md).
struct ProcessId {
  uint32_t pid = 0;
  uint64_t start_time = 0;
  uint32_t ns_pid = 0;  // inside the workload's PID namespace: the same after a restore
  // The PID namespace (its inode number) whose /proc `pid` was read from; 0 for the host's.
  uint32_t view = 0;
  // The process's own PID namespace (inode number); 0 when unknown.
  uint32_t pid_namespace = 0;
};

// This process's pid (first NSpid entry of /proc/self/status: the host pid unless /proc is its
// own namespace's), namespace pid (last entry), start time and view; ProcessIdOf reads another
// process's ("1234") in this process's view.
ProcessId SelfProcessId();
ProcessId ProcessIdOf(const std::string& proc_name);
// The PID namespace (inode number) of this process's /proc when that is its own namespace's;
// 0 when it is the host's.
uint32_t OwnProcView();
// True when `id` names a process that still exists (same pid, same start time). A process of
// another view is looked up from the host's view; from inside a namespace it cannot be seen and
// counts as alive (its own namespace or the host judges it).
bool ProcessAlive(const ProcessId& id);
// True when `id` is alive but can no longer run its own code: it is in exit, or a SIGKILL is
// pending. False when it cannot be judged from this view.
bool ProcessDying(const ProcessId& id);
// The host pid of `id` (of any view) as seen from the host's view; 0 when it is not alive or
// this process's /proc is not the host's.
uint32_t HostPidOf(const ProcessId& id);

// `root` and every process below it (children first found first), as pids of this process's
// view, from /proc; empty when `root` is gone.
std::vector<uint32_t> ProcessTree(uint32_t root);

}  // namespace paladin::base

#endif  // PALADIN_BASE_PROCESS_H_
