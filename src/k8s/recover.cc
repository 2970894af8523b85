#include "paladin/k8s/recover.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "node_ops.h"
#include "paladin/api/wire.h"
#include "paladin/ckpt/gpu_checkpoint.h"
#include "paladin/k8s/carry.h"
#include "paladin/k8s/placement_pass.h"
#include "paladin/k8s/scheduler.h"
#include "paladin/transfer/transfer.h"

namespace paladin::k8s {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr char kImagePrefix[] = "recover-";

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// "2026-12-03T04:05:06.123456Z" (a Lease's MicroTime, or a Time) in seconds since the epoch;
// -1 when it is not one.
double ParseTime(const std::string& t) {
  std::tm tm{};
  std::istringstream in(t);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  if (in.fail()) return -1;
  double frac = 0;
  if (in.peek() == '.') {
    std::string digits;
    in.get();
    while (std::isdigit(in.peek()) != 0) digits.push_back(static_cast<char>(in.get()));
    if (!digits.empty()) frac = std::stod("0." + digits);
  }
  if (in.get() != 'Z') return -1;
  return static_cast<double>(timegm(&tm)) + frac;
}

// The images of the folder made by `paladin k8s checkpoint` (whole ones: a `.partial` is being
// written), read from their owner files; unreadable ones are skipped.
std::vector<CheckpointInfo> ListCheckpoints(const std::string& folder) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(folder, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kImagePrefix, 0) != 0 || name.find('.') != std::string::npos) continue;
    StatusOr<CheckpointInfo> info = ReadOwnerFile(name, ReadText(e.path().string() + "/owner"));
    if (!info.ok()) continue;
    info->claimed = fs::exists(e.path() / "claimed", ec);
    for (const fs::directory_entry& f : fs::directory_iterator(e.path(), ec)) {
      const std::string file = f.path().filename().string();
      if (file.size() > 9 && file.compare(file.size() - 9, 9, ".restored") == 0) {
        info->restored = true;
      }
    }
    info->pod_json = ReadText(e.path().string() + "/pod.json");
    out.push_back(std::move(*info));
  }
  return out;
}

