// The server's commands (docs/formats/api.md, "Node agents"). start, kill, resize and fault are
// quick and run on the main loop; checkpoint and restore run on worker threads while heartbeats
// go on (the moves, migrate_in and migrate_out, are in moves.cc). Each adds exactly one result.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <thread>

#include "agent_impl.h"
#include "paladin/api/wire.h"
#include "paladin/base/cgroup.h"
#include "paladin/base/size.h"
#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/image.h"
#include "paladin/ckpt/rank_net.h"
#include "paladin/ckpt/subprocess.h"
#include "paladin/quota/launch.h"
#include "paladin/quota/usage.h"

namespace paladin::agent {

namespace fs = std::filesystem;
namespace key = api::key;

namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The copy a command is about; -1: every copy.
int64_t Epoch(const api::Command& c) { return c.epoch.value_or(-1); }

}  // namespace

int64_t FileSize(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  return ec ? 0 : static_cast<int64_t>(size);
}

void Reap(pid_t pid) {
  pid_t parent = 0;
  for (int i = 0; i < 100; ++i) {
    const char state = ProcState(pid, &parent);
    if (state == '\0' || parent != getpid()) return;
    if (state == 'Z') {
      waitpid(pid, nullptr, WNOHANG);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// A restored job lives where this agent keeps job JOB's run directories (JOB-EPOCH in its
// workloads folder), whatever its image names: the manifest's places are only compared with it.
ckpt::RestorePlacement Agent::PlacementFor(const std::string& job) const {
  ckpt::RestorePlacement placement;
  placement.run_base = workloads_dir_;
  placement.name_prefix = job + "-";
  return placement;
}

supervise::RestoreSpec Agent::RestoreSpecFor(const Workload& user) const {
  supervise::RestoreSpec spec;
  spec.options.placement = PlacementFor(user.id);
  spec.options.lease_fd = lease_fd_;  // the restored job follows this node's lease from now on
  spec.emu_state = driver_.emulated ? EmuStatePath() : "";
  spec.uid = user.uid;
  spec.gid = user.gid;
  spec.owner = supervise::Owner::kJob;
  return spec;
}

Workload* Agent::Claim(const api::Command& c, Status* why) {
  const std::string& id = c.job;
  // A periodic checkpoint gives way to whatever is under way; a move, a stopping checkpoint or a
  // resize waits (up to two minutes) for a periodic checkpoint to finish.
  const bool patient = !(c.kind == api::CommandKind::kCheckpoint && c.mode == "keep");
  for (int waited = 0; patient && waited < 1200; ++waited) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      Workload* w = Find(id, Epoch(c));
      if (w == nullptr || !w->busy) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::lock_guard<std::mutex> lock(mu_);
  Workload* w = Find(id, Epoch(c));
  if (w == nullptr) {
    *why = NotFound("job " + id + " does not run here");
  } else if (w->busy) {
    *why = FailedPrecondition("job " + id + " is busy with another checkpoint or move");
  } else if (w->state == api::CopyState::kExited) {
    *why = FailedPrecondition("job " + id + " has exited");
  } else if (w->frozen) {
    *why = FailedPrecondition("job " + id + " is frozen (no contact with the server)");
  } else if (w->incoming_migration != 0 || w->outgoing_migration != 0) {
    // A copy a previous agent left in a move is stopped until the server says which copy runs
    // (SettleInterruptedMoves); a checkpoint now would time out on its stopped GPU state, or
    // dump it stopped and record that stop as the job's own, leaving it stopped after the move
    // is settled.
    *why = FailedPrecondition("job " + id +
                              " is in a move a previous agent left unsettled; asking the server");
  } else {
    w->busy = true;
    return w;
  }
  return nullptr;
}

Workload* Agent::ClaimForCriu(const api::Command& c, StatusOr<ckpt::Criu>* criu) {
  Status why;
  Workload* w = Claim(c, &why);
  if (w == nullptr) {
    AddResult(c.id, why);
    return nullptr;
  }
  *criu = ReadyCriu();
  if (!criu->ok()) {
    Release(w);
    AddResult(c.id, criu->status());
    return nullptr;
  }
  return w;
}

void Agent::Release(Workload* w) {
  std::lock_guard<std::mutex> lock(mu_);
  w->busy = false;
}

StatusOr<ckpt::Criu> Agent::ReadyCriu() {
  std::lock_guard<std::mutex> lock(criu_mu_);
  if (!criu_) {
    StatusOr<ckpt::Criu> criu = ckpt::LocateCriu();
    if (criu.ok()) {
      std::error_code ec;
      fs::create_directories(ckpt::RunBase(), ec);
      Status probed = ckpt::ProbeBreakpoints(&*criu, ckpt::RunBase());
      if (!probed.ok()) criu = probed;
    }
    if (criu.ok()) {
      Say("CRIU " + criu->version + " at " + criu->path +
          (criu->no_breakpoints ? " (CRIU_FAULT=130 on this kernel)" : ""));
    }
    criu_ = criu;
  }
  return *criu_;
}

StatusOr<ckpt::Criu> Agent::ReadyLazyCriu() {
  StatusOr<ckpt::Criu> criu = ReadyCriu();
  if (!criu.ok()) return criu.status();
  std::lock_guard<std::mutex> lock(criu_mu_);
  if (!lazy_criu_) {
    lazy_criu_ = ckpt::LazyCriu(*criu);
    Say(lazy_criu_->ok() ? "post-copy moves: CRIU " + (*lazy_criu_)->path + " (patches " +
                               (*lazy_criu_)->lazy_patches + ")"
                         : "post-copy moves: not here (" + lazy_criu_->status().message() + ")");
  }
  return *lazy_criu_;
}

namespace {

// Sets the host end of rank network NAME's veth pair down or up. While a rank is being restored
// its namespace must not answer for it: a packet from another rank (restored already, its
// connection to this one retransmitting) would meet no socket there and be answered with a reset,
// which breaks the connection the cut carried. Down, the host routes nothing to it.
Status SetRankLink(const std::string& name, bool up) {
  const ckpt::SubprocessResult r = ckpt::RunBounded(
      {"ip", "link", "set", "dev", ckpt::RankHostInterface(name), up ? "up" : "down"}, {}, 10);
  if (r.exit_code == 0 && !r.timed_out) return Status::Ok();
  return Internal("setting " + ckpt::RankHostInterface(name) + (up ? " up" : " down") +
                  " failed: " + r.output.substr(0, 200));
}

}  // namespace

Status Agent::Start(const api::Command& c, Json* detail) {
  const std::string& id = c.job;
  const int64_t epoch = c.epoch.value_or(0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Workload* w = Find(id, epoch); w != nullptr && w->state != api::CopyState::kExited) {
      (*detail)[key::kPid] = w->record.pid;  // already started: the server asked twice
      return Status::Ok();
    }
  }
  StatusOr<std::unique_ptr<Workload>> w = Launch(c);
  if (!w.ok()) return w.status();
  (*detail)[key::kPid] = (*w)->record.pid;
  std::string quota = "no GPU-memory quota";
  if ((*w)->region != nullptr) {
    quota = base::FormatSize((*w)->region->quota()) + " quota";
    if ((*w)->region->ceiling() > (*w)->region->quota()) {
      quota += " (grows up to " + base::FormatSize((*w)->region->ceiling()) + ")";
    }
  }
  Say("started job " + id + " (epoch " + std::to_string(epoch) + ") as pid " +
      std::to_string((*w)->record.pid) + " on GPU " + std::to_string((*w)->gpu_index) + ", " +
      quota + "; logs in " + (*w)->record.run_dir);
  std::lock_guard<std::mutex> lock(mu_);
  jobs_[{id, epoch}] = std::move(*w);
  return Status::Ok();
}

void Agent::CallOffIncoming(const std::string& job, int64_t epoch) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, cancel] : incoming_) {
    if (!job.empty() && (key.first != job || (epoch >= 0 && key.second != epoch))) continue;
    if (!cancel->exchange(true)) {
      Say("migrate_in " + key.first + " (epoch " + std::to_string(key.second) + "): called off");
    }
  }
}

