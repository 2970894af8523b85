// The job endpoints: submit, list, show, logs, usage, explain, cancel, migrate, checkpoint,
// resume.
#include <algorithm>

#include "control.h"
#include "paladin/api/wire.h"
#include "paladin/core/job_env.h"
#include "paladin/server/validate.h"

namespace paladin::server {

namespace key = api::key;

namespace {

// The most ranks one gang may have.
inline constexpr int64_t kMaxGangRanks = 1024;

bool Present(const Json& body, const char* key) {
  return body.contains(key) && !body[key].is_null();
}

StatusOr<int64_t> IntField(const Json& body, const char* key, int64_t lo, int64_t hi,
                           int64_t fallback) {
  if (!Present(body, key)) return fallback;
  const Json& v = body[key];
  if (!v.is_number_integer()) return InvalidArgument(std::string(key) + ": expected an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return InvalidArgument(std::string(key) + ": out of range " + std::to_string(lo) + ".." +
                           std::to_string(hi));
  }
  const int64_t n = v.get<int64_t>();
  if (n < lo || n > hi) {
    return InvalidArgument(std::string(key) + ": " + std::to_string(n) + " is out of range " +
                           std::to_string(lo) + ".." + std::to_string(hi));
  }
  return n;
}

}  // namespace

StatusOr<Json> Control::Submit(const Principal& who, const Json& body) {
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  JobRecord j;
  // command
  if (!Present(body, key::kCommand))
    return InvalidArgument("command: required (a list of strings)");
  if (!body[key::kCommand].is_array() || body[key::kCommand].empty()) {
    return InvalidArgument("command: expected a non-empty list of strings");
  }
  for (const Json& arg : body[key::kCommand]) {
    if (!arg.is_string()) return InvalidArgument("command: every item must be a string");
    j.command.push_back(arg.get<std::string>());
  }
  if (j.command[0].empty()) return InvalidArgument("command: the program name is empty");
  // team
  std::string team = who.team_scoped() ? who.team : "default";
  if (Present(body, key::kTeam)) {
    if (!body[key::kTeam].is_string()) return InvalidArgument("team: expected a string");
    const std::string asked = body[key::kTeam].get<std::string>();
    if (!ValidName(asked)) {
      return InvalidArgument("team: '" + asked.substr(0, 64) +
                             "' must be 1-63 characters of letters, digits, '.', '_', '-'");
    }
    if (who.team_scoped() && asked != who.team) {
      return PermissionDenied("team: a token of team " + who.team + " cannot submit for " + asked);
    }
    team = asked;
  }
  j.team = team;
  // name
  if (Present(body, key::kName)) {
    if (!body[key::kName].is_string()) return InvalidArgument("name: expected a string");
    j.name = body[key::kName].get<std::string>();
    if (!j.name.empty() && !ValidName(j.name)) {
      return InvalidArgument("name: '" + j.name.substr(0, 64) +
                             "' must be 1-63 characters of letters, digits, '.', '_', '-'");
    }
  }
  if (j.name.empty()) {
    std::string base = j.command[0].substr(j.command[0].rfind('/') + 1);
    std::replace_if(
        base.begin(), base.end(),
        [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '.' && c != '_' &&
                 c != '-';
        },
        '_');
    if (base.empty() || std::isalnum(static_cast<unsigned char>(base[0])) == 0) base = "job" + base;
    j.name = base.substr(0, 63);
  }
  // sizes
  j.mem_auto = true;
  if (Present(body, key::kGpuMem) &&
      !(body[key::kGpuMem].is_string() && body[key::kGpuMem] == "auto")) {
    StatusOr<int64_t> mem = SizeField(body[key::kGpuMem], key::kGpuMem);
    if (!mem.ok()) return mem.status();
    if (*mem <= 0) return InvalidArgument("gpu_mem: must be more than 0 bytes (or \"auto\")");
    j.mem_auto = false;
    j.mem_request = *mem;
  }
  if (Present(body, key::kGpuMemMax)) {
    StatusOr<int64_t> mem = SizeField(body[key::kGpuMemMax], key::kGpuMemMax);
    if (!mem.ok()) return mem.status();
    if (*mem <= 0) return InvalidArgument("gpu_mem_max: must be more than 0 bytes");
    if (!j.mem_auto && *mem < j.mem_request) {
      return InvalidArgument("gpu_mem_max: smaller than gpu_mem");
    }
    j.mem_max = *mem;
  }
  // 0 only for a gang's ranks (CPU ranks, gloo), checked below.
  StatusOr<int64_t> gpus = IntField(body, key::kGpus, 0, core::kMaxGpusPerNode, 1);
  if (!gpus.ok()) return gpus.status();
  StatusOr<int64_t> priority = IntField(body, key::kPriority, -1000000, 1000000, 0);
  if (!priority.ok()) return priority.status();
  j.gpus = static_cast<int>(*gpus);
  j.priority = static_cast<int>(*priority);
  if (Present(body, key::kOnRestoreFailure)) {
    const Json& policy = body[key::kOnRestoreFailure];
    if (!policy.is_string() || (policy != "stop" && policy != "restart")) {
      return InvalidArgument("on_restore_failure: expected \"stop\" or \"restart\"");
    }
    j.on_restore_failure = policy.get<std::string>();
  }
  if (Present(body, key::kEnv)) {
    if (!body[key::kEnv].is_object()) return InvalidArgument("env: expected an object of strings");
    std::vector<std::pair<std::string, std::string>> env;
    for (const auto& [k, v] : body[key::kEnv].items()) {
      if (!v.is_string()) return InvalidArgument("env: " + k.substr(0, 64) + ": expected a string");
      env.emplace_back(k, v.get<std::string>());
    }
    PALADIN_RETURN_IF_ERROR(core::CheckJobEnv(env));
    for (auto& [k, v] : env) j.env[k] = std::move(v);
  }
  // A gang: "ranks" jobs placed together (docs/server.md, "Gangs").
  std::optional<GangMember> gang;
  if (Present(body, key::kRanks)) {
    StatusOr<int64_t> ranks = IntField(body, key::kRanks, 2, kMaxGangRanks, 2);
    if (!ranks.ok()) return ranks.status();
    StatusOr<int64_t> per_node = IntField(body, key::kRanksPerNode, 1, *ranks, 1);
    if (!per_node.ok()) return per_node.status();
    StatusOr<int64_t> port = IntField(body, key::kRankPort, 1024, 65535, 29500);
    if (!port.ok()) return port.status();
    PALADIN_RETURN_IF_ERROR(CheckGangEnv(j.env));
    gang.emplace();
    gang->ranks = static_cast<int>(*ranks);
    gang->ranks_per_node = static_cast<int>(*per_node);
    gang->port = static_cast<int>(*port);
  } else if (Present(body, key::kRanksPerNode) || Present(body, key::kRankPort)) {
    return InvalidArgument("ranks_per_node, rank_port: only with ranks (a gang)");
  }
  if (j.gpus == 0) {
    if (!gang) return InvalidArgument("gpus: 0 only for the ranks of a gang (CPU ranks)");
    // A CPU rank holds no GPU and no GPU memory (gpu_mem and gpu_mem_max do not apply).
    j.mem_auto = false;
    j.mem_request = 0;
    j.mem_max = 0;
  }

  std::lock_guard<std::mutex> lock(mu_);
  if (gang) return gangs_.Submit(who, j, *gang);
  const double now = Now();
  JobRecord& job = jobs_.Add(std::move(j));  // pending
  job.submitted_at = now;
  job.pending_since = now;
  job.reason = "waiting for the scheduler";
  if (job.mem_auto) {
    SizeAutoJob(job);
  } else {
    job.quota_bytes = job.mem_request;
  }
  teams_.NoteSubmitted(job.team);
  Count("jobs_submitted");
  Event("submitted", &job, "",
        "submitted by " + who.Scope() + ": " + std::to_string(job.gpus) + " GPU(s), gpu_mem " +
            (job.mem_auto ? "auto" : std::to_string(job.mem_request)) + ", priority " +
            std::to_string(job.priority));
  Json out = JobJson(job);
  PALADIN_RETURN_IF_ERROR(Flush());
  Wake();
  return out;
}

