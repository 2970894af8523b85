// Read-mostly views: nodes, teams, events, the summary and /metrics (Prometheus text format).
// A team token sees only its own jobs in each of them.
#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>
#include <vector>

#include "control.h"
#include "metrics_text.h"
#include "paladin/api/wire.h"
#include "paladin/server/validate.h"

namespace paladin::server {

namespace key = api::key;

namespace {

// GET /v1/teams' gpu_mem_in_use ({"jobs_bytes", "pods_bytes": {CLUSTER: bytes}}) and
// gpus_in_use ({"jobs", "pods": {CLUSTER: GPUs}}): what the team's quotas count.
Json GpuMemInUse(const TeamUse& use) {
  Json pods = Json::object();
  for (const auto& [cluster, held] : use.pods) pods[cluster] = held.bytes;
  return {{key::kJobsBytes, use.job_bytes}, {key::kPodsBytes, pods}};
}

Json GpusInUse(const TeamUse& use) {
  Json pods = Json::object();
  for (const auto& [cluster, held] : use.pods) pods[cluster] = held.gpus;
  return {{key::kJobs, use.job_gpus}, {key::kPods, pods}};
}

}  // namespace

StatusOr<Json> Control::Nodes(const Principal& who) {
  std::lock_guard<std::mutex> lock(mu_);
  // One pass over the jobs: what each node's GPUs hold.
  // A team token's figures are its own jobs' only: what other teams hold or use on a GPU is
  // theirs (the GPU's size and health are the node's, and stay).
  struct Held {
    int64_t allocated = 0;
    int64_t used = 0;
    Json jobs = Json::array();
  };
  std::map<std::pair<std::string, int>, Held> held;
  for (const auto& [seq, j] : jobs_) {
    if (!j.HoldsGpu() || !who.SeesTeam(j.team)) continue;
    std::vector<int> gpus = j.gpu_indices;
    if (std::find(gpus.begin(), gpus.end(), j.gpu) == gpus.end()) gpus.push_back(j.gpu);
    for (int g : gpus) {
      Held& h = held[{j.node, g}];
      h.allocated += j.quota_bytes;
      if (g == j.gpu) h.used += j.used_bytes;
      h.jobs.push_back(j.id);
    }
  }
  Json out = Json::array();
  for (const auto& [name, n] : nodes_) {
    Json gpus = Json::array();
    for (const GpuRecord& g : n.gpus) {
      Held h;
      if (auto it = held.find({name, g.index}); it != held.end()) h = std::move(it->second);
      const int64_t allocated = h.allocated;
      const int64_t used = who.admin() ? g.used_bytes : h.used;
      Json jobs = std::move(h.jobs);
      gpus.push_back({{key::kIndex, g.index},
                      {key::kUuid, g.uuid},
                      {key::kModel, g.model},
                      {key::kMemoryBytes, g.memory_bytes},
                      {key::kEmulated, g.emulated},
                      {key::kHealthy, g.healthy},
                      {key::kFault, g.fault},
                      {key::kAllocatedBytes, allocated},
                      {key::kUsedBytes, used},
                      {key::kJobs, jobs}});
    }
    out.push_back({{key::kName, n.name},
                   {key::kState, NodeStateName(n.state)},
                   {key::kAddress, n.address},
                   {key::kMigratePort, n.migrate_port},
                   {key::kPostCopy, n.post_copy},
                   {key::kStream, n.stream},
                   {key::kLastHeartbeat, n.last_heartbeat},
                   {key::kGpus, gpus}});
  }
  return Json{{key::kNodes, out}};
}

StatusOr<Json> Control::Events(const Principal& who, const std::string& job, double since) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!job.empty()) {
    StatusOr<JobRecord*> found = FindJob(who, job);
    if (!found.ok()) return found.status();
  }
  EventQuery query;
  query.job = job;
  if (!who.admin()) query.team = who.team;
  // `since` is an event id, or (from 1e9 on) a Unix time.
  if (since >= 1e9) {
    query.after_t = since;
  } else if (since > 0) {
    query.after_id = static_cast<int64_t>(since);
  }
  StatusOr<std::vector<EventRecord>> events = db_.Events(query);
  if (!events.ok()) return events.status();
  Json out = Json::array();
  for (const EventRecord& e : *events) {
    out.push_back({{key::kId, e.id},
                   {key::kT, e.t},
                   {key::kJob, e.job.empty() ? Json(nullptr) : Json(e.job)},
                   {key::kNode, e.node.empty() ? Json(nullptr) : Json(e.node)},
                   {key::kKind, e.kind},
                   {key::kMessage, e.message}});
  }
  return Json{{key::kEvents, out}};
}

