// `paladin k8s`: Paladin's side of a Kubernetes cluster (docs/kubernetes.md). The commands that
// run on a node are here; the cluster-wide scheduler, explain and webhook in k8s_cluster.cc.
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
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "commands.h"
#include "fleet_format.h"
#include "k8s_args.h"
#include "paladin/api/client.h"
#include "paladin/base/size.h"
#include "paladin/ckpt/workload.h"
#include "paladin/gpu/nvml.h"
#include "paladin/k8s/api.h"
#include "paladin/k8s/carry.h"
#include "paladin/k8s/move.h"
#include "paladin/k8s/recover.h"
#include "paladin/k8s/scheduler.h"
#include "paladin/k8s/server_moves.h"
#include "paladin/k8s/usage.h"
#include "paladin/k8s/webhook.h"
#include "paladin/quota/launch.h"
#include "paladin/transfer/transfer.h"

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

}  // namespace kube

namespace {

using kube::AddApiOptions;
using kube::AddServerOptions;
using kube::Config;
using kube::K8sArgs;
using kube::PaladinServer;
using kube::SchedulerOptionsOf;

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

// SIGTERM or SIGINT to a periodic checkpoint or a recovery watch: the pass in flight ends, then
// the command (a pod being stopped: no dump or restore cut short).
volatile std::sig_atomic_t g_k8s_loop_stop = 0;
void OnK8sLoopSignal(int /*signal*/) { g_k8s_loop_stop = 1; }

// Sleeps up to `seconds`, waking early once a stop is asked for; whether one was.
bool SleepUnlessStopped(double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (g_k8s_loop_stop == 0 && std::chrono::steady_clock::now() < until) usleep(100000);
  return g_k8s_loop_stop != 0;
}

void StopOnSignals() {
  struct sigaction action = {};
  action.sa_handler = OnK8sLoopSignal;
  action.sa_flags = SA_RESTART;  // a runc or API call in flight goes on
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

// --host-mounts: runc, CRIU, runc's state folder, the image folders, the key and the driver are
// the node's, where the node has them. In a pod (hostPID, privileged) this process's parent is
// the containerd shim that started its container, which runs in the node's mount namespace; the
// process enters it (setns, before it has any thread), and with it the node's root and the
// mounts the node makes later (a new pod's /dev/shm). The pod's own API credentials are read
// first: its token is in memory already, and each certificate file is kept open and named
// through /proc/self/fd, which the node's /proc (the same pid namespace) resolves; so is the
// image's paladin-gpu-call (below).
Status EnterHostMounts(k8s::ApiConfig* config) {
  const pid_t parent = getppid();
  if (parent <= 0) {
    return FailedPrecondition(
        "--host-mounts: this process's parent is outside its pid namespace: run it in a pod with "
        "hostPID: true");
  }
  for (std::string* file :
       {&config->ca_cert_file, &config->client_cert_file, &config->client_key_file}) {
    if (file->empty()) continue;
    const int fd = open(file->c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return FailedPrecondition("--host-mounts: cannot open " + *file + ": " +
                                std::strerror(errno));
    *file = "/proc/self/fd/" + std::to_string(fd);  // kept open for the process's life
  }
  // The driver's checkpoint calls run in a helper program of this image (paladin-gpu-call), which
  // the node's mounts do not have: kept open, without close-on-exec, so that the helper started
  // later (posix_spawn) executes it through its own /proc/self/fd.
  if (StatusOr<std::string> helper =
          ckpt::FindHelperProgram("paladin-gpu-call", "PALADIN_GPU_CALL");
      helper.ok() && helper->rfind("/proc/self/fd/", 0) != 0) {
    const int fd = open(helper->c_str(), O_RDONLY);  // NOLINT(android-cloexec-open): inherited
    if (fd >= 0) setenv("PALADIN_GPU_CALL", ("/proc/self/fd/" + std::to_string(fd)).c_str(), 1);
  }
  const std::string ns_path = "/proc/" + std::to_string(parent) + "/ns/mnt";
  const int ns = open(ns_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ns < 0) {
    return FailedPrecondition("--host-mounts: cannot open " + ns_path +
                              " (the mount namespace of "
                              "the process that started this one): " +
                              std::strerror(errno) + "; the pod needs privileged: true");
  }
  struct stat theirs = {}, ours = {};
  if (fstat(ns, &theirs) == 0 && stat("/proc/self/ns/mnt", &ours) == 0 &&
      theirs.st_ino == ours.st_ino && theirs.st_dev == ours.st_dev) {
    close(ns);  // there already (run on the node itself)
    return Status::Ok();
  }
  if (setns(ns, CLONE_NEWNS) != 0) {
    const int e = errno;
    close(ns);
    return FailedPrecondition(
        "--host-mounts: cannot enter the mount namespace of pid " + std::to_string(parent) + ": " +
        std::strerror(e) +
        (e == EINVAL ? " (the process has threads already)" : "; the pod needs privileged: true"));
  }
  close(ns);
  for (const std::string* file :
       {&config->ca_cert_file, &config->client_cert_file, &config->client_key_file}) {
    if (!file->empty() && access(file->c_str(), R_OK) != 0) {
      return FailedPrecondition("--host-mounts: the node's mounts have no /proc to find " + *file +
                                " in");
    }
  }
  return Status::Ok();
}

// The API configuration of a command run on the node: --host-mounts entered after it is read.
StatusOr<k8s::ApiConfig> NodeConfig(const K8sArgs& args) {
  StatusOr<k8s::ApiConfig> config = Config(args);
  if (!config.ok() || !args.host_mounts) return config;
  if (Status s = EnterHostMounts(&*config); !s.ok()) return s;
  return config;
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

int RunCheckpoint(const K8sArgs& args) {
  StatusOr<k8s::ApiConfig> config = NodeConfig(args);
  if (!config.ok()) {
    cli::Say("k8s checkpoint", config.status().message());
    return 2;
  }
  k8s::CheckpointOptions o;
  o.node = args.node;
  o.to_images = args.move.to_images;
  o.to_mover = args.move.to_mover;
  o.move = args.move;
  const k8s::ApiClient client(*config);
  if (args.every_s > 0) StopOnSignals();
  std::set<std::string> said_left;  // a pod left, and why, is said once, not every pass
  for (;;) {
    const std::function<void(const std::string&)> progress = TimedProgress("checkpoint");
    StatusOr<k8s::CheckpointResult> r = k8s::CheckpointNode(client, o, progress);
    if (!r.ok()) {
      cli::Say("k8s checkpoint", r.status().message());
      if (args.every_s <= 0) return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
    } else {
      for (const std::string& t : r->taken) std::printf("taken %s\n", t.c_str());
      for (const std::string& l : r->left) {
        if (said_left.insert(l).second) std::printf("left %s\n", l.c_str());
      }
      const std::string where = o.to_mover.empty() ? o.to_images : "the mover at " + o.to_mover;
      std::printf("checkpointed %zu pod(s) of %s into %s, %zu left, %d older image(s) removed\n",
                  r->taken.size(), o.node.c_str(), where.c_str(), r->left.size(), r->removed);
      std::fflush(stdout);
      if (args.every_s <= 0) return 0;
    }
    if (SleepUnlessStopped(args.every_s)) {
      std::fprintf(stderr, "paladin k8s checkpoint: stopped by a signal after a whole pass\n");
      return 0;
    }
  }
}

int RunRecover(const K8sArgs& args) {
  StatusOr<k8s::ApiConfig> config = NodeConfig(args);
  if (!config.ok()) {
    cli::Say("k8s recover", config.status().message());
    return 2;
  }
  if (args.lost_node.empty() == (args.watch_s <= 0)) {
    cli::Say("k8s recover", "give the lost node, or --watch SECONDS to recover every node lost");
    return 2;
  }
  k8s::RecoverOptions o;
  o.lost_node = args.lost_node;
  o.lost_after_s = args.lost_after_s;
  o.move = args.move;
  o.move.placement.policy = args.policy;
  const k8s::ApiClient client(*config);
  if (args.watch_s <= 0) {
    StatusOr<k8s::RecoverResult> r = k8s::RecoverNode(client, o, TimedProgress("recover"));
    if (!r.ok()) {
      cli::Say("k8s recover", r.status().message());
      return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
    for (const std::string& p : r->recovered) std::printf("recovered %s\n", p.c_str());
    for (const std::string& l : r->left) std::printf("left %s\n", l.c_str());
    std::printf("recovered %zu pod(s) of lost node %s on %s, %zu left\n", r->recovered.size(),
                o.lost_node.c_str(), o.move.node.c_str(), r->left.size());
    return 0;
  }
  // Watching: every pass, each node counted lost is recovered onto --to; what is said once is
  // not said again.
  std::fprintf(stderr,
               "paladin k8s recover: watching for lost nodes (lost after %.0f s) every %g s\n",
               o.lost_after_s, args.watch_s);
  StopOnSignals();
  std::set<std::string> said;
  auto say = [&said](const std::string& line) {
    if (said.insert(line).second) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
  };
  for (;;) {
    StatusOr<std::vector<std::string>> lost =
        k8s::FindLostNodes(client, o.move.node, o.lost_after_s);
    if (!lost.ok()) say("error: " + lost.status().message() + " (retrying)");
    for (const std::string& node : lost.ok() ? *lost : std::vector<std::string>()) {
      o.lost_node = node;
      StatusOr<k8s::RecoverResult> r = k8s::RecoverNode(client, o, TimedProgress("recover"));
      if (!r.ok()) {
        say("error: " + r.status().message() + " (retrying)");
        continue;
      }
      for (const std::string& p : r->recovered) {
        std::printf("recovered %s (node %s lost)\n", p.c_str(), node.c_str());
        std::fflush(stdout);
      }
      for (const std::string& l : r->left) {
        std::string line = "left " + l;
        line += " (node " + node + " lost)";
        say(line);
      }
    }
    if (SleepUnlessStopped(args.watch_s)) {
      std::fprintf(stderr, "paladin k8s recover: stopped by a signal after a whole pass\n");
      return 0;
    }
  }
}

// `paladin k8s mover --carry-listen`: other nodes' images taken into this node's folder, on a
// thread of its own (after --host-mounts: a process with threads cannot enter the node's mounts).
// 0, or the exit code after saying what is wrong.
int StartCarry(const K8sArgs& args, const k8s::MoveOptions& move,
               std::unique_ptr<k8s::CarryServer>* carry) {
  if (args.carry_listen.empty()) return 0;
  StatusOr<std::pair<std::string, int>> at = transfer::ParseHostPort(args.carry_listen);
  StatusOr<std::string> key =
      at.ok() ? k8s::ReadMoveKey(move.key_file) : StatusOr<std::string>(at.status());
  if (!key.ok()) {
    cli::Say("k8s mover", "--carry-listen '" + args.carry_listen + "': " + key.status().message());
    return 2;
  }
  k8s::CarryServerOptions co;
  co.images = move.images;
  co.key = *key;
  co.bind_address = at->first;
  co.port = at->second;
  co.log = [](const std::string& line) {
    std::fprintf(stderr, "paladin k8s mover: %s\n", line.c_str());
  };
  StatusOr<std::unique_ptr<k8s::CarryServer>> started = k8s::CarryServer::Listen(co);
  if (!started.ok()) {
    cli::Say("k8s mover", "--carry-listen: " + started.status().message());
    return 1;
  }
  *carry = std::move(*started);
  std::fprintf(stderr, "paladin k8s mover: taking other nodes' images into %s on %s:%d\n",
               co.images.c_str(), co.bind_address.c_str(), (*carry)->port());
  return 0;
}

// `paladin k8s mover`: the moves of this node's pods asked of Paladin's server, carried out.
int RunMover(const K8sArgs& args) {
  if (Status s = k8s::CheckNodeName(args.node); !s.ok()) {
    cli::Say("k8s mover", "--node: " + s.message());
    return 2;
  }
  if (args.paladin_server.empty() && !args.carry_listen.empty()) {
    // Only other nodes' images taken (a node that receives moves and checkpoints, no server).
    StatusOr<k8s::MoveOptions> made = MoveOptionsOf(args);
    if (args.host_mounts && made.ok()) {
      StatusOr<k8s::ApiConfig> entered = NodeConfig(args);
      if (!entered.ok()) made = entered.status();
    }
    if (!made.ok()) {
      cli::Say("k8s mover", made.status().message());
      return 2;
    }
    std::unique_ptr<k8s::CarryServer> carry;
    StopOnSignals();
    if (int rc = StartCarry(args, *made, &carry); rc != 0) return rc;
    while (!SleepUnlessStopped(3600)) {
    }
    std::fprintf(stderr, "paladin k8s mover: stopped by a signal\n");
    return 0;
  }
  if (args.paladin_server.empty()) {
    cli::Say("k8s mover",
             "--paladin-server and --paladin-token-file are required: the moves "
             "come from Paladin's server (or --carry-listen alone, to take other nodes' images "
             "only)");
    return 2;
  }
  // Paladin's server's token and CA are the pod's files: read, or kept open and named through
  // /proc/self/fd, before --host-mounts leaves the pod's mounts for the node's.
  K8sArgs own = args;
  if (args.host_mounts && !args.paladin_ca_file.empty()) {
    const int fd = open(args.paladin_ca_file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      cli::Say("k8s mover", "--paladin-ca-file " + args.paladin_ca_file + ": cannot be read");
      return 2;
    }
    own.paladin_ca_file = "/proc/self/fd/" + std::to_string(fd);  // open for the process's life
  }
  StatusOr<k8s::MoveOptions> made = MoveOptionsOf(own);
  StatusOr<std::shared_ptr<api::Client>> server =
      made.ok() ? PaladinServer(own) : StatusOr<std::shared_ptr<api::Client>>(made.status());
  StatusOr<k8s::ApiConfig> config =
      server.ok() ? NodeConfig(own) : StatusOr<k8s::ApiConfig>(server.status());
  if (!config.ok()) {
    cli::Say("k8s mover", config.status().message());
    return 2;
  }
  k8s::MoverOptions o;
  o.node = args.node;
  o.mover = args.mover_name;
  o.settle_after_s = args.settle_after_s;
  o.finish_within_s = args.finish_within_s;
  o.move = *made;
  for (const std::string& pair : args.node_images) {
    const size_t eq = pair.find('=');
    const std::string node = pair.substr(0, eq);
    if (eq == std::string::npos || !k8s::CheckNodeName(node).ok() || eq + 1 == pair.size()) {
      cli::Say("k8s mover", "--node-images '" + pair + "': expected NODE=DIR");
      return 2;
    }
    o.node_images[node] = pair.substr(eq + 1);
  }
  for (const std::string& pair : args.node_movers) {
    const size_t eq = pair.find('=');
    const std::string node = pair.substr(0, eq);
    if (eq == std::string::npos || !k8s::CheckNodeName(node).ok() ||
        !transfer::ParseHostPort(pair.substr(eq + 1)).ok()) {
      cli::Say("k8s mover", "--node-movers '" + pair + "': expected NODE=HOST:PORT");
      return 2;
    }
    o.node_movers[node] = pair.substr(eq + 1);
  }
  if (Status s = k8s::CheckNodeName(args.cluster); !s.ok()) {
    cli::Say("k8s mover", "--cluster: " + s.message());
    return 2;
  }
  o.cluster = args.cluster;
  o.carry_port = args.carry_port;
  o.mover_pods = args.mover_pods;
  // Images other nodes' movers carry here, for moves to this node between machines.
  std::unique_ptr<k8s::CarryServer> carry;
  if (int rc = StartCarry(args, o.move, &carry); rc != 0) return rc;
  const k8s::ApiClient client(*config);
  if (args.every_s > 0) {
    StopOnSignals();
    std::fprintf(stderr,
                 "paladin k8s mover: carrying out the moves of node %s's pods asked of %s, "
                 "every %g s\n",
                 o.node.c_str(), args.paladin_server.c_str(), args.every_s);
  }
  std::string last_error;
  for (;;) {
    StatusOr<int> taken = k8s::RunServerMoves(client, **server, o, TimedProgress("mover"));
    if (!taken.ok()) {
      if (args.every_s <= 0) {
        cli::Say("k8s mover", taken.status().message());
        return 1;
      }
      if (taken.status().message() != last_error) {
        last_error = taken.status().message();
        cli::Say("k8s mover", last_error + " (retrying)");
      }
    } else {
      last_error.clear();
      if (args.every_s <= 0) {
        std::printf("mover of %s: %d move(s) taken\n", o.node.c_str(), *taken);
        return 0;
      }
    }
    if (SleepUnlessStopped(args.every_s)) {
      std::fprintf(stderr, "paladin k8s mover: stopped by a signal after a whole pass\n");
      return 0;
    }
  }
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

  CLI::App* checkpoint = k8s->add_subcommand(
      "checkpoint",
      "Checkpoint each running pod of the RuntimeClass paladin on this node, leaving it running, "
      "into a folder that outlives the node (on the node, as root)");
  checkpoint->add_option("--node", args->node, "This node's name")->required();
  checkpoint->add_option("--to-images", m.to_images,
                         "Where the images go: the recovery node's image folder, or a shared "
                         "one every node mounts as its own");
  checkpoint->add_option("--to-mover", m.to_mover,
                         "HOST:PORT: or the recovery node's mover (`k8s mover --carry-listen`), "
                         "to which each image is sent over the network, older ones removed there");
  checkpoint->add_option("--key", m.key_file, "The cluster's move key (with --to-mover)");
  checkpoint->add_option("--every", args->every_s,
                         "Checkpoint again every so many seconds, never exiting; default 0: once");
  checkpoint->add_option("--runc", m.runc, "runc on this node");
  checkpoint->add_option("--runc-root", m.runc_root,
                         "runc's state folder of containerd's k8s.io pods");
  checkpoint->add_option("--criu-dir", m.criu_dir,
                         "Folder of Paladin's criu, first on runc's PATH");
  checkpoint->add_option("--images", m.images, "This node's image folder (CRIU's work files)");
  checkpoint->add_option("--driver", m.driver, "CUDA driver for the checkpoint API");
  checkpoint->add_option("--nvml", m.nvml, "NVML library naming the GPUs");
  checkpoint->add_flag(
      "--host-mounts", args->host_mounts,
      "In a pod (hostPID, privileged): enter the node's mount namespace (its containerd "
      "shim's), so that runc, CRIU and every folder are the node's, at the node's paths");
  AddApiOptions(checkpoint, args.get());
  checkpoint->callback([args, exit_code] { *exit_code = RunCheckpoint(*args); });

  CLI::App* recover = k8s->add_subcommand(
      "recover",
      "Bring a lost node's pods of the RuntimeClass paladin back on another node from their "
      "last periodic checkpoint, exactly once (on that node, as root)");
  recover->add_option("node", args->lost_node, "The lost node (or --watch)");
  recover->add_option("--watch", args->watch_s,
                      "Every so many seconds, recover every node counted lost onto --to, never "
                      "exiting (the automatic mode)");
  recover->add_option("--to", m.node, "The node its pods come back on")->required();
  recover->add_option("--lost-after", args->lost_after_s,
                      "Seconds since its kubelet's last lease renewal after which a node still "
                      "marked Ready counts as lost (default 40)");
  recover->add_option("--images", m.images,
                      "The folder holding the checkpoints: the --to node's image folder");
  recover->add_option("--runc", m.runc, "runc on the --to node");
  recover->add_option("--runc-root", m.runc_root, "The --to node's runc state folder");
  recover->add_option("--criu-dir", m.criu_dir, "Folder of Paladin's criu, first on runc's PATH");
  recover->add_option("--key", m.key_file, "The cluster's move key");
  recover->add_option("--driver", m.driver, "CUDA driver for the checkpoint API");
  recover->add_option("--nvml", m.nvml, "NVML library naming the GPUs");
  recover->add_option("--timeout", m.timeout_s, "Seconds each new pod has to run");
  recover->add_option("--policy", args->policy,
                      "Packing policy choosing each GPU pod's GPU on --to (the scheduler's "
                      "--policy)");
  recover->add_flag(
      "--host-mounts", args->host_mounts,
      "In a pod (hostPID, privileged): enter the node's mount namespace (its containerd "
      "shim's), so that runc, CRIU and every folder are the node's, at the node's paths");
  AddApiOptions(recover, args.get());
  recover->callback([args, exit_code] { *exit_code = RunRecover(*args); });

  CLI::App* mover = k8s->add_subcommand(
      "mover",
      "Carry out the moves of this node's pods that users ask of Paladin's server (`paladin pods "
      "move`): each taken once, moved as `k8s move` moves it (on the node, as root)");
  mover->add_option("--node", args->node, "This node's name")->required();
  mover->add_option("--every", args->every_s,
                    "Ask the server again every so many seconds, never exiting; default 0: once");
  mover->add_option("--node-images", args->node_images,
                    "NODE=DIR: another node's image folder, reachable from here, for moves there "
                    "(repeatable)");
  mover->add_option("--node-movers", args->node_movers,
                    "NODE=HOST:PORT: another node's mover (its --carry-listen), to which the "
                    "images of moves there are sent over the network (repeatable)");
  mover->add_option(
      "--carry-listen", args->carry_listen,
      "ADDR:PORT: listen there for the images other nodes' movers and checkpointers send "
      "(each image's transfer on PORT+1, authenticated by the move key) and put them in this "
      "node's folder (--images)");
  mover
      ->add_option("--carry-port", args->carry_port,
                   "A move to a node that --node-images and --node-movers do not name sends its "
                   "image to the mover pod on that node (--mover-pods) at its pod IP and this "
                   "port (its --carry-listen port); default 0: no such lookup")
      ->check(CLI::Range(0, 65535));
  mover->add_option("--mover-pods", args->mover_pods,
                    "NAMESPACE/KEY=VALUE: the movers' pods, for --carry-port (default "
                    "paladin/app.kubernetes.io/name=paladin-mover)");
  mover->add_option("--cluster", args->cluster,
                    "This cluster's name, as its scheduler's --cluster gives it (default "
                    "\"default\"): the moves taken are this cluster's only");
  mover->add_option("--mover-name", args->mover_name,
                    "The name the server's ledger gives this mover (default: the node's)");
  mover
      ->add_option("--settle-after", args->settle_after_s,
                   "Seconds a move this mover's name took and did not finish (a mover stopped "
                   "in the middle of it) waits before a pass settles it (default 0: a pass "
                   "holds the node's lock, so none is in flight)")
      ->check(CLI::NonNegativeNumber);
  mover
      ->add_option("--finish-within", args->finish_within_s,
                   "Seconds after it was taken that a move stopped after its checkpoint (the "
                   "destination unreachable) is tried again each pass; then its pod is restored "
                   "on this node from the image instead (default 300)")
      ->check(CLI::NonNegativeNumber);
  mover->add_option("--runc", m.runc, "runc on this node");
  mover->add_option("--runc-root", m.runc_root, "runc's state folder of containerd's k8s.io pods");
  mover->add_option("--criu-dir", m.criu_dir, "Folder of Paladin's criu, first on runc's PATH");
  mover->add_option("--images", m.images, "This node's checkpoint images");
  mover->add_option("--key", m.key_file, "The cluster's move key");
  mover->add_option("--driver", m.driver, "CUDA driver for the checkpoint API");
  mover->add_option("--nvml", m.nvml, "NVML library naming the GPUs");
  mover->add_option("--timeout", m.timeout_s, "Seconds each new pod has to run");
  mover->add_flag(
      "--host-mounts", args->host_mounts,
      "In a pod (hostPID, privileged): enter the node's mount namespace (its containerd "
      "shim's), so that runc, CRIU and every folder are the node's, at the node's paths");
  AddPlacementOptions(mover, args.get());
  AddApiOptions(mover, args.get());
  mover->callback([args, exit_code] { *exit_code = RunMover(*args); });

  CLI::App* gpus = k8s->add_subcommand("gpus", "This node's GPUs and their memory in use");
  gpus->add_option("--nvml", args->nvml, "NVML library to read the GPUs from");
  gpus->callback([args, exit_code] { *exit_code = RunGpus(*args); });
}

}  // namespace paladin::cli