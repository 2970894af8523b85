// The migration transaction's steps carried out (orchestrator.h).
#include "orchestrator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "paladin/server/placement.h"
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

MigrationOrchestrator::MigrationOrchestrator(ControlHost& host, JobTable& jobs,
                                             const NodeTable& nodes, MigrationTable& migrations,
                                             CommandQueue& commands, Scheduler& scheduler,
                                             MoveSettings settings)
    : host_(host),
      jobs_(jobs),
      nodes_(nodes),
      migrations_(migrations),
      commands_(commands),
      scheduler_(scheduler),
      settings_(std::move(settings)) {}

void MigrationOrchestrator::RecordCost(MigrationRecord& m, const Json& detail) {
  if (!detail.is_object()) return;
  JobRecord* j = JobOf(m);
  // A node's figure is not trusted to be sane: only a finite pause under a week is kept and
  // learned from (once per move).
  if (!m.pause_s && detail.contains(key::kPauseS) && detail[key::kPauseS].is_number()) {
    const double pause = detail[key::kPauseS].get<double>();
    if (std::isfinite(pause) && pause > 0 && pause < 7 * 24 * 3600.0) {
      m.pause_s = pause;
      if (j != nullptr) m.moved_bytes = j->used_bytes;
      costs_.Observe(m.from_node, m.to_node, {static_cast<double>(m.moved_bytes), 0, pause});
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
  host_.Event("migration_cost", j, m.from_node,
              "migration " + std::to_string(m.id) + MoveSummary(m));
}

api::MoveMode MigrationOrchestrator::ModeFor(const NodeRecord& from, const NodeRecord& to,
                                             bool* stream, std::string* why) const {
  // Pre-copy streams unless the server says image or an agent cannot (an older agent, or one
  // whose workloads CRIU cannot dump); a post-copy move's source falls back to it for a job
  // holding GPU state.
  *stream = false;
  std::string no_stream;
  if (settings_.move_mode == "image") {
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
  if (settings_.move_mode == "pre-copy" || settings_.move_mode == "image") {
    *why = "the server's --move-mode is " + settings_.move_mode +
           (*stream ? "; streamed" : (settings_.move_mode == "image" ? "" : "; " + pre_copy));
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

Status MigrationOrchestrator::Start(JobRecord& j, const std::string& to, int to_gpu,
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
  const api::MoveMode mode = ModeFor(*source, *dest, &stream, &mode_why);
  if (settings_.move_mode == "post-copy" && mode != api::MoveMode::kPostCopy) {
    return FailedPrecondition("job " + j.id +
                              " cannot move post-copy (--move-mode post-copy): " + mode_why);
  }
  FleetView view = host_.BuildFleet(true);
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
  m.created_at = host_.Now();
  m.why = why;
  m.move_mode = mode;
  m.stream = stream;
  m.move_mode_why = mode_why;
  m.step = MigrationStep::kReserved;
  const core::PauseEstimate expected =
      costs_.Estimate(j.node, to, static_cast<double>(j.used_bytes), 0);
  m.expected_pause_s = expected.pause_s;
  m.expected_basis = std::string(core::EstimateBasisName(expected.basis)) +
                     (expected.moves > 0 ? ", " + std::to_string(expected.moves) + " move(s)" : "");
  jobs_.SetState(j, JobState::kMigrating);
  j.migration_id = m.id;
  j.reason = "migrating to " + to + "/" + std::to_string(m.to_gpu) + " (" + why + ")";
  host_.Event("migration_started", &j, j.node,
              "migration " + std::to_string(m.id) + " to " + to + "/" + std::to_string(m.to_gpu) +
                  " (" + why + "), " + m.AskedModeName() + ": " + mode_why + "; expected pause " +
                  FormatSeconds(m.expected_pause_s) + " (" + m.expected_basis + ")");
  jobs_.MarkDirty(j);
  host_.CrashPoint("reserved");
  Advance(m, MigrationEvent{MigrationEvent::Kind::kReserved, ""});
  return Status::Ok();
}

void MigrationOrchestrator::Advance(MigrationRecord& m, const MigrationEvent& event) {
  if (m.Finished()) return;
  JobRecord* found = JobOf(m);
  if (found == nullptr) return Fail(m, "the job is gone");
  JobRecord& j = *found;
  const MigrationAction action =
      NextMigrationAction(m.step, m.commit_answer.value_or(false), event);
  switch (action.kind) {
    case MigrationAction::Kind::kNone:
      return;
    case MigrationAction::Kind::kFinish:
      return Finish(m);
    case MigrationAction::Kind::kFail:
      return Fail(m, action.why);
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
      m.in_command = host_.SendCommand(m.to_node, std::move(in), &j);
      m.step = MigrationStep::kMigrateInSent;
      migrations_.MarkDirty(m);
      host_.CrashPoint("migrate_in_sent");
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
      m.out_command = host_.SendCommand(m.from_node, std::move(out), &j);
      m.step = MigrationStep::kTransfer;
      migrations_.MarkDirty(m);
      host_.CrashPoint("migrate_out_sent");
      return;
    }
  }
}

StatusOr<Json> MigrationOrchestrator::Commit(MigrationRecord& m) {
  if (m.commit_answer.has_value()) return Json{{key::kCommit, *m.commit_answer}};
  if (m.Finished()) return Json{{key::kCommit, false}};
  JobRecord* found = JobOf(m);
  if (found == nullptr || found->Terminal() || found->cancel_requested) {
    Fail(m, "the job has ended");
    PALADIN_RETURN_IF_ERROR(host_.Flush());
    return Json{{key::kCommit, false}};
  }
  host_.CrashPoint("before_commit");
  JobRecord& j = *found;
  const double now = host_.Now();
  host_.Accrue(j, now);
  m.commit_answer = true;
  m.step = MigrationStep::kCommitted;
  j.node = m.to_node;
  j.gpu = m.to_gpu;
  j.gpu_indices = {m.to_gpu};
  j.gpu_uuid = m.to_uuid;
  j.epoch = m.new_epoch;
  ++j.migrations;
  host_.Count("migrations", 1);
  j.reason = "committed to " + m.to_node + "/" + std::to_string(m.to_gpu) + "; resuming there";
  jobs_.MarkDirty(j);
  migrations_.MarkDirty(m);
  PALADIN_RETURN_IF_ERROR(host_.Flush());
  host_.CrashPoint("after_commit");
  host_.Wake();
  return Json{{key::kCommit, true}};
}

StatusOr<Json> MigrationOrchestrator::AbortUnlessCommitted(MigrationRecord& m) {
  // Under the same lock as Commit: whichever comes first decides, and both hear that answer.
  if (!m.commit_answer.has_value() && !m.Finished()) {
    Fail(m, "the destination lost the source before the commit");
    PALADIN_RETURN_IF_ERROR(host_.Flush());
  }
  return Json{{key::kCommit, m.commit_answer.value_or(false)}};
}

void MigrationOrchestrator::Fail(MigrationRecord& m, const std::string& why) {
  if (m.Finished()) return;
  if (!m.commit_answer.has_value()) m.commit_answer = false;
  m.step = MigrationStep::kFailed;
  m.error = why;
  m.ended_at = host_.Now();
  host_.Count("migrations_failed", 1);
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
    host_.Event("migration_failed", &j, m.from_node,
                "migration " + std::to_string(m.id) + " to " + m.to_node + " failed: " + why);
    // The destination drops its copy (it never ran: the commit was refused).
    const NodeRecord* dest = nodes_.Find(m.to_node);
    if (dest != nullptr && dest->state != NodeState::kDead) {
      host_.SendCommand(m.to_node, api::KillCommand(m.new_epoch), &j);
    }
    jobs_.MarkDirty(j);
  }
  host_.Wake();
}

void MigrationOrchestrator::Finish(MigrationRecord& m) {
  if (m.Finished()) return;
  m.step = MigrationStep::kDone;
  m.ended_at = host_.Now();
  migrations_.MarkDirty(m);
  if (JobRecord* found = JobOf(m); found != nullptr) {
    JobRecord& j = *found;
    if (j.migration_id == m.id) j.migration_id = 0;
    if (j.state() == JobState::kMigrating) jobs_.SetState(j, JobState::kRunning);
    j.reason = "running on " + j.node + "/" + std::to_string(j.gpu) + " (migrated from " +
               m.from_node + ")";
    host_.Event("migrated", &j, m.to_node,
                "migration " + std::to_string(m.id) + ": " + m.from_node + "/" +
                    std::to_string(m.from_gpu) + " -> " + m.to_node + "/" +
                    std::to_string(m.to_gpu) + MoveSummary(m));
    jobs_.MarkDirty(j);
  }
  host_.CrashPoint("done");
  host_.Wake();
}

void MigrationOrchestrator::Timeouts(double now) {
  for (auto& [id, m] : migrations_) {
    if (m.Finished() || now - m.created_at < settings_.migration_timeout_s) continue;
    if (m.commit_answer.value_or(false)) {
      Finish(m);
    } else {
      Fail(m, "timed out");
    }
  }
}

void MigrationOrchestrator::FailActive(const JobRecord& j, const std::string& why) {
  if (MigrationRecord* m = migrations_.Active(j.migration_id)) Fail(*m, why);
}

void MigrationOrchestrator::FailUndecidedOf(const std::string& node, const std::string& why) {
  for (auto& [id, m] : migrations_) {
    if (!m.Finished() && !m.commit_answer.has_value() &&
        (m.to_node == node || m.from_node == node)) {
      Fail(m, why);
    }
  }
}

}  // namespace paladin::server
