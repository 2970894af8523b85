// `paladin demo`: the predict-pack-rebalance cycle, live, on this machine. It starts a server and
// two agents with two emulated GPUs each, submits a mix of demo workloads that hold and mutate
// GPU and host memory and verify it every step, and walks through prediction, packing, a quota
// grown in place, a migration, and a node lost with its jobs restored elsewhere from their last
// checkpoints; then it checks every workload's state and prints a summary.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "commands.h"
#include "local_fleet.h"
#include "paladin/api/client.h"
#include "paladin/api/job_state.h"
#include "paladin/api/port.h"
#include "paladin/api/wire.h"
#include "paladin/base/size.h"
#include "paladin/ckpt/criu.h"
#include "paladin/ckpt/workload.h"
#include "paladin/gpu/nvml.h"
#include "paladin/quota/launch.h"

namespace paladin::cli {

namespace key = api::key;

namespace {
namespace fs = std::filesystem;
using api::Json;

struct DemoArgs {
  std::string data;
  std::string emulated_gpus = "2x16GiB";
  bool emulated_given = false;  // --emulated-gpus on the command line: never the real GPUs
  bool keep = false;
  bool json = false;
  double timeout_s = 180;  // for each step
};

volatile sig_atomic_t g_interrupted = 0;
void OnDemoInterrupt(int /*signal*/) { g_interrupted = 1; }

void DemoSay(const std::string& line) { cli::Say("demo", line); }

int64_t Int(const Json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return 0;
  return j[key].get<int64_t>();
}
std::string DemoStr(const Json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_string()) return "";
  return j[key].get<std::string>();
}

// An agent's move ports: P for images, P+1 for commands.
int MigratePorts() {
  const int port = api::FreeLoopbackPorts(2);
  return port > 0 ? port : 17100;
}

class Demo {
 public:
  Demo(DemoArgs args, LocalFleet* fleet) : args_(std::move(args)), fleet_(fleet) {}

  int Run();

 private:
  struct Submitted {
    std::string id;
    std::string name;
    bool expect_oom = false;
  };

  // Polls `done` every 250 ms until it holds, the step times out or the user interrupts.
  Status WaitFor(const std::string& what, const std::function<StatusOr<bool>()>& done);
  StatusOr<Json> Job(const std::string& id) { return admin_.Get("/v1/jobs/" + id); }
  StatusOr<std::string> Logs(const std::string& id);
  Status StartFleet();
  Status SubmitMix();
  Status ShowPlacement();
  Status ShowQuotaGrowth();
  Status Migrate();
  Status LoseNode();
  Status Verify();
  Status CheckAccounting();
  void Summarise();
  void Cleanup();

  DemoArgs args_;
  LocalFleet* fleet_;
  api::Client admin_{api::Endpoint{}, ""};
  std::vector<Submitted> jobs_;
  std::string workload_;
  int verification_failures_ = 0;
  std::string migration_pause_;  // the live migration's pause and mode, as its source measured
  std::map<std::string, std::string> verdicts_;
  std::map<std::string, std::string> accounting_;
  Json summary_;
  std::string gpus_ = "emulated";  // or "real"
  bool steps_ok_ = true;
  std::vector<std::string> failed_steps_;
  std::set<int64_t> workload_uids_;  // of the workloads' processes, at verification
};

StatusOr<std::string> Demo::Logs(const std::string& id) {
  StatusOr<Json> logs = admin_.Get("/v1/jobs/" + id + "/logs?stream=stdout");
  if (!logs.ok()) return logs.status();
  return DemoStr(*logs, key::kText);
}

Status Demo::WaitFor(const std::string& what, const std::function<StatusOr<bool>()>& done) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(args_.timeout_s * 1000));
  Status last = Status::Ok();
  while (std::chrono::steady_clock::now() < deadline) {
    if (g_interrupted != 0) return FailedPrecondition("interrupted while waiting for " + what);
    const std::string gone = fleet_->Exited();
    if (!gone.empty()) {
      std::string why = gone;
      why += " exited while waiting for " + what + "; see " + fleet_->LogPath(gone);
      return FailedPrecondition(why);
    }
    StatusOr<bool> ok = done();
    if (ok.ok() && *ok) return Status::Ok();
    if (!ok.ok()) last = ok.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return Unavailable("timed out after " + std::to_string(static_cast<int>(args_.timeout_s)) +
                     " s waiting for " + what +
                     (last.ok() ? "" : " (last error: " + last.message() + ")"));
}

