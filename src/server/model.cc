#include "model.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cstdio>
#include <string_view>

namespace paladin::server {
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
  return {{"id", g.gang},
          {"rank", g.rank},
          {"ranks", g.ranks},
          {"ranks_per_node", g.ranks_per_node},
          {"port", g.port},
          {"address", g.address},
          {"generation", g.generation},
          {"moving_to", g.move_to.empty() ? Json(nullptr) : Json(g.move_to)}};
}

void AppendJobApiText(const JobRecord& j, const Json& migration, std::string* out) {
  // Json objects keep their keys sorted: so does this.
  out->push_back('{');
  Key("ceiling_bytes", true, out);
  AppendInt(j.ceiling_bytes, out);
  Key("checkpoints", false, out);
  AppendInt(j.checkpoints, out);
  Key("command", false, out);
  out->push_back('[');
  for (size_t i = 0; i < j.command.size(); ++i) {
    if (i > 0) out->push_back(',');
    AppendString(j.command[i], out);
  }
  out->push_back(']');
  Key("ended_at", false, out);
  AppendOptionalReal(j.ended_at, out);
  Key("epoch", false, out);
  AppendInt(j.epoch, out);
  Key("exit_code", false, out);
  if (j.exit_code) {
    AppendInt(*j.exit_code, out);
  } else {
    *out += "null";
  }
  Key("gang", false, out);
  *out += GangToApi(j).dump(-1, ' ', false, Json::error_handler_t::replace);
  Key("gpu", false, out);
  if (j.gpu < 0) {
    *out += "null";
  } else {
    AppendInt(j.gpu, out);
  }
  Key("gpu_mem_request", false, out);
  if (j.mem_auto) {
    *out += "\"auto\"";
  } else {
    AppendInt(j.mem_request, out);
  }
  Key("gpu_uuid", false, out);
  AppendOptionalString(j.gpu_uuid, out);
  Key("gpus", false, out);
  AppendInt(j.gpus, out);
  Key("id", false, out);
  AppendString(j.id, out);
  Key("last_checkpoint", false, out);
  if (j.last_checkpoint) {
    out->push_back('{');
    Key("at", true, out);
    AppendReal(j.last_checkpoint->at, out);
    Key("bytes", false, out);
    AppendInt(j.last_checkpoint->bytes, out);
    Key("path", false, out);
    AppendString(j.last_checkpoint->path, out);
    out->push_back('}');
  } else {
    *out += "null";
  }
  Key("migration", false, out);
  *out += migration.dump(-1, ' ', false, Json::error_handler_t::replace);
  Key("migrations", false, out);
  AppendInt(j.migrations, out);
  Key("name", false, out);
  AppendString(j.name, out);
  Key("node", false, out);
  AppendOptionalString(j.node, out);
  Key("on_restore_failure", false, out);
  AppendString(j.on_restore_failure, out);
  Key("predicted_bytes", false, out);
  AppendInt(j.predicted_bytes, out);
  Key("priority", false, out);
  AppendInt(j.priority, out);
  Key("quota_bytes", false, out);
  AppendInt(j.quota_bytes, out);
  Key("quota_grows", false, out);
  AppendInt(j.quota_grows, out);
  Key("reason", false, out);
  AppendString(j.reason, out);
  Key("recoveries", false, out);
  AppendInt(j.recoveries, out);
  Key("restarts", false, out);
  AppendInt(j.restarts, out);
  Key("started_at", false, out);
  AppendOptionalReal(j.started_at, out);
  Key("state", false, out);
  AppendString(j.StateName(), out);
  Key("submitted_at", false, out);
  AppendReal(j.submitted_at, out);
  Key("team", false, out);
  AppendString(j.team, out);
  Key("used_bytes", false, out);
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
  Json out = {{"id", j.id},
              {"name", j.name},
              {"team", j.team},
              {"command", j.command},
              {"priority", j.priority},
              {"gpus", j.gpus},
              {"gpu_mem_request", j.mem_auto ? Json("auto") : Json(j.mem_request)},
              {"quota_bytes", j.quota_bytes},
              {"ceiling_bytes", j.ceiling_bytes},
              {"predicted_bytes", j.predicted_bytes},
              {"used_bytes", j.used_bytes},
              {"state", j.StateName()},
              {"reason", j.reason},
              {"node", j.node.empty() ? Json(nullptr) : Json(j.node)},
              {"gpu", j.gpu < 0 ? Json(nullptr) : Json(j.gpu)},
              {"gpu_uuid", j.gpu_uuid.empty() ? Json(nullptr) : Json(j.gpu_uuid)},
              {"epoch", j.epoch},
              {"submitted_at", j.submitted_at},
              {"started_at", Optional(j.started_at)},
              {"ended_at", Optional(j.ended_at)},
              {"exit_code", j.exit_code ? Json(*j.exit_code) : Json(nullptr)},
              {"restarts", j.restarts},
              {"on_restore_failure", j.on_restore_failure},
              {"migrations", j.migrations},
              {"recoveries", j.recoveries},
              {"checkpoints", j.checkpoints},
              {"last_checkpoint", nullptr},
              {"migration", nullptr},
              {"quota_grows", j.quota_grows},
              {"gang", GangToApi(j)}};
  if (j.last_checkpoint) {
    out["last_checkpoint"] = {{"path", j.last_checkpoint->path},
                              {"at", j.last_checkpoint->at},
                              {"bytes", j.last_checkpoint->bytes}};
  }
  return out;
}

