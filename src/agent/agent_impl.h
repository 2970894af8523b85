// The node agent's internals, one class whose methods live in files by concern:
//   agent.cc     the main loop: register, heartbeat, lease, command dispatch, results
//   gpus.cc      GPU discovery (NVML or emulated), faults, the GPU part of reports
//   launcher.cc  starting a workload (quota region, interposer, user, namespace, cgroup)
//   jobs.cc      the job table: reports, logs, exit detection, records, forgetting
//   commands.cc  the commands start, kill, resize, fault, checkpoint and restore
//   moves.cc     the move commands (migrate_in, migrate_out) and settling interrupted moves
//   adopt.cc     re-adopting the workloads a previous agent left running
//   lease.cc     the node's lease (renewed after each answered heartbeat, enforced by each
//                job's init) and freezing and thawing the jobs that have no init, as
//                lease_policy.h decides from the times the agent's clock (options' or the real
//                one) reads
//
// Threads: the main loop (RunAgent's caller) and one worker thread per long command
// (checkpoint, restore, migrate_in, migrate_out). mu_ guards the job table, the results and the
// command ids; a worker marks its job busy under mu_ and works on it without the lock, so a busy
// job is never erased, frozen or reaped by anyone else.
#ifndef PALADIN_AGENT_AGENT_IMPL_H_
#define PALADIN_AGENT_AGENT_IMPL_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lease_policy.h"
#include "paladin/agent/agent.h"
#include "paladin/api/client.h"
#include "paladin/api/wire.h"
#include "paladin/base/process.h"
#include "paladin/base/status.h"
#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/criu.h"
#include "paladin/ckpt/workload.h"
#include "paladin/gpu/nvml.h"
#include "paladin/quota/launch.h"
#include "paladin/quota/region.h"
#include "paladin/supervise/supervisor.h"
#include "uids.h"

namespace paladin::agent {

using Json = nlohmann::json;

// "paladin agent: LINE" on stderr.
void Say(const std::string& line);

// Removes what an old copy of a job leaves on this machine (`group`: its cgroup; `run_dir`: its
// run directory, unless another copy runs from it now) without waiting under the agent's lock:
// at once when no restore on this machine holds the places lock (base::CgroupsLock), else from
// a thread of its own once the restore is done. The agent's loop never waits for a restore
// (its heartbeats keep its lease).
void RemoveLeftPlaces(const ckpt::JobRecord& record, bool group, bool run_dir);

// The state letter of a process ('R', 'S', 'T', 'Z', ...; '\0' when there is none) and, when
// `parent` is not null, its parent's pid, from /proc/PID/stat.
char ProcState(pid_t pid, pid_t* parent);

// The size of the file at `path`; 0 when it cannot be read.
int64_t FileSize(const std::string& path);

// The restored copy's exit status goes to this agent (a subreaper) once CRIU lets go of it; a
// killed source's root, when it was our child, is reaped here.
void Reap(pid_t pid);

// A workload this agent runs (started, restored, received or adopted).
struct Workload {
  std::string id;
  int64_t epoch = 0;
  // DATA/agents/<node>/<id>-<epoch>: the agent's own record (agent.json, job.json), where no
  // job and no other agent writes.
  std::string agent_dir;
  ckpt::JobRecord record;   // record.run_dir is agent_dir for a started job
  uint64_t start_time = 0;  // of the root, so a reused pid is never taken for it
  int gpu_index = -1;
  std::string gpu_uuid;
  // Who its command runs as (-1: the agent's own user); held in the uid pool when pooled.
  int64_t uid = -1;
  int64_t gid = -1;
  bool pooled_uid = false;
  // The quota and ceiling the server gave it: the region is writable by the job, so what the
  // region says is checked against these and never believed above them.
  uint64_t quota_bytes = 0;
  uint64_t ceiling_bytes = 0;
  std::unique_ptr<quota::Region> region;
  std::unique_ptr<quota::QuotaGrower> grower;
  // kRunning or kExited: whether it is stopped or frozen is read when reported.
  api::CopyState state = api::CopyState::kRunning;
  std::optional<int> exit_code;
  int64_t out_offset = 0;  // log bytes the server has
  int64_t err_offset = 0;
  int64_t out_pending = 0;  // up to where the heartbeat in flight carries them
  int64_t err_pending = 0;
  bool busy = false;  // a worker is checkpointing or migrating it
  bool frozen = false;
  // Its paladin-workload-init holds this agent's lease and fences it: the agent never stops or
  // continues it itself (the init does, as the lease says).
  bool fenced = false;
  bool exit_reported = false;  // the report in flight says it exited: forget it once delivered
  // A copy received by a fleet move (this migration id) whose outcome this agent has not heard:
  // restored stopped, recorded before the source heard of it. Settled with the server once it
  // has answered a heartbeat (SettleInterruptedMoves): resumed if the move committed, else killed.
  int64_t incoming_migration = 0;
  // This copy's fleet move out (its migration id) is under way, or was when the agent stopped or
  // died: the dump leaves it stopped, and only the move's outcome says whether it runs again
  // (SettleInterruptedMoves: killed if the move committed, continued if not).
  int64_t outgoing_migration = 0;
  // A gang rank's own network (ckpt/rank_net.h): its namespace's name and the rank's address;
  // "" for a job on the node's network. Removed when the copy is forgotten.
  std::string rank_net;
  std::string rank_address;
};

struct Result {
  int64_t command = 0;
  Status status;
  Json detail = Json::object();
};

class Agent {
 public:
  Agent(AgentOptions options, const std::atomic<bool>* stop);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  int Run();

