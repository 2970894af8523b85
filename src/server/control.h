// The control plane: every record the server keeps, and every operation on them. The HTTP layer
// (api.cc) turns requests into calls here; the scheduling loop (server.cc) calls Tick().
//
// The records live in parts with one job each, every one with its own header and unit test:
//   JobTable (job_table.h)             the jobs: lookup, new ids, SetState (the only way a job's
//                                      state changes, along job_state.h's graph), dirty writes
//   NodeTable (node_table.h)           the nodes: lookup, registration, the lease (when a silent
//                                      node is dead, when its jobs may move), dirty writes
//   TokenBook (token_book.h)           the API tokens by digest: who a secret speaks as, which
//                                      scopes may be created here
//   TeamBook (team_book.h)             the teams: quotas, usage, what a team holds (jobs and
//                                      Kubernetes pods) and the one rule of quota refusals
//   Scheduler (scheduler.h)            the decisions, over core only: where waiting jobs and
//                                      gangs go, whom to preempt, admission plans, where a
//                                      moving job goes, a job's size after an OOM
//   CommandQueue (command_queue.h)     the agents' commands: queued, handed out, acknowledged
//   MigrationTable (migration_table.h) the migration rows; migration_steps.h decides their steps
//   MigrationOrchestrator              the migration transaction carried out: the destination
//     (orchestrator.h)                 reserved, the agents' commands, the commit decided once,
//                                      failures, timeouts, what moves cost
//   Persistence (persistence.h)        all SQL: what is loaded at start and written by Flush
//   JobForecasts (forecasts.h)         each job's predictor, the live check of its forecasts
//                                      per job and team, the classes' history for auto sizing
//   GangCoordinator (gangs.h)          jobs of several ranks: placement all or none, addresses
//                                      and routes, the coordinated checkpoint, a rank's move,
//                                      recovery
// The orchestrator and the gangs ask Control for what every job shares through ControlHost
// (control_host.h), which Control implements.
// Control keeps the rest (counters, events, logs, usage samples) and carries out each operation
// over the parts.
//
// The implementation is split by concern: control.cc (loading, persistence, commands, events,
// tokens), jobs.cc (the job endpoints), agents.cc (registration and heartbeats, whose bodies and
// answers are api/wire.h's types), placement.cc (the scheduler's decisions carried out, auto
// sizing, usage samples, accounting), upkeep.cc (failure detection,
// recovery, drains, periodic checkpoints, rebalancing), views.cc (nodes, teams, events, summary,
// metrics).
//
// Thread safety: every public method takes the one lock, so calls from the HTTP threads and the
// scheduling loop are serialised; none blocks on the network. Each state change is written to
// the store in one transaction before the method returns (Flush).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "command_queue.h"
#include "control_host.h"
#include "forecasts.h"
#include "gangs.h"
#include "job_table.h"
#include "migration_table.h"
#include "model.h"
#include "node_table.h"
#include "orchestrator.h"
#include "paladin/api/wire.h"
#include "paladin/base/clock.h"
#include "paladin/base/status.h"
#include "paladin/core/auto_size.h"
#include "paladin/core/fleet.h"
#include "paladin/core/forecast_check.h"
#include "paladin/core/move_cost.h"
#include "paladin/core/packer.h"
#include "paladin/core/predict.h"
#include "paladin/core/rebalance.h"
#include "paladin/core/rng.h"
#include "paladin/server/auth.h"
#include "paladin/server/store.h"
#include "paladin/server/validate.h"
#include "persistence.h"
#include "pods.h"
#include "scheduler.h"
#include "team_book.h"
#include "token_book.h"

