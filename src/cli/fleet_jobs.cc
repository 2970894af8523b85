// `paladin submit`, `ps`, `show`, `logs`, `cancel`, `explain` and `events`: jobs through the
// server (docs/formats/api.md, "Jobs").
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fleet.h"
#include "fleet_format.h"
#include "paladin/api/job_state.h"
#include "paladin/api/wire.h"

namespace paladin::cli {

namespace key = api::key;

namespace {

using api::Json;
using fleet::Array;
using fleet::BytesCell;
using fleet::FormatAgo;
using fleet::Int;
using fleet::JobPath;
using fleet::Num;
using fleet::Printable;
using fleet::Str;

// --- submit ---

struct SubmitArgs {
  FleetFlags flags;
  std::string name;
  std::string team;
  std::string gpu_mem = "auto";
  std::string gpu_mem_max;
  int gpus = 1;
  int priority = 0;
  std::vector<std::string> env;
  std::string on_restore_failure;
  int ranks = 0;  // > 0: a gang of this many ranks
  int ranks_per_node = 0;
  int rank_port = 0;
  bool wait = false;
  double timeout_s = 0;
  std::vector<std::string> command;
};

StatusOr<Json> SubmitBody(const SubmitArgs& a) {
  Json body = Json::object();
  std::string name = a.name;
  if (name.empty()) name = std::filesystem::path(a.command.front()).filename().string();
  body[key::kName] = name;
  if (!a.team.empty()) body[key::kTeam] = a.team;
  body[key::kCommand] = a.command;
  StatusOr<Json> gpu_mem = fleet::ParseGpuMemFlag("--gpu-mem", a.gpu_mem);
  if (!gpu_mem.ok()) return gpu_mem.status();
  body[key::kGpuMem] = *gpu_mem;
  if (!a.gpu_mem_max.empty()) {
    StatusOr<uint64_t> max = fleet::ParseSizeFlag("--gpu-mem-max", a.gpu_mem_max);
    if (!max.ok()) return max.status();
    if (gpu_mem->is_number_unsigned() && *max < gpu_mem->get<uint64_t>()) {
      return InvalidArgument("--gpu-mem-max " + fleet::FormatBytes(*max) + " is below --gpu-mem " +
                             fleet::FormatBytes(gpu_mem->get<uint64_t>()));
    }
    body[key::kGpuMemMax] = *max;
  }
  body[key::kGpus] = a.gpus;
  body[key::kPriority] = a.priority;
  StatusOr<std::map<std::string, std::string>> env = fleet::ParseEnv(a.env);
  if (!env.ok()) return env.status();
  if (!env->empty()) body[key::kEnv] = *env;
  if (!a.on_restore_failure.empty()) body[key::kOnRestoreFailure] = a.on_restore_failure;
  if (a.ranks > 0) {
    body[key::kRanks] = a.ranks;
    if (a.ranks_per_node > 0) body[key::kRanksPerNode] = a.ranks_per_node;
    if (a.rank_port > 0) body[key::kRankPort] = a.rank_port;
  } else if (a.ranks_per_node > 0 || a.rank_port > 0) {
    return InvalidArgument("--ranks-per-node and --rank-port go with --ranks (a gang)");
  }
  return body;
}

// Follows a job until it runs or ends, saying each state it passes through on stderr.
int WaitForStart(const FleetApi& api, const std::string& id, double timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  std::string last;
  while (true) {
    StatusOr<Json> job = api.Get(JobPath(id));
    if (!job.ok()) return api.Fail(job.status());
    const std::string state = Str(*job, key::kState);
    const bool running = api::JobIs(*job, api::JobState::kRunning);
    const std::string said = state + " " + Str(*job, key::kReason);
    if (said != last) {
      std::string line = id;
      line += " " + state;
      if (running) line += " on " + fleet::PlacementCell(*job);
      const std::string reason = Str(*job, key::kReason);
      if (!reason.empty() && !running) line += ": " + reason;
      api.Say(Printable(line));
      last = said;
    }
    if (running || api::JobIs(*job, api::JobState::kSucceeded)) return 0;
    if (fleet::IsEnded(*job)) return 1;
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_s > 0 && waited > timeout_s) {
      api.Say(std::string(id).append(" still ").append(state).append(" after ").append(
          fleet::FormatDuration(waited)));
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

int RunSubmit(const SubmitArgs& a) {
  FleetApi api("submit", a.flags);
  StatusOr<Json> body = SubmitBody(a);
  if (!body.ok()) return api.Fail(body.status());
  StatusOr<Json> job = api.Post("/v1/jobs", *body);
  if (!job.ok()) return api.Fail(job.status());
  const std::string id = Str(*job, key::kId);
  // A gang answers with rank 0's job (whose id names the gang) and every rank's id.
  std::vector<std::string> ranks;
  if (job->contains(key::kGangJobs) && (*job)[key::kGangJobs].is_array()) {
    for (const Json& r : (*job)[key::kGangJobs]) {
      if (r.is_string()) ranks.push_back(r.get<std::string>());
    }
  }
  if (api.json()) {
    FleetApi::PrintJson(*job);
  } else {
    std::printf("%s\n", Printable(id).c_str());
    std::fflush(stdout);
    if (!ranks.empty()) {
      std::string line = "gang " + id + " of " + std::to_string(ranks.size()) + " ranks:";
      for (const std::string& r : ranks) line += " " + r;
      api.Say(Printable(line));
    }
  }
  if (!a.wait) return 0;
  if (id.empty()) return api.Fail(Unavailable("the server's answer has no job id"));
  if (ranks.empty()) ranks.push_back(id);
  for (const std::string& r : ranks) {
    if (int rc = WaitForStart(api, r, a.timeout_s); rc != 0) return rc;
  }
  return 0;
}

// --- ps ---

struct PsArgs {
  FleetFlags flags;
  bool all = false;
  std::string team;
  std::string state;
};

int RunPs(const PsArgs& a) {
  FleetApi api("ps", a.flags);
  StatusOr<Json> answer = api.Get(
      "/v1/jobs" + fleet::Query({{"team", a.team}, {"state", a.state}, {"all", a.all ? "1" : ""}}));
  if (!answer.ok()) return api.Fail(answer.status());
  if (api.json()) {
    FleetApi::PrintJson(*answer);
    return 0;
  }
  const double now = FleetNow();
  fleet::Table table(
      {"ID", "NAME", "TEAM", "STATE", "NODE/GPU", "QUOTA", "USED", "PREDICTED", "AGE"});
  for (const Json& job : Array(*answer, key::kJobs)) {
    table.AddRow({Str(job, key::kId), Str(job, key::kName), Str(job, key::kTeam),
                  Str(job, key::kState), fleet::PlacementCell(job),
                  BytesCell(job, key::kQuotaBytes), BytesCell(job, key::kUsedBytes),
                  BytesCell(job, key::kPredictedBytes),
                  fleet::FormatDuration(now - Num(job, key::kSubmittedAt).value_or(now))});
  }
  if (table.rows() == 0) {
    std::printf(a.all ? "no jobs\n" : "no jobs (ended ones show with --all)\n");
    return 0;
  }
  std::fputs(table.Render().c_str(), stdout);
  return 0;
}

// --- show ---

std::string Or(const std::string& s, const std::string& fallback) {
  return s.empty() ? fallback : s;
}

std::string CountCell(const Json& j, const char* key) {
  const std::optional<int64_t> v = Int(j, key);
  return v.has_value() ? std::to_string(*v) : "-";
}

void PrintJob(const Json& job) {
  const double now = FleetNow();
  std::vector<std::pair<std::string, std::string>> rows;
  std::string command;
  for (const Json& word : Array(job, key::kCommand)) {
    if (!command.empty()) command += ' ';
    command += word.is_string() ? word.get<std::string>() : word.dump();
  }
  rows.emplace_back("id", Str(job, key::kId));
  rows.emplace_back("name", Str(job, key::kName));
  rows.emplace_back("team", Str(job, key::kTeam));
  rows.emplace_back("state", Str(job, key::kState));
  rows.emplace_back("reason", Or(Str(job, key::kReason), "-"));
  rows.emplace_back("command", command);
  rows.emplace_back("placed on", fleet::PlacementCell(job));
  rows.emplace_back("gpus", CountCell(job, key::kGpus));
  rows.emplace_back("priority", CountCell(job, key::kPriority));
  // "auto" or bytes.
  std::string request = BytesCell(job, key::kGpuMemRequest);
  if (request == "-") request = Str(job, key::kGpuMemRequest, "-");
  rows.emplace_back("gpu memory", "requested " + request + ", quota " +
                                      BytesCell(job, key::kQuotaBytes) + ", ceiling " +
                                      BytesCell(job, key::kCeilingBytes) + ", predicted " +
                                      BytesCell(job, key::kPredictedBytes) + ", used " +
                                      BytesCell(job, key::kUsedBytes));
  rows.emplace_back("submitted", FormatAgo(Num(job, key::kSubmittedAt), now));
  rows.emplace_back("started", FormatAgo(Num(job, key::kStartedAt), now));
  if (Num(job, key::kEndedAt).has_value()) {
    rows.emplace_back("ended", FormatAgo(Num(job, key::kEndedAt), now) + ", exit code " +
                                   CountCell(job, key::kExitCode));
  }
  rows.emplace_back("history", CountCell(job, key::kRestarts) + " restarts, " +
                                   CountCell(job, key::kMigrations) + " migrations, " +
                                   CountCell(job, key::kRecoveries) + " recoveries, " +
                                   CountCell(job, key::kCheckpoints) + " checkpoints");
  const Json& ckpt = job.contains(key::kLastCheckpoint) ? job[key::kLastCheckpoint] : Json();
  if (ckpt.is_object()) {
    rows.emplace_back("checkpoint", Str(ckpt, key::kPath) + " (" + BytesCell(ckpt, key::kBytes) +
                                        ", " + FormatAgo(Num(ckpt, key::kAt), now) + ")");
  }
  const Json& move = job.contains(key::kMigration) ? job[key::kMigration] : Json();
  if (move.is_object()) {
    std::string to = Str(move, key::kTo);
    if (Int(move, key::kToGpu).has_value()) to += "/" + std::to_string(*Int(move, key::kToGpu));
    rows.emplace_back("migration", "#" + CountCell(move, key::kId) + " to " + to + ", step " +
                                       Or(Str(move, key::kStep), "-") + ", " +
                                       Or(Str(move, key::kMode), "pre-copy"));
  }
  const Json& last = job.contains(key::kLastMove) ? job[key::kLastMove] : Json();
  if (last.is_object()) {
    char pause[32] = "-";
    if (Num(last, key::kPauseS).has_value()) {
      std::snprintf(pause, sizeof pause, "%.2f s", *Num(last, key::kPauseS));
    }
    rows.emplace_back("last move", "#" + CountCell(last, key::kId) + " " + Str(last, key::kFrom) +
                                       " -> " + Str(last, key::kTo) + ", " + Str(last, key::kMode) +
                                       " (" + Str(last, key::kWhy) + "), paused " + pause);
  }
  for (const auto& [key, value] : rows) {
    std::printf("%-11s %s\n", (key + ":").c_str(), Printable(value).c_str());
  }
}

struct JobArgs {
  FleetFlags flags;
  std::string job;
};

int RunShow(const JobArgs& a) {
  FleetApi api("show", a.flags);
  StatusOr<Json> job = api.Get(JobPath(a.job));
  if (!job.ok()) return api.Fail(job.status());
  if (api.json()) {
    FleetApi::PrintJson(*job);
  } else {
    PrintJob(*job);
  }
  return 0;
}

int RunCancel(const JobArgs& a) {
  FleetApi api("cancel", a.flags);
  StatusOr<Json> job = api.Post(JobPath(a.job) + "/cancel", Json::object());
  if (!job.ok()) return api.Fail(job.status());
  if (api.json()) {
    FleetApi::PrintJson(*job);
  } else {
    std::printf("%s %s\n", Printable(Or(Str(*job, key::kId), a.job)).c_str(),
                Printable(Or(Str(*job, key::kState),
                             std::string(api::JobStateName(api::JobState::kCancelled))))
                    .c_str());
  }
  return 0;
}

// `paladin explain pod/NAMESPACE/NAME`: the pod as its cluster's Paladin scheduler last reported
// it to the server (where it is and why, or why it is Pending). The scheduler's whole pass (the
// pods ahead of it, each node's verdict) is `paladin k8s explain`, which reads the cluster.
int ExplainPod(FleetApi& api, const std::string& pod) {
  const std::string rest = pod.substr(4);
  const size_t slash = rest.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == rest.size() ||
      rest.find('/', slash + 1) != std::string::npos) {
    return api.Fail(InvalidArgument("'" + pod + "': expected pod/NAMESPACE/NAME"));
  }
  StatusOr<Json> answer = api.Get("/v1/pods/" + fleet::Escape(rest.substr(0, slash)) + "/" +
                                  fleet::Escape(rest.substr(slash + 1)));
  if (!answer.ok()) return api.Fail(answer.status());
  if (api.json()) {
    FleetApi::PrintJson(*answer);
    return 0;
  }
  const Json& p = *answer;
  const auto bytes = [&p](const char* key) {
    return p.contains(key) && p[key].is_number_unsigned()
               ? fleet::FormatBytes(p[key].get<uint64_t>())
               : std::string("-");
  };
  std::string where = Or(Str(p, key::kNode), "-");
  if (p.contains(key::kGpu) && p[key::kGpu].is_number_integer()) {
    where += " GPU " + std::to_string(p[key::kGpu].get<int>());
  }
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"pod", Str(p, key::kNamespace) + "/" + Str(p, key::kName)},
      {"cluster", Str(p, key::kCluster)},
      {"team", Str(p, key::kTeam)},
      {"phase", Str(p, key::kPhase)},
      {"node", where},
      {"placement", Or(Str(p, key::kPlacement), "-")},
      {"reason", Or(Str(p, key::kReason), "-")},
      {"gpu memory", bytes(key::kGpuMemBytes) + " booked, " + bytes(key::kUsedBytes) + " used"}};
  for (const auto& [key, value] : rows) {
    std::printf("%-11s %s\n", (key + ":").c_str(), Printable(value).c_str());
  }
  return 0;
}

int RunExplain(const JobArgs& a) {
  FleetApi api("explain", a.flags);
  if (a.job.starts_with("pod/")) return ExplainPod(api, a.job);
  StatusOr<Json> answer = api.Get(JobPath(a.job) + "/explain");
  if (!answer.ok()) return api.Fail(answer.status());
  if (api.json()) {
    FleetApi::PrintJson(*answer);
    return 0;
  }
  const Json& e = *answer;
  std::string migratable = "-";
  if (e.contains(key::kMigratable) && e[key::kMigratable].is_boolean()) {
    migratable = e[key::kMigratable].get<bool>() ? "yes" : "no";
    const std::string why = Str(e, key::kWhyNotMigratable);
    if (!e[key::kMigratable].get<bool>() && !why.empty()) migratable += ": " + why;
  }
  // The live check of the predictor's forecasts against this job's measured peaks, in all and
  // by the phase the forecast was made in (the phases it has windows of).
  std::string checked = "-";
  std::string by_phase;
  std::string team_checked = "-";
  std::string fleet_checked = "-";
  if (e.contains(key::kPredictionCheck) && e[key::kPredictionCheck].is_object()) {
    const Json& c = e[key::kPredictionCheck];
    const auto num = [](const Json& o, const char* key) {
      return o.contains(key) && o[key].is_number() ? o[key].get<double>() : 0.0;
    };
    char line[200];
    std::snprintf(line, sizeof line,
                  "%.0f windows of %.0f s: %.0f under-predicted (%.1f%%, target %.1f%%), mean "
                  "slack %.3f",
                  num(c, key::kWindows), num(c, key::kWindowS), num(c, key::kUnder),
                  100 * num(c, key::kUnderRate), 100 * num(c, key::kTargetUnderRate),
                  num(c, key::kMeanSlack));
    checked = line;
    // The job's team's and the fleet's figures (the teams the caller sees), to compare with.
    const auto totals = [&num, &line](const Json& o) {
      std::snprintf(line, sizeof line,
                    "%.0f windows: %.0f under-predicted (%.1f%%), mean slack %.3f",
                    num(o, key::kWindows), num(o, key::kUnder), 100 * num(o, key::kUnderRate),
                    num(o, key::kMeanSlack));
      return std::string(line);
    };
    if (c.contains(key::kTeam) && c[key::kTeam].is_object()) {
      team_checked = Str(c[key::kTeam], key::kName) + ": " + totals(c[key::kTeam]);
    }
    if (c.contains(key::kFleet) && c[key::kFleet].is_object())
      fleet_checked = totals(c[key::kFleet]);
    if (c.contains(key::kByPhase) && c[key::kByPhase].is_object()) {
      for (const auto& [phase, p] : c[key::kByPhase].items()) {
        if (!p.is_object() || num(p, key::kWindows) <= 0) continue;
        std::snprintf(line, sizeof line, "%s%s %.0f, %.0f under (%.1f%%), slack %.3f",
                      by_phase.empty() ? "" : "; ", phase.c_str(), num(p, key::kWindows),
                      num(p, key::kUnder), 100 * num(p, key::kUnderRate), num(p, key::kMeanSlack));
        by_phase += line;
      }
    }
  }
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"job", a.job},
      {"state", Str(e, key::kState)},
      {"reason", Or(Str(e, key::kReason), "-")},
      {"placement", Or(Str(e, key::kPlacement), "-")},
      {"migratable", migratable},
      {"prediction", Or(Str(e, key::kPrediction), "-")},
      {"checked", checked},
      {"by phase", Or(by_phase, "-")},
      {"team", team_checked},
      {"fleet", fleet_checked}};
  for (const auto& [key, value] : rows) {
    std::printf("%-11s %s\n", (key + ":").c_str(), Printable(value).c_str());
  }
  return 0;
}