StatusOr<std::string> Control::ListJobs(const Principal& who, const std::string& team,
                                        const std::string& state, bool all) {
  // Written straight to text under the lock (AppendJobApiText): a few microseconds a job, less
  // than copying the records out and building Json objects after it took.
  std::string out = std::string("{\"") + key::kJobs + "\":[";
  std::lock_guard<std::mutex> lock(mu_);
  out.reserve(jobs_.size() * 700);
  bool first = true;
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    const JobRecord& j = it->second;
    if (!who.SeesTeam(j.team)) continue;
    if (!team.empty() && j.team != team) continue;
    if (!state.empty() && j.StateName() != state) continue;
    if (j.Terminal() && !all && state.empty()) continue;
    if (!first) out.push_back(',');
    first = false;
    AppendJobApiText(j, MigrationJson(j), &out);
  }
  out += "]}";
  return out;
}

StatusOr<Json> Control::GetJob(const Principal& who, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<JobRecord*> j = FindJob(who, id);
  if (!j.ok()) return j.status();
  return JobJson(**j);
}

StatusOr<Json> Control::Logs(const Principal& who, const std::string& id, const std::string& stream,
                             int64_t tail) {
  if (stream != "stdout" && stream != "stderr") {
    return InvalidArgument("stream: expected stdout or stderr");
  }
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<JobRecord*> j = FindJob(who, id);
  if (!j.ok()) return j.status();
  StatusOr<std::string> log = db_.Log((*j)->seq, stream);
  if (!log.ok()) return log.status();
  std::string text = std::move(*log);
  if (tail > 0) {
    size_t pos = text.size();
    if (pos > 0 && text[pos - 1] == '\n') --pos;
    for (int64_t lines = 0; lines < tail && pos > 0; ++lines) {
      const size_t nl = text.rfind('\n', pos - 1);
      pos = nl == std::string::npos ? 0 : nl;
      if (nl == std::string::npos) break;
    }
    if (pos > 0) text = text.substr(pos + 1);
  }
  // Logs are the workload's bytes: the HTTP layer replaces invalid UTF-8 when it writes JSON.
  return Json{{key::kText, text}};
}