namespace paladin::server {

struct ControlOptions {
  double lease_s = 6;
  double heartbeat_s = 1;
  double checkpoint_every_s = 0;  // 0 = no periodic checkpoints
  int keep_checkpoints = 3;
  std::string checkpoint_store;
  std::string policy = "paladin";
  std::string crash_at;  // PALADIN_SERVER_FAULT=crash-at:<step>
  double migration_timeout_s = 300;
  std::string move_mode = "auto";             // ServerOptions::move_mode
  std::string rank_subnet = "10.231.0.0/16";  // ServerOptions::rank_subnet
  // Refuse the fleet-wide `agent` token (authentication and creation): agents must each use a
  // token of their own node, `agent:NODE`.
  bool node_tokens_only = false;
  // What the team's Kubernetes pods hold, by cluster (PodBook::TeamHeld); empty: none. A team's
  // max_gpu_mem and max_gpus count it with the team's jobs (docs/kubernetes.md, "Teams").
  std::function<std::map<std::string, PodsHeld>(const std::string& team)> team_pods;
  // The measured peaks of the class's Kubernetes pods (PodBook::ClassPods: peak_bytes, pods);
  // an auto job or pod is sized from its class's jobs and pods together. Empty: none.
  std::function<core::ClassHistory(const std::string& class_key)> class_pods;
  // Where the control plane reads the time (WallSeconds); null: base::RealClock(). Tests inject
  // one they set, so its decisions in time (leases, periodic checkpoints, timeouts) are
  // tested without sleeps. Not owned; must outlive the Control.
  const base::Clock* clock = nullptr;
};

// A bounded record of durations for a Prometheus summary.
class LatencyRecorder {
 public:
  void Add(double seconds);
  // "name{quantile=...} v" lines plus _sum and _count.
  std::string Prometheus(const std::string& name, const std::string& help) const;

 private:
  std::deque<double> recent_;
  double sum_ = 0;
  int64_t count_ = 0;
};

class Control : private ControlHost {
 public:
  static StatusOr<std::unique_ptr<Control>> Create(std::unique_ptr<Store> store,
                                                   ControlOptions options);
  Control(const Control&) = delete;
  Control& operator=(const Control&) = delete;

  const ControlOptions& options() const { return options_; }

  // --- tokens and authentication ---
  StatusOr<Principal> Authenticate(const std::string& secret);
  // Creates a token; its secret is in the answer (the only time it is shown).
  StatusOr<Json> CreateToken(const std::string& scope, const std::string& name);
  // Makes `secret`, a token made elsewhere (`paladin server --admin-token-file`), a token of
  // `scope` named `name`, and removes every other token of that name, so that a replaced file's
  // old token stops working. A secret that is already a token of `scope` is kept as it is; one
  // that is a token of another scope is refused. The caller checks the secret's form.
  Status AdoptToken(const std::string& secret, const std::string& scope, const std::string& name);
  StatusOr<Json> ListTokens();
  Status DeleteToken(int64_t id);
  // Whether any token of `scope` exists (first start creates the admin and agent tokens).
  bool HasTokenOfScope(const std::string& scope);

  // --- jobs (docs/formats/api.md) ---
  StatusOr<Json> Submit(const Principal& who, const Json& body);
  // GET /v1/jobs, as the reply's JSON text.
  StatusOr<std::string> ListJobs(const Principal& who, const std::string& team,
                                 const std::string& state, bool all);
  StatusOr<Json> GetJob(const Principal& who, const std::string& id);
  StatusOr<Json> Logs(const Principal& who, const std::string& id, const std::string& stream,
                      int64_t tail);
  StatusOr<Json> Usage(const Principal& who, const std::string& id);
  StatusOr<Json> Explain(const Principal& who, const std::string& id);
  StatusOr<Json> Cancel(const Principal& who, const std::string& id);
  StatusOr<Json> Migrate(const Principal& who, const std::string& id, const Json& body);
  StatusOr<Json> CheckpointJob(const Principal& who, const std::string& id);
  StatusOr<Json> Resume(const Principal& who, const std::string& id);

  // --- nodes, teams, events, views ---
  StatusOr<Json> Nodes(const Principal& who);
  StatusOr<Json> Drain(const std::string& node);
  StatusOr<Json> Fault(const std::string& node, int gpu, const Json& body);
  StatusOr<Json> Events(const Principal& who, const std::string& job, double since);
  StatusOr<Json> Teams(const Principal& who);
  StatusOr<Json> PutTeam(const std::string& name, const Json& body);
  StatusOr<Json> Summary(const Principal& who);
  // GET /v1/move-costs (admin): every finished move's measured pause with its node pair and the
  // bytes it moved, oldest first: what the move cost model learned from (`paladin move-costs`
  // writes it as the CSV `sim dynamic --move-costs` reads).
  Json MoveCosts();
  // GET /v1/sizing: the size an `auto` workload of class TEAM/COMMAND would get now, from what
  // and why (core::SizeAuto over the class's ended jobs and measured pods; sizing.cc). A team
  // token reads its own team's only (PermissionDenied).
  StatusOr<Json> Sizing(const Principal& who, const std::string& team, const std::string& command);
  std::string Metrics(const Principal& who);
  void RecordRequest(double seconds);

