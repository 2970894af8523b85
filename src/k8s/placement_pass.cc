#include "paladin/k8s/placement_pass.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "json_fields.h"
#include "paladin/api/wire.h"
#include "paladin/base/size.h"
#include "paladin/server/placement.h"

namespace paladin::k8s {
namespace {

using Json = nlohmann::json;

std::string PodName(const PodRequest& p) { return p.ns + "/" + p.name; }

}  // namespace

// The packer's view of the cluster: every node's GPUs (fleet position -> the GPU's index on
// its node) and what is booked on them.
struct PlacementPass::View {
  struct Booking {
    uint64_t reservation = 0;
    int32_t node = 0;
    size_t gpu = 0;  // position in the node's GPUs
    std::string pod;
    uint64_t bytes = 0;
  };
  core::Fleet fleet;
  std::vector<std::string> names;
  std::vector<std::vector<int>> gpu_index;
  std::vector<int64_t> gpu_memory;
  std::vector<NodeFacts> facts;  // each node's labels and taints, for the pods' constraints
  std::map<std::string, int32_t> index;
  std::vector<Booking> bookings;
  uint64_t reservation = 0;

  bool teams_checked = false;
  std::map<std::string, std::string> team_of;
  struct Held {
    uint64_t bytes = 0;  // GPU memory booked by the team's bound pods
    uint64_t gpus = 0;   // and the GPUs they hold, one each
  };
  std::map<std::string, Held> team_held;
  StatusOr<std::map<std::string, TeamQuota>> quotas = std::map<std::string, TeamQuota>();
  std::vector<std::string> notes;
  std::vector<PodRequest> pending;

