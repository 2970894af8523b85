#include "paladin/k8s/move.h"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "node_ops.h"
#include "paladin/api/wire.h"
#include "paladin/base/size.h"
#include "paladin/ckpt/gpu_checkpoint.h"
#include "paladin/ckpt/subprocess.h"
#include "paladin/gpu/nvml.h"
#include "paladin/k8s/carry.h"
#include "paladin/k8s/placement_pass.h"
#include "paladin/k8s/recover.h"
#include "paladin/k8s/scheduler.h"
#include "paladin/migrate/control.h"
#include "paladin/transfer/transfer.h"

namespace paladin::k8s {

using detail::ImageName;
using detail::MsSince;
using detail::ReadKey;
using detail::Runc;
using detail::WriteFile;
namespace fs = std::filesystem;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string RestoreToken(const std::string& key, const std::string& image, const std::string& ns,
                         const std::string& pod) {
  return migrate::HmacSha256Hex(key,
                                "paladin-restore-v1\n" + image + "\n" + ns + "\n" + pod + "\n");
}

std::string NextPodName(const std::string& name) {
  const size_t at = name.rfind("-m");
  if (at != std::string::npos && at + 2 < name.size() &&
      name.find_first_not_of("0123456789", at + 2) == std::string::npos && name.size() - at < 9) {
    return name.substr(0, at) + "-m" + std::to_string(std::stol(name.substr(at + 2)) + 1);
  }
  return name + "-m1";
}

StatusOr<MovablePod> ReadMovablePod(const std::string& pod_json, bool running) {
  const Json pod = Json::parse(pod_json, nullptr, false);
  if (!pod.is_object()) return InvalidArgument("the pod is not a JSON object");
  const Json meta = pod.value("metadata", Json::object());
  const Json spec = pod.value("spec", Json::object());
  const Json status = pod.value("status", Json::object());
  MovablePod p;
  p.ns = Str(meta, "namespace");
  p.name = Str(meta, "name");
  p.uid = Str(meta, "uid");
  p.node = Str(spec, "nodeName");
  const std::string who = "pod " + p.ns + "/" + p.name;
  if (meta.contains("deletionTimestamp")) return FailedPrecondition(who + " is being deleted");
  // A controller (ReplicaSet, Job, StatefulSet, ...) would start a pod afresh when the old one is
  // deleted, beside the restored one: two copies. Such pods are not moved.
  for (const Json& ref : meta.value("ownerReferences", Json::array())) {
    if (!ref.is_object() || !ref.value("controller", false)) continue;
    return FailedPrecondition(who + " is managed by " + Str(ref, "kind") + " " + Str(ref, "name") +
                              " (metadata.ownerReferences), which would start it afresh once the "
                              "old pod is deleted, a second copy beside the moved one: moves of "
                              "a controller's pods are not built");
  }
  if (running && Str(status, "phase") != "Running") {
    return FailedPrecondition(who + " is not Running (phase '" + Str(status, "phase") + "')");
  }
  if (Str(spec, "runtimeClassName") != kRuntimeClass) {
    return FailedPrecondition(who + " does not run under the RuntimeClass '" +
                              std::string(kRuntimeClass) +
                              "' (spec.runtimeClassName): a new pod could not be restored from "
                              "its checkpoint");
  }
  const Json containers = spec.value("containers", Json::array());
  if (containers.size() != 1 || !spec.value("initContainers", Json::array()).empty()) {
    return FailedPrecondition(who + " has " + std::to_string(containers.size()) +
                              " containers (and init containers): moves of pods with one container "
                              "only are built");
  }
  p.container = Str(containers[0], "name");
  for (const Json& c : status.value("containerStatuses", Json::array())) {
    if (Str(c, "name") != p.container) continue;
    const Json state = c.value("state", Json::object());
    if (running && !state.contains("running")) break;
    // A container that has exited (and is not started again: a move's) keeps its id in its
    // state or, once the kubelet tried again, in its last state.
    std::string id = Str(c, "containerID");
    if (id.empty()) {
      id = Str(c.value("lastState", Json::object()).value("terminated", Json::object()),
               "containerID");
    }
    const size_t at = id.find("://");
    p.container_id = at == std::string::npos ? id : id.substr(at + 3);
  }
  if (running && p.container_id.empty()) {
    return FailedPrecondition(who + ": its container '" + p.container + "' is not running");
  }
  const std::string gpu = Str(meta.value("annotations", Json::object()), kGpuAnnotation);
  if (!gpu.empty()) {
    char* end = nullptr;
    const long v = std::strtol(gpu.c_str(), &end, 10);
    if (end == gpu.c_str() || *end != '\0' || v < 0 || v > 1024) {
      return InvalidArgument(who + ": annotation " + kGpuAnnotation + " '" + gpu +
                             "' is not a GPU index");
    }
    p.gpu = static_cast<int>(v);
  }
  return p;
}

StatusOr<std::string> ReplacementPod(const std::string& old_pod_json, const Replacement& r) {
  const Json old = Json::parse(old_pod_json, nullptr, false);
  if (!old.is_object()) return InvalidArgument("the pod is not a JSON object");
  const Json meta = old.value("metadata", Json::object());
  Json annotations = Json::object();
  // What Paladin's scheduler and the move set are set again; kubectl's record is of the old pod.
  const Json old_annotations = meta.value("annotations", Json::object());
  for (const auto& [k, v] : old_annotations.items()) {
    if (k == kGpuAnnotation || k == kGpuBytesAnnotation || k == kPlacementAnnotation ||
        k == kRestoreFromAnnotation || k == kRestoreTokenAnnotation || k == kMoveToAnnotation ||
        k == kMovedFromAnnotation || k == "kubectl.kubernetes.io/last-applied-configuration") {
      continue;
    }
    annotations[k] = v;
  }
  annotations[kRestoreFromAnnotation] = r.image;
  annotations[kRestoreTokenAnnotation] = r.token;
  annotations[kMovedFromAnnotation] =
      Str(meta, "namespace") + "/" + Str(meta, "name") + " (" + Str(meta, "uid") + ")";
  Json spec = old.value("spec", Json::object());
  spec.erase("nodeName");
  // The priority admission computes it again from priorityClassName.
  spec.erase("priority");
  if (r.gpu >= 0) {
    annotations[kMoveToAnnotation] = r.node + "/" + std::to_string(r.gpu);
  } else {
    spec["nodeName"] = r.node;
  }
  Json out = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", r.name}, {"namespace", Str(meta, "namespace")}, {"annotations", annotations}}},
      {"spec", spec}};
  if (meta.contains("labels")) out["metadata"]["labels"] = meta["labels"];
  return out.dump();
}

