// The migration transaction (docs/server.md, DESIGN.md "Migration is a transaction"), drains,
// the rebalancer's admission plans, periodic checkpoints and recovery from dead nodes.
//
//   reserved -> migrate_in_sent -> transfer (migrate_out sent) -> committed -> done
//            \___________________ failed (before the commit: the job stays on its source)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "control.h"
#include "paladin/api/wire.h"
#include "paladin/server/validate.h"

namespace paladin::server {

namespace key = api::key;

namespace {

std::string FormatSeconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f s", s);
  return text;
}

// What a move's events say of how it went: the mode the source used and why, how long the job
// was stopped (from its stop at the source to its resuming at the destination) and what the cost
// model expected. Empty until the source has reported.
std::string MoveSummary(const MigrationRecord& m) {
  if (m.mode_used.empty()) return "";
  return "; " + m.mode_used + (m.move_mode_why.empty() ? "" : " (" + m.move_mode_why + ")") +
         ", paused " + FormatSeconds(m.pause_s.value_or(0)) + ", expected " +
         FormatSeconds(m.expected_pause_s) + " (" + m.expected_basis + ")";
}

}  // namespace

void Control::RecordMoveCost(MigrationRecord& m, const Json& detail) {
  if (!detail.is_object()) return;
  JobRecord* j = JobOf(m);
  // A node's figure is not trusted to be sane: only a finite pause under a week is kept and
  // learned from (once per move).
  if (!m.pause_s && detail.contains(key::kPauseS) && detail[key::kPauseS].is_number()) {
    const double pause = detail[key::kPauseS].get<double>();
    if (std::isfinite(pause) && pause > 0 && pause < 7 * 24 * 3600.0) {
      m.pause_s = pause;
      if (j != nullptr) m.moved_bytes = j->used_bytes;
      move_costs_.Observe(m.from_node, m.to_node, {static_cast<double>(m.moved_bytes), 0, pause});
    }
  }
  if (detail.contains(key::kMode) && detail[key::kMode].is_string()) {
    m.mode_used = detail[key::kMode].get<std::string>().substr(0, 32);
  }
  if (detail.contains(key::kModeWhy) && detail[key::kModeWhy].is_string()) {
    m.move_mode_why = detail[key::kModeWhy].get<std::string>().substr(0, 512);
  }
  if (m.mode_used.empty()) m.mode_used = api::MoveModeName(api::MoveMode::kPreCopy);
  migrations_.MarkDirty(m);
  if (m.step != MigrationStep::kDone) return;  // FinishMigration's event will say it
  // The destination's result finished the move first: its event could not say this yet.
  Event("migration_cost", j, m.from_node, "migration " + std::to_string(m.id) + MoveSummary(m));
}

std::string Control::CheckpointDir(const JobRecord& j, int seq) const {
  char name[16];
  std::snprintf(name, sizeof name, "%04d", seq);
  return options_.checkpoint_store + "/" + j.id + "/" + name;
}

api::MoveMode Control::MoveModeFor(const NodeRecord& from, const NodeRecord& to, bool* stream,
                                   std::string* why) const {
  // Pre-copy streams unless the server says image or an agent cannot (an older agent, or one
  // whose workloads CRIU cannot dump); a post-copy move's source falls back to it for a job
  // holding GPU state.
  *stream = false;
  std::string no_stream;
  if (options_.move_mode == "image") {
    no_stream = "the server's --move-mode is image";
  } else {
    for (const NodeRecord* n : {&from, &to}) {
      if (!n->stream && no_stream.empty()) {
        no_stream = "node " + n->name + "'s agent does not stream pre-copy moves";
      }
    }
  }
  *stream = no_stream.empty();
  const std::string pre_copy = *stream ? "streamed" : "by image: " + no_stream;
  if (options_.move_mode == "pre-copy" || options_.move_mode == "image") {
    *why = "the server's --move-mode is " + options_.move_mode +
           (*stream ? "; streamed" : (options_.move_mode == "image" ? "" : "; " + pre_copy));
    return api::MoveMode::kPreCopy;
  }
  for (const NodeRecord* n : {&from, &to}) {
    if (!n->post_copy) {
      *why = "node " + n->name +
             "'s agent has no post-copy CRIU (scripts/criu_lazy.sh); pre-copy " + pre_copy;
      return api::MoveMode::kPreCopy;
    }
  }
  *why = "both agents have the post-copy CRIU (a job holding GPU state moves pre-copy, " +
         pre_copy + ")";
  return api::MoveMode::kPostCopy;
}