  // --- agents ---
  // Each is refused (PermissionDenied, nothing changed) unless `who` speaks for the node it acts
  // as (Principal::SpeaksFor): the name registered, the node heartbeating, the migration's source
  // for a commit, its source or destination for an abort.
  StatusOr<Json> RegisterAgent(const Principal& who, const Json& body);
  StatusOr<Json> Heartbeat(const Principal& who, const std::string& node, const Json& body);
  StatusOr<Json> Commit(const Principal& who, int64_t migration);
  // The destination lost the source after restoring the job (or a restarted source settles a
  // move it had begun): the move is decided now if it is not yet (not committed), and the
  // answer, as Commit's, says which.
  StatusOr<Json> AbortUnlessCommitted(const Principal& who, int64_t migration);

  // --- the loop ---
  // One pass: failure detection, recovery, drains, periodic checkpoints, migrations' timeouts,
  // accounting, then placement of waiting jobs.
  void Tick();
  // Wakes the loop early (something changed); WaitForWork blocks up to `seconds` for a wake.
  void Wake() override;
  void WaitForWork(double seconds);

 private:
  // A new token record stored and added to the book (a team scope's team made); under mu_.
  StatusOr<TokenRecord> StoreToken(const std::string& digest, const std::string& scope,
                                   const std::string& name, const Principal& parsed);
  Control(std::unique_ptr<Store> store, ControlOptions options, core::Policy policy);

  // control.cc
  Status Load();
  void Reconcile();
  Status Flush() override;
  void CrashPoint(const std::string& step) override;
  // Every change of a job or a node that reaches the store also counts in Changes() (what
  // Preempt's memo keys on): jobs_.MarkDirty (and SetState, Add), nodes_.MarkDirty (and the
  // lease's marks). Usage, accrual and heartbeat times may wait for the next periodic write
  // (kLazyFlushS: jobs_.MarkLazy, nodes_.MarkLazy); a restarted server re-learns them from the
  // next heartbeats.
  uint64_t Changes() const { return jobs_.changes() + nodes_.changes(); }
  void Count(const std::string& key, int64_t by) override;
  void Count(const std::string& key) { Count(key, 1); }
  int64_t Counter(const std::string& key) const;
  void Event(const std::string& kind, const JobRecord* job, const std::string& node,
             const std::string& message) override;
  // Queues command C for NODE, about JOB (its id, and its epoch unless C names one); returns
  // the command's id.
  int64_t SendCommand(const std::string& node, api::Command c, const JobRecord* job) override;
  StatusOr<JobRecord*> FindJob(const Principal& who, const std::string& id);
  // The job a migration is about, or null.
  JobRecord* JobOf(const MigrationRecord& m) { return jobs_.ById(m.job); }
  Json JobJson(const JobRecord& j) const override;
  // The migration under way for the API's `migration` field, or null.
  Json MigrationJson(const JobRecord& j) const;
  double Now() const override;  // options_.clock's WallSeconds, or the host's

  // placement.cc: the scheduler's decisions (scheduler.h) carried out
  FleetView BuildFleet(bool reserve_running) override;  // server::BuildFleet over the parts
  int64_t LargestGpuMemory() const;
  void PlaceWaiting(FleetView& view);
  bool TryPlace(FleetView& view, JobRecord& j);
  // The job's team quota refusal (TeamBook::Refusal; "" when it fits).
  void Bind(FleetView& view, JobRecord& j, const core::Placement& p,
            const std::string& how) override;
  void SizeAutoJob(JobRecord& j) override;
  core::ClassHistory ClassHistoryOf(const std::string& class_key) const;  // jobs and pods
  void Accrue(JobRecord& j, double now) override;
  void ReleaseJob(JobRecord& j) override;
  void EndJob(JobRecord& j, JobState state, std::optional<int> exit_code, const std::string& why);
  void ObserveUsage(JobRecord& j, double now);
  void PredictionCheckMetrics(const Principal& who, std::string* out) const;
  // The live check's figures as the API gives them: windows, under, under_rate, mean_slack.
  static Json CheckToApi(const core::CheckTotals& t);
  // The sum of the checks of the teams `who` sees, with the window and the target.
  Json FleetCheckToApi(const Principal& who) const;