Status Agent::Kill(const api::Command& c) {
  const std::string& id = c.job;
  const int64_t epoch = Epoch(c);
  // A move of the job here that failed elsewhere: stop waiting for it.
  CallOffIncoming(id, epoch);
  std::vector<Workload*> victims;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, w] : jobs_) {
      if (key.first != id || (epoch >= 0 && key.second != epoch)) continue;
      if (w->busy) return FailedPrecondition("job " + id + " is being checkpointed or moved");
      victims.push_back(w.get());
    }
    for (Workload* w : victims) w->busy = true;
  }
  if (victims.empty()) return Status::Ok();  // nothing of it runs here: killed already
  Status result = Status::Ok();
  for (Workload* w : victims) {
    Status s = KillTree(w);
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.ok()) {
      w->busy = false;
      result = s;
      continue;
    }
    Say("killed job " + w->id + " (epoch " + std::to_string(w->epoch) + ", pid " +
        std::to_string(w->record.pid) + ")");
    Forget(w->id, w->epoch, true);
  }
  return result;
}

Status Agent::Resize(const api::Command& c) {
  const std::string& id = c.job;
  std::lock_guard<std::mutex> lock(mu_);
  Workload* w = Find(id, Epoch(c));
  if (w == nullptr) return NotFound("job " + id + " does not run here");
  if (w->region == nullptr) return FailedPrecondition("job " + id + " has no GPU-memory quota");
  const uint64_t before = w->region->quota();
  if (c.quota_bytes) {
    w->quota_bytes = static_cast<uint64_t>(*c.quota_bytes);
    w->region->SetQuota(w->quota_bytes);
  }
  if (c.ceiling_bytes) {
    w->ceiling_bytes = static_cast<uint64_t>(*c.ceiling_bytes);
    w->region->SetCeiling(w->ceiling_bytes);
  }
  StartGrower(w);
  Say("job " + id + ": quota " + base::FormatSize(before) + " -> " +
      base::FormatSize(w->region->quota()) + ", ceiling " + base::FormatSize(w->region->ceiling()));
  return Status::Ok();
}

