// Launching a workload and reading its end (include/paladin/supervise/supervisor.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "paladin/base/cgroup.h"
#include "paladin/base/size.h"
#include "paladin/core/job_env.h"
#include "paladin/quota/region.h"
#include "paladin/supervise/supervisor.h"

namespace paladin::supervise {
namespace {

namespace fs = std::filesystem;

// MPS caps each client's share of the SMs; without its control daemon, compute is shared with no
// cap.
bool MpsRunning() {
  const char* pipe = getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string dir = pipe != nullptr ? pipe : "/tmp/nvidia-mps";
  std::error_code ec;
  return fs::exists(dir + "/control", ec);
}

void GiveTo(const std::string& path, int64_t uid, int64_t gid) {
  if (uid < 0) return;
  (void)lchown(path.c_str(), static_cast<uid_t>(uid), static_cast<gid_t>(gid));
}

// The run directory, with the driver's libraries and the quota region when there is a GPU.
StatusOr<quota::WorkloadSetup> MakeRunDir(const LaunchSpec& spec,
                                          std::unique_ptr<quota::Region>* region) {
  if (spec.gpu.enabled) {
    return quota::PrepareWorkload(spec.run_dir, spec.gpu.libs, spec.gpu.driver, spec.gpu.quota,
                                  region);
  }
  std::error_code ec;
  fs::create_directories(fs::path(spec.run_dir).parent_path(), ec);
  if (!fs::create_directory(spec.run_dir, ec)) {
    return IoError("cannot create run directory " + spec.run_dir +
                   (ec ? ": " + ec.message() : ": it exists"));
  }
  quota::WorkloadSetup setup;
  setup.run_dir = spec.run_dir;
  return setup;
}

// Who may read and write what in the run directory. Nothing runs as the job yet, so nothing in
// it can have been swapped for a link.
void SetOwnership(const LaunchSpec& spec, const ckpt::JobRecord& job) {
  const bool other_user = spec.uid > 0 && spec.uid != static_cast<int64_t>(getuid());
  std::error_code ec;
  if (spec.owner == Owner::kJob) {
    // CRIU restores the working directory with the mode it had, so a restore elsewhere makes it
    // with this mode first (PrepareFor). The logs keep 0644 (private all the same, inside it):
    // CRIU checks the mode of every file it reopens, and a moved image's copies of them arrive
    // with the default mode.
    chmod(job.run_dir.c_str(), 0700);
    for (const std::string& log : {job.stdout_log, job.stderr_log}) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd >= 0) close(fd);
    }
    GiveTo(job.run_dir, spec.uid, spec.gid);
    for (const auto& entry : fs::recursive_directory_iterator(job.run_dir, ec)) {
      GiveTo(entry.path().string(), spec.uid, spec.gid);
    }
    return;
  }
  if (!other_user) return;
  // Root running a job for another user: the run directory and the job record stay root's (the
  // node agent checkpoints the job as root by that record); the user gets what the workload
  // itself opens by name: its quota region, and the interposers' folder to read.
  (void)chmod(job.run_dir.c_str(), 0755);
  if (!job.region.empty()) GiveTo(job.region, spec.uid, spec.gid);
  for (const auto& entry : fs::directory_iterator(job.run_dir, ec)) {
    if (entry.is_directory(ec) && !entry.is_symlink(ec)) (void)chmod(entry.path().c_str(), 0755);
  }
}

// The job's variables, then Paladin's over them; the loader's search paths join, Paladin's first
// (its interposers must load before anything of the job's).
Env ComposeEnv(const LaunchSpec& spec, const quota::WorkloadSetup& setup) {
  Env paladin = setup.env;
  if (!spec.gpu.visible.empty()) paladin.emplace_back("CUDA_VISIBLE_DEVICES", spec.gpu.visible);
  if (spec.gpu.enabled && spec.gpu.compute_share > 0 && MpsRunning()) {
    paladin.emplace_back("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                         std::to_string(spec.gpu.compute_share));
  }
  if (!spec.job_id.empty()) paladin.emplace_back("PALADIN_JOB", spec.job_id);

  Env env;
  if (!spec.home.empty()) env.emplace_back("HOME", spec.home);
  env.insert(env.end(), spec.env.begin(), spec.env.end());
  for (const auto& [name, value] : paladin) {
    std::string joined = value;
    if (name == "LD_LIBRARY_PATH" || name == "LD_PRELOAD") {
      for (const auto& [own_name, own_value] : spec.env) {
        if (own_name == name && !own_value.empty()) joined += ":" + own_value;
      }
    }
    env.emplace_back(name, joined);
  }
  return env;
}

}  // namespace