  std::string Team(const std::string& ns) const {
    auto it = team_of.find(ns);
    return it != team_of.end() ? it->second : TeamOfNamespace(ns, "");
  }
  // Books `bytes` of `pod` on the fleet's GPU `gpu` of node `node`; its reservation, 0 if the
  // fleet refused it.
  uint64_t Book(const PodRequest& pod, int32_t node, size_t gpu, uint64_t bytes) {
    core::Placement placement;
    placement.node = node;
    placement.gpus.push_back(static_cast<int16_t>(gpu));
    const core::Workload w =
        server::GpuShape(PodName(pod), pod.ns, pod.priority, 1, static_cast<int64_t>(bytes),
                         gpu_memory[static_cast<size_t>(node)]);
    if (!fleet.Reserve(++reservation, w, placement).ok()) return 0;
    bookings.push_back({reservation, node, gpu, PodName(pod), bytes});
    return reservation;
  }
};

StatusOr<ClusterState> ReadClusterState(const ApiClient& client, const SchedulerOptions& options) {
  ClusterState state;
  StatusOr<std::string> nodes = client.Get("/api/v1/nodes");
  if (!nodes.ok()) return nodes.status();
  state.nodes = std::move(*nodes);
  StatusOr<std::string> pods =
      client.Get("/api/v1/pods?fieldSelector=spec.schedulerName%3D" + options.scheduler_name);
  if (!pods.ok()) return pods.status();
  state.pods = std::move(*pods);
  if (options.team_quotas) {
    StatusOr<std::string> namespaces = client.Get("/api/v1/namespaces");
    if (!namespaces.ok()) return namespaces.status();
    state.teams_checked = true;
    state.namespaces = std::move(*namespaces);
    state.quotas = options.team_quotas();
  }
  return state;
}

PlacementPass::PlacementPass(const ClusterState& state, core::Packer* packer, core::Rng* rng)
    : v_(std::make_unique<View>()), packer_(packer), rng_(rng) {
  v_->teams_checked = state.teams_checked;
  v_->quotas = state.quotas;
}

PlacementPass::~PlacementPass() = default;

StatusOr<std::unique_ptr<PlacementPass>> PlacementPass::Create(const ClusterState& state,
                                                               core::Packer* packer,
                                                               core::Rng* rng) {
  const Json nodes = Json::parse(state.nodes, nullptr, false);
  const Json pods = Json::parse(state.pods, nullptr, false);
  if (!nodes.is_object() || !pods.is_object()) {
    return Unavailable("the API server's node or pod list is not JSON");
  }
  std::unique_ptr<PlacementPass> pass(new PlacementPass(state, packer, rng));
  View& v = *pass->v_;

  // The fleet: every schedulable node that publishes its GPUs, as the server builds its own.
  for (const Json& n : nodes.value("items", Json::array())) {
    const Json meta = n.value("metadata", Json::object());
    const std::string name = Str(meta, "name");
    if (!NodeTakesPods(n.dump()).ok()) continue;
    const std::string value = Str(meta.value("annotations", Json::object()), kGpusAnnotation);
    if (value.empty()) continue;
    StatusOr<std::vector<NodeGpu>> gpus = ParseGpusAnnotation(value);
    if (!gpus.ok() || gpus->empty() || gpus->size() > core::kMaxGpusPerNode) {
      v.notes.push_back("node " + name + " skipped: " +
                        (gpus.ok() ? "no GPU, or too many" : gpus.status().message()));
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
    v.index[name] = *at;
    v.names.push_back(name);
    v.gpu_index.push_back(idx);
    v.gpu_memory.push_back(memory);
    v.facts.push_back(ReadNodeFacts(n));
  }

  // Teams, when their quotas are checked: each namespace's.
  if (v.teams_checked) {
    const Json list = Json::parse(state.namespaces, nullptr, false);
    for (const Json& n : list.is_object() ? list.value("items", Json::array()) : Json::array()) {
      const Json meta = n.value("metadata", Json::object());
      std::string note;
      const std::string name = Str(meta, "name");
      v.team_of[name] = TeamOfNamespace(name, meta.value("labels", Json::object()).dump(), &note);
      if (!note.empty()) v.notes.push_back(note);
    }
  }

  // What runs already holds its GPU share, and what its team holds.
  for (const Json& item : pods.value("items", Json::array())) {
    PodRequest p = ReadPod(item.dump());
    if (api::PodPhaseEnded(p.phase)) continue;
    if (p.node.empty()) {
      if (!p.deleting) v.pending.push_back(std::move(p));
      continue;
    }
    const uint64_t booked = BookedBytes(p);
    if (!p.deleting && booked > 0) {
      View::Held& held = v.team_held[v.Team(p.ns)];
      held.bytes += booked;
      held.gpus += 1;
    }
    auto at = v.index.find(p.node);
    if (at == v.index.end() || booked == 0 || p.uid == state.moving_uid) continue;
    const auto& map = v.gpu_index[static_cast<size_t>(at->second)];
    auto g = std::find(map.begin(), map.end(), p.gpu);
    if (g == map.end()) continue;
    // Booked even when over-committed: the fleet refuses nothing already bound.
    (void)v.Book(p, at->second, static_cast<size_t>(g - map.begin()), booked);
  }
  // Higher priority first, then the order they came in (the server's order for its jobs).
  std::stable_sort(v.pending.begin(), v.pending.end(),
                   [](const PodRequest& a, const PodRequest& b) {
                     if (a.priority != b.priority) return a.priority > b.priority;
                     if (a.created != b.created) return a.created < b.created;
                     return PodName(a) < PodName(b);
                   });
  return pass;
}

const std::vector<PodRequest>& PlacementPass::pending() const { return v_->pending; }
const std::vector<std::string>& PlacementPass::notes() const { return v_->notes; }

PodOutcome PlacementPass::Pending(std::string reason) const {
  PodOutcome o;
  o.reason = std::move(reason);
  return o;
}

PodOutcome PlacementPass::MoveTo(const PodRequest& p) {
  View& v = *v_;
  const size_t slash = p.move_to.rfind('/');
  const std::string node = p.move_to.substr(0, slash == std::string::npos ? 0 : slash);
  char* end = nullptr;
  const long gpu =
      slash == std::string::npos ? -1 : std::strtol(p.move_to.c_str() + slash + 1, &end, 10);
  const std::string what =
      std::string("metadata.annotations[paladin.io/move-to] '") + p.move_to + "'";
  if (!p.restores) {
    return Pending(what + ": only a move's replacement (paladin.io/restore-from) names its GPU");
  }
  if (gpu < 0 || end == nullptr || *end != '\0') {
    return Pending("malformed: " + what + ": expected NODE/GPU");
  }
  auto at = v.index.find(node);
  if (at == v.index.end()) {
    return Pending(what + ": no such node publishes its GPUs, or it is not Ready");
  }
  const auto& map = v.gpu_index[static_cast<size_t>(at->second)];
  auto g = std::find(map.begin(), map.end(), static_cast<int>(gpu));
  if (g == map.end()) {
    return Pending(what + ": node " + node + " has no GPU " + std::to_string(gpu));
  }
  const auto position = static_cast<size_t>(g - map.begin());
  const auto bytes = static_cast<int64_t>(p.gpu_memory);
  const int64_t left = v.fleet.node(at->second).gpus[position].mem_left_mib << 20;
  PodOutcome o;
  if (bytes <= left) o.reservation = v.Book(p, at->second, position, p.gpu_memory);
  if (o.reservation == 0) {
    return Pending("the move's target " + p.move_to + " has " + Size(left) + " free, " +
                   Size(bytes) + " asked");
  }
  o.placed = true;
  o.node = node;
  o.gpu = static_cast<int>(gpu);
  o.how = node + "/" + std::to_string(gpu) + " as paladin k8s move asked";
  return o;
}

PodOutcome PlacementPass::Place(const PodRequest& p, const std::string& only_node) {
  View& v = *v_;
  if (!p.error.empty()) return Pending("malformed: " + p.error);
  if (p.gpu_memory == 0) {
    return Pending(std::string("asks for no ") + kGpuMemoryResource +
                   " in its containers' resources.limits; Paladin places only pods that do");
  }
  if (v.names.empty()) {
    return Pending(std::string("no node publishes its GPUs (annotation ") + kGpusAnnotation +
                   ", set by paladin k8s node)");
  }
  // The nodes it may go to: the one a move names, else those its own constraints allow (a
  // move's destination is the operator's, as a pod's spec.nodeName is).
  int32_t only = -1;
  std::vector<int32_t> ruled_out;
  std::string ruled_out_why;
  if (!only_node.empty()) {
    auto at = v.index.find(only_node);
    if (at == v.index.end()) {
      return Pending("node " + only_node + " publishes no GPUs (annotation " + kGpusAnnotation +
                     ") or takes no pods (cordoned or not Ready)");
    }
    only = at->second;
  } else if (p.move_to.empty()) {
    for (size_t n = 0; n < v.names.size(); ++n) {
      const std::string mismatch = NodeMismatch(p.constraints, v.facts[n]);
      if (mismatch.empty()) continue;
      ruled_out.push_back(static_cast<int32_t>(n));
      ruled_out_why += (ruled_out_why.empty() ? "" : "; ") + v.names[n] + ": " + mismatch;
    }
    if (ruled_out.size() == v.names.size()) {
      return Pending("no node with GPUs may run it by its own constraints (" + ruled_out_why + ")");
    }
  }
  auto allowed = [&](size_t n) {
    const auto i = static_cast<int32_t>(n);
    return (only < 0 || i == only) &&
           std::find(ruled_out.begin(), ruled_out.end(), i) == ruled_out.end();
  };
  const std::string aside =
      ruled_out.empty() ? "" : " (its own constraints rule out " + ruled_out_why + ")";
  // The largest GPU and the most free on one GPU, for a reason a user can act on.
  int64_t largest = 0, most_free = -1;
  std::string largest_at, most_free_at;
  for (size_t n = 0; n < v.names.size(); ++n) {
    if (!allowed(n)) continue;
    const core::Node& node = v.fleet.node(static_cast<int32_t>(n));
    for (size_t g = 0; g < node.gpus.size(); ++g) {
      const std::string at = v.names[n] + "/" + std::to_string(v.gpu_index[n][g]);
      if (v.gpu_memory[n] > largest) largest = v.gpu_memory[n], largest_at = at;
      const int64_t left = node.gpus[g].mem_left_mib << 20;
      if (left > most_free) most_free = left, most_free_at = at;
    }
  }
  const auto bytes = static_cast<int64_t>(p.gpu_memory);
  if (bytes > largest) {
    return Pending("asks for " + Size(bytes) + " of GPU memory, more than any GPU " +
                   (only >= 0 ? "of node " + only_node + " " : "") +
                   "has (the largest: " + Size(largest) + " on " + largest_at + ")" + aside);
  }
  const std::string team = v.Team(p.ns);
  if (v.teams_checked) {
    if (!v.quotas.ok()) {
      return Pending("team " + team + ": its quota cannot be checked (" +
                     v.quotas.status().message() + ")");
    }
    auto q = v.quotas->find(team);
    const TeamQuota quota = q != v.quotas->end() ? q->second : TeamQuota{};
    const View::Held& held = v.team_held[team];
    std::string over = TeamGpuQuotaReason(team, quota.max_gpus, held.gpus + quota.elsewhere_gpus);
    if (over.empty()) {
      over =
          TeamQuotaReason(team, quota.max_bytes, held.bytes + quota.elsewhere_bytes, p.gpu_memory);
    }
    if (!over.empty()) return Pending(over);
  }
  // A move's replacement goes to the GPU its mover asked for, if it fits there: the operator
  // chose the GPU, the packer's books still hold.
  PodOutcome o;
  if (!p.move_to.empty()) {
    o = MoveTo(p);
  } else {
    const core::Workload w = server::GpuShape(PodName(p), p.ns, p.priority, 1, bytes, largest);
    core::PackerOptions options;
    options.collect_reasons = true;
    options.only_node = only;
    options.exclude_nodes = ruled_out;
    o.packer_ran = true;
    o.decision = packer_->Schedule(v.fleet, w, *rng_, options);
    if (!o.decision.placed) {
      o.reason = "no GPU " + (only >= 0 ? "of node " + only_node + " " : std::string()) + "has " +
                 Size(bytes) + " free: the most free is " + Size(most_free) + " on " +
                 most_free_at + " (" + o.decision.Explain() + ")" + aside;
      return o;
    }
    const auto n = static_cast<size_t>(o.decision.placement.node);
    const auto position = static_cast<size_t>(o.decision.placement.gpus.at(0));
    o.reservation = v.Book(p, o.decision.placement.node, position, p.gpu_memory);
    if (o.reservation == 0) {
      o.reason = "the packer's choice " + v.names[n] + " could not be booked";
      return o;
    }
    o.placed = true;
    o.node = v.names[n];
    o.gpu = v.gpu_index[n][position];
    char how[200];
    std::snprintf(how, sizeof how,
                  "%s/%d by Paladin's packer, policy %s (score %.1f, %d feasible node%s)",
                  o.node.c_str(), o.gpu, packer_->policy().name.c_str(), o.decision.score,
                  o.decision.feasible_nodes, o.decision.feasible_nodes == 1 ? "" : "s");
    o.how = how;
  }
  if (o.placed) {
    View::Held& held = v.team_held[team];
    held.bytes += p.gpu_memory;
    held.gpus += 1;
  }
  return o;
}

void PlacementPass::Unbook(const PodRequest& pod, const PodOutcome& outcome) {
  View& v = *v_;
  if (!outcome.placed || outcome.reservation == 0) return;
  v.fleet.Unreserve(outcome.reservation);
  std::erase_if(v.bookings,
                [&](const View::Booking& b) { return b.reservation == outcome.reservation; });
  View::Held& held = v.team_held[v.Team(pod.ns)];
  held.bytes -= std::min(held.bytes, pod.gpu_memory);
  held.gpus -= std::min<uint64_t>(held.gpus, 1);
}

std::vector<std::pair<std::string, std::string>> PlacementPass::NodeVerdicts(const PodRequest& p) {
  const View& v = *v_;
  std::vector<std::pair<std::string, std::string>> out;
  int64_t largest = 0;
  for (int64_t m : v.gpu_memory) largest = std::max(largest, m);
  const core::Workload w = server::GpuShape(PodName(p), p.ns, p.priority, 1,
                                            static_cast<int64_t>(p.gpu_memory), largest);
  for (size_t n = 0; n < v.names.size(); ++n) {
    if (p.move_to.empty()) {
      if (std::string mismatch = NodeMismatch(p.constraints, v.facts[n]); !mismatch.empty()) {
        out.emplace_back(v.names[n], "ruled out by the pod: " + mismatch);
        continue;
      }
    }
    core::PackerOptions options;
    options.collect_reasons = true;
    options.only_node = static_cast<int32_t>(n);
    const core::Decision d = packer_->Schedule(v.fleet, w, *rng_, options);
    std::string verdict;
    if (d.placed) {
      verdict = "fits, GPU " +
                std::to_string(v.gpu_index[n][static_cast<size_t>(d.placement.gpus.at(0))]);
    } else {
      for (const core::FilterRejections& r : d.rejections) {
        if (r.nodes == 0) continue;
        verdict += (verdict.empty() ? "" : "; ") + r.plugin + " rejects it";
        if (!r.first_reason.empty()) verdict += ": " + r.first_reason;
      }
      if (verdict.empty()) verdict = d.Explain();
    }
    out.emplace_back(v.names[n], verdict);
  }
  return out;
}

std::vector<GpuBooks> PlacementPass::Gpus() const {
  const View& v = *v_;
  std::vector<GpuBooks> out;
  for (size_t n = 0; n < v.names.size(); ++n) {
    const core::Node& node = v.fleet.node(static_cast<int32_t>(n));
    for (size_t g = 0; g < node.gpus.size(); ++g) {
      GpuBooks b;
      b.node = v.names[n];
      b.index = v.gpu_index[n][g];
      b.memory_bytes = v.gpu_memory[n];
      b.free_bytes = node.gpus[g].mem_left_mib << 20;
      for (const View::Booking& k : v.bookings) {
        if (k.node == static_cast<int32_t>(n) && k.gpu == g) b.pods.emplace_back(k.pod, k.bytes);
      }
      out.push_back(std::move(b));
    }
  }
  return out;
}

std::string PlacementPass::TeamOf(const std::string& ns) const { return v_->Team(ns); }

std::string PlacementPass::TeamLine(const std::string& ns) const {
  const View& v = *v_;
  if (!v.teams_checked) return "";
  const std::string team = v.Team(ns);
  if (!v.quotas.ok()) {
    return team + ": its quota cannot be checked (" + v.quotas.status().message() + ")";
  }
  auto q = v.quotas->find(team);
  const TeamQuota quota = q != v.quotas->end() ? q->second : TeamQuota{};
  auto found = v.team_held.find(team);
  const View::Held held = found != v.team_held.end() ? found->second : View::Held{};
  const uint64_t pods = held.bytes;
  // max_gpus, where the team has one: the GPUs its pods (one each) and its jobs hold.
  const std::string gpus =
      quota.max_gpus > 0 ? "; " + std::to_string(held.gpus + quota.elsewhere_gpus) + " of its " +
                               std::to_string(quota.max_gpus) + " GPUs (max_gpus) in use"
                         : "";
  const std::string elsewhere =
      quota.elsewhere_bytes > 0
          ? " (" + base::FormatSize(quota.elsewhere_bytes) + " of it outside this cluster)"
          : "";
  if (quota.max_bytes == 0) {
    return team + ": no max_gpu_mem quota; its pods hold " + base::FormatSize(pods) +
           (quota.elsewhere_bytes > 0
                ? ", its jobs and other clusters' pods " + base::FormatSize(quota.elsewhere_bytes)
                : "") +
           gpus;
  }
  return team + ": " + base::FormatSize(pods + quota.elsewhere_bytes) + " of its " +
         base::FormatSize(quota.max_bytes) + " of GPU memory (max_gpu_mem) in use" + elsewhere +
         gpus;
}

StatusOr<std::unique_ptr<ReplacementPlacer>> ReplacementPlacer::Create(
    const ApiClient& client, const SchedulerOptions& options, const std::string& moving_uid) {
  if (Status s = server::MakeServerPolicy(options.policy).status(); !s.ok()) return s;
  StatusOr<ClusterState> state = ReadClusterState(client, options);
  if (!state.ok()) return state.status();
  state->moving_uid = moving_uid;
  return Create(*state, options);
}

StatusOr<std::unique_ptr<ReplacementPlacer>> ReplacementPlacer::Create(
    const ClusterState& state, const SchedulerOptions& options) {
  StatusOr<core::Policy> policy = server::MakeServerPolicy(options.policy);
  if (!policy.ok()) return policy.status();
  std::unique_ptr<ReplacementPlacer> placer(new ReplacementPlacer(std::move(*policy)));
  StatusOr<std::unique_ptr<PlacementPass>> pass =
      PlacementPass::Create(state, &placer->packer_, &placer->rng_);
  if (!pass.ok()) return pass.status();
  placer->pass_ = std::move(*pass);
  return placer;
}

PodOutcome ReplacementPlacer::Place(const std::string& pod_json, const std::string& node, int gpu) {
  PodRequest p = ReadPod(pod_json);
  // As its replacement will be: not yet bound, restoring (a move's own GPU is honoured only then).
  p.node.clear();
  p.gpu = -1;
  p.deleting = false;
  p.phase = "Pending";
  p.restores = true;
  p.move_to = gpu >= 0 ? node + "/" + std::to_string(gpu) : "";
  return pass_->Place(p, gpu >= 0 ? "" : node);
}

}  // namespace paladin::k8s