StatusOr<Json> Control::Teams(const Principal& who) {
  std::lock_guard<std::mutex> lock(mu_);
  const double now = Now();
  Json out = Json::array();
  for (auto& [name, t] : teams_) {
    if (!who.SeesTeam(name)) continue;
    TeamUsage usage = t.usage;
    // Include what running jobs used since the last pass, so the figures are current.
    for (const auto& [seq, j] : jobs_) {
      if (j.team != name || !j.HoldsGpu() || j.accounted_at <= 0) continue;
      TeamBook::AddHeld(&usage, j, std::max(0.0, now - j.accounted_at));
    }
    const TeamUse use = teams_.InUse(name, jobs_);
    const auto found = forecasts_.team_checks().find(name);
    const core::CheckTotals check =
        found != forecasts_.team_checks().end() ? found->second : core::CheckTotals{};
    out.push_back({{key::kName, name},
                   {key::kMaxGpus, t.max_gpus},
                   {key::kMaxGpuMemBytes, t.max_gpu_mem},
                   {key::kGpuMemInUse, GpuMemInUse(use)},
                   {key::kGpusInUse, GpusInUse(use)},
                   {key::kPriority, t.priority},
                   {key::kUsage, TeamUsageToApi(usage)},
                   {key::kPredictionCheck, CheckToApi(check)}});
  }
  if (who.team_scoped() && out.empty()) {
    const TeamUse use = teams_.InUse(who.team, jobs_);
    out.push_back({{key::kName, who.team},
                   {key::kMaxGpus, 0},
                   {key::kMaxGpuMemBytes, 0},
                   {key::kGpuMemInUse, GpuMemInUse(use)},
                   {key::kGpusInUse, GpusInUse(use)},
                   {key::kPriority, 0},
                   {key::kUsage, TeamUsageToApi(TeamUsage{})},
                   {key::kPredictionCheck, CheckToApi(core::CheckTotals{})}});
  }
  return Json{{key::kTeams, out}};
}

StatusOr<Json> Control::PutTeam(const std::string& name, const Json& body) {
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  std::optional<int64_t> max_gpus;
  std::optional<int64_t> max_mem;
  std::optional<int64_t> priority;
  if (body.contains(key::kMaxGpus) && !body[key::kMaxGpus].is_null()) {
    const Json& v = body[key::kMaxGpus];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1000000) {
      return InvalidArgument("max_gpus: expected a non-negative integer (0 = no limit)");
    }
    max_gpus = v.get<int64_t>();
  }
  for (const char* key : {key::kMaxGpuMem, key::kMaxGpuMemBytes}) {
    if (body.contains(key) && !body[key].is_null()) {
      StatusOr<int64_t> mem = SizeField(body[key], key);
      if (!mem.ok()) return mem.status();
      max_mem = *mem;
    }
  }
  if (body.contains(key::kPriority) && !body[key::kPriority].is_null()) {
    const Json& v = body[key::kPriority];
    if (!v.is_number_integer() || v.get<int64_t>() < -1000000 || v.get<int64_t>() > 1000000) {
      return InvalidArgument("priority: expected an integer");
    }
    priority = v.get<int64_t>();
  }
  std::lock_guard<std::mutex> lock(mu_);
  TeamRecord& t = teams_.FindOrAdd(name);
  if (max_gpus) t.max_gpus = *max_gpus;
  if (max_mem) t.max_gpu_mem = *max_mem;
  if (priority) t.priority = static_cast<int>(*priority);
  teams_.MarkDirty(name);
  PALADIN_RETURN_IF_ERROR(Flush());
  Wake();
  return Json{{key::kName, t.name},
              {key::kMaxGpus, t.max_gpus},
              {key::kMaxGpuMemBytes, t.max_gpu_mem},
              {key::kPriority, t.priority},
              {key::kUsage, TeamUsageToApi(t.usage)}};
}