Status CheckDestinationNode(const std::string& node_json) {
  const Json node = Json::parse(node_json, nullptr, false);
  if (!node.is_object()) return InvalidArgument("the node is not a JSON object");
  const std::string name = Str(node.value("metadata", Json::object()), "name");
  if (node.value("spec", Json::object()).value("unschedulable", false)) {
    return FailedPrecondition("node " + name + " is cordoned (spec.unschedulable): no move to it");
  }
  for (const Json& c : node.value("status", Json::object()).value("conditions", Json::array())) {
    if (Str(c, "type") == "Ready") {
      if (Str(c, "status") == "True") return Status::Ok();
      return FailedPrecondition("node " + name + " is not Ready (" + Str(c, "reason") + ")");
    }
  }
  return FailedPrecondition("node " + name + " reports no Ready condition");
}

Status CheckTarget(const MovablePod& pod, MoveOptions& o) {
  const std::string who = "pod " + pod.ns + "/" + pod.name;
  if (o.node.empty()) o.node = pod.node;
  const bool between_nodes = o.node != pod.node;
  if (between_nodes && o.to_images.empty() && o.to_mover.empty()) {
    return InvalidArgument("a move to node " + o.node + " needs node " + o.node +
                           "'s image folder (--to-images) or its mover's address (--to-mover), "
                           "where the image is carried");
  }
  if (!o.to_images.empty() && !o.to_mover.empty()) {
    return InvalidArgument("--to-images and --to-mover both name where the image goes: give one");
  }
  if (!o.to_mover.empty()) {
    if (StatusOr<std::pair<std::string, int>> hp = transfer::ParseHostPort(o.to_mover); !hp.ok()) {
      return InvalidArgument("--to-mover '" + o.to_mover + "': " + hp.status().message());
    }
  }
  if (pod.gpu < 0 && o.gpu >= 0) {
    return FailedPrecondition(who + " has no Paladin GPU (annotation " + kGpuAnnotation +
                              "): --gpu moves only pods Paladin placed on a GPU");
  }
  if (!between_nodes && pod.gpu >= 0 && o.gpu == pod.gpu) {
    return InvalidArgument(who + " is on GPU " + std::to_string(o.gpu) + " already");
  }
  return Status::Ok();
}