Status Control::StartMigration(JobRecord& j, const std::string& to, int to_gpu,
                               const std::string& why, std::string* refusal) {
  if (j.state() != JobState::kRunning) {
    return FailedPrecondition("job " + j.id + " is " + j.StateName() +
                              "; only a running job migrates");
  }
  if (migrations_.Active(j.migration_id) != nullptr) {
    return FailedPrecondition("job " + j.id + " is already migrating");
  }
  if (j.gpus != 1) return FailedPrecondition("job " + j.id + " uses several GPUs; not migratable");
  if (const NodeRecord* source = nodes_.Find(j.node); source && !source->checkpointable) {
    return FailedPrecondition("job " + j.id +
                              " is not migratable: " + std::string(kNotCheckpointable));
  }
  const NodeRecord* dest = nodes_.Find(to);
  if (dest == nullptr) return NotFound("node " + to + " not found");
  // Within a node a job moves to another of its GPUs, named.
  if (to == j.node && to_gpu < 0) {
    return FailedPrecondition("job " + j.id + " already runs on " + to +
                              "; name another of its GPUs (" + to + "/GPU)");
  }
  if (to == j.node && to_gpu == j.gpu) {
    return FailedPrecondition("job " + j.id + " already runs on " + to + "/" +
                              std::to_string(to_gpu));
  }
  if (dest->state != NodeState::kAlive || dest->draining) {
    return FailedPrecondition("node " + to + " is " + std::string(NodeStateName(dest->state)));
  }
  if (dest->migrate_port <= 0) {
    return FailedPrecondition("node " + to + " registered no migrate_port");
  }
  if (migrations_.HasIncoming(to)) {
    return FailedPrecondition("node " + to + " is already receiving a migration");
  }
  const NodeRecord* source = nodes_.Find(j.node);
  if (source == nullptr || source->state == NodeState::kDead) {
    return FailedPrecondition("job " + j.id + "'s node is not alive");
  }
  std::string mode_why;
  bool stream = false;
  const api::MoveMode mode = MoveModeFor(*source, *dest, &stream, &mode_why);
  if (options_.move_mode == "post-copy" && mode != api::MoveMode::kPostCopy) {
    return FailedPrecondition("job " + j.id +
                              " cannot move post-copy (--move-mode post-copy): " + mode_why);
  }
  FleetView view = BuildFleet(true);
  const int32_t node = view.index.at(to);
  const core::Workload w = JobShape(j, view.gpu_memory[static_cast<size_t>(node)]);
  core::Placement p;
  if (to_gpu >= 0) {
    const auto& map = view.gpu_index[static_cast<size_t>(node)];
    auto g = std::find(map.begin(), map.end(), to_gpu);
    if (g == map.end()) {
      return FailedPrecondition("node " + to + " has no healthy GPU " + std::to_string(to_gpu));
    }
    p.node = node;
    p.gpus.push_back(static_cast<int16_t>(g - map.begin()));
    Status fits = view.fleet.CheckPlacement(w, p);
    if (!fits.ok()) return FailedPrecondition("the job does not fit there: " + fits.message());
  } else {
    core::PackerOptions options;
    options.collect_reasons = true;
    options.only_node = node;
    core::Decision d = scheduler_.PlaceMove(view, w, options);
    if (!d.placed) {
      if (refusal != nullptr) *refusal = d.Explain();
      return FailedPrecondition("the job does not fit on " + to + ": " + d.Explain());
    }
    p = d.placement;
  }
  StatusOr<std::string> token = RandomHex(16);
  if (!token.ok()) return token.status();
  MigrationRecord& m = migrations_.Add(MigrationRecord{});  // numbered, marked dirty
  m.job = j.id;
  m.from_node = j.node;
  m.from_gpu = j.gpu;
  m.to_node = to;
  m.to_gpu = view.gpu_index[static_cast<size_t>(node)][static_cast<size_t>(p.gpus[0])];
  const GpuRecord* gpu = dest->Gpu(m.to_gpu);
  m.to_uuid = gpu != nullptr ? gpu->uuid : "";
  m.token = *token;
  m.port = dest->migrate_port;
  m.new_epoch = j.epoch + 1;
  m.created_at = Now();
  m.why = why;
  m.move_mode = mode;
  m.stream = stream;
  m.move_mode_why = mode_why;
  m.step = MigrationStep::kReserved;
  const core::PauseEstimate expected =
      move_costs_.Estimate(j.node, to, static_cast<double>(j.used_bytes), 0);
  m.expected_pause_s = expected.pause_s;
  m.expected_basis = std::string(core::EstimateBasisName(expected.basis)) +
                     (expected.moves > 0 ? ", " + std::to_string(expected.moves) + " move(s)" : "");
  jobs_.SetState(j, JobState::kMigrating);
  j.migration_id = m.id;
  j.reason = "migrating to " + to + "/" + std::to_string(m.to_gpu) + " (" + why + ")";
  Event("migration_started", &j, j.node,
        "migration " + std::to_string(m.id) + " to " + to + "/" + std::to_string(m.to_gpu) + " (" +
            why + "), " + m.AskedModeName() + ": " + mode_why + "; expected pause " +
            FormatSeconds(m.expected_pause_s) + " (" + m.expected_basis + ")");
  jobs_.MarkDirty(j);
  CrashPoint("reserved");
  AdvanceMigration(m, MigrationEvent{MigrationEvent::Kind::kReserved, ""});
  return Status::Ok();
}

