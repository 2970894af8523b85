// What a node agent tells the server when it registers and in its heartbeat, as types both sides
// use: the agent encodes with ToJson, the server decodes once with DecodeRegistration /
// DecodeHeartbeat, whose errors name the list, the field and what is wrong (docs/formats/api.md,
// "Agents"); and what the server answers it with: the lease and the beat (RegisterAnswer,
// HeartbeatAnswer, read back with ReadAgentAnswer), and commands, which the server encodes with
// ToJson and the agent decodes once with DecodeCommand. No other file spells these keys.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "paladin/base/status.h"

namespace paladin::api {

// The keys of the JSON objects Paladin's programs exchange, each spelled here once: the agent's
// registration, heartbeat, commands and their results (below); the REST API's objects, which the
// server writes and the CLI, the agents and the Kubernetes scheduler read (docs/formats/api.md:
// a job, a node, a move, a pod, a team, a token, an event); the client's config file; and the
// requests and answers on the agent's local socket (SLURM steps, docs/slurm.md). A key that
// several objects share ("id", "name", "state") is one constant. Elsewhere code writes
// `j[key::kQuotaBytes]`, `j.value(key::kState, "")`. A format one file keeps to itself (the
// server's store beyond the API's fields, the agent's job record beyond the job's, a checkpoint
// image) or another system's (a Kubernetes object) spells its own keys.
namespace key {
inline constexpr char kAddress[] = "address";
inline constexpr char kAllocatedBytes[] = "allocated_bytes";
inline constexpr char kAskedBy[] = "asked_by";
inline constexpr char kAt[] = "at";
inline constexpr char kByPhase[] = "by_phase";
inline constexpr char kBytes[] = "bytes";
inline constexpr char kCaFile[] = "ca_file";
inline constexpr char kCeilingBytes[] = "ceiling_bytes";
inline constexpr char kCheckpointDir[] = "checkpoint_dir";
inline constexpr char kCheckpointStore[] = "checkpoint_store";
inline constexpr char kCheckpointable[] = "checkpointable";
inline constexpr char kCheckpoints[] = "checkpoints";
inline constexpr char kClass[] = "class";
inline constexpr char kCluster[] = "cluster";
inline constexpr char kClusters[] = "clusters";
inline constexpr char kCode[] = "code";
inline constexpr char kCommand[] = "command";
inline constexpr char kCommands[] = "commands";
inline constexpr char kCommit[] = "commit";
inline constexpr char kComputeShare[] = "compute_share";
inline constexpr char kCreatedAt[] = "created_at";
inline constexpr char kDetail[] = "detail";
inline constexpr char kDir[] = "dir";
inline constexpr char kDrain[] = "drain";
inline constexpr char kEmuState[] = "emu_state";
inline constexpr char kEmulated[] = "emulated";
inline constexpr char kEmulatedGpus[] = "emulated_gpus";
inline constexpr char kEndedAt[] = "ended_at";
inline constexpr char kEnv[] = "env";
inline constexpr char kEpoch[] = "epoch";
inline constexpr char kError[] = "error";
inline constexpr char kEvents[] = "events";
inline constexpr char kExitCode[] = "exit_code";
inline constexpr char kExpectedBasis[] = "expected_basis";
inline constexpr char kExpectedPauseS[] = "expected_pause_s";
inline constexpr char kFault[] = "fault";
inline constexpr char kFaultKind[] = "fault_kind";
inline constexpr char kFleet[] = "fleet";
inline constexpr char kFrom[] = "from";
inline constexpr char kFromGpu[] = "from_gpu";
inline constexpr char kFromGpuUuid[] = "from_gpu_uuid";
inline constexpr char kFromNode[] = "from_node";
inline constexpr char kGang[] = "gang";
inline constexpr char kGangJobs[] = "gang_jobs";
inline constexpr char kGeneration[] = "generation";
inline constexpr char kGpu[] = "gpu";
inline constexpr char kGpuBytes[] = "gpu_bytes";
inline constexpr char kGpuHours[] = "gpu_hours";
inline constexpr char kGpuIndex[] = "gpu_index";
inline constexpr char kGpuIndices[] = "gpu_indices";
inline constexpr char kGpuMap[] = "gpu_map";
inline constexpr char kGpuMem[] = "gpu_mem";
inline constexpr char kGpuMemBytes[] = "gpu_mem_bytes";
inline constexpr char kGpuMemHoursAllocated[] = "gpu_mem_hours_allocated";
inline constexpr char kGpuMemHoursUsed[] = "gpu_mem_hours_used";
inline constexpr char kGpuMemInUse[] = "gpu_mem_in_use";
inline constexpr char kGpuMemMax[] = "gpu_mem_max";
inline constexpr char kGpuMemRequest[] = "gpu_mem_request";
inline constexpr char kGpuMemoryBytes[] = "gpu_memory_bytes";
inline constexpr char kGpuUuid[] = "gpu_uuid";
inline constexpr char kGpus[] = "gpus";
inline constexpr char kGpusInUse[] = "gpus_in_use";
inline constexpr char kHealthy[] = "healthy";
inline constexpr char kHeartbeatS[] = "heartbeat_s";
inline constexpr char kHostBytes[] = "host_bytes";
inline constexpr char kId[] = "id";
inline constexpr char kImage[] = "image";
inline constexpr char kIndex[] = "index";
inline constexpr char kInterface[] = "interface";
inline constexpr char kJob[] = "job";
inline constexpr char kJobs[] = "jobs";
inline constexpr char kJobsBytes[] = "jobs_bytes";
inline constexpr char kJobsEnded[] = "jobs_ended";
inline constexpr char kJobsLost[] = "jobs_lost";
inline constexpr char kJobsPending[] = "jobs_pending";
inline constexpr char kJobsRunning[] = "jobs_running";
inline constexpr char kJobsSubmitted[] = "jobs_submitted";
inline constexpr char kKey[] = "key";
inline constexpr char kKind[] = "kind";
inline constexpr char kLastCheckpoint[] = "last_checkpoint";
inline constexpr char kLastHeartbeat[] = "last_heartbeat";
inline constexpr char kLastMove[] = "last_move";
inline constexpr char kLeaseS[] = "lease_s";
inline constexpr char kLeave[] = "leave";
inline constexpr char kLeft[] = "left";
inline constexpr char kMaxGpuMem[] = "max_gpu_mem";
inline constexpr char kMaxGpuMemBytes[] = "max_gpu_mem_bytes";
inline constexpr char kMaxGpus[] = "max_gpus";
inline constexpr char kMeanSlack[] = "mean_slack";
inline constexpr char kMemoryBytes[] = "memory_bytes";
inline constexpr char kMessage[] = "message";
inline constexpr char kMigratable[] = "migratable";
inline constexpr char kMigratePort[] = "migrate_port";
inline constexpr char kMigration[] = "migration";
inline constexpr char kMigrations[] = "migrations";
inline constexpr char kMigrationsFailed[] = "migrations_failed";
inline constexpr char kMode[] = "mode";
inline constexpr char kModeWhy[] = "mode_why";
inline constexpr char kModel[] = "model";
inline constexpr char kMove[] = "move";
inline constexpr char kMoveMode[] = "move_mode";
inline constexpr char kMover[] = "mover";
inline constexpr char kMoves[] = "moves";
inline constexpr char kMovingTo[] = "moving_to";
inline constexpr char kName[] = "name";
inline constexpr char kNamespace[] = "namespace";
inline constexpr char kNewName[] = "new_name";
inline constexpr char kNode[] = "node";
inline constexpr char kNodes[] = "nodes";
inline constexpr char kNodesAlive[] = "nodes_alive";
inline constexpr char kOk[] = "ok";
inline constexpr char kOnRestoreFailure[] = "on_restore_failure";
inline constexpr char kOp[] = "op";
inline constexpr char kPath[] = "path";
inline constexpr char kPauseS[] = "pause_s";
inline constexpr char kPausedMs[] = "paused_ms";
inline constexpr char kPhase[] = "phase";
inline constexpr char kPid[] = "pid";
inline constexpr char kPlacement[] = "placement";
inline constexpr char kPods[] = "pods";
inline constexpr char kPodsBytes[] = "pods_bytes";
inline constexpr char kPort[] = "port";
inline constexpr char kPostCopy[] = "post_copy";
inline constexpr char kPredictedBytes[] = "predicted_bytes";
inline constexpr char kPrediction[] = "prediction";
inline constexpr char kPredictionCheck[] = "prediction_check";
inline constexpr char kPriority[] = "priority";
inline constexpr char kQueueSeconds[] = "queue_seconds";
inline constexpr char kQuotaBytes[] = "quota_bytes";
inline constexpr char kQuotaGrows[] = "quota_grows";
inline constexpr char kRank[] = "rank";
inline constexpr char kRankNet[] = "rank_net";
inline constexpr char kRankPort[] = "rank_port";
inline constexpr char kRankRoutes[] = "rank_routes";
inline constexpr char kRanks[] = "ranks";
inline constexpr char kRanksPerNode[] = "ranks_per_node";
inline constexpr char kReason[] = "reason";
inline constexpr char kRecoveries[] = "recoveries";
inline constexpr char kRefusals[] = "refusals";
inline constexpr char kReportedSAgo[] = "reported_s_ago";
inline constexpr char kRequestedAt[] = "requested_at";
inline constexpr char kRestartCount[] = "restart_count";
inline constexpr char kRestarts[] = "restarts";
inline constexpr char kResults[] = "results";
inline constexpr char kRunDir[] = "run_dir";
inline constexpr char kScope[] = "scope";
inline constexpr char kSeconds[] = "seconds";
inline constexpr char kStartedAt[] = "started_at";
inline constexpr char kState[] = "state";
inline constexpr char kStateVerificationsFailed[] = "state_verifications_failed";
inline constexpr char kStderr[] = "stderr";
inline constexpr char kStderrFrom[] = "stderr_from";
inline constexpr char kStderrTo[] = "stderr_to";
inline constexpr char kStdout[] = "stdout";
inline constexpr char kStdoutFrom[] = "stdout_from";
inline constexpr char kStdoutTo[] = "stdout_to";
inline constexpr char kStep[] = "step";
inline constexpr char kSteps[] = "steps";
inline constexpr char kStream[] = "stream";
inline constexpr char kSubmittedAt[] = "submitted_at";
inline constexpr char kT[] = "t";
inline constexpr char kTakenAt[] = "taken_at";
inline constexpr char kTargetUnderRate[] = "target_under_rate";
inline constexpr char kTeam[] = "team";
inline constexpr char kTeams[] = "teams";
inline constexpr char kText[] = "text";
inline constexpr char kTo[] = "to";
inline constexpr char kToAddress[] = "to_address";
inline constexpr char kToGpu[] = "to_gpu";
inline constexpr char kToGpuUuid[] = "to_gpu_uuid";
inline constexpr char kToNode[] = "to_node";
inline constexpr char kToPort[] = "to_port";
inline constexpr char kToken[] = "token";
inline constexpr char kTokens[] = "tokens";
inline constexpr char kUid[] = "uid";
inline constexpr char kUnder[] = "under";
inline constexpr char kUnderRate[] = "under_rate";
inline constexpr char kUrl[] = "url";
inline constexpr char kUsage[] = "usage";
inline constexpr char kUsedBytes[] = "used_bytes";
inline constexpr char kUuid[] = "uuid";
inline constexpr char kVia[] = "via";
inline constexpr char kWhy[] = "why";
inline constexpr char kWhyNotMigratable[] = "why_not_migratable";
inline constexpr char kWindowS[] = "window_s";
inline constexpr char kWindows[] = "windows";
}  // namespace key

// What a job copy on a node is doing, as its agent sees it: its processes run, are stopped
// (SIGSTOP, or under CRIU), are frozen (fenced: the agent lost its lease), or have ended.
enum class CopyState { kRunning, kStopped, kFrozen, kExited };
// The state's name on the wire ("running", "stopped", "frozen", "exited"), and back.
const char* CopyStateName(CopyState state);
std::optional<CopyState> CopyStateNamed(const std::string& name);

// A job copy on the node, as the agent sees it.
struct JobReport {
  std::string id;     // the server's job id (its syntax is the server's to check)
  int64_t epoch = 0;  // which copy: a copy of an older epoch is stale
  CopyState state = CopyState::kRunning;
  int64_t pid = 0;
  std::optional<int64_t> used_bytes;  // GPU memory in use; absent: unknown (the last figure stands)
  int64_t quota_bytes = 0;            // 0: no quota region
  int64_t quota_grows = 0;
  int64_t refusals = 0;
  std::optional<int> exit_code;  // when exited with a code
  std::string stdout_text;       // log text since the last delivered beat
  std::string stderr_text;
  // Where each text lies in the copy's log file, bytes [from, to); -1 when not said. An agent
  // killed after a beat was delivered but before it noted so sends the same bytes again once
  // restarted: with these the server keeps only what it does not have yet.
  int64_t stdout_from = -1, stdout_to = -1;
  int64_t stderr_from = -1, stderr_to = -1;
};

struct GpuReport {
  int index = 0;
  int64_t used_bytes = 0;
  bool healthy = true;
  std::string fault;  // "" when none
};

// The outcome of a command the server sent.
struct CommandResult {
  int64_t command = 0;
  bool ok = false;
  std::string error;
  nlohmann::json detail = nlohmann::json::object();
};

struct Heartbeat {
  std::vector<GpuReport> gpus;
  std::vector<JobReport> jobs;
  std::vector<CommandResult> results;
};

// A GPU as its agent registers it.
struct RegisteredGpu {
  int index = 0;
  int64_t memory_bytes = 0;
  std::string uuid;
  std::string model;  // "" when unknown
  bool emulated = false;
  bool healthy = true;
};

// An agent's registration (POST /v1/agents/register): the node's name, where its migration port
// listens, what its CRIU can do, its GPUs, and the job copies it already has (after a restart).
struct Registration {
  std::string name;
  std::string address;
  int migrate_port = 0;        // 0: none
  bool checkpointable = true;  // false: its workloads run unprivileged, CRIU cannot dump them
  bool post_copy = false;      // it has the patched CRIU post-copy moves need
  bool stream = false;         // it moves pre-copy by streaming
  std::vector<RegisteredGpu> gpus;
  std::vector<JobReport> jobs;
};

enum class CommandKind {
  kStart,       // launch the job
  kRestore,     // restore it from an image the server holds
  kCheckpoint,  // dump it into dir, and keep it running or stop it (mode)
  kKill,        // end its copies here (of one epoch, or all)
  kResize,      // change its quota and ceiling
  kFault,       // post a GPU fault event on an emulated GPU (no job)
  kMigrateIn,   // receive it from another node
  kMigrateOut,  // send it to another node
  kFreeze,      // a gang's coordinated checkpoint, step 1: freeze the copy (its cgroup)
  kThaw,        // ... step 3: thaw it (after every rank was dumped, or the cut was given up)
};

// A gang rank's own network (docs/server.md, "Gangs"): the agent starts (or restores) the rank in
// a network namespace of its own whose interface `interface` has `address` (IPv4, /32), reached
// from the host over a veth pair; every other rank of the gang is reached through the routes
// the heartbeat answers carry.
struct RankNet {
  std::string address;             // dotted IPv4
  std::string interface = "pal0";  // the interface's name inside the namespace (GLOO_SOCKET_IFNAME)
};

// A route the agent keeps on its host while a rank of a gang runs there: `address`/32 via the
// node `via` (the address that node registered). The heartbeat answer's "rank_routes" is the
// whole list for the node: the agent adds what is missing and removes what is no longer there.
struct RankRoute {
  std::string address;
  std::string via;
  bool operator==(const RankRoute&) const = default;
};
nlohmann::json ToJson(const std::vector<RankRoute>& routes);
// Errors name the field: "rank_routes[2]: via: expected a dotted IPv4 address".
StatusOr<std::vector<RankRoute>> DecodeRankRoutes(const nlohmann::json& list);
// Whether `text` is a dotted IPv4 address (four parts 0-255, no leading zeros but "0").
bool IsDottedIpv4(const std::string& text);

// The server's answer to a registration.
struct RegisterAnswer {
  double lease_s = 0;
  double heartbeat_s = 0;
  std::string checkpoint_store;
};

// The server's answer to a heartbeat: the commands (each as ToJson(Command) wrote it) and every
// route the node keeps (RankRoute).
struct HeartbeatAnswer {
  double lease_s = 0;
  double heartbeat_s = 0;
  nlohmann::json commands = nlohmann::json::array();
  std::vector<RankRoute> rank_routes;
};

// What the agent reads of either answer. A field absent (or a body that is not an object) is
// nullopt or null: the agent keeps what it had. A field of the wrong type is an error naming it.
struct AgentAnswer {
  std::optional<double> lease_s;
  std::optional<double> heartbeat_s;
  const nlohmann::json* commands = nullptr;     // into the answer read
  const nlohmann::json* rank_routes = nullptr;  // for DecodeRankRoutes
};

// How a migration moves the job's memory (docs/lazy_migration.md).
enum class MoveMode { kPreCopy, kPostCopy };
const char* MoveModeName(MoveMode mode);  // "pre-copy", "post-copy"
std::optional<MoveMode> MoveModeNamed(const std::string& name);

// The kind's name on the wire ("start", "migrate_in", ...), and back.
const char* CommandKindName(CommandKind kind);
std::optional<CommandKind> CommandKindNamed(const std::string& name);

// One command of the server's answer. The envelope (id, kind, job, epoch) is in every command;
// a kind carries only the fields its comment names (ToJson writes those, DecodeCommand reads
// those).
struct Command {
  int64_t id = 0;
  CommandKind kind = CommandKind::kStart;
  std::string job;               // the server's job id; "" for fault
  std::optional<int64_t> epoch;  // which copy; absent: kill means every copy, others epoch 0

