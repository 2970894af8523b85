// The node agent's internals, one class whose methods live in files by concern:
//   agent.cc     the main loop: register, heartbeat, lease, command dispatch, results
//   gpus.cc      GPU discovery (NVML or emulated), faults, the GPU part of reports
//   launcher.cc  starting a workload (quota region, interposer, user, namespace, cgroup)
//   jobs.cc      the job table: reports, logs, exit detection, records, forgetting
//   commands.cc  the commands (start, kill, resize, checkpoint, restore, migrate_*, fault)
//   adopt.cc     re-adopting the workloads a previous agent left running
//   lease.cc     freezing workloads when the server is out of reach, thawing them after
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

#include "paladin/agent/agent.h"
#include "paladin/api/client.h"
#include "paladin/base/status.h"
#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/criu.h"
#include "paladin/ckpt/workload.h"
#include "paladin/gpu/nvml.h"
#include "paladin/quota/launch.h"
#include "paladin/quota/region.h"

namespace paladin::agent {

using Json = nlohmann::json;

// "paladin agent: LINE" on stderr.
void Say(const std::string& line);

// The state letter of a process ('R', 'S', 'T', 'Z', ...; '\0' when there is none) and, when
// `parent` is not null, its parent's pid, from /proc/PID/stat.
char ProcState(pid_t pid, pid_t* parent);

// A workload this agent runs (started, restored, received or adopted).
struct Workload {
  std::string id;
  int64_t epoch = 0;
  std::string agent_dir;    // DATA/runs/<id>-<epoch>: the agent's record (agent.json)
  ckpt::JobRecord record;   // record.run_dir is agent_dir for a started job
  uint64_t start_time = 0;  // of the root, so a reused pid is never taken for it
  int gpu_index = -1;
  std::string gpu_uuid;
  std::unique_ptr<quota::Region> region;
  std::unique_ptr<quota::QuotaGrower> grower;
  std::string state = "running";  // running | exited | stopped | frozen
  std::optional<int> exit_code;
  int64_t out_offset = 0;  // log bytes the server has
  int64_t err_offset = 0;
  int64_t out_pending = 0;  // up to where the heartbeat in flight carries them
  int64_t err_pending = 0;
  bool busy = false;  // a worker is checkpointing or migrating it
  bool frozen = false;
  bool exit_reported = false;  // the report in flight says it exited: forget it once delivered
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
  void RunOnWorker(void (Agent::*method)(int64_t, Json), int64_t id, const Json& command);

  // --- gpus.cc ---
  Status DiscoverGpus();
  Json GpusForRegister() const;
  Json GpusForHeartbeat() const;
  std::string GpuUuid(int index) const;
  int GpuIndex(const std::string& uuid) const;  // -1: not one of this agent's GPUs
  void ShareEmulatedState() const;
  void SweepControlDir() const;  // the files of exited processes in kHostControlDir
  // NVML health events (Xid, ECC) on a thread of their own; an event that makes a GPU unhealthy
  // marks it in faults_, which the next heartbeat reports.
  void StartHealthWatch();
  void StopHealthWatch();
  void WatchHealth();
  void OnHealthEvent(const gpu::HealthEvent& event);

  // --- launcher.cc ---
  Status ResolveUser();
  // Whether this node's workloads can be checkpointed (root, CRIU, and for workloads of another
  // user paladin-workload-init and CRIU's access to their resource limits); says why not.
  void DecideCheckpointable();
  StatusOr<std::unique_ptr<Workload>> Launch(const Json& command);
  void GiveToUser(const std::string& path) const;

  // --- jobs.cc ---
  Workload* Find(const std::string& id, int64_t epoch);  // epoch < 0: any; needs mu_
  Json Reports(bool with_logs);                          // takes mu_
  void Delivered();                                      // takes mu_
  void PollExits();                                      // takes mu_
  void Forget(const std::string& id, int64_t epoch, bool remove_run_dir);  // needs mu_
  void SaveRecord(const Workload& w) const;
  void StartGrower(Workload* w) const;
  static Status KillTree(Workload* w);

