#include "paladin/k8s/scheduler.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <tuple>

#include "paladin/base/size.h"
#include "paladin/k8s/move.h"
#include "paladin/server/placement.h"
#include "paladin/server/validate.h"

namespace paladin::k8s {
namespace {

using Json = nlohmann::json;

std::string Size(int64_t bytes) {
  return base::FormatSize(static_cast<uint64_t>(std::max<int64_t>(bytes, 0)));
}

std::string Now() {
  char out[32];
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(out, sizeof out, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return out;
}

std::string Str(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// Paladin's pods, as the packer sees them: every node's GPUs (fleet index -> GPU index).
struct FleetView {
  core::Fleet fleet;
  std::vector<std::string> names;
  std::vector<std::vector<int>> gpu_index;
  std::vector<int64_t> gpu_memory;
};

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
    if (!c.is_object() || !c.contains("resources")) continue;
    const Json limits = c["resources"].value("limits", Json::object());
    const std::string q = Str(limits, kGpuMemoryResource);
    if (q.empty()) continue;
    StatusOr<uint64_t> bytes = ParseQuantity(q);
    if (!bytes.ok()) {
      p.error = "spec.containers[" + std::to_string(i) + "].resources.limits[" +
                kGpuMemoryResource + "]: " + bytes.status().message();
      return p;
    }
    p.gpu_memory += *bytes;
  }
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
  p.restores = !Str(annotations, kRestoreFromAnnotation).empty();
  if (const std::string gpu = Str(annotations, kGpuAnnotation); !gpu.empty()) {
    char* end = nullptr;
    const long v = std::strtol(gpu.c_str(), &end, 10);
    if (end != gpu.c_str() && *end == '\0' && v >= 0 && v < 1024) p.gpu = static_cast<int>(v);
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
  char name[96];
  std::snprintf(
      name, sizeof name, ".paladin.%llx.%llu",
      static_cast<unsigned long long>(std::chrono::system_clock::now().time_since_epoch().count()),
      static_cast<unsigned long long>(++event_seq_));
  const std::string now = Now();
  Json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"name", pod.name + name}, {"namespace", pod.ns}}},
                {"involvedObject",
                 {{"apiVersion", "v1"},
                  {"kind", "Pod"},
                  {"namespace", pod.ns},
                  {"name", pod.name},
                  {"uid", pod.uid}}},
                {"type", type},
                {"reason", reason},
                {"message", message},
                {"source", {{"component", options_.scheduler_name}}},
                {"reportingComponent", options_.scheduler_name},
                {"firstTimestamp", now},
                {"lastTimestamp", now},
                {"count", 1}};
  return client_.Post("/api/v1/namespaces/" + pod.ns + "/events", event.dump()).status();
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
                          {"lastTransitionTime", Now()}};
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
  bound_now_[p.uid] = {node, gpu};
  const std::string message =
      "placed on " + how + ": " + Size(static_cast<int64_t>(bytes)) + " of GPU memory";
  std::fprintf(stderr, "paladin k8s scheduler: %s/%s %s\n", p.ns.c_str(), p.name.c_str(),
               message.c_str());
  (void)Event(p, "Normal", "Scheduled", message);
  return true;
}