void Control::AdvanceMigration(MigrationRecord& m, const MigrationEvent& event) {
  if (m.Finished()) return;
  JobRecord* found = JobOf(m);
  if (found == nullptr) return FailMigration(m, "the job is gone");
  JobRecord& j = *found;
  const MigrationAction action =
      NextMigrationAction(m.step, m.commit_answer.value_or(false), event);
  switch (action.kind) {
    case MigrationAction::Kind::kNone:
      return;
    case MigrationAction::Kind::kFinish:
      return FinishMigration(m);
    case MigrationAction::Kind::kFail:
      return FailMigration(m, action.why);
    case MigrationAction::Kind::kSendMigrateIn: {
      const NodeRecord& dest = nodes_.At(m.to_node);
      api::Command in;
      in.kind = api::CommandKind::kMigrateIn;
      in.port = m.port;
      in.token = m.token;
      in.gpu_index = m.to_gpu;
      in.gpu_uuid = m.to_uuid;
      in.migration = m.id;
      in.epoch = m.new_epoch;
      in.name = j.name;
      in.command = j.command;
      in.env = j.env;
      in.quota_bytes = j.quota_bytes;
      in.ceiling_bytes = std::max(j.ceiling_bytes, j.quota_bytes);
      in.from_node = m.from_node;
      in.from_gpu_uuid = j.gpu_uuid;
      in.address = dest.address;
      in.move_mode = m.move_mode;
      m.in_command = SendCommand(m.to_node, std::move(in), &j);
      m.step = MigrationStep::kMigrateInSent;
      migrations_.MarkDirty(m);
      CrashPoint("migrate_in_sent");
      return;
    }
    case MigrationAction::Kind::kSendMigrateOut: {
      const NodeRecord& dest = nodes_.At(m.to_node);
      api::Command out;
      out.kind = api::CommandKind::kMigrateOut;
      out.to_address = dest.address.empty() ? "127.0.0.1" : dest.address;
      out.port = m.port;
      out.token = m.token;
      out.migration = m.id;
      out.to_node = m.to_node;
      out.to_gpu = m.to_gpu;
      out.to_gpu_uuid = m.to_uuid;
      out.move_mode = m.move_mode;
      out.stream = m.stream;
      m.out_command = SendCommand(m.from_node, std::move(out), &j);
      m.step = MigrationStep::kTransfer;
      migrations_.MarkDirty(m);
      CrashPoint("migrate_out_sent");
      return;
    }
  }
}

namespace {

// Whether `who` may learn that migration `m` exists: a node's own token (agent:NODE) only when
// the node is its source or destination; to any other node's token it is as if it did not exist
// (404, not a 403 naming its nodes), so a node learns nothing of moves between others.
bool IsParty(const Principal& who, const MigrationRecord& m) {
  return !who.node_scoped() || who.node == m.from_node || who.node == m.to_node;
}

}  // namespace