  // --- adopt.cc ---
  void Adopt();
  StatusOr<std::unique_ptr<Workload>> Track(const std::string& id, int64_t epoch,
                                            const ckpt::JobRecord& record, int gpu_index,
                                            const std::string& gpu_uuid);

  // --- commands.cc ---
  Status Start(const Json& c, Json* detail);
  Status Kill(const Json& c);
  Status Resize(const Json& c);
  Status Fault(const Json& c);
  void Checkpoint(int64_t id, Json c);
  void Restore(int64_t id, Json c);
  // Where a restored or received copy of `job` may be written (RestoreJob's placement).
  ckpt::RestorePlacement PlacementFor(const std::string& job) const;
  void MigrateIn(int64_t id, Json c);
  void MigrateOut(int64_t id, Json c);
  StatusOr<ckpt::Criu> ReadyCriu();
  Status CommitMigration(int64_t migration);
  // POST /v1/migrations/{id}/abort: true when the server had committed the move.
  StatusOr<bool> ResolveMigration(int64_t migration);
  Workload* Claim(const Json& c, Status* why);  // marks the job busy; takes mu_
  // Claim, then CRIU made ready; on failure answers command `id` and returns null.
  Workload* ClaimForCriu(int64_t id, const Json& c, StatusOr<ckpt::Criu>* criu);
  void Release(Workload* w);  // takes mu_
  // Calls off the moves this agent waits to receive: of `job` at `epoch` (-1: any epoch; an
  // empty job: all of them). Takes mu_.
  void CallOffIncoming(const std::string& job, int64_t epoch);

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
  // Quota bytes given out on a GPU: this agent's jobs and the SLURM steps. Needs mu_.
  uint64_t CommittedBytes(int gpu_index, int* jobs, int* steps) const;

  // --- lease.cc ---
  void CheckLease();
  void Thaw();
  static void SignalTree(pid_t root, int signal);

  AgentOptions options_;
  const std::atomic<bool>* stop_;
  std::string data_dir_;
  std::string runs_dir_;       // the agent's own records (agent.json per job)
  std::string workloads_dir_;  // workloads' run directories
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

  // Who workloads run as (-1: the agent's own user).
  int64_t uid_ = -1;
  int64_t gid_ = -1;
  bool checkpointable_ = false;  // DecideCheckpointable

  std::mutex criu_mu_;
  std::optional<StatusOr<ckpt::Criu>> criu_;

  // Contact with the server (main loop only, but lease_s_ is read by workers).
  bool registered_ = false;
  std::atomic<double> lease_s_{6};
  double heartbeat_s_ = 1;
  std::chrono::steady_clock::time_point last_contact_;
  // The lease ran out and has not been renewed (set by the main loop, read by workers too).
  std::atomic<bool> frozen_{false};

  std::mutex mu_;
  std::map<std::pair<std::string, int64_t>, std::unique_ptr<Workload>> jobs_;
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
    uint64_t gpu_mem = 0;
    int gpu_index = -1;
    std::string gpu_uuid;
    std::string checkpoint_dir;
    std::string image;       // the checkpoint offered at registration ("" for a fresh start)
    ckpt::JobRecord record;  // once it runs (record.pid > 0)
    bool busy = false;       // being checkpointed
    bool stopped = false;    // checkpointed and left stopped
  };
  std::map<std::string, SlurmStep> slurm_;  // "JOB.STEP" -> step
  std::string local_socket_;
  std::string slurm_dir_;
  int local_fd_ = -1;
  std::thread local_thread_;
  std::atomic<bool> local_stop_{false};
  std::atomic<int> local_calls_{0};
};

}  // namespace paladin::agent

#endif  // PALADIN_AGENT_AGENT_IMPL_H_