namespace detail {

// A fault for tests (PALADIN_K8S_MOVE_FAULT=crash:POINT): the mover killed at POINT, as a node's
// mover can be at any instant.
void CrashPoint(const std::string& point) {
  const char* fault = std::getenv("PALADIN_K8S_MOVE_FAULT");
  if (fault != nullptr && fault == "crash:" + point) raise(SIGKILL);
}

// This node's GPUs' UUIDs by index (NVML), checked to hold the pod's GPU and, where the target
// is on this machine (this node, or a node of it reached through a folder: the test cluster's),
// the target's. A target on another machine (--to-mover) is that machine's index: its runtime
// maps the pod's GPU there.
StatusOr<std::vector<std::string>> MoveGpuUuids(const MoveOptions& o, const MovablePod& pod,
                                                const MoveOptions& target) {
  StatusOr<std::vector<std::string>> uuids = GpuUuids(o.nvml);
  if (!uuids.ok()) return uuids.status();
  const bool target_here = target.node == pod.node || o.to_mover.empty();
  std::vector<int> checked = {pod.gpu};
  if (target_here) checked.push_back(target.gpu);
  for (int g : checked) {
    if (g < 0 || static_cast<size_t>(g) >= uuids->size() ||
        (*uuids)[static_cast<size_t>(g)].empty()) {
      return InvalidArgument("node " + pod.node + " has no GPU " + std::to_string(g) + " (" +
                             std::to_string(uuids->size()) + " GPUs)");
    }
  }
  return uuids;
}

// The second half of a move, from its whole image `result->image` in this node's folder (or in
// the destination's, carried already): the image carried to the destination when it is not
// there yet, the replacement created and run, the GPU state restored where the destination's
// runtime did not, the old pod deleted. `driver` may be null (loaded when needed). Errors say
// where the image is kept.
Status FinishFromImage(const ApiClient& client, const MoveOptions& o, const std::string& body,
                       const MovablePod& pod, const MoveOptions& target, const std::string& key,
                       const std::vector<std::string>& uuids, ckpt::GpuCheckpointer* driver,
                       Clock::time_point t0, MoveResult* result,
                       const std::function<void(const std::string&)>& progress) {
  const std::string who = "pod " + o.ns + "/" + o.pod;
  const bool between_nodes = target.node != pod.node;
  const std::string dir = o.images + "/" + result->image;
  const Runc to_runc{o, o.to_runc_root.empty() ? o.runc_root : o.to_runc_root};
  std::error_code ec;
  std::string kept =
      " (the checkpoint image " + dir + " is kept; " + who + "'s container has exited)";
  const bool by_network = between_nodes && !o.to_mover.empty();
  if (by_network) {
    // Sent to the destination's mover; this node's copy stays until the replacement runs, so
    // that a pass resuming this move finds it (the destination then says it has it).
    StatusOr<std::pair<std::string, int>> hp = transfer::ParseHostPort(o.to_mover);
    if (!hp.ok()) return hp.status();
    progress("carrying the image to node " + target.node + "'s mover at " + o.to_mover);
    const Clock::time_point c0 = Clock::now();
    StatusOr<CarryReport> carried = CarryImageTo(dir, hp->first, hp->second, key, progress);
    if (!carried.ok()) {
      return Status(carried.status().code(), carried.status().message() + kept);
    }
    result->carry_ms = MsSince(c0);
    kept = " (the checkpoint image " + dir + " is kept, and node " + target.node + " has it; " +
           who + "'s container has exited)";
  } else if (between_nodes) {
    const std::string to_dir = o.to_images + "/" + result->image;
    if (!fs::exists(to_dir, ec)) {
      progress("carrying the image to node " + target.node + "'s folder " + to_dir);
      const Clock::time_point c0 = Clock::now();
      if (Status s = CarryImage(dir, to_dir); !s.ok()) return Status(s.code(), s.message() + kept);
      result->carry_ms = MsSince(c0);
    }
    fs::remove_all(dir, ec);
    kept = " (the checkpoint image " + to_dir + " is kept; " + who + "'s container has exited)";
  }

  Replacement r;
  r.name = result->new_name;
  r.image = result->image;
  r.token = RestoreToken(key, r.image, o.ns, r.name);
  r.node = target.node;
  r.gpu = target.gpu;
  StatusOr<std::string> replacement = ReplacementPod(body, r);
  if (!replacement.ok()) return replacement.status();
  progress("creating pod " + o.ns + "/" + r.name + " restored from " + r.image + " on " + r.node +
           (r.gpu >= 0 ? "/" + std::to_string(r.gpu) : ""));
  StatusOr<std::string> created = client.Post("/api/v1/namespaces/" + o.ns + "/pods", *replacement);
  if (!created.ok()) return Status(created.status().code(), created.status().message() + kept);
  StatusOr<std::string> new_id =
      WaitRunning(client, "/api/v1/namespaces/" + o.ns + "/pods/" + r.name, o.timeout_s);
  if (!new_id.ok()) return Status(new_id.status().code(), new_id.status().message() + kept);

  // The destination's runtime restored the GPU state itself where it is set up to (it leaves a
  // mark beside the image); else it is restored from here, through the destination's runc state.
  const std::string restored_mark = (between_nodes ? o.to_images : o.images) + "/" + result->image +
                                    "/" + pod.container + kGpuRestoredSuffix;
  bool restored_there = false;
  if (target.gpu >= 0 && by_network) {
    StatusOr<std::pair<std::string, int>> hp = transfer::ParseHostPort(o.to_mover);
    StatusOr<bool> has = hp.ok() ? CarriedImageHas(hp->first, hp->second, key, result->image,
                                                   pod.container + kGpuRestoredSuffix)
                                 : StatusOr<bool>(hp.status());
    if (!has.ok()) return Status(has.status().code(), has.status().message() + kept);
    // Another machine's processes are out of this node's reach: its runtime must have done it.
    if (!*has) {
      return FailedPrecondition(
          "node " + target.node + "'s runtime did not restore the GPU state of " + o.ns + "/" +
          r.name +
          " (its RuntimeClass paladin needs PALADIN_K8S_PALADIN: docs/kubernetes.md, "
          "\"Moving to another node\")" +
          kept);
    }
    restored_there = true;
  } else if (target.gpu >= 0) {
    restored_there = fs::exists(restored_mark, ec);
  }
  if (restored_there) {
    progress("GPU state of " + o.ns + "/" + r.name + " restored onto GPU " +
             std::to_string(target.gpu) + " by node " + target.node + "'s runtime");
  } else if (target.gpu >= 0) {
    std::unique_ptr<ckpt::GpuCheckpointer> loaded;
    if (driver == nullptr) {
      StatusOr<std::unique_ptr<ckpt::GpuCheckpointer>> l = ckpt::GpuCheckpointer::Load(o.driver);
      if (!l.ok()) return Status(l.status().code(), l.status().message() + kept);
      loaded = std::move(*l);
      driver = loaded.get();
    }
    StatusOr<std::vector<pid_t>> new_pids = to_runc.Pids(*new_id);
    if (!new_pids.ok()) return Status(new_pids.status().code(), new_pids.status().message() + kept);
    const std::vector<pid_t> restored = driver->CudaProcesses(*new_pids);
    if (restored.empty()) {
      return Internal("the replacement's processes answer no GPU checkpoint call" + kept);
    }
    const std::vector<std::pair<std::string, std::string>> remap = {
        {uuids[static_cast<size_t>(pod.gpu)], uuids[static_cast<size_t>(target.gpu)]}};
    for (pid_t p : restored) {
      progress("restoring the GPU state of pid " + std::to_string(p) + " onto GPU " +
               std::to_string(target.gpu) + " (" + remap[0].second + ")");
      Status s = driver->Restore(p, remap);
      if (s.ok()) s = driver->Unlock(p);
      if (!s.ok()) return Status(s.code(), s.message() + kept);
    }
  }
  result->paused_ms = MsSince(t0);
  if (by_network) fs::remove_all(dir, ec);  // the replacement runs from the destination's copy
  progress("deleting pod " + o.ns + "/" + o.pod);
  StatusOr<std::string> deleted = client.Delete("/api/v1/namespaces/" + o.ns + "/pods/" + o.pod);
  if (!deleted.ok()) {
    return Status(deleted.status().code(),
                  "the replacement runs, but deleting " + who + ": " + deleted.status().message());
  }
  return Status::Ok();
}

}  // namespace detail

