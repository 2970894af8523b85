#include "paladin/k8s/scheduler.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>

#include "json_fields.h"
#include "paladin/api/wire.h"
#include "paladin/base/size.h"
#include "paladin/k8s/move.h"
#include "paladin/k8s/placement_pass.h"
#include "paladin/k8s/usage.h"
#include "paladin/server/placement.h"
#include "paladin/server/validate.h"

namespace paladin::k8s {

namespace key = api::key;

namespace {

using Json = nlohmann::json;

}  // namespace

StatusOr<uint64_t> ParseQuantity(std::string_view text) {
  const std::string what = "quantity '" + std::string(text) + "'";
  if (text.starts_with('-')) return InvalidArgument(what + ": negative");
  size_t i = 0;
  while (i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.')) ++i;
  if (i == 0) return InvalidArgument(what + ": expected a number such as 8Gi");
  const std::string number(text.substr(0, i));
  const std::string_view suffix = text.substr(i);
  if (std::count(number.begin(), number.end(), '.') > 1) {
    return InvalidArgument(what + ": more than one decimal point");
  }
  struct Unit {
    std::string_view name;
    double scale;
  };
  // Every suffix the API server accepts: a quantity it let through is read, or refused as out
  // of range, never as an unknown suffix.
  static constexpr Unit kUnits[] = {{"", 1},        {"Ki", 0x1p10}, {"Mi", 0x1p20}, {"Gi", 0x1p30},
                                    {"Ti", 0x1p40}, {"Pi", 0x1p50}, {"Ei", 0x1p60}, {"k", 1e3},
                                    {"M", 1e6},     {"G", 1e9},     {"T", 1e12},    {"P", 1e15},
                                    {"E", 1e18},    {"m", 1e-3}};
  double scale = -1;
  for (const Unit& u : kUnits) {
    if (suffix == u.name) scale = u.scale;
  }
  if (scale < 0 && suffix.size() >= 2 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    int exponent = 0;
    for (char c : suffix.substr(1)) {
      if (c < '0' || c > '9' || exponent > 30) return InvalidArgument(what + ": bad exponent");
      exponent = exponent * 10 + (c - '0');
    }
    scale = std::pow(10.0, exponent);
  }
  if (scale < 0) {
    return InvalidArgument(what + ": unknown suffix '" + std::string(suffix) +
                           "' (expected Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E or none)");
  }
  const double bytes = std::ceil(std::strtod(number.c_str(), nullptr) * scale);
  if (!(bytes >= 0) || bytes > 0x1p62) return InvalidArgument(what + ": out of range");
  return static_cast<uint64_t>(bytes);
}

std::string GpusAnnotationValue(const std::vector<gpu::GpuInfo>& gpus) {
  Json out = Json::array();
  for (const gpu::GpuInfo& g : gpus) {
    out.push_back({{"index", g.index}, {"memory", g.total_bytes}, {"model", g.name}});
  }
  return out.dump();
}

StatusOr<std::vector<NodeGpu>> ParseGpusAnnotation(const std::string& value) {
  const Json j = Json::parse(value, nullptr, /*allow_exceptions=*/false);
  const std::string what = std::string("annotation ") + kGpusAnnotation;
  if (!j.is_array()) return InvalidArgument(what + ": not a JSON array");
  std::vector<NodeGpu> gpus;
  for (const Json& g : j) {
    if (!g.is_object() || !g.contains("index") || !g["index"].is_number_integer() ||
        !g.contains("memory") || !g["memory"].is_number_integer()) {
      return InvalidArgument(what + ": each GPU needs an integer index and memory");
    }
    NodeGpu gpu;
    gpu.index = g["index"].get<int>();
    gpu.memory_bytes = g["memory"].get<int64_t>();
    gpu.model = Str(g, "model");
    if (gpu.index < 0 || gpu.memory_bytes <= 0) {
      return InvalidArgument(what + ": GPU index or memory out of range");
    }
    gpus.push_back(gpu);
  }
  return gpus;
}

std::string PodClassCommand(const std::string& container_json) {
  const Json c = Json::parse(container_json, nullptr, false);
  if (!c.is_object()) return "";
  std::string name;
  const Json command = c.value("command", Json::array());
  if (command.is_array() && !command.empty() && command[0].is_string()) {
    name = command[0].get<std::string>();
    if (const size_t slash = name.rfind('/'); slash != std::string::npos) name.erase(0, slash + 1);
  } else {
    name = Str(c, "image");
    if (const size_t at = name.find('@'); at != std::string::npos) name.erase(at);
    if (const size_t slash = name.rfind('/'); slash != std::string::npos) name.erase(0, slash + 1);
    if (const size_t colon = name.find(':'); colon != std::string::npos) name.erase(colon);
  }
  for (char& ch : name) {
    if (static_cast<unsigned char>(ch) <= 0x20 || ch == 0x7f) ch = '_';
  }
  return name.substr(0, 255);
}

PodRequest ReadPod(const std::string& pod_json) {
  PodRequest p;
  const Json pod = Json::parse(pod_json, nullptr, /*allow_exceptions=*/false);
  if (!pod.is_object()) {
    p.error = "pod: not a JSON object";
    return p;
  }
  const Json meta = pod.value("metadata", Json::object());
  const Json spec = pod.value("spec", Json::object());
  p.ns = Str(meta, "namespace");
  p.name = Str(meta, "name");
  p.uid = Str(meta, "uid");
  p.created = Str(meta, "creationTimestamp");
  p.deleting = meta.contains("deletionTimestamp");
  p.node = Str(spec, "nodeName");
  p.phase = Str(pod.value("status", Json::object()), "phase");
  const Json containers = spec.value("containers", Json::array());
  for (size_t i = 0; i < containers.size() && containers.is_array(); ++i) {
    const Json& c = containers[i];
    if (i == 0 && c.is_object()) p.command = PodClassCommand(c.dump());
    if (!c.is_object() || !c.contains("resources")) continue;
    const Json limits = c["resources"].value("limits", Json::object());
    const std::string q = Str(limits, kGpuMemoryResource);
    if (q.empty()) continue;
    if (p.gpu_memory == 0 && i > 0) p.command = PodClassCommand(c.dump());
    StatusOr<uint64_t> bytes = ParseQuantity(q);
    if (!bytes.ok()) {
      p.error = "spec.containers[" + std::to_string(i) + "].resources.limits[" +
                kGpuMemoryResource + "]: " + bytes.status().message();
      return p;
    }
    p.gpu_memory += *bytes;
  }
  StatusOr<NodeConstraints> constraints = ReadNodeConstraints(spec);
  if (!constraints.ok()) {
    p.error = constraints.status().message();
    return p;
  }
  p.constraints = std::move(*constraints);
  const Json annotations = meta.value("annotations", Json::object());
  if (const std::string prio = Str(annotations, kPriorityAnnotation); !prio.empty()) {
    char* end = nullptr;
    const long v = std::strtol(prio.c_str(), &end, 10);
    // strtol skips leading blanks and takes a '+'; a priority is written as digits, '-' first.
    const bool digits = std::isdigit(static_cast<unsigned char>(prio[0])) || prio[0] == '-';
    if (!digits || end == prio.c_str() || *end != '\0' || v < -1000000 || v > 1000000) {
      p.error = std::string("metadata.annotations[") + kPriorityAnnotation + "]: '" + prio +
                "' is not an integer in [-1000000, 1000000]";
      return p;
    }
    p.priority = static_cast<int32_t>(v);
  }
  p.move_to = Str(annotations, kMoveToAnnotation);
  p.placement = Str(annotations, kPlacementAnnotation);
  p.restores = !Str(annotations, kRestoreFromAnnotation).empty();
  if (const std::string gpu = Str(annotations, kGpuAnnotation); !gpu.empty()) {
    char* end = nullptr;
    const long v = std::strtol(gpu.c_str(), &end, 10);
    if (end != gpu.c_str() && *end == '\0' && v >= 0 && v < 1024) p.gpu = static_cast<int>(v);
  }
  // Measured by Paladin's node component (only Paladin writes it: the webhook).
  if (const std::string used = Str(annotations, kGpuUsedAnnotation); !used.empty()) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(used.c_str(), &end, 10);
    if (end != used.c_str() && *end == '\0' && v < (1ULL << 60)) {
      p.gpu_used = static_cast<int64_t>(v);
    }
  }
  return p;
}

uint64_t BookedBytes(const PodRequest& pod) {
  return pod.gpu >= 0 && !pod.node.empty() ? pod.gpu_memory : 0;
}

std::string TeamOfNamespace(const std::string& ns, const std::string& labels_json,
                            std::string* note) {
  const Json labels = Json::parse(labels_json.empty() ? "{}" : labels_json, nullptr, false);
  std::string label = labels.is_object() ? Str(labels, kTeamLabel) : "";
  if (!label.empty()) {
    if (server::ValidName(label)) return label;
    if (note != nullptr) {
      *note = "namespace " + ns + ": label " + kTeamLabel + " '" + label.substr(0, 64) +
              "' is not a team name; the namespace is its own team";
    }
  }
  // A namespace is a DNS label of up to 63 characters, as a team name may be.
  const std::string own = "k8s-" + ns;
  return own.size() <= 63 ? own : ns;
}

std::string TeamQuotaReason(const std::string& team, uint64_t max_bytes, uint64_t used_bytes,
                            uint64_t ask_bytes) {
  if (max_bytes == 0 || used_bytes + ask_bytes <= max_bytes) return "";
  return "team " + team + ": " + base::FormatSize(used_bytes) + " of its " +
         base::FormatSize(max_bytes) + " of GPU memory (max_gpu_mem) in use, this pod asks " +
         base::FormatSize(ask_bytes);
}

std::string TeamGpuQuotaReason(const std::string& team, uint64_t max_gpus, uint64_t used_gpus) {
  if (max_gpus == 0 || used_gpus + 1 <= max_gpus) return "";
  return "team " + team + ": " + std::to_string(used_gpus) + " of its " + std::to_string(max_gpus) +
         " GPUs (max_gpus) in use, this pod needs 1";
}

StatusOr<std::map<std::string, TeamQuota>> TeamQuotasOf(const Json& teams,
                                                        const std::string& cluster) {
  if (!teams.is_object() || !teams.contains(key::kTeams) || !teams[key::kTeams].is_array()) {
    return InvalidArgument("Paladin's server's /v1/teams: expected an object with a teams list");
  }
  const auto bytes = [](const Json& v) -> std::optional<uint64_t> {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) return std::nullopt;
    return static_cast<uint64_t>(v.get<int64_t>());
  };
  std::map<std::string, TeamQuota> quotas;
  for (const Json& t : teams[key::kTeams]) {
    if (!t.is_object() || !t.contains(key::kName) || !t[key::kName].is_string()) continue;
    const std::optional<uint64_t> max = bytes(t.value(key::kMaxGpuMemBytes, Json()));
    if (!max) continue;
    TeamQuota q;
    q.max_bytes = *max;
    const Json in_use = t.value(key::kGpuMemInUse, Json::object());
    if (in_use.is_object()) {
      const std::optional<uint64_t> jobs = bytes(in_use.value(key::kJobsBytes, Json(0)));
      if (!jobs) continue;
      q.elsewhere_bytes = *jobs;
      const Json pods = in_use.value(key::kPodsBytes, Json::object());
      if (!pods.is_object()) continue;
      bool valid = true;
      for (const auto& [name, held] : pods.items()) {
        const std::optional<uint64_t> b = bytes(held);
        valid = valid && b.has_value();
        if (b && name != cluster) q.elsewhere_bytes += *b;
      }
      if (!valid) continue;
    }
    const std::optional<uint64_t> max_gpus = bytes(t.value(key::kMaxGpus, Json(0)));
    if (!max_gpus) continue;
    q.max_gpus = *max_gpus;
    const Json gpus_in_use = t.value(key::kGpusInUse, Json::object());
    if (!gpus_in_use.is_object()) continue;
    const std::optional<uint64_t> job_gpus = bytes(gpus_in_use.value(key::kJobs, Json(0)));
    const Json pod_gpus = gpus_in_use.value(key::kPods, Json::object());
    if (!job_gpus || !pod_gpus.is_object()) continue;
    q.elsewhere_gpus = *job_gpus;
    bool valid = true;
    for (const auto& [name, held] : pod_gpus.items()) {
      const std::optional<uint64_t> n = bytes(held);
      valid = valid && n.has_value();
      if (n && name != cluster) q.elsewhere_gpus += *n;
    }
    if (!valid) continue;
    quotas[t[key::kName].get<std::string>()] = q;
  }
  return quotas;
}