StatusOr<Json> Control::Summary(const Principal& who) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t submitted = 0, running = 0, pending = 0, lost = 0, mismatches = 0, restarts = 0,
          recoveries = 0, migrations = 0, checkpoints = 0, grows = 0, ended = 0;
  for (const auto& [seq, j] : jobs_) {
    if (!who.SeesTeam(j.team)) continue;
    ++submitted;
    if (j.state() == JobState::kRunning || j.state() == JobState::kMigrating) ++running;
    if (j.state() == JobState::kPending) ++pending;
    if (j.Terminal()) ++ended;
    // A job that ended without an exit code and was not cancelled ended in a non-terminal way.
    if (j.state() == JobState::kFailed && !j.exit_code && j.reason.rfind("start failed", 0) != 0) {
      ++lost;
    }
    if (j.mismatch) ++mismatches;
    restarts += j.restarts;
    recoveries += j.recoveries;
    migrations += j.migrations;
    checkpoints += j.checkpoints;
    grows += j.quota_grows;
  }
  int64_t migrations_failed = 0;
  for (const auto& [id, m] : migrations_) {
    if (m.step != MigrationStep::kFailed) continue;
    const JobRecord* j = jobs_.ById(m.job);
    if (j != nullptr && who.SeesTeam(j->team)) ++migrations_failed;
  }
  int64_t alive = 0, gpus = 0, gpu_memory = 0;
  for (const auto& [name, n] : nodes_) {
    if (n.state == NodeState::kDead) continue;
    ++alive;
    gpus += static_cast<int64_t>(n.gpus.size());
    for (const GpuRecord& g : n.gpus) gpu_memory += g.memory_bytes;
  }
  return Json{{key::kJobsSubmitted, submitted},
              {key::kJobsRunning, running},
              {key::kJobsPending, pending},
              {key::kJobsEnded, ended},
              {key::kJobsLost, lost},
              {key::kMigrations, migrations},
              {key::kMigrationsFailed, migrations_failed},
              {key::kRecoveries, recoveries},
              {key::kRestarts, restarts},
              {key::kQuotaGrows, grows},
              {key::kCheckpoints, checkpoints},
              {key::kStateVerificationsFailed, mismatches},
              {key::kNodesAlive, alive},
              {key::kNodes, static_cast<int64_t>(nodes_.size())},
              {key::kGpus, gpus},
              {key::kGpuMemoryBytes, gpu_memory},
              {key::kPredictionCheck, FleetCheckToApi(who)}};
}

void Control::RecordRequest(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  request_seconds_.Add(seconds);
}

Json Control::MoveCosts() {
  std::lock_guard<std::mutex> lock(mu_);
  Json moves = Json::array();
  for (const auto& [id, m] : migrations_) {  // in the order they were made, as at Load
    if (!m.pause_s || *m.pause_s <= 0) continue;
    moves.push_back({{key::kFrom, m.from_node},
                     {key::kTo, m.to_node},
                     {key::kGpuBytes, m.moved_bytes},
                     {key::kHostBytes, 0},
                     {key::kPauseS, *m.pause_s}});
  }
  return Json{{key::kMoves, moves}};
}

Json Control::CheckToApi(const core::CheckTotals& t) {
  return Json{{key::kWindows, t.windows},
              {key::kUnder, t.under},
              {key::kUnderRate, t.UnderRate()},
              {key::kMeanSlack, t.MeanSlack()}};
}

Json Control::FleetCheckToApi(const Principal& who) const {
  core::CheckTotals fleet;
  for (const auto& [team, t] : forecasts_.team_checks()) {
    if (who.SeesTeam(team)) fleet.Add(t);
  }
  Json out = CheckToApi(fleet);
  out[key::kWindowS] = kPredictionWindowS;
  out[key::kTargetUnderRate] = forecasts_.target_under_rate();
  return out;
}

// Per team and for the fleet (the teams the caller sees): how often the predictor's forecast was
// below the measured peak of its window, and how much it left idle, against the target.
void Control::PredictionCheckMetrics(const Principal& who, std::string* out) const {
  core::CheckTotals fleet;
  for (const auto& [team, t] : forecasts_.team_checks()) {
    if (who.SeesTeam(team)) fleet.Add(t);
  }
  const auto lines = [&](const char* name, const char* type, const char* help,
                         double (*value)(const core::CheckTotals&)) {
    *out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    MetricLine(out, name, "scope=\"fleet\"", value(fleet));
    for (const auto& [team, t] : forecasts_.team_checks()) {
      if (who.SeesTeam(team))
        MetricLine(out, name, "scope=\"team\",team=\"" + MetricLabel(team) + "\"", value(t));
    }
  };
  lines("paladin_prediction_windows_total", "counter",
        "Windows whose forecast peak was checked against the measured peak.",
        [](const core::CheckTotals& t) { return static_cast<double>(t.windows); });
  lines("paladin_prediction_under_rate", "gauge",
        "Share of checked windows whose measured peak exceeded the forecast.",
        [](const core::CheckTotals& t) { return t.UnderRate(); });
  lines("paladin_prediction_mean_slack", "gauge",
        "Mean over checked windows of max(0, forecast - peak) / forecast.",
        [](const core::CheckTotals& t) { return t.MeanSlack(); });
  *out +=
      "# HELP paladin_prediction_target_under_rate The predictor's configured under-rate.\n"
      "# TYPE paladin_prediction_target_under_rate gauge\n";
  MetricLine(out, "paladin_prediction_target_under_rate", "", forecasts_.target_under_rate());
}

