// The server's commands (docs/formats/api.md, "Node agents"). start, kill, resize and fault are
// quick and run on the main loop; checkpoint, restore, migrate_in and migrate_out run on worker
// threads while heartbeats go on. Each adds exactly one result.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "agent_impl.h"
#include "paladin/ckpt/cgroup.h"
#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/gpu_checkpoint.h"
#include "paladin/ckpt/image.h"
#include "paladin/ckpt/rank_net.h"
#include "paladin/ckpt/subprocess.h"
#include "paladin/migrate/migrate.h"
#include "paladin/migrate/owned_dir.h"
#include "paladin/quota/launch.h"
#include "paladin/quota/usage.h"

namespace paladin::agent {

namespace fs = std::filesystem;

namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The copy a command is about; -1: every copy.
int64_t Epoch(const api::Command& c) { return c.epoch.value_or(-1); }

int64_t FileSize(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  return ec ? 0 : static_cast<int64_t>(size);
}

// The restored copy's exit status goes to this agent (a subreaper) once CRIU lets go of it; a
// killed source's root, when it was our child, is reaped here.
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

// Whether a process of the job holds GPU state now (a CUDA context): that state leaves through
// the driver's checkpoint call, which a post-copy move does not make, so such a job moves
// pre-copy. The same question CheckpointJob asks before a post-copy dump (which refuses it).
StatusOr<bool> HoldsGpuState(const ckpt::JobRecord& job) {
  if (job.gpu.empty()) return false;
  std::string driver = "libcuda.so.1";
  if (job.gpu == "emulated") {
    StatusOr<quota::Libraries> libs = quota::FindLibraries();
    if (!libs.ok()) return libs.status();
    driver = libs->emucuda;
    if (!job.emu_state.empty()) setenv("PALADIN_EMU_STATE", job.emu_state.c_str(), 1);
    if (!job.emu_gpus.empty()) setenv("PALADIN_EMU_GPUS", job.emu_gpus.c_str(), 1);
  }
  StatusOr<std::unique_ptr<ckpt::GpuCheckpointer>> gpu = ckpt::GpuCheckpointer::Load(driver);
  if (!gpu.ok()) return gpu.status();
  std::vector<pid_t> pids;
  for (uint32_t pid : quota::ProcessTree(static_cast<uint32_t>(job.pid))) {
    pids.push_back(static_cast<pid_t>(pid));
  }
  return !(*gpu)->CudaProcesses(pids).empty();
}

}  // namespace

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

// A gang rank moves with its network (its connections to the other ranks): the server never moves
// one alone (docs/server.md, "Gangs"), so a migrate_in of a rank is refused.
Status RefuseRankNet(const api::Command& c) {
  if (c.rank_net) return FailedPrecondition("a gang rank does not move alone");
  return Status::Ok();
}

}  // namespace