Status NodeTakesPods(const std::string& node_json) {
  const Json n = Json::parse(node_json, nullptr, false);
  if (!n.is_object()) return InvalidArgument("the node is not a JSON object");
  const std::string name = Str(n.value("metadata", Json::object()), "name");
  if (n.value("spec", Json::object()).value("unschedulable", false)) {
    return FailedPrecondition("node " + name + " is cordoned (spec.unschedulable)");
  }
  // A node that is not Ready would only hold the pod Pending on it: the stock scheduler's rule.
  for (const Json& c : n.value("status", Json::object()).value("conditions", Json::array())) {
    if (Str(c, "type") != "Ready") continue;
    if (Str(c, "status") == "True") return Status::Ok();
    return FailedPrecondition("node " + name + " is not Ready (" + Str(c, "status") + ": " +
                              Str(c, "reason") + ")");
  }
  return FailedPrecondition("node " + name + " reports no Ready condition");
}

StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(ApiClient client, SchedulerOptions options) {
  StatusOr<core::Policy> policy = server::MakeServerPolicy(options.policy);
  if (!policy.ok()) return policy.status();
  return std::unique_ptr<Scheduler>(
      new Scheduler(std::move(client), std::move(options), std::move(*policy)));
}

Scheduler::Scheduler(ApiClient client, SchedulerOptions options, core::Policy policy)
    : client_(std::move(client)), options_(std::move(options)), packer_(std::move(policy)) {}