std::string Control::Metrics(const Principal& who) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  out += "# HELP paladin_jobs Jobs by state.\n# TYPE paladin_jobs gauge\n";
  std::map<std::string, int64_t> states;
  for (JobState s : kAllJobStates) states[std::string(JobStateName(s))] = 0;
  for (const auto& [seq, j] : jobs_) {
    if (who.SeesTeam(j.team)) ++states[j.StateName()];
  }
  for (const auto& [s, n] : states)
    MetricLine(&out, "paladin_jobs", "state=\"" + s + "\"", static_cast<double>(n));

  out +=
      "# HELP paladin_gpu_memory_bytes GPU memory by node, GPU and kind.\n"
      "# TYPE paladin_gpu_memory_bytes gauge\n";
  for (const auto& [name, n] : nodes_) {
    for (const GpuRecord& g : n.gpus) {
      int64_t allocated = 0;
      int64_t used = 0;
      for (const auto& [seq, j] : jobs_) {
        if (!j.HoldsGpu() || j.node != name || j.gpu != g.index) continue;
        if (!who.SeesTeam(j.team)) continue;
        allocated += j.quota_bytes;
        used += j.used_bytes;
      }
      if (who.admin()) used = std::max(used, g.used_bytes);
      const std::string labels =
          "node=\"" + MetricLabel(name) + "\",gpu=\"" + std::to_string(g.index) + "\",kind=";
      MetricLine(&out, "paladin_gpu_memory_bytes", labels + "\"total\"",
                 static_cast<double>(g.memory_bytes));
      MetricLine(&out, "paladin_gpu_memory_bytes", labels + "\"allocated\"",
                 static_cast<double>(allocated));
      MetricLine(&out, "paladin_gpu_memory_bytes", labels + "\"used\"", static_cast<double>(used));
    }
  }
  out +=
      "# HELP paladin_job_gpu_memory_bytes GPU memory of each job holding a GPU.\n"
      "# TYPE paladin_job_gpu_memory_bytes gauge\n";
  for (const auto& [seq, j] : jobs_) {
    if (!j.HoldsGpu() || !who.SeesTeam(j.team)) continue;
    const std::string labels = "job=\"" + j.id + "\",team=\"" + MetricLabel(j.team) + "\",kind=";
    MetricLine(&out, "paladin_job_gpu_memory_bytes", labels + "\"quota\"",
               static_cast<double>(j.quota_bytes));
    MetricLine(&out, "paladin_job_gpu_memory_bytes", labels + "\"used\"",
               static_cast<double>(j.used_bytes));
    MetricLine(&out, "paladin_job_gpu_memory_bytes", labels + "\"predicted\"",
               static_cast<double>(j.predicted_bytes));
  }
  PredictionCheckMetrics(who, &out);
  int64_t migrations = 0;
  int64_t recoveries = 0;
  for (const auto& [seq, j] : jobs_) {
    if (!who.SeesTeam(j.team)) continue;
    migrations += j.migrations;
    recoveries += j.recoveries;
  }
  out +=
      "# HELP paladin_migrations_total Committed migrations.\n"
      "# TYPE paladin_migrations_total counter\n";
  MetricLine(&out, "paladin_migrations_total", "", static_cast<double>(migrations));
  out +=
      "# HELP paladin_recoveries_total Jobs restored after their node died.\n"
      "# TYPE paladin_recoveries_total counter\n";
  MetricLine(&out, "paladin_recoveries_total", "", static_cast<double>(recoveries));
  out += decision_seconds_.Prometheus("paladin_schedule_decision_seconds",
                                      "Time of one packer decision.");
  out +=
      request_seconds_.Prometheus("paladin_api_request_seconds", "Time to answer one API request.");
  return out;
}

}  // namespace paladin::server