StatusOr<Json> Control::AbortUnlessCommitted(const Principal& who, int64_t migration) {
  std::lock_guard<std::mutex> lock(mu_);
  MigrationRecord* found_m = migrations_.Find(migration);
  if (found_m == nullptr) return NotFound("migration " + std::to_string(migration) + " not found");
  MigrationRecord& m = *found_m;
  if (!IsParty(who, m)) return NotFound("migration " + std::to_string(migration) + " not found");
  // The destination asks when it lost its source; a restarted source asks for a move it had
  // begun. Nobody else is a party to it.
  if (!who.SpeaksFor(m.to_node)) {
    PALADIN_RETURN_IF_ERROR(CheckSpeaksFor(who, m.from_node,
                                           "abort migration " + std::to_string(m.id) + " (from " +
                                               m.from_node + " to " + m.to_node + ")"));
  }
  // Under the same lock as Commit: whichever comes first decides, and both hear that answer.
  if (!m.commit_answer.has_value() && !m.Finished()) {
    FailMigration(m, "the destination lost the source before the commit");
    PALADIN_RETURN_IF_ERROR(Flush());
  }
  return Json{{key::kCommit, m.commit_answer.value_or(false)}};
}

StatusOr<Json> Control::Commit(const Principal& who, int64_t migration) {
  std::lock_guard<std::mutex> lock(mu_);
  MigrationRecord* found_m = migrations_.Find(migration);
  if (found_m == nullptr) return NotFound("migration " + std::to_string(migration) + " not found");
  MigrationRecord& m = *found_m;
  if (!IsParty(who, m)) return NotFound("migration " + std::to_string(migration) + " not found");
  // Only the source commits: it has stopped the job and sent its image (migrate_out).
  PALADIN_RETURN_IF_ERROR(CheckSpeaksFor(
      who, m.from_node,
      "commit migration " + std::to_string(m.id) + " (its source is " + m.from_node + ")"));
  if (m.commit_answer.has_value()) return Json{{key::kCommit, *m.commit_answer}};
  if (m.Finished()) return Json{{key::kCommit, false}};
  JobRecord* found = JobOf(m);
  if (found == nullptr || found->Terminal() || found->cancel_requested) {
    FailMigration(m, "the job has ended");
    PALADIN_RETURN_IF_ERROR(Flush());
    return Json{{key::kCommit, false}};
  }
  CrashPoint("before_commit");
  JobRecord& j = *found;
  const double now = Now();
  Accrue(j, now);
  m.commit_answer = true;
  m.step = MigrationStep::kCommitted;
  j.node = m.to_node;
  j.gpu = m.to_gpu;
  j.gpu_indices = {m.to_gpu};
  j.gpu_uuid = m.to_uuid;
  j.epoch = m.new_epoch;
  ++j.migrations;
  Count("migrations");
  j.reason = "committed to " + m.to_node + "/" + std::to_string(m.to_gpu) + "; resuming there";
  jobs_.MarkDirty(j);
  migrations_.MarkDirty(m);
  PALADIN_RETURN_IF_ERROR(Flush());
  CrashPoint("after_commit");
  Wake();
  return Json{{key::kCommit, true}};
}

void Control::FailMigration(MigrationRecord& m, const std::string& why) {
  if (m.Finished()) return;
  if (!m.commit_answer.has_value()) m.commit_answer = false;
  m.step = MigrationStep::kFailed;
  m.error = why;
  m.ended_at = Now();
  Count("migrations_failed");
  migrations_.MarkDirty(m);
  // Its commands not carried out yet are withdrawn: a source must not start a move that can no
  // longer commit (after a restart, a migrate_out persisted but never delivered), nor a
  // destination listen for one. A result that still comes for them is ignored.
  for (int64_t id : {m.in_command, m.out_command}) {
    (void)commands_.Withdraw(id, "withdrawn: migration " + std::to_string(m.id) + " failed");
  }
  if (JobRecord* found = JobOf(m); found != nullptr) {
    JobRecord& j = *found;
    if (j.migration_id == m.id) j.migration_id = 0;
    if (j.state() == JobState::kMigrating) {
      jobs_.SetState(j, JobState::kRunning);
      j.reason =
          "migration " + std::to_string(m.id) + " failed (" + why + "); running on " + j.node;
    }
    Event("migration_failed", &j, m.from_node,
          "migration " + std::to_string(m.id) + " to " + m.to_node + " failed: " + why);
    // The destination drops its copy (it never ran: the commit was refused).
    const NodeRecord* dest = nodes_.Find(m.to_node);
    if (dest != nullptr && dest->state != NodeState::kDead) {
      SendCommand(m.to_node, api::KillCommand(m.new_epoch), &j);
    }
    jobs_.MarkDirty(j);
  }
  Wake();
}