// The node's real GPUs split between the two agents (even indices, odd indices), when there
// are at least two; otherwise none.
std::vector<std::string> RealGpuSplit() {
  StatusOr<quota::Libraries> libs = quota::FindLibraries();
  if (!libs.ok()) return {};
  const quota::DriverChoice driver = quota::ChooseDriver(*libs, "");
  if (driver.emulated) return {};
  StatusOr<std::unique_ptr<gpu::Nvml>> nvml = gpu::Nvml::Load(driver.nvml_next);
  if (!nvml.ok()) return {};
  StatusOr<std::vector<gpu::GpuInfo>> gpus = (*nvml)->Gpus();
  if (!gpus.ok()) return {};
  if (gpus->size() < 2) {
    DemoSay("one real GPU here: the demo needs one per agent, so it uses emulated GPUs");
    return {};
  }
  std::vector<std::string> split(2);
  for (size_t i = 0; i < gpus->size(); ++i) {
    std::string& list = split[i % 2];
    list += (list.empty() ? "" : ",") + std::to_string((*gpus)[i].index);
  }
  return split;
}

Status Demo::StartFleet() {
  const std::vector<std::string> real =
      args_.emulated_given ? std::vector<std::string>{} : RealGpuSplit();
  if (!real.empty()) gpus_ = "real";
  DemoSay("starting a server and two agents (" +
          (real.empty() ? args_.emulated_gpus + " emulated GPUs each"
                        : "the real GPUs " + real[0] + " and " + real[1]) +
          ") under " + args_.data);
  // The agents' default: each workload runs as a uid of its own from the node's range, under a
  // root paladin-workload-init that lets CRIU checkpoint it (docs/agent.md, "Users").
  DemoSay("each of the demo's workloads runs as a uid of its own (the agents' default)");
  PALADIN_RETURN_IF_ERROR(
      fleet_->StartServer("127.0.0.1:0", {"--lease", "3", "--heartbeat", "0.5",
                                          "--checkpoint-every", "10", "--keep-checkpoints", "2"}));
  admin_ = fleet_->Admin();
  for (int i = 0; i < 2; ++i) {
    const std::string node = i == 0 ? "node-a" : "node-b";
    std::vector<std::string> flags = {"--migrate-port", std::to_string(MigratePorts()),
                                      "--kill-on-exit", "--workloads", args_.data + "/workloads"};
    if (real.empty()) {
      flags.insert(flags.end(), {"--emulated-gpus", args_.emulated_gpus});
    } else {
      flags.insert(flags.end(), {"--gpus", real[static_cast<size_t>(i)]});
    }
    PALADIN_RETURN_IF_ERROR(fleet_->StartAgent(node, flags));
    DemoSay("agent " + node + " registered");
  }
  DemoSay("dashboard: " + fleet_->url() + "/#token=" + fleet_->admin_token());
  return Status::Ok();
}

