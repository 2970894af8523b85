// The node agent (`paladin agent`): one per node. It discovers the node's GPUs (NVML, or emulated
// GPUs of its own), registers with the server, heartbeats every heartbeat_s seconds and carries
// out the commands the answers carry (docs/formats/api.md, "Node agents"): it starts workloads
// under the GPU-memory quota as an unprivileged user, reports their state, usage and logs,
// resizes their quotas, checkpoints, restores and migrates them, and freezes them when it loses
// the server for longer than its lease. Workloads outlive the agent: a restarted agent adopts the
// ones still running from its data directory. See docs/agent.md.
#ifndef PALADIN_AGENT_AGENT_H_
#define PALADIN_AGENT_AGENT_H_

#include <atomic>
#include <string>
#include <vector>

#include "paladin/base/clock.h"

namespace paladin::agent {

struct AgentOptions {
  std::string server_url;  // "http://host:port"
  std::string token;       // an `agent` (or admin) token
  std::string name;        // the node's name
  std::string data_dir;    // run directories, records, emulated GPUs' state
  // Where workloads' run directories (job record, logs, quota region) go; "" = data_dir/runs.
  // Nodes that give it the same path let a job moved or restored between them keep its paths.
  std::string workloads_dir;
  // Non-empty: emulated GPUs ("2x80GiB"), private to this agent (their state lives under
  // data_dir). Empty: the real GPUs through NVML, else one emulated GPU (the agent says so).
  std::string emulated_gpus;
  // Non-empty: only these of the node's real GPUs (indices, e.g. {0, 2}); several agents of one
  // host can split its GPUs this way. Empty: all of them.
  std::vector<int> gpus;
  std::string address = "127.0.0.1";  // what other agents reach this one's migrations at
  int migrate_port = 7100;
  // Run as root, the agent gives each job a uid of its own from `uid_range` ("FIRST-LAST"; ""
  // = 1879048192-1879113727), held in `uid_dir` ("" = /run/paladin/uids, shared by every agent
  // of the host). Non-empty `user`: every job runs as that one user instead, not isolated from
  // the others (docs/agent.md, "Users").
  std::string user;
  std::string uid_range;
  std::string uid_dir;
  bool allow_root = false;        // let workloads run as root (--user root)
  bool kill_on_exit = false;      // kill the workloads when the agent stops (default: leave them)
  std::string local_socket;       // "" = data_dir/agent.sock (SLURM steps, `paladin slurm`)
  std::string slurm_checkpoints;  // "" = data_dir/slurm-checkpoints; shared across nodes ideally
  // Where the agent reads time for its lease and its heartbeats' pace; null: RealClock(). Not
  // owned; must outlive the agent and be safe to call from any thread.
  const base::Clock* clock = nullptr;
};

// Runs the agent until *stop becomes true (a signal handler may set it) and returns the process's
// exit code: 0 after a requested stop, 2 for unusable options, 1 when the node cannot host
// workloads. Blocks the calling thread; starts and joins its own worker threads. Call it at most
// once per process: it makes the process a child subreaper and sets PALADIN_EMU_* in its
// environment.
int RunAgent(const AgentOptions& options, const std::atomic<bool>* stop);

}  // namespace paladin::agent

#endif  // PALADIN_AGENT_AGENT_H_
