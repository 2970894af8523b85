// The workload supervisor: the one place on a node that launches a workload (run directory, quota
// region, interposer, driver, environment, user, PID namespace, cgroup, the node's lease), makes a
// node ready for a checkpoint image and restores it, and reads what became of a workload once its
// root is gone. The node agent, `paladin run` (and `paladin slurm`, whose steps it runs) and
// `paladin restore` all call it, so every protection is written once here:
//   - a job's environment reaches only its own process, after the switch of user; one that comes
//     from a team (untrusted) is checked against core::CheckJobEnv first;
//   - nothing of the supervisor's own environment reaches a job unless the caller inherits it
//     (`paladin run` by a user for that user);
//   - a job's run directory is its own (Owner::kJob) or stays the caller's (Owner::kCaller);
//   - a job under the node agent follows the node's lease through paladin-workload-init.
// Checkpoints go through ckpt::CheckpointJob, which needs nothing of the supervisor.
//
// Thread safety: the functions share no state; Launch and Restore block until the workload runs.
#ifndef PALADIN_SUPERVISE_SUPERVISOR_H_
#define PALADIN_SUPERVISE_SUPERVISOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/image.h"
#include "paladin/ckpt/workload.h"
#include "paladin/quota/launch.h"
#include "paladin/quota/region.h"