StatusOr<Json> Control::Usage(const Principal& who, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<JobRecord*> j = FindJob(who, id);
  if (!j.ok()) return j.status();
  StatusOr<std::vector<UsageSampleRecord>> rows = db_.UsageSamples((*j)->seq);
  if (!rows.ok()) return rows.status();
  Json samples = Json::array();
  for (const UsageSampleRecord& r : *rows) {
    samples.push_back({{key::kT, r.t},
                       {key::kUsedBytes, r.used},
                       {key::kQuotaBytes, r.quota},
                       {key::kPredictedBytes, r.predicted}});
  }
  return Json{{"samples", samples}};
}

StatusOr<Json> Control::Explain(const Principal& who, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<JobRecord*> found = FindJob(who, id);
  if (!found.ok()) return found.status();
  const JobRecord& j = **found;
  std::string placement;
  if (!j.node.empty()) placement = j.node + "/" + std::to_string(j.gpu);
  std::string why_not;
  if (j.state() != JobState::kRunning) {
    why_not = "the job is " + j.StateName() + "; only running jobs can migrate";
  } else if (j.migration_id != 0) {
    why_not = "a migration is already under way";
  } else {
    const NodeRecord* node = nodes_.Find(j.node);
    if (node == nullptr || node->state == NodeState::kDead) {
      why_not = "its node is not alive";
    } else if (!node->checkpointable) {
      why_not = std::string(kNotCheckpointable);
    }
  }
  // The job's forecasts against its measured peaks, all windows and by the forecast's phase.
  const core::ForecastCheck unchecked(kPredictionWindowS);
  const core::ForecastCheck* seen = forecasts_.Check(j.seq);
  const core::ForecastCheck& checked = seen != nullptr ? *seen : unchecked;
  Json check = CheckToApi(checked.totals());
  check[key::kWindowS] = kPredictionWindowS;
  check[key::kTargetUnderRate] = forecasts_.target_under_rate();
  Json& by_phase = check[key::kByPhase] = Json::object();
  for (int p = 0; p < core::kPhaseCount; ++p) {
    const auto phase = static_cast<core::Phase>(p);
    by_phase[std::string(core::PhaseName(phase))] = CheckToApi(checked.by_phase(phase));
  }
  // The same check for the job's team and for the fleet the caller sees, to set the job's
  // figures against.
  const auto team = forecasts_.team_checks().find(j.team);
  check[key::kTeam] =
      CheckToApi(team != forecasts_.team_checks().end() ? team->second : core::CheckTotals{});
  check[key::kTeam][key::kName] = j.team;
  check[key::kFleet] = FleetCheckToApi(who);
  return Json{{key::kState, j.StateName()},      {key::kReason, j.reason},
              {key::kPlacement, placement},      {key::kMigratable, why_not.empty()},
              {key::kWhyNotMigratable, why_not}, {key::kPrediction, j.prediction},
              {key::kPredictionCheck, check}};
}