// Posts an Xid or ECC event on an emulated GPU, as its hardware would; the health watcher hears
// it like any NVML event and judges it. Answers once the watcher has handled it.
Status Agent::Fault(const api::Command& c) {
  const int index = c.gpu_index;
  const std::string uuid = GpuUuid(index);
  if (uuid.empty()) return NotFound("no GPU " + std::to_string(index) + " here");
  if (!driver_.emulated) {
    return FailedPrecondition("GPU " + std::to_string(index) +
                              " is real: faults are injected into emulated GPUs only");
  }
  if (!health_thread_.joinable()) {
    return FailedPrecondition("GPU health events are not watched: " + health_watch_error_);
  }
  const std::string& kind = c.fault_kind;
  uint64_t type = 0;
  if (kind == "xid") {
    type = PALADIN_NVML_EVENT_XID;
  } else if (kind == "ecc") {
    type = PALADIN_NVML_EVENT_DOUBLE_BIT_ECC;
  } else if (kind == "ecc-corrected") {
    type = PALADIN_NVML_EVENT_SINGLE_BIT_ECC;
  } else {
    return InvalidArgument("fault_kind: expected xid, ecc or ecc-corrected, not " + kind);
  }
  const int64_t code = c.code;  // not negative (DecodeCommand)
  std::unique_lock<std::mutex> lock(gpu_mu_);
  const uint64_t before = health_events_;
  lock.unlock();
  PALADIN_RETURN_IF_ERROR(nvml_->PostEmulatedEvent(uuid, type, static_cast<uint64_t>(code)));
  lock.lock();
  if (!health_cv_.wait_for(lock, std::chrono::seconds(5),
                           [&] { return health_events_ > before; })) {
    return Internal("the health watcher did not see the event within 5 s");
  }
  return Status::Ok();
}

