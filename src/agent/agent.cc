// The agent's main loop: register (with backoff), heartbeat every heartbeat_s, dispatch the
// commands of each answer once, carry results to the next heartbeats, watch the lease.
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "agent_impl.h"
#include "paladin/migrate/migrate.h"

namespace paladin::agent {

namespace fs = std::filesystem;

namespace {

constexpr size_t kRememberedCommands = 4096;

}  // namespace

void Say(const std::string& line) {
  std::fprintf(stderr, "paladin agent: %s\n", line.c_str());
  std::fflush(stderr);
}

int RunAgent(const AgentOptions& options, const std::atomic<bool>* stop) {
  Agent agent(options, stop);
  return agent.Run();
}

Agent::Agent(AgentOptions options, const std::atomic<bool>* stop)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : base::RealClock()),
      stop_(stop) {}

Agent::~Agent() {
  StopHealthWatch();
  StopLocal();
  StopWorkers(true);
  if (lease_fd_ >= 0) close(lease_fd_);
}

Status Agent::Setup() {
  if (options_.name.empty()) return InvalidArgument("--name: the node needs a name");
  if (options_.data_dir.empty()) return InvalidArgument("--data: the agent needs a directory");
  if (options_.token.empty()) {
    return InvalidArgument("no token: give --token, --token-file or $PALADIN_TOKEN");
  }
  StatusOr<api::Endpoint> endpoint = api::ParseUrl(options_.server_url);
  if (!endpoint.ok()) return InvalidArgument("--server: " + endpoint.status().message());
  client_ = std::make_unique<api::Client>(*endpoint, options_.token, 10);

  std::error_code ec;
  fs::create_directories(options_.data_dir, ec);
  if (ec) return IoError("cannot create --data " + options_.data_dir + ": " + ec.message());
  data_dir_ = fs::canonical(options_.data_dir, ec).string();
  runs_dir_ = data_dir_ + "/runs";
  fs::create_directories(runs_dir_, ec);
  if (ec) return IoError("cannot create " + runs_dir_ + ": " + ec.message());
  // Apart from the agent's records: a run directory is its job's own, and the job could replace
  // anything the agent kept in it.
  const std::string workloads =
      options_.workloads_dir.empty() ? data_dir_ + "/workloads" : options_.workloads_dir;
  fs::create_directories(workloads, ec);
  if (ec) return IoError("cannot create --workloads " + workloads + ": " + ec.message());
  workloads_dir_ = fs::canonical(workloads, ec).string();
  // Workloads run as another user: they must be able to reach their run directories.
  for (const std::string& dir : {data_dir_, runs_dir_, workloads_dir_}) {
    struct stat st {};
    if (stat(dir.c_str(), &st) == 0) chmod(dir.c_str(), (st.st_mode & 07777) | 0711);
  }
  PALADIN_RETURN_IF_ERROR(OpenLease());
  PALADIN_RETURN_IF_ERROR(ResolveUser());
  DecideCheckpointable();
  PALADIN_RETURN_IF_ERROR(DiscoverGpus());
  StartHealthWatch();
  // Restored and received workloads are detached from CRIU; as a subreaper this agent becomes
  // their parent and learns their exit codes.
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    Say("warning: cannot become a child subreaper; restored workloads' exit codes are unknown");
  }
  LoadCommandIds();
  PALADIN_RETURN_IF_ERROR(StartLocal());
  return Status::Ok();
}

