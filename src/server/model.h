// The control plane's records (jobs, nodes, teams, commands, migrations) and their JSON forms:
// the API's (docs/formats/api.md) and the store's (a superset, so a restart loses nothing).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "job_state.h"
#include "migration_steps.h"
#include "paladin/api/wire.h"

namespace paladin::server {

using Json = nlohmann::json;

inline constexpr int64_t kMiB = int64_t{1024} * 1024;
inline constexpr int64_t kGiB = 1024 * kMiB;

struct CheckpointRef {
  std::string path;
  double at = 0;
  int64_t bytes = 0;
};

struct TeamUsage {
  double gpu_seconds = 0;
  double mem_alloc_byte_seconds = 0;  // quota x time
  double mem_used_byte_seconds = 0;   // used x time
  double queue_seconds = 0;
  int64_t jobs = 0;
};

// Where a rank is in its gang's coordinated checkpoint.
// kThawPending: the cut was given up while this rank's freeze or dump was under way; it is thawed
// once that step answers (the agent runs one step of a rank at a time).
enum class CutPhase : uint8_t {
  kNone,
  kFreezing,
  kFrozen,
  kDumping,
  kDumped,
  kThawing,
  kThawPending,
  kMoving  // the moving rank of a gang move: killed by its dump, being restored on its new node
};

// A job that is one rank of a gang (docs/server.md, "Gangs"): each rank is a job of its own;
// these fields tie it to the others.
struct GangMember {
  std::string gang;        // the gang's id: the job id of its rank 0
  int rank = 0;            // RANK
  int ranks = 0;           // WORLD_SIZE
  int ranks_per_node = 1;  // at most this many of the gang's ranks on one node
  int port = 0;            // MASTER_PORT, on rank 0's address
  std::string address;     // the rank's own IPv4 address in the server's rank subnet; stable
  // The gang's coordinated checkpoints: the generation this rank's last_checkpoint belongs to
  // (every rank's image of one generation is one cut), and the one being taken (0: none).
  int generation = 0;
  int cut_in_flight = 0;
  // The cut under way (kept in the store with it): this rank's step, whether the gang stops
  // after it, and this rank's image once dumped.
  CutPhase cut_phase = CutPhase::kNone;
  bool cut_stop = false;
  std::string cut_path;
  int64_t cut_bytes = 0;
  // A copy of this rank being killed (its gang recovers elsewhere): the kill's command id and
  // its node. The gang is not placed again until the kill is answered or that node is dead.
  int64_t stopping_command = 0;
  std::string stopping_node;
  // A move of this one rank under way (docs/server.md, "Gangs"): the node it goes to, and the
  // node it left, which the other nodes still route its address to until its restore is
  // reported. Empty when it does not move.
  std::string move_to;
  std::string move_from;
};

struct JobRecord {
  int64_t seq = 0;
  std::string id;
  std::string name;
  std::string team;
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  int priority = 0;
  int gpus = 1;
  bool mem_auto = false;
  int64_t mem_request = 0;  // bytes, when not auto
  int64_t mem_max = 0;      // 0 = the GPU's memory
  int64_t quota_bytes = 0;
  int64_t ceiling_bytes = 0;
  int64_t predicted_bytes = 0;
  int64_t used_bytes = 0;
  int64_t peak_used_bytes = 0;
  std::string reason;
  std::string node;
  int gpu = -1;
  std::vector<int> gpu_indices;
  std::string gpu_uuid;
  int64_t epoch = 0;
  double submitted_at = 0;
  std::optional<double> started_at;
  std::optional<double> ended_at;
  std::optional<int> exit_code;
  int restarts = 0;
  // When a restore from its checkpoint fails: "stop" leaves it checkpointed (resumable, with the
  // reason), "restart" starts it over from the beginning (a `started_over` event). Never silent.
  std::string on_restore_failure = "stop";
  int migrations = 0;
  int recoveries = 0;
  int checkpoints = 0;
  int checkpoint_seq = 0;
  std::optional<CheckpointRef> last_checkpoint;
  int64_t migration_id = 0;  // the migration under way, 0 when none
  int64_t quota_grows = 0;
  int64_t refusals = 0;
  std::string prediction;  // why predicted_bytes is what it is
  bool cancel_requested = false;
  bool recovering = false;  // restoring after its node died: `recovered` when it runs again
  bool preempted = false;   // checkpointed to make room; resumes when room returns
  bool mismatch = false;    // its stdout had a line starting with MISMATCH
  bool at_line_start = true;
  // Accounting.
  double pending_since = 0;
  double accounted_at = 0;  // usage is accrued up to here while it holds a GPU
  double gpu_seconds = 0;
  double last_sample_at = 0;
  double last_checkpoint_cmd_at = 0;
  bool checkpoint_in_flight = false;  // a periodic checkpoint not yet answered (not stored)
  // Control::Changes() when preempting for this job last found nothing to do (not stored): until
  // something changes, trying again would find the same.
  std::optional<uint64_t> preempt_futile_at;
  std::optional<GangMember> gang;  // set for the ranks of a gang

  JobState state() const { return state_; }
  std::string StateName() const { return std::string(JobStateName(state_)); }
  // The only way a job changes state: along the graph in job_state.h. An illegal transition is a
  // bug in the control plane: it asserts (debug builds), or leaves the state as it was and says
  // so on stderr, and returns false.
  bool MoveTo(JobState to);
  // The state read back from the store (no transition).
  void LoadState(JobState state) { state_ = state; }

