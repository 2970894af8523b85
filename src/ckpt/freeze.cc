// FreezeJob and ThawJob (checkpoint.h): the steps of a gang's coordinated cut around
// CheckpointJob, so that whoever coordinates the gang can stop every rank before any is dumped.
#include <signal.h>

#include <string>
#include <vector>

#include "paladin/ckpt/checkpoint.h"
#include "process_tree.h"

namespace paladin::ckpt {

Status FreezeJob(JobRecord* job) {
  if (job->state != RunState::kRunning) {
    return FailedPrecondition("job " + job->name + " is " + std::string(RunStateName(job->state)) +
                              ", not running");
  }
  if (!job->gpu.empty()) {
    return FailedPrecondition("job " + job->name +
                              " has a GPU: freezing jobs with GPU state is not supported (a stop "
                              "does not hold their GPU work)");
  }
  const pid_t root = static_cast<pid_t>(job->pid);
  if (root <= 0 || kill(root, 0) != 0) {
    return FailedPrecondition("job " + job->name + " (pid " + std::to_string(job->pid) +
                              ") is not running");
  }
  const std::vector<int64_t> stopped = StoppedProcesses(Tree(root));
  Status s = StopTree(root);
  if (!s.ok()) {
    ContinueTree(root, stopped);
    return s;
  }
  job->stopped = stopped;
  job->state = RunState::kFrozen;
  s = WriteJob(*job);
  if (!s.ok()) {
    ContinueTree(root, stopped);
    job->state = RunState::kRunning;
    return s;
  }
  return Status::Ok();
}

Status ThawJob(JobRecord* job) {
  if (job->state != RunState::kFrozen) {
    return FailedPrecondition("job " + job->name + " is " + std::string(RunStateName(job->state)) +
                              ", not frozen");
  }
  ContinueTree(static_cast<pid_t>(job->pid), job->stopped);
  job->state = RunState::kRunning;
  return WriteJob(*job);
}

}  // namespace paladin::ckpt
