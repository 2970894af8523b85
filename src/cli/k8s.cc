// `paladin k8s`: Paladin's side of a Kubernetes cluster (docs/kubernetes.md). The commands that
// run on a node once are here; its long-running checkpoint, recover and mover in
// k8s_services.cc; the cluster-wide scheduler, explain and webhook in k8s_cluster.cc.
//
//   node   advertises this node's GPU memory to the API server as the node-level extended
//          resource paladin.io/gpu-memory (bytes, the sum over its GPUs as NVML reports them, or
//          --gpu-memory), so that pods asking for it are admitted only where it fits and a
//          ResourceQuota on it caps a namespace; publishes each GPU's size in the node's
//          paladin.io/gpus annotation and, with --lib-dir, prepares the folder of Paladin's
//          libraries that the webhook mounts into GPU pods
//   move       moves a running pod, with its process and GPU state, into a new pod on another
//              GPU of its node or on another node (run on the pod's node, as root)
//   drain      cordons a node and moves each of its pods of the RuntimeClass paladin to another
//              node (run on the drained node, as root)
//   checkpoint checkpoints this node's pods of the RuntimeClass paladin, left running, into a
//              folder that outlives the node (once, or every --every seconds)
//   recover    brings a lost node's pods back on another node from their last checkpoint
//   mover      carries out the moves of this node's pods that users ask of Paladin's server
//   gpus       this node's GPUs as NVML reports them, with their memory in use
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "fleet_format.h"
#include "k8s_args.h"
#include "paladin/api/client.h"
#include "paladin/base/size.h"
#include "paladin/gpu/nvml.h"
#include "paladin/k8s/api.h"
#include "paladin/k8s/move.h"
#include "paladin/k8s/recover.h"
#include "paladin/k8s/scheduler.h"
#include "paladin/k8s/usage.h"
#include "paladin/k8s/webhook.h"
#include "paladin/quota/launch.h"