  bool Terminal() const { return IsTerminal(state_); }
  // Whether it holds GPU room on its node.
  bool HoldsGpu() const {
    return state_ == JobState::kStarting || state_ == JobState::kRunning ||
           state_ == JobState::kMigrating || state_ == JobState::kCheckpointing ||
           (state_ == JobState::kRestoring && !node.empty());
  }
  // team + basename of command[0]: jobs of one class share a memory history.
  std::string ClassKey() const;

 private:
  JobState state_ = JobState::kPending;
};

struct GpuRecord {
  int index = 0;
  std::string uuid;
  std::string model;
  int64_t memory_bytes = 0;
  bool emulated = false;
  bool healthy = true;
  std::string fault;
  int64_t used_bytes = 0;
};

// Why a job on a node whose agent runs workloads unprivileged can be neither checkpointed nor
// moved.
inline constexpr std::string_view kNotCheckpointable =
    "its node runs workloads as an unprivileged user, which CRIU cannot checkpoint here (start "
    "that agent with --user root --allow-root; docs/agent.md)";

// A node as the server sees it: alive (heartbeating), draining (alive, its jobs moving off),
// dead (silent for a lease). The API's and the store's names are NodeStateName's.
enum class NodeState : uint8_t { kAlive, kDraining, kDead };
std::string_view NodeStateName(NodeState s);
// A name read back from the store; an unknown one is alive (the next lease check decides).
NodeState ParseNodeState(std::string_view name);

struct NodeRecord {
  std::string name;
  NodeState state = NodeState::kAlive;
  std::string address;
  int migrate_port = 0;
  double last_heartbeat = 0;
  double dead_since = 0;
  bool draining = false;
  bool recovered = false;      // its jobs were placed elsewhere after it died
  bool checkpointable = true;  // false: its workloads run unprivileged, CRIU cannot dump them
  bool post_copy = false;      // its agent has the patched CRIU post-copy moves need
  bool stream = false;  // its agent moves pre-copy by streaming (sends and takes a page stream)
  std::vector<GpuRecord> gpus;

  const GpuRecord* Gpu(int index) const {
    for (const auto& g : gpus) {
      if (g.index == index) return &g;
    }
    return nullptr;
  }
};

struct TeamRecord {
  std::string name;
  int64_t max_gpus = 0;     // 0 = no limit
  int64_t max_gpu_mem = 0;  // bytes; 0 = no limit
  int priority = 0;
  TeamUsage usage;
};

struct CommandRecord {  // NOLINT(bugprone-exception-escape): Json's members
  int64_t id = 0;
  std::string node;
  std::string job;
  api::Command command;  // as sent (api::ToJson)
  double created_at = 0;
  double sent_at = 0;
  bool acked = false;
  bool ok = false;
  Json result;
};

struct MigrationRecord {
  int64_t id = 0;
  std::string job;
  std::string from_node;
  int from_gpu = 0;
  std::string to_node;
  int to_gpu = 0;
  std::string to_uuid;
  MigrationStep step = MigrationStep::kReserved;  // migration_steps.h
  std::optional<bool> commit_answer;
  std::string token;
  int port = 0;
  int64_t in_command = 0;
  int64_t out_command = 0;
  int64_t new_epoch = 0;
  double created_at = 0;
  double ended_at = 0;
  std::string error;
  std::string why;  // "operator", "drain", "rebalance", "gpu unhealthy"
  // How the memory moves: what the server asked for and why, then what the source did (it
  // falls back to pre-copy for a job holding GPU state) and how long the job was stopped.
  api::MoveMode move_mode = api::MoveMode::kPreCopy;
  bool stream = false;  // a pre-copy move streams (api::Command::stream)
  // What the server asked for: "post-copy", "stream" or "pre-copy" (by image).
  const char* AskedModeName() const {
    return move_mode == api::MoveMode::kPreCopy && stream ? "stream" : api::MoveModeName(move_mode);
  }
  std::string move_mode_why;
  std::string mode_used;  // "" until the source reports
  std::optional<double> pause_s;
  double in_delivered_at = 0;  // when migrate_in reached the destination (not stored)
  // The move's pause: expected when it started (MoveCostModel: its basis, e.g. "node pair, 3
  // moves"), measured by the source when it ended (0 until then), for the GPU bytes it moved.
  double expected_pause_s = 0;
  std::string expected_basis;
  int64_t moved_bytes = 0;

  bool Finished() const { return step == MigrationStep::kDone || step == MigrationStep::kFailed; }
  std::string StepName() const { return std::string(MigrationStepName(step)); }
};

// API and store forms.
Json JobToApi(const JobRecord& j);
// The API's "gang" of a job: null, or its rank, the gang's size, its address...
Json GangToApi(const JobRecord& j);
// JobToApi(j), with "migration" set to `migration`, written straight to text: the same JSON
// (keys in the same order) at a fraction of the cost, for long job lists.
void AppendJobApiText(const JobRecord& j, const Json& migration, std::string* out);
Json JobToDoc(const JobRecord& j);
JobRecord JobFromDoc(const Json& doc);
Json NodeDoc(const NodeRecord& n);
NodeRecord NodeFromDoc(const Json& doc);
Json MigrationDoc(const MigrationRecord& m);
MigrationRecord MigrationFromDoc(const Json& doc);
Json TeamUsageToApi(const TeamUsage& u);
Json TeamUsageDoc(const TeamUsage& u);
TeamUsage TeamUsageFromDoc(const Json& doc);

}  // namespace paladin::server