Json JobToDoc(const JobRecord& j) {
  Json doc = JobToApi(j);
  doc["seq"] = j.seq;
  doc["env"] = j.env;
  doc["mem_auto"] = j.mem_auto;
  doc["mem_request"] = j.mem_request;
  doc["mem_max"] = j.mem_max;
  doc["peak_used_bytes"] = j.peak_used_bytes;
  doc["gpu_indices"] = j.gpu_indices;
  doc["checkpoint_seq"] = j.checkpoint_seq;
  doc["migration_id"] = j.migration_id;
  doc["refusals"] = j.refusals;
  doc["prediction"] = j.prediction;
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
    Json& g = doc["gang"];
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
  j.id = d.value("id", "");
  j.name = d.value("name", "");
  j.team = d.value("team", "");
  j.command = d.value("command", std::vector<std::string>{});
  j.env = d.value("env", std::map<std::string, std::string>{});
  j.priority = d.value("priority", 0);
  j.gpus = d.value("gpus", 1);
  j.mem_auto = d.value("mem_auto", false);
  j.mem_request = d.value("mem_request", int64_t{0});
  j.mem_max = d.value("mem_max", int64_t{0});
  j.quota_bytes = d.value("quota_bytes", int64_t{0});
  j.ceiling_bytes = d.value("ceiling_bytes", int64_t{0});
  j.predicted_bytes = d.value("predicted_bytes", int64_t{0});
  j.used_bytes = d.value("used_bytes", int64_t{0});
  j.peak_used_bytes = d.value("peak_used_bytes", int64_t{0});
  const std::string state = d.value("state", std::string(JobStateName(JobState::kPending)));
  const std::optional<JobState> known = ParseJobState(state);
  j.LoadState(known.value_or(JobState::kFailed));
  if (!known) j.reason = "the store had it in an unknown state '" + state.substr(0, 40) + "'";
  if (known) j.reason = d.value("reason", "");
  j.node = d.contains("node") && d["node"].is_string() ? d["node"].get<std::string>() : "";
  j.gpu = d.contains("gpu") && d["gpu"].is_number() ? d["gpu"].get<int>() : -1;
  j.gpu_indices = d.value("gpu_indices", std::vector<int>{});
  j.gpu_uuid =
      d.contains("gpu_uuid") && d["gpu_uuid"].is_string() ? d["gpu_uuid"].get<std::string>() : "";
  j.epoch = d.value("epoch", int64_t{0});
  j.submitted_at = d.value("submitted_at", 0.0);
  j.started_at = OptionalReal(d, "started_at");
  j.ended_at = OptionalReal(d, "ended_at");
  if (d.contains("exit_code") && d["exit_code"].is_number())
    j.exit_code = d["exit_code"].get<int>();
  j.restarts = d.value("restarts", 0);
  j.on_restore_failure = d.value("on_restore_failure", "stop");
  j.migrations = d.value("migrations", 0);
  j.recoveries = d.value("recoveries", 0);
  j.checkpoints = d.value("checkpoints", 0);
  j.checkpoint_seq = d.value("checkpoint_seq", 0);
  if (d.contains("last_checkpoint") && d["last_checkpoint"].is_object()) {
    const Json& c = d["last_checkpoint"];
    j.last_checkpoint =
        CheckpointRef{c.value("path", ""), c.value("at", 0.0), c.value("bytes", int64_t{0})};
  }
  j.migration_id = d.value("migration_id", int64_t{0});
  j.quota_grows = d.value("quota_grows", int64_t{0});
  j.refusals = d.value("refusals", int64_t{0});
  j.prediction = d.value("prediction", "");
  j.cancel_requested = d.value("cancel_requested", false);
  j.recovering = d.value("recovering", false);
  j.preempted = d.value("preempted", false);
  j.mismatch = d.value("mismatch", false);
  j.at_line_start = d.value("at_line_start", true);
  j.pending_since = d.value("pending_since", 0.0);
  j.accounted_at = d.value("accounted_at", 0.0);
  j.gpu_seconds = d.value("gpu_seconds", 0.0);
  j.last_sample_at = d.value("last_sample_at", 0.0);
  if (d.contains("gang") && d["gang"].is_object()) {
    const Json& g = d["gang"];
    GangMember m;
    m.gang = g.value("id", "");
    m.rank = g.value("rank", 0);
    m.ranks = g.value("ranks", 0);
    m.ranks_per_node = g.value("ranks_per_node", 1);
    m.port = g.value("port", 0);
    m.address = g.value("address", "");
    m.generation = g.value("generation", 0);
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
    gpus.push_back({{"index", g.index},
                    {"uuid", g.uuid},
                    {"model", g.model},
                    {"memory_bytes", g.memory_bytes},
                    {"emulated", g.emulated},
                    {"healthy", g.healthy},
                    {"fault", g.fault},
                    {"used_bytes", g.used_bytes}});
  }
  return {{"name", n.name},
          {"state", NodeStateName(n.state)},
          {"address", n.address},
          {"migrate_port", n.migrate_port},
          {"last_heartbeat", n.last_heartbeat},
          {"dead_since", n.dead_since},
          {"draining", n.draining},
          {"recovered", n.recovered},
          {"checkpointable", n.checkpointable},
          {"post_copy", n.post_copy},
          {"stream", n.stream},
          {"gpus", gpus}};
}