// --- logs ---

struct LogsArgs {
  FleetFlags flags;
  std::string job;
  bool stderr_stream = false;
  int tail = 0;
  bool follow = false;
  double interval_s = 1.0;
};

// Log text is the job's own output: printed as it is (a terminal shows it as `paladin run` would).
void Emit(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

int RunLogs(const LogsArgs& a) {
  FleetApi api("logs", a.flags);
  const std::string stream = a.stderr_stream ? "stderr" : "stdout";
  if (a.follow && api.json()) return api.Fail(InvalidArgument("--json cannot be used with -f"));
  const std::string tail = a.tail > 0 && !a.follow ? std::to_string(a.tail) : "";
  const std::string path =
      JobPath(a.job) + "/logs" + fleet::Query({{"stream", stream}, {"tail", tail}});
  StatusOr<Json> answer = api.Get(path);
  if (!answer.ok()) return api.Fail(answer.status());
  if (api.json()) {
    FleetApi::PrintJson(*answer);
    return 0;
  }
  std::string shown = Str(*answer, key::kText);
  Emit(a.follow ? fleet::TailLines(shown, a.tail) : shown);
  if (!a.follow) return 0;
  // Polls until the job has ended, then once more for the last of its output.
  bool ended = false;
  while (!ended) {
    std::this_thread::sleep_for(std::chrono::duration<double>(a.interval_s));
    StatusOr<Json> job = api.Get(JobPath(a.job));
    if (!job.ok()) return api.Fail(job.status());
    ended = fleet::IsEnded(*job);
    answer = api.Get(path);
    if (!answer.ok()) return api.Fail(answer.status());
    const std::string text = Str(*answer, key::kText);
    Emit(fleet::NewLogText(shown, text));
    shown = text;
  }
  return 0;
}

// --- events ---

struct EventsArgs {
  FleetFlags flags;
  std::string job;
  std::string since;
};

int RunEvents(const EventsArgs& a) {
  FleetApi api("events", a.flags);
  StatusOr<Json> answer =
      api.Get("/v1/events" + fleet::Query({{"job", a.job}, {"since", a.since}}));
  if (!answer.ok()) return api.Fail(answer.status());
  if (api.json()) {
    FleetApi::PrintJson(*answer);
    return 0;
  }
  const double now = FleetNow();
  fleet::Table table({"ID", "WHEN", "JOB", "NODE", "KIND", "MESSAGE"});
  for (const Json& e : Array(*answer, key::kEvents)) {
    table.AddRow({Str(e, key::kId), FormatAgo(Num(e, key::kT), now), Or(Str(e, key::kJob), "-"),
                  Or(Str(e, key::kNode), "-"), Str(e, key::kKind), Str(e, key::kMessage)});
  }
  if (table.rows() == 0) {
    std::printf("no events\n");
    return 0;
  }
  std::fputs(table.Render().c_str(), stdout);
  return 0;
}

CLI::App* JobCommand(CLI::App& app, const char* name, const char* help,
                     const std::shared_ptr<JobArgs>& args) {
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->add_option("job", args->job, "Job id, e.g. j-000001")->required();
  AddFleetFlags(cmd, &args->flags);
  return cmd;
}

}  // namespace