StatusOr<int> Scheduler::RunOnce() {
  StatusOr<std::string> nodes_body = client_.Get("/api/v1/nodes");
  if (!nodes_body.ok()) return nodes_body.status();
  StatusOr<std::string> pods_body =
      client_.Get("/api/v1/pods?fieldSelector=spec.schedulerName%3D" + options_.scheduler_name);
  if (!pods_body.ok()) return pods_body.status();
  const Json nodes = Json::parse(*nodes_body, nullptr, false);
  const Json pods = Json::parse(*pods_body, nullptr, false);
  if (!nodes.is_object() || !pods.is_object()) {
    return Unavailable("the API server's node or pod list is not JSON");
  }

  // The fleet: every schedulable node that publishes its GPUs, as the server builds its own.
  FleetView v;
  std::map<std::string, int32_t> index;
  for (const Json& n : nodes.value("items", Json::array())) {
    const Json meta = n.value("metadata", Json::object());
    const std::string name = Str(meta, "name");
    if (!NodeTakesPods(n.dump()).ok()) continue;
    const std::string value = Str(meta.value("annotations", Json::object()), kGpusAnnotation);
    if (value.empty()) continue;
    StatusOr<std::vector<NodeGpu>> gpus = ParseGpusAnnotation(value);
    if (!gpus.ok() || gpus->empty() || gpus->size() > core::kMaxGpusPerNode) {
      std::fprintf(stderr, "paladin k8s scheduler: node %s skipped: %s\n", name.c_str(),
                   gpus.ok() ? "no GPU, or too many" : gpus.status().message().c_str());
      continue;
    }
    int64_t memory = 0;
    std::vector<int> idx;
    for (const NodeGpu& g : *gpus) {
      memory = memory == 0 ? g.memory_bytes : std::min(memory, g.memory_bytes);
      idx.push_back(g.index);
    }
    const int64_t mib = memory / (int64_t{1} << 20);
    StatusOr<core::ModelId> model =
        v.fleet.models().Intern(gpus->front().model + "/" + std::to_string(mib));
    if (!model.ok()) continue;
    v.fleet.models().SetMemoryMib(*model, mib);
    StatusOr<int32_t> at = v.fleet.AddNode(name, int64_t{1} << 40, int64_t{1} << 40,
                                           static_cast<int>(idx.size()), *model);
    if (!at.ok()) continue;
    index[name] = *at;
    v.names.push_back(name);
    v.gpu_index.push_back(idx);
    v.gpu_memory.push_back(memory);
  }

  // Teams, when their quotas are checked: each namespace's, and what each team's pods hold.
  std::map<std::string, std::string> team_of;
  std::map<std::string, uint64_t> team_used;
  StatusOr<std::map<std::string, uint64_t>> quotas = std::map<std::string, uint64_t>();
  if (options_.team_quotas || options_.report_pods) {
    StatusOr<std::string> namespaces = client_.Get("/api/v1/namespaces");
    if (!namespaces.ok()) return namespaces.status();
    const Json list = Json::parse(*namespaces, nullptr, false);
    for (const Json& n : list.is_object() ? list.value("items", Json::array()) : Json::array()) {
      const Json meta = n.value("metadata", Json::object());
      std::string note;
      const std::string name = Str(meta, "name");
      team_of[name] = TeamOfNamespace(name, meta.value("labels", Json::object()).dump(), &note);
      if (!note.empty() && notes_.insert(note).second) {
        std::fprintf(stderr, "paladin k8s scheduler: %s\n", note.c_str());
      }
    }
    if (options_.team_quotas) quotas = options_.team_quotas();
  }
  auto team = [&](const std::string& ns) {
    auto it = team_of.find(ns);
    return it != team_of.end() ? it->second : TeamOfNamespace(ns, "");
  };

  // What runs already holds its GPU share.
  std::vector<PodRequest> pending;
  uint64_t reservation = 0;
  for (const Json& item : pods.value("items", Json::array())) {
    PodRequest p = ReadPod(item.dump());
    if (p.phase == "Succeeded" || p.phase == "Failed") continue;
    if (p.node.empty()) {
      if (!p.deleting) pending.push_back(std::move(p));
      continue;
    }
    const uint64_t booked = BookedBytes(p);
    if (!p.deleting && booked > 0) team_used[team(p.ns)] += booked;
    auto at = index.find(p.node);
    if (at == index.end() || booked == 0) continue;
    const auto& map = v.gpu_index[static_cast<size_t>(at->second)];
    auto g = std::find(map.begin(), map.end(), p.gpu);
    if (g == map.end()) continue;
    core::Placement placement;
    placement.node = at->second;
    placement.gpus.push_back(static_cast<int16_t>(g - map.begin()));
    const core::Workload w =
        server::GpuShape(p.ns + "/" + p.name, p.ns, p.priority, 1, static_cast<int64_t>(booked),
                         v.gpu_memory[static_cast<size_t>(at->second)]);
    (void)v.fleet.Reserve(++reservation, w, placement);  // booked even when over-committed
  }
  // Higher priority first, then the order they came in (the server's order for its jobs).
  std::stable_sort(pending.begin(), pending.end(), [](const PodRequest& a, const PodRequest& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.created != b.created) return a.created < b.created;
    return a.ns + "/" + a.name < b.ns + "/" + b.name;
  });

  // Reasons are remembered only for pods still pending, so the map does not grow without bound.
  std::map<std::string, std::string> still;
  for (const PodRequest& p : pending) {
    auto it = said_.find(p.uid);
    if (it != said_.end()) still.insert(*it);
  }
  said_.swap(still);

  auto move_to = [&](const PodRequest& p) {
    const size_t slash = p.move_to.rfind('/');
    const std::string node = p.move_to.substr(0, slash == std::string::npos ? 0 : slash);
    char* end = nullptr;
    const long gpu =
        slash == std::string::npos ? -1 : std::strtol(p.move_to.c_str() + slash + 1, &end, 10);
    const std::string what =
        std::string("metadata.annotations[paladin.io/move-to] '") + p.move_to + "'";
    if (!p.restores) {
      Unschedulable(p,
                    what + ": only a move's replacement (paladin.io/restore-from) names its GPU");
      return false;
    }
    if (gpu < 0 || end == nullptr || *end != '\0') {
      Unschedulable(p, "malformed: " + what + ": expected NODE/GPU");
      return false;
    }
    auto at = index.find(node);
    if (at == index.end()) {
      Unschedulable(p, what + ": no such node publishes its GPUs, or it is not Ready");
      return false;
    }
    const size_t n = static_cast<size_t>(at->second);
    const auto& map = v.gpu_index[n];
    auto g = std::find(map.begin(), map.end(), static_cast<int>(gpu));
    if (g == map.end()) {
      Unschedulable(p, what + ": node " + node + " has no GPU " + std::to_string(gpu));
      return false;
    }
    core::Placement placement;
    placement.node = at->second;
    placement.gpus.push_back(static_cast<int16_t>(g - map.begin()));
    const auto bytes = static_cast<int64_t>(p.gpu_memory);
    const int64_t left =
        v.fleet.node(at->second).gpus[static_cast<size_t>(g - map.begin())].mem_left_mib << 20;
    const core::Workload w =
        server::GpuShape(p.ns + "/" + p.name, p.ns, p.priority, 1, bytes, v.gpu_memory[n]);
    if (bytes > left || !v.fleet.Reserve(++reservation, w, placement).ok()) {
      Unschedulable(p, "the move's target " + p.move_to + " has " + Size(left) + " free, " +
                           Size(bytes) + " asked");
      return false;
    }
    if (!Bind(p, node, static_cast<int>(gpu), p.gpu_memory,
              node + "/" + std::to_string(gpu) + " as paladin k8s move asked")) {
      v.fleet.Unreserve(reservation);
      return false;
    }
    return true;
  };
  int bound = 0;
  bound_now_.clear();
  for (const PodRequest& p : pending) {
    if (!p.error.empty()) {
      Unschedulable(p, "malformed: " + p.error);
      continue;
    }
    if (p.gpu_memory == 0) {
      Unschedulable(p, std::string("asks for no ") + kGpuMemoryResource +
                           " in its containers' resources.limits; Paladin places only pods "
                           "that do");
      continue;
    }
    // The largest GPU and the most free on one GPU, for a reason a user can act on.
    int64_t largest = 0, most_free = -1;
    std::string largest_at, most_free_at;
    for (size_t n = 0; n < v.names.size(); ++n) {
      const core::Node& node = v.fleet.node(static_cast<int32_t>(n));
      for (size_t g = 0; g < node.gpus.size(); ++g) {
        const std::string at = v.names[n] + "/" + std::to_string(v.gpu_index[n][g]);
        if (v.gpu_memory[n] > largest) largest = v.gpu_memory[n], largest_at = at;
        const int64_t left = node.gpus[g].mem_left_mib << 20;
        if (left > most_free) most_free = left, most_free_at = at;
      }
    }
    const auto bytes = static_cast<int64_t>(p.gpu_memory);
    if (v.names.empty()) {
      Unschedulable(p, std::string("no node publishes its GPUs (annotation ") + kGpusAnnotation +
                           ", set by paladin k8s node)");
      continue;
    }
    if (bytes > largest) {
      Unschedulable(p, "asks for " + Size(bytes) +
                           " of GPU memory, more than any GPU has (the "
                           "largest: " +
                           Size(largest) + " on " + largest_at + ")");
      continue;
    }
    if (options_.team_quotas) {
      const std::string t = team(p.ns);
      if (!quotas.ok()) {
        Unschedulable(
            p, "team " + t + ": its quota cannot be checked (" + quotas.status().message() + ")");
        continue;
      }
      auto q = quotas->find(t);
      const std::string over =
          TeamQuotaReason(t, q != quotas->end() ? q->second : 0, team_used[t], p.gpu_memory);
      if (!over.empty()) {
        Unschedulable(p, over);
        continue;
      }
    }
    if (!p.move_to.empty()) {
      // A move's replacement goes to the GPU its mover asked for, if it fits there: the
      // operator chose the GPU, the packer's books still hold.
      if (move_to(p)) {
        ++bound;
        team_used[team(p.ns)] += p.gpu_memory;
      }
      continue;
    }
    const core::Workload w =
        server::GpuShape(p.ns + "/" + p.name, p.ns, p.priority, 1, bytes, largest);
    core::PackerOptions options;
    options.collect_reasons = true;
    const core::Decision d = packer_.Schedule(v.fleet, w, rng_, options);
    if (!d.placed) {
      Unschedulable(p, "no GPU has " + Size(bytes) + " free: the most free is " + Size(most_free) +
                           " on " + most_free_at + " (" + d.Explain() + ")");
      continue;
    }
    const size_t n = static_cast<size_t>(d.placement.node);
    const int gpu = v.gpu_index[n][static_cast<size_t>(d.placement.gpus.at(0))];
    const core::Workload booked =
        server::GpuShape(w.name, w.team, w.priority, 1, bytes, v.gpu_memory[n]);
    if (!v.fleet.Reserve(++reservation, booked, d.placement).ok()) continue;
    char how[200];
    std::snprintf(how, sizeof how,
                  "%s/%d by Paladin's packer, policy %s (score %.1f, %d feasible node%s)",
                  v.names[n].c_str(), gpu, packer_.policy().name.c_str(), d.score, d.feasible_nodes,
                  d.feasible_nodes == 1 ? "" : "s");
    if (!Bind(p, v.names[n], gpu, p.gpu_memory, how)) {
      v.fleet.Unreserve(reservation);
      continue;
    }
    ++bound;
    team_used[team(p.ns)] += p.gpu_memory;
  }
  if (options_.report_pods) {
    const Status s = options_.report_pods(Report(pods, team));
    const std::string error = s.ok() ? "" : s.message();
    if (error != report_error_ && !error.empty()) {
      std::fprintf(stderr, "paladin k8s scheduler: reporting pods to Paladin's server: %s\n",
                   error.c_str());
    }
    report_error_ = error;
  }
  return bound;
}

api::PodList Scheduler::Report(const Json& pods,
                               const std::function<std::string(const std::string&)>& team) const {
  api::PodList list;
  list.cluster = options_.cluster;
  for (const Json& item : pods.value("items", Json::array())) {
    const PodRequest p = ReadPod(item.dump());
    if (p.deleting || p.ns.empty() || p.name.empty()) continue;
    api::PodReport r;
    r.ns = p.ns;
    r.name = p.name;
    r.team = team(p.ns);
    r.phase = p.phase.empty() ? "Pending" : p.phase;
    r.node = p.node;
    r.gpu = p.gpu;
    r.gpu_mem_bytes = static_cast<int64_t>(p.gpu_memory);
    auto now = bound_now_.find(p.uid);
    if (r.node.empty() && now != bound_now_.end()) std::tie(r.node, r.gpu) = now->second;
    auto said = said_.find(p.uid);
    if (r.node.empty() && said != said_.end()) {
      // A reason may quote a pod's own annotation: no control character reaches the server.
      r.reason = said->second.substr(0, 1024);
      for (char& c : r.reason) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
      }
    }
    list.pods.push_back(std::move(r));
  }
  return list;
}

}  // namespace paladin::k8s