  // start, restore, migrate_in: the job as it is launched or restored
  std::string name;
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  int gpu_index = -1;
  std::vector<int> gpu_indices;  // start, restore
  std::string gpu_uuid;
  // start, restore, migrate_in, resize (absent in a resize: unchanged)
  std::optional<int64_t> quota_bytes;
  std::optional<int64_t> ceiling_bytes;
  int compute_share = 0;  // start: percent of the GPU's time; 0 for no limit

  // start, restore, migrate_in: the rank's own network, for a rank of a gang; absent otherwise
  std::optional<RankNet> rank_net;

  std::string image;                                         // restore: the image's folder
  std::vector<std::pair<std::string, std::string>> gpu_map;  // restore, migrate_in: old=new UUIDs

  // checkpoint: keep | stop | frozen (the copy was frozen by a freeze command: dump it and leave
  // it frozen; a gang's coordinated checkpoint, step 2)
  std::string mode = "keep";
  std::string dir;  // checkpoint: where the image goes

  std::string fault_kind = "xid";  // fault: xid | ecc | ecc-corrected
  int64_t code = 79;               // fault: the Xid
  // fault uses gpu_index too.

  // migrate_in and migrate_out
  int64_t migration = 0;  // the server's move id
  int port = 0;           // the destination's transfer port
  std::string token;      // the move's own token
  // How the memory moves: kPreCopy, the image with it before the job resumes there; kPostCopy,
  // the job resumes there at once and pulls its memory from the stopped source (the source
  // falls back to pre-copy for a job that holds GPU state, and says so in its result).
  MoveMode move_mode = MoveMode::kPreCopy;
  // migrate_out: a pre-copy move (asked, or post-copy's fallback) streams the job's memory
  // straight into the destination's page server (both agents can; the server's --move-mode is not
  // image); false: it moves by image (docs/lazy_migration.md, "Fleet moves").
  bool stream = false;
  // migrate_in
  std::string from_node;
  std::string from_gpu_uuid;  // the source's GPU, mapped onto gpu_uuid here
  std::string address;        // this node's address as the server knows it
  // migrate_out
  std::string to_address;
  std::string to_node;
  int to_gpu = 0;
  std::string to_gpu_uuid;
};

// The commands with few fields.
Command KillCommand(std::optional<int64_t> epoch = std::nullopt);
Command CheckpointCommand(const std::string& mode, const std::string& dir);
Command FaultCommand(int gpu_index, const std::string& fault_kind, int64_t code);

nlohmann::json ToJson(const Command& c);
// Errors name the field: "command 12 (migrate_in): port: expected an integer from 1 to 65535".
StatusOr<Command> DecodeCommand(const nlohmann::json& body);
// The command's id, read before it is decoded so that even a malformed command is answered; 0
// when BODY has no integer id.
int64_t CommandIdOf(const nlohmann::json& body);

nlohmann::json ToJson(const JobReport& r);
nlohmann::json ToJson(const GpuReport& g);
nlohmann::json ToJson(const CommandResult& c);
nlohmann::json ToJson(const Heartbeat& beat);
nlohmann::json ToJson(const Registration& r);
nlohmann::json ToJson(const RegisterAnswer& a);
nlohmann::json ToJson(const HeartbeatAnswer& a);

// The name a registration claims ("body: expected a JSON object", "name: expected a string"), read
// first so the server checks who may register it before the rest.
StatusOr<std::string> RegistrationName(const nlohmann::json& body);
// Errors name the field: "gpus[]: index: out of range", "migrate_port: expected an integer". The
// jobs' ids are the server's to check.
StatusOr<Registration> DecodeRegistration(const nlohmann::json& body);
// ANSWER must outlive the result (it points into it).
StatusOr<AgentAnswer> ReadAgentAnswer(const nlohmann::json& answer);

// A list of job reports ("jobs"): null or absent is none.
StatusOr<std::vector<JobReport>> DecodeJobReports(const nlohmann::json& list);
StatusOr<Heartbeat> DecodeHeartbeat(const nlohmann::json& body);

// Whether a pod in PHASE (Kubernetes' own word, its status.phase) has ended: Succeeded or
// Failed, nothing of it runs any more. Every reader of a pod's phase asks this.
bool PodPhaseEnded(std::string_view phase);
// Whether it is Running: bound, its containers started.
bool PodPhaseRunning(std::string_view phase);

// A Kubernetes pod that Paladin's scheduler places (docs/kubernetes.md), as the scheduler reports
// it to the server after each pass (PUT /v1/pods, docs/formats/api.md, "Pods"): where it runs and
// what it holds, or why it waits. The server shows pods to the teams their namespaces belong to.
struct PodReport {
  std::string ns, name;  // namespace and name: DNS labels / subdomains, as Kubernetes checks them
  std::string team;      // the namespace's team (paladin.io/team, else k8s-NAMESPACE)
  std::string phase;     // Pending, Running, ... (Kubernetes' own words)
  std::string node;      // "" while unbound
  int gpu = -1;          // the GPU Paladin gave it; -1 while unbound
  int64_t gpu_mem_bytes = 0;  // its paladin.io/gpu-memory
  int64_t used_bytes = -1;    // GPU memory its processes hold, as its node measured; -1: unknown
  std::string reason;         // why it is Pending ("" when placed)
  std::string placement;      // why it is where it is, as its placement said ("" while Pending)
  // Its class's command (k8s::PodClassCommand: the basename of the GPU container's command[0],
  // else its image's name); with the team, the class its measured peak counts for. "": none.
  std::string command;
};
struct PodList {
  std::string cluster = "default";  // which cluster's scheduler reports (a name)
  std::vector<PodReport> pods;
};
inline constexpr size_t kMaxPods = 100000;

nlohmann::json ToJson(const PodList& list);
// Errors name the field: "pods[3]: namespace: expected a Kubernetes namespace name". Names are
// checked as Kubernetes checks them; phases, reasons and teams are printable and bounded (the
// server checks a team as one of its team names).
StatusOr<PodList> DecodePodList(const nlohmann::json& body);

// --- Moves of pods asked through Paladin's server (docs/kubernetes.md, "Moves through Paladin's
// server"): a user asks the server (POST /v1/pods/NAMESPACE/NAME/move), the mover of the pod's
// node takes the move once (POST /v1/pod-moves/ID/take), carries it out with `paladin k8s move`'s
// code and says how it ended (POST /v1/pod-moves/ID/finish).

enum class PodMoveState { kRequested, kTaken, kDone, kFailed };
const char* PodMoveStateName(PodMoveState state);  // "requested", "taken", "done", "failed"
std::optional<PodMoveState> PodMoveStateNamed(const std::string& name);
inline bool PodMoveEnded(PodMoveState s) {
  return s == PodMoveState::kDone || s == PodMoveState::kFailed;
}

// Where to: `node` empty is the pod's own node; `gpu` -1 is the GPU Paladin's packer chooses there.
struct PodMoveAsk {
  std::string node;
  int gpu = -1;
};
nlohmann::json ToJson(const PodMoveAsk& ask);
// Errors name the field ("gpu: expected an integer from -1 to 1023").
StatusOr<PodMoveAsk> DecodePodMoveAsk(const nlohmann::json& body);

// How a taken move ended, as its mover reports it.
struct PodMoveOutcome {
  bool ok = false;
  std::string message;   // what happened, or why it failed (printable, up to 2048 bytes)
  std::string new_name;  // the replacement pod (ok only)
  std::string node;      // where it runs now (ok only)
  int gpu = -1;
  int64_t paused_ms = -1;
};
nlohmann::json ToJson(const PodMoveOutcome& outcome);
StatusOr<PodMoveOutcome> DecodePodMoveOutcome(const nlohmann::json& body);

// A move as the server keeps and serves it (GET /v1/pod-moves, the answer to a take).
struct PodMove {
  int64_t id = 0;
  std::string cluster, ns, name, team;
  std::string from_node;  // the pod's node when the move was asked: its mover carries it out
  int from_gpu = -1;
  PodMoveAsk to;
  PodMoveState state = PodMoveState::kRequested;
  std::string asked_by;    // the scope of the token that asked ("team:research", "admin")
  std::string mover;       // who took it ("" until taken)
  PodMoveOutcome outcome;  // once ended
  double requested_at = 0, taken_at = 0, ended_at = 0;  // seconds since the epoch; 0: not yet
  bool drain = false;  // asked by a drain of its node: the mover cordons the node first
};
nlohmann::json ToJson(const PodMove& move);
// The mover's reading of the server's answer, and the server's of its ledger; errors name the
// field.
StatusOr<PodMove> DecodePodMove(const nlohmann::json& body);

// POST /v1/pods/drain: every running pod Paladin placed on `node` moved to node `to`.
struct PodDrainAsk {
  std::string node, to;
};
nlohmann::json ToJson(const PodDrainAsk& ask);
// Both required, Kubernetes node names, not the same; errors name the field.
StatusOr<PodDrainAsk> DecodePodDrainAsk(const nlohmann::json& body);

}  // namespace paladin::api
