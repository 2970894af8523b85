// `paladin k8s checkpoint`, `recover` and `mover`: the node's long-running components (a
// periodic checkpointer, the recovery of lost nodes' pods, the mover of the moves asked of
// Paladin's server and its carry listener), each able to act in the node's mount namespace from
// a pod (--host-mounts). The one-shot node commands are in k8s.cc.
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "k8s_args.h"
#include "paladin/ckpt/workload.h"
#include "paladin/k8s/api.h"
#include "paladin/k8s/carry.h"
#include "paladin/k8s/move.h"
#include "paladin/k8s/recover.h"
#include "paladin/k8s/server_moves.h"
#include "paladin/transfer/transfer.h"

namespace paladin::cli::kube {

namespace {

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
  // --to-mover-node: the recovery node's mover, looked up at each pass (its pod IP changes when
  // it is started again).
  k8s::MoverOptions find;
  find.mover_pods = args.mover_pods;
  find.carry_port = args.carry_port;
  if (!args.to_mover_node.empty()) {
    Status bad = !o.to_images.empty() || !o.to_mover.empty()
                     ? InvalidArgument("give one of --to-images, --to-mover and --to-mover-node")
                 : args.carry_port <= 0
                     ? InvalidArgument(
                           "--to-mover-node needs --carry-port: the port of the movers' "
                           "--carry-listen")
                     : k8s::CheckNodeName(args.to_mover_node);
    if (!bad.ok()) {
      cli::Say("k8s checkpoint", bad.message());
      return 2;
    }
  }
  // On the recovery node itself (the chart runs a checkpointer on every GPU node): its pods'
  // images would be lost with it, and nobody would recover them, so none is taken (no pause).
  if (args.to_mover_node == args.node) {
    std::printf(
        "node %s is the recovery node (--to-mover-node): its pods' images would be lost "
        "with it; none taken\n",
        args.node.c_str());
    std::fflush(stdout);
    if (args.every_s > 0) {
      StopOnSignals();
      while (!SleepUnlessStopped(args.every_s)) {
      }
    }
    return 0;
  }
  const k8s::ApiClient client(*config);
  if (args.every_s > 0) StopOnSignals();
  std::set<std::string> said_left;  // a pod left, and why, is said once, not every pass
  for (;;) {
    const std::function<void(const std::string&)> progress = TimedProgress("checkpoint");
    StatusOr<k8s::CheckpointResult> r = [&]() -> StatusOr<k8s::CheckpointResult> {
      if (!args.to_mover_node.empty()) {
        StatusOr<std::string> at = k8s::FindMover(client, find, args.to_mover_node);
        if (!at.ok()) {
          return Status(at.status().code(), "the recovery node's mover: " + at.status().message() +
                                                ": nothing checkpointed in this pass");
        }
        o.to_mover = *at;
      }
      return k8s::CheckpointNode(client, o, progress);
    }();
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

void AddHostMountsFlag(CLI::App* app, K8sArgs* args) {
  app->add_flag("--host-mounts", args->host_mounts,
                "In a pod (hostPID, privileged): enter the node's mount namespace (its containerd "
                "shim's), so that runc, CRIU and every folder are the node's, at the node's paths");
}

}  // namespace

void RegisterServiceCommands(CLI::App* k8s, const std::shared_ptr<K8sArgs>& args, int* exit_code) {
  k8s::MoveOptions& m = args->move;
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
  checkpoint->add_option("--to-mover-node", args->to_mover_node,
                         "NODE: or the recovery node by name: the mover pod on it (--mover-pods) "
                         "at its pod IP and --carry-port, looked up at each pass");
  checkpoint
      ->add_option("--carry-port", args->carry_port,
                   "With --to-mover-node: the port of the movers' --carry-listen")
      ->check(CLI::Range(0, 65535));
  checkpoint->add_option("--mover-pods", args->mover_pods,
                         "NAMESPACE/KEY=VALUE: the movers' pods, for --to-mover-node (default "
                         "paladin/app.kubernetes.io/name=paladin-mover)");
  checkpoint->add_option("--key", m.key_file,
                         "The cluster's move key (with --to-mover or --to-mover-node)");
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
  AddHostMountsFlag(checkpoint, args.get());
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
  AddHostMountsFlag(recover, args.get());
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
  AddHostMountsFlag(mover, args.get());
  AddPlacementOptions(mover, args.get());
  AddApiOptions(mover, args.get());
  mover->callback([args, exit_code] { *exit_code = RunMover(*args); });
}

}  // namespace paladin::cli::kube
