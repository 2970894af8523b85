// `paladin job migrate|checkpoint|resume` (and `paladin resume`), `paladin drain`, `paladin
// fault` (an Xid or ECC event injected into an emulated GPU, for drills): operations the
// server runs in the background. The command asks for one, then polls the job and prints each
// step until it is done or failed (docs/formats/api.md: 202 answers, "poll the job").
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "fleet.h"
#include "fleet_format.h"
#include "paladin/api/job_state.h"
#include "paladin/api/wire.h"

namespace paladin::cli {

namespace key = api::key;

namespace {

using api::Json;
using fleet::Printable;
using fleet::Str;

// How a background operation shows in the job's record.
struct Watch {
  std::function<bool(const Json&)> busy;       // still under way
  std::function<bool(const Json&)> succeeded;  // ended the way it was asked to
  std::function<std::string(const Json&)> done_line;
  const char* failure_kind;                 // the event kind that explains a failure ("" for any)
  const char* gang_failure_kind = nullptr;  // the same for a gang's rank, when it differs
};

// The node a gang's rank is being moved to ("" when it is not moving).
std::string MovingTo(const Json& job) {
  const Json& gang = job.contains(key::kGang) ? job[key::kGang] : Json();
  return gang.is_object() ? Str(gang, key::kMovingTo) : "";
}

// "migrating: step transfer to node-b/1", "pending: no room on ...".
std::string Progress(const Json& job) {
  std::string line = Str(job, key::kState);
  const Json& move = job.contains(key::kMigration) ? job[key::kMigration] : Json();
  if (move.is_object()) {
    std::string to = Str(move, key::kTo);
    if (fleet::Int(move, key::kToGpu).has_value())
      to += "/" + std::to_string(*fleet::Int(move, key::kToGpu));
    line += ": step " + Str(move, key::kStep, "?") + " (to " + to + ")";
  } else if (api::JobIs(job, api::JobState::kRunning)) {
    line += " on " + fleet::PlacementCell(job);
    if (!MovingTo(job).empty()) line += ", moving to " + MovingTo(job) + " with its gang paused";
  } else if (!Str(job, key::kReason).empty()) {
    line += ": " + Str(job, key::kReason);
  }
  return line;
}

// The newest event about `job` of `kind` (any kind when empty), for a failure's reason.
std::string LastEvent(const FleetApi& api, const std::string& job, const std::string& kind) {
  StatusOr<Json> answer = api.Get("/v1/events" + fleet::Query({{"job", job}}));
  if (!answer.ok()) return "";
  std::string found;
  double newest = -1;
  for (const Json& e : fleet::Array(*answer, key::kEvents)) {
    if (!kind.empty() && Str(e, key::kKind) != kind) continue;
    const double t = fleet::Num(e, key::kT).value_or(0);
    if (t >= newest) {
      newest = t;
      found = Str(e, key::kMessage);
    }
  }
  return found;
}

// Polls the job every half second, printing each new step, until `watch` says it is over.
// `first` is the server's 202 answer. A job that has not shown the operation yet gets a few
// seconds to start it before its state counts as the outcome.
int Follow(const FleetApi& api, const std::string& id, const Watch& watch, Json job,
           double timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&start] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  FILE* progress = api.json() ? stderr : stdout;
  std::string last;
  bool seen_busy = false;
  while (true) {
    const std::string line = Progress(job);
    if (line != last) {
      std::fprintf(progress, "  %6.1fs  %s\n", elapsed(), Printable(line).c_str());
      std::fflush(progress);
      last = line;
    }
    const bool busy = watch.busy(job);
    seen_busy = seen_busy || busy;
    if (!busy && watch.succeeded(job)) break;
    if (!busy && (seen_busy || elapsed() > 5)) {
      const bool rank = job.contains(key::kGang) && job[key::kGang].is_object();
      std::string why =
          LastEvent(api, id,
                    rank && watch.gang_failure_kind != nullptr ? watch.gang_failure_kind
                                                               : watch.failure_kind);
      if (why.empty()) why = "the job is " + Progress(job);
      if (api.json()) FleetApi::PrintJson(job);
      api.Say(Printable(std::string(id).append(": failed: ").append(why)));
      return 1;
    }
    if (timeout_s > 0 && elapsed() > timeout_s) {
      if (api.json()) FleetApi::PrintJson(job);
      api.Say(Printable(id + ": still " + Progress(job) + " after " +
                        fleet::FormatDuration(elapsed()) + " (it goes on in the background)"));
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    StatusOr<Json> next = api.Get(fleet::JobPath(id));
    if (!next.ok()) return api.Fail(next.status());
    job = std::move(*next);
  }
  if (api.json()) {
    FleetApi::PrintJson(job);
  } else {
    std::printf("%s (took %s)\n", Printable(watch.done_line(job)).c_str(),
                fleet::FormatDuration(elapsed()).c_str());
  }
  return 0;
}

// Posts the request; without `wait`, prints the 202 answer (the job) and returns.
int Start(const FleetApi& api, const std::string& id, const std::string& action, const Json& body,
          const Watch& watch, bool wait, double timeout_s) {
  StatusOr<Json> job = api.Post(fleet::JobPath(id) + "/" + action, body);
  if (!job.ok()) return api.Fail(job.status());
  if (!wait) {
    if (api.json()) {
      FleetApi::PrintJson(*job);
    } else {
      std::printf("%s %s: %s\n", Printable(id).c_str(), action.c_str(),
                  Printable(Progress(*job)).c_str());
    }
    return 0;
  }
  return Follow(api, id, watch, std::move(*job), timeout_s);
}

struct MoveArgs {
  FleetFlags flags;
  std::string job;
  std::string to;
  bool no_wait = false;
  double timeout_s = 0;
};

int RunDrain(const MoveArgs& a) {
  FleetApi api("drain", a.flags);
  StatusOr<Json> node = api.Post("/v1/nodes/" + fleet::Escape(a.job) + "/drain", Json::object());
  if (!node.ok()) return api.Fail(node.status());
  if (api.json()) {
    FleetApi::PrintJson(*node);
    return 0;
  }
  size_t jobs = 0;
  for (const Json& gpu : fleet::Array(*node, key::kGpus))
    jobs += fleet::Array(gpu, key::kJobs).size();
  std::printf("%s %s: nothing new is placed on it; %zu job%s being migrated off\n",
              Printable(Str(*node, key::kName, a.job)).c_str(),
              Printable(Str(*node, key::kState, "draining")).c_str(), jobs,
              jobs == 1 ? " is" : "s are");
  return 0;
}

struct FaultArgs {
  FleetFlags flags;
  std::string target;  // NODE/GPU
  std::string kind = "xid";
  int64_t code = 79;
};

int RunFault(const FaultArgs& a) {
  FleetApi api("fault", a.flags);
  StatusOr<fleet::NodeGpu> target = fleet::ParseNodeGpu("gpu", a.target);
  if (target.ok() && !target->gpu.has_value()) {
    target = InvalidArgument("gpu '" + Printable(a.target) + "': expected NODE/GPU, e.g. node-a/0");
  }
  if (!target.ok()) return api.Fail(target.status());
  StatusOr<Json> sent = api.Post("/v1/nodes/" + fleet::Escape(target->node) + "/gpus/" +
                                     std::to_string(*target->gpu) + "/fault",
                                 Json{{key::kKind, a.kind}, {key::kCode, a.code}});
  if (!sent.ok()) return api.Fail(sent.status());
  if (api.json()) {
    FleetApi::PrintJson(*sent);
    return 0;
  }
  std::printf("%s: %s%s injected; an unhealthy GPU's jobs are migrated off (see paladin nodes)\n",
              Printable(a.target).c_str(), Printable(a.kind).c_str(),
              a.kind == "xid" ? (" " + std::to_string(a.code)).c_str() : "");
  return 0;
}

void AddMoveFlags(CLI::App* cmd, MoveArgs* args) {
  cmd->add_option("job", args->job, "Job id, e.g. j-000001")->required();
  cmd->add_flag("--no-wait", args->no_wait, "Return once the server has accepted the request");
  cmd->add_option("--timeout", args->timeout_s,
                  "Stop following after this many seconds (the operation goes on)")
      ->check(CLI::NonNegativeNumber);
  AddFleetFlags(cmd, &args->flags);
}

CLI::App* ResumeCommand(CLI::App* parent, int* exit_code) {
  auto r = std::make_shared<MoveArgs>();
  CLI::App* resume = parent->add_subcommand(
      "resume", "Resume a checkpointed job from its last checkpoint, on the best node");
  AddMoveFlags(resume, r.get());
  resume->callback(
      [r, exit_code] { *exit_code = FleetResume(r->job, r->flags, !r->no_wait, r->timeout_s); });
  return resume;
}

}  // namespace

int FleetMigrate(const std::string& job, const std::string& to, const FleetFlags& flags, bool wait,
                 double timeout_s) {
  return Guarded("job migrate", [&] {
    FleetApi api("job migrate", flags);
    StatusOr<fleet::NodeGpu> target = fleet::ParseNodeGpu("--to", to);
    if (!target.ok()) return api.Fail(target.status());
    Json body = {{key::kTo, target->node}};
    if (target->gpu.has_value()) body[key::kGpu] = *target->gpu;
    const fleet::NodeGpu want = *target;
    Watch watch;
    // A gang's rank moves as a step of its gang (docs/server.md, "Gangs"): running where it was,
    // then restoring on the new node, `gang.moving_to` set throughout.
    watch.busy = [](const Json& j) {
      return api::JobIs(j, api::JobState::kMigrating) || !MovingTo(j).empty();
    };
    watch.succeeded = [want](const Json& j) {
      return api::JobIs(j, api::JobState::kRunning) && Str(j, key::kNode) == want.node &&
             (!want.gpu.has_value() ||
              fleet::Int(j, key::kGpu) == std::optional<int64_t>(*want.gpu));
    };
    watch.done_line = [](const Json& j) {
      return Str(j, key::kId) + " moved to " + fleet::PlacementCell(j) + ", running";
    };
    watch.failure_kind = "migration_failed";
    watch.gang_failure_kind = "gang_move_failed";
    return Start(api, job, "migrate", body, watch, wait, timeout_s);
  });
}

int FleetCheckpoint(const std::string& job, const FleetFlags& flags, bool wait, double timeout_s) {
  return Guarded("job checkpoint", [&] {
    FleetApi api("job checkpoint", flags);
    Watch watch;
    watch.busy = [](const Json& j) { return api::JobIs(j, api::JobState::kCheckpointing); };
    watch.succeeded = [](const Json& j) { return api::JobIs(j, api::JobState::kCheckpointed); };
    watch.done_line = [](const Json& j) {
      std::string line = Str(j, key::kId) + " checkpointed";
      const Json& c = j.contains(key::kLastCheckpoint) ? j[key::kLastCheckpoint] : Json();
      if (c.is_object()) {
        line += " to " + Str(c, key::kPath) + " (" + fleet::BytesCell(c, key::kBytes) + ")";
      }
      return line + "; paladin job resume " + Str(j, key::kId) + " restarts it";
    };
    watch.failure_kind = "";
    return Start(api, job, "checkpoint", Json::object(), watch, wait, timeout_s);
  });
}

int FleetResume(const std::string& job, const FleetFlags& flags, bool wait, double timeout_s) {
  return Guarded("job resume", [&] {
    FleetApi api("job resume", flags);
    Watch watch;
    // Only a restore is a resume: a job that went back to pending (started over after a failed
    // restore) or back to checkpointed has not resumed, and the command says why.
    watch.busy = [](const Json& j) { return api::JobIs(j, api::JobState::kRestoring); };
    watch.succeeded = [](const Json& j) { return api::JobIs(j, api::JobState::kRunning); };
    watch.done_line = [](const Json& j) {
      return Str(j, key::kId) + " resumed on " + fleet::PlacementCell(j);
    };
    watch.failure_kind = "restore_failed";
    return Start(api, job, "resume", Json::object(), watch, wait, timeout_s);
  });
}

void RegisterFleetMoves(CLI::App& app, int* exit_code) {
  CLI::App* group = app.add_subcommand(
      "job",
      "Operations on a server's job that run in the background: migrate, checkpoint, "
      "resume (each prints its steps until done)");
  group->require_subcommand(1);

  auto m = std::make_shared<MoveArgs>();
  CLI::App* migrate = group->add_subcommand(
      "migrate",
      "Move a running job to another node (and GPU); on any failure before the move commits, "
      "it runs on where it was");
  AddMoveFlags(migrate, m.get());
  migrate->add_option("--to", m->to, "Destination NODE or NODE/GPU, e.g. node-b/1")->required();
  migrate->callback([m, exit_code] {
    *exit_code = FleetMigrate(m->job, m->to, m->flags, !m->no_wait, m->timeout_s);
  });

  auto c = std::make_shared<MoveArgs>();
  CLI::App* checkpoint = group->add_subcommand(
      "checkpoint", "Checkpoint a job and stop it (it ends checkpointed; resume restarts it)");
  AddMoveFlags(checkpoint, c.get());
  checkpoint->callback([c, exit_code] {
    *exit_code = FleetCheckpoint(c->job, c->flags, !c->no_wait, c->timeout_s);
  });

  ResumeCommand(group, exit_code);
  // `paladin resume JOB` too, unless a local command has the name.
  if (!HasSubcommand(app, "resume")) ResumeCommand(&app, exit_code);

  auto d = std::make_shared<MoveArgs>();
  CLI::App* drain = app.add_subcommand(
      "drain", "Drain a node: nothing new is placed on it and its jobs are migrated off (admin)");
  drain->add_option("node", d->job, "Node name")->required();
  AddFleetFlags(drain, &d->flags);
  drain->callback([d, exit_code] { *exit_code = Guarded("drain", [&] { return RunDrain(*d); }); });

  auto f = std::make_shared<FaultArgs>();
  CLI::App* fault = app.add_subcommand(
      "fault",
      "Inject a GPU fault into an emulated GPU, as its hardware would raise it through NVML "
      "(admin; for drills and tests): the agent judges it like a real one");
  fault->add_option("gpu", f->target, "NODE/GPU, e.g. node-a/0")->required();
  fault
      ->add_option("--kind", f->kind,
                   "xid, ecc (uncorrectable, double-bit) or ecc-corrected (single-bit: logged, "
                   "the GPU stays healthy)")
      ->check(CLI::IsMember({"xid", "ecc", "ecc-corrected"}))
      ->capture_default_str();
  fault
      ->add_option("--code", f->code,
                   "The Xid (79: fallen off the bus; 13, 31, 43, 45, 68, 109 are an "
                   "application's own errors and leave the GPU healthy)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  AddFleetFlags(fault, &f->flags);
  fault->callback([f, exit_code] { *exit_code = Guarded("fault", [&] { return RunFault(*f); }); });
}

}  // namespace paladin::cli
