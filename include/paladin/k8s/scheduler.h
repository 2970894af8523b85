// Paladin as the scheduler of its pods (docs/kubernetes.md): pods whose spec.schedulerName is
// Paladin's are placed by the core packer (the server's policy and shapes, include/paladin/
// server/placement.h) onto the GPUs the nodes publish in their paladin.io/gpus annotation, bound
// through the pods/binding subresource with the chosen GPU in annotations, and told why with an
// Event (Scheduled, or FailedScheduling with the packer's reason, also set on the pod's
// PodScheduled condition).
//
// Thread safety: a Scheduler is used by one loop; RunOnce blocks on the API server.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "paladin/api/wire.h"
#include "paladin/base/status.h"
#include "paladin/core/packer.h"
#include "paladin/core/rng.h"
#include "paladin/gpu/nvml.h"
#include "paladin/k8s/api.h"
#include "paladin/k8s/node_fit.h"

namespace paladin::k8s {

// Annotations Paladin reads and writes.
inline constexpr char kGpusAnnotation[] = "paladin.io/gpus";  // a node's GPUs (JSON, below)
inline constexpr char kGpuAnnotation[] = "paladin.io/gpu";    // the pod's GPU index on its node
inline constexpr char kGpuBytesAnnotation[] = "paladin.io/gpu-memory-bytes";  // its quota
inline constexpr char kPlacementAnnotation[] = "paladin.io/placement";        // why there
inline constexpr char kPriorityAnnotation[] = "paladin.io/priority";  // optional, an integer
inline constexpr char kSchedulerName[] = "paladin";

// A Kubernetes quantity of bytes: "8Gi", "512Mi", "1.5Gi", "17179869184", "8G", "1e9". An error
// says what is wrong with it.
StatusOr<uint64_t> ParseQuantity(std::string_view text);

// Whether Paladin's scheduler places pods on a Node (its JSON): not cordoned
// (spec.unschedulable) and Ready (a node that is not would hold a pod Pending there, or a lost
// node's kubelet would never run it); an error says why not.
Status NodeTakesPods(const std::string& node_json);

struct NodeGpu {
  int index = 0;
  int64_t memory_bytes = 0;
  std::string model;
};
// The node annotation's value: [{"index":0,"memory":8589934592,"model":"..."}, ...].
std::string GpusAnnotationValue(const std::vector<gpu::GpuInfo>& gpus);
StatusOr<std::vector<NodeGpu>> ParseGpusAnnotation(const std::string& value);

// What Paladin reads of a pod: its paladin.io/gpu-memory (the sum over its containers' limits)
// and its annotations. `error` names the field that is malformed, if any.
struct PodRequest {
  std::string ns, name, uid, node, phase, created;
  bool deleting = false;
  uint64_t gpu_memory = 0;
  int32_t priority = 0;
  int gpu = -1;           // paladin.io/gpu once bound by Paladin
  int64_t gpu_used = -1;  // paladin.io/gpu-memory-used, as measured on its node; -1: not said
  // paladin.io/move-to NODE/GPU: the GPU paladin k8s move asked for its replacement pod (honoured
  // only with paladin.io/restore-from, i.e. for a move).
  std::string move_to;
  bool restores = false;
  std::string placement;  // paladin.io/placement: why its binding put it where it is
  // Its class's command (PodClassCommand of its first container asking for GPU memory, else of
  // its first container): with its team, the class an `auto` pod is sized from (design 7).
  std::string command;
  NodeConstraints constraints;  // its nodeSelector, required node affinity and tolerations
  std::string error;
};
PodRequest ReadPod(const std::string& pod_json);

// The command a container's class is named by: the basename of its command[0], else (the
// image's own entrypoint) its image's name without registry path, tag or digest
// ("example.org/ml/trainer:v2" -> "trainer"). At most 255 bytes, no blanks or '/'; "" when the
// container names neither. `container_json`: one element of spec.containers.
std::string PodClassCommand(const std::string& container_json);

// What a bound pod holds on its GPU in the scheduler's books: its own request (its containers'
// limits, which cannot change after creation), never the paladin.io/gpu-memory-bytes annotation
// (a record for people; a user could once write it). 0 for a pod that asks for no GPU memory or
// that no Paladin binding gave a GPU (paladin.io/gpu, which only Paladin may set: the webhook).
uint64_t BookedBytes(const PodRequest& pod);

// Namespaces are teams (docs/kubernetes.md, design 6): a namespace's label paladin.io/team names
// its team (set by the cluster's administrator; a pod's own annotations never count), else it is
// its own team, "k8s-NAMESPACE". `labels` is the namespace's metadata.labels (JSON object text or
// empty). A label that is no team name is ignored (the namespace is then its own team) and said
// in `note`.
inline constexpr char kTeamLabel[] = "paladin.io/team";
std::string TeamOfNamespace(const std::string& ns, const std::string& labels_json,
                            std::string* note = nullptr);

// A team's quota on GPU memory against what its bound pods hold: empty when `ask` bytes fit,
// else the reason a pod of it stays Pending. `max_bytes` 0 means no quota.
std::string TeamQuotaReason(const std::string& team, uint64_t max_bytes, uint64_t used_bytes,
                            uint64_t ask_bytes);
// A team's quota on GPUs (max_gpus; 0: none) against the GPUs its bound pods hold, each one
// (its share of one GPU), and its jobs: empty when one more fits, else the reason a pod of it
// stays Pending.
std::string TeamGpuQuotaReason(const std::string& team, uint64_t max_gpus, uint64_t used_gpus);

// A team's quotas as Paladin's server keeps them (max_gpu_mem and max_gpus; 0: none), and what
// the team holds outside this cluster, which the quotas count too: its jobs in the server and
// its pods in other clusters (docs/kubernetes.md, "Teams").
struct TeamQuota {
  uint64_t max_bytes = 0;
  uint64_t elsewhere_bytes = 0;
  uint64_t max_gpus = 0;
  uint64_t elsewhere_gpus = 0;
};

// The teams' GPU-memory quotas, by team name (Paladin's server's teams); called once per pass.
// An error leaves the pods Pending, saying so (their teams' quotas cannot be checked).
using TeamQuotas = std::function<StatusOr<std::map<std::string, TeamQuota>>()>;

// The quotas in Paladin's server's answer to GET /v1/teams, seen from the cluster named
// `cluster`: each team's max_gpu_mem_bytes, and as elsewhere_bytes its gpu_mem_in_use's jobs_bytes
// plus the pods_bytes of every other cluster; its max_gpus, and as elsewhere_gpus its
// gpus_in_use's jobs plus the pods of every other cluster (a server that gives no max_gpus or
// gpus_in_use: none). A team whose figures are not non-negative integers is left out (its pods
// are then not held to a quota); an answer that is not an object with a "teams" list is an
// error.
StatusOr<std::map<std::string, TeamQuota>> TeamQuotasOf(const nlohmann::json& teams,
                                                        const std::string& cluster);

// Reports Paladin's pods, each pass (PUT /v1/pods of Paladin's server, so that its API,
// dashboard and team tokens see them); an error is printed once and the pass goes on.
using PodReporter = std::function<Status(const api::PodList&)>;

class PlacementPass;

struct SchedulerOptions {
  std::string scheduler_name = kSchedulerName;
  std::string policy = "paladin";
  TeamQuotas team_quotas;           // empty: teams are not checked
  PodReporter report_pods;          // empty: pods are not reported
  std::string cluster = "default";  // the cluster's name in the reports
};

class Scheduler {
 public:
  // Fails on an unknown policy.
  static StatusOr<std::unique_ptr<Scheduler>> Create(ApiClient client, SchedulerOptions options);

