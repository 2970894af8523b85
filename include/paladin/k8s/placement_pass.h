// One pass of Paladin's Kubernetes scheduler, its decisions without the API: the fleet built from
// the nodes' GPUs, the pods Paladin bound booked on it, and each pending pod decided in the
// scheduler's order by the core packer (the server's policy and shapes). `paladin k8s scheduler`
// binds what a pass places and gives the reason of what it leaves Pending; `paladin k8s explain`
// runs the same pass and binds nothing, so that both say the same of a pod (docs/kubernetes.md).
//
// Thread safety: none; a pass belongs to one caller. Only ReadClusterState does I/O.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/core/packer.h"
#include "paladin/core/rng.h"
#include "paladin/k8s/api.h"
#include "paladin/k8s/scheduler.h"

namespace paladin::k8s {

// What a pass reads of the cluster: the API server's answers, as they came.
struct ClusterState {
  std::string nodes;  // GET /api/v1/nodes
  std::string pods;   // Paladin's pods: GET /api/v1/pods?fieldSelector=spec.schedulerName=NAME
  bool teams_checked = false;
  std::string namespaces;  // GET /api/v1/namespaces, when teams are checked
  StatusOr<std::map<std::string, TeamQuota>> quotas = std::map<std::string, TeamQuota>();
  // The uid of a pod being moved within its node: its GPU share is not booked (it is leaving
  // it), while its team still counts it (both copies exist until the old one is gone).
  std::string moving_uid;
};

// Reads it through `client`, and the teams' quotas through options.team_quotas when it is set
// (its error is kept in `quotas`: the pods then stay Pending saying so). An error is the API
// server's.
StatusOr<ClusterState> ReadClusterState(const ApiClient& client, const SchedulerOptions& options);

// A GPU as the pass's books hold it.
struct GpuBooks {
  std::string node;
  int index = 0;  // the GPU's index on its node
  int64_t memory_bytes = 0;
  int64_t free_bytes = 0;
  std::vector<std::pair<std::string, uint64_t>> pods;  // "NAMESPACE/NAME", bytes booked
};

// What a pass decides for one pending pod.
struct PodOutcome {
  bool placed = false;
  std::string node;    // placed: the node's name
  int gpu = -1;        // placed: the GPU's index on it
  std::string how;     // placed: "NODE/GPU by ..." (the Binding's paladin.io/placement)
  std::string reason;  // pending: the reason its event and PodScheduled condition give
  bool packer_ran = false;
  core::Decision decision;  // the packer's, when it ran
  uint64_t reservation = 0;
};

class PlacementPass {
 public:
  // Builds the fleet from state.nodes (nodes that take pods and publish their GPUs) and books
  // the bound pods of state.pods. Fails when the lists are not JSON. `packer` and `rng` must
  // outlive the pass.
  static StatusOr<std::unique_ptr<PlacementPass>> Create(const ClusterState& state,
                                                         core::Packer* packer, core::Rng* rng);
  PlacementPass(const PlacementPass&) = delete;
  PlacementPass& operator=(const PlacementPass&) = delete;
  ~PlacementPass();

  // Paladin's pods that wait for a node (not being deleted), in the order a pass decides them:
  // higher paladin.io/priority first, then older, then by name.
  const std::vector<PodRequest>& pending() const;
  // Namespaces' label notes of this pass (a paladin.io/team label that is no team name).
  const std::vector<std::string>& notes() const;

  // Decides `pod` (one of pending()) and, placed, books it: the pods after it see it. The nodes
  // its own constraints rule out (nodeSelector, required node affinity, taints not tolerated:
  // k8s/node_fit.h) are left out, and the reason of a pod left Pending names them. With
  // `only_node`, the packer chooses among that node's GPUs only and the pod's constraints are
  // not read: a move's or a recovery's destination is its operator's (as spec.nodeName is).
  PodOutcome Place(const PodRequest& pod, const std::string& only_node = "");
  // Takes back a placement whose binding failed.
  void Unbook(const PodRequest& pod, const PodOutcome& outcome);

  // For explain: each node's verdict on `pod` alone, the packer run on that node only with its
  // reasons ("fits, GPU 1", or which plugin rejects it and why), or what of the pod's own
  // constraints rules the node out, in the fleet's order.
  std::vector<std::pair<std::string, std::string>> NodeVerdicts(const PodRequest& pod);
  // Every GPU of the fleet with what is booked on it.
  std::vector<GpuBooks> Gpus() const;
  // The team of a namespace, and (when teams are checked) its quota and what its pods hold;
  // empty when teams are not checked.
  std::string TeamLine(const std::string& ns) const;
  // The team of a namespace: its label paladin.io/team when teams are checked (the namespaces
  // were read), else k8s-NAMESPACE.
  std::string TeamOf(const std::string& ns) const;

 private:
  struct View;
  PlacementPass(const ClusterState& state, core::Packer* packer, core::Rng* rng);
  PodOutcome MoveTo(const PodRequest& pod);
  PodOutcome Pending(std::string reason) const;

  std::unique_ptr<View> v_;
  core::Packer* packer_;
  core::Rng* rng_;
};

// The scheduler's pass over the cluster as it is now, for the replacement pods a move, a drain or
// a recovery creates on the node its operator named: where Paladin's packer puts each among
// that node's GPUs, or whether the GPU the operator named has room, each booked so that the
// next sees it. With options.team_quotas the team's quota is checked too, the replaced pod
// still counted (a move runs two copies until the old pod is gone).
class ReplacementPlacer {
 public:
  // Reads the cluster through `client`; fails on an unknown policy or the API server's error.
  // `moving_uid`: ClusterState::moving_uid, for a move within the pod's node.
  static StatusOr<std::unique_ptr<ReplacementPlacer>> Create(const ApiClient& client,
                                                             const SchedulerOptions& options,
                                                             const std::string& moving_uid = "");
  // The same over a cluster read already (tests).
  static StatusOr<std::unique_ptr<ReplacementPlacer>> Create(const ClusterState& state,
                                                             const SchedulerOptions& options);
  // `pod_json`: the pod being replaced. gpu >= 0: GPU `gpu` of `node`; else the packer's choice
  // of `node`'s GPUs. Not placed: the reason.
  PodOutcome Place(const std::string& pod_json, const std::string& node, int gpu);

 private:
  explicit ReplacementPlacer(core::Policy policy) : packer_(std::move(policy)) {}
  core::Packer packer_;
  core::Rng rng_{1};
  std::unique_ptr<PlacementPass> pass_;
};

}  // namespace paladin::k8s
