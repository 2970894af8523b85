// The node agents' side of the API: registration, heartbeats (job reports, command results,
// GPU health) and the command queue. Reports are the truth of where jobs run: a report of a job
// the agent should not have (unknown, owned by another node, or an older epoch) gets a kill.
#include <algorithm>
#include <tuple>

#include "control.h"
#include "paladin/api/wire.h"
#include "paladin/server/validate.h"

namespace paladin::server {
namespace {

// Checks every field the server reads from a heartbeat before anything is applied, so a bad
// heartbeat changes nothing.
// The wire decoder checks each field's type and range; a job id's syntax is the server's.
Status CheckJobIds(const std::vector<api::JobReport>& reports) {
  for (size_t i = 0; i < reports.size(); ++i) {
    Status s = ParseJobId(reports[i].id).status();
    if (!s.ok()) {
      return InvalidArgument("jobs[" + std::to_string(i) + "]: id: " + s.message());
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<Json> Control::RegisterAgent(const Principal& who, const Json& body) {
  StatusOr<std::string> name = api::RegistrationName(body);
  if (!name.ok()) return name.status();
  if (!ValidName(*name)) {
    return InvalidArgument("name: '" + name->substr(0, 64) +
                           "' must be 1-63 characters of letters, digits, '.', '_', '-'");
  }
  PALADIN_RETURN_IF_ERROR(CheckSpeaksFor(who, *name, "register as " + *name));
  StatusOr<api::Registration> reg = api::DecodeRegistration(body);
  if (!reg.ok()) return reg.status();
  PALADIN_RETURN_IF_ERROR(CheckJobIds(reg->jobs));
  std::vector<GpuRecord> gpus;
  for (const api::RegisteredGpu& g : reg->gpus) {
    GpuRecord r;
    r.index = g.index;
    r.memory_bytes = g.memory_bytes;
    r.uuid = g.uuid;
    r.model = g.model.empty() ? "GPU" : g.model;
    r.emulated = g.emulated;
    r.healthy = g.healthy;
    gpus.push_back(r);
  }
  std::lock_guard<std::mutex> lock(mu_);
  const double now = Now();
  bool fresh = false;
  NodeRecord& n = nodes_.FindOrAdd(reg->name, &fresh);
  n.address = reg->address;
  n.migrate_port = reg->migrate_port;
  n.checkpointable = reg->checkpointable;
  n.post_copy = reg->post_copy;
  n.stream = reg->stream;
  // Keep what the server learnt about a GPU's health across re-registration.
  for (GpuRecord& g : gpus) {
    if (const GpuRecord* old = n.Gpu(g.index)) {
      g.fault = old->fault;
      g.healthy = g.healthy && old->healthy;
    }
  }
  n.gpus = gpus;
  nodes_.Heard(n, now);
  n.state = n.draining ? NodeState::kDraining : NodeState::kAlive;
  Event("registered", nullptr, n.name,
        std::string(fresh ? "agent registered" : "agent registered again") + " with " +
            std::to_string(n.gpus.size()) + " GPU(s)");
  for (const api::JobReport& r : reg->jobs) ApplyReport(n, r);
  nodes_.MarkDirty(n);
  PALADIN_RETURN_IF_ERROR(Flush());
  Wake();
  return api::ToJson(
      api::RegisterAnswer{options_.lease_s, options_.heartbeat_s, options_.checkpoint_store});
}

StatusOr<Json> Control::Heartbeat(const Principal& who, const std::string& name, const Json& body) {
  PALADIN_RETURN_IF_ERROR(CheckSpeaksFor(who, name, "heartbeat as " + name));
  StatusOr<api::Heartbeat> beat = api::DecodeHeartbeat(body);
  if (!beat.ok()) return beat.status();
  PALADIN_RETURN_IF_ERROR(CheckJobIds(beat->jobs));
  std::lock_guard<std::mutex> lock(mu_);
  NodeRecord* node = nodes_.Find(name);
  if (node == nullptr) return NotFound("node " + name + " not found: register first");
  NodeRecord& n = *node;
  const double now = Now();
  if (nodes_.Heard(n, now)) {
    Event("registered", nullptr, n.name, "agent heartbeating again after being dead");
  }
  UpdateGpus(n, beat->gpus);
  for (const api::CommandResult& r : beat->results) ApplyResult(n, r);
  for (const api::JobReport& r : beat->jobs) ApplyReport(n, r);
  // The destination had migrate_in delivered in an earlier heartbeat: it is listening now.
  for (auto& [id, m] : migrations_) {
    if (m.to_node == n.name && m.step == MigrationStep::kMigrateInSent && m.in_delivered_at > 0 &&
        m.in_delivered_at < now) {
      moves_.Advance(m, MigrationEvent{MigrationEvent::Kind::kListening, ""});
    }
  }
  nodes_.MarkLazy(n);  // the beat's time and GPU use; health changes mark it dirty in UpdateGpus
  api::HeartbeatAnswer answer{options_.lease_s, options_.heartbeat_s, TakeCommands(n),
                              gangs_.RoutesFor(n)};
  PALADIN_RETURN_IF_ERROR(Flush());
  return api::ToJson(answer);
}

void Control::UpdateGpus(NodeRecord& n, const std::vector<api::GpuReport>& gpus) {
  for (const api::GpuReport& g : gpus) {
    for (GpuRecord& r : n.gpus) {
      if (r.index != g.index) continue;
      r.used_bytes = g.used_bytes;
      if (r.healthy && (!g.healthy || !g.fault.empty())) {
        Event("gpu_unhealthy", nullptr, n.name,
              "GPU " + std::to_string(g.index) + " unhealthy" +
                  (g.fault.empty() ? "" : ": " + g.fault));
        Wake();
      }
      if (r.healthy != (g.healthy && g.fault.empty()) || r.fault != g.fault) nodes_.MarkDirty(n);
      r.healthy = g.healthy && g.fault.empty();
      r.fault = g.fault;
    }
  }
}

void Control::ApplyReport(NodeRecord& n, const api::JobReport& r) {
  const std::string& id = r.id;
  const int64_t epoch = r.epoch;
  const api::CopyState state = r.state;
  auto kill = [&](const std::string& why, const std::string& team) {
    if (state == api::CopyState::kExited) return;  // nothing left to kill
    if (commands_.HasQueued(n.name, api::CommandKind::kKill, id, epoch)) return;  // already told
    commands_.Send(n.name, api::KillCommand(epoch), id, Now());
    events_.push_back(EventRecord{
        0, Now(), id, n.name, "stale_copy",
        "told " + n.name + " to kill its copy (epoch " + std::to_string(epoch) + "): " + why,
        team});
  };
  JobRecord* found = jobs_.ById(id);
  if (found == nullptr) return kill("unknown job", "");
  JobRecord& j = *found;
  MigrationRecord* m = migrations_.Active(j.migration_id);
  // The destination's copy is the one at the migration's new epoch (within a node, the source's
  // copy reports from the same agent at the old one).
  const bool destination_copy = m != nullptr && m->to_node == n.name && epoch == m->new_epoch;
  if (destination_copy && !m->commit_answer.value_or(false)) {
    return;  // not committed yet: the migration owns it
  }
  if (j.Terminal()) {
    return kill("the job has ended (" + j.StateName() + ")", j.team);
  }
  if (j.node != n.name || epoch < j.epoch) {
    kill(j.node != n.name
             ? "the job belongs to " + (j.node.empty() ? "no node" : j.node)
             : "epoch " + std::to_string(epoch) + " is older than " + std::to_string(j.epoch),
         j.team);
    return;
  }
  const double now = Now();
  // What must reach the store with this beat; usage alone waits for the periodic write.
  const auto significant = [](const JobRecord& x) {
    return std::make_tuple(x.state(), x.quota_bytes, x.quota_grows, x.refusals, x.mismatch, x.epoch,
                           x.node);
  };
  const auto before = significant(j);
  if (j.HoldsGpu()) Accrue(j, now);
  j.used_bytes = r.used_bytes.value_or(j.used_bytes);
  if (r.quota_bytes > 0) j.quota_bytes = r.quota_bytes;
  const int64_t grows = r.quota_grows;
  if (grows > j.quota_grows) {
    Count("quota_grows", grows - j.quota_grows);
    Event("quota_grown", &j, n.name,
          "quota grown in place to " + std::to_string(j.quota_bytes) + " bytes (" +
              std::to_string(grows) + " grow(s) so far)");
    j.quota_grows = grows;
  }
  j.refusals = std::max(j.refusals, r.refusals);
  const std::string copy = n.name + "/" + std::to_string(epoch);
  const std::string out = UnseenLog(j, copy, "stdout", r.stdout_text, r.stdout_from, r.stdout_to);
  const std::string err = UnseenLog(j, copy, "stderr", r.stderr_text, r.stderr_from, r.stderr_to);
  if (!out.empty()) AppendLog(j, "stdout", out);
  if (!err.empty()) AppendLog(j, "stderr", err);
  if (state == api::CopyState::kRunning &&
      (j.state() == JobState::kStarting || j.state() == JobState::kRestoring)) {
    jobs_.SetState(j, JobState::kRunning);
    if (!j.started_at) j.started_at = now;
    // The image it came from is fresh: the next periodic checkpoint is a full period away.
    j.last_checkpoint_cmd_at = now;
    if (j.recovering) {
      j.recovering = false;
      ++j.recoveries;
      Count("recoveries");
      Event("recovered", &j, n.name,
            "running again on " + n.name + " from " +
                (j.last_checkpoint ? j.last_checkpoint->path : "?"));
    } else if (j.preempted) {
      Event("resumed", &j, n.name,
            "room returned: running again on " + n.name + "/" + std::to_string(j.gpu) + " from " +
                (j.last_checkpoint ? j.last_checkpoint->path : "?"));
    } else {
      Event("started", &j, n.name, "running on " + n.name + "/" + std::to_string(j.gpu));
    }
    j.preempted = false;
    j.reason = "running on " + n.name + "/" + std::to_string(j.gpu);
  }
  if (state == api::CopyState::kRunning && j.state() == JobState::kMigrating && destination_copy &&
      m->commit_answer.value_or(false)) {
    moves_.Finish(*m);
  }
  if (state == api::CopyState::kExited) {
    const std::optional<int> code = r.exit_code;
    if (j.cancel_requested) {
      EndJob(j, JobState::kCancelled, code, "cancelled");
    } else if (Scheduler::RestartsAfterOom(j, code)) {
      // Out of GPU memory under its quota: start again (from its checkpoint when it has one)
      // with the size core's predictor gives it after an OOM.
      const double t = now;
      Accrue(j, t);
      const OomRestart restart = Scheduler::SizeAfterOom(forecasts_.Of(j), j.quota_bytes, t);
      const int64_t bigger = restart.quota_bytes;
      j.prediction = restart.why;
      ReleaseJob(j);
      j.quota_bytes = bigger;
      j.predicted_bytes = bigger;
      j.mem_auto = false;
      j.mem_request = bigger;
      j.refusals = 0;
      ++j.restarts;
      Count("restarts");
      j.pending_since = t;
      jobs_.SetState(j, j.last_checkpoint ? JobState::kRestoring : JobState::kPending);
      j.recovering = j.last_checkpoint.has_value();
      j.reason = "out of GPU memory (exit " + std::to_string(code.value_or(-1)) +
                 "): again with quota " + std::to_string(bigger) + " bytes (" + j.prediction + ")";
      Event("restarted", &j, n.name, j.reason);
      Wake();
    } else {
      const bool ok = code.value_or(1) == 0;
      EndJob(j, ok ? JobState::kSucceeded : JobState::kFailed, code,
             "exited with code " + (code ? std::to_string(*code) : std::string("unknown")));
      Wake();
    }
    jobs_.MarkDirty(j);
    return;
  }
  if (j.state() == JobState::kRunning || j.state() == JobState::kMigrating ||
      j.state() == JobState::kCheckpointing) {
    ObserveUsage(j, now);
  }
  if (significant(j) != before) {
    jobs_.MarkDirty(j);
  } else {
    jobs_.MarkLazy(j);
  }
}

std::string Control::UnseenLog(const JobRecord& j, const std::string& copy,
                               const std::string& stream, const std::string& text, int64_t from,
                               int64_t to) {
  if (from < 0 || to < 0) return text;  // an agent that does not say where its text lies
  LogCursor& cursor = log_cursors_[{j.seq, stream}];
  if (cursor.copy != copy || from >= cursor.through || to < from) {
    // Another copy, new bytes, or the copy's log replaced by a shorter one (a restore).
    cursor = {copy, to};
    return text;
  }
  if (to <= cursor.through) return "";  // all of it delivered before
  const int64_t seen = cursor.through - from;
  cursor.through = to;
  // The agent passes valid UTF-8 through unchanged; text it had to rewrite cannot be cut at a
  // byte offset, and is kept whole rather than lost.
  if (static_cast<int64_t>(text.size()) != to - from) return text;
  return text.substr(static_cast<size_t>(seen));
}

void Control::AppendLog(JobRecord& j, const std::string& stream, const std::string& text) {
  logs_[{j.seq, stream}] += text;
  if (stream != "stdout") return;
  for (size_t i = 0; i < text.size(); ++i) {
    if (j.at_line_start && text.compare(i, 8, "MISMATCH") == 0) j.mismatch = true;
    j.at_line_start = text[i] == '\n';
  }
}

void Control::ApplyResult(NodeRecord& n, const api::CommandResult& r) {
  const CommandRecord* acked = commands_.Acknowledge(r.command, n.name, r.ok, api::ToJson(r));
  if (acked == nullptr) return;
  const CommandRecord& c = *acked;
  const std::string& error = r.error;
  const Json& detail = r.detail;
  const api::CommandKind kind = c.command.kind;
  const int64_t epoch = c.command.epoch.value_or(-1);
  if (std::optional<MigrationEvent> event =
          EventOfResult(api::CommandKindName(kind), c.ok, error)) {
    MigrationRecord* m = migrations_.Find(c.command.migration);
    if (m == nullptr) return;
    if (kind == api::CommandKind::kMigrateOut && c.ok) moves_.RecordCost(*m, detail);
    moves_.Advance(*m, *event);
    return;
  }
  JobRecord* found = jobs_.ById(c.job);
  if (found == nullptr) return;
  JobRecord& j = *found;
  if (j.gang && gangs_.ApplyResult(j, c, r)) return;
  if (kind == api::CommandKind::kKill) {
    if (j.cancel_requested && !j.Terminal())
      EndJob(j, JobState::kCancelled, std::nullopt, "cancelled");
    return;
  }
  // A periodic checkpoint's answer, whatever placement it is about, lets the next one go.
  if (kind == api::CommandKind::kCheckpoint && c.command.mode == "keep") {
    j.checkpoint_in_flight = false;
  }
  if (epoch != j.epoch || j.node != n.name) return;  // about an older placement
  if ((kind == api::CommandKind::kStart || kind == api::CommandKind::kRestore) && !c.ok) {
    if (kind == api::CommandKind::kRestore) {
      // Never reported as a resume, never a silent start from zero: the job's policy decides.
      Accrue(j, Now());
      ReleaseJob(j);
      j.recovering = false;
      j.preempted = false;
      const std::string from = j.last_checkpoint ? j.last_checkpoint->path : "?";
      const std::string failed = "restore from " + from + " failed on " + n.name + ": " + error;
      Event("restore_failed", &j, n.name, failed);
      Count("restores_failed");
      if (j.on_restore_failure == "restart") {
        ++j.restarts;
        Count("restarts");
        jobs_.SetState(j, JobState::kPending);
        j.pending_since = Now();
        j.reason = failed + "; starting over from the beginning (on_restore_failure: restart)";
        Event("started_over", &j, n.name, j.reason);
      } else {
        jobs_.SetState(j, JobState::kCheckpointed);
        j.reason = failed +
                   "; it stays checkpointed (on_restore_failure: stop): `paladin job "
                   "resume " +
                   j.id + "` tries again";
      }
    } else {
      EndJob(j, JobState::kFailed, std::nullopt, "start failed on " + n.name + ": " + error);
    }
    jobs_.MarkDirty(j);
    Wake();
    return;
  }
  if (kind == api::CommandKind::kCheckpoint) ApplyCheckpointResult(j, c.command, r, n.name);
}

// Whatever failed on the agent (listing or closing the job's outside connections, the dump, the
// image), the job goes back to the state it had before the checkpoint: a stopping one (asked
// for, or a preemption) leaves `checkpointing` for `running` on its node, a periodic one was
// never out of `running`. The failure is one of the job's events either way.
void Control::ApplyCheckpointResult(JobRecord& j, const api::Command& command,
                                    const api::CommandResult& r, const std::string& node) {
  const std::string& mode = command.mode;
  if (r.ok) RecordCheckpoint(j, r.detail, command.dir);
  if (mode == "stop" && j.state() == JobState::kCheckpointing) {
    if (r.ok) {
      Accrue(j, Now());
      ReleaseJob(j);
      const std::string path = j.last_checkpoint ? j.last_checkpoint->path : "?";
      if (j.preempted) {
        // It waits for room like a queued job, and restores from here when it gets some.
        jobs_.SetState(j, JobState::kRestoring);
        j.pending_since = Now();
        j.reason = "preempted: waiting for room to restore from " + path;
      } else {
        jobs_.SetState(j, JobState::kCheckpointed);
        j.reason = "checkpointed to " + path;
      }
      Wake();
    } else {
      jobs_.SetState(j, JobState::kRunning);
      j.preempted = false;
      j.reason = "checkpoint failed (" + r.error + "); running on " + j.node;
    }
  }
  if (!r.ok) {
    Event("checkpoint_failed", &j, node,
          "checkpoint (" + mode + ") to " + command.dir + " failed: " + r.error + "; the job is " +
              j.StateName() + (j.node.empty() ? "" : " on " + j.node));
  }
  jobs_.MarkDirty(j);
}

Json Control::TakeCommands(NodeRecord& n) {
  const double now = Now();
  const double resend = std::max(3.0, 3 * options_.heartbeat_s);
  Json out = Json::array();
  for (const CommandRecord* c : commands_.TakeDue(n.name, now, resend)) {
    out.push_back(api::ToJson(c->command));
    if (c->command.kind == api::CommandKind::kMigrateIn) {
      MigrationRecord* m = migrations_.Find(c->command.migration);
      if (m != nullptr && m->in_delivered_at == 0) m->in_delivered_at = now;
    }
  }
  return out;
}

}  // namespace paladin::server