Status Demo::SubmitMix() {
  PALADIN_RETURN_IF_ERROR(
      admin_
          .Put("/v1/teams/vision",
               {{key::kMaxGpus, 4}, {key::kMaxGpuMem, "24GiB"}, {key::kPriority, 1}})
          .status());
  PALADIN_RETURN_IF_ERROR(
      admin_
          .Put("/v1/teams/nlp",
               {{key::kMaxGpus, 4}, {key::kMaxGpuMem, "24GiB"}, {key::kPriority, 0}})
          .status());
  struct Spec {
    const char* name;
    const char* team;
    Json gpu_mem;
    Json gpu_mem_max;
    std::vector<std::string> args;
    bool expect_oom;
  };
  const std::vector<Spec> mix = {
      {"resnet-train", "vision", "2GiB", nullptr, {"--mib", "192", "--host-mib", "16"}, false},
      {"bert-finetune", "nlp", "auto", nullptr, {"--mib", "256", "--host-mib", "8"}, false},
      {"llm-serve", "nlp", "6GiB", nullptr, {"--mib", "320", "--host-mib", "32"}, false},
      {"vit-grow",
       "vision",
       "512MiB",
       "2GiB",
       {"--mib", "128", "--grow-mib", "512", "--grow-at", "12"},
       false},
      {"overreach", "nlp", "512MiB", nullptr, {"--mib", "1024", "--gens", "5"}, true},
  };
  for (const Spec& s : mix) {
    Json command = Json::array({workload_});
    for (const std::string& a : s.args) command.push_back(a);
    Json body = {{key::kName, s.name},
                 {key::kTeam, s.team},
                 {key::kCommand, command},
                 {key::kGpuMem, s.gpu_mem},
                 {key::kGpus, 1}};
    if (!s.gpu_mem_max.is_null()) body[key::kGpuMemMax] = s.gpu_mem_max;
    StatusOr<Json> job = admin_.Post("/v1/jobs", body);
    if (!job.ok()) return job.status();
    jobs_.push_back({DemoStr(*job, key::kId), s.name, s.expect_oom});
    DemoSay("submitted " + DemoStr(*job, key::kId) + " " + s.name + " (team " + s.team +
            ", GPU memory " +
            (s.gpu_mem.is_string() ? s.gpu_mem.get<std::string>() : std::string("?")) +
            (s.gpu_mem_max.is_null() ? "" : ", may grow to " + s.gpu_mem_max.get<std::string>()) +
            ")");
  }
  return Status::Ok();
}

Status Demo::ShowPlacement() {
  Status s = WaitFor("the workloads to run", [&]() -> StatusOr<bool> {
    for (const Submitted& j : jobs_) {
      if (j.expect_oom) continue;
      StatusOr<Json> job = Job(j.id);
      if (!job.ok()) return job.status();
      if (!api::JobIs(*job, api::JobState::kRunning)) return false;
    }
    return true;
  });
  if (!s.ok()) return s;
  DemoSay("placed by the packer (policy paladin):");
  for (const Submitted& j : jobs_) {
    StatusOr<Json> job = Job(j.id);
    if (!job.ok()) continue;
    std::string line = "  " + j.id + " " + j.name + " -> " + DemoStr(*job, key::kNode) + "/" +
                       std::to_string(Int(*job, key::kGpu)) + ", quota " +
                       base::FormatSize(static_cast<uint64_t>(Int(*job, key::kQuotaBytes))) + ", " +
                       DemoStr(*job, key::kState);
    if (Int(*job, key::kPredictedBytes) > 0)
      line +=
          ", predicted " + base::FormatSize(static_cast<uint64_t>(Int(*job, key::kPredictedBytes)));
    DemoSay(line);
  }
  for (const Submitted& j : jobs_) {
    if (!j.expect_oom) continue;
    Status refused = WaitFor("the quota to refuse " + j.name, [&]() -> StatusOr<bool> {
      StatusOr<std::string> logs = Logs(j.id);
      if (!logs.ok()) return logs.status();
      return logs->find("OOM") != std::string::npos;
    });
    if (!refused.ok()) return refused;
    DemoSay("quota enforced: " + j.name +
            " asked for more than its quota and was refused "
            "(CUDA_ERROR_OUT_OF_MEMORY), without touching its neighbours");
  }
  return Status::Ok();
}

Status Demo::ShowQuotaGrowth() {
  const Submitted& grow = jobs_[3];
  Status s = WaitFor("the quota of " + grow.name + " to grow in place", [&]() -> StatusOr<bool> {
    StatusOr<Json> events = admin_.Get("/v1/events?job=" + grow.id);
    if (!events.ok()) return events.status();
    for (const Json& e : (*events)[key::kEvents]) {
      if (DemoStr(e, key::kKind) == "quota_grown") {
        DemoSay("quota grown in place: " + DemoStr(e, key::kMessage));
        return true;
      }
    }
    return false;
  });
  return s;
}