StatusOr<Json> Control::Cancel(const Principal& who, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<JobRecord*> found = FindJob(who, id);
  if (!found.ok()) return found.status();
  JobRecord& j = **found;
  if (j.Terminal())
    return FailedPrecondition("job " + id + " has already ended (" + j.StateName() + ")");
  const NodeRecord* node = nodes_.Find(j.node);
  const bool node_alive = node != nullptr && node->state != NodeState::kDead;
  if (j.node.empty() || !node_alive) {
    EndJob(j, JobState::kCancelled, std::nullopt, "cancelled by " + who.Scope());
  } else {
    j.cancel_requested = true;
    j.reason = "cancelling: the agent on " + j.node + " was told to kill it";
    SendCommand(j.node, api::KillCommand(), &j);
    if (MigrationRecord* m = migrations_.Active(j.migration_id)) {
      if (!m->commit_answer.has_value()) {
        moves_.Fail(*m, "the job was cancelled");
      } else {
        SendCommand(m->to_node, api::KillCommand(m->new_epoch), &j);
      }
    }
    jobs_.MarkDirty(j);
  }
  Json out = JobJson(j);
  PALADIN_RETURN_IF_ERROR(Flush());
  Wake();
  return out;
}

StatusOr<Json> Control::Migrate(const Principal& who, const std::string& id, const Json& body) {
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  if (!Present(body, key::kTo) || !body[key::kTo].is_string()) {
    return InvalidArgument("to: required, the destination node's name");
  }
  std::string to = body[key::kTo].get<std::string>();
  int gpu = -1;
  const size_t slash = to.find('/');
  if (slash != std::string::npos) {
    StatusOr<int64_t> g = ParseIntParam(to.substr(slash + 1), 0, core::kMaxGpusPerNode, "to: GPU");
    if (!g.ok()) return g.status();
    gpu = static_cast<int>(*g);
    to = to.substr(0, slash);
  }
  if (!ValidName(to)) return InvalidArgument("to: '" + to.substr(0, 64) + "' is not a node name");
  if (Present(body, key::kGpu)) {
    StatusOr<int64_t> g = IntField(body, key::kGpu, 0, core::kMaxGpusPerNode, -1);
    if (!g.ok()) return g.status();
    gpu = static_cast<int>(*g);
  }
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<JobRecord*> found = FindJob(who, id);
  if (!found.ok()) return found.status();
  JobRecord& j = **found;
  if (j.gang) {
    // One rank moves as a cut of its gang (gangs.cc), not as a live migration.
    StatusOr<Json> moved = gangs_.MoveRank(who, j, to, gpu);
    if (moved.ok()) Wake();
    return moved;
  }
  if (nodes_.Find(to) == nullptr) return NotFound("node " + to + " not found");
  std::string refusal;
  Status s = moves_.Start(j, to, gpu, "asked by " + who.Scope(), &refusal);
  if (!s.ok()) return s;
  Json out = JobJson(j);
  PALADIN_RETURN_IF_ERROR(Flush());
  Wake();
  return out;
}

StatusOr<Json> Control::CheckpointJob(const Principal& who, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<JobRecord*> found = FindJob(who, id);
  if (!found.ok()) return found.status();
  JobRecord& j = **found;
  if (j.gang) return gangs_.Checkpoint(j);
  if (j.state() != JobState::kRunning) {
    return FailedPrecondition("job " + id + " is " + j.StateName() +
                              "; only a running job can be checkpointed");
  }
  jobs_.SetState(j, JobState::kCheckpointing);
  j.reason = "checkpointing (stop) on " + j.node;
  ++j.checkpoint_seq;
  SendCommand(j.node, api::CheckpointCommand("stop", CheckpointDir(j, j.checkpoint_seq)), &j);
  jobs_.MarkDirty(j);
  Json out = JobJson(j);
  PALADIN_RETURN_IF_ERROR(Flush());
  return out;
}

StatusOr<Json> Control::Resume(const Principal& who, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<JobRecord*> found = FindJob(who, id);
  if (!found.ok()) return found.status();
  JobRecord& j = **found;
  if (j.gang) return gangs_.Resume(j);
  if (j.state() != JobState::kCheckpointed || !j.last_checkpoint) {
    return FailedPrecondition("job " + id + " is " + j.StateName() + "; only a checkpointed job " +
                              "can be resumed");
  }
  jobs_.SetState(j, JobState::kRestoring);
  j.preempted = false;
  j.node.clear();
  j.gpu = -1;
  j.pending_since = Now();
  j.reason = "waiting for room to restore from " + j.last_checkpoint->path;
  jobs_.MarkDirty(j);
  Json out = JobJson(j);
  PALADIN_RETURN_IF_ERROR(Flush());
  Wake();
  return out;
}

}  // namespace paladin::server