using detail::CrashPoint;
using detail::FinishFromImage;
using detail::kCheckpointedMark;
using detail::MoveGpuUuids;

StatusOr<MoveResult> MovePod(const ApiClient& client, const MoveOptions& o,
                             const std::function<void(const std::string&)>& progress,
                             bool* whole_image) {
  if (whole_image != nullptr) *whole_image = false;
  const std::string pod_path = "/api/v1/namespaces/" + o.ns + "/pods/" + o.pod;
  StatusOr<std::string> body = client.Get(pod_path);
  if (!body.ok()) return body.status();
  StatusOr<MovablePod> pod = ReadMovablePod(*body);
  if (!pod.ok()) return pod.status();
  const std::string who = "pod " + o.ns + "/" + o.pod;
  MoveOptions target = o;
  if (Status s = CheckTarget(*pod, target); !s.ok()) return s;
  const bool between_nodes = target.node != pod->node;
  MoveResult result;
  result.from_gpu = pod->gpu;
  result.to_gpu = target.gpu;
  result.from_node = pod->node;
  result.to_node = target.node;
  result.new_name = o.new_name.empty() ? NextPodName(o.pod) : o.new_name;
  if (between_nodes) {
    // The destination must be able to run the replacement before the pod is checkpointed.
    StatusOr<std::string> node = client.Get("/api/v1/nodes/" + target.node);
    if (!node.ok()) {
      return Status(node.status().code(), "node " + target.node + ": " + node.status().message());
    }
    if (Status s = CheckDestinationNode(*node); !s.ok()) return s;
  }
  if (pod->gpu >= 0) {
    // Where the replacement goes, decided before anything is stopped: the packer's choice of the
    // destination's GPUs, or the room on the GPU given, and the team's quota for a second copy.
    // Within its node the pod's own share is left out of the books: it is leaving it.
    StatusOr<std::unique_ptr<ReplacementPlacer>> placer =
        ReplacementPlacer::Create(client, o.placement, between_nodes ? "" : pod->uid);
    if (!placer.ok()) return placer.status();
    const PodOutcome where = (*placer)->Place(*body, target.node, target.gpu);
    if (!where.placed) {
      return FailedPrecondition(who + " cannot move to node " + target.node + ": " + where.reason +
                                " (left running as it was)");
    }
    if (!between_nodes && where.gpu == pod->gpu) {
      return FailedPrecondition(who + " is on GPU " + std::to_string(pod->gpu) +
                                ", where Paladin's packer would place it now: nothing to move "
                                "(--gpu N moves it anyway; left running as it was)");
    }
    if (target.gpu < 0) progress("GPU chosen: " + where.how);
    target.gpu = where.gpu;
    result.to_gpu = target.gpu;
  }
  std::vector<std::string> uuids;
  if (target.gpu >= 0) {
    StatusOr<std::vector<std::string>> got = MoveGpuUuids(o, *pod, target);
    if (!got.ok()) return got.status();
    uuids = *got;
  }
  StatusOr<std::string> key = ReadKey(o.key_file);
  if (!key.ok()) return key.status();
  if (between_nodes && !o.to_mover.empty()) {
    // The destination's mover must take this node's images before the pod is checkpointed.
    StatusOr<std::pair<std::string, int>> hp = transfer::ParseHostPort(o.to_mover);
    if (!hp.ok()) return hp.status();
    if (StatusOr<bool> up = CarriedImageHas(hp->first, hp->second, *key, "move-probe", "owner");
        !up.ok()) {
      return Status(up.status().code(), up.status().message() + " (" + who + " left running)");
    }
  }

  // The container must be this machine's: runc knows it here.
  const Runc runc{o, o.runc_root};
  StatusOr<Json> state = runc.State(pod->container_id);
  if (!state.ok()) {
    return FailedPrecondition(who + ": its container is not on this machine (" +
                              state.status().message() + "); run paladin k8s move on node " +
                              pod->node);
  }
  const Json annotations = state->value("annotations", Json::object());
  const std::string sandbox = Str(annotations, "io.kubernetes.cri.sandbox-id");
  const std::string bundle = Str(*state, "bundle");
  if (sandbox.empty() || bundle.empty()) {
    return Internal("runc state of " + pod->container_id + ": no sandbox id or bundle");
  }
  StatusOr<std::vector<pid_t>> pids = runc.Pids(pod->container_id);
  if (!pids.ok()) return pids.status();

  // The pod's /dev/shm is a tmpfs of its sandbox, not in CRIU's image: it goes with the image.
  // Its path is read now: the shim removes the bundle once the checkpoint ends the container.
  const std::string shm = detail::ReadBundle(bundle);
  std::unique_ptr<ckpt::GpuCheckpointer> driver;
  std::vector<pid_t> cuda;
  if (pod->gpu >= 0) {
    StatusOr<std::unique_ptr<ckpt::GpuCheckpointer>> loaded = ckpt::GpuCheckpointer::Load(o.driver);
    if (!loaded.ok()) return loaded.status();
    driver = std::move(*loaded);
    cuda = driver->CudaProcesses(*pids);
  }

  // The image's folder says whose it is: only a pod of this namespace, of the replacement's name,
  // may restore it (scripts/paladin-runc.sh checks it with the token).
  result.image = ImageName();
  const std::string dir = o.images + "/" + result.image;
  std::error_code ec;
  fs::create_directories(dir, ec);
  fs::create_directories(o.images + "/moved", ec);
  if (ec) return Internal("cannot create " + dir + ": " + ec.message());
  // And the GPU it was taken on, which the destination's runtime remaps to the new one.
  std::string owner = "namespace " + o.ns + "\npod " + result.new_name + "\nfrom " + o.ns + "/" +
                      o.pod + " " + pod->uid + "\n";
  if (pod->gpu >= 0) owner += "gpu " + uuids[static_cast<size_t>(pod->gpu)] + "\n";
  if (Status s = WriteFile(dir + "/owner", owner); !s.ok()) return s;
  // From now on the old pod's container is never started again (paladin-runc refuses it).
  const std::string moved = o.images + "/moved/" + sandbox;
  if (Status s = WriteFile(moved, o.ns + "/" + o.pod + "\n"); !s.ok()) return s;
  auto undo = [&](const Status& s) -> Status {
    for (pid_t p : cuda) {
      StatusOr<CUprocessState> st = driver->State(p);
      if (st.ok() && *st == CU_PROCESS_STATE_CHECKPOINTED) (void)driver->Restore(p, {});
      (void)driver->Unlock(p);
    }
    fs::remove(moved, ec);
    fs::remove_all(dir, ec);
    return Status(s.code(), s.message() + " (" + who + " left running as it was)");
  };

  const Clock::time_point t0 = Clock::now();
  for (pid_t p : cuda) {
    progress("locking the GPU state of pid " + std::to_string(p) + " (GPU " +
             std::to_string(pod->gpu) + ")");
    if (Status s = driver->Lock(p, 10000); !s.ok()) return undo(s);
  }
  for (pid_t p : cuda) {
    progress("checkpointing the GPU state of pid " + std::to_string(p));
    if (Status s = driver->Checkpoint(p); !s.ok()) return undo(s);
  }
  CrashPoint("after-gpu-checkpoint");
  progress("checkpointing container " + pod->container + " with runc and CRIU into " + dir);
  const std::string image = dir + "/" + pod->container;
  StatusOr<std::string> dumped = runc.Call(
      {"checkpoint", "--image-path", image, "--work-path", image + ".work", pod->container_id},
      120);
  if (!dumped.ok()) {
    std::ifstream log(image + ".work/dump.log");
    std::string line, tail;
    while (std::getline(log, line)) tail = line;
    return undo(Internal(dumped.status().message() + (tail.empty() ? "" : " (" + tail + ")")));
  }
  if (!shm.empty() && fs::is_directory(shm, ec)) {
    fs::copy(shm, image + ".shm", fs::copy_options::recursive | fs::copy_options::copy_symlinks,
             ec);
    if (ec) progress("warning: /dev/shm not copied: " + ec.message());
  } else {
    progress("warning: no /dev/shm folder for the container ('" + shm + "')");
  }
  result.checkpoint_ms = MsSince(t0);
  // The image is whole: a mover stopped from here on is finished from it by its next pass
  // (ResumeMove), as no copy of the pod runs any more.
  if (Status st = WriteFile(dir + "/" + kCheckpointedMark, ""); !st.ok()) {
    return Status(st.code(), st.message() + " (the checkpoint image " + dir + " is kept; " + who +
                                 "'s container has exited)");
  }
  if (whole_image != nullptr) *whole_image = true;
  CrashPoint("after-checkpoint");
  if (Status st = FinishFromImage(client, o, *body, *pod, target, *key, uuids, driver.get(), t0,
                                  &result, progress);
      !st.ok()) {
    return st;
  }
  return result;
}

