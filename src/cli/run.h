// `paladin run`'s workload supervisor, shared with `paladin slurm task` (the SLURM step shim):
// it starts (or restores) one workload in its own PID namespace and cgroup under the quota
// interposer, copies its log files to this process's stdout and stderr, waits for it, and
// returns its exit code.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "paladin/ckpt/workload.h"

namespace paladin::cli {

struct RunArgs {
  std::string name;
  std::string gpu_mem;
  std::string gpu_mem_max;
  std::string emulated_gpus;
  std::string gpus;
  int compute_share = 0;
  std::string usage_log;
  double usage_every_s = 1.0;
  std::string run_dir;
  bool keep_run_dir = false;
  std::vector<std::string> command;

  // For other supervisors than `paladin run`:
  std::string say_as = "paladin run";  // the prefix of its messages
  // Restore the job held by this checkpoint image instead of starting `command`; the restored
  // root becomes this process's child (it is made a child subreaper).
  std::string restore_from;
  std::vector<std::pair<std::string, std::string>> gpu_map;  // for the restore
  // Called once the workload runs (started or restored), with its record.
  std::function<void(const ckpt::JobRecord&)> on_started;
};

int RunWorkload(RunArgs args);

}  // namespace paladin::cli