void Control::FinishMigration(MigrationRecord& m) {
  if (m.Finished()) return;
  m.step = MigrationStep::kDone;
  m.ended_at = Now();
  migrations_.MarkDirty(m);
  if (JobRecord* found = JobOf(m); found != nullptr) {
    JobRecord& j = *found;
    if (j.migration_id == m.id) j.migration_id = 0;
    if (j.state() == JobState::kMigrating) jobs_.SetState(j, JobState::kRunning);
    j.reason = "running on " + j.node + "/" + std::to_string(j.gpu) + " (migrated from " +
               m.from_node + ")";
    Event("migrated", &j, m.to_node,
          "migration " + std::to_string(m.id) + ": " + m.from_node + "/" +
              std::to_string(m.from_gpu) + " -> " + m.to_node + "/" + std::to_string(m.to_gpu) +
              MoveSummary(m));
    jobs_.MarkDirty(j);
  }
  CrashPoint("done");
  Wake();
}

void Control::MigrationTimeouts(double now) {
  for (auto& [id, m] : migrations_) {
    if (m.Finished() || now - m.created_at < options_.migration_timeout_s) continue;
    if (m.commit_answer.value_or(false)) {
      FinishMigration(m);
    } else {
      FailMigration(m, "timed out");
    }
  }
}

void Control::DetectFailures(double now) {
  for (auto& [name, n] : nodes_) {
    if (nodes_.LeaseExpired(n, now)) {
      nodes_.MarkDead(n, now);
      Event("node_dead", nullptr, n.name,
            "no heartbeat for " + std::to_string(static_cast<int>(now - n.last_heartbeat)) + " s");
      for (auto& [id, m] : migrations_) {
        if (!m.Finished() && !m.commit_answer.has_value() &&
            (m.to_node == n.name || m.from_node == n.name)) {
          FailMigration(m, "node " + n.name + " died");
        }
      }
    }
    // Its agent has frozen its workloads by now: the jobs may run elsewhere.
    if (nodes_.FenceElapsed(n, now)) {
      RecoverNode(n);
      nodes_.MarkRecovered(n);
    }
  }
}

void Control::RecoverNode(NodeRecord& n) {
  const double now = Now();
  ForgetStoppingOn(n.name);
  for (auto& [seq, j] : jobs_) {
    if (j.node != n.name || !j.HoldsGpu()) continue;
    if (j.gang) {
      RecoverGangOf(j, n.name);
      continue;
    }
    if (MigrationRecord* m = migrations_.Active(j.migration_id))
      FailMigration(*m, "node " + n.name + " died");
    Accrue(j, now);
    ReleaseJob(j);
    j.pending_since = now;
    j.cancel_requested = false;
    if (j.last_checkpoint) {
      jobs_.SetState(j, JobState::kRestoring);
      j.recovering = true;
      j.reason = "node " + n.name + " died: restoring from " + j.last_checkpoint->path;
    } else {
      jobs_.SetState(j, JobState::kPending);
      ++j.restarts;
      Count("restarts");
      j.reason = "node " + n.name + " died and the job had no checkpoint: starting over";
      Event("restarted", &j, n.name, j.reason);
    }
    jobs_.MarkDirty(j);
  }
}