Status Scheduler::Event(const PodRequest& pod, const std::string& type, const std::string& reason,
                        const std::string& message) {
  return PostPodEvent(client_, pod.ns, pod.name, pod.uid, type, reason, message,
                      options_.scheduler_name);
}

void Scheduler::Unschedulable(const PodRequest& pod, const std::string& message) {
  std::string& said = said_[pod.uid];
  if (said == message) return;
  said = message;
  std::fprintf(stderr, "paladin k8s scheduler: %s/%s pending: %s\n", pod.ns.c_str(),
               pod.name.c_str(), message.c_str());
  (void)Event(pod, "Warning", "FailedScheduling", message);
  const Json condition = {{"type", "PodScheduled"},
                          {"status", "False"},
                          {"reason", "Unschedulable"},
                          {"message", message},
                          {"lastTransitionTime", ApiTimeNow()}};
  const Json patch = {{"status", {{"conditions", Json::array({condition})}}}};
  (void)client_.Patch("/api/v1/namespaces/" + pod.ns + "/pods/" + pod.name + "/status",
                      patch.dump(), "application/strategic-merge-patch+json");
}

bool Scheduler::Bind(const PodRequest& p, const std::string& node, int gpu, uint64_t bytes,
                     const std::string& how) {
  // The binding's annotations land on the pod with its node, in one update: the container
  // starts only after both, so the GPU index the webhook's downward-API variable reads is set.
  const Json binding = {{"apiVersion", "v1"},
                        {"kind", "Binding"},
                        {"metadata",
                         {{"name", p.name},
                          {"namespace", p.ns},
                          {"annotations",
                           {{kGpuAnnotation, std::to_string(gpu)},
                            {kGpuBytesAnnotation, std::to_string(bytes)},
                            {kPlacementAnnotation, how}}}}},
                        {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
  Status s =
      client_.Post("/api/v1/namespaces/" + p.ns + "/pods/" + p.name + "/binding", binding.dump())
          .status();
  if (!s.ok()) {
    std::fprintf(stderr, "paladin k8s scheduler: binding %s/%s: %s\n", p.ns.c_str(), p.name.c_str(),
                 s.message().c_str());
    return false;
  }
  said_.erase(p.uid);
  bound_now_[p.uid] = {node, gpu, how};
  const std::string message =
      "placed on " + how + ": " + Size(static_cast<int64_t>(bytes)) + " of GPU memory";
  std::fprintf(stderr, "paladin k8s scheduler: %s/%s %s\n", p.ns.c_str(), p.name.c_str(),
               message.c_str());
  (void)Event(p, "Normal", "Scheduled", message);
  return true;
}

StatusOr<int> Scheduler::RunOnce() {
  StatusOr<ClusterState> state = ReadClusterState(client_, options_);
  if (!state.ok()) return state.status();
  StatusOr<std::unique_ptr<PlacementPass>> pass = PlacementPass::Create(*state, &packer_, &rng_);
  if (!pass.ok()) return pass.status();
  for (const std::string& note : (*pass)->notes()) {
    if (notes_.insert(note).second) {
      std::fprintf(stderr, "paladin k8s scheduler: %s\n", note.c_str());
    }
  }
  // Reasons are remembered only for pods still pending, so the map does not grow without bound.
  std::map<std::string, std::string> still;
  for (const PodRequest& p : (*pass)->pending()) {
    auto it = said_.find(p.uid);
    if (it != said_.end()) still.insert(*it);
  }
  said_.swap(still);

  int bound = 0;
  bound_now_.clear();
  for (const PodRequest& p : (*pass)->pending()) {
    const PodOutcome o = (*pass)->Place(p);
    if (!o.placed) {
      Unschedulable(p, o.reason);
    } else if (Bind(p, o.node, o.gpu, p.gpu_memory, o.how)) {
      ++bound;
    } else {
      (*pass)->Unbook(p, o);
    }
  }
  if (options_.report_pods) {
    const Status s = options_.report_pods(Report(state->pods, **pass));
    const std::string error = s.ok() ? "" : s.message();
    if (error != report_error_ && !error.empty()) {
      std::fprintf(stderr, "paladin k8s scheduler: reporting pods to Paladin's server: %s\n",
                   error.c_str());
    }
    report_error_ = error;
  }
  return bound;
}

namespace {

// At most 1024 bytes, control characters as '?': what the server's pod list accepts.
std::string PrintableForServer(const std::string& text) {
  std::string out = text.substr(0, 1024);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

}  // namespace

api::PodList Scheduler::Report(const std::string& pods_json, const PlacementPass& pass) const {
  api::PodList list;
  list.cluster = options_.cluster;
  const Json pods = Json::parse(pods_json, nullptr, false);
  for (const Json& item : pods.is_object() ? pods.value("items", Json::array()) : Json::array()) {
    const PodRequest p = ReadPod(item.dump());
    if (p.deleting || p.ns.empty() || p.name.empty()) continue;
    api::PodReport r;
    r.ns = p.ns;
    r.name = p.name;
    r.team = pass.TeamOf(p.ns);
    r.phase = p.phase.empty() ? "Pending" : p.phase;
    r.node = p.node;
    r.gpu = p.gpu;
    r.gpu_mem_bytes = static_cast<int64_t>(p.gpu_memory);
    r.used_bytes = p.gpu_used;
    r.placement = p.node.empty() ? "" : p.placement;
    r.command = p.command;
    auto now = bound_now_.find(p.uid);
    if (r.node.empty() && now != bound_now_.end()) {
      r.node = now->second.node;
      r.gpu = now->second.gpu;
      r.placement = now->second.how;
    }
    auto said = said_.find(p.uid);
    // A reason may quote a pod's own annotation: no control character reaches the server.
    if (r.node.empty() && said != said_.end()) r.reason = PrintableForServer(said->second);
    r.placement = PrintableForServer(r.placement);
    list.pods.push_back(std::move(r));
  }
  return list;
}

}  // namespace paladin::k8s