namespace paladin::cli {

namespace kube {

StatusOr<k8s::ApiConfig> Config(const K8sArgs& args) {
  if (args.server.empty()) return k8s::InClusterConfig();
  k8s::ApiConfig config;
  if (Status s = k8s::SetServer(args.server, &config); !s.ok()) return s;
  config.ca_cert_file = args.ca_cert;
  if (args.client_cert.empty() != args.client_key.empty()) {
    return InvalidArgument("--client-cert and --client-key go together");
  }
  config.client_cert_file = args.client_cert;
  config.client_key_file = args.client_key;
  if (!args.token_file.empty()) {
    std::FILE* f = std::fopen(args.token_file.c_str(), "r");
    if (f == nullptr) return InvalidArgument("--token-file '" + args.token_file + "' unreadable");
    char buffer[8192];
    const size_t n = std::fread(buffer, 1, sizeof buffer, f);
    std::fclose(f);
    config.token.assign(buffer, n);
    while (!config.token.empty() && (config.token.back() == '\n' || config.token.back() == ' ')) {
      config.token.pop_back();
    }
    if (config.token.empty())
      return InvalidArgument("--token-file '" + args.token_file + "' is empty");
  }
  return config;
}

// --paladin-ca-file: the clients of Paladin's server in this process trust its CA (they read
// PALADIN_CA_FILE, as the CLI and the agents do). An error names the flag.
Status UseServerCa(const K8sArgs& args) {
  if (args.paladin_ca_file.empty()) return Status::Ok();
  if (access(args.paladin_ca_file.c_str(), R_OK) != 0) {
    return InvalidArgument("--paladin-ca-file " + args.paladin_ca_file + ": cannot be read");
  }
  setenv("PALADIN_CA_FILE", args.paladin_ca_file.c_str(), 1);
  return Status::Ok();
}

// Paladin's server as --paladin-server and --paladin-token-file name it; an error names the flags.
StatusOr<std::shared_ptr<api::Client>> PaladinServer(const K8sArgs& args) {
  StatusOr<api::Endpoint> endpoint = api::ParseUrl(args.paladin_server);
  std::string token;
  std::ifstream in(args.paladin_token_file);
  if (!endpoint.ok() || !(in >> token)) {
    return InvalidArgument("--paladin-server needs a URL and --paladin-token-file a token (" +
                           (endpoint.ok() ? "token unreadable" : endpoint.status().message()) +
                           ")");
  }
  return std::make_shared<api::Client>(*endpoint, token, 5);
}

// Paladin's server for a k8s component: its URL (what it is asked, `what`), an admin token and
// the CA of its certificate.
void AddServerOptions(CLI::App* app, K8sArgs* args, const std::string& what) {
  app->add_option("--paladin-server", args->paladin_server, what);
  app->add_option("--paladin-token-file", args->paladin_token_file,
                  "File holding an admin token of Paladin's server");
  app->add_option("--paladin-ca-file", args->paladin_ca_file,
                  "The CA certificate of Paladin's server (an https:// --paladin-server with its "
                  "own CA: deploy/k8s/server-tls.sh's ca.crt); default: the system's CAs");
}

void AddApiOptions(CLI::App* app, K8sArgs* args) {
  app->add_option("--server", args->server,
                  "API server, https://HOST:PORT; default: the pod's (in-cluster)");
  app->add_option("--ca-cert", args->ca_cert, "PEM CA file verifying the API server");
  app->add_option("--client-cert", args->client_cert, "PEM client certificate");
  app->add_option("--client-key", args->client_key, "PEM client key");
  app->add_option("--token-file", args->token_file, "File holding a bearer token");
}

// Progress lines "WHAT: SECONDS  LINE", the seconds counted from this call.
std::function<void(const std::string&)> TimedProgress(const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  return [what, start](const std::string& line) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    std::printf("%s: %6.3f s  %s\n", what.c_str(), static_cast<double>(ms) / 1000, line.c_str());
    std::fflush(stdout);
  };
}

// A move's options with the packer's policy and, with --paladin-server, the teams' quotas that
// place its replacement (the scheduler's flags).
StatusOr<k8s::MoveOptions> MoveOptionsOf(const K8sArgs& args) {
  StatusOr<k8s::SchedulerOptions> placement = SchedulerOptionsOf(args);
  if (!placement.ok()) return placement.status();
  k8s::MoveOptions o = args.move;
  o.placement = std::move(*placement);
  return o;
}

// The replacement's GPU: chosen by the packer with the scheduler's policy on the destination
// (a GPU pod moving to another node without --gpu), and its team's quotas checked there.
void AddPlacementOptions(CLI::App* app, K8sArgs* args) {
  app->add_option("--policy", args->policy,
                  "Packing policy choosing a GPU pod's GPU on the destination (the scheduler's "
                  "--policy)");
  AddServerOptions(app, args,
                   "Paladin's server, whose teams' quotas the replacement must fit beside the "
                   "pod it replaces (the scheduler's flag)");
}

}  // namespace kube