void Agent::Checkpoint(const api::Command& c) {
  const int64_t id = c.id;
  const std::string& mode = c.mode;  // keep, stop or frozen (DecodeCommand)
  const std::string& dir = c.dir;
  StatusOr<ckpt::Criu> criu = Internal("unset");
  Workload* w = ClaimForCriu(c, &criu);
  if (w == nullptr) return;
  ckpt::CheckpointOptions options;
  // frozen: a gang rank frozen for its gang's cut, dumped and left frozen until the thaw.
  options.after = mode == "keep"     ? ckpt::CheckpointOptions::After::kLeaveRunning
                  : mode == "frozen" ? ckpt::CheckpointOptions::After::kLeaveStopped
                                     : ckpt::CheckpointOptions::After::kKill;
  const auto began = std::chrono::steady_clock::now();
  const std::string job = w->id;
  StatusOr<ckpt::PhaseTimes> times = ckpt::CheckpointJob(
      *criu, &w->record, dir, options,
      [job](const std::string& line) { Say("checkpoint " + job + ": " + line); });
  if (!times.ok()) {
    Release(w);
    AddResult(id,
              Status(times.status().code(), times.status().message() + "; the job keeps running"));
    return;
  }
  const Json detail = {
      {key::kPath, w->record.image}, {key::kBytes, times->image_bytes}, {"seconds", Since(began)}};
  Say("checkpointed job " + job + " into " + w->record.image + " (" +
      base::FormatSize(times->image_bytes) + ", " + times->Describe() + ")" +
      (mode == "stop"     ? "; it is stopped and forgotten here"
       : mode == "frozen" ? "; it stays frozen until its gang's thaw"
                          : "; it runs on"));
  if (mode == "stop") {
    Reap(static_cast<pid_t>(w->record.pid));
    RemoveLeftPlaces(w->record, true, false);
    std::lock_guard<std::mutex> lock(mu_);
    Forget(w->id, w->epoch, true);
  } else {
    Release(w);
  }
  AddResult(id, Status::Ok(), detail);
}

void Agent::Freeze(const api::Command& c) {
  Status why;
  Workload* w = Claim(c, &why);
  if (w == nullptr) return AddResult(c.id, why);
  Status s = ckpt::FreezeJob(&w->record);
  Say("freeze " + w->id + ": " + (s.ok() ? "every process stopped" : s.message()));
  Release(w);
  AddResult(c.id, s);
}

void Agent::Thaw(const api::Command& c) {
  Status why;
  Workload* w = Claim(c, &why);
  if (w == nullptr) return AddResult(c.id, why);
  // A rank whose freeze failed runs already (FreezeJob lets it run again): nothing to thaw.
  Status s = w->record.state == ckpt::RunState::kFrozen ? ckpt::ThawJob(&w->record) : Status::Ok();
  Say("thaw " + w->id + ": " + (s.ok() ? "running" : s.message()));
  Release(w);
  AddResult(c.id, s);
}

