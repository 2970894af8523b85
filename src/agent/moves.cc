// The server's move commands (docs/formats/api.md, "Node agents"; docs/lazy_migration.md):
// migrate_in and migrate_out, run on worker threads while heartbeats go on, each adding exactly
// one result, and what settles a move the agent was part of when it stopped.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <thread>

#include "agent_impl.h"
#include "paladin/api/wire.h"
#include "paladin/base/process.h"
#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/gpu_checkpoint.h"
#include "paladin/ckpt/image.h"
#include "paladin/migrate/migrate.h"
#include "paladin/migrate/owned_dir.h"
#include "paladin/quota/launch.h"

namespace paladin::agent {

namespace fs = std::filesystem;
namespace key = api::key;

namespace {

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
  for (uint32_t pid : base::ProcessTree(static_cast<uint32_t>(job.pid))) {
    pids.push_back(static_cast<pid_t>(pid));
  }
  return !(*gpu)->CudaProcesses(pids).empty();
}

// A gang rank moves with its network (its connections to the other ranks): the server never moves
// one alone (docs/server.md, "Gangs"), so a migrate_in of a rank is refused.
Status RefuseRankNet(const api::Command& c) {
  if (c.rank_net) return FailedPrecondition("a gang rank does not move alone");
  return Status::Ok();
}

}  // namespace

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
  options.lazy_criu = ReadyLazyCriu();  // found once per agent, not in a move's pause
  // Before the restore, with the arrived image's manifest: the job's uid held for it here (CRIU
  // restores the uid it had) and its run directory made as the source had it (a run directory
  // that the restore made would have the default mode, which CRIU refuses). A uid this node
  // cannot hold for the job (root on a node of per-job uids, or a uid another job holds) ends
  // the move before anything is restored: the job resumes at its source.
  Workload user;
  user.id = job;
  user.epoch = epoch;
  options.before_restore = [&](const ckpt::Manifest& m) {
    Status held = HoldUser(&user, m.uid);
    if (!held.ok()) return held;
    supervise::PrepareFor(m, RestoreSpecFor(user));
    return Status::Ok();
  };
  auto cancel = std::make_shared<std::atomic<bool>>(false);
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
  // Recorded before the source hears of it: if this agent dies now, its successor finds the
  // stopped copy and asks the server what became of the move (SettleInterruptedMoves).
  const int64_t migration_id = c.migration;
  options.restored = [&](const ckpt::JobRecord& restored) {
    Workload pending;
    pending.id = job;
    pending.epoch = epoch;
    pending.agent_dir = records_dir_ + "/" + job + "-" + std::to_string(epoch);
    pending.record = restored;
    pending.start_time = base::ProcessIdOf(std::to_string(restored.pid)).start_time;
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
  fs::remove_all(options.dir, ec);  // restored: the image is no longer needed here
  if (!record.ok()) {
    // Its copy, if one was restored, was dropped.
    fs::remove_all(records_dir_ + "/" + job + "-" + std::to_string(epoch), ec);
    FreeUser(&user);
    AddResult(id, record.status());
    return;
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
  AddResult(id, Status::Ok(), {{key::kPid, pid}});
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
    if (answer.ok() && answer->is_object() && answer->contains(key::kCommit) &&
        (*answer)[key::kCommit].is_boolean()) {
      if ((*answer)[key::kCommit].get<bool>()) return Status::Ok();
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
  if (!answer->is_object() || !answer->contains(key::kCommit) ||
      !(*answer)[key::kCommit].is_boolean()) {
    return Internal("the server's answer has no \"commit\"");
  }
  return (*answer)[key::kCommit].get<bool>();
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
  if (report->page_stream_resumes > 0) {
    mode_why += "; its page stream's link was cut " + std::to_string(report->page_stream_resumes) +
                " time(s) and made again";
  }
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
            {{key::kPauseS, report->pause_s},
             {"total_s", report->total_s},
             {key::kMode, report->mode},
             {key::kModeWhy, mode_why},
             {"phases", phases},
             {key::kPid, report->remote_pid}});
}

}  // namespace paladin::agent