void RegisterFleetJobs(CLI::App& app, int* exit_code) {
  auto s = std::make_shared<SubmitArgs>();
  CLI::App* submit = app.add_subcommand(
      "submit", "Submit a job to the Paladin server; prints its id (e.g. j-000001)");
  submit->add_option("--name", s->name, "Job name (default: the command's name)");
  submit->add_option("--team", s->team,
                     "Team to charge (admin tokens; a team token always submits as its team)");
  submit
      ->add_option("--gpu-mem", s->gpu_mem,
                   "GPU memory per GPU: a size such as 8GiB, or auto to let Paladin predict "
                   "it")
      ->capture_default_str();
  submit->add_option("--gpu-mem-max", s->gpu_mem_max,
                     "Ceiling up to which the quota may grow on demand, e.g. 16GiB");
  submit->add_option("--gpus", s->gpus, "Number of GPUs (0: CPU ranks, for a gang of --ranks only)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  submit->add_option("--priority", s->priority, "Priority (higher is placed first)")
      ->capture_default_str();
  // One value per --env, so that "--env A=1 -- CMD" leaves "--" to start the command.
  submit->add_option("--env", s->env, "Environment variable for the job, NAME=VALUE (repeatable)")
      ->allow_extra_args(false);
  submit
      ->add_option("--on-restore-failure", s->on_restore_failure,
                   "When a restore from its checkpoint fails: stop (it stays checkpointed, the "
                   "default) or restart (it starts over from the beginning)")
      ->check(CLI::IsMember({"stop", "restart"}));
  submit
      ->add_option("--ranks", s->ranks,
                   "A gang of this many ranks, each a job started with MASTER_ADDR, MASTER_PORT, "
                   "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and GLOO_SOCKET_IFNAME, all "
                   "placed at once or none (docs/distributed.md)")
      ->check(CLI::Range(2, 1024));
  submit
      ->add_option("--ranks-per-node", s->ranks_per_node,
                   "With --ranks: at most this many ranks on one node (default 1)")
      ->check(CLI::Range(1, 1024));
  submit
      ->add_option("--rank-port", s->rank_port,
                   "With --ranks: MASTER_PORT, on rank 0's address (default 29500)")
      ->check(CLI::Range(1024, 65535));
  submit->add_flag("--wait", s->wait,
                   "Follow the job (every rank of a gang) until it runs or ends");
  submit->add_option("--timeout", s->timeout_s, "With --wait: give up after this many seconds")
      ->check(CLI::NonNegativeNumber);
  submit->add_option("command", s->command, "The command and its arguments, after --")->required();
  AddFleetFlags(submit, &s->flags);
  submit->callback(
      [s, exit_code] { *exit_code = Guarded("submit", [&] { return RunSubmit(*s); }); });

  auto p = std::make_shared<PsArgs>();
  CLI::App* ps = app.add_subcommand(
      "ps", "List jobs: ID NAME TEAM STATE NODE/GPU QUOTA USED PREDICTED AGE, newest first");
  ps->add_flag("--all,-a", p->all, "Include ended jobs");
  ps->add_option("--team", p->team, "Only this team's jobs");
  ps->add_option("--state", p->state, "Only jobs in this state (pending, running, ...)");
  AddFleetFlags(ps, &p->flags);
  ps->callback([p, exit_code] { *exit_code = Guarded("ps", [&] { return RunPs(*p); }); });

  auto show = std::make_shared<JobArgs>();
  JobCommand(app, "show", "Show one job: state, placement, memory, history", show)
      ->callback(
          [show, exit_code] { *exit_code = Guarded("show", [&] { return RunShow(*show); }); });

  auto cancel = std::make_shared<JobArgs>();
  JobCommand(app, "cancel", "Cancel a job (a running one is killed)", cancel)
      ->callback([cancel, exit_code] {
        *exit_code = Guarded("cancel", [&] { return RunCancel(*cancel); });
      });

  auto explain = std::make_shared<JobArgs>();
  JobCommand(app, "explain",
             "Why a job is pending or placed where it is, whether it can migrate, and its "
             "memory prediction",
             explain)
      ->callback([explain, exit_code] {
        *exit_code = Guarded("explain", [&] { return RunExplain(*explain); });
      });

  auto l = std::make_shared<LogsArgs>();
  CLI::App* logs = app.add_subcommand(
      "logs", "Print a job's output as shipped by its agent (the server keeps the last 1 MiB)");
  logs->add_option("job", l->job, "Job id, e.g. j-000001")->required();
  logs->add_flag("--stderr", l->stderr_stream, "The job's stderr instead of its stdout");
  logs->add_option("--tail", l->tail, "Only the last N lines")->check(CLI::NonNegativeNumber);
  logs->add_flag("-f,--follow", l->follow, "Keep printing new output until the job ends");
  logs->add_option("--interval", l->interval_s, "With -f: seconds between polls")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 60.0));
  AddFleetFlags(logs, &l->flags);
  logs->callback([l, exit_code] { *exit_code = Guarded("logs", [&] { return RunLogs(*l); }); });

  auto e = std::make_shared<EventsArgs>();
  CLI::App* events = app.add_subcommand(
      "events", "The server's event log: submissions, placements, migrations, failures, ...");
  events->add_option("--job", e->job, "Only this job's events");
  events->add_option("--since", e->since,
                     "Only events after this point (passed to the server as since=)");
  AddFleetFlags(events, &e->flags);
  events->callback(
      [e, exit_code] { *exit_code = Guarded("events", [&] { return RunEvents(*e); }); });
}

}  // namespace paladin::cli