void Agent::Restore(const api::Command& c) {
  const int64_t id = c.id;
  const std::string& job = c.job;
  const int64_t epoch = c.epoch.value_or(0);
  const std::string& image = c.image;
  const int gpu_index = std::max(c.gpu_index, 0);
  std::string gpu_uuid = c.gpu_uuid;
  // A gang's CPU rank (gpu_index -1) has no GPU to map.
  if (gpu_uuid.empty() && c.gpu_index >= 0) gpu_uuid = GpuUuid(gpu_index);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Workload* w = Find(job, epoch); w != nullptr && w->state != api::CopyState::kExited) {
      AddResult(id, Status::Ok(), {{key::kPid, w->record.pid}});
      return;
    }
  }
  if (job.empty() || job.find('/') != std::string::npos || job[0] == '.') {
    AddResult(id, InvalidArgument("restore: bad job id '" + job + "'"));
    return;
  }
  StatusOr<ckpt::Manifest> manifest = ckpt::ReadManifest(image);
  if (!manifest.ok()) {
    AddResult(id, manifest.status());
    return;
  }
  // CRIU restores the job's processes with the uid they had: it must be this job's here too.
  Workload user;
  user.id = job;
  user.epoch = epoch;
  if (Status held = HoldUser(&user, manifest->uid); !held.ok()) {
    AddResult(id, Status(held.code(), "restore " + job + ": " + held.message()));
    return;
  }
  supervise::RestoreSpec spec = RestoreSpecFor(user);
  spec.image = image;
  spec.gpu_uuid = gpu_uuid;
  // Every GPU the process saw must be paired (the server may send the whole source node's map);
  // the ones it held memory on go to gpu_uuid.
  spec.options.gpu_map = c.gpu_map;
  StatusOr<ckpt::Criu> criu = ReadyCriu();
  if (!criu.ok()) {
    FreeUser(&user);
    AddResult(id, criu.status());
    return;
  }
  // A gang rank comes back in a network of its own with its address, here.
  std::string rank_net;
  if (c.rank_net) {
    const ckpt::RankNet net{options_.name + "-" + job, c.rank_net->address};
    Status made = ckpt::CreateRankNet(net);
    if (made.ok()) made = SetRankLink(net.name, false);  // unreachable until restored
    if (!made.ok()) {
      FreeUser(&user);
      DropRankNetUnlessUsed(net.name);
      AddResult(id,
                Status(made.code(), "restore " + job + ": its rank network: " + made.message()));
      return;
    }
    rank_net = net.name;
    spec.options.net_ns = ckpt::RankNetPath(net.name);
  }
  ckpt::PhaseTimes times;
  StatusOr<ckpt::JobRecord> record = supervise::Restore(
      *criu, spec, [job](const std::string& line) { Say("restore " + job + ": " + line); }, &times);
  if (!record.ok()) {
    FreeUser(&user);
    if (!rank_net.empty()) DropRankNetUnlessUsed(rank_net);
    AddResult(id, record.status());
    return;
  }
  if (!rank_net.empty()) {
    // Its sockets are back: reachable again (the link up, and its host route, which the link's
    // going down removed, made again).
    Status up = SetRankLink(rank_net, true);
    if (up.ok()) up = ckpt::CreateRankNet(ckpt::RankNet{rank_net, c.rank_net->address});
    if (!up.ok()) Say("restore " + job + ": its rank network: " + up.message());
  }
  StatusOr<std::unique_ptr<Workload>> w = Track(job, epoch, *record, gpu_index, gpu_uuid);
  if (!w.ok()) {
    FreeUser(&user);
    AddResult(id, w.status());  // it runs, but without its quota: say so
    return;
  }
  TakeUser(&user, w->get());
  if (!rank_net.empty()) {
    (*w)->rank_net = rank_net;
    (*w)->rank_address = c.rank_net->address;
  }
  if ((*w)->region != nullptr && c.quota_bytes) {
    (*w)->quota_bytes = static_cast<uint64_t>(*c.quota_bytes);
    (*w)->region->SetQuota((*w)->quota_bytes);
    if (c.ceiling_bytes) {
      (*w)->ceiling_bytes = static_cast<uint64_t>(*c.ceiling_bytes);
      (*w)->region->SetCeiling((*w)->ceiling_bytes);
    }
    StartGrower(w->get());
  }
  // The logs came back with the image; the server has their text up to the checkpoint. That is
  // the image's copy's size: the restored job runs already and may have written more (a gang
  // rank whose peers are back goes on at once), which the server has not seen.
  auto at_checkpoint = [&image](const char* name, const std::string& live) {
    const std::string copy = image + "/logs/" + name;
    std::error_code ec;
    return fs::is_regular_file(copy, ec) ? FileSize(copy) : FileSize(live);
  };
  (*w)->out_offset = (*w)->out_pending = at_checkpoint("stdout.log", record->stdout_log);
  (*w)->err_offset = (*w)->err_pending = at_checkpoint("stderr.log", record->stderr_log);
  SaveRecord(**w);
  Say("restored job " + job + " (epoch " + std::to_string(epoch) + ") as pid " +
      std::to_string(record->pid) + " on " + gpu_uuid + ": " + times.Describe());
  const int64_t pid = record->pid;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_[{job, epoch}] = std::move(*w);
  }
  AddResult(id, Status::Ok(), {{key::kPid, pid}});
}

}  // namespace paladin::agent
