// Starting a workload the way it can later be checkpointed and restored anywhere: in its own PID
// namespace (it is pid 1 there and leads its own session, so CRIU can recreate its pids on any
// node), in its own cgroup, with stdin from /dev/null and stdout/stderr appended to log files in
// its run directory. The job record (run_dir/job.json) says where everything is; `paladin
// checkpoint NAME` finds jobs by it. Format: docs/formats/job.md.
#ifndef PALADIN_CKPT_WORKLOAD_H_
#define PALADIN_CKPT_WORKLOAD_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "paladin/base/status.h"

namespace paladin::ckpt {

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
  std::string state = "running";  // running | checkpointed | exited
  std::string image;              // the last checkpoint image
  // GPU: "" (none), "real" or "emulated"; the region when the workload has a quota.
  std::string gpu;
  std::string region;
  std::string emu_state;
  std::string emu_gpus;
};

Status WriteJob(const JobRecord& job);
StatusOr<JobRecord> ReadJob(const std::string& run_dir);

// The parent of run directories: $PALADIN_RUN_DIR, else $XDG_RUNTIME_DIR/paladin-UID, else
// /tmp/paladin-UID.
std::string RunBase();
// A job by name (the newest run directory with that name) or by the host pid of its root.
StatusOr<JobRecord> FindJob(const std::string& name_or_pid);

struct WorkloadSpec {
  std::vector<std::string> command;
  std::vector<std::pair<std::string, std::string>> env;  // added to this process's
  std::string stdout_log;
  std::string stderr_log;
  bool pid_namespace = true;
  std::string cgroup;  // created if non-empty
  // Optional: the working directory (default: the caller's), and the user and group the workload
  // runs as (-1: the caller's). Switching needs root; supplementary groups are dropped.
  std::string cwd;
  int64_t uid = -1;
  int64_t gid = -1;
};

struct StartedWorkload {
  pid_t pid = 0;
  bool pid_namespace = false;
  std::string cgroup;                 // "" when none could be made
  std::vector<std::string> warnings;  // what could not be set up, for the user
};

// Starts the workload. Without the privileges for a PID namespace or a cgroup it starts it
// without them and says so in `warnings`.
StatusOr<StartedWorkload> StartWorkload(const WorkloadSpec& spec);

}  // namespace paladin::ckpt

#endif  // PALADIN_CKPT_WORKLOAD_H_