int Agent::Run() {
  if (Status s = Setup(); !s.ok()) {
    Say(s.message());
    return s.code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  // A move received or sent here when the previous agent died left its folders (the image, the
  // streamed pages); no live move's is touched (each is locked by the process it belongs to).
  for (const std::string& dir :
       migrate::RemoveOrphanedMoveFolders({data_dir_ + "/incoming", data_dir_ + "/outgoing"})) {
    Say("removed " + dir + ", left by a move whose process died");
  }
  Adopt();
  lease_.Contacted(clock_.SteadySeconds());
  double backoff = 0.5;
  double last_sweep = clock_.SteadySeconds();
  while (!stop_->load()) {
    const double began = clock_.SteadySeconds();
    PollExits();
    StopWorkers(false);
    if (!registered_ && !Register()) {
      CheckLease();
      Say("retrying in " + std::to_string(static_cast<int>(backoff * 1000)) + " ms");
      SleepFor(backoff);
      backoff = std::min(backoff * 2, 10.0);
      continue;
    }
    backoff = 0.5;
    if (driver_.emulated && began - last_sweep > 60) {
      SweepControlDir();
      last_sweep = began;
    }
    (void)Heartbeat();
    CheckLease();
    SleepFor(heartbeat_s_ - (clock_.SteadySeconds() - began));
  }
  Say("stopping");
  StopHealthWatch();
  StopLocal();
  CallOffIncoming("", -1);  // a move not yet arrived fails now, not after its idle timeout
  StopWorkers(true);
  std::lock_guard<std::mutex> lock(mu_);
  size_t left = 0;
  for (auto& [key, w] : jobs_) {
    if (w->state == api::CopyState::kExited) continue;
    if (options_.kill_on_exit) {
      (void)KillTree(w.get());
      Say("killed job " + w->id + " (--kill-on-exit)");
    } else {
      ++left;
    }
    if (w->grower) w->grower->Stop();
  }
  if (left > 0) {
    Say(std::to_string(left) +
        " workload(s) left running; a new agent with the same --data adopts them");
  }
  return 0;
}

void Agent::SleepFor(double seconds) {
  const double until = clock_.SteadySeconds() + seconds;
  while (!stop_->load() && clock_.SteadySeconds() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool Agent::Register() {
  api::Registration registration;
  registration.name = options_.name;
  registration.address = options_.address;
  registration.migrate_port = options_.migrate_port;
  registration.checkpointable = checkpointable_;
  registration.post_copy = checkpointable_ && ReadyLazyCriu().ok();
  registration.stream = checkpointable_;
  registration.gpus = GpusForRegister();
  registration.jobs = Reports(true);
  StatusOr<Json> answer = client_->Post("/v1/agents/register", api::ToJson(registration));
  if (!answer.ok()) {
    Say("cannot register with " + client_->Url() + ": " + answer.status().message());
    return false;
  }
  Delivered();
  StatusOr<api::AgentAnswer> read = api::ReadAgentAnswer(*answer);
  if (read.ok()) {
    lease_s_ = read->lease_s.value_or(lease_s_.load());
    heartbeat_s_ = read->heartbeat_s.value_or(heartbeat_s_);
  } else {
    Say("the server's answer to register is malformed (" + read.status().message() +
        "); keeping lease " + std::to_string(lease_s_.load()) + " s");
  }
  heartbeat_s_ = std::clamp(heartbeat_s_, 0.05, 60.0);
  registered_ = true;
  lease_.Contacted(clock_.SteadySeconds());
  char line[256];
  std::snprintf(line, sizeof line, "registered with %s as %s: heartbeat every %.2g s, lease %.2g s",
                client_->Url().c_str(), options_.name.c_str(), heartbeat_s_, lease_s_.load());
  Say(line);
  return true;
}

bool Agent::Heartbeat() {
  api::Heartbeat beat;
  {
    std::lock_guard<std::mutex> lock(mu_);
    results_in_flight_ = results_.size();
    for (const Result& r : results_) {
      beat.results.push_back(
          api::CommandResult{r.command, r.status.ok(), r.status.message(), r.detail});
    }
  }
  beat.gpus = GpusForHeartbeat();
  beat.jobs = Reports(true);
  const Json body = api::ToJson(beat);
  // The lease counts from before the server could have seen this beat: its own count starts
  // later, so the node's fence always comes first.
  const double sent = clock_.SteadySeconds();
  const uint64_t sent_ns = clock_.BootNs();
  StatusOr<Json> answer = client_->Post("/v1/agents/" + options_.name + "/heartbeat", body);
  if (!answer.ok()) {
    const double silent = lease_.Silence(clock_.SteadySeconds());
    char line[512];
    std::snprintf(line, sizeof line,
                  "heartbeat failed (%s); no contact for %.1f s of a %.2g s lease",
                  answer.status().message().c_str(), silent, lease_s_.load());
    Say(line);
    // A server that does not know this agent (restarted without its state) hears from it again.
    if (answer.status().code() == StatusCode::kNotFound) registered_ = false;
    return false;
  }
  Delivered();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < results_in_flight_ && !results_.empty(); ++i) results_.pop_front();
    results_in_flight_ = 0;
  }
  // Renew before or after the answer's commands, as LeasePolicy::Answered says (AnswerPlan).
  const AnswerPlan plan = lease_.Answered(sent, clock_.BootNs());
  // The inits may have stopped the jobs before this loop noticed: the answer's commands find them
  // frozen, as they are.
  if (plan.lease_was_out) FreezeJobs(plan.silent_s, true);
  StatusOr<api::AgentAnswer> read = api::ReadAgentAnswer(*answer);
  if (!read.ok()) {
    Say("malformed heartbeat answer: " + read.status().message());
  } else if (answer->is_object()) {
    try {
      lease_s_ = read->lease_s.value_or(lease_s_.load());
      if (read->heartbeat_s) heartbeat_s_ = *read->heartbeat_s;
      heartbeat_s_ = std::clamp(heartbeat_s_, 0.05, 60.0);
      if (plan.RenewBeforeCommands()) RenewLease(sent_ns);
      if (read->commands != nullptr) {
        for (const Json& c : *read->commands) Dispatch(c);
      }
      if (read->rank_routes != nullptr) ApplyRankRoutes(*read->rank_routes);
    } catch (const Json::exception& e) {
      Say("malformed heartbeat answer: " + std::string(e.what()));
    }
  }
  if (!plan.RenewBeforeCommands()) RenewLease(sent_ns);
  // The server has spoken (it may have killed some): what is still frozen runs again.
  if (frozen_) Thaw();
  // Only now: a received copy that the server already gave up (stale) was killed by this answer.
  SettleInterruptedMoves();
  return true;
}

void Agent::Dispatch(const Json& body) {
  // A command without a usable id cannot be answered: said and dropped.
  const int64_t id = api::CommandIdOf(body);
  if (id <= 0) {
    Say("ignoring a command without an id: " +
        body.dump(-1, ' ', false, Json::error_handler_t::replace).substr(0, 200));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (seen_commands_.count(id) > 0) return;  // executed once, whatever the server repeats
  }
  RememberCommand(id);
  StatusOr<api::Command> decoded = api::DecodeCommand(body);
  if (!decoded.ok()) {
    Say("refusing command " + std::to_string(id) + ": " + decoded.status().message());
    AddResult(id, decoded.status());
    return;
  }
  const api::Command& c = *decoded;
  Say("command " + std::to_string(id) + ": " + api::CommandKindName(c.kind) +
      (c.job.empty() ? "" : " " + c.job));
  switch (c.kind) {
    case api::CommandKind::kStart: {
      Json detail = Json::object();
      Status s = Start(c, &detail);
      AddResult(id, s, detail);
      return;
    }
    case api::CommandKind::kKill:
      return AddResult(id, Kill(c));
    case api::CommandKind::kResize:
      return AddResult(id, Resize(c));
    case api::CommandKind::kFault:
      return AddResult(id, Fault(c));
    case api::CommandKind::kCheckpoint:
      return RunOnWorker(&Agent::Checkpoint, c);
    case api::CommandKind::kRestore:
      return RunOnWorker(&Agent::Restore, c);
    case api::CommandKind::kMigrateIn:
      return RunOnWorker(&Agent::MigrateIn, c);
    case api::CommandKind::kMigrateOut:
      return RunOnWorker(&Agent::MigrateOut, c);
    case api::CommandKind::kFreeze:
      return RunOnWorker(&Agent::Freeze, c);
    case api::CommandKind::kThaw:
      return RunOnWorker(&Agent::Thaw, c);
  }
}

void Agent::RunOnWorker(void (Agent::*method)(const api::Command&), const api::Command& command) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread thread([this, method, command, done] {
    (this->*method)(command);
    done->store(true);
  });
  workers_.push_back({std::move(thread), done});
}

