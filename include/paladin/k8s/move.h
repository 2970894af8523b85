// `paladin k8s move`: a running pod moved into a new pod, its process state with it, and its GPU
// state onto another GPU of the node (docs/kubernetes.md, "Moving a pod"). Run on the pod's node:
// the container is checkpointed with runc and CRIU (its GPU state first through the driver's
// checkpoint API), the replacement is created with paladin.io/restore-from naming the image and
// a restore token only this node's key can make, Paladin's scheduler binds it to the GPU asked
// for, the RuntimeClass `paladin` (scripts/paladin-runc.sh) restores it in place of a fresh start,
// and the old pod is deleted. At no instant do two copies run.
//
// Thread safety: MovePod is one blocking call (the API server, runc, CRIU, the driver).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/k8s/api.h"
#include "paladin/k8s/scheduler.h"

namespace paladin::k8s {

// Annotations of a replacement pod.
inline constexpr char kRestoreFromAnnotation[] = "paladin.io/restore-from";  // the image's name
inline constexpr char kRestoreTokenAnnotation[] = "paladin.io/restore-token";
inline constexpr char kMoveToAnnotation[] = "paladin.io/move-to";  // NODE/GPU, for the scheduler
inline constexpr char kMovedFromAnnotation[] = "paladin.io/moved-from";  // NAMESPACE/POD (uid)
inline constexpr char kRuntimeClass[] = "paladin";

// The restore token: HMAC-SHA256 under the node's key over the image's name and the replacement
// pod's namespace and name, in hex. The RuntimeClass recomputes it from the names containerd
// gives the container (not from anything in the pod spec) and restores only when they match, so
// a pod can restore only the image Paladin's move made for it, under its own name and namespace.
std::string RestoreToken(const std::string& key, const std::string& image, const std::string& ns,
                         const std::string& pod);

// The replacement's name: "NAME-m1", and "NAME-m2" for "NAME-m1" (a pod moved again).
std::string NextPodName(const std::string& name);

// What a move needs of the pod, read from its JSON; an error names what rules the move out.
struct MovablePod {
  std::string ns, name, uid, node;
  std::string container;     // its one container's name
  std::string container_id;  // containerd's id of it
  int gpu = -1;              // paladin.io/gpu, or -1 for a pod without a Paladin GPU
};
// `running`: the pod must be Running with its container running (a pod to move); false: a pod
// whose move stopped after its checkpoint, its container exited (its id from its last state).
StatusOr<MovablePod> ReadMovablePod(const std::string& pod_json, bool running = true);

// The replacement pod to POST: the old one's spec (less what the API server, the scheduler and
// the webhook fill in, which they fill in again) and labels, with the restore annotations, and
// either paladin.io/move-to NODE/GPU (a GPU pod: Paladin's scheduler binds it there) or
// spec.nodeName (a pod without a Paladin GPU stays on its node).
struct Replacement {
  std::string name;
  std::string image;
  std::string token;
  std::string node;
  int gpu = -1;
};
StatusOr<std::string> ReplacementPod(const std::string& old_pod_json, const Replacement& r);

struct MoveOptions {
  std::string ns = "default";
  std::string pod;
  std::string new_name;  // empty: NextPodName
  // -1: a pod without a Paladin GPU stays without; a GPU pod gets the GPU Paladin's packer
  // chooses on the destination (placement; on its own node, another than its own, else no move).
  int gpu = -1;
  std::string node;  // empty: the pod's node
  // A move to another node: the image is carried into the destination's image folder (on this
  // machine: the other node's own, or a filesystem both nodes mount), and for a GPU pod the
  // restored processes are found in the destination's runc state (empty: runc_root).
  std::string to_images;
  // Or, between machines: the destination node's mover (`paladin k8s mover --carry-listen`),
  // HOST:PORT, to which the image is sent over the network (paladin/k8s/carry.h).
  std::string to_mover;
  std::string to_runc_root;
  std::string runc = "runc";
  std::string runc_root = "/run/containerd/runc/k8s.io";
  std::string criu_dir;  // put first on runc's PATH (Paladin's CRIU)
  std::string images = "/var/lib/paladin/k8s/images";
  std::string key_file = "/var/lib/paladin/k8s/move.key";
  std::string driver = "libcuda.so.1";     // the CUDA driver for the checkpoint API
  std::string nvml = "libnvidia-ml.so.1";  // the GPUs' UUIDs
  double timeout_s = 60;                   // for the replacement to run
  // The packer's policy (the scheduler's --policy) for the replacement's GPU and, when
  // team_quotas is set, the team's quotas it must fit with the old pod still counted.
  SchedulerOptions placement;
};

struct MoveResult {
  std::string new_name;
  std::string image;
  int from_gpu = -1, to_gpu = -1;
  std::string from_node, to_node;
  int64_t checkpoint_ms = 0;  // GPU state and CRIU
  int64_t carry_ms = 0;       // the image carried to the destination's folder (between nodes)
  int64_t paused_ms = 0;      // from the first lock until the replacement's GPU state is unlocked
};

// The checks of a move's target that need nothing but the pod and the options: a move between
// nodes needs the destination's image folder or its mover's address, not both; a GPU pod given a
// GPU needs another than its own (none given, the packer chooses one in MovePod); a pod without a
// Paladin GPU takes no --gpu. Fills in o.node's default.
Status CheckTarget(const MovablePod& pod, MoveOptions& o);

// Whether a Node (its JSON) may receive a moved pod: Ready and not cordoned; an error says why.
Status CheckDestinationNode(const std::string& node_json);

// Moves the pod; `progress` gets one line per step. On an error before the checkpoint the pod is
// left running as it was; after it, the error says where the image is, and `*whole_image` (when
// given) is set: the image is whole and the pod's process gone, so ResumeMove can finish the move
// from it.
StatusOr<MoveResult> MovePod(const ApiClient& client, const MoveOptions& options,
                             const std::function<void(const std::string&)>& progress,
                             bool* whole_image = nullptr);

// This node's copies of a move's image (in `images`: folders whose owner file names the
// replacement `new_name` and the pod `ns/pod`), removed once the replacement runs on another
// node. How many were.
int RemoveMoveImages(const std::string& images, const std::string& ns, const std::string& pod,
                     const std::string& new_name);

// `paladin k8s drain NODE`: the node cordoned (spec.unschedulable, so the stock scheduler places
// nothing more there), then each running pod of the RuntimeClass `paladin` on it moved to
// another node, one after another, as MovePod does. Pods of other RuntimeClasses (and the
// DaemonSets' and mirror pods) are left for `kubectl drain`, which evicts rather than moves.
struct DrainPlan {
  std::vector<MovablePod> move;   // in the order of the list
  std::vector<std::string> left;  // "NAMESPACE/NAME: why it is not moved"
};
// A move whose mover was stopped before the replacement ran (a move taken from Paladin's server
// and never finished: SettleLeftover's kResume), settled on the pod's node, as root, with the
// move's options. The pod's container runs on (the mover stopped before the checkpoint was
// whole): the move is undone (a GPU state locked or checkpointed given back, the mark that keeps
// the container from starting again and the move's image removed): kUndone. It does not, and
// the move's image is whole (the checkpoint ended; carried whole into the destination's folder,
// or still in this node's): the move is finished from it as MovePod would have (the image
// carried, the replacement created on the GPU asked or the packer's, the GPU state restored, the
// old pod deleted): kFinished, paused_ms counted from the checkpoint's end. Else an error saying
// what is left (no whole image: the pod's state is in none).
struct Resumed {
  enum class Kind { kUndone, kFinished };
  Kind kind = Kind::kUndone;
  MoveResult result;    // kFinished
  std::string message;  // what was done
};
// `*whole_image` (when given) is set once a whole image was found and the finishing began: an
// error after that leaves the pod's process in the image only.
StatusOr<Resumed> ResumeMove(const ApiClient& client, const MoveOptions& options,
                             const std::function<void(const std::string&)>& progress,
                             bool* whole_image = nullptr);

// Marks `node` unschedulable (spec.unschedulable: true), as `kubectl cordon` does.
Status CordonNode(const ApiClient& client, const std::string& node);
// The plan from a PodList of the node's pods (GET /api/v1/pods?fieldSelector=spec.nodeName=N).
StatusOr<DrainPlan> PlanDrain(const std::string& pod_list_json);

struct DrainResult {
  std::vector<MoveResult> moved;
  std::vector<std::string> left;
};
// Cordons `node` and moves its pods per `move` (node, to_images, runc and the rest; pod, ns and
// new_name are each pod's). Stops at the first move that fails, saying which and what is left.
StatusOr<DrainResult> DrainNode(const ApiClient& client, const std::string& node,
                                const MoveOptions& move,
                                const std::function<void(const std::string&)>& progress);

}  // namespace paladin::k8s
