// What the `paladin k8s` commands share (src/cli/k8s.cc: the node's one-shot commands;
// k8s_services.cc: its long-running ones; k8s_cluster.cc: the cluster-wide scheduler, explain and
// webhook): their flags, the API server's and Paladin's
// server's clients made from them, and the options every command of the two files takes.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "paladin/api/client.h"
#include "paladin/base/status.h"
#include "paladin/k8s/api.h"
#include "paladin/k8s/move.h"
#include "paladin/k8s/scheduler.h"
#include "paladin/k8s/webhook.h"

namespace paladin::cli::kube {

// The flags of every `paladin k8s` command, one set filled by whichever runs.
struct K8sArgs {
  std::string node;
  std::string gpu_memory;  // empty: from NVML
  std::string nvml = "libnvidia-ml.so.1";
  std::string server;  // empty: in-cluster
  std::string ca_cert;
  std::string client_cert;
  std::string client_key;
  std::string token_file;
  std::string lib_dir;  // empty: no library folder
  double every_s = 0;   // the node's: 0, publish once; else every so many seconds
  bool resume = false;  // move: finish or undo a move of the pod stopped midway
  bool usage = false;   // the node's: measure each pod's GPU memory into its annotation
  // The scheduler's
  std::string policy = "paladin";
  double interval_s = 0.5;
  bool once = false;
  std::string paladin_server;  // empty: teams' quotas not checked, pods not reported
  std::string paladin_token_file;
  std::string paladin_ca_file;  // the CA of Paladin's server's certificate (HTTPS)
  // gpu-restore: the restored container, the GPU it was taken on and the one it runs on.
  std::string restored_container;
  std::string from_uuid;
  int restore_gpu = -1;
  std::string cluster = "default";
  // The webhook's
  std::string listen = "127.0.0.1:9443";
  std::string cert;
  std::string key;
  k8s::InjectOptions inject;
  double sizing_timeout_s = 2;        // `auto` pods: the deadline of the server's answer
  std::string auto_default = "4GiB";  // `auto` pods: the size without the server's answer
  // The mover's (and the drain's: its moves)
  k8s::MoveOptions move;
  std::string drain_node;
  // The server's mover's (node: `node`, every: `every_s`)
  std::vector<std::string> node_images;  // NODE=DIR
  std::vector<std::string> node_movers;  // NODE=HOST:PORT
  std::string carry_listen;              // ADDR:PORT
  int carry_port = 0;
  double finish_within_s = 300;
  std::string mover_pods = "paladin/app.kubernetes.io/name=paladin-mover";
  std::string mover_name;
  double settle_after_s = 0;
  // The periodic checkpoint's (node: `node`, every: `every_s`) and the recovery's
  std::string to_mover_node;  // checkpoint: the recovery node, its mover found by --mover-pods
  std::string lost_node;
  double lost_after_s = 40;
  double watch_s = 0;        // recover --watch: every so many seconds, every lost node
  bool host_mounts = false;  // checkpoint, recover: in the node's mount namespace (a pod's)
  // The explainer's (and the scheduler's flags above)
  std::string explain_pod;
  std::string explain_ns = "default";
};

// The API server's client configuration: --server and its credentials, else in-cluster.
StatusOr<k8s::ApiConfig> Config(const K8sArgs& args);
// --paladin-ca-file: the clients of Paladin's server in this process trust its CA (they read
// PALADIN_CA_FILE, as the CLI and the agents do). An error names the flag.
Status UseServerCa(const K8sArgs& args);
// Paladin's server as --paladin-server and --paladin-token-file name it; an error names the flags.
StatusOr<std::shared_ptr<api::Client>> PaladinServer(const K8sArgs& args);
// The scheduler's options from the flags it shares with explain and the moves: the policy and,
// with --paladin-server, the teams' quotas read from Paladin's server as its own scheduler checks
// them. An error names the flag.
StatusOr<k8s::SchedulerOptions> SchedulerOptionsOf(const K8sArgs& args);

// Paladin's server for a k8s component: its URL (what it is asked, `what`), an admin token and
// the CA of its certificate.
void AddServerOptions(CLI::App* app, K8sArgs* args, const std::string& what);
// The API server and the credentials to reach it.
void AddApiOptions(CLI::App* app, K8sArgs* args);

// Progress lines "WHAT: SECONDS  LINE" on stdout, the seconds counted from this call.
std::function<void(const std::string&)> TimedProgress(const std::string& what);
// A move's options with the packer's policy and, with --paladin-server, the teams' quotas that
// place its replacement (the scheduler's flags).
StatusOr<k8s::MoveOptions> MoveOptionsOf(const K8sArgs& args);
// --policy and Paladin's server, for the replacement's GPU (a move's, a drain's, the mover's).
void AddPlacementOptions(CLI::App* app, K8sArgs* args);

// `paladin k8s scheduler`, `explain` and `webhook` (k8s_cluster.cc).
void RegisterClusterCommands(CLI::App* k8s, const std::shared_ptr<K8sArgs>& args, int* exit_code);
// `paladin k8s checkpoint`, `recover` and `mover` (k8s_services.cc).
void RegisterServiceCommands(CLI::App* k8s, const std::shared_ptr<K8sArgs>& args, int* exit_code);

}  // namespace paladin::cli::kube
