#include "model.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cstdio>
#include <string_view>

namespace paladin::server {

namespace key = api::key;

namespace {

Json Optional(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

std::optional<double> OptionalReal(const Json& doc, const char* key) {
  if (!doc.contains(key) || !doc[key].is_number()) return std::nullopt;
  return doc[key].get<double>();
}

// Text writers for AppendJobApiText. Strings: ASCII ones escaped here as Json::dump escapes
// them; any other goes through Json::dump (invalid UTF-8 replaced, as the API's replies do).
void AppendString(std::string_view s, std::string* out) {
  const bool ascii =
      std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  if (!ascii) {
    *out += Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
    return;
  }
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
          *out += escaped;
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

void AppendInt(int64_t v, std::string* out) {
  char digits[24];
  const std::to_chars_result r = std::to_chars(digits, digits + sizeof digits, v);
  out->append(digits, r.ptr);
}

void AppendReal(double v, std::string* out) { *out += Json(v).dump(); }

void AppendOptionalReal(const std::optional<double>& v, std::string* out) {
  if (v) {
    AppendReal(*v, out);
  } else {
    *out += "null";
  }
}

void AppendOptionalString(const std::string& s, std::string* out) {
  if (s.empty()) {
    *out += "null";
  } else {
    AppendString(s, out);
  }
}

// Writes `"key":`, after a comma unless it is the object's first.
void Key(const char* key, bool first, std::string* out) {
  if (!first) out->push_back(',');
  out->push_back('"');
  *out += key;
  *out += "\":";
}

}  // namespace

Json GangToApi(const JobRecord& j) {
  if (!j.gang) return nullptr;
  const GangMember& g = *j.gang;
  return {{key::kId, g.gang},
          {key::kRank, g.rank},
          {key::kRanks, g.ranks},
          {key::kRanksPerNode, g.ranks_per_node},
          {key::kPort, g.port},
          {key::kAddress, g.address},
          {key::kGeneration, g.generation},
          {key::kMovingTo, g.move_to.empty() ? Json(nullptr) : Json(g.move_to)}};
}

void AppendJobApiText(const JobRecord& j, const Json& migration, std::string* out) {
  // Json objects keep their keys sorted: so does this.
  out->push_back('{');
  Key(key::kCeilingBytes, true, out);
  AppendInt(j.ceiling_bytes, out);
  Key(key::kCheckpoints, false, out);
  AppendInt(j.checkpoints, out);
  Key(key::kCommand, false, out);
  out->push_back('[');
  for (size_t i = 0; i < j.command.size(); ++i) {
    if (i > 0) out->push_back(',');
    AppendString(j.command[i], out);
  }
  out->push_back(']');
  Key(key::kEndedAt, false, out);
  AppendOptionalReal(j.ended_at, out);
  Key(key::kEpoch, false, out);
  AppendInt(j.epoch, out);
  Key(key::kExitCode, false, out);
  if (j.exit_code) {
    AppendInt(*j.exit_code, out);
  } else {
    *out += "null";
  }
  Key(key::kGang, false, out);
  *out += GangToApi(j).dump(-1, ' ', false, Json::error_handler_t::replace);
  Key(key::kGpu, false, out);
  if (j.gpu < 0) {
    *out += "null";
  } else {
    AppendInt(j.gpu, out);
  }
  Key(key::kGpuMemRequest, false, out);
  if (j.mem_auto) {
    *out += "\"auto\"";
  } else {
    AppendInt(j.mem_request, out);
  }
  Key(key::kGpuUuid, false, out);
  AppendOptionalString(j.gpu_uuid, out);
  Key(key::kGpus, false, out);
  AppendInt(j.gpus, out);
  Key(key::kId, false, out);
  AppendString(j.id, out);
  Key(key::kLastCheckpoint, false, out);
  if (j.last_checkpoint) {
    out->push_back('{');
    Key(key::kAt, true, out);
    AppendReal(j.last_checkpoint->at, out);
    Key(key::kBytes, false, out);
    AppendInt(j.last_checkpoint->bytes, out);
    Key(key::kPath, false, out);
    AppendString(j.last_checkpoint->path, out);
    out->push_back('}');
  } else {
    *out += "null";
  }
  Key(key::kMigration, false, out);
  *out += migration.dump(-1, ' ', false, Json::error_handler_t::replace);
  Key(key::kMigrations, false, out);
  AppendInt(j.migrations, out);
  Key(key::kName, false, out);
  AppendString(j.name, out);
  Key(key::kNode, false, out);
  AppendOptionalString(j.node, out);
  Key(key::kOnRestoreFailure, false, out);
  AppendString(j.on_restore_failure, out);
  Key(key::kPredictedBytes, false, out);
  AppendInt(j.predicted_bytes, out);
  Key(key::kPriority, false, out);
  AppendInt(j.priority, out);
  Key(key::kQuotaBytes, false, out);
  AppendInt(j.quota_bytes, out);
  Key(key::kQuotaGrows, false, out);
  AppendInt(j.quota_grows, out);
  Key(key::kReason, false, out);
  AppendString(j.reason, out);
  Key(key::kRecoveries, false, out);
  AppendInt(j.recoveries, out);
  Key(key::kRestarts, false, out);
  AppendInt(j.restarts, out);
  Key(key::kStartedAt, false, out);
  AppendOptionalReal(j.started_at, out);
  Key(key::kState, false, out);
  AppendString(j.StateName(), out);
  Key(key::kSubmittedAt, false, out);
  AppendReal(j.submitted_at, out);
  Key(key::kTeam, false, out);
  AppendString(j.team, out);
  Key(key::kUsedBytes, false, out);
  AppendInt(j.used_bytes, out);
  out->push_back('}');
}

std::string JobRecord::ClassKey() const {
  std::string base = command.empty() ? "" : command[0];
  const size_t slash = base.rfind('/');
  if (slash != std::string::npos) base = base.substr(slash + 1);
  return team + "/" + base;
}

bool JobRecord::MoveTo(JobState to) {
  if (!JobStateAllows(state_, to)) {
    std::fprintf(stderr, "paladin server: internal error: job %s: %s -> %s is not a transition\n",
                 id.c_str(), StateName().c_str(), std::string(JobStateName(to)).c_str());
    assert(false && "an illegal job state transition");
    return false;
  }
  state_ = to;
  return true;
}

Json JobToApi(const JobRecord& j) {
  Json out = {{key::kId, j.id},
              {key::kName, j.name},
              {key::kTeam, j.team},
              {key::kCommand, j.command},
              {key::kPriority, j.priority},
              {key::kGpus, j.gpus},
              {key::kGpuMemRequest, j.mem_auto ? Json("auto") : Json(j.mem_request)},
              {key::kQuotaBytes, j.quota_bytes},
              {key::kCeilingBytes, j.ceiling_bytes},
              {key::kPredictedBytes, j.predicted_bytes},
              {key::kUsedBytes, j.used_bytes},
              {key::kState, j.StateName()},
              {key::kReason, j.reason},
              {key::kNode, j.node.empty() ? Json(nullptr) : Json(j.node)},
              {key::kGpu, j.gpu < 0 ? Json(nullptr) : Json(j.gpu)},
              {key::kGpuUuid, j.gpu_uuid.empty() ? Json(nullptr) : Json(j.gpu_uuid)},
              {key::kEpoch, j.epoch},
              {key::kSubmittedAt, j.submitted_at},
              {key::kStartedAt, Optional(j.started_at)},
              {key::kEndedAt, Optional(j.ended_at)},
              {key::kExitCode, j.exit_code ? Json(*j.exit_code) : Json(nullptr)},
              {key::kRestarts, j.restarts},
              {key::kOnRestoreFailure, j.on_restore_failure},
              {key::kMigrations, j.migrations},
              {key::kRecoveries, j.recoveries},
              {key::kCheckpoints, j.checkpoints},
              {key::kLastCheckpoint, nullptr},
              {key::kMigration, nullptr},
              {key::kQuotaGrows, j.quota_grows},
              {key::kGang, GangToApi(j)}};
  if (j.last_checkpoint) {
    out[key::kLastCheckpoint] = {{key::kPath, j.last_checkpoint->path},
                                 {key::kAt, j.last_checkpoint->at},
                                 {key::kBytes, j.last_checkpoint->bytes}};
  }
  return out;
}

Json JobToDoc(const JobRecord& j) {
  Json doc = JobToApi(j);
  doc["seq"] = j.seq;
  doc[key::kEnv] = j.env;
  doc["mem_auto"] = j.mem_auto;
  doc["mem_request"] = j.mem_request;
  doc["mem_max"] = j.mem_max;
  doc["peak_used_bytes"] = j.peak_used_bytes;
  doc[key::kGpuIndices] = j.gpu_indices;
  doc["checkpoint_seq"] = j.checkpoint_seq;
  doc["migration_id"] = j.migration_id;
  doc[key::kRefusals] = j.refusals;
  doc[key::kPrediction] = j.prediction;
  doc["cancel_requested"] = j.cancel_requested;
  doc["recovering"] = j.recovering;
  doc["preempted"] = j.preempted;
  doc["mismatch"] = j.mismatch;
  doc["at_line_start"] = j.at_line_start;
  doc["pending_since"] = j.pending_since;
  doc["accounted_at"] = j.accounted_at;
  doc["gpu_seconds"] = j.gpu_seconds;
  doc["last_sample_at"] = j.last_sample_at;
  doc["last_checkpoint_cmd_at"] = j.last_checkpoint_cmd_at;
  if (j.gang) {
    Json& g = doc[key::kGang];
    g["cut_in_flight"] = j.gang->cut_in_flight;
    g["cut_phase"] = static_cast<int>(j.gang->cut_phase);
    g["cut_stop"] = j.gang->cut_stop;
    g["cut_path"] = j.gang->cut_path;
    g["cut_bytes"] = j.gang->cut_bytes;
    g["stopping_command"] = j.gang->stopping_command;
    g["stopping_node"] = j.gang->stopping_node;
    g["move_to"] = j.gang->move_to;
    g["move_from"] = j.gang->move_from;
  }
  return doc;
}

JobRecord JobFromDoc(const Json& d) {
  JobRecord j;
  j.seq = d.value("seq", int64_t{0});
  j.id = d.value(key::kId, "");
  j.name = d.value(key::kName, "");
  j.team = d.value(key::kTeam, "");
  j.command = d.value(key::kCommand, std::vector<std::string>{});
  j.env = d.value(key::kEnv, std::map<std::string, std::string>{});
  j.priority = d.value(key::kPriority, 0);
  j.gpus = d.value(key::kGpus, 1);
  j.mem_auto = d.value("mem_auto", false);
  j.mem_request = d.value("mem_request", int64_t{0});
  j.mem_max = d.value("mem_max", int64_t{0});
  j.quota_bytes = d.value(key::kQuotaBytes, int64_t{0});
  j.ceiling_bytes = d.value(key::kCeilingBytes, int64_t{0});
  j.predicted_bytes = d.value(key::kPredictedBytes, int64_t{0});
  j.used_bytes = d.value(key::kUsedBytes, int64_t{0});
  j.peak_used_bytes = d.value("peak_used_bytes", int64_t{0});
  const std::string state = d.value(key::kState, std::string(JobStateName(JobState::kPending)));
  const std::optional<JobState> known = ParseJobState(state);
  j.LoadState(known.value_or(JobState::kFailed));
  if (!known) j.reason = "the store had it in an unknown state '" + state.substr(0, 40) + "'";
  if (known) j.reason = d.value(key::kReason, "");
  j.node =
      d.contains(key::kNode) && d[key::kNode].is_string() ? d[key::kNode].get<std::string>() : "";
  j.gpu = d.contains(key::kGpu) && d[key::kGpu].is_number() ? d[key::kGpu].get<int>() : -1;
  j.gpu_indices = d.value(key::kGpuIndices, std::vector<int>{});
  j.gpu_uuid = d.contains(key::kGpuUuid) && d[key::kGpuUuid].is_string()
                   ? d[key::kGpuUuid].get<std::string>()
                   : "";
  j.epoch = d.value(key::kEpoch, int64_t{0});
  j.submitted_at = d.value(key::kSubmittedAt, 0.0);
  j.started_at = OptionalReal(d, key::kStartedAt);
  j.ended_at = OptionalReal(d, key::kEndedAt);
  if (d.contains(key::kExitCode) && d[key::kExitCode].is_number())
    j.exit_code = d[key::kExitCode].get<int>();
  j.restarts = d.value(key::kRestarts, 0);
  j.on_restore_failure = d.value(key::kOnRestoreFailure, "stop");
  j.migrations = d.value(key::kMigrations, 0);
  j.recoveries = d.value(key::kRecoveries, 0);
  j.checkpoints = d.value(key::kCheckpoints, 0);
  j.checkpoint_seq = d.value("checkpoint_seq", 0);
  if (d.contains(key::kLastCheckpoint) && d[key::kLastCheckpoint].is_object()) {
    const Json& c = d[key::kLastCheckpoint];
    j.last_checkpoint = CheckpointRef{c.value(key::kPath, ""), c.value(key::kAt, 0.0),
                                      c.value(key::kBytes, int64_t{0})};
  }
  j.migration_id = d.value("migration_id", int64_t{0});
  j.quota_grows = d.value(key::kQuotaGrows, int64_t{0});
  j.refusals = d.value(key::kRefusals, int64_t{0});
  j.prediction = d.value(key::kPrediction, "");
  j.cancel_requested = d.value("cancel_requested", false);
  j.recovering = d.value("recovering", false);
  j.preempted = d.value("preempted", false);
  j.mismatch = d.value("mismatch", false);
  j.at_line_start = d.value("at_line_start", true);
  j.pending_since = d.value("pending_since", 0.0);
  j.accounted_at = d.value("accounted_at", 0.0);
  j.gpu_seconds = d.value("gpu_seconds", 0.0);
  j.last_sample_at = d.value("last_sample_at", 0.0);
  if (d.contains(key::kGang) && d[key::kGang].is_object()) {
    const Json& g = d[key::kGang];
    GangMember m;
    m.gang = g.value(key::kId, "");
    m.rank = g.value(key::kRank, 0);
    m.ranks = g.value(key::kRanks, 0);
    m.ranks_per_node = g.value(key::kRanksPerNode, 1);
    m.port = g.value(key::kPort, 0);
    m.address = g.value(key::kAddress, "");
    m.generation = g.value(key::kGeneration, 0);
    m.cut_in_flight = g.value("cut_in_flight", 0);
    const int phase = g.value("cut_phase", 0);
    m.cut_phase = phase >= 0 && phase <= static_cast<int>(CutPhase::kMoving)
                      ? static_cast<CutPhase>(phase)
                      : CutPhase::kNone;
    m.cut_stop = g.value("cut_stop", false);
    m.cut_path = g.value("cut_path", "");
    m.cut_bytes = g.value("cut_bytes", int64_t{0});
    m.stopping_command = g.value("stopping_command", int64_t{0});
    m.stopping_node = g.value("stopping_node", "");
    m.move_to = g.value("move_to", "");
    m.move_from = g.value("move_from", "");
    j.gang = std::move(m);
  }
  j.last_checkpoint_cmd_at = d.value("last_checkpoint_cmd_at", 0.0);
  return j;
}

std::string_view NodeStateName(NodeState s) {
  switch (s) {
    case NodeState::kAlive:
      return "alive";
    case NodeState::kDraining:
      return "draining";
    case NodeState::kDead:
      return "dead";
  }
  return "alive";
}

NodeState ParseNodeState(std::string_view name) {
  for (NodeState s : {NodeState::kAlive, NodeState::kDraining, NodeState::kDead}) {
    if (NodeStateName(s) == name) return s;
  }
  return NodeState::kAlive;
}

Json NodeDoc(const NodeRecord& n) {
  Json gpus = Json::array();
  for (const auto& g : n.gpus) {
    gpus.push_back({{key::kIndex, g.index},
                    {key::kUuid, g.uuid},
                    {key::kModel, g.model},
                    {key::kMemoryBytes, g.memory_bytes},
                    {key::kEmulated, g.emulated},
                    {key::kHealthy, g.healthy},
                    {key::kFault, g.fault},
                    {key::kUsedBytes, g.used_bytes}});
  }
  return {{key::kName, n.name},
          {key::kState, NodeStateName(n.state)},
          {key::kAddress, n.address},
          {key::kMigratePort, n.migrate_port},
          {key::kLastHeartbeat, n.last_heartbeat},
          {"dead_since", n.dead_since},
          {"draining", n.draining},
          {"recovered", n.recovered},
          {key::kCheckpointable, n.checkpointable},
          {key::kPostCopy, n.post_copy},
          {key::kStream, n.stream},
          {key::kGpus, gpus}};
}

NodeRecord NodeFromDoc(const Json& d) {
  NodeRecord n;
  n.name = d.value(key::kName, "");
  n.state = ParseNodeState(d.value(key::kState, std::string()));
  n.address = d.value(key::kAddress, "");
  n.migrate_port = d.value(key::kMigratePort, 0);
  n.last_heartbeat = d.value(key::kLastHeartbeat, 0.0);
  n.dead_since = d.value("dead_since", 0.0);
  n.draining = d.value("draining", false);
  n.recovered = d.value("recovered", false);
  n.checkpointable = d.value(key::kCheckpointable, true);
  n.post_copy = d.value(key::kPostCopy, false);
  n.stream = d.value(key::kStream, false);
  if (d.contains(key::kGpus) && d[key::kGpus].is_array()) {
    for (const Json& g : d[key::kGpus]) {
      GpuRecord r;
      r.index = g.value(key::kIndex, 0);
      r.uuid = g.value(key::kUuid, "");
      r.model = g.value(key::kModel, "");
      r.memory_bytes = g.value(key::kMemoryBytes, int64_t{0});
      r.emulated = g.value(key::kEmulated, false);
      r.healthy = g.value(key::kHealthy, true);
      r.fault = g.value(key::kFault, "");
      r.used_bytes = g.value(key::kUsedBytes, int64_t{0});
      n.gpus.push_back(r);
    }
  }
  return n;
}

Json MigrationDoc(const MigrationRecord& m) {
  return {{key::kId, m.id},
          {key::kJob, m.job},
          {key::kFromNode, m.from_node},
          {key::kFromGpu, m.from_gpu},
          {key::kToNode, m.to_node},
          {key::kToGpu, m.to_gpu},
          {"to_uuid", m.to_uuid},
          {key::kStep, m.StepName()},
          {"commit_answer", m.commit_answer ? Json(*m.commit_answer) : Json(nullptr)},
          {key::kToken, m.token},
          {key::kPort, m.port},
          {"in_command", m.in_command},
          {"out_command", m.out_command},
          {"new_epoch", m.new_epoch},
          {key::kCreatedAt, m.created_at},
          {key::kEndedAt, m.ended_at},
          {key::kError, m.error},
          {key::kWhy, m.why},
          {key::kExpectedPauseS, m.expected_pause_s},
          {key::kExpectedBasis, m.expected_basis},
          {"moved_bytes", m.moved_bytes},
          {key::kMoveMode, api::MoveModeName(m.move_mode)},
          {key::kStream, m.stream},
          {"move_mode_why", m.move_mode_why},
          {"mode_used", m.mode_used},
          {key::kPauseS, m.pause_s ? Json(*m.pause_s) : Json(nullptr)}};
}

MigrationRecord MigrationFromDoc(const Json& d) {
  MigrationRecord m;
  m.id = d.value(key::kId, int64_t{0});
  m.job = d.value(key::kJob, "");
  m.from_node = d.value(key::kFromNode, "");
  m.from_gpu = d.value(key::kFromGpu, 0);
  m.to_node = d.value(key::kToNode, "");
  m.to_gpu = d.value(key::kToGpu, 0);
  m.to_uuid = d.value("to_uuid", "");
  // A step this build does not know: the move is taken as failed (its source resumes).
  m.step = ParseMigrationStep(d.value(key::kStep, "reserved")).value_or(MigrationStep::kFailed);
  if (d.contains("commit_answer") && d["commit_answer"].is_boolean()) {
    m.commit_answer = d["commit_answer"].get<bool>();
  }
  m.token = d.value(key::kToken, "");
  m.port = d.value(key::kPort, 0);
  m.in_command = d.value("in_command", int64_t{0});
  m.out_command = d.value("out_command", int64_t{0});
  m.new_epoch = d.value("new_epoch", int64_t{0});
  m.created_at = d.value(key::kCreatedAt, 0.0);
  m.ended_at = d.value(key::kEndedAt, 0.0);
  m.error = d.value(key::kError, "");
  m.why = d.value(key::kWhy, "");
  m.expected_pause_s = d.value(key::kExpectedPauseS, 0.0);
  m.expected_basis = d.value(key::kExpectedBasis, "");
  m.moved_bytes = d.value("moved_bytes", int64_t{0});
  m.move_mode =
      api::MoveModeNamed(d.value(key::kMoveMode, "pre-copy")).value_or(api::MoveMode::kPreCopy);
  m.stream = d.value(key::kStream, false);
  m.move_mode_why = d.value("move_mode_why", "");
  m.mode_used = d.value("mode_used", "");
  if (d.contains(key::kPauseS) && d[key::kPauseS].is_number())
    m.pause_s = d[key::kPauseS].get<double>();
  return m;
}

Json TeamUsageToApi(const TeamUsage& u) {
  const double gib = static_cast<double>(kGiB);
  return {{key::kGpuHours, u.gpu_seconds / 3600.0},
          {key::kGpuMemHoursAllocated, u.mem_alloc_byte_seconds / 3600.0 / gib},
          {key::kGpuMemHoursUsed, u.mem_used_byte_seconds / 3600.0 / gib},
          {key::kQueueSeconds, u.queue_seconds},
          {key::kJobs, u.jobs}};
}

Json TeamUsageDoc(const TeamUsage& u) {
  return {{"gpu_seconds", u.gpu_seconds},
          {"mem_alloc_byte_seconds", u.mem_alloc_byte_seconds},
          {"mem_used_byte_seconds", u.mem_used_byte_seconds},
          {key::kQueueSeconds, u.queue_seconds},
          {key::kJobs, u.jobs}};
}

TeamUsage TeamUsageFromDoc(const Json& d) {
  TeamUsage u;
  if (!d.is_object()) return u;
  u.gpu_seconds = d.value("gpu_seconds", 0.0);
  u.mem_alloc_byte_seconds = d.value("mem_alloc_byte_seconds", 0.0);
  u.mem_used_byte_seconds = d.value("mem_used_byte_seconds", 0.0);
  u.queue_seconds = d.value(key::kQueueSeconds, 0.0);
  u.jobs = d.value(key::kJobs, int64_t{0});
  return u;
}

}  // namespace paladin::server