 private:
  // --- agent.cc ---
  Status Setup();
  bool Register();
  bool Heartbeat();
  void Dispatch(const Json& command);
  void AddResult(int64_t id, Status status, Json detail = Json::object());
  void SleepFor(double seconds);
  void RememberCommand(int64_t id);
  void LoadCommandIds();
  void StopWorkers(bool all);
  void RunOnWorker(void (Agent::*method)(const api::Command&), const api::Command& command);

  // --- gpus.cc ---
  Status DiscoverGpus();
  std::vector<api::RegisteredGpu> GpusForRegister() const;
  std::vector<api::GpuReport> GpusForHeartbeat() const;
  std::string GpuUuid(int index) const;
  int GpuIndex(const std::string& uuid) const;  // -1: not one of this agent's GPUs
  void ShareEmulatedState() const;
  void SweepControlDir() const;  // the files of exited processes in supervise::kHostControlDir
  // NVML health events (Xid, ECC) on a thread of their own; an event that makes a GPU unhealthy
  // marks it in faults_, which the next heartbeat reports.
  void StartHealthWatch();
  void StopHealthWatch();
  void WatchHealth();
  void OnHealthEvent(const gpu::HealthEvent& event);

  // --- launcher.cc ---
  // The emulated GPUs' shared state file of this agent (DATA/emu.state).
  std::string EmuStatePath() const { return data_dir_ + "/emu.state"; }
  Status ResolveUser();
  // Whether this node's workloads can be checkpointed (root, CRIU, and for workloads of another
  // user paladin-workload-init and CRIU's access to their resource limits); says why not.
  void DecideCheckpointable();
  StatusOr<std::unique_ptr<Workload>> Launch(const api::Command& c);
  // Launch's second half, once the job has its user: run directory, region, the process.
  Status LaunchAs(const api::Command& c, const quota::RegionSettings& settings, Workload* w);
  // The user a new job runs as: a uid of its own from the pool, or the shared --user.
  Status AssignUser(Workload* w);
  // Holds `uid` for a restored or received copy of job `w` (CRIU restores the image's uid).
  Status HoldUser(Workload* w, int64_t uid);
  // Gives the job's uid back to the pool. Needs nothing; the pool locks itself.
  void FreeUser(Workload* w);
  std::string UidHolder(const std::string& id, int64_t epoch) const;
  // What the supervisor needs to restore job `user.id` here: this node's placement, its emulated
  // GPUs' state file, and the uid held for it (the restored files become that uid's).
  supervise::RestoreSpec RestoreSpecFor(const Workload& user) const;
  // Moves the user held in `from` (a restore's placeholder) to the tracked job `to`.
  static void TakeUser(Workload* from, Workload* to);
  // Puts the region back to the server's quota and ceiling when the job raised them.
  void CheckRegion(Workload* w) const;

  // --- jobs.cc ---
  Workload* Find(const std::string& id, int64_t epoch);  // epoch < 0: any; needs mu_
  std::vector<api::JobReport> Reports(bool with_logs);   // takes mu_
  void Delivered();                                      // takes mu_
  void PollExits();                                      // takes mu_
  void Forget(const std::string& id, int64_t epoch, bool remove_run_dir);  // needs mu_
  void SaveRecord(const Workload& w) const;
  void StartGrower(Workload* w) const;
  static Status KillTree(Workload* w);

