// Pods back after their node is lost (docs/kubernetes.md, "Recovering a lost node's pods").
//
// `paladin k8s checkpoint`, on each node, checkpoints every running pod of the RuntimeClass
// `paladin` there, leaving it running (its GPU state first through the driver's checkpoint API,
// as `paladin k8s move` does), into a folder that outlives the node: the recovery node's image
// folder or a filesystem every node mounts as its own. Each image is written under a temporary
// name and renamed when whole; a pod's older images are removed once a newer one is whole.
//
// `paladin k8s recover NODE --to N`, on N, once NODE is lost (its Ready condition not True, or
// its kubelet's lease older than --lost-after), replaces each of NODE's pods of the RuntimeClass
// with a pod on N restored from its last checkpoint. Exactly once: the old pod is claimed in the
// image folder, then deleted from the API server at once (grace 0, its uid as precondition), so a
// kubelet of NODE that comes back finds no pod to run and stops what it still had; only then is
// the replacement created, under a name fixed by the old one, restoring an image that restores
// once. Run again after a crash, it finishes what a claim recorded and creates nothing twice.
//
// Thread safety: each call below blocks (the API server, runc, CRIU, the driver); none shares
// state.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/k8s/api.h"
#include "paladin/k8s/move.h"

namespace paladin::k8s {

// A periodic checkpoint's image name: "recover-UID-MS" (UID the pod's, MS the time it was
// taken, milliseconds since the epoch); empty when the uid holds anything but [A-Za-z0-9-].
std::string CheckpointImageName(const std::string& uid, int64_t ms);

// What a checkpoint image's folder records (its `owner` file, which scripts/paladin-runc.sh also
// reads): the namespace, the replacement's name, the pod it was taken of, the node, the GPU.
struct CheckpointInfo {
  std::string image;  // the folder's name
  std::string ns;
  std::string pod;       // the replacement that may restore it
  std::string from_pod;  // the pod it was taken of
  std::string from_uid;
  std::string node;
  std::string gpu_uuid;   // the GPU the pod had ("" for none)
  int64_t ms = 0;         // when it was taken (from the name)
  bool claimed = false;   // a recovery has claimed it (its `claimed` file)
  bool restored = false;  // a pod was restored from it already (paladin-runc's ROLE.restored)
  std::string pod_json;   // the pod as it was when taken (its `pod.json`)
};
// The owner file's text for `info` and its parse; the parse names what is missing.
std::string OwnerFile(const CheckpointInfo& info);
StatusOr<CheckpointInfo> ReadOwnerFile(const std::string& image, const std::string& text);

// Whether `node` (a Node's JSON) is lost at `now_s` (seconds since the epoch): its Ready
// condition is not True, or its lease (a Lease's JSON from kube-node-lease; "" if none) was
// last renewed more than `lost_after_s` ago; `why` (if given) says which. Missing evidence never
// makes a node lost: Ready with no lease is alive. An error says why it is not lost.
Status CheckNodeLost(const std::string& node_json, const std::string& lease_json, double now_s,
                     double lost_after_s, std::string* why = nullptr);

// The nodes of a NodeList that are lost at `now_s` (CheckNodeLost, each with its Lease from the
// LeaseList of kube-node-lease, matched by name), less `except` (the recovering node): what
// `paladin k8s recover --watch` recovers each pass.
StatusOr<std::vector<std::string>> LostNodes(const std::string& node_list_json,
                                             const std::string& lease_list_json, double now_s,
                                             double lost_after_s, const std::string& except);

// One pod to recover: the old pod's JSON (from the API server, or recorded with its image) and
// the image to restore it from.
struct RecoverItem {
  std::string ns, name, uid;
  std::string pod_json;
  CheckpointInfo image;
  std::string new_name;
  bool old_pod_exists = false;  // in the API server still (else: a claim being finished)
};
struct RecoverPlan {
  std::vector<RecoverItem> recover;
  std::vector<std::string> left;  // "NAMESPACE/NAME: why it is not recovered"
};
// The plan from the lost node's pods (a PodList) and the images in the recovery folder: each pod
// of the RuntimeClass paladin that is not finished, with its latest image taken of it (by uid);
// a pod with none is left, saying so; an image claimed by an earlier recovery whose pod is gone
// is recovered from the pod recorded with it (finishing a recovery interrupted after the delete).
// An image restored already is never planned again. Pods of other RuntimeClasses are left to
// Kubernetes.
StatusOr<RecoverPlan> PlanRecovery(const std::string& node, const std::string& pod_list_json,
                                   const std::vector<CheckpointInfo>& images);

// The JSON body of DELETE that removes a pod at once (grace 0), only if its uid is still `uid`.
std::string ForceDeleteBody(const std::string& uid);

struct CheckpointOptions {
  std::string node;       // this node's name
  std::string to_images;  // where images go: the recovery node's folder, or a shared one
  // Or, between machines: the recovery node's mover (`paladin k8s mover --carry-listen`),
  // HOST:PORT, to which each image is sent (made in move.images first), and which removes the
  // older ones there (paladin/k8s/carry.h, PRUNE).
  std::string to_mover;
  MoveOptions move;  // runc, runc_root, criu_dir, images (this node's, for CRIU's logs), driver
};
struct CheckpointResult {
  std::vector<std::string> taken;  // "NS/NAME IMAGE MS" per pod
  std::vector<std::string> left;   // "NS/NAME: why"
  int removed = 0;                 // older images removed
};
// Of the images in `folder` that node `node` checkpointed and no recovery claimed: all of a pod
// not in `present_uids` (moved, deleted) and all but the newest of each other pod, removed. How
// many were.
int PruneCheckpoints(const std::string& folder, const std::string& node,
                     const std::set<std::string>& present_uids);

// One pass over the node's pods.
StatusOr<CheckpointResult> CheckpointNode(const ApiClient& client, const CheckpointOptions& o,
                                          const std::function<void(const std::string&)>& progress);

struct RecoverOptions {
  std::string lost_node;
  double lost_after_s = 40;  // a lease older than this counts the node lost
  MoveOptions move;          // node: where to; images: the folder holding the checkpoints (the
                             // destination's); runc_root: the destination's; key_file; driver; nvml
};
struct RecoverResult {
  std::vector<std::string> recovered;  // "NS/OLD -> NS/NEW from IMAGE"
  std::vector<std::string> left;
};
// LostNodes over the API server's nodes and leases now.
StatusOr<std::vector<std::string>> FindLostNodes(const ApiClient& client, const std::string& except,
                                                 double lost_after_s);

StatusOr<RecoverResult> RecoverNode(const ApiClient& client, const RecoverOptions& o,
                                    const std::function<void(const std::string&)>& progress);

// The GPU state of a restored container's processes put back onto GPU `gpu` of this node (the
// driver remapping `from_uuid`, the GPU it was taken on, to it) and unlocked. Run on the node
// that runs the container (its runc, o.runc and o.runc_root; o.driver; o.nvml): by the
// RuntimeClass's runtime as soon as it has restored the container (`paladin k8s gpu-restore`,
// scripts/paladin-runc.sh), which leaves IMAGE_DIR/ROLE.gpu-restored; else by the mover or the
// recovery once the replacement runs (both nodes on one machine: its --to-runc-root).
Status RestoreGpuState(const std::string& container_id, const MoveOptions& o,
                       const std::string& from_uuid, int gpu,
                       const std::function<void(const std::string&)>& progress);
inline constexpr char kGpuRestoredSuffix[] = ".gpu-restored";

}  // namespace paladin::k8s