namespace paladin::supervise {

using Env = std::vector<std::pair<std::string, std::string>>;

// Whose a job's run directory is.
enum class Owner {
  // The caller's (`paladin run`). When the job runs as another user (root running a SLURM user's
  // step), that user gets what its process opens by name: the quota region, and the folders to
  // read; the directory and the job record stay the caller's, so only the caller checkpoints it.
  kCaller,
  // The job's own (the node agent, a uid per job): mode 0700, everything in it the job's, so no
  // other job can read or write its logs or its region.
  kJob,
};

// The GPU side of a workload: which driver is behind it, its quota, which GPUs it sees.
struct GpuSpec {
  bool enabled = false;  // false: no GPU libraries, no region, no driver
  quota::Libraries libs;
  quota::DriverChoice driver;
  quota::RegionSettings quota;  // quota_bytes 0: no quota (the driver is used as it is)
  std::string visible;          // CUDA_VISIBLE_DEVICES ("" = every GPU the driver shows)
  // Percent of the GPU's SMs under NVIDIA MPS (0: uncapped). Without an MPS control daemon it has
  // no effect, and the launch says so.
  int compute_share = 0;
};

struct LaunchSpec {
  std::string name;
  std::vector<std::string> command;
  std::string run_dir;  // created; must not exist
  std::string cwd;      // "" = the caller's
  // The job's own environment. Paladin's variables are set over it; the loader's search paths
  // join, Paladin's first. `env_from_team`: it came through the API and is checked
  // (core::CheckJobEnv) before anything is made.
  Env env;
  bool env_from_team = false;
  // Where variables unset by `env` come from: the caller's environment, or only a fixed PATH.
  bool inherit_env = true;
  std::string home;    // HOME before the job's own environment ("" = leave it)
  std::string job_id;  // PALADIN_JOB ("" = not set)
  GpuSpec gpu;
  int64_t uid = -1;  // -1: the caller's user (another needs root)
  int64_t gid = -1;
  Owner owner = Owner::kCaller;
  std::string cgroup;  // made under paladin/ when non-empty
  int lease_fd = -1;   // the node agent's lease (ckpt/fence.h), or -1
  // A network namespace file the job joins (a rank's own network, ckpt/rank_net.h), "" for the
  // caller's (ckpt::WorkloadSpec::net_ns).
  std::string net_ns;
};

struct Launched {
  ckpt::JobRecord record;                 // written to run_dir/job.json
  std::unique_ptr<quota::Region> region;  // null without a quota
  bool fenced = false;                    // its init holds the lease
  std::vector<std::string> warnings;      // what could not be set up, for the user
};

// Prepares and starts the workload. On failure nothing of it is left (its run directory is
// removed).
StatusOr<Launched> Launch(const LaunchSpec& spec);

// One line for the user: the quota, the driver and how compute is shared (MPS).
std::string DescribeGpu(const GpuSpec& gpu);

// --- restore ---

struct RestoreSpec {
  std::string image;
  ckpt::RestoreOptions2 options;
  // The GPU the job's memory goes to on this node: the image's GPUs that options.gpu_map does not
  // pair are mapped to it ("" = leave them).
  std::string gpu_uuid;
  // This node's emulated GPUs' state file, for an image of a job on emulated GPUs: the state
  // file and control folder the image names become links to this node's ("" = none: the restored
  // process finds them where they were, on this machine).
  std::string emu_state;
  // Who the restored job's files are given to (CRIU restores the uid the processes had; their
  // run directory, logs and region must be theirs again under Owner::kJob).
  int64_t uid = -1;
  int64_t gid = -1;
  Owner owner = Owner::kCaller;
  // The uid the image's processes must hold (-1: not checked). CRIU restores the credentials an
  // image holds, so a supervisor restoring for one user refuses an image of anyone else's.
  int64_t expect_uid = -1;
};

// Makes this node ready for the image before CRIU reads it: the emulated driver's control folder
// and state file where the image's process will look for them, and (Owner::kJob) the job's run
// directory, with the mode and owner it had, when the manifest names one this node's placement
// allows. A migration's destination calls it as soon as the manifest arrives.
void PrepareFor(const ckpt::Manifest& manifest, const RestoreSpec& spec);

// What a restore wrote as root for the job (its run directory, logs, region) becomes the job's
// user's under Owner::kJob; links are not followed. A migration's destination calls it once the
// job is restored.
void HandOver(const ckpt::JobRecord& restored, const RestoreSpec& spec);

// Reads and checks the image's manifest, prepares the node (PrepareFor), restores the job
// (ckpt::RestoreJob) and hands its files over to its user (HandOver). The result's record is the
// restored job's.
StatusOr<ckpt::JobRecord> Restore(const ckpt::Criu& criu, const RestoreSpec& spec,
                                  const ckpt::Progress& progress, ckpt::PhaseTimes* times);

// The emulated driver's host-wide control folder, and the link a state file's control folder
// (STATE.ctl) becomes to it: checkpoint requests are per host pid, which the host keeps unique.
inline constexpr const char* kHostControlDir = "/dev/shm/paladin-emu-ctl";
void LinkControlDir(const std::string& state_path);
// A restored process maps the state file its environment names (the source's): where that path
// is free here (the source's data is gone), it becomes a link to `state`.
void LinkStateFile(const std::string& old_state, const std::string& state);
// The emulated devices' usage folder (STATE.usage, docs/emucuda.md): every process using the
// devices creates its own usage file there, so jobs running as users of their own need it sticky
// and open to all (1777, like /tmp). Made so, and created when missing; the device file itself
// stays the caller's, which only its owner writes.
void ShareUsageDir(const std::string& state_path);

// --- the end ---

// What became of a workload whose root is gone.
struct Ending {
  // kTakenOver: a copy of the job restored into this same run directory (a move or a restore on
  // this machine, under the same run base) wrote its record there: the directory, its logs and
  // the job's group are that copy's now.
  enum class Kind { kExited, kCheckpointed, kMoved, kTakenOver };
  Kind kind = Kind::kExited;
  std::string image;  // the image it was checkpointed or moved to
  int64_t pid = 0;    // kTakenOver: the copy's pid
};

// Removes the job's cgroup and reads its record: a checkpoint that stopped the job, a move, or a
// copy that runs from the run directory now is not its end (the directory stays for the restore,
// or for that copy). Waits up to 30 s for an image still being written.
Ending Finish(const ckpt::JobRecord& job);

}  // namespace paladin::supervise

#endif  // PALADIN_SUPERVISE_SUPERVISOR_H_