  // --- adopt.cc ---
  void Adopt();
  void AdoptUser(const Json& agent_json, Workload* w) const;  // uid, gid, quota from agent.json
  StatusOr<std::unique_ptr<Workload>> Track(const std::string& id, int64_t epoch,
                                            const ckpt::JobRecord& record, int gpu_index,
                                            const std::string& gpu_uuid);

  // --- commands.cc ---
  Status Start(const api::Command& c, Json* detail);
  Status Kill(const api::Command& c);
  Status Resize(const api::Command& c);
  Status Fault(const api::Command& c);
  void Checkpoint(const api::Command& c);
  void Restore(const api::Command& c);
  // Where a restored or received copy of `job` may be written (RestoreJob's placement).
  ckpt::RestorePlacement PlacementFor(const std::string& job) const;
  StatusOr<ckpt::Criu> ReadyCriu();
  // The patched CRIU post-copy moves need (ckpt::LazyCriu), looked for once.
  StatusOr<ckpt::Criu> ReadyLazyCriu();
  Workload* Claim(const api::Command& c, Status* why);  // marks the job busy; takes mu_
  // Claim, then CRIU made ready; on failure answers command c and returns null.
  Workload* ClaimForCriu(const api::Command& c, StatusOr<ckpt::Criu>* criu);
  void Release(Workload* w);  // takes mu_
  // Calls off the moves this agent waits to receive: of `job` at `epoch` (-1: any epoch; an
  // empty job: all of them). Takes mu_.
  void CallOffIncoming(const std::string& job, int64_t epoch);

  // --- moves.cc ---
  void MigrateIn(const api::Command& c);
  void MigrateOut(const api::Command& c);
  Status CommitMigration(int64_t migration);
  // POST /v1/migrations/{id}/abort: true when the server had committed the move.
  StatusOr<bool> ResolveMigration(int64_t migration);
  // Settles the copies that a previous agent died holding in the middle of a fleet move
  // (Workload::incoming_migration, outgoing_migration).
  void SettleInterruptedMoves();

  // --- local.cc ---
  Status StartLocal();
  void StopLocal();
  void ServeLocal();
  Json HandleLocal(const Json& request, uid_t uid, pid_t pid);
  Json SlurmRegister(const Json& r, uid_t uid, pid_t pid);
  Json SlurmStarted(const Json& r, uid_t uid, pid_t pid);
  Json SlurmDone(const Json& r, uid_t uid);
  Json SlurmCheckpoint(const Json& r, uid_t uid);
  Json SlurmResume(const Json& r, uid_t uid);
  Json SlurmSteps(int64_t job, uid_t uid);
  Json SlurmStepFor(const Json& r, uid_t uid);
  StatusOr<std::vector<std::string>> ClaimSlurmJob(int64_t job, uid_t uid);  // needs mu_
  // Whether a new local call from `uid` may start; counts it when it may (local_mu_).
  bool AdmitLocalCall(uid_t uid, std::string* why);
  void EndLocalCall(uid_t uid);
  // Quota bytes given out on a GPU: this agent's jobs and the SLURM steps. Needs mu_.
  uint64_t CommittedBytes(int gpu_index, int* jobs, int* steps) const;

  // --- lease.cc ---
  // Creates the record directory (root, 0700) and opens the lease file in it.
  Status OpenLease();
  // After an answered heartbeat that was sent at `sent_ns`: the inits' deadline moves to
  // sent_ns + lease_s (CLOCK_BOOTTIME).
  void RenewLease(uint64_t sent_ns);
  // The heartbeat answer's rank_routes: adds the host routes it lists that are missing or point
  // elsewhere, removes those it no longer lists; never touches the address of a rank here.
  // Heartbeat thread only.
  void ApplyRankRoutes(const Json& list);
  // A gang's coordinated checkpoint on this node (ckpt::FreezeJob, ThawJob): worker threads.
  void Freeze(const api::Command& c);
  void Thaw(const api::Command& c);
  // Removes rank network NAME unless a copy here still uses it (takes mu_).
  void DropRankNetUnlessUsed(const std::string& name);
  bool LeaseOut() const;  // the deadline in the lease file has passed (main loop)
  // Between answers: freezes the jobs once the server has been silent for the lease.
  void CheckLease();
  // Marks every job frozen (and stops those without an init) after `silent` seconds without the
  // server; says so (and counts as frozen itself) only when some job was, if `only_if_any`.
  void FreezeJobs(double silent, bool only_if_any);
  void Thaw();
  static void SignalTree(pid_t root, int signal);

