// The checkpoint engine: a job's whole state into an image directory, and back. GPU processes
// are locked and checkpointed through the driver first (device memory into host RAM, with the
// job's cgroup memory limit lifted meanwhile), then CRIU dumps the tree; a restore runs the
// other way round, after the image is verified. See docs/ckpt.md.
#ifndef PALADIN_CKPT_CHECKPOINT_H_
#define PALADIN_CKPT_CHECKPOINT_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/ckpt/criu.h"
#include "paladin/ckpt/image.h"
#include "paladin/ckpt/workload.h"

namespace paladin::ckpt {

using Progress = std::function<void(const std::string&)>;

struct CheckpointOptions {
  enum class After { kKill, kLeaveRunning, kLeaveStopped };
  After after = After::kKill;
  int pre_dumps = 0;  // memory passes while the job runs, before the final dump
  double timeout_s = 600;
  // Post-copy (a migration's source, with a CRIU of LazyCriu): DumpOptions' lazy_* fields. The
  // image holds everything but the anonymous memory, which the dump, still running in
  // *lazy_dump, serves; the job stays stopped. Refused for a job with GPU state.
  int lazy_socket = -1;
  std::string lazy_log;
  pid_t* lazy_dump = nullptr;
  // Streaming pre-copy (a migration's source): DumpOptions::page_server_socket. The image
  // holds everything but the memory, which went to the destination's page server as the dump
  // ran.
  int page_server_socket = -1;
};

struct PhaseTimes {
  std::vector<std::pair<std::string, double>> seconds;  // in order
  uint64_t image_bytes = 0;
  std::string Describe() const;
};

// Checkpoints `job` into `out` (created; must not exist). On failure the job keeps running (GPU
// state restored and unlocked) and the partial image is removed.
StatusOr<PhaseTimes> CheckpointJob(const Criu& criu, JobRecord* job, const std::string& out,
                                   const CheckpointOptions& options, const Progress& progress);

// Where a restore may write on this node. A manifest names the places its job had (run
// directory, logs, quota region), but those are only hints: the run directory is the one of that
// name directly in `run_base`, its logs are stdout.log and stderr.log in it and its region
// quota.region, as `paladin run` and the node agent lay them out, and a manifest that names any
// other place is refused. Nothing is written through a symlink, and only regular files are.
struct RestorePlacement {
  std::string run_base;  // "" = RunBase(); created (by the caller's rules) where missing
  // Non-empty: the run directory's name must be this followed by digits (the node agent's
  // JOB-EPOCH, so that one job's image cannot name another job's directory).
  std::string name_prefix;
};

struct RestoreOptions2 {
  RestorePlacement placement;
  std::vector<std::pair<std::string, std::string>> gpu_map;  // old UUID -> new UUID
  // Leave the restored job stopped with its GPU state restored but locked (a migration's
  // destination until the move is committed); ResumeJob lets it run.
  bool leave_stopped = false;
  double timeout_s = 600;
  // The caller verified `dir` itself just before (a migration's destination: the transfer
  // verifies every file against the manifest as it commits the image, in this process): the
  // restore does not read and hash the whole image a second time during the pause.
  bool verified = false;
  // The restoring node agent's lease (fence.h), for an image whose paladin-workload-init held
  // one; -1: the restored job is not fenced (its init gets /dev/null).
  int lease_fd = -1;
  // Post-copy: the memory comes from a `criu lazy-pages` already waiting for this restore.
  bool lazy_pages = false;
  // For an image of a job in a network of its own (Manifest::net_ns): the network namespace file
  // it is restored into, made beforehand with the job's address (a rank network: CreateRankNet
  // with Manifest::net_address). "": the file the manifest names, on this node. Refused for an
  // image of a job in its launcher's network.
  std::string net_ns;
};

// Verifies `dir` (unless options.verified) and restores the job it holds into this node's place
// for it (options.placement); returns the restored job record, whose run directory, logs and
// region are those places. `dir` must be writable only by this user or root: whoever else could
// write it could change it between the verification and CRIU's reading it.
StatusOr<JobRecord> RestoreJob(const Criu& criu, const std::string& dir,
                               const RestoreOptions2& options, const Progress& progress,
                               PhaseTimes* times);

// How many file locks (flock, POSIX, OFD) CRIU recorded in the image `dir` (its filelocks.img; 0
// without one). A restore takes them again, waiting while another process holds them: on a file
// system that both sides of a move share, the source's stopped copy does until it is let go.
StatusOr<int> FileLocksInImage(const std::string& dir);

// Lets a stopped job run again: a destination after the commit, or a source whose move failed
// (its GPU state, checkpointed or locked, is restored and unlocked).
// Leaves stopped the processes the job had stopped itself when it was dumped (job->stopped).
Status ResumeJob(JobRecord* job);

// A gang's coordinated cut, node by node (docs/distributed.md): first every rank of the gang is
// frozen, then each is dumped while frozen (CheckpointJob with kKill: the dump kills it; with
// kLeaveStopped: it stays frozen), then each that lives on is thawed. FreezeJob stops every
// process of the job's tree (SIGSTOP; returns once each is stopped, at most 10 s) and records the
// job as "frozen", with the processes the job had stopped itself, which stay stopped; on failure
// the job runs again. Refused for a job with GPU state (its GPU work is not held by a stop) and
// for a job that is not running. Blocks on /proc reads only.
Status FreezeJob(JobRecord* job);
// Lets a frozen job run again (not what it had stopped itself); its record says "running".
Status ThawJob(JobRecord* job);

// SIGCONT to every process of the tree under `root` except those whose pid in the job's PID
// namespace is in `stopped` (JobRecord::stopped): a process the job stopped stays stopped. Sent
// with fence::kResumeValue, so paladin-workload-init does not pass it on to its command.
void ContinueTree(pid_t root, const std::vector<int64_t>& stopped);

// The processes among `pids` (host pids) that are stopped (state T, not a tracing stop), by
// their pid in their own PID namespace.
std::vector<int64_t> StoppedProcesses(const std::vector<pid_t>& pids);

// The node lease (fence.h) that the job's root holds, when the root is paladin-workload-init
// started with --lease: the file behind its descriptor fence::kLeaseFd. "" otherwise.
std::string HeldLease(int64_t root_pid);

// "OLD=NEW,OLD=NEW" (GPU UUIDs).
StatusOr<std::vector<std::pair<std::string, std::string>>> ParseGpuMap(const std::string& text);

}  // namespace paladin::ckpt

#endif  // PALADIN_CKPT_CHECKPOINT_H_