  // agents.cc
  void ApplyReport(NodeRecord& node, const api::JobReport& report);
  void ApplyResult(NodeRecord& node, const api::CommandResult& result);
  void ApplyCheckpointResult(JobRecord& j, const api::Command& command,
                             const api::CommandResult& result, const std::string& node);
  void UpdateGpus(NodeRecord& node, const std::vector<api::GpuReport>& gpus);
  void AppendLog(JobRecord& j, const std::string& stream, const std::string& text);
  // The part of a copy's reported log text [from, to) that the server does not have yet (all of
  // it when the agent does not say where it lies); advances the stream's cursor.
  std::string UnseenLog(const JobRecord& j, const std::string& copy, const std::string& stream,
                        const std::string& text, int64_t from, int64_t to);
  Json TakeCommands(NodeRecord& node);

  // upkeep.cc
  void DetectFailures(double now);
  void RecoverNode(NodeRecord& node);
  void DrainNodes();
  void PeriodicCheckpoints(double now);
  void MigrationTimeouts(double now);
  void RecordCheckpoint(JobRecord& j, const Json& detail, const std::string& dir) override;
  void Rebalance(FleetView& view, JobRecord& waiting);
  // Higher-priority work that cannot fit otherwise: checkpoints (and stops) the fewest
  // lower-priority running jobs on one node whose room lets `waiting` fit; they resume when room
  // returns. Returns whether it preempted any.
  bool Preempt(const FleetView& view, JobRecord& waiting);  // memoised PreemptFor
  bool PreemptFor(const FleetView& view, JobRecord& waiting);
  void GpuHealthMoves();
  std::string CheckpointDir(const JobRecord& j, int seq) const override;

  std::mutex mu_;
  std::mutex wake_mu_;  // taken after mu_ when both are held
  std::condition_variable wake_;
  bool woken_ = false;

  std::unique_ptr<Store> store_;
  Persistence db_;  // over store_: the only SQL
  ControlOptions options_;
  Scheduler scheduler_;  // the decisions: placement, preemption, admission plans, OOM restarts
  RankSubnet rank_subnet_;
  JobForecasts forecasts_;  // the jobs' predictors, their live check, the classes' history

  TokenBook tokens_;  // every API token, by the digest of its secret

  JobTable jobs_;          // every job, and which changed since the last Flush
  NodeTable nodes_;        // every node, its lease, and which changed since the last Flush
  TeamBook teams_;         // every team, its quotas' rule, and which changed since the last Flush
  CommandQueue commands_;  // for the agents, not yet acknowledged
  MigrationTable migrations_;    // every migration, finished ones too
  MigrationOrchestrator moves_;  // the migration transaction (orchestrator.h) over the parts
  GangCoordinator gangs_;        // jobs of several ranks (gangs.h), over the parts above
  std::map<std::string, int64_t> counters_;
  std::vector<core::Move> admission_moves_;  // the rebalancer's plan being carried out

  // Written by Flush (the jobs' and the nodes' own: in jobs_ and nodes_).
  double last_lazy_flush_ = 0;
  std::set<std::string> dirty_counters_;
  std::vector<EventRecord> events_;
  std::vector<UsageSampleRecord> samples_;
  std::map<std::pair<int64_t, std::string>, std::string> logs_;  // (job, stream) -> new text
  // (job, stream) -> the copy ("node/epoch") whose log the server read last, and how far: the
  // same copy sending bytes below that again is an agent resending after a restart. In memory.
  struct LogCursor {
    std::string copy;
    int64_t through = 0;
  };
  std::map<std::pair<int64_t, std::string>, LogCursor> log_cursors_;
  std::vector<std::pair<std::string, std::string>> deleted_dirs_;

  LatencyRecorder decision_seconds_;
  LatencyRecorder request_seconds_;
};

}  // namespace paladin::server