Status CordonNode(const ApiClient& client, const std::string& node) {
  return client
      .Patch("/api/v1/nodes/" + node, R"({"spec":{"unschedulable":true}})",
             "application/merge-patch+json")
      .status();
}

StatusOr<DrainPlan> PlanDrain(const std::string& pod_list_json) {
  const Json list = Json::parse(pod_list_json, nullptr, false);
  if (!list.is_object() || !list.value("items", Json()).is_array()) {
    return InvalidArgument("the node's pods are not a PodList");
  }
  DrainPlan plan;
  for (const Json& pod : list["items"]) {
    const Json meta = pod.value("metadata", Json::object());
    const std::string who = Str(meta, "namespace") + "/" + Str(meta, "name");
    const std::string phase = Str(pod.value("status", Json::object()), "phase");
    if (api::PodPhaseEnded(phase)) continue;  // nothing runs
    StatusOr<MovablePod> p = ReadMovablePod(pod.dump());
    if (p.ok()) {
      plan.move.push_back(*p);
    } else {
      plan.left.push_back(who + ": " + p.status().message());
    }
  }
  return plan;
}

StatusOr<DrainResult> DrainNode(const ApiClient& client, const std::string& node,
                                const MoveOptions& move,
                                const std::function<void(const std::string&)>& progress) {
  if (Status s = CheckNodeName(node); !s.ok()) return s;
  if (move.node.empty() || move.node == node) {
    return InvalidArgument("drain " + node + ": give another node to move its pods to (--to)");
  }
  progress("cordoning node " + node);
  if (Status cordoned = CordonNode(client, node); !cordoned.ok()) return cordoned;
  StatusOr<std::string> pods = client.Get("/api/v1/pods?fieldSelector=spec.nodeName%3D" + node);
  if (!pods.ok()) return pods.status();
  StatusOr<DrainPlan> plan = PlanDrain(*pods);
  if (!plan.ok()) return plan.status();
  DrainResult result;
  result.left = plan->left;
  for (size_t i = 0; i < plan->move.size(); ++i) {
    const MovablePod& pod = plan->move[i];
    MoveOptions o = move;
    o.ns = pod.ns;
    o.pod = pod.name;
    o.new_name.clear();
    o.gpu = -1;
    progress("moving pod " + pod.ns + "/" + pod.name + " to node " + move.node);
    StatusOr<MoveResult> moved = MovePod(client, o, progress);
    if (!moved.ok()) {
      std::string rest;
      for (size_t j = i + 1; j < plan->move.size(); ++j) {
        rest += " " + plan->move[j].ns + "/" + plan->move[j].name;
      }
      std::string why = "drain " + node + ": moving " + pod.ns + "/" + pod.name + ": ";
      why += moved.status().message();
      why += " (moved " + std::to_string(result.moved.size()) + " before it";
      if (!rest.empty()) why += "; not tried:" + rest;
      why += "; the node stays cordoned)";
      return Status(moved.status().code(), why);
    }
    result.moved.push_back(*moved);
  }
  return result;
}

}  // namespace paladin::k8s