  AgentOptions options_;
  const base::Clock& clock_;  // options_.clock, or the real one
  const std::atomic<bool>* stop_;
  std::string data_dir_;
  std::string runs_dir_;       // the default parent of workloads' run directories
  std::string workloads_dir_;  // workloads' run directories
  std::string records_dir_;    // DATA/agents/<node>: records and the lease, root only (0700)
  std::string lease_path_;     // records_dir_/lease
  int lease_fd_ = -1;          // open on it for the agent's life (-1: no fence)
  std::unique_ptr<api::Client> client_;

  // GPUs (set up before any thread starts; faults_ under gpu_mu_).
  quota::Libraries libs_;
  quota::DriverChoice driver_;
  std::unique_ptr<gpu::Nvml> nvml_;
  std::vector<gpu::GpuInfo> gpus_;
  mutable std::mutex gpu_mu_;
  std::map<int, std::string> faults_;
  // Health events handled so far (under gpu_mu_; health_cv_ signals each), and the watcher.
  uint64_t health_events_ = 0;
  std::condition_variable health_cv_;
  std::string health_watch_error_;  // why events are not watched ("" when they are)
  std::thread health_thread_;
  std::atomic<bool> health_stop_{false};

  // Who workloads run as (-1: the agent's own user) when they share one user (--user), or the
  // pool each job's own uid comes from.
  int64_t uid_ = -1;
  int64_t gid_ = -1;
  std::unique_ptr<UidPool> uid_pool_;
  bool checkpointable_ = false;  // DecideCheckpointable

  std::mutex criu_mu_;
  std::optional<StatusOr<ckpt::Criu>> criu_;
  std::optional<StatusOr<ckpt::Criu>> lazy_criu_;

  // Contact with the server (main loop only, but lease_s_ is read by workers).
  bool registered_ = false;
  std::atomic<double> lease_s_{6};
  double heartbeat_s_ = 1;
  // The last contact and the deadline the lease file holds, and what follows from them.
  LeasePolicy lease_;
  // The lease ran out and has not been renewed (set by the main loop, read by workers too).
  std::atomic<bool> frozen_{false};

  std::mutex mu_;
  std::map<std::pair<std::string, int64_t>, std::unique_ptr<Workload>> jobs_;
  std::map<std::string, std::string> rank_routes_;  // address -> next hop; heartbeat thread
  std::deque<Result> results_;
  // Moves being received (job, epoch) -> their cancel flag (migrate::DestinationOptions::cancel).
  std::map<std::pair<std::string, int64_t>, std::shared_ptr<std::atomic<bool>>> incoming_;
  size_t results_in_flight_ = 0;
  std::set<int64_t> seen_commands_;
  std::deque<int64_t> seen_order_;
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Worker> workers_;  // main loop only

  // The local socket (local.cc) and the SLURM steps registered through it (under mu_).
  struct SlurmStep {
    int64_t job = 0;
    std::string step;  // "batch" or the step number
    uid_t uid = 0;     // who registered it
    pid_t shim_pid = 0;
    base::ProcessId shim_id;  // the shim as it was at `register`
    uint64_t gpu_mem = 0;
    int gpu_index = -1;
    std::string gpu_uuid;
    std::string checkpoint_dir;
    std::string image;        // the checkpoint offered at registration ("" for a fresh start)
    ckpt::JobRecord record;   // once it runs (record.pid > 0)
    base::ProcessId root_id;  // record.pid as it was at `started`
    bool busy = false;        // being checkpointed
    bool stopped = false;     // checkpointed and left stopped
  };
  std::map<std::string, SlurmStep> slurm_;  // "JOB.STEP" -> step
  // Refuses unless the step's shim and workload are the very processes recorded at `register`
  // and `started` (same pid and start time, same PID namespace): a pid the kernel gave to
  // another process since is never checkpointed, stopped or continued in the step's name.
  static Status CheckSlurmStep(const std::string& key, const SlurmStep& s);
  std::string local_socket_;
  std::string slurm_dir_;
  int local_fd_ = -1;
  std::thread local_thread_;
  std::atomic<bool> local_stop_{false};
  std::atomic<int> local_calls_{0};
  // Calls in progress per peer uid (under local_mu_), bounded so that idle connections cannot
  // exhaust the agent's threads (docs/agent.md, "The local socket").
  std::mutex local_mu_;
  std::map<uid_t, int> local_by_uid_;
  int local_unprivileged_ = 0;  // calls of uids other than root's
};

}  // namespace paladin::agent

#endif  // PALADIN_AGENT_AGENT_IMPL_H_