Status Demo::Migrate() {
  const Submitted& moving = jobs_[0];
  StatusOr<Json> job = Job(moving.id);
  if (!job.ok()) return job.status();
  const std::string from = DemoStr(*job, key::kNode);
  const std::string to = from == "node-a" ? "node-b" : "node-a";
  DemoSay("migrating " + moving.id + " " + moving.name + " from " + from + " to " + to +
          " (CPU and GPU state moved, nothing restarted)");
  PALADIN_RETURN_IF_ERROR(
      admin_.Post("/v1/jobs/" + moving.id + "/migrate", {{key::kTo, to}}).status());
  std::string last_step;
  std::chrono::steady_clock::time_point arrived{};  // when first seen running at `to`
  return WaitFor("the migration of " + moving.name, [&]() -> StatusOr<bool> {
    StatusOr<Json> now = Job(moving.id);
    if (!now.ok()) return now.status();
    if ((*now)[key::kMigration].is_object()) {
      const std::string step = DemoStr((*now)[key::kMigration], key::kStep);
      if (step != last_step) DemoSay("  step: " + step);
      last_step = step;
      return false;
    }
    if (DemoStr(*now, key::kNode) == to && api::JobIs(*now, api::JobState::kRunning)) {
      // The source's report of the pause may come a heartbeat after the destination's.
      const Json& move = (*now).contains(key::kLastMove) ? (*now)[key::kLastMove] : Json();
      if (!move.is_object() || !move[key::kPauseS].is_number()) {
        if (arrived.time_since_epoch().count() == 0) arrived = std::chrono::steady_clock::now();
        if (std::chrono::steady_clock::now() - arrived < std::chrono::seconds(15)) return false;
        DemoSay(moving.name + " now runs on " + to + " (its source never reported the pause)");
        return true;
      }
      char pause[64];
      std::snprintf(pause, sizeof pause, "%.2f s", move[key::kPauseS].get<double>());
      migration_pause_ =
          std::string(pause) + ", " + DemoStr(move, key::kMode) +
          (DemoStr(move, key::kWhy).empty() ? "" : " (" + DemoStr(move, key::kWhy) + ")");
      DemoSay(moving.name + " now runs on " + to + "/" + std::to_string(Int(*now, key::kGpu)) +
              "; paused " + migration_pause_);
      return true;
    }
    if (Int(*now, key::kMigrations) == 0 && DemoStr(*now, key::kNode) == from &&
        last_step.empty() == false) {
      return FailedPrecondition("the migration failed; the job kept running on " + from);
    }
    return false;
  });
}

Status Demo::LoseNode() {
  const std::string lost = "node-a";
  std::vector<std::string> on_lost;
  PALADIN_RETURN_IF_ERROR(WaitFor("a checkpoint of every job on " + lost, [&]() -> StatusOr<bool> {
    on_lost.clear();
    for (const Submitted& j : jobs_) {
      StatusOr<Json> job = Job(j.id);
      if (!job.ok()) return job.status();
      if (DemoStr(*job, key::kNode) != lost || !api::JobIs(*job, api::JobState::kRunning)) continue;
      if (!(*job)[key::kLastCheckpoint].is_object()) return false;
      on_lost.push_back(j.id);
    }
    return true;
  }));
  DemoSay("every job on " + lost + " has a periodic checkpoint in the shared store");
  DemoSay("losing " + lost + ": its agent and workloads killed, its data directory deleted");
  PALADIN_RETURN_IF_ERROR(fleet_->KillNode(lost));
  std::error_code ec;
  fs::remove_all(fleet_->AgentDir(lost), ec);
  if (on_lost.empty()) {
    DemoSay("no job ran on " + lost + " at that moment; nothing to recover");
    return Status::Ok();
  }
  return WaitFor("the jobs of " + lost + " to be restored elsewhere", [&]() -> StatusOr<bool> {
    for (const std::string& id : on_lost) {
      StatusOr<Json> job = Job(id);
      if (!job.ok()) return job.status();
      if (DemoStr(*job, key::kNode) == lost || !api::JobIs(*job, api::JobState::kRunning))
        return false;
    }
    for (const std::string& id : on_lost) {
      StatusOr<Json> job = Job(id);
      if (job.ok()) {
        DemoSay("recovered " + id + " " + DemoStr(*job, key::kName) + " on " +
                DemoStr(*job, key::kNode) + "/" + std::to_string(Int(*job, key::kGpu)) +
                " from its last checkpoint");
      }
    }
    return true;
  });
}