NodeRecord NodeFromDoc(const Json& d) {
  NodeRecord n;
  n.name = d.value("name", "");
  n.state = ParseNodeState(d.value("state", std::string()));
  n.address = d.value("address", "");
  n.migrate_port = d.value("migrate_port", 0);
  n.last_heartbeat = d.value("last_heartbeat", 0.0);
  n.dead_since = d.value("dead_since", 0.0);
  n.draining = d.value("draining", false);
  n.recovered = d.value("recovered", false);
  n.checkpointable = d.value("checkpointable", true);
  n.post_copy = d.value("post_copy", false);
  n.stream = d.value("stream", false);
  if (d.contains("gpus") && d["gpus"].is_array()) {
    for (const Json& g : d["gpus"]) {
      GpuRecord r;
      r.index = g.value("index", 0);
      r.uuid = g.value("uuid", "");
      r.model = g.value("model", "");
      r.memory_bytes = g.value("memory_bytes", int64_t{0});
      r.emulated = g.value("emulated", false);
      r.healthy = g.value("healthy", true);
      r.fault = g.value("fault", "");
      r.used_bytes = g.value("used_bytes", int64_t{0});
      n.gpus.push_back(r);
    }
  }
  return n;
}

Json MigrationDoc(const MigrationRecord& m) {
  return {{"id", m.id},
          {"job", m.job},
          {"from_node", m.from_node},
          {"from_gpu", m.from_gpu},
          {"to_node", m.to_node},
          {"to_gpu", m.to_gpu},
          {"to_uuid", m.to_uuid},
          {"step", m.StepName()},
          {"commit_answer", m.commit_answer ? Json(*m.commit_answer) : Json(nullptr)},
          {"token", m.token},
          {"port", m.port},
          {"in_command", m.in_command},
          {"out_command", m.out_command},
          {"new_epoch", m.new_epoch},
          {"created_at", m.created_at},
          {"ended_at", m.ended_at},
          {"error", m.error},
          {"why", m.why},
          {"expected_pause_s", m.expected_pause_s},
          {"expected_basis", m.expected_basis},
          {"moved_bytes", m.moved_bytes},
          {"move_mode", api::MoveModeName(m.move_mode)},
          {"stream", m.stream},
          {"move_mode_why", m.move_mode_why},
          {"mode_used", m.mode_used},
          {"pause_s", m.pause_s ? Json(*m.pause_s) : Json(nullptr)}};
}