void Control::DrainNodes() {
  for (auto& [name, n] : nodes_) {
    if (!n.draining || n.state == NodeState::kDead) continue;
    for (auto& [seq, j] : jobs_) {
      if (j.node != name || j.state() != JobState::kRunning || j.migration_id != 0) continue;
      if (j.gang) {
        j.reason = "draining " + name + ": a rank of gang " + j.gang->gang +
                   " does not move alone (checkpoint and resume the gang)";
        continue;
      }
      FleetView view = BuildFleet(true);
      core::PackerOptions options;
      options.collect_reasons = true;
      core::Decision d = scheduler_.PlaceMove(view, JobShape(j, 0), options);
      if (!d.placed) {
        j.reason = "draining " + name + ": nowhere to go yet (" + d.Explain() + ")";
        continue;
      }
      const std::string& to = view.names[static_cast<size_t>(d.placement.node)];
      if (migrations_.HasIncoming(to)) continue;
      const int gpu = view.gpu_index[static_cast<size_t>(d.placement.node)]
                                    [static_cast<size_t>(d.placement.gpus[0])];
      (void)StartMigration(j, to, gpu, "draining " + name, nullptr);
    }
  }
}

StatusOr<Json> Control::Drain(const std::string& node) {
  std::lock_guard<std::mutex> lock(mu_);
  NodeRecord* found = nodes_.Find(node);
  if (found == nullptr) return NotFound("node " + node + " not found");
  NodeRecord& n = *found;
  n.draining = true;
  if (n.state != NodeState::kDead) n.state = NodeState::kDraining;
  Event("draining", nullptr, n.name, "drain asked: its jobs move off, nothing new is placed");
  nodes_.MarkDirty(n);
  PALADIN_RETURN_IF_ERROR(Flush());
  Wake();
  return NodeDoc(n);
}

StatusOr<Json> Control::Fault(const std::string& node, int gpu, const Json& body) {
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  std::string kind = "xid";
  if (body.contains(key::kKind) && !body[key::kKind].is_null()) {
    constexpr const char* kKinds = "kind: expected \"xid\", \"ecc\" or \"ecc-corrected\"";
    if (!body[key::kKind].is_string()) return InvalidArgument(kKinds);
    kind = body[key::kKind].get<std::string>();
    if (kind != "xid" && kind != "ecc" && kind != "ecc-corrected") return InvalidArgument(kKinds);
  }
  int64_t code = 79;
  if (body.contains(key::kCode) && !body[key::kCode].is_null()) {
    if (!body[key::kCode].is_number_integer()) return InvalidArgument("code: expected an integer");
    code = body[key::kCode].get<int64_t>();
    if (code < 0 || code > 1000000) return InvalidArgument("code: out of range");
  }
  std::lock_guard<std::mutex> lock(mu_);
  const NodeRecord* n = nodes_.Find(node);
  if (n == nullptr) return NotFound("node " + node + " not found");
  const GpuRecord* g = n->Gpu(gpu);
  if (g == nullptr) return NotFound("node " + node + " has no GPU " + std::to_string(gpu));
  if (!g->emulated)
    return FailedPrecondition("GPU " + std::to_string(gpu) + " of " + node +
                              " is a real GPU: faults are injected into emulated ones");
  // "kind" names the command itself: the fault's kind travels as fault_kind.
  SendCommand(node, api::FaultCommand(gpu, kind, code), nullptr);
  PALADIN_RETURN_IF_ERROR(Flush());
  return Json{
      {key::kNode, node}, {key::kGpu, gpu}, {key::kKind, kind}, {key::kCode, code}, {"sent", true}};
}

void Control::GpuHealthMoves() {
  for (auto& [seq, j] : jobs_) {
    if (j.gang || j.state() != JobState::kRunning || j.migration_id != 0) continue;
    const NodeRecord* n = nodes_.Find(j.node);
    if (n == nullptr || n->state == NodeState::kDead) continue;
    const GpuRecord* g = n->Gpu(j.gpu);
    if (g == nullptr || g->healthy) continue;
    FleetView view = BuildFleet(true);
    core::PackerOptions options;
    options.exclude_node = -1;
    core::Decision d = scheduler_.PlaceMove(view, JobShape(j, 0), options);
    if (!d.placed) continue;
    const std::string& to = view.names[static_cast<size_t>(d.placement.node)];
    if (migrations_.HasIncoming(to)) continue;
    // The unhealthy GPU is not in the view: the packer may well choose another GPU of this node.
    const int gpu = view.gpu_index[static_cast<size_t>(d.placement.node)]
                                  [static_cast<size_t>(d.placement.gpus[0])];
    (void)StartMigration(j, to, gpu, "GPU " + std::to_string(j.gpu) + " unhealthy", nullptr);
  }
}

