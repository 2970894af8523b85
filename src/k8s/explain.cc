#include "paladin/k8s/explain.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <tuple>

#include "json_fields.h"
#include "paladin/api/wire.h"
#include "paladin/base/size.h"
#include "paladin/core/packer.h"
#include "paladin/core/rng.h"
#include "paladin/server/placement.h"

namespace paladin::k8s {
namespace {

using Json = nlohmann::json;

// The scheduler's latest event of the pod (of this uid), "REASON: MESSAGE"; empty if none.
std::string LatestEvent(const std::string& events_json, const std::string& uid,
                        const std::string& scheduler) {
  const Json list = Json::parse(events_json.empty() ? "{}" : events_json, nullptr, false);
  if (!list.is_object()) return "";
  std::tuple<std::string, std::string> latest;
  std::string out;
  for (const Json& e : list.value("items", Json::array())) {
    if (!e.is_object()) continue;
    const Json object = e.value("involvedObject", Json::object());
    if (!uid.empty() && Str(object, "uid") != uid) continue;
    if (Str(e.value("source", Json::object()), "component") != scheduler &&
        Str(e, "reportingComponent") != scheduler) {
      continue;
    }
    // Ordered by time, then by name: the scheduler's event names grow with time.
    std::tuple<std::string, std::string> when{Str(e, "lastTimestamp"),
                                              Str(e.value("metadata", Json::object()), "name")};
    if (out.empty() || when >= latest) {
      latest = when;
      out = Str(e, "reason") + ": " + Str(e, "message");
    }
  }
  return out;
}

// Why a pending pod would be left, or where the next pass puts it; fills `e`.
void ExplainPending(PlacementPass& pass, const PodRequest& p, PodExplanation& e) {
  // The pods the pass decides first take their places before it, as in the scheduler.
  for (const PodRequest& q : pass.pending()) {
    if (q.ns == p.ns && q.name == p.name) break;
    const PodOutcome o = pass.Place(q);
    if (o.placed) e.ahead.push_back(q.ns + "/" + q.name + ": " + o.how);
  }
  if (p.error.empty() && p.gpu_memory > 0) e.nodes = pass.NodeVerdicts(p);
  const PodOutcome o = pass.Place(p);
  if (o.placed) {
    e.reason = "none now: a pass places it on " + o.how +
               " (bound at the scheduler's next pass, if paladin k8s scheduler runs)";
  } else {
    e.reason = o.reason;
  }
}

}  // namespace

StatusOr<PodExplanation> ExplainPod(const ClusterState& state, const std::string& pod_json,
                                    const std::string& events_json,
                                    const SchedulerOptions& options) {
  const Json pod = Json::parse(pod_json, nullptr, false);
  if (!pod.is_object()) return InvalidArgument("the pod is not a JSON object");
  StatusOr<core::Policy> policy = server::MakeServerPolicy(options.policy);
  if (!policy.ok()) return policy.status();
  core::Packer packer(std::move(*policy));
  core::Rng rng(1);  // the scheduler's seed
  StatusOr<std::unique_ptr<PlacementPass>> pass = PlacementPass::Create(state, &packer, &rng);
  if (!pass.ok()) return pass.status();

  const PodRequest p = ReadPod(pod_json);
  const Json meta = pod.value("metadata", Json::object());
  const std::string scheduler = Str(pod.value("spec", Json::object()), "schedulerName");
  PodExplanation e;
  e.pod = p.ns + "/" + p.name;
  e.node = p.node;
  e.gpu = p.gpu;
  e.gpu_memory = p.gpu_memory;
  e.priority = p.priority;
  e.team = (*pass)->TeamLine(p.ns);
  e.event = LatestEvent(events_json, p.uid, options.scheduler_name);
  const std::string placement =
      Str(meta.value("annotations", Json::object()), kPlacementAnnotation);

  if (scheduler != options.scheduler_name) {
    e.state = "not Paladin's";
    e.reason = "its spec.schedulerName is '" + scheduler + "': that scheduler places it, not " +
               "Paladin's ('" + options.scheduler_name + "', which Paladin's webhook sets on " +
               "pods asking for " + kGpuMemoryResource + ")";
  } else if (api::PodPhaseEnded(p.phase)) {
    e.state = "ended (" + p.phase + ")";
    e.placement = placement;
  } else if (!p.node.empty() && p.gpu >= 0) {
    e.state = "placed";
    e.placement = placement.empty() ? p.node + "/" + std::to_string(p.gpu) : placement;
  } else if (!p.node.empty()) {
    e.state = "on " + p.node;
    e.reason = "bound to its node with no Paladin GPU (no " + std::string(kGpuAnnotation) +
               "): not by Paladin's packer (a move's replacement of a pod asking for no GPU " +
               "memory, or a pod created with its node)";
  } else if (p.deleting) {
    e.state = "deleting";
    e.reason = "being deleted before it was placed: no pass decides it";
  } else {
    e.state = "pending";
    ExplainPending(**pass, p, e);
  }
  e.gpus = (*pass)->Gpus();
  return e;
}

StatusOr<PodExplanation> ExplainPod(const ApiClient& client, const SchedulerOptions& options,
                                    const std::string& ns, const std::string& name) {
  if (Status s = CheckNodeName(ns); !s.ok() || ns.find('.') != std::string::npos) {
    return InvalidArgument("namespace '" + ns + "' is not a namespace's name");
  }
  if (Status s = CheckNodeName(name); !s.ok()) {
    return InvalidArgument("pod '" + name + "' is not a pod's name");
  }
  const std::string base = "/api/v1/namespaces/" + ns;
  StatusOr<std::string> pod = client.Get(base + "/pods/" + name);
  if (!pod.ok()) return pod.status();
  StatusOr<ClusterState> state = ReadClusterState(client, options);
  if (!state.ok()) return state.status();
  // Events are a nicety: an identity that may not list them still gets the explanation.
  StatusOr<std::string> events =
      client.Get(base + "/events?fieldSelector=involvedObject.name%3D" + name);
  StatusOr<PodExplanation> e = ExplainPod(*state, *pod, events.ok() ? *events : "", options);
  if (e.ok() && !events.ok()) e->event = "(events unreadable: " + events.status().message() + ")";
  return e;
}

std::vector<std::pair<std::string, std::string>> ExplanationRows(const PodExplanation& e) {
  std::vector<std::pair<std::string, std::string>> rows = {{"pod", e.pod}, {"state", e.state}};
  if (!e.placement.empty()) rows.emplace_back("placement", e.placement);
  if (!e.reason.empty()) rows.emplace_back("reason", e.reason);
  rows.emplace_back("asks", base::FormatSize(e.gpu_memory) + " of GPU memory, priority " +
                                std::to_string(e.priority));
  if (!e.team.empty()) rows.emplace_back("team", e.team);
  rows.emplace_back("event", e.event.empty() ? "-" : e.event);
  for (const std::string& a : e.ahead) rows.emplace_back("ahead", a);
  for (const auto& [node, verdict] : e.nodes) {
    rows.emplace_back("node", node);
    rows.back().second.append(": ").append(verdict);
  }
  for (const GpuBooks& g : e.gpus) {
    std::string books =
        g.node + "/" + std::to_string(g.index) + ": " +
        base::FormatSize(static_cast<uint64_t>(g.memory_bytes)) + ", " +
        base::FormatSize(static_cast<uint64_t>(std::max<int64_t>(g.free_bytes, 0))) + " free";
    for (size_t i = 0; i < g.pods.size(); ++i) {
      books += i == 0 ? " (" : ", ";
      books += g.pods[i].first + " " + base::FormatSize(g.pods[i].second);
    }
    if (!g.pods.empty()) books += ")";
    rows.emplace_back("gpu", books);
  }
  return rows;
}

}  // namespace paladin::k8s