namespace {

using kube::AddApiOptions;
using kube::AddPlacementOptions;
using kube::Config;
using kube::K8sArgs;
using kube::MoveOptionsOf;
using kube::TimedProgress;

void NodeSay(const std::string& line) { cli::Say("k8s node", line); }

// The node's GPU memory in bytes, with where it came from.
StatusOr<uint64_t> GpuMemory(const K8sArgs& args, std::string* source,
                             std::vector<gpu::GpuInfo>* list) {
  if (!args.gpu_memory.empty()) {
    uint64_t bytes = 0;
    if (!base::ParseSize(args.gpu_memory, &bytes) || bytes == 0) {
      return InvalidArgument("--gpu-memory '" + args.gpu_memory +
                             "': expected a size such as 80GiB");
    }
    *source = "--gpu-memory";
    return bytes;
  }
  StatusOr<std::unique_ptr<gpu::Nvml>> nvml = gpu::Nvml::Load(args.nvml);
  if (!nvml.ok()) {
    return FailedPrecondition("no GPU memory to advertise: " + nvml.status().message() +
                              " (give --gpu-memory on a node without NVML)");
  }
  StatusOr<std::vector<gpu::GpuInfo>> gpus = (*nvml)->Gpus();
  if (!gpus.ok()) return gpus.status();
  if (gpus->empty()) return FailedPrecondition("NVML reports no GPU on this node");
  uint64_t total = 0;
  for (const gpu::GpuInfo& g : *gpus) total += g.total_bytes;
  *list = *gpus;
  *source = std::to_string(gpus->size()) + " GPU(s) as NVML reports them";
  return total;
}

// One publication of the node's GPUs (and, `with_libs`, its library folder): 0, 1 on an error
// worth retrying, 2 on bad input.
// Each pod's GPU memory as NVML counts its processes (host pids, their pods from their
// cgroups), written into the pods' annotation paladin.io/gpu-memory-used.
StatusOr<std::vector<std::string>> PublishUsage(const K8sArgs& args, const k8s::ApiClient& client) {
  StatusOr<std::unique_ptr<gpu::Nvml>> nvml = gpu::Nvml::Load(args.nvml);
  if (!nvml.ok()) return nvml.status();
  StatusOr<std::vector<gpu::GpuInfo>> gpus = (*nvml)->Gpus();
  if (!gpus.ok()) return gpus.status();
  std::vector<k8s::GpuProcessUse> processes;
  for (const gpu::GpuInfo& g : *gpus) {
    StatusOr<std::vector<gpu::GpuProcess>> procs = (*nvml)->Processes(g.uuid);
    if (!procs.ok()) return procs.status();
    for (const gpu::GpuProcess& p : *procs) processes.push_back({p.pid, p.used_bytes});
  }
  const std::map<std::string, uint64_t> used = k8s::UsageByPod(processes, [](uint32_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  });
  return k8s::PublishPodUsage(client, args.node, used);
}

int PublishNode(const K8sArgs& args, const k8s::ApiConfig& api, bool with_libs) {
  std::string source;
  std::vector<gpu::GpuInfo> gpus;
  StatusOr<uint64_t> bytes = GpuMemory(args, &source, &gpus);
  if (!bytes.ok()) {
    NodeSay(bytes.status().message());
    return 1;
  }
  const k8s::ApiClient client(api);
  StatusOr<std::string> node = client.PatchNodeStatus(
      args.node, k8s::ExtendedResourcePatch(k8s::kGpuMemoryResource, *bytes));
  if (!node.ok()) {
    NodeSay(node.status().message());
    return 1;
  }
  std::printf("node %s: %s = %llu (%s, from %s)\n", args.node.c_str(), k8s::kGpuMemoryResource,
              static_cast<unsigned long long>(*bytes), base::FormatSize(*bytes).c_str(),
              source.c_str());
  if (!gpus.empty()) {
    // Each GPU's size, for Paladin's scheduler: the resource above is only the node's sum.
    nlohmann::json patch;
    patch["metadata"]["annotations"][k8s::kGpusAnnotation] = k8s::GpusAnnotationValue(gpus);
    StatusOr<std::string> annotated =
        client.Patch("/api/v1/nodes/" + args.node, patch.dump(), "application/merge-patch+json");
    if (!annotated.ok()) {
      NodeSay(annotated.status().message());
      return 1;
    }
    std::printf("node %s: %s = %s\n", args.node.c_str(), k8s::kGpusAnnotation,
                k8s::GpusAnnotationValue(gpus).c_str());
  }
  if (args.usage) {
    StatusOr<std::vector<std::string>> lines = PublishUsage(args, client);
    if (!lines.ok()) {
      NodeSay("measuring the pods' GPU memory: " + lines.status().message());
      return 1;
    }
    for (const std::string& line : *lines) {
      std::printf("node %s: %s\n", args.node.c_str(), line.c_str());
    }
  }
  if (with_libs && !args.lib_dir.empty()) {
    StatusOr<quota::Libraries> libs = quota::FindLibraries();
    if (!libs.ok()) {
      NodeSay(libs.status().message());
      return 1;
    }
    if (Status s = quota::PrepareSharedLibraryDir(args.lib_dir, *libs); !s.ok()) {
      NodeSay(s.message());
      return 1;
    }
    std::printf("node %s: Paladin's interposer and the emulated driver in %s\n", args.node.c_str(),
                args.lib_dir.c_str());
  }
  std::fflush(stdout);  // a pod's log is a pipe: each pass's lines as they happen
  return 0;
}

int RunNode(const K8sArgs& args) {
  if (Status s = k8s::CheckNodeName(args.node); !s.ok()) {
    NodeSay(s.message());
    return 2;
  }
  StatusOr<k8s::ApiConfig> config = Config(args);
  if (!config.ok()) {
    NodeSay(config.status().message());
    return 2;
  }
  int rc = PublishNode(args, *config, /*with_libs=*/true);
  if (args.every_s <= 0 || rc == 2) return rc;
  // As a DaemonSet: publish again every --every seconds (a node's status can be rewritten, and
  // a container that exits would be restarted in a back-off loop). The library folder is
  // prepared until it once succeeds, never again: replacing it relinks files pods may be
  // loading.
  bool libs_done = rc == 0;
  for (;;) {
    usleep(static_cast<useconds_t>(args.every_s * 1e6));
    rc = PublishNode(args, *config, !libs_done);
    libs_done = libs_done || rc == 0;
  }
}

int RunMove(const K8sArgs& args) {
  StatusOr<k8s::ApiConfig> config = Config(args);
  StatusOr<k8s::MoveOptions> made = MoveOptionsOf(args);
  if (!config.ok() || !made.ok()) {
    cli::Say("k8s move", (config.ok() ? made.status() : config.status()).message());
    return 2;
  }
  const std::function<void(const std::string&)> progress = TimedProgress("move");
  const k8s::MoveOptions& o = *made;
  if (args.resume) {
    // A move of this pod stopped midway (its command killed): undone or finished from its image.
    StatusOr<k8s::Resumed> resumed = k8s::ResumeMove(k8s::ApiClient(*config), o, progress);
    if (!resumed.ok()) {
      cli::Say("k8s move", resumed.status().message());
      return 1;
    }
    if (resumed->kind == k8s::Resumed::Kind::kUndone) {
      std::printf("undone: %s\n", resumed->message.c_str());
      return 0;
    }
    const k8s::MoveResult& m = resumed->result;
    std::printf("moved %s/%s -> %s/%s, %s -> %s: %s, paused %lld ms\n", o.ns.c_str(), o.pod.c_str(),
                o.ns.c_str(), m.new_name.c_str(),
                (m.from_node + (m.from_gpu >= 0 ? "/" + std::to_string(m.from_gpu) : "")).c_str(),
                (m.to_node + (m.to_gpu >= 0 ? "/" + std::to_string(m.to_gpu) : "")).c_str(),
                resumed->message.c_str(), static_cast<long long>(m.paused_ms));
    return 0;
  }
  StatusOr<k8s::MoveResult> r = k8s::MovePod(k8s::ApiClient(*config), o, progress);
  if (!r.ok()) {
    cli::Say("k8s move", r.status().message());
    return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::string where;
  if (r->to_node != r->from_node) where = ", node " + r->from_node + " -> " + r->to_node;
  if (r->from_gpu >= 0) {
    where += ", GPU " + std::to_string(r->from_gpu) + " -> " + std::to_string(r->to_gpu);
  }
  std::string carry;
  if (r->to_node != r->from_node) {
    carry = ", image carried in " + std::to_string(r->carry_ms) + " ms";
  }
  std::printf("moved %s/%s -> %s/%s%s: checkpoint %lld ms%s, paused %lld ms (image %s)\n",
              o.ns.c_str(), o.pod.c_str(), o.ns.c_str(), r->new_name.c_str(), where.c_str(),
              static_cast<long long>(r->checkpoint_ms), carry.c_str(),
              static_cast<long long>(r->paused_ms), r->image.c_str());
  return 0;
}

int RunDrain(const K8sArgs& args) {
  StatusOr<k8s::ApiConfig> config = Config(args);
  StatusOr<k8s::MoveOptions> made = MoveOptionsOf(args);
  if (!config.ok() || !made.ok()) {
    cli::Say("k8s drain", (config.ok() ? made.status() : config.status()).message());
    return 2;
  }
  const std::function<void(const std::string&)> progress = TimedProgress("drain");
  StatusOr<k8s::DrainResult> r =
      k8s::DrainNode(k8s::ApiClient(*config), args.drain_node, *made, progress);
  if (!r.ok()) {
    cli::Say("k8s drain", r.status().message());
    return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  for (const std::string& left : r->left) std::printf("left %s\n", left.c_str());
  int64_t longest = 0;
  for (const k8s::MoveResult& m : r->moved) longest = std::max(longest, m.paused_ms);
  std::printf("drained %s: %zu pod(s) moved to %s (longest pause %lld ms), %zu left\n",
              args.drain_node.c_str(), r->moved.size(), args.move.node.c_str(),
              static_cast<long long>(longest), r->left.size());
  return 0;
}

int RunGpuRestore(const K8sArgs& args) {
  const std::function<void(const std::string&)> progress = [](const std::string& line) {
    std::fprintf(stderr, "paladin k8s gpu-restore: %s\n", line.c_str());
  };
  if (Status s = k8s::RestoreGpuState(args.restored_container, args.move, args.from_uuid,
                                      args.restore_gpu, progress);
      !s.ok()) {
    cli::Say("k8s gpu-restore", s.message());
    return s.code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}

int RunGpus(const K8sArgs& args) {
  StatusOr<std::unique_ptr<gpu::Nvml>> nvml = gpu::Nvml::Load(args.nvml);
  if (!nvml.ok()) {
    cli::Say("k8s gpus", nvml.status().message());
    return 1;
  }
  StatusOr<std::vector<gpu::GpuInfo>> gpus = (*nvml)->Gpus();
  if (!gpus.ok()) {
    cli::Say("k8s gpus", gpus.status().message());
    return 1;
  }
  for (const gpu::GpuInfo& g : *gpus) {
    StatusOr<std::vector<gpu::GpuProcess>> procs = (*nvml)->Processes(g.uuid);
    std::printf("gpu %d %s used %llu total %llu processes %zu\n", g.index, g.uuid.c_str(),
                static_cast<unsigned long long>(g.used_bytes),
                static_cast<unsigned long long>(g.total_bytes), procs.ok() ? procs->size() : 0);
    for (const gpu::GpuProcess& p : procs.ok() ? *procs : std::vector<gpu::GpuProcess>()) {
      std::printf("gpu %d pid %u used %llu\n", g.index, p.pid,
                  static_cast<unsigned long long>(p.used_bytes));
    }
  }
  return 0;
}

}  // namespace

void RegisterK8s(CLI::App& app, int* exit_code) {
  CLI::App* k8s = app.add_subcommand("k8s", "Paladin's side of a Kubernetes cluster");
  k8s->require_subcommand(1);
  auto args = std::make_shared<K8sArgs>();
  CLI::App* node = k8s->add_subcommand(
      "node", "Advertise this node's GPU memory as the extended resource paladin.io/gpu-memory");
  node->add_option("--node", args->node, "The Node's name in the cluster")->required();
  node->add_option("--gpu-memory", args->gpu_memory,
                   "GPU memory to advertise (e.g. 80GiB); default: the sum over NVML's GPUs");
  node->add_option("--nvml", args->nvml, "NVML library to read the GPUs from");
  node->add_option("--lib-dir", args->lib_dir,
                   "Prepare this folder with Paladin's interposer and the emulated driver, for "
                   "the webhook's hostPath volume");
  node->add_flag("--usage", args->usage,
                 "Measure each pod's GPU memory (NVML's processes, their pods from their cgroups; "
                 "needs the host's pids) into its annotation paladin.io/gpu-memory-used");
  node->add_option("--every", args->every_s,
                   "Publish again every so many seconds, never exiting (as a DaemonSet); "
                   "default 0: once");
  AddApiOptions(node, args.get());
  node->callback([args, exit_code] { *exit_code = RunNode(*args); });

  kube::RegisterClusterCommands(k8s, args, exit_code);

  CLI::App* move = k8s->add_subcommand(
      "move",
      "Move a running pod, with its process and GPU state, into a new pod on another GPU or "
      "node (on the pod's node, as root)");
  k8s::MoveOptions& m = args->move;
  move->add_option("pod", m.pod, "The pod to move")->required();
  move->add_option("-n,--namespace", m.ns, "Its namespace");
  move->add_option("--gpu", m.gpu, "The GPU of the node to move it to (a pod Paladin placed)");
  move->add_option("--node", m.node, "The node to move it to (default: its own)");
  move->add_option("--to-images", m.to_images,
                   "Another node's image folder, reachable from here (its RuntimeClass "
                   "paladin's PALADIN_K8S_IMAGES): where --node's image is carried");
  move->add_option("--to-mover", m.to_mover,
                   "HOST:PORT: another machine's node's mover (`k8s mover --carry-listen`), to "
                   "which --node's image is sent over the network (instead of --to-images)");
  move->add_option("--to-runc-root", m.to_runc_root,
                   "Another node's runc state folder on this machine, for a GPU pod's restore");
  move->add_option("--name", m.new_name, "The new pod's name (default: POD-m1, POD-m2, ...)");
  move->add_option("--runc", m.runc, "runc on this node");
  move->add_option("--runc-root", m.runc_root, "runc's state folder of containerd's k8s.io pods");
  move->add_option("--criu-dir", m.criu_dir, "Folder of Paladin's criu, first on runc's PATH");
  move->add_option("--images", m.images,
                   "The node's checkpoint images (the RuntimeClass paladin's PALADIN_K8S_IMAGES)");
  move->add_option("--key", m.key_file,
                   "The node's move key (the RuntimeClass paladin's PALADIN_K8S_MOVE_KEY)");
  move->add_option("--driver", m.driver,
                   "CUDA driver for the checkpoint API (the emulated one's path on emulated GPUs)");
  move->add_option("--nvml", m.nvml, "NVML library naming the GPUs");
  move->add_option("--timeout", m.timeout_s, "Seconds the new pod has to run");
  move->add_flag("--resume", args->resume,
                 "Settle a move of the pod that was stopped midway (this command killed): undone "
                 "when its container runs on, else finished from the move's whole checkpoint "
                 "image (give the move's --node, --gpu and --name again)");
  AddPlacementOptions(move, args.get());
  AddApiOptions(move, args.get());
  move->callback([args, exit_code] { *exit_code = RunMove(*args); });

  CLI::App* drain = k8s->add_subcommand(
      "drain",
      "Cordon a node and move each of its running pods of the RuntimeClass paladin, with their "
      "process state, to another node (on the drained node, as root)");
  drain->add_option("node", args->drain_node, "The node to drain")->required();
  drain->add_option("--to", m.node, "The node its pods move to")->required();
  drain->add_option("--to-images", m.to_images, "That node's image folder, reachable from here");
  drain->add_option("--to-mover", m.to_mover,
                    "HOST:PORT: that node's mover (`k8s mover --carry-listen`), to which the "
                    "images are sent over the network (instead of --to-images)");
  drain->add_option("--to-runc-root", m.to_runc_root,
                    "That node's runc state folder on this machine, for GPU pods' restore");
  drain->add_option("--runc", m.runc, "runc on this node");
  drain->add_option("--runc-root", m.runc_root, "runc's state folder of containerd's k8s.io pods");
  drain->add_option("--criu-dir", m.criu_dir, "Folder of Paladin's criu, first on runc's PATH");
  drain->add_option("--images", m.images, "This node's checkpoint images");
  drain->add_option("--key", m.key_file, "The cluster's move key");
  drain->add_option("--driver", m.driver, "CUDA driver for the checkpoint API");
  drain->add_option("--nvml", m.nvml, "NVML library naming the GPUs");
  drain->add_option("--timeout", m.timeout_s, "Seconds each new pod has to run");
  AddPlacementOptions(drain, args.get());
  AddApiOptions(drain, args.get());
  drain->callback([args, exit_code] { *exit_code = RunDrain(*args); });

  CLI::App* gpu_restore = k8s->add_subcommand(
      "gpu-restore",
      "Put a restored container's GPU state back onto a GPU of this node and unlock it (run by "
      "the RuntimeClass paladin's runtime right after it restores a moved or recovered pod)");
  gpu_restore->add_option("container", args->restored_container, "The container's id")->required();
  gpu_restore->add_option("--gpu", args->restore_gpu, "The GPU it runs on (its paladin.io/gpu)")
      ->required()
      ->check(CLI::Range(0, 1023));
  gpu_restore->add_option("--from-uuid", args->from_uuid,
                          "The GPU it was checkpointed on (remapped to --gpu's)");
  gpu_restore->add_option("--runc", m.runc, "runc on this node");
  gpu_restore->add_option("--runc-root", m.runc_root, "runc's state folder of the container");
  gpu_restore->add_option("--driver", m.driver, "CUDA driver for the checkpoint API");
  gpu_restore->add_option("--nvml", m.nvml, "NVML library naming the GPUs");
  gpu_restore->callback([args, exit_code] { *exit_code = RunGpuRestore(*args); });

  kube::RegisterServiceCommands(k8s, args, exit_code);

  CLI::App* gpus = k8s->add_subcommand("gpus", "This node's GPUs and their memory in use");
  gpus->add_option("--nvml", args->nvml, "NVML library to read the GPUs from");
  gpus->callback([args, exit_code] { *exit_code = RunGpus(*args); });
}

}  // namespace paladin::cli