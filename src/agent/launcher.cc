// Starting a workload through the supervisor (paladin/supervise/supervisor.h), as `paladin run`
// does: in its own PID namespace, session and cgroup, under the quota interposer, as a uid of its
// own, with its run directory, logs and region owned by that uid. This file holds what is the
// agent's own: the uid pool, the records, the growth of the quota.
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "agent_impl.h"
#include "paladin/base/process.h"
#include "paladin/base/size.h"
#include "paladin/ckpt/criu.h"
#include "paladin/ckpt/rank_net.h"
#include "paladin/supervise/supervisor.h"

namespace paladin::agent {

namespace fs = std::filesystem;

Status Agent::ResolveUser() {
  if (geteuid() != 0) {
    Say("not running as root: workloads run as this agent's user (uid " +
        std::to_string(geteuid()) + "), without PID namespaces or cgroups where refused");
    return Status::Ok();
  }
  if (options_.user.empty()) {
    UidRange range = kDefaultUidRange;
    if (!options_.uid_range.empty()) {
      StatusOr<UidRange> parsed = ParseUidRange(options_.uid_range);
      if (!parsed.ok()) return parsed.status();
      range = *parsed;
    }
    uid_pool_ = std::make_unique<UidPool>(
        range, options_.uid_dir.empty() ? std::string(kDefaultUidDir) : options_.uid_dir);
    PALADIN_RETURN_IF_ERROR(uid_pool_->Open());
    Say("each job runs as a uid of its own from " + FormatUidRange(range) + " (held in " +
        (options_.uid_dir.empty() ? std::string(kDefaultUidDir) : options_.uid_dir) + ")");
    return Status::Ok();
  }
  if (!options_.uid_range.empty()) {
    return InvalidArgument(
        "--uid-range and --user exclude each other: --user runs every job as "
        "one user");
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
      std::to_string(gid_) +
      "); all jobs share that user, so they are not isolated from "
      "each other (without --user each runs as a uid of its own)");
  return Status::Ok();
}

std::string Agent::UidHolder(const std::string& id, int64_t epoch) const {
  return data_dir_ + ":" + id + "/" + std::to_string(epoch);
}

Status Agent::AssignUser(Workload* w) {
  if (uid_pool_ == nullptr) {
    w->uid = uid_;
    w->gid = gid_;
    return Status::Ok();
  }
  StatusOr<uint32_t> uid = uid_pool_->Allocate(w->id, UidHolder(w->id, w->epoch));
  if (!uid.ok()) return uid.status();
  // A group of its own too (the same number): nothing of one job is another's by group.
  w->uid = w->gid = *uid;
  w->pooled_uid = true;
  return Status::Ok();
}

Status Agent::HoldUser(Workload* w, int64_t uid) {
  if (uid_pool_ == nullptr || uid < 0) {
    w->uid = uid < 0 ? uid_ : uid;
    w->gid = uid < 0 ? gid_ : uid;
    return Status::Ok();
  }
  if (uid == 0) {
    return FailedPrecondition("job " + w->id +
                              " ran as root where it was checkpointed; this "
                              "node runs each job as a uid of its own (--user root "
                              "--allow-root runs jobs as root)");
  }
  PALADIN_RETURN_IF_ERROR(
      uid_pool_->Reserve(static_cast<uint32_t>(uid), w->id, UidHolder(w->id, w->epoch)));
  w->uid = w->gid = uid;
  w->pooled_uid = true;
  return Status::Ok();
}

void Agent::FreeUser(Workload* w) {
  if (!w->pooled_uid || uid_pool_ == nullptr) return;
  uid_pool_->Free(static_cast<uint32_t>(w->uid), UidHolder(w->id, w->epoch));
  w->pooled_uid = false;
}

void Agent::TakeUser(Workload* from, Workload* to) {
  to->uid = from->uid;
  to->gid = from->gid;
  to->pooled_uid = from->pooled_uid;
  from->pooled_uid = false;
}

void Agent::CheckRegion(Workload* w) const {
  if (w->region == nullptr) return;
  const uint64_t ceiling = w->region->ceiling();
  const uint64_t quota = w->region->quota();
  const uint64_t most = std::max(w->quota_bytes, w->ceiling_bytes);
  if (ceiling == w->ceiling_bytes && quota <= most) return;
  w->region->SetCeiling(w->ceiling_bytes);
  if (quota > most) w->region->SetQuota(w->quota_bytes);
  Say("job " + w->id + " wrote its own quota region (quota " + base::FormatSize(quota) +
      ", ceiling " + base::FormatSize(ceiling) + "): set back to " +
      base::FormatSize(w->region->quota()) + ", ceiling " + base::FormatSize(w->ceiling_bytes));
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
  if (uid_ >= 0 || uid_pool_ != nullptr) {
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

StatusOr<std::unique_ptr<Workload>> Agent::Launch(const api::Command& c) {
  auto w = std::make_unique<Workload>();
  w->id = c.job;
  w->epoch = c.epoch.value_or(0);
  if (c.command.empty()) return InvalidArgument("start " + w->id + ": empty command");
  if (w->id.empty() || w->id.find('/') != std::string::npos || w->id[0] == '.') {
    return InvalidArgument("start: bad job id '" + w->id + "'");
  }
  w->gpu_index = c.gpu_index;
  w->gpu_uuid = c.gpu_uuid;
  if (w->gpu_uuid.empty() && w->gpu_index >= 0) w->gpu_uuid = GpuUuid(w->gpu_index);
  quota::RegionSettings settings;
  settings.quota_bytes = static_cast<uint64_t>(c.quota_bytes.value_or(0));
  settings.ceiling_bytes = static_cast<uint64_t>(c.ceiling_bytes.value_or(0));
  if (settings.ceiling_bytes < settings.quota_bytes) settings.ceiling_bytes = 0;

  w->quota_bytes = settings.quota_bytes;
  w->ceiling_bytes = settings.ceiling_bytes;
  PALADIN_RETURN_IF_ERROR(AssignUser(w.get()));
  Status launched = LaunchAs(c, settings, w.get());
  if (!launched.ok()) {
    FreeUser(w.get());
    return launched;
  }
  return w;
}

Status Agent::LaunchAs(const api::Command& c, const quota::RegionSettings& settings, Workload* w) {
  const std::string run_dir = workloads_dir_ + "/" + w->id + "-" + std::to_string(w->epoch);
  std::error_code ec;
  fs::remove_all(run_dir, ec);  // a start that failed half-way before

  supervise::LaunchSpec spec;
  spec.name = c.name.empty() ? w->id : c.name;
  spec.command = c.command;
  spec.run_dir = run_dir;
  spec.cwd = run_dir;
  // The server checked it at submit; the supervisor checks it again before it reaches a process.
  spec.env.assign(c.env.begin(), c.env.end());
  spec.env_from_team = true;
  spec.inherit_env = false;  // nothing of the agent's own environment reaches a job
  spec.home = run_dir;
  spec.job_id = w->id;
  // A gang's CPU rank (no GPU index) has no GPU; every other job has its GPU set up as always.
  spec.gpu.enabled = !(c.rank_net && c.gpu_index < 0);
  spec.gpu.libs = libs_;
  spec.gpu.driver = driver_;
  spec.gpu.quota = settings;
  spec.gpu.visible = w->gpu_uuid;
  spec.gpu.compute_share = c.compute_share;
  spec.uid = w->uid;
  spec.gid = w->gid;
  spec.owner = supervise::Owner::kJob;
  spec.cgroup = options_.name + "-" + w->id + "-" + std::to_string(w->epoch);
  spec.lease_fd = lease_fd_;
  if (c.rank_net) {
    // A gang rank: its own network namespace with its stable address (docs/distributed.md).
    if (c.rank_net->interface != ckpt::kRankInterface) {
      return FailedPrecondition("start " + w->id + ": rank_net: interface " +
                                c.rank_net->interface + " is not this agent's " +
                                ckpt::kRankInterface);
    }
    const ckpt::RankNet net{options_.name + "-" + w->id, c.rank_net->address};
    if (Status s = ckpt::CreateRankNet(net); !s.ok()) {
      return Status(s.code(), "start " + w->id + ": its rank network: " + s.message());
    }
    w->rank_net = net.name;
    w->rank_address = net.address;
    spec.net_ns = ckpt::RankNetPath(net.name);
  }
  StatusOr<supervise::Launched> launched = supervise::Launch(spec);
  if (!launched.ok()) {
    return Status(launched.status().code(), "start " + w->id + ": " + launched.status().message());
  }
  for (const std::string& warning : launched->warnings) Say(w->id + ": " + warning);
  w->record = launched->record;
  w->region = std::move(launched->region);
  w->agent_dir = records_dir_ + "/" + w->id + "-" + std::to_string(w->epoch);
  w->fenced = launched->fenced;
  w->start_time = base::ProcessIdOf(std::to_string(w->record.pid)).start_time;
  StartGrower(w);
  SaveRecord(*w);
  return Status::Ok();
}

}  // namespace paladin::agent