// The real user ids of the processes that run `program` (their argv[0]), from /proc.
std::set<int64_t> UidsRunning(const std::string& program) {
  std::set<int64_t> uids;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string pid = entry.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline(entry.path() / "cmdline");
    std::string argv0;
    if (!std::getline(cmdline, argv0, '\0') || argv0 != program) continue;
    std::ifstream status(entry.path() / "status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("Uid:", 0) == 0) {
        uids.insert(std::atoll(line.c_str() + 4));
        break;
      }
    }
  }
  return uids;
}

// Every workload's log: no MISMATCH, started once (a restart from zero would print "started:"
// again), generations moving on after everything that happened to it.
Status Demo::Verify() {
  std::map<std::string, int64_t> gen_before;
  auto last_gen = [](const std::string& logs) -> int64_t {
    static const std::regex gen(R"(gen (\d+) ok)");
    int64_t last = 0;
    for (auto it = std::sregex_iterator(logs.begin(), logs.end(), gen);
         it != std::sregex_iterator(); ++it) {
      last = std::stoll((*it)[1].str());
    }
    return last;
  };
  for (const Submitted& j : jobs_) {
    StatusOr<std::string> logs = Logs(j.id);
    if (logs.ok()) gen_before[j.id] = last_gen(*logs);
  }
  // A job may be inside a periodic checkpoint (stopped for a few seconds): give every running
  // job up to 30 s to show a newer generation.
  (void)WaitFor("every running job to make progress", [&]() -> StatusOr<bool> {
    for (const Submitted& j : jobs_) {
      StatusOr<Json> job = Job(j.id);
      StatusOr<std::string> logs = Logs(j.id);
      if (!job.ok() || !logs.ok()) return false;
      if (api::JobIs(*job, api::JobState::kRunning) && last_gen(*logs) <= gen_before[j.id])
        return false;
    }
    return true;
  });
  for (const Submitted& j : jobs_) {
    StatusOr<Json> job = Job(j.id);
    StatusOr<std::string> logs = Logs(j.id);
    if (!job.ok() || !logs.ok()) {
      ++verification_failures_;
      verdicts_[j.id] = "cannot read the job";
      continue;
    }
    size_t starts = 0;
    for (size_t at = logs->find("started:"); at != std::string::npos;
         at = logs->find("started:", at + 1)) {
      ++starts;
    }
    const int64_t gen = last_gen(*logs);
    std::string verdict;
    if (logs->find("MISMATCH") != std::string::npos) {
      verdict = "state MISMATCH";
    } else if (j.expect_oom) {
      // A fixed size is a hard limit: the job is refused, fails, and is not restarted.
      if (logs->find("OOM") == std::string::npos) {
        verdict = "was never refused";
      } else if (!api::JobIs(*job, api::JobState::kFailed)) {
        verdict = "refused, but " + DemoStr(*job, key::kState) + " instead of failed";
      } else {
        verdict = "refused past its quota and failed, as it should";
      }
    } else if (starts != 1 + static_cast<size_t>(Int(*job, key::kRestarts))) {
      verdict = "started " + std::to_string(starts) + " times (lost progress)";
    } else if (!api::JobIs(*job, api::JobState::kRunning)) {
      verdict = "not running (" + DemoStr(*job, key::kState) + ")";
    } else if (gen <= gen_before[j.id]) {
      verdict = "not making progress (gen " + std::to_string(gen) + ")";
    } else {
      verdict = "verified through gen " + std::to_string(gen);
    }
    if (verdict.rfind("verified", 0) != 0 && verdict.rfind("refused", 0) != 0) {
      ++verification_failures_;
    }
    verdicts_[j.id] = verdict;
  }
  // Who the workloads run as now, after their migration and recovery (restored processes too).
  workload_uids_ = UidsRunning(workload_);
  std::string uids;
  for (int64_t uid : workload_uids_) uids += (uids.empty() ? "" : ", ") + std::to_string(uid);
  DemoSay("the workloads run as uid " + (uids.empty() ? std::string("(none found)") : uids));
  return CheckAccounting();
}

