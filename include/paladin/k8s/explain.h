// `paladin k8s explain POD`: why Paladin's scheduler placed a pod where it is, or why it leaves
// it Pending (docs/kubernetes.md). A placed pod is explained by what the scheduler recorded on
// it (its Binding's annotations); a pending one by running the scheduler's own pass
// (include/paladin/k8s/placement_pass.h) over the cluster as it is now, binding nothing: the
// pods the scheduler decides before it, then the pod itself, each node's verdict on it alone, and
// the GPUs' books. No second implementation of placement: what explain says of a pending pod is
// what the scheduler's next pass gives as its reason.
//
// Thread safety: none needed; each call reads the cluster afresh and blocks on the API server.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/k8s/api.h"
#include "paladin/k8s/placement_pass.h"
#include "paladin/k8s/scheduler.h"

namespace paladin::k8s {

struct PodExplanation {
  std::string pod;    // NAMESPACE/NAME
  std::string state;  // placed, pending, ended (PHASE), deleting, not Paladin's, on NODE
  // placed: the pod's paladin.io/placement (NODE/GPU, by what, the policy, the score)
  std::string placement;
  std::string node;
  int gpu = -1;
  uint64_t gpu_memory = 0;  // what it asks: its containers' paladin.io/gpu-memory limits
  int32_t priority = 0;
  // pending: why, as the scheduler's next pass decides it; otherwise why Paladin does not
  // place it, or nothing
  std::string reason;
  std::string event;  // the scheduler's latest event of the pod: "REASON: MESSAGE", or empty
  std::string team;   // its team's line (PlacementPass::TeamLine); empty when not checked
  std::vector<std::string> ahead;  // pending: pods a pass decides first and places ("NS/NAME: how")
  std::vector<std::pair<std::string, std::string>> nodes;  // pending: each node's verdict
  std::vector<GpuBooks> gpus;  // the GPUs' books, the pods placed ahead of it included
};

// The pure part: the cluster as a pass reads it, the pod (its JSON as GET returns it) and the
// events of its namespace that name it (an EventList; "" for none). Fails on an unknown policy
// or lists that are not JSON.
StatusOr<PodExplanation> ExplainPod(const ClusterState& state, const std::string& pod_json,
                                    const std::string& events_json,
                                    const SchedulerOptions& options);

// Reads the cluster, the pod and its events through `client`, then the above. An error is the
// API server's (a missing pod: its NotFound).
StatusOr<PodExplanation> ExplainPod(const ApiClient& client, const SchedulerOptions& options,
                                    const std::string& ns, const std::string& name);

// The explanation as "key: value" rows, in the order `paladin explain JOB` prints its own
// (pod, state, reason or placement, ...; repeated keys for nodes, GPUs and pods ahead).
std::vector<std::pair<std::string, std::string>> ExplanationRows(const PodExplanation& e);

}  // namespace paladin::k8s