// The GPU state of the restored pod's processes put back (onto `uuid`, from the image's GPU),
// and unlocked: the image was taken with it checkpointed, as a move's is.
Status RestoreGpuStateWith(const detail::Runc& runc, const std::string& container_id,
                           const MoveOptions& o, const std::string& from_uuid, int gpu,
                           const std::function<void(const std::string&)>& progress) {
  StatusOr<Json> state = runc.State(container_id);
  if (!state.ok()) return state.status();
  (void)detail::ReadBundle(Str(*state, "bundle"));
  StatusOr<std::unique_ptr<ckpt::GpuCheckpointer>> driver = ckpt::GpuCheckpointer::Load(o.driver);
  if (!driver.ok()) return driver.status();
  StatusOr<std::vector<pid_t>> pids = runc.Pids(container_id);
  if (!pids.ok()) return pids.status();
  const std::vector<pid_t> restored = (*driver)->CudaProcesses(*pids);
  if (restored.empty())
    return Internal("the replacement's processes answer no GPU checkpoint call");
  std::vector<std::pair<std::string, std::string>> remap;
  StatusOr<std::vector<std::string>> uuids = detail::GpuUuids(o.nvml);
  if (!uuids.ok()) return uuids.status();
  if (gpu < 0 || static_cast<size_t>(gpu) >= uuids->size()) {
    return InvalidArgument("this node has no GPU " + std::to_string(gpu));
  }
  const std::string& to_uuid = (*uuids)[static_cast<size_t>(gpu)];
  if (!from_uuid.empty() && from_uuid != to_uuid) remap.emplace_back(from_uuid, to_uuid);
  for (pid_t p : restored) {
    progress("restoring the GPU state of pid " + std::to_string(p) + " onto GPU " +
             std::to_string(gpu) + " (" + to_uuid + ")");
    Status s = (*driver)->Restore(p, remap);
    if (s.ok()) s = (*driver)->Unlock(p);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

// One pod checkpointed, left running; the image's name.
StatusOr<std::string> CheckpointPod(const CheckpointOptions& o, const std::string& pod_json,
                                    const MovablePod& pod,
                                    const std::function<void(const std::string&)>& progress) {
  const MoveOptions& m = o.move;
  const detail::Runc runc{m, m.runc_root};
  StatusOr<Json> state = runc.State(pod.container_id);
  if (!state.ok()) return state.status();
  const std::string bundle = Str(*state, "bundle");
  StatusOr<std::vector<pid_t>> pids = runc.Pids(pod.container_id);
  if (!pids.ok()) return pids.status();
  const std::string shm = detail::ReadBundle(bundle);
  CheckpointInfo info;
  info.image = CheckpointImageName(pod.uid, NowMs());
  if (info.image.empty()) return InvalidArgument("pod uid '" + pod.uid + "' is not a uid");
  info.ns = pod.ns;
  info.pod = NextPodName(pod.name);
  info.from_pod = pod.name;
  info.from_uid = pod.uid;
  info.node = o.node;
  std::unique_ptr<ckpt::GpuCheckpointer> driver;
  std::vector<pid_t> cuda;
  if (pod.gpu >= 0) {
    StatusOr<std::unique_ptr<ckpt::GpuCheckpointer>> loaded = ckpt::GpuCheckpointer::Load(m.driver);
    if (!loaded.ok()) return loaded.status();
    driver = std::move(*loaded);
    cuda = driver->CudaProcesses(*pids);
    StatusOr<std::vector<std::string>> uuids = detail::GpuUuids(m.nvml);
    if (uuids.ok() && static_cast<size_t>(pod.gpu) < uuids->size()) {
      info.gpu_uuid = (*uuids)[static_cast<size_t>(pod.gpu)];
    }
  }
  // Sent to another node's mover: made in this node's folder first, then carried.
  const bool by_network = !o.to_mover.empty();
  const std::string final_dir = (by_network ? m.images : o.to_images) + "/" + info.image;
  const std::string dir = final_dir + ".partial";
  const std::string work = m.images + "/" + info.image + ".work";
  std::error_code ec;
  fs::create_directories(dir, ec);
  fs::create_directories(work, ec);
  if (ec) return Internal("cannot create " + dir + ": " + ec.message());
  auto cleanup = [&] {
    fs::remove_all(dir, ec);
    fs::remove_all(work, ec);
  };
  for (const auto& [file, text] :
       {std::pair<std::string, std::string>{"owner", OwnerFile(info)}, {"pod.json", pod_json}}) {
    std::string path = dir;
    path += "/";
    path += file;
    if (Status s = detail::WriteFile(path, text); !s.ok()) {
      cleanup();
      return s;
    }
  }
  // The GPU state into host memory, the process image taken, the GPU state back: the pod runs on.
  Status gpu_status = Status::Ok();
  std::vector<pid_t> locked;
  for (pid_t p : cuda) {
    gpu_status = driver->Lock(p, 10000);
    if (!gpu_status.ok()) break;
    locked.push_back(p);
    gpu_status = driver->Checkpoint(p);
    if (!gpu_status.ok()) break;
  }
  Status dumped = gpu_status;
  if (gpu_status.ok()) {
    progress("checkpointing " + pod.ns + "/" + pod.name + " (left running) into " + final_dir);
    dumped = runc.Call({"checkpoint", "--leave-running", "--image-path", dir + "/" + pod.container,
                        "--work-path", work, pod.container_id},
                       120)
                 .status();
  }
  Status given_back = Status::Ok();
  for (pid_t p : locked) {
    StatusOr<CUprocessState> st = driver->State(p);
    Status r = Status::Ok();
    if (st.ok() && *st == CU_PROCESS_STATE_CHECKPOINTED) r = driver->Restore(p, {});
    if (r.ok()) r = driver->Unlock(p);
    if (!r.ok() && given_back.ok()) {
      given_back = Status(r.code(), "giving pid " + std::to_string(p) +
                                        " its GPU state back after the checkpoint: " + r.message());
    }
  }
  if (!given_back.ok()) {
    cleanup();
    return given_back;
  }
  if (!dumped.ok()) {
    std::ifstream log(work + "/dump.log");
    std::string line, tail;
    while (std::getline(log, line)) tail = line;
    cleanup();
    return Internal(dumped.message() + (tail.empty() ? "" : " (" + tail + ")"));
  }
  if (!shm.empty() && fs::is_directory(shm, ec)) {
    fs::copy(shm, dir + "/" + pod.container + ".shm",
             fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
  }
  fs::rename(dir, final_dir, ec);
  if (ec) {
    const std::string why = ec.message();
    cleanup();
    return Internal("cannot rename " + dir + " to " + final_dir + ": " + why);
  }
  fs::remove_all(work, ec);
  if (by_network) {
    StatusOr<std::pair<std::string, int>> hp = transfer::ParseHostPort(o.to_mover);
    StatusOr<std::string> key =
        hp.ok() ? detail::ReadKey(m.key_file) : StatusOr<std::string>(hp.status());
    StatusOr<CarryReport> carried =
        key.ok() ? CarryImageTo(final_dir, hp->first, hp->second, *key, nullptr)
                 : StatusOr<CarryReport>(key.status());
    // This node's copy is of no use to a recovery elsewhere: the next pass takes another.
    fs::remove_all(final_dir, ec);
    if (!carried.ok()) return carried.status();
  }
  return info.image;
}

}  // namespace

std::string CheckpointImageName(const std::string& uid, int64_t ms) {
  if (uid.empty() || uid.size() > 64 ||
      uid.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") !=
          std::string::npos) {
    return "";
  }
  return kImagePrefix + uid + "-" + std::to_string(ms);
}

std::string OwnerFile(const CheckpointInfo& info) {
  std::string text = "namespace " + info.ns + "\npod " + info.pod + "\nfrom " + info.ns + "/" +
                     info.from_pod + " " + info.from_uid + "\nnode " + info.node + "\n";
  if (!info.gpu_uuid.empty()) text += "gpu " + info.gpu_uuid + "\n";
  return text;
}

StatusOr<CheckpointInfo> ReadOwnerFile(const std::string& image, const std::string& text) {
  CheckpointInfo info;
  info.image = image;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t sp = line.find(' ');
    if (sp == std::string::npos) continue;
    const std::string k = line.substr(0, sp), v = line.substr(sp + 1);
    if (k == "namespace") info.ns = v;
    if (k == "pod") info.pod = v;
    if (k == "node") info.node = v;
    if (k == "gpu") info.gpu_uuid = v;
    if (k == "from") {
      const size_t slash = v.find('/'), space = v.find(' ');
      if (slash != std::string::npos && space != std::string::npos && slash < space) {
        info.from_pod = v.substr(slash + 1, space - slash - 1);
        info.from_uid = v.substr(space + 1);
      }
    }
  }
  for (const auto& [what, value] :
       {std::pair<const char*, const std::string*>{"namespace", &info.ns},
        {"pod", &info.pod},
        {"from", &info.from_uid},
        {"node", &info.node}}) {
    if (value->empty())
      return InvalidArgument("image " + image + ": its owner file names no " + what);
  }
  const std::string prefix = kImagePrefix + info.from_uid + "-";
  if (image.rfind(prefix, 0) != 0 || image.size() == prefix.size() ||
      image.find_first_not_of("0123456789", prefix.size()) != std::string::npos) {
    return InvalidArgument("image " + image + ": not a periodic checkpoint of pod uid " +
                           info.from_uid);
  }
  info.ms = std::stoll(image.substr(prefix.size()));
  return info;
}

Status CheckNodeLost(const std::string& node_json, const std::string& lease_json, double now_s,
                     double lost_after_s, std::string* why) {
  const Json node = Json::parse(node_json, nullptr, false);
  if (!node.is_object()) return InvalidArgument("the node is not a JSON object");
  const std::string name = Str(node.value("metadata", Json::object()), "name");
  bool ready = false;
  for (const Json& c : node.value("status", Json::object()).value("conditions", Json::array())) {
    if (Str(c, "type") != "Ready") continue;
    if (Str(c, "status") != "True") {
      if (why != nullptr) {
        *why = "its Ready condition is " + Str(c, "status") + " (" + Str(c, "reason") + ")";
      }
      return Status::Ok();
    }
    ready = true;
  }
  const Json lease = Json::parse(lease_json, nullptr, false);
  const double renewed =
      lease.is_object() ? ParseTime(Str(lease.value("spec", Json::object()), "renewTime")) : -1;
  if (renewed < 0) {
    // Nothing says it stopped: a node is never counted lost on missing evidence.
    if (!ready) {
      if (why != nullptr) *why = "it reports no Ready condition and no lease";
      return Status::Ok();
    }
    return FailedPrecondition("node " + name +
                              " is not lost: it is Ready and has no lease renewal to tell "
                              "otherwise");
  }
  // A lease is the kubelet's promise to renew within its duration: never counted lost before
  // that, whatever --lost-after says (a shorter wait would take a live node for a dead one).
  const Json duration = lease.value("spec", Json::object()).value("leaseDurationSeconds", Json());
  const double after = std::max(lost_after_s, duration.is_number() ? duration.get<double>() : 0.0);
  const double age = now_s - renewed;
  char text[200];
  if (age > after) {
    if (why != nullptr) {
      std::snprintf(text, sizeof text,
                    "its kubelet last renewed its lease %.1f s ago (lost after %.0f s)", age,
                    after);
      *why = text;
    }
    return Status::Ok();
  }
  std::snprintf(text, sizeof text,
                "node %s is not lost: it is Ready and its kubelet renewed its lease %.1f s ago "
                "(lost after %.0f s: --lost-after, or the lease's own duration if longer)",
                name.c_str(), age < 0 ? 0.0 : age, after);
  return FailedPrecondition(text);
}

StatusOr<std::vector<std::string>> LostNodes(const std::string& node_list_json,
                                             const std::string& lease_list_json, double now_s,
                                             double lost_after_s, const std::string& except) {
  const Json nodes = Json::parse(node_list_json, nullptr, false);
  const Json leases = Json::parse(lease_list_json, nullptr, false);
  if (!nodes.is_object() || !nodes.value("items", Json()).is_array()) {
    return InvalidArgument("the nodes are not a NodeList");
  }
  std::map<std::string, std::string> lease_of;
  for (const Json& l : leases.is_object() ? leases.value("items", Json::array()) : Json::array()) {
    lease_of[Str(l.value("metadata", Json::object()), "name")] = l.dump();
  }
  std::vector<std::string> lost;
  for (const Json& n : nodes["items"]) {
    const std::string name = Str(n.value("metadata", Json::object()), "name");
    if (name.empty() || name == except) continue;
    auto it = lease_of.find(name);
    if (CheckNodeLost(n.dump(), it == lease_of.end() ? "" : it->second, now_s, lost_after_s).ok()) {
      lost.push_back(name);
    }
  }
  return lost;
}

StatusOr<RecoverPlan> PlanRecovery(const std::string& node, const std::string& pod_list_json,
                                   const std::vector<CheckpointInfo>& images) {
  const Json list = Json::parse(pod_list_json, nullptr, false);
  if (!list.is_object() || !list.value("items", Json()).is_array()) {
    return InvalidArgument("the node's pods are not a PodList");
  }
  // The latest image per pod uid that no pod was restored from yet.
  std::map<std::string, const CheckpointInfo*> latest;
  for (const CheckpointInfo& c : images) {
    if (c.restored) continue;
    const CheckpointInfo*& l = latest[c.from_uid];
    if (l == nullptr || c.ms > l->ms) l = &c;
  }
  RecoverPlan plan;
  std::map<std::string, bool> listed;
  for (const Json& pod : list["items"]) {
    const Json meta = pod.value("metadata", Json::object());
    const Json spec = pod.value("spec", Json::object());
    const std::string who = Str(meta, "namespace") + "/" + Str(meta, "name");
    listed[Str(meta, "uid")] = true;
    if (Str(spec, "nodeName") != node) continue;
    const std::string phase = Str(pod.value("status", Json::object()), "phase");
    if (api::PodPhaseEnded(phase)) continue;  // nothing ran
    if (Str(spec, "runtimeClassName") != kRuntimeClass) {
      plan.left.push_back(who + ": not of the RuntimeClass '" + std::string(kRuntimeClass) +
                          "' (left to Kubernetes)");
      continue;
    }
    if (spec.value("containers", Json::array()).size() != 1) {
      plan.left.push_back(who + ": recovery of pods with one container only is built");
      continue;
    }
    auto it = latest.find(Str(meta, "uid"));
    if (it == latest.end()) {
      plan.left.push_back(who + ": no checkpoint of it in the folder");
      continue;
    }
    RecoverItem item;
    item.ns = Str(meta, "namespace");
    item.name = Str(meta, "name");
    item.uid = Str(meta, "uid");
    item.pod_json = pod.dump();
    item.image = *it->second;
    item.new_name = it->second->pod;
    item.old_pod_exists = true;
    plan.recover.push_back(std::move(item));
  }
  // Claimed by a recovery that deleted the pod but did not see its replacement run.
  for (const auto& [uid, c] : latest) {
    if (listed.count(uid) != 0 || !c->claimed || c->node != node) continue;
    const Json pod = Json::parse(c->pod_json, nullptr, false);
    if (!pod.is_object()) {
      plan.left.push_back(c->ns + "/" + c->from_pod + ": image " + c->image +
                          " is claimed but records no pod");
      continue;
    }
    RecoverItem item;
    item.ns = c->ns;
    item.name = c->from_pod;
    item.uid = uid;
    item.pod_json = c->pod_json;
    item.image = *c;
    item.new_name = c->pod;
    plan.recover.push_back(std::move(item));
  }
  return plan;
}

std::string ForceDeleteBody(const std::string& uid) {
  return Json{{"apiVersion", "v1"},
              {"kind", "DeleteOptions"},
              {"gracePeriodSeconds", 0},
              {"preconditions", {{"uid", uid}}}}
      .dump();
}

// Whether the pod at `path` is the replacement a recovery made of the pod whose uid is `uid`
// (an earlier, interrupted run's): it says so in its paladin.io/moved-from.
bool ReplacementExists(const ApiClient& client, const std::string& path, const std::string& uid) {
  StatusOr<std::string> existing = client.Get(path);
  const Json e = existing.ok() ? Json::parse(*existing, nullptr, false) : Json();
  if (!e.is_object()) return false;
  const std::string from =
      Str(e.value("metadata", Json::object()).value("annotations", Json::object()),
          kMovedFromAnnotation);
  return from.find("(" + uid + ")") != std::string::npos;
}

StatusOr<std::vector<std::string>> FindLostNodes(const ApiClient& client, const std::string& except,
                                                 double lost_after_s) {
  StatusOr<std::string> nodes = client.Get("/api/v1/nodes");
  if (!nodes.ok()) return nodes.status();
  StatusOr<std::string> leases =
      client.Get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases");
  if (!leases.ok()) return leases.status();
  return LostNodes(*nodes, *leases, static_cast<double>(NowMs()) / 1000, lost_after_s, except);
}

StatusOr<CheckpointResult> CheckpointNode(const ApiClient& client, const CheckpointOptions& o,
                                          const std::function<void(const std::string&)>& progress) {
  if (Status s = CheckNodeName(o.node); !s.ok()) return s;
  if (o.to_images.empty() == o.to_mover.empty()) {
    return InvalidArgument(
        "give where the images go: a folder (--to-images) or another node's mover (--to-mover), "
        "one of them");
  }
  if (!o.to_mover.empty()) {
    if (StatusOr<std::pair<std::string, int>> hp = transfer::ParseHostPort(o.to_mover); !hp.ok()) {
      return InvalidArgument("--to-mover '" + o.to_mover + "': " + hp.status().message());
    }
  }
  StatusOr<std::string> pods = client.Get("/api/v1/pods?fieldSelector=spec.nodeName%3D" + o.node);
  if (!pods.ok()) return pods.status();
  StatusOr<DrainPlan> plan = PlanDrain(*pods);  // the node's running pods of the RuntimeClass
  if (!plan.ok()) return plan.status();
  CheckpointResult result;
  result.left = plan->left;
  const Json list = Json::parse(*pods, nullptr, false);
  std::map<std::string, std::string> pod_json;
  for (const Json& p : list.value("items", Json::array())) {
    pod_json[Str(p.value("metadata", Json::object()), "uid")] = p.dump();
  }
  for (const MovablePod& pod : plan->move) {
    StatusOr<std::string> image = CheckpointPod(o, pod_json[pod.uid], pod, progress);
    if (!image.ok()) {
      result.left.push_back(pod.ns + "/" + pod.name + ": " + image.status().message());
      continue;
    }
    result.taken.push_back(pod.ns + "/" + pod.name + " " + *image);
  }
  // Older images: of a pod checkpointed now, all but the newest; of this node's pods that are no
  // longer bound here, all (moved, deleted). Present: any pod still bound here, running or not
  // (a container restarting keeps its images).
  std::set<std::string> present;
  for (const auto& [uid, json] : pod_json) present.insert(uid);
  if (o.to_mover.empty()) {
    result.removed = PruneCheckpoints(o.to_images, o.node, present);
    return result;
  }
  StatusOr<std::pair<std::string, int>> hp = transfer::ParseHostPort(o.to_mover);
  StatusOr<std::string> key =
      hp.ok() ? detail::ReadKey(o.move.key_file) : StatusOr<std::string>(hp.status());
  StatusOr<int> removed = key.ok() ? PruneCarried(hp->first, hp->second, *key, o.node, present)
                                   : StatusOr<int>(key.status());
  if (!removed.ok()) {
    result.left.push_back("older images at " + o.to_mover + ": " + removed.status().message());
  } else {
    result.removed = *removed;
  }
  return result;
}

int PruneCheckpoints(const std::string& folder, const std::string& node,
                     const std::set<std::string>& present_uids) {
  // A claimed image belongs to a recovery.
  std::map<std::string, int64_t> newest;
  const std::vector<CheckpointInfo> images = ListCheckpoints(folder);
  for (const CheckpointInfo& c : images) {
    if (c.ms > newest[c.from_uid]) newest[c.from_uid] = c.ms;
  }
  int removed = 0;
  std::error_code ec;
  for (const CheckpointInfo& c : images) {
    if (c.node != node || c.claimed) continue;
    if (present_uids.count(c.from_uid) == 0 || c.ms < newest[c.from_uid]) {
      fs::remove_all(folder + "/" + c.image, ec);
      if (!ec) ++removed;
    }
  }
  return removed;
}

StatusOr<RecoverResult> RecoverNode(const ApiClient& client, const RecoverOptions& o,
                                    const std::function<void(const std::string&)>& progress) {
  const MoveOptions& m = o.move;
  if (Status s = CheckNodeName(o.lost_node); !s.ok()) return s;
  if (m.node.empty() || m.node == o.lost_node) {
    return InvalidArgument("recover " + o.lost_node +
                           ": give another node to bring its pods back on (--to)");
  }
  StatusOr<std::string> node = client.Get("/api/v1/nodes/" + o.lost_node);
  if (!node.ok()) return node.status();
  StatusOr<std::string> lease =
      client.Get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" + o.lost_node);
  if (!lease.ok() && lease.status().code() != StatusCode::kNotFound) return lease.status();
  const double now_s = static_cast<double>(NowMs()) / 1000;
  std::string why;
  if (Status s = CheckNodeLost(*node, lease.ok() ? *lease : "", now_s, o.lost_after_s, &why);
      !s.ok()) {
    return s;
  }
  progress("node " + o.lost_node + " is lost: " + why);
  StatusOr<std::string> to = client.Get("/api/v1/nodes/" + m.node);
  if (!to.ok()) return Status(to.status().code(), "node " + m.node + ": " + to.status().message());
  if (Status s = CheckDestinationNode(*to); !s.ok()) return s;
  StatusOr<std::string> key = detail::ReadKey(m.key_file);
  if (!key.ok()) return key.status();
  StatusOr<std::string> pods =
      client.Get("/api/v1/pods?fieldSelector=spec.nodeName%3D" + o.lost_node);
  if (!pods.ok()) return pods.status();
  StatusOr<RecoverPlan> plan = PlanRecovery(o.lost_node, *pods, ListCheckpoints(m.images));
  if (!plan.ok()) return plan.status();
  RecoverResult result;
  result.left = plan->left;
  const detail::Runc runc{m, m.runc_root};
  // The GPU pods' GPUs on the destination, by Paladin's packer over its books as they are now,
  // each booked for the next; read once, only when a GPU pod comes back.
  std::unique_ptr<ReplacementPlacer> placer;
  std::error_code ec;
  for (const RecoverItem& item : plan->recover) {
    const std::string who = item.ns + "/" + item.name;
    const std::string image_dir = m.images + "/" + item.image.image;
    const Json old = Json::parse(item.pod_json, nullptr, false);
    const bool gpu_pod =
        !Str(old.value("metadata", Json::object()).value("annotations", Json::object()),
             kGpuAnnotation)
             .empty();
    const std::string pod_path = "/api/v1/namespaces/" + item.ns + "/pods/";
    int gpu = -1;
    if (gpu_pod && !ReplacementExists(client, pod_path + item.new_name, item.uid)) {
      if (placer == nullptr) {
        StatusOr<std::unique_ptr<ReplacementPlacer>> made =
            ReplacementPlacer::Create(client, m.placement);
        if (!made.ok()) return made.status();
        placer = std::move(*made);
      }
      const PodOutcome where = placer->Place(item.pod_json, m.node, -1);
      if (!where.placed) {
        // Before the claim and the delete: a later run (with room made) takes it up again.
        result.left.push_back(who + ": no room on node " + m.node + ": " + where.reason +
                              " (image " + item.image.image + " kept)");
        continue;
      }
      gpu = where.gpu;
      progress(who + ": GPU chosen: " + where.how);
    }
    auto failed = [&](const Status& s) {
      return Status(s.code(), "recovering " + who + " from " + item.image.image + ": " +
                                  s.message() + " (recovered " +
                                  std::to_string(result.recovered.size()) +
                                  " before it; run it again to go on)");
    };
    // The claim first: a recovery interrupted after the delete finds the pod recorded here.
    if (Status s = detail::WriteFile(image_dir + "/claimed", o.lost_node + "\n"); !s.ok()) {
      return failed(s);
    }
    if (item.old_pod_exists) {
      progress("deleting pod " + who + " of lost node " + o.lost_node + " (grace 0)");
      StatusOr<std::string> deleted =
          client.Delete(pod_path + item.name, ForceDeleteBody(item.uid));
      // Gone already, or a new pod of that name (the uid precondition): the old one is gone.
      if (!deleted.ok() && deleted.status().code() != StatusCode::kNotFound &&
          deleted.status().code() != StatusCode::kFailedPrecondition) {
        return failed(deleted.status());
      }
    }
    Replacement r;
    r.name = item.new_name;
    r.image = item.image.image;
    r.token = RestoreToken(*key, r.image, item.ns, r.name);
    r.node = m.node;
    r.gpu = gpu;
    StatusOr<std::string> replacement = ReplacementPod(item.pod_json, r);
    if (!replacement.ok()) return failed(replacement.status());
    progress("creating pod " + item.ns + "/" + r.name + " on " + m.node + " restored from " +
             r.image);
    StatusOr<std::string> created = client.Post(pod_path, *replacement);
    if (!created.ok()) {
      // Created by an earlier run: it is this pod's replacement only if it says so.
      if (!ReplacementExists(client, pod_path + r.name, item.uid)) return failed(created.status());
      progress("pod " + item.ns + "/" + r.name + " exists already (an earlier recovery's)");
    }
    StatusOr<std::string> new_id = detail::WaitRunning(client, pod_path + r.name, m.timeout_s);
    if (!new_id.ok()) return failed(new_id.status());
    if (gpu_pod) {
      // The GPU its binding gave it: this run's choice, or an earlier run's for its replacement.
      StatusOr<std::string> bound = client.Get(pod_path + r.name);
      if (!bound.ok()) return failed(bound.status());
      const PodRequest running = ReadPod(*bound);
      if (running.gpu < 0) return failed(Internal("pod " + r.name + " runs with no Paladin GPU"));
      const Json containers = old.value("spec", Json::object()).value("containers", Json::array());
      const std::string role =
          containers.is_array() && !containers.empty() ? Str(containers[0], "name") : "";
      std::string mark = image_dir;
      mark.append("/").append(role).append(kGpuRestoredSuffix);
      if (!role.empty() && fs::exists(mark)) {
        progress("GPU state of " + item.ns + "/" + r.name + " restored by node " + m.node +
                 "'s runtime");
      } else if (Status s = RestoreGpuStateWith(runc, *new_id, m, item.image.gpu_uuid, running.gpu,
                                                progress);
                 !s.ok()) {
        return failed(s);
      }
    }
    // Restored (paladin-runc marked it so): the image is spent.
    fs::remove_all(image_dir, ec);
    result.recovered.push_back(who + " -> " + item.ns + "/" + r.name + " from " + r.image);
  }
  return result;
}

Status RestoreGpuState(const std::string& container_id, const MoveOptions& o,
                       const std::string& from_uuid, int gpu,
                       const std::function<void(const std::string&)>& progress) {
  return RestoreGpuStateWith(detail::Runc{o, o.runc_root}, container_id, o, from_uuid, gpu,
                             progress);
}

}  // namespace paladin::k8s