// Each team's usage must fit its jobs' lifetimes: GPU-hours no more than the jobs have existed
// (x their GPUs), more than zero when a job ran, and memory used never above memory allocated.
Status Demo::CheckAccounting() {
  StatusOr<Json> teams = admin_.Get("/v1/teams");
  if (!teams.ok()) return teams.status();
  const double now = static_cast<double>(time(nullptr));
  std::map<std::string, double> lifetime_s;
  for (const Submitted& j : jobs_) {
    StatusOr<Json> job = Job(j.id);
    if (!job.ok()) return job.status();
    const double end =
        (*job)[key::kEndedAt].is_number() ? (*job)[key::kEndedAt].get<double>() : now;
    const double submitted = (*job).value(key::kSubmittedAt, now);
    lifetime_s[DemoStr(*job, key::kTeam)] +=
        (end - submitted + 2) * static_cast<double>(Int(*job, key::kGpus));
  }
  for (const Json& team : (*teams)[key::kTeams]) {
    const std::string name = DemoStr(team, key::kName);
    if (lifetime_s.count(name) == 0) continue;
    const Json usage = team.value(key::kUsage, Json::object());
    const double gpu_s = usage.value(key::kGpuHours, 0.0) * 3600;
    const double allocated = usage.value(key::kGpuMemHoursAllocated, 0.0);
    const double used = usage.value(key::kGpuMemHoursUsed, 0.0);
    std::string problem;
    if (gpu_s <= 0) problem = "no GPU time recorded";
    if (gpu_s > lifetime_s[name]) {
      problem = "GPU time " + std::to_string(gpu_s) + " s exceeds the jobs' lifetimes " +
                std::to_string(lifetime_s[name]) + " s";
    }
    if (used > allocated * 1.01 + 1e-9) problem = "more GPU memory used than allocated";
    accounting_[name] = problem.empty() ? "consistent" : problem;
    if (!problem.empty()) ++verification_failures_;
    DemoSay("accounting for team " + name + ": " + std::to_string(gpu_s / 3600).substr(0, 6) +
            " GPU-hours; " + (problem.empty() ? "consistent with the jobs' lifetimes" : problem));
  }
  return Status::Ok();
}

void Demo::Summarise() {
  StatusOr<Json> server = admin_.Get("/v1/summary");
  Json s = server.ok() ? *server : Json::object();
  Json jobs = Json::array();
  for (const Submitted& j : jobs_) {
    StatusOr<Json> job = Job(j.id);
    Json row = {{key::kId, j.id}, {key::kName, j.name}, {"verdict", verdicts_[j.id]}};
    if (job.ok()) {
      for (const char* key :
           {key::kState, key::kNode, key::kGpu, key::kQuotaBytes, key::kPredictedBytes,
            key::kMigrations, key::kRecoveries, key::kRestarts, key::kCheckpoints}) {
        if (job->contains(key)) row[key] = (*job)[key];
      }
    }
    jobs.push_back(row);
  }
  summary_ = {
      {key::kJobsSubmitted, jobs_.size()},
      {key::kJobsLost, s.value(key::kJobsLost, 0)},
      {key::kMigrations, s.value(key::kMigrations, 0)},
      {key::kRecoveries, s.value(key::kRecoveries, 0)},
      {key::kQuotaGrows, s.value(key::kQuotaGrows, 0)},
      {key::kCheckpoints, s.value(key::kCheckpoints, 0)},
      {key::kStateVerificationsFailed, verification_failures_},
      {"migration_pause", migration_pause_},
      {"accounting", accounting_},
      {"steps_failed", failed_steps_},
      {key::kOk, steps_ok_ && verification_failures_ == 0 && s.value(key::kJobsLost, 0) == 0},
      {"dashboard", fleet_->url()},
      {key::kGpus, gpus_},
      {"workload_uids", workload_uids_},
      {key::kJobs, jobs}};
  if (args_.json) {
    std::printf("%s\n", summary_.dump(2).c_str());
    return;
  }
  std::printf("\nPaladin demo summary\n");
  std::printf("  %-26s %s\n", "jobs submitted", std::to_string(jobs_.size()).c_str());
  if (!migration_pause_.empty())
    std::printf("  %-26s %s\n", "migration pause", migration_pause_.c_str());
  for (const char* key : {key::kJobsLost, key::kMigrations, key::kRecoveries, key::kQuotaGrows,
                          key::kCheckpoints, key::kStateVerificationsFailed, "workload_uids"}) {
    std::printf("  %-26s %s\n", key, summary_[key].dump().c_str());
  }
  std::printf("\n  %-10s %-14s %-8s %-9s %s\n", "JOB", "NAME", "NODE", "STATE", "STATE CHECK");
  for (const Json& row : jobs) {
    std::printf("  %-10s %-14s %-8s %-9s %s\n", DemoStr(row, key::kId).c_str(),
                DemoStr(row, key::kName).c_str(), DemoStr(row, key::kNode).c_str(),
                DemoStr(row, key::kState).c_str(), DemoStr(row, "verdict").c_str());
  }
  for (const std::string& step : failed_steps_) std::printf("  step failed: %s\n", step.c_str());
  std::printf("\n%s\n", summary_[key::kOk].get<bool>() ? "demo: every check passed"
                                                       : "demo: some checks FAILED (see above)");
}