void Agent::StopWorkers(bool all) {
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (all || it->done->load()) {
      if (all && !it->done->load()) Say("waiting for a command in progress to finish");
      it->thread.join();
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
}

void Agent::AddResult(int64_t id, Status status, Json detail) {
  Say("command " + std::to_string(id) + (status.ok() ? ": done" : ": failed: " + status.message()));
  std::lock_guard<std::mutex> lock(mu_);
  results_.push_back({id, std::move(status), std::move(detail)});
}

void Agent::RememberCommand(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  seen_commands_.insert(id);
  seen_order_.push_back(id);
  while (seen_order_.size() > kRememberedCommands) {
    seen_commands_.erase(seen_order_.front());
    seen_order_.pop_front();
  }
  // Remembered across restarts: a command executed just before a crash is not run twice.
  const std::string path = data_dir_ + "/commands.json";
  {
    std::ofstream out(path + ".tmp");
    out << Json(std::vector<int64_t>(seen_order_.begin(), seen_order_.end())).dump() << "\n";
  }
  std::error_code ec;
  fs::rename(path + ".tmp", path, ec);
}

void Agent::LoadCommandIds() {
  std::ifstream in(data_dir_ + "/commands.json");
  if (!in) return;
  const Json ids = Json::parse(in, nullptr, false);
  if (!ids.is_array()) return;
  for (const Json& id : ids) {
    if (!id.is_number_integer()) continue;
    seen_commands_.insert(id.get<int64_t>());
    seen_order_.push_back(id.get<int64_t>());
  }
}

}  // namespace paladin::agent