void Control::PeriodicCheckpoints(double now) {
  if (options_.checkpoint_every_s <= 0) return;
  PeriodicGangCheckpoints(now);  // a gang's ranks only as one cut
  for (auto& [seq, j] : jobs_) {
    if (j.gang || j.state() != JobState::kRunning || j.migration_id != 0 || !j.started_at) continue;
    // One at a time: a dump that takes longer than the period must not queue up more.
    if (j.checkpoint_in_flight) continue;
    if (const NodeRecord* node = nodes_.Find(j.node); node && !node->checkpointable) {
      continue;
    }
    const double since = std::max(
        {*j.started_at, j.last_checkpoint_cmd_at, j.last_checkpoint ? j.last_checkpoint->at : 0.0});
    if (now - since < options_.checkpoint_every_s) continue;
    j.last_checkpoint_cmd_at = now;
    j.checkpoint_in_flight = true;
    ++j.checkpoint_seq;
    SendCommand(j.node, api::CheckpointCommand("keep", CheckpointDir(j, j.checkpoint_seq)), &j);
    jobs_.MarkDirty(j);
  }
}

void Control::RecordCheckpoint(JobRecord& j, const Json& detail, const std::string& dir) {
  CheckpointRef ref;
  ref.path = detail.contains(key::kPath) && detail[key::kPath].is_string()
                 ? detail[key::kPath].get<std::string>()
                 : dir;
  ref.bytes = detail.contains(key::kBytes) && detail[key::kBytes].is_number_integer()
                  ? detail[key::kBytes].get<int64_t>()
                  : 0;
  ref.at = Now();
  j.last_checkpoint = ref;
  ++j.checkpoints;
  Count("checkpoints");
  (void)db_.AddCheckpoint(j.id, j.checkpoint_seq, ref);
  Event("checkpointed", &j, j.node,
        "checkpoint " + ref.path + " (" + std::to_string(ref.bytes) + " bytes)");
  // Keep the newest --keep-checkpoints images of this job.
  StatusOr<std::vector<std::string>> beyond =
      db_.CheckpointsBeyond(j.id, std::max(1, options_.keep_checkpoints));
  if (beyond.ok()) {
    for (const std::string& path : *beyond) {
      // Only directories inside the checkpoint store are ever deleted.
      if (path.rfind(options_.checkpoint_store + "/", 0) == 0 &&
          path.find("..") == std::string::npos) {
        deleted_dirs_.emplace_back(j.id, path);
      }
    }
  }
  jobs_.MarkDirty(j);
}

void Control::Rebalance(FleetView& view, JobRecord& waiting) {
  // One plan at a time: carry on with the current one first.
  if (!admission_moves_.empty()) {
    std::vector<core::Move> left;
    for (const core::Move& move : admission_moves_) {
      JobRecord* j = jobs_.BySeq(static_cast<int64_t>(move.job));
      if (j == nullptr || j->state() != JobState::kRunning) continue;
      const std::string& to = view.names.size() > static_cast<size_t>(move.to.node)
                                  ? view.names[static_cast<size_t>(move.to.node)]
                                  : std::string();
      if (to.empty() || j->node == to) continue;
      if (migrations_.HasIncoming(to) || j->migration_id != 0) {
        left.push_back(move);
        continue;
      }
      const int gpu =
          view.gpu_index[static_cast<size_t>(move.to.node)][static_cast<size_t>(move.to.gpus[0])];
      if (!StartMigration(*j, to, gpu, "rebalance for " + waiting.id, nullptr).ok()) {
        continue;
      }
    }
    admission_moves_ = left;
    return;
  }
  std::vector<core::Move> plan =
      scheduler_.PlanAdmission(view, waiting, jobs_, nodes_, migrations_, move_costs_);
  if (plan.empty()) return;
  admission_moves_ = std::move(plan);
  Event("rebalance", &waiting, "",
        "the rebalancer plans " + std::to_string(admission_moves_.size()) +
            " migration(s) to make room for " + waiting.id);
  Rebalance(view, waiting);
}

}  // namespace paladin::server