  // One pass: reads the nodes and Paladin's pods, places every pending one it can, binds it and
  // says so. Returns how many it bound (or the API server's error).
  StatusOr<int> RunOnce();

 private:
  Scheduler(ApiClient client, SchedulerOptions options, core::Policy policy);
  Status Event(const PodRequest& pod, const std::string& type, const std::string& reason,
               const std::string& message);
  // A pending pod's reason, as an event and its PodScheduled condition (once per new reason).
  void Unschedulable(const PodRequest& pod, const std::string& message);
  // Binds the pod to `node` (the API's name) and GPU `gpu`, and says `how` in the event.
  bool Bind(const PodRequest& pod, const std::string& node, int gpu, uint64_t bytes,
            const std::string& how);

  ApiClient client_;
  SchedulerOptions options_;
  core::Packer packer_;
  core::Rng rng_{1};
  // The pods of this pass as Paladin's server is told: where each runs, or why it waits.
  api::PodList Report(const std::string& pods_json, const PlacementPass& pass) const;

  std::map<std::string, std::string> said_;  // pod uid -> last reason given
  struct BoundNow {
    std::string node;
    int gpu = -1;
    std::string how;  // the placement annotation the binding wrote
  };
  std::map<std::string, BoundNow> bound_now_;  // uid -> where this pass bound it
  std::string report_error_;                   // the last report's error, printed once
  std::set<std::string> notes_;                // namespaces' label notes already printed
};

}  // namespace paladin::k8s
