// `paladin agent`: the node agent (include/paladin/agent/agent.h, docs/agent.md).
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "commands.h"
#include "paladin/agent/agent.h"

namespace paladin::cli {
namespace {

std::atomic<bool> g_agent_stop{false};

// Stops the agent only: its workloads run on (unless --kill-on-exit).
void OnAgentSignal(int /*signal*/) { g_agent_stop.store(true); }

struct AgentArgs {
  agent::AgentOptions options;
  std::string token_file;
};

// The token: --token, else the first line of --token-file, else $PALADIN_TOKEN.
bool ResolveToken(AgentArgs* a) {
  if (!a->options.token.empty()) return true;
  if (!a->token_file.empty()) {
    std::ifstream in(a->token_file);
    std::string line;
    if (!in || !std::getline(in, line)) {
      Say("agent", "--token-file " + a->token_file + ": cannot read it");
      return false;
    }
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    a->options.token = line;
  } else if (const char* env = std::getenv("PALADIN_TOKEN")) {
    a->options.token = env;
  }
  if (a->options.token.empty()) {
    Say("agent", "no token: give --token, --token-file or $PALADIN_TOKEN");
    return false;
  }
  return true;
}

int RunAgentCommand(AgentArgs a) {
  if (!ResolveToken(&a)) return 2;
  struct sigaction stop {};
  stop.sa_handler = OnAgentSignal;
  sigemptyset(&stop.sa_mask);
  sigaction(SIGINT, &stop, nullptr);
  sigaction(SIGTERM, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return agent::RunAgent(a.options, &g_agent_stop);
}

}  // namespace

void RegisterAgent(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<AgentArgs>();
  agent::AgentOptions& o = a->options;
  CLI::App* cmd = app.add_subcommand(
      "agent",
      "Run the node agent: register with the server, heartbeat, and run, checkpoint, restore "
      "and migrate the workloads it is told to (as an unprivileged user, under GPU-memory "
      "quotas)");
  cmd->add_option("--server", o.server_url,
                  "The server, http://HOST:PORT, or https://HOST:PORT (a server with its own CA: "
                  "PALADIN_CA_FILE names the CA's certificate)")
      ->required();
  auto* token = cmd->add_option("--token", o.token, "An agent token (else $PALADIN_TOKEN)");
  cmd->add_option("--token-file", a->token_file, "A file holding the token")->excludes(token);
  cmd->add_option("--name", o.name, "This node's name")->required();
  cmd->add_option("--data", o.data_dir,
                  "The agent's directory: run directories, job records, emulated GPUs' state")
      ->required();
  cmd->add_option("--workloads", o.workloads_dir,
                  "Where workloads' run directories go (default: DATA/workloads); nodes that share "
                  "the path let moved and restored jobs keep their paths");
  cmd->add_option("--emulated-gpus", o.emulated_gpus,
                  "Emulated GPUs of this agent's own, e.g. 2x80GiB (default: the real GPUs, or "
                  "one emulated GPU when there is none)");
  cmd->add_option("--address", o.address, "The address other agents reach this one at")
      ->capture_default_str();
  cmd->add_option("--migrate-port", o.migrate_port, "Port for incoming migrations (and PORT+1)")
      ->capture_default_str()
      ->check(CLI::Range(1, 65534));
  cmd->add_option("--uid-range", o.uid_range,
                  "Each job runs as a uid of its own from FIRST-LAST, when the agent runs as root "
                  "(default: 1879048192-1879113727)");
  cmd->add_option("--uid-dir", o.uid_dir,
                  "Where this host's agents record which job holds which uid (default: "
                  "/run/paladin/uids)");
  cmd->add_option("--user", o.user,
                  "Every job runs as this one user instead of a uid of its own (jobs are then "
                  "not isolated from each other)");
  cmd->add_flag("--allow-root", o.allow_root, "Allow --user root");
  cmd->add_option("--gpus", o.gpus,
                  "Only these of the node's real GPUs, by index, e.g. 0,2 (default: all)")
      ->delimiter(',');
  cmd->add_option("--local-socket", o.local_socket,
                  "The socket SLURM steps and `paladin slurm` reach this agent at (default: "
                  "DATA/agent.sock)");
  cmd->add_option("--slurm-checkpoints", o.slurm_checkpoints,
                  "Where SLURM steps' checkpoints go (default: DATA/slurm-checkpoints); a path "
                  "shared by every node lets a requeued job resume on any of them");
  cmd->add_flag("--kill-on-exit", o.kill_on_exit,
                "Kill the workloads when the agent stops (default: they run on, and the next "
                "agent with this --data adopts them)");
  cmd->callback([a, exit_code] { *exit_code = RunAgentCommand(*a); });
}

}  // namespace paladin::cli