MigrationRecord MigrationFromDoc(const Json& d) {
  MigrationRecord m;
  m.id = d.value("id", int64_t{0});
  m.job = d.value("job", "");
  m.from_node = d.value("from_node", "");
  m.from_gpu = d.value("from_gpu", 0);
  m.to_node = d.value("to_node", "");
  m.to_gpu = d.value("to_gpu", 0);
  m.to_uuid = d.value("to_uuid", "");
  // A step this build does not know: the move is taken as failed (its source resumes).
  m.step = ParseMigrationStep(d.value("step", "reserved")).value_or(MigrationStep::kFailed);
  if (d.contains("commit_answer") && d["commit_answer"].is_boolean()) {
    m.commit_answer = d["commit_answer"].get<bool>();
  }
  m.token = d.value("token", "");
  m.port = d.value("port", 0);
  m.in_command = d.value("in_command", int64_t{0});
  m.out_command = d.value("out_command", int64_t{0});
  m.new_epoch = d.value("new_epoch", int64_t{0});
  m.created_at = d.value("created_at", 0.0);
  m.ended_at = d.value("ended_at", 0.0);
  m.error = d.value("error", "");
  m.why = d.value("why", "");
  m.expected_pause_s = d.value("expected_pause_s", 0.0);
  m.expected_basis = d.value("expected_basis", "");
  m.moved_bytes = d.value("moved_bytes", int64_t{0});
  m.move_mode =
      api::MoveModeNamed(d.value("move_mode", "pre-copy")).value_or(api::MoveMode::kPreCopy);
  m.stream = d.value("stream", false);
  m.move_mode_why = d.value("move_mode_why", "");
  m.mode_used = d.value("mode_used", "");
  if (d.contains("pause_s") && d["pause_s"].is_number()) m.pause_s = d["pause_s"].get<double>();
  return m;
}

Json TeamUsageToApi(const TeamUsage& u) {
  const double gib = static_cast<double>(kGiB);
  return {{"gpu_hours", u.gpu_seconds / 3600.0},
          {"gpu_mem_hours_allocated", u.mem_alloc_byte_seconds / 3600.0 / gib},
          {"gpu_mem_hours_used", u.mem_used_byte_seconds / 3600.0 / gib},
          {"queue_seconds", u.queue_seconds},
          {"jobs", u.jobs}};
}

Json TeamUsageDoc(const TeamUsage& u) {
  return {{"gpu_seconds", u.gpu_seconds},
          {"mem_alloc_byte_seconds", u.mem_alloc_byte_seconds},
          {"mem_used_byte_seconds", u.mem_used_byte_seconds},
          {"queue_seconds", u.queue_seconds},
          {"jobs", u.jobs}};
}

TeamUsage TeamUsageFromDoc(const Json& d) {
  TeamUsage u;
  if (!d.is_object()) return u;
  u.gpu_seconds = d.value("gpu_seconds", 0.0);
  u.mem_alloc_byte_seconds = d.value("mem_alloc_byte_seconds", 0.0);
  u.mem_used_byte_seconds = d.value("mem_used_byte_seconds", 0.0);
  u.queue_seconds = d.value("queue_seconds", 0.0);
  u.jobs = d.value("jobs", int64_t{0});
  return u;
}

}  // namespace paladin::server
