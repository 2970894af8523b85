#include "control.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "paladin/api/wire.h"
#include "paladin/core/policies.h"
#include "paladin/server/placement.h"
#include "paladin/server/validate.h"

namespace paladin::server {

namespace key = api::key;

namespace {

inline constexpr size_t kLogKeepBytes = 1 << 20;
inline constexpr int kUsageKeep = 2000;

}  // namespace

std::shared_ptr<const std::vector<core::TypicalWorkload>> DefaultShapes() {
  std::vector<core::TypicalWorkload> shapes;
  const std::pair<int32_t, int32_t> kShapes[] = {
      {125, 1}, {250, 1}, {500, 1}, {1000, 1}, {1000, 2}};
  const double kFreq[] = {0.2, 0.3, 0.25, 0.2, 0.05};
  for (size_t i = 0; i < std::size(kShapes); ++i) {
    core::TypicalWorkload t;
    t.gpu_milli = kShapes[i].first;
    t.gpu_count = kShapes[i].second;
    t.count = static_cast<int64_t>(kFreq[i] * 100);
    t.freq = kFreq[i];
    shapes.push_back(t);
  }
  return std::make_shared<const std::vector<core::TypicalWorkload>>(std::move(shapes));
}

StatusOr<core::Policy> MakeServerPolicy(const std::string& name) {
  core::PolicyContext ctx;
  ctx.typical = DefaultShapes();
  ctx.shapes = ctx.typical;
  return core::MakePolicy(name, ctx);
}

void LatencyRecorder::Add(double seconds) {
  recent_.push_back(seconds);
  if (recent_.size() > 1024) recent_.pop_front();
  sum_ += seconds;
  ++count_;
}

std::string LatencyRecorder::Prometheus(const std::string& name, const std::string& help) const {
  std::vector<double> sorted(recent_.begin(), recent_.end());
  std::sort(sorted.begin(), sorted.end());
  std::string out = "# HELP " + name + " " + help + "\n# TYPE " + name + " summary\n";
  char line[256];
  for (double q : {0.5, 0.9, 0.99}) {
    double v = 0;
    if (!sorted.empty()) {
      v = sorted[std::min(sorted.size() - 1,
                          static_cast<size_t>(q * static_cast<double>(sorted.size())))];
    }
    std::snprintf(line, sizeof line, "%s{quantile=\"%g\"} %.9g\n", name.c_str(), q, v);
    out += line;
  }
  std::snprintf(line, sizeof line, "%s_sum %.9g\n%s_count %lld\n", name.c_str(), sum_, name.c_str(),
                static_cast<long long>(count_));
  out += line;
  return out;
}

Control::Control(std::unique_ptr<Store> store, ControlOptions options, core::Policy policy)
    : store_(std::move(store)),
      db_(store_.get()),
      options_(std::move(options)),
      scheduler_(std::move(policy)),
      tokens_(options_.node_tokens_only),
      nodes_(options_.lease_s),
      teams_(options_.team_pods),
      moves_(*this, jobs_, nodes_, migrations_, commands_, scheduler_,
             MoveSettings{.move_mode = options_.move_mode,
                          .migration_timeout_s = options_.migration_timeout_s}),
      gangs_(*this, jobs_, nodes_, teams_, moves_, scheduler_, rank_subnet_,
             GangSettings{.checkpoint_every_s = options_.checkpoint_every_s,
                          .rank_subnet = options_.rank_subnet}) {}

StatusOr<std::unique_ptr<Control>> Control::Create(std::unique_ptr<Store> store,
                                                   ControlOptions options) {
  StatusOr<core::Policy> policy = MakeServerPolicy(options.policy);
  if (!policy.ok()) return policy.status();
  StatusOr<RankSubnet> subnet = ParseRankSubnet(options.rank_subnet);
  if (!subnet.ok()) return subnet.status();
  std::unique_ptr<Control> control(
      new Control(std::move(store), std::move(options), std::move(*policy)));
  std::lock_guard<std::mutex> lock(control->mu_);
  control->rank_subnet_ = *subnet;
  PALADIN_RETURN_IF_ERROR(control->Load());
  control->Reconcile();
  PALADIN_RETURN_IF_ERROR(control->Flush());
  return control;
}

double Control::Now() const {
  return (options_.clock != nullptr ? *options_.clock : base::RealClock()).WallSeconds();
}

Status Control::Load() {
  StatusOr<std::vector<TokenRecord>> tokens = db_.Tokens();
  if (!tokens.ok()) return tokens.status();
  tokens_.Load(std::move(*tokens));
  StatusOr<std::vector<TeamRecord>> teams = db_.Teams();
  if (!teams.ok()) return teams.status();
  teams_.Load(std::move(*teams));
  StatusOr<std::vector<NodeRecord>> nodes = db_.Nodes();
  if (!nodes.ok()) return nodes.status();
  nodes_.Load(std::move(*nodes));
  StatusOr<std::vector<JobRecord>> jobs = db_.Jobs();
  if (!jobs.ok()) return jobs.status();
  for (const JobRecord& j : *jobs) forecasts_.LearnPeak(j);
  jobs_.Load(std::move(*jobs));
  int64_t last_command = 0;
  StatusOr<std::vector<CommandRecord>> commands = db_.UnackedCommands(&last_command);
  if (!commands.ok()) return commands.status();
  commands_.Load(std::move(*commands), last_command);
  StatusOr<std::vector<MigrationRecord>> migrations = db_.Migrations();
  if (!migrations.ok()) return migrations.status();
  migrations_.Load(std::move(*migrations));
  for (const auto& [id, m] : migrations_) {  // in the order they were made
    if (m.pause_s && *m.pause_s > 0) {
      moves_.costs().Observe(m.from_node, m.to_node,
                             {static_cast<double>(m.moved_bytes), 0, *m.pause_s});
    }
  }
  StatusOr<std::map<std::string, int64_t>> counters = db_.Counters();
  if (!counters.ok()) return counters.status();
  counters_ = std::move(*counters);
  return Status::Ok();
}

// After a restart: a migration that had not committed has failed (its source resumes when its
// commit call gets false or no answer); a committed one is finished. The agents' heartbeats then
// say where jobs really run.
void Control::Reconcile() {
  const double now = Now();
  for (auto& [id, m] : migrations_) {
    if (m.Finished()) continue;
    if (m.commit_answer.value_or(false)) {
      moves_.Finish(m);
    } else {
      moves_.Fail(m, "the server restarted before the commit");
    }
  }
  for (auto& [seq, j] : jobs_) {
    if (j.state() == JobState::kMigrating && j.migration_id == 0) {
      jobs_.SetState(j, JobState::kRunning);
    }
    if (j.HoldsGpu()) j.accounted_at = std::max(j.accounted_at, now);
  }
  nodes_.RenewAll(now);  // the server was away, not the agents
}

void Control::CrashPoint(const std::string& step) {
  if (options_.crash_at != step) return;
  if (step != "before_commit") (void)Flush();
  std::fprintf(stderr, "paladin server: fault injected: crash at %s\n", step.c_str());
  std::fflush(stderr);
  _exit(137);
}

void Control::Count(const std::string& key, int64_t by) {
  counters_[key] += by;
  dirty_counters_.insert(key);
}

int64_t Control::Counter(const std::string& key) const {
  auto it = counters_.find(key);
  return it == counters_.end() ? 0 : it->second;
}

void Control::Event(const std::string& kind, const JobRecord* job, const std::string& node,
                    const std::string& message) {
  events_.push_back(EventRecord{0, Now(), job != nullptr ? job->id : "", node, kind, message,
                                job != nullptr ? job->team : ""});
}

int64_t Control::SendCommand(const std::string& node, api::Command command, const JobRecord* job) {
  if (job != nullptr && !command.epoch) command.epoch = job->epoch;
  return commands_.Send(node, std::move(command), job != nullptr ? job->id : "", Now());
}

StatusOr<JobRecord*> Control::FindJob(const Principal& who, const std::string& id) {
  PALADIN_RETURN_IF_ERROR(ParseJobId(id).status());
  JobRecord* j = jobs_.ById(id);
  if (j == nullptr || !who.SeesTeam(j->team)) return NotFound("job " + id + " not found");
  return j;
}

Json Control::MigrationJson(const JobRecord& j) const {
  const MigrationRecord* active = migrations_.Active(j.migration_id);
  if (active == nullptr) return nullptr;
  const MigrationRecord& m = *active;
  return {{key::kId, m.id},
          {key::kTo, m.to_node},
          {key::kToGpu, m.to_gpu},
          {key::kStep, m.StepName()},
          {key::kExpectedPauseS, m.expected_pause_s},
          {key::kExpectedBasis, m.expected_basis},
          {key::kMode, m.AskedModeName()}};
}

Json Control::JobJson(const JobRecord& j) const {
  Json out = JobToApi(j);
  Json migration = MigrationJson(j);
  if (!migration.is_null()) out[key::kMigration] = std::move(migration);
  // The job's last move that its source reported on: how its memory moved, why, the pause.
  if (const MigrationRecord* last = migrations_.LastReported(j.id)) {
    const MigrationRecord& m = *last;
    out[key::kLastMove] = {{key::kId, m.id},
                           {key::kFrom, m.from_node},
                           {key::kTo, m.to_node},
                           {key::kStep, m.StepName()},
                           {key::kMode, m.mode_used},
                           {key::kWhy, m.move_mode_why},
                           {key::kPauseS, m.pause_s ? Json(*m.pause_s) : Json(nullptr)}};
  }
  return out;
}

Status Control::Flush() {
  if (!jobs_.HasDirty() && !nodes_.HasDirty() && !teams_.HasDirty() && !commands_.HasDirty() &&
      !migrations_.HasDirty() && dirty_counters_.empty() && events_.empty() && samples_.empty() &&
      logs_.empty() && deleted_dirs_.empty()) {
    return Status::Ok();
  }
  Store::Transaction txn(db_.store());
  for (const JobRecord* j : jobs_.Dirty()) PALADIN_RETURN_IF_ERROR(db_.SaveJob(*j));
  for (const NodeRecord* n : nodes_.Dirty()) PALADIN_RETURN_IF_ERROR(db_.SaveNode(*n));
  for (const TeamRecord* t : teams_.Dirty()) PALADIN_RETURN_IF_ERROR(db_.SaveTeam(*t));
  for (const CommandRecord* c : commands_.Dirty()) PALADIN_RETURN_IF_ERROR(db_.SaveCommand(*c));
  for (const MigrationRecord* m : migrations_.Dirty()) {
    PALADIN_RETURN_IF_ERROR(db_.SaveMigration(*m));
  }
  for (const std::string& key : dirty_counters_) {
    PALADIN_RETURN_IF_ERROR(db_.SaveCounter(key, Counter(key)));
  }
  for (const EventRecord& e : events_) PALADIN_RETURN_IF_ERROR(db_.AddEvent(e));
  std::set<int64_t> sampled;
  for (const UsageSampleRecord& s : samples_) {
    PALADIN_RETURN_IF_ERROR(db_.AddUsageSample(s));
    sampled.insert(s.job);
  }
  for (int64_t job : sampled) PALADIN_RETURN_IF_ERROR(db_.KeepNewestSamples(job, kUsageKeep));
  for (const auto& [key, text] : logs_) {
    PALADIN_RETURN_IF_ERROR(db_.AppendLog(key.first, key.second, text, kLogKeepBytes));
  }
  for (const auto& [job, path] : deleted_dirs_) {
    PALADIN_RETURN_IF_ERROR(db_.MarkCheckpointDeleted(job, path));
  }
  Status committed = txn.Commit();
  if (committed.ok()) {
    for (const auto& [job, path] : deleted_dirs_) {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  }
  jobs_.ClearDirty();
  nodes_.ClearDirty();
  teams_.ClearDirty();
  migrations_.ClearDirty();
  dirty_counters_.clear();
  events_.clear();
  samples_.clear();
  logs_.clear();
  deleted_dirs_.clear();
  commands_.Flushed();
  return committed;
}

// --- tokens ---

StatusOr<Principal> Control::Authenticate(const std::string& secret) {
  std::lock_guard<std::mutex> lock(mu_);
  return tokens_.Authenticate(secret);
}

StatusOr<TokenRecord> Control::StoreToken(const std::string& digest, const std::string& scope,
                                          const std::string& name, const Principal& parsed) {
  TokenRecord t{0, digest, scope, name, Now()};
  StatusOr<int64_t> id = db_.AddToken(t);
  if (!id.ok()) return id.status();
  t.id = *id;
  tokens_.Add(t);
  if (parsed.team_scoped()) {
    teams_.FindOrAdd(parsed.team);
    PALADIN_RETURN_IF_ERROR(Flush());
  }
  return t;
}

StatusOr<Json> Control::CreateToken(const std::string& scope, const std::string& name) {
  StatusOr<Principal> parsed = tokens_.CheckScope(scope);
  if (!parsed.ok()) return parsed.status();
  StatusOr<std::string> secret = NewToken();
  if (!secret.ok()) return secret.status();
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<TokenRecord> t = StoreToken(Sha256Hex(*secret), scope, name, *parsed);
  if (!t.ok()) return t.status();
  return Json{
      {key::kId, t->id}, {key::kToken, *secret}, {key::kScope, t->scope}, {key::kName, t->name}};
}

Status Control::AdoptToken(const std::string& secret, const std::string& scope,
                           const std::string& name) {
  StatusOr<Principal> parsed = ParseScope(scope);
  if (!parsed.ok()) return parsed.status();
  const std::string digest = Sha256Hex(secret);
  std::lock_guard<std::mutex> lock(mu_);
  if (const TokenRecord* known = tokens_.ByDigest(digest);
      known != nullptr && known->scope != scope) {
    return FailedPrecondition("the token given is already a token of scope '" + known->scope +
                              "', not '" + scope + "'");
  }
  // The token this name had before (a replaced Secret) speaks no more.
  std::vector<int64_t> replaced;
  for (const TokenRecord* t : tokens_.Sorted()) {
    if (t->name == name && t->digest != digest) replaced.push_back(t->id);
  }
  for (int64_t old : replaced) {
    PALADIN_RETURN_IF_ERROR(db_.DeleteToken(old));
    tokens_.Remove(old);
  }
  if (tokens_.ByDigest(digest) != nullptr) return Status::Ok();
  StatusOr<TokenRecord> t = StoreToken(digest, scope, name, *parsed);
  if (!t.ok()) return t.status();
  return Status::Ok();
}

StatusOr<Json> Control::ListTokens() {
  std::lock_guard<std::mutex> lock(mu_);
  Json out = Json::array();
  for (const TokenRecord* t : tokens_.Sorted()) {
    out.push_back({{key::kId, t->id},
                   {key::kName, t->name},
                   {key::kScope, t->scope},
                   {key::kCreatedAt, t->created_at}});
  }
  return Json{{key::kTokens, out}};
}

Status Control::DeleteToken(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (tokens_.ById(id) == nullptr) return NotFound("token " + std::to_string(id) + " not found");
  PALADIN_RETURN_IF_ERROR(db_.DeleteToken(id));
  tokens_.Remove(id);
  return Status::Ok();
}

bool Control::HasTokenOfScope(const std::string& scope) {
  std::lock_guard<std::mutex> lock(mu_);
  return tokens_.HasScope(scope);
}

// --- the loop ---

void Control::Wake() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    woken_ = true;
  }
  wake_.notify_all();
}

void Control::WaitForWork(double seconds) {
  std::unique_lock<std::mutex> lock(wake_mu_);
  wake_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return woken_; });
  woken_ = false;
}

void Control::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  const double now = Now();
  DetectFailures(now);
  moves_.Timeouts(now);
  GpuHealthMoves();
  DrainNodes();
  PeriodicCheckpoints(now);
  for (auto& [seq, j] : jobs_) {
    if (j.HoldsGpu()) {
      Accrue(j, now);
      jobs_.MarkLazy(j);
    }
  }
  FleetView view = BuildFleet(true);
  PlaceWaiting(view);
  // Usage, accrual and heartbeat times go to the store every kLazyFlushS, not every pass and
  // beat: writing every job's record twice a second held the lock for most of each pass.
  constexpr double kLazyFlushS = 5;
  if (now - last_lazy_flush_ >= kLazyFlushS) {
    last_lazy_flush_ = now;
    jobs_.PromoteLazy();
    nodes_.PromoteLazy();
  }
  Status s = Flush();
  if (!s.ok()) std::fprintf(stderr, "paladin server: %s\n", s.ToString().c_str());
}

}  // namespace paladin::server
