// Starting a workload the way it can later be checkpointed and restored anywhere: in its own PID
// namespace (it is pid 1 there and leads its own session, so CRIU can recreate its pids on any
// node), its own mount namespace with a /proc of its own and its own System V IPC namespace
// (docs/ckpt.md, "What a job sees"), in its own cgroup, with stdin from /dev/null and stdout/stderr
// appended to log files in its run directory. A workload that runs as another, unprivileged user
// has paladin-workload-init (root) as that pid 1 and runs as its only child (pid 2): CRIU can dump
// a tree whose root is root, not one whose root is unprivileged (docs/ckpt.md). The job record
// (run_dir/job.json) says where everything is; `paladin checkpoint NAME` finds jobs by it. Format:
// docs/formats/job.md.
#ifndef PALADIN_CKPT_WORKLOAD_H_
#define PALADIN_CKPT_WORKLOAD_H_

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "paladin/base/status.h"

namespace paladin::base {
class CgroupsLock;
}  // namespace paladin::base

namespace paladin::ckpt {

// Where a job's processes are, as its record (job.json's "state") says.
enum class RunState {
  kRunning,        // running
  kFrozen,         // stopped by FreezeJob (a gang's coordinated cut), resumed by ThawJob
  kCheckpointing,  // being dumped, to be killed after (its image is being finished)
  kCheckpointed,   // dumped and killed: its image is the way back
  kMoving,         // a migration took it; the source's copy is the mover's to settle
  kMoved,          // its migration committed: it runs elsewhere
  kStopped,        // restored or left stopped (a move's copy before it resumes)
};
// Every state, once (the parser and the tests walk it).
inline constexpr std::array<RunState, 7> kAllRunStates = {
    RunState::kRunning, RunState::kFrozen, RunState::kCheckpointing, RunState::kCheckpointed,
    RunState::kMoving,  RunState::kMoved,  RunState::kStopped};
// job.json's name of a state ("running", "frozen", ...).
std::string_view RunStateName(RunState state);
// The state of that name; nullopt for any other text.
std::optional<RunState> ParseRunState(std::string_view name);

struct JobRecord {
  std::string name;
  std::vector<std::string> command;
  std::string cwd;
  std::string run_dir;
  int64_t pid = 0;             // host pid of the tree's root
  bool pid_namespace = false;  // the root is pid 1 of its own namespace
  std::string cgroup;          // the group's name under paladin/ ("" for none)
  std::string stdout_log;
  std::string stderr_log;
  RunState state = RunState::kRunning;
  std::string image;  // the last checkpoint image
  // GPU: "" (none), "real" or "emulated"; the region when the workload has a quota.
  std::string gpu;
  std::string region;
  std::string emu_state;
  std::string emu_gpus;
  // The processes the job (or its user) had stopped when it was last dumped, by their pid in the
  // job's PID namespace: a resume leaves them stopped.
  std::vector<int64_t> stopped;
  // The network namespace the job was started in when it is not the launcher's (a rank's own
  // network, rank_net.h): its file, e.g. /run/netns/NAME. "" for the launcher's network. A
  // checkpoint keeps the namespace out of the image (docs/distributed.md).
  std::string net_ns;
};

Status WriteJob(const JobRecord& job);  // run_dir/job.json
StatusOr<JobRecord> ReadJob(const std::string& run_dir);
// Removes `job`'s run directory unless another copy of the job runs from it now (a copy restored
// there on this machine: the record there names another pid), after a restore in flight has
// written its record (base::CgroupsLock, exclusive). Whether it removed it.
bool RemoveRunDirUnlessTaken(const JobRecord& job);
// The same, for a caller that holds the lock already.
bool RemoveRunDirUnlessTaken(const JobRecord& job, const base::CgroupsLock& held);
// The same record at another path (the node agent keeps its own copy where jobs cannot write).
Status WriteJobFile(const JobRecord& job, const std::string& path);
StatusOr<JobRecord> ReadJobFile(const std::string& path);

// The parent of run directories: $PALADIN_RUN_DIR, else $XDG_RUNTIME_DIR/paladin-UID, else
// /tmp/paladin-UID.
std::string RunBase();
// A job by name (the newest run directory with that name) or by the host pid of its root.
StatusOr<JobRecord> FindJob(const std::string& name_or_pid);

struct WorkloadSpec {
  std::vector<std::string> command;
  // The workload's environment: `env` over a base, this process's environment when
  // `inherit_env`, else only a fixed PATH (the node agent: nothing of its own reaches a job). A
  // later entry replaces an earlier one of the same name. It reaches only the workload's own
  // process, after the switch of user: under paladin-workload-init, through a descriptor that
  // init reads and closes; init itself runs as root with a fixed environment.
  std::vector<std::pair<std::string, std::string>> env;
  bool inherit_env = true;
  std::string stdout_log;
  std::string stderr_log;
  bool pid_namespace = true;
  // With the PID namespace: a mount namespace of the job's own (a private copy of the caller's,
  // with a /proc of the job's PID namespace), and a System V IPC namespace of its own
  // (docs/ckpt.md, "What a job sees"). Without them where the kernel refuses, with a warning.
  bool own_proc = true;
  bool own_ipc = true;
  // With its own mounts: a /dev/shm of its own (a fresh tmpfs in place of the host's), so that
  // its POSIX shared memory and named semaphores are the job's, dumped and moved with it, as
  // System V IPC is with own_ipc (docs/distributed.md). Jobs on emulated GPUs keep the host's:
  // the emulated driver meets the node there.
  bool own_shm = true;
  std::string cgroup;  // created if non-empty
  // Optional: the working directory (default: the caller's), and the user and group the workload
  // runs as (-1: the caller's). Switching needs root; supplementary groups are dropped. A
  // workload in a PID namespace that runs as a user other than root (uid > 0) is started under
  // paladin-workload-init, which runs in the logs' folder (the run directory: CRIU's parasite
  // creates proc.crtools there during a dump).
  std::string cwd;
  int64_t uid = -1;
  int64_t gid = -1;
  // The node agent's lease (include/paladin/ckpt/fence.h), or -1. With one, every workload in a
  // PID namespace (a root one too) runs under paladin-workload-init, which gets it as descriptor
  // fence::kLeaseFd and stops the job while the lease is out.
  int lease_fd = -1;
  // A network namespace file (a rank's, rank_net.h: /run/netns/NAME) the workload joins before it
  // starts; "" to stay in the launcher's. It must be a network namespace: anything else is
  // refused.
  std::string net_ns;
};

struct StartedWorkload {
  pid_t pid = 0;  // the tree's root: paladin-workload-init when `init`
  bool pid_namespace = false;
  bool init = false;                  // the command runs as the only child of paladin-workload-init
  bool fenced = false;                // ... which holds the lease (WorkloadSpec::lease_fd)
  std::string cgroup;                 // "" when none could be made
  std::vector<std::string> warnings;  // what could not be set up, for the user
};

// Starts the workload. Without the privileges for a PID namespace or a cgroup it starts it
// without them and says so in `warnings`; so too when an unprivileged workload needs
// paladin-workload-init and it cannot be found (the job runs, but CRIU cannot dump it).
StatusOr<StartedWorkload> StartWorkload(const WorkloadSpec& spec);

// One of Paladin's helper programs, NAME: the path in the environment variable ENV (when set),
// else in $PALADIN_LIB_DIR, else next to the running program, else in ../lib/paladin from it
// (where `cmake --install` puts it).
StatusOr<std::string> FindHelperProgram(const std::string& name, const char* env);

// paladin-workload-init ($PALADIN_WORKLOAD_INIT), as FindHelperProgram finds it.
StatusOr<std::string> FindWorkloadInit();

}  // namespace paladin::ckpt

#endif  // PALADIN_CKPT_WORKLOAD_H_