StatusOr<Launched> Launch(const LaunchSpec& spec) {
  if (spec.command.empty()) return InvalidArgument(spec.name + ": no command to run");
  if (spec.env_from_team) {
    // Checked where the job's environment comes in (the server, at submit) and again here, where
    // it would reach a process.
    if (Status s = core::CheckJobEnv(spec.env); !s.ok()) {
      return InvalidArgument(s.message());
    }
  }
  if (spec.gpu.compute_share < 0 || spec.gpu.compute_share > 100) {
    return InvalidArgument("compute share " + std::to_string(spec.gpu.compute_share) +
                           ": expected a percentage, 1-100");
  }
  Launched out;
  StatusOr<quota::WorkloadSetup> setup = MakeRunDir(spec, &out.region);
  if (!setup.ok()) return setup.status();

  ckpt::JobRecord& job = out.record;
  job.name = spec.name;
  job.command = spec.command;
  std::error_code ec;
  job.cwd = !spec.cwd.empty() ? spec.cwd : fs::current_path(ec).string();
  job.run_dir = fs::absolute(spec.run_dir, ec).string();
  job.stdout_log = job.run_dir + "/stdout.log";
  job.stderr_log = job.run_dir + "/stderr.log";
  if (spec.gpu.enabled) {
    job.gpu = spec.gpu.driver.emulated ? "emulated" : "real";
    job.region = out.region != nullptr ? setup->region_path : "";
    if (spec.gpu.driver.emulated) {
      job.emu_state = quota::EmulatedStatePath();
      job.emu_gpus = spec.gpu.driver.emulated_spec;
      if (spec.uid >= 0 && static_cast<uid_t>(spec.uid) != geteuid()) ShareUsageDir(job.emu_state);
    }
  }
  SetOwnership(spec, job);

  ckpt::WorkloadSpec start;
  start.command = spec.command;
  start.env = ComposeEnv(spec, *setup);
  start.inherit_env = spec.inherit_env;
  start.stdout_log = job.stdout_log;
  start.stderr_log = job.stderr_log;
  start.cwd = spec.cwd;
  start.uid = spec.uid;
  start.gid = spec.gid;
  start.cgroup = spec.cgroup;
  start.lease_fd = spec.lease_fd;
  start.net_ns = spec.net_ns;
  // The emulated driver's state and control files are the host's /dev/shm's.
  start.own_shm = !(spec.gpu.enabled && spec.gpu.driver.emulated);
  StatusOr<ckpt::StartedWorkload> started = ckpt::StartWorkload(start);
  if (!started.ok()) {
    out.region.reset();
    fs::remove_all(spec.run_dir, ec);
    return started.status();
  }
  out.warnings = started->warnings;
  out.fenced = started->fenced;
  job.pid = started->pid;
  job.pid_namespace = started->pid_namespace;
  job.net_ns = spec.net_ns;
  job.cgroup = started->cgroup;
  if (Status s = ckpt::WriteJob(job); !s.ok()) out.warnings.push_back(s.message());
  return out;
}

std::string DescribeGpu(const GpuSpec& gpu) {
  if (!gpu.enabled) return "no GPU";
  std::string limit = "no GPU-memory quota";
  if (gpu.quota.quota_bytes > 0) {
    limit = base::FormatSize(gpu.quota.quota_bytes) + " GPU-memory quota";
    if (gpu.quota.ceiling_bytes > gpu.quota.quota_bytes) {
      limit += " (grows on demand up to " + base::FormatSize(gpu.quota.ceiling_bytes) + ")";
    }
  }
  std::string share = "compute is shared without a cap (no MPS control daemon)";
  if (MpsRunning()) {
    share = "MPS is running: compute share " +
            (gpu.compute_share > 0 ? std::to_string(gpu.compute_share) + "%" : "uncapped") +
            "; the workload cannot be checkpointed by the driver while it is an MPS client";
  } else if (gpu.compute_share > 0) {
    share = "a compute share needs NVIDIA MPS, which is not running: " + share;
  }
  return limit + "; " + gpu.driver.reason +
         (gpu.driver.emulated ? " (" + gpu.driver.emulated_spec + ", emulated)" : "") + "; " +
         share;
}

namespace {

// Whether `latest`, read from the job's run directory, is another copy's record: one restored
// there after this copy ended wrote its own pid.
bool TakenOver(const ckpt::JobRecord& job, const ckpt::JobRecord& latest) {
  return latest.pid > 0 && latest.pid != job.pid;
}

}  // namespace

Ending Finish(const ckpt::JobRecord& job) {
  StatusOr<ckpt::JobRecord> latest = ckpt::ReadJob(job.run_dir);
  // A copy a move let go (file locks) is the mover's to clean up: on this machine the destination
  // may already be restoring the job into a group of the same name, which must not go; one
  // restored already has it.
  const bool let_go =
      latest.ok() && (latest->state == ckpt::RunState::kMoving || TakenOver(job, *latest));
  if (!job.cgroup.empty() && !let_go) (void)base::Cgroup::Existing(job.cgroup).Remove();
  for (int i = 0; i < 600 && latest.ok() && latest->state == ckpt::RunState::kCheckpointing; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the image is being finished
    latest = ckpt::ReadJob(job.run_dir);
  }
  Ending ending;
  if (!latest.ok()) return ending;
  ending.image = latest->image;
  if (TakenOver(job, *latest)) {
    ending.kind = Ending::Kind::kTakenOver;
    ending.pid = latest->pid;
  } else if (latest->state == ckpt::RunState::kMoving || latest->state == ckpt::RunState::kMoved) {
    ending.kind = Ending::Kind::kMoved;
  } else if (latest->state == ckpt::RunState::kCheckpointed) {
    ending.kind = Ending::Kind::kCheckpointed;
  }
  return ending;
}

}  // namespace paladin::supervise