Status Agent::Start(const api::Command& c, Json* detail) {
  const std::string& id = c.job;
  const int64_t epoch = c.epoch.value_or(0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Workload* w = Find(id, epoch); w != nullptr && w->state != api::CopyState::kExited) {
      (*detail)["pid"] = w->record.pid;  // already started: the server asked twice
      return Status::Ok();
    }
  }
  StatusOr<std::unique_ptr<Workload>> w = Launch(c);
  if (!w.ok()) return w.status();
  (*detail)["pid"] = (*w)->record.pid;
  std::string quota = "no GPU-memory quota";
  if ((*w)->region != nullptr) {
    quota = quota::FormatSize((*w)->region->quota()) + " quota";
    if ((*w)->region->ceiling() > (*w)->region->quota()) {
      quota += " (grows up to " + quota::FormatSize((*w)->region->ceiling()) + ")";
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
  Say("job " + id + ": quota " + quota::FormatSize(before) + " -> " +
      quota::FormatSize(w->region->quota()) + ", ceiling " +
      quota::FormatSize(w->region->ceiling()));
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
      {"path", w->record.image}, {"bytes", times->image_bytes}, {"seconds", Since(began)}};
  Say("checkpointed job " + job + " into " + w->record.image + " (" +
      quota::FormatSize(times->image_bytes) + ", " + times->Describe() + ")" +
      (mode == "stop"     ? "; it is stopped and forgotten here"
       : mode == "frozen" ? "; it stays frozen until its gang's thaw"
                          : "; it runs on"));
  if (mode == "stop") {
    Reap(static_cast<pid_t>(w->record.pid));
    if (!w->record.cgroup.empty()) (void)ckpt::Cgroup::Existing(w->record.cgroup).Remove();
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
      AddResult(id, Status::Ok(), {{"pid", w->record.pid}});
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
  AddResult(id, Status::Ok(), {{"pid", pid}});
}

void Agent::MigrateIn(const api::Command& c) {
  const int64_t id = c.id;
  if (Status refused = RefuseRankNet(c); !refused.ok()) {
    AddResult(id, refused);
    return;
  }
  const std::string& job = c.job;
  const int64_t epoch = c.epoch.value_or(0);
  const int gpu_index = std::max(c.gpu_index, 0);
  std::string gpu_uuid = c.gpu_uuid;
  if (gpu_uuid.empty()) gpu_uuid = GpuUuid(gpu_index);
  if (job.empty() || job.find('/') != std::string::npos || job[0] == '.') {
    AddResult(id, InvalidArgument("migrate_in: bad job id '" + job + "'"));
    return;
  }
  migrate::DestinationOptions options;
  options.placement = PlacementFor(job);
  options.port = c.port;
  options.token = c.token;
  options.bind_address = options_.address;
  options.dir =
      data_dir_ + "/incoming/" + job + "-" + std::to_string(epoch) + "-" + std::to_string(id);
  // The destination maps the source's GPU onto its own before the image arrives, so it must be
  // told which it was (from_gpu_uuid, or a whole gpu_map).
  const std::string& from = c.from_gpu_uuid;
  options.gpu_map = c.gpu_map;
  if (!from.empty() && from != gpu_uuid && c.gpu_map.empty()) {
    options.gpu_map.emplace_back(from, gpu_uuid);
  }
  std::error_code ec;
  fs::remove_all(options.dir, ec);
  fs::create_directories(options.dir, ec);
  StatusOr<ckpt::Criu> criu = ReadyCriu();
  if (!criu.ok()) {
    AddResult(id, criu.status());
    return;
  }
  // The image's control folder must lead to ours before the restore asks the process anything:
  // watch for its manifest (it appears once the image is verified, before the restore).
  // So must the job's uid be held for it here (CRIU restores the uid it had), and its run
  // directory made as the source had it.
  std::atomic<bool> served{false};
  // The restore waits for the prepare (options.before_restore): a run directory that the restore
  // made first would have the default mode, not the source's, and CRIU refuses it.
  std::mutex prepare_mu;
  std::condition_variable prepare_cv;
  bool prepare_done = false;
  Workload user;
  user.id = job;
  user.epoch = epoch;
  Status held = Status::Ok();
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  std::thread link([&] {
    const std::string manifest = options.dir + "/image/manifest.json";
    while (!served.load() && !fs::exists(manifest)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    StatusOr<ckpt::Manifest> m = ckpt::ReadManifest(options.dir + "/image");
    if (m.ok() && !served.load()) {
      held = HoldUser(&user, m->uid);
      if (held.ok()) {
        supervise::PrepareFor(*m, RestoreSpecFor(user));
      } else {
        // Called off while the source has not connected yet: it resumes there.
        Say("migrate_in " + job + ": " + held.message() + "; calling the move off");
        cancel->store(true);
      }
    }
    {
      std::lock_guard<std::mutex> lock(prepare_mu);
      prepare_done = true;
    }
    prepare_cv.notify_all();
  });
  // One listening port per agent, and the server sends one move at a time to a node: a listener
  // still waiting from an earlier move is stale (its move failed), so this one replaces it.
  CallOffIncoming("", -1);
  for (int waited = 0; waited < 500; ++waited) {  // until stale listeners let go of the port
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (incoming_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming_[{job, epoch}] = cancel;
  }
  options.cancel = cancel.get();
  options.lease_fd = lease_fd_;
  options.before_restore = [&] {
    std::unique_lock<std::mutex> lock(prepare_mu);
    // Bounded: the manifest the prepare waits for is there once the image has arrived.
    if (!prepare_cv.wait_for(lock, std::chrono::seconds(60), [&] { return prepare_done; })) {
      Say("migrate_in " + job + ": the job's run directory was not prepared within 60 s");
    }
  };
  // Recorded before the source hears of it: if this agent dies now, its successor finds the
  // stopped copy and asks the server what became of the move (SettleInterruptedMoves).
  const int64_t migration_id = c.migration;
  options.restored = [&](const ckpt::JobRecord& restored) {
    Workload pending;
    pending.id = job;
    pending.epoch = epoch;
    pending.agent_dir = records_dir_ + "/" + job + "-" + std::to_string(epoch);
    pending.record = restored;
    pending.start_time = quota::ProcessIdOf(std::to_string(restored.pid)).start_time;
    pending.gpu_index = gpu_index;
    pending.gpu_uuid = gpu_uuid;
    pending.uid = user.uid;
    pending.gid = user.gid;
    pending.pooled_uid = user.pooled_uid;
    pending.incoming_migration = migration_id > 0 ? migration_id : -1;
    // The logs came with the image; the server has their text up to the dump.
    pending.out_offset = pending.out_pending = FileSize(restored.stdout_log);
    pending.err_offset = pending.err_pending = FileSize(restored.stderr_log);
    SaveRecord(pending);
  };
  // The source follows the server's row, not this side's answers: nothing to answer afterwards.
  options.answer_for_s = 0;
  // The server's row decides a move whose source went away after the restore.
  const int64_t migration = c.migration;
  if (migration > 0) {
    options.resolve = [this, migration] { return ResolveMigration(migration); };
  }
  StatusOr<ckpt::JobRecord> record = migrate::ServeOneMigration(
      *criu, options, [job](const std::string& line) { Say("migrate_in " + job + ": " + line); });
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = incoming_.find({job, epoch});
    if (it != incoming_.end() && it->second == cancel) incoming_.erase(it);
  }
  served.store(true);
  link.join();
  fs::remove_all(options.dir, ec);  // restored: the image is no longer needed here
  if (!record.ok()) {
    // Its copy, if one was restored, was dropped.
    fs::remove_all(records_dir_ + "/" + job + "-" + std::to_string(epoch), ec);
    FreeUser(&user);
    AddResult(id, record.status());
    return;
  }
  if (!held.ok()) {
    // The source had connected before the call-off: the move went through and this is now the
    // job's only copy, which must not be lost. It runs unheld (no new job gets the uid while a
    // process runs as it), sharing its uid with the job that holds it until one of them ends.
    Say("warning: job " + job + " runs here as a uid that " + held.message() +
        "; the two are not isolated from each other until one of them ends");
  }
  supervise::HandOver(*record, RestoreSpecFor(user));
  StatusOr<std::unique_ptr<Workload>> w = Track(job, epoch, *record, gpu_index, gpu_uuid);
  if (!w.ok()) {
    FreeUser(&user);
    AddResult(id, w.status());
    return;
  }
  TakeUser(&user, w->get());
  (*w)->out_offset = (*w)->out_pending = FileSize(record->stdout_log);
  (*w)->err_offset = (*w)->err_pending = FileSize(record->stderr_log);
  SaveRecord(**w);
  Say("received job " + job + " (epoch " + std::to_string(epoch) + "): running here as pid " +
      std::to_string(record->pid));
  const int64_t pid = record->pid;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_[{job, epoch}] = std::move(*w);
  }
  AddResult(id, Status::Ok(), {{"pid", pid}});
}

Status Agent::CommitMigration(int64_t migration) {
  // Once asked, the commit is in doubt until the server answers: it may have committed and died
  // before answering (it keeps the answer). Giving up then and resuming the job here could run it
  // twice: the server's row is the truth, and the destination resumes its copy when the server
  // says so. So the job stays stopped here until a definite answer (the server decides every
  // migration within its migration timeout); only the agent's stop leaves it in doubt.
  api::Client client(client_->endpoint(), options_.token, 10);  // one client per thread
  const std::string path = "/v1/migrations/" + std::to_string(migration) + "/commit";
  double backoff = 0.5;
  for (int attempt = 1;; ++attempt) {
    StatusOr<Json> answer = client.Post(path, Json::object());
    if (answer.ok() && answer->is_object() && answer->contains("commit") &&
        (*answer)["commit"].is_boolean()) {
      if ((*answer)["commit"].get<bool>()) return Status::Ok();
      return FailedPrecondition("the server did not commit migration " + std::to_string(migration));
    }
    const Status why = answer.ok() ? Internal("an answer without \"commit\"") : answer.status();
    if (stop_->load()) {
      return Unavailable("the agent stops with the commit of migration " +
                         std::to_string(migration) + " unanswered: " + why.message());
    }
    if (attempt == 1 || attempt % 10 == 0) {
      Say("commit of migration " + std::to_string(migration) + ": " + why.message() +
          "; the job stays stopped here; asking again");
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
    backoff = std::min(backoff * 2, 5.0);
  }
}

StatusOr<bool> Agent::ResolveMigration(int64_t migration) {
  api::Client client(client_->endpoint(), options_.token, 10);
  StatusOr<Json> answer =
      client.Post("/v1/migrations/" + std::to_string(migration) + "/abort", Json::object());
  if (!answer.ok()) return answer.status();
  if (!answer->is_object() || !answer->contains("commit") || !(*answer)["commit"].is_boolean()) {
    return Internal("the server's answer has no \"commit\"");
  }
  return (*answer)["commit"].get<bool>();
}

void Agent::SettleInterruptedMoves() {
  std::vector<Workload*> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, w] : jobs_) {
      if ((w->incoming_migration != 0 || w->outgoing_migration != 0) && !w->busy &&
          w->state != api::CopyState::kExited) {
        w->busy = true;
        pending.push_back(w.get());
      }
    }
  }
  for (Workload* w : pending) {
    const bool incoming = w->incoming_migration != 0;
    const int64_t migration = incoming ? w->incoming_migration : w->outgoing_migration;
    // The server's answer is the same whoever asks: once asked, an undecided move is aborted.
    // No migration id (a server without one): nobody can say it committed.
    StatusOr<bool> committed = migration > 0 ? ResolveMigration(migration) : StatusOr<bool>(false);
    const std::string what = "job " + w->id + ": migration " + std::to_string(migration) +
                             (incoming ? " (in)" : " (out)") +
                             ", left unsettled by a previous agent";
    if (!committed.ok()) {
      Say(what + "; the server did not say what became of it (" + committed.status().message() +
          "); asking again");
      std::lock_guard<std::mutex> lock(mu_);
      w->busy = false;
      continue;
    }
    // The copy that runs: the received one if the move committed, else the one sent. Its init
    // (stopped by the dump or the restore) continues it, and fences it by this node's lease.
    if (*committed == incoming) {
      SignalTree(static_cast<pid_t>(w->record.pid), SIGCONT);
      std::lock_guard<std::mutex> lock(mu_);
      w->incoming_migration = 0;
      w->outgoing_migration = 0;
      w->frozen = false;
      w->busy = false;
      SaveRecord(*w);
      Say(what + ": " + (incoming ? "committed" : "not committed") + "; this copy continues");
      continue;
    }
    Status s = KillTree(w);
    std::lock_guard<std::mutex> lock(mu_);
    w->busy = false;
    if (!s.ok()) continue;
    Say(what + ": " + (incoming ? "not committed" : "committed") + "; killed this copy");
    // A sent copy's run directory stays, as after a move (on one host the other copy uses it).
    Forget(w->id, w->epoch, incoming);
  }
}

