// Starting a workload the way `paladin run` does (quota::PrepareWorkload, ckpt::StartWorkload),
// in-process: in its own PID namespace, session and cgroup, under the quota interposer, as the
// unprivileged user, with its run directory, logs and region owned by that user.
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "agent_impl.h"
#include "paladin/ckpt/criu.h"
#include "paladin/core/job_env.h"

namespace paladin::agent {

namespace fs = std::filesystem;

Status Agent::ResolveUser() {
  if (geteuid() != 0) {
    Say("not running as root: workloads run as this agent's user (uid " +
        std::to_string(geteuid()) + "), without PID namespaces or cgroups where refused");
    return Status::Ok();
  }
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buf[4096];
  if (getpwnam_r(options_.user.c_str(), &pw, buf, sizeof buf, &found) != 0 || found == nullptr) {
    return InvalidArgument("--user " + options_.user + ": no such user");
  }
  if (pw.pw_uid == 0) {
    if (!options_.allow_root) {
      return InvalidArgument("--user " + options_.user +
                             ": workloads would run as root; add --allow-root to allow that");
    }
    Say("workloads run as root (--allow-root)");
    return Status::Ok();
  }
  uid_ = pw.pw_uid;
  gid_ = pw.pw_gid;
  Say("workloads run as " + options_.user + " (uid " + std::to_string(uid_) + ", gid " +
      std::to_string(gid_) + ")");
  return Status::Ok();
}

void Agent::DecideCheckpointable() {
  checkpointable_ = false;
  if (geteuid() != 0) {
    Say("workloads cannot be checkpointed: CRIU needs root");
    return;
  }
  StatusOr<ckpt::Criu> criu = ckpt::LocateCriu();
  if (!criu.ok()) {
    Say("workloads cannot be checkpointed: " + criu.status().message());
    return;
  }
  if (uid_ >= 0) {
    // CRIU dumps a tree whose root is root (paladin-workload-init) and whose resource limits it
    // can read (CAP_SYS_RESOURCE, or libpaladin-criu-rlimit.so preloaded into it).
    StatusOr<std::string> init = ckpt::FindWorkloadInit();
    if (!init.ok()) {
      Say("workloads cannot be checkpointed: " + init.status().message());
      return;
    }
    if (!criu->dumps_other_users) {
      Say("workloads cannot be checkpointed: " + criu->rlimit_note);
      return;
    }
    Say("workloads run under " + *init + " and can be checkpointed" +
        (criu->rlimit_note.empty() ? "" : "; " + criu->rlimit_note));
  }
  checkpointable_ = true;
}

void Agent::GiveToUser(const std::string& path) const {
  if (uid_ < 0) return;
  std::error_code ec;
  if (lchown(path.c_str(), static_cast<uid_t>(uid_), static_cast<gid_t>(gid_)) != 0) return;
  if (!fs::is_directory(fs::symlink_status(path, ec))) return;
  for (const auto& entry : fs::recursive_directory_iterator(path, ec)) {
    (void)lchown(entry.path().c_str(), static_cast<uid_t>(uid_), static_cast<gid_t>(gid_));
  }
}

StatusOr<std::unique_ptr<Workload>> Agent::Launch(const Json& c) {
  auto w = std::make_unique<Workload>();
  w->id = c.at("job").get<std::string>();
  w->epoch = c.value("epoch", int64_t{0});
  const std::vector<std::string> command = c.at("command").get<std::vector<std::string>>();
  if (command.empty()) return InvalidArgument("start " + w->id + ": empty command");
  if (w->id.empty() || w->id.find('/') != std::string::npos || w->id[0] == '.') {
    return InvalidArgument("start: bad job id '" + w->id + "'");
  }
  // The server checked it at submit; checked again here, where it would reach a process.
  std::vector<std::pair<std::string, std::string>> job_env;
  if (c.contains("env")) {
    if (!c["env"].is_object()) return InvalidArgument("start " + w->id + ": env: not an object");
    for (const auto& [key, value] : c["env"].items()) {
      if (!value.is_string()) {
        return InvalidArgument("start " + w->id + ": env: " + key.substr(0, 64) + ": not a string");
      }
      job_env.emplace_back(key, value.get<std::string>());
    }
    if (Status s = core::CheckJobEnv(job_env); !s.ok()) {
      return InvalidArgument("start " + w->id + ": " + s.message());
    }
  }
  w->gpu_index = c.value("gpu_index", -1);
  w->gpu_uuid = c.value("gpu_uuid", std::string());
  if (w->gpu_uuid.empty() && w->gpu_index >= 0) w->gpu_uuid = GpuUuid(w->gpu_index);
  quota::RegionSettings settings;
  settings.quota_bytes = c.value("quota_bytes", uint64_t{0});
  settings.ceiling_bytes = c.value("ceiling_bytes", uint64_t{0});
  if (settings.ceiling_bytes < settings.quota_bytes) settings.ceiling_bytes = 0;

  const std::string run_dir = workloads_dir_ + "/" + w->id + "-" + std::to_string(w->epoch);
  std::error_code ec;
  fs::remove_all(run_dir, ec);  // a start that failed half-way before
  StatusOr<quota::WorkloadSetup> setup =
      quota::PrepareWorkload(run_dir, libs_, driver_, settings, &w->region);
  if (!setup.ok()) return setup.status();

  ckpt::JobRecord& job = w->record;
  job.name = c.value("name", w->id);
  job.command = command;
  job.cwd = run_dir;
  job.run_dir = run_dir;
  job.stdout_log = run_dir + "/stdout.log";
  job.stderr_log = run_dir + "/stderr.log";
  job.gpu = driver_.emulated ? "emulated" : "real";
  job.region = w->region != nullptr ? setup->region_path : "";
  if (driver_.emulated) {
    job.emu_state = data_dir_ + "/emu.state";
    job.emu_gpus = driver_.emulated_spec;
  }
  // CRIU restores the working directory with the mode it had, and a restore elsewhere recreates
  // the run directory with the default one: they must agree.
  chmod(run_dir.c_str(), 0755);
  for (const std::string& log : {job.stdout_log, job.stderr_log}) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) close(fd);
  }
  GiveToUser(run_dir);

  ckpt::WorkloadSpec spec;
  spec.command = command;
  spec.env = setup->env;
  if (!w->gpu_uuid.empty()) spec.env.emplace_back("CUDA_VISIBLE_DEVICES", w->gpu_uuid);
  spec.env.emplace_back("HOME", run_dir);
  spec.env.emplace_back("PALADIN_JOB", w->id);
  spec.env.insert(spec.env.end(), job_env.begin(), job_env.end());
  spec.inherit_env = false;  // nothing of the agent's own environment reaches a job
  spec.stdout_log = job.stdout_log;
  spec.stderr_log = job.stderr_log;
  spec.cwd = run_dir;
  spec.uid = uid_;
  spec.gid = gid_;
  spec.cgroup = options_.name + "-" + w->id + "-" + std::to_string(w->epoch);
  spec.lease_fd = lease_fd_;
  StatusOr<ckpt::StartedWorkload> started = ckpt::StartWorkload(spec);
  if (!started.ok()) {
    fs::remove_all(run_dir, ec);
    return started.status();
  }
  for (const std::string& warning : started->warnings) Say(w->id + ": " + warning);
  job.pid = started->pid;
  job.pid_namespace = started->pid_namespace;
  job.cgroup = started->cgroup;
  if (Status s = ckpt::WriteJob(job); !s.ok()) Say(w->id + ": " + s.message());
  w->agent_dir = records_dir_ + "/" + w->id + "-" + std::to_string(w->epoch);
  w->fenced = started->fenced;
  w->start_time = quota::ProcessIdOf(std::to_string(job.pid)).start_time;
  StartGrower(w.get());
  SaveRecord(*w);
  return w;
}

}  // namespace paladin::agent