void Demo::Cleanup() {
  for (const Submitted& j : jobs_)
    (void)admin_.Post("/v1/jobs/" + j.id + "/cancel", Json::object());
  // Give the agents a moment to kill the workloads before they stop.
  for (int i = 0; i < 40; ++i) {
    bool all_ended = true;
    for (const Submitted& j : jobs_) {
      StatusOr<Json> job = Job(j.id);
      if (job.ok() && !api::JobIs(*job, api::JobState::kCancelled) &&
          !api::JobIs(*job, api::JobState::kSucceeded) &&
          !api::JobIs(*job, api::JobState::kFailed)) {
        all_ended = false;
      }
    }
    if (all_ended) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

// Copies the demo workload, the libraries preloaded into workloads, paladin-workload-init,
// libpaladin-criu-rlimit.so and paladin-gpu-call into the demo's directory: workloads run as an
// unprivileged user, who may not reach the build tree (a clone under /root). Returns the workload's
// path.
StatusOr<std::string> StageFiles(const std::string& data) {
  const fs::path here = fs::path(SelfExe()).parent_path();
  StatusOr<quota::Libraries> libs = quota::FindLibraries();
  if (!libs.ok()) return libs.status();
  const fs::path workload = here / "paladin-demo-workload";
  const fs::path installed = here / ".." / "bin" / "paladin-demo-workload";
  const fs::path source = fs::exists(workload) ? workload : installed;
  if (!fs::exists(source)) {
    return NotFound("cannot find paladin-demo-workload next to paladin (" + workload.string() +
                    "); build it: cmake --build --preset release");
  }
  // The root of unprivileged jobs and what CRIU needs to dump them where root lacks
  // CAP_SYS_RESOURCE: the agents find both in PALADIN_LIB_DIR.
  StatusOr<std::string> init = ckpt::FindWorkloadInit();
  if (!init.ok()) return init.status();
  StatusOr<std::string> rlimit = ckpt::FindCriuRlimitLibrary();
  if (!rlimit.ok()) return rlimit.status();
  StatusOr<std::string> gpu_call = ckpt::FindHelperProgram("paladin-gpu-call", "PALADIN_GPU_CALL");
  if (!gpu_call.ok()) return gpu_call.status();
  std::error_code ec;
  const fs::path bin = fs::path(data) / "bin";
  const fs::path lib = fs::path(data) / "lib";
  fs::create_directories(bin, ec);
  fs::create_directories(lib, ec);
  const auto copy = fs::copy_options::overwrite_existing;
  for (const auto& [from, to] :
       std::vector<std::pair<fs::path, fs::path>>{{source, bin / "paladin-demo-workload"},
                                                  {libs->cuda_shim, lib / "libpaladin-cuda.so"},
                                                  {libs->nvml_shim, lib / "libpaladin-nvml.so"},
                                                  {libs->emucuda, lib / "libpaladin-emucuda.so"},
                                                  {*init, lib / "paladin-workload-init"},
                                                  {*rlimit, lib / "libpaladin-criu-rlimit.so"},
                                                  {*gpu_call, lib / "paladin-gpu-call"}}) {
    if (!fs::copy_file(from, to, copy, ec)) {
      return IoError("cannot copy " + from.string() + " to " + to.string() + ": " + ec.message());
    }
  }
  for (const fs::path& dir : {fs::path(data), bin, lib}) {
    fs::permissions(dir,
                    fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                        fs::perms::others_read | fs::perms::others_exec,
                    ec);
  }
  setenv("PALADIN_LIB_DIR", lib.c_str(), 1);
  return (bin / "paladin-demo-workload").string();
}

int Demo::Run() {
  StatusOr<std::string> workload = StageFiles(args_.data);
  if (!workload.ok()) {
    DemoSay(workload.status().message());
    return 1;
  }
  workload_ = *workload;
  if (Status s = StartFleet(); !s.ok()) {
    DemoSay(s.message());
    return 1;
  }
  const std::vector<std::pair<std::string, std::function<Status()>>> steps = {
      {"submit", [&] { return SubmitMix(); }},
      {"placement", [&] { return ShowPlacement(); }},
      {"quota growth", [&] { return ShowQuotaGrowth(); }},
      {"migration", [&] { return Migrate(); }},
      {"node loss", [&] { return LoseNode(); }},
      {"verification", [&] { return Verify(); }},
  };
  for (const auto& [name, step] : steps) {
    Status s = step();
    if (!s.ok()) {
      DemoSay("step '" + name + "' failed: " + s.message());
      steps_ok_ = false;
      failed_steps_.push_back(name + ": " + s.message());
      if (name == "submit" || g_interrupted != 0) break;
    }
  }
  Summarise();
  if (args_.keep && g_interrupted == 0) {
    DemoSay("the fleet stays up; dashboard: " + fleet_->url() + "/#token=" + fleet_->admin_token() +
            " ; Ctrl-C to stop");
    while (g_interrupted == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  Cleanup();
  fleet_->StopAll();
  return summary_.value(key::kOk, false) ? 0 : 1;
}

int RunDemo(DemoArgs args) {
  if (geteuid() != 0) {
    DemoSay(
        "the demo needs root: its jobs run in PID namespaces and cgroups of their own and are "
        "checkpointed by CRIU. Run it as root, e.g. sudo " +
        SelfExe() + " demo");
    return 2;
  }
  const bool own_dir = args.data.empty();
  if (own_dir) {
    // Workloads run as an unprivileged user when the demo runs as root: their files must be
    // reachable by it, which a home directory is not.
    char dir[] = "/tmp/paladin-demo-XXXXXX";
    if (mkdtemp(dir) == nullptr) {
      DemoSay(std::string("cannot create a directory under /tmp: ") + std::strerror(errno));
      return 1;
    }
    args.data = dir;
    std::error_code ec;
    fs::permissions(args.data,
                    fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                        fs::perms::others_read | fs::perms::others_exec,
                    ec);
  }
  struct sigaction stop {};
  stop.sa_handler = OnDemoInterrupt;
  sigaction(SIGINT, &stop, nullptr);
  sigaction(SIGTERM, &stop, nullptr);
  int code = 0;
  {
    LocalFleet fleet(args.data);
    Demo demo(args, &fleet);
    code = demo.Run();
  }
  if (own_dir && code == 0) {
    std::error_code ec;
    fs::remove_all(args.data, ec);
  } else if (code != 0) {
    DemoSay("logs kept in " + args.data + "/logs");
  }
  return code;
}

}  // namespace

void RegisterDemo(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<DemoArgs>();
  CLI::App* demo = app.add_subcommand(
      "demo",
      "Show the whole cycle on this machine: a server and two agents with emulated GPUs, demo "
      "workloads that verify their GPU memory, prediction, packing, a quota grown in place, a "
      "migration and a node lost with its jobs restored from checkpoints");
  demo->add_option("--data", args->data,
                   "Where the demo's fleet keeps its state (default: a new "
                   "directory under /tmp, removed after a clean run)");
  demo->add_option("--emulated-gpus", args->emulated_gpus,
                   "Each agent's emulated GPUs (default: the real GPUs split between the two "
                   "agents when this machine has at least two, else 2x16GiB emulated)")
      ->capture_default_str()
      ->each([args](const std::string&) { args->emulated_given = true; });
  demo->add_flag("--keep", args->keep,
                 "Leave the fleet and its dashboard up after the summary, until Ctrl-C");
  demo->add_flag("--json", args->json, "Print the summary as one JSON object on stdout");
  demo->add_option("--step-timeout", args->timeout_s, "Seconds each step may take")
      ->capture_default_str();
  demo->callback([args, exit_code] { *exit_code = RunDemo(*args); });
}

}  // namespace paladin::cli