namespace {

// What a move's events and logs call its mode (the names of MigrateReport::mode).
std::string MoveModeOf(const migrate::MigrateOptions& options) {
  if (options.lazy) return "post-copy";
  return options.stream ? "stream" : "pre-copy";
}

}  // namespace

void Agent::MigrateOut(const api::Command& c) {
  const int64_t id = c.id;
  migrate::MigrateOptions options;
  options.host = c.to_address;
  options.port = c.port;
  options.token = c.token;
  const int64_t migration = c.migration;
  options.commit = [this, migration] { return CommitMigration(migration); };
  options.id = std::to_string(migration);
  // This move's folder (the image without or with its memory, the move's state, the dump's
  // log), locked by this agent while it lives: one left by an agent that died mid-move is removed
  // by its successor (RemoveOrphanedMoveFolders), and a failed move's stays until then.
  StatusOr<migrate::OwnedDir> folder = migrate::OwnedDir::Claim(
      data_dir_ + "/outgoing/move-" + std::to_string(migration) + "-" + std::to_string(id));
  if (!folder.ok()) {
    AddResult(id, folder.status());
    return;
  }
  options.work_dir = folder->path();
  std::error_code ec;
  StatusOr<ckpt::Criu> criu = Internal("unset");
  Workload* w = ClaimForCriu(c, &criu);
  if (w == nullptr) {
    fs::remove_all(folder->path(), ec);
    return;
  }
  const std::string job = w->id;
  // How its memory moves: post-copy when the server asked for it and it can be done here; else
  // pre-copy, streamed into the destination's page server when the server says both agents can
  // (the same for a job holding GPU state: the driver's checkpoint puts it in the job's memory,
  // which streams as the rest does), else by image.
  std::string mode_why = "the server asked for pre-copy";
  if (c.move_mode == api::MoveMode::kPostCopy) {
    StatusOr<ckpt::Criu> lazy = ReadyLazyCriu();
    StatusOr<bool> gpu = HoldsGpuState(w->record);
    if (!lazy.ok()) {
      mode_why = "no post-copy CRIU here: " + lazy.status().message();
    } else if (!gpu.ok()) {
      mode_why = "cannot tell whether the job holds GPU state: " + gpu.status().message();
    } else if (*gpu) {
      mode_why = "the job holds GPU state, which post-copy does not move";
    } else {
      criu = lazy;
      options.lazy = true;
      mode_why = "no GPU state; both agents have the post-copy CRIU";
      // The owner settles a move whose destination cannot say that its copy is gone; a copy
      // there whose agent cannot reach the owner is stopped by its lease within lease_s.
      options.resolve = [this, migration]() -> StatusOr<bool> {
        for (;;) {
          StatusOr<bool> committed = ResolveMigration(migration);
          if (committed.ok() || stop_->load()) return committed;
          std::this_thread::sleep_for(std::chrono::seconds(1));
        }
      };
      options.fence_s = lease_s_.load() + 1;
    }
  }
  const std::string asked_why = mode_why;  // a refused stream's image move says this and why
  if (!options.lazy) {
    options.stream = c.stream;
    options.image_if_refused = true;
    mode_why += c.stream ? "; streamed" : "; by image (the server did not ask to stream)";
  }
  const std::string mode_name = MoveModeOf(options);
  Say("migrate_out " + job + ": " + mode_name + " (" + mode_why + ")");
  // Recorded before the dump stops the job: if this agent dies before the move is settled, its
  // successor finds the copy stopped and asks the server what became of the move.
  {
    std::lock_guard<std::mutex> lock(mu_);
    w->outgoing_migration = migration;
    SaveRecord(*w);
  }
  StatusOr<migrate::MigrateReport> report =
      migrate::Migrate(*criu, &w->record, options,
                       [job](const std::string& line) { Say("migrate_out " + job + ": " + line); });
  if (!report.ok()) {
    // Any failure before the commit resumed it here. With the lease run out meanwhile the server
    // may restore the job elsewhere: it is frozen at once, as CheckLease would have done.
    {
      std::lock_guard<std::mutex> lock(mu_);
      w->busy = false;
      // Settled here (resumed), unless the agent stops with the commit unanswered: then the next
      // agent asks.
      if (!stop_->load()) {
        w->outgoing_migration = 0;
        SaveRecord(*w);
      }
      if (frozen_.load() && !w->frozen) {
        // A fenced job's init stops it again by itself (fence::kPollMs).
        if (!w->fenced) SignalTree(static_cast<pid_t>(w->record.pid), SIGSTOP);
        w->frozen = true;
        Say("job " + job + " frozen again: no contact with the server");
      }
    }
    AddResult(id,
              Status(report.status().code(), report.status().message() + " (" + mode_name + ")"));
    return;
  }
  fs::remove_all(folder->path(), ec);  // moved: nothing of the job is left here
  if (!report->mode_note.empty()) mode_why = asked_why + "; " + report->mode_note;
  Json phases = Json::object();
  for (const auto& [name, seconds] : report->times.seconds) phases[name] = seconds;
  Say("moved job " + job + " to " + options.host + ":" + std::to_string(options.port) + " (pid " +
      std::to_string(report->remote_pid) + " there), " + report->mode + ", pause " +
      std::to_string(report->pause_s) + " s; forgotten here");
  Reap(static_cast<pid_t>(w->record.pid));
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Its run directory stays: on one machine the destination's copy runs from the same paths.
    Forget(w->id, w->epoch, false);
  }
  AddResult(id, Status::Ok(),
            {{"pause_s", report->pause_s},
             {"total_s", report->total_s},
             {"mode", report->mode},
             {"mode_why", mode_why},
             {"phases", phases},
             {"pid", report->remote_pid}});
}

}  // namespace paladin::agent
