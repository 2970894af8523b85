// `paladin k8s mover`: the node's side of the moves users ask of Paladin's server
// (docs/kubernetes.md, "Moves through Paladin's server"). A team asks the server to move one of
// its pods (`paladin pods move NAMESPACE/NAME`, POST /v1/pods/NAMESPACE/NAME/move); the server
// checks that the token's team owns the pod and keeps the move in its ledger; the mover of the
// pod's node takes it (once: a second taker is refused), carries it out with `paladin k8s move`'s
// code (MovePod: the packer's choice of GPU, the team's quota, checkpoint, replacement, the old
// pod deleted, never two copies), posts the pod's events and tells the server how it ended.
//
// Thread safety: RunServerMoves is one blocking call.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "paladin/api/client.h"
#include "paladin/api/wire.h"
#include "paladin/base/status.h"
#include "paladin/k8s/api.h"
#include "paladin/k8s/move.h"

namespace paladin::k8s {

struct MoverOptions {
  std::string node;   // this node: the mover takes the moves of pods that run here
  std::string mover;  // its name in the server's ledger (default: the node's)
  // Its cluster's name, as its scheduler reports the cluster's pods (`--cluster`): the moves it
  // lists are that cluster's only, nodes of two clusters sharing names.
  std::string cluster = "default";
  MoveOptions move;  // runc, CRIU, images, key, driver, placement: every move's
  // Other nodes' image folders, reachable from this node (a filesystem both mount), for moves
  // there: the image is carried into them. A move to a node not named here fails, saying so.
  std::map<std::string, std::string> node_images;
  // Other nodes' movers (HOST:PORT of their --carry-listen), for moves there between machines:
  // the image is sent to them over the network (paladin/k8s/carry.h).
  std::map<std::string, std::string> node_movers;
  // A node named by neither map: its image goes to the mover running there, found as the pod
  // of `mover_pods` (NAMESPACE/KEY=VALUE, the DaemonSet's label) on that node, at its pod IP and
  // this port (its --carry-listen). 0: no such lookup (the move then fails, saying so).
  int carry_port = 0;
  std::string mover_pods = "paladin/app.kubernetes.io/name=paladin-mover";
  // A move this mover's name took and did not finish is a leftover of a mover that was stopped
  // in the middle of it: a pass holds the node's pass lock (move.images/mover.lock), so no other
  // pass of the node is in flight, and settles it once it has been taken this long.
  double settle_after_s = 0;
  // A move stopped after its checkpoint (its pod's process only in the image) whose finishing
  // keeps failing (the destination unreachable) is tried again each pass for this long after it
  // was taken; then the pod is restored on its own node from the image instead, and the move
  // fails saying so: never left stopped.
  double finish_within_s = 300;
};

// What a pass does with a leftover move (taken by this mover's name, not finished), from the pod
// and its replacement (NextPodName, carrying paladin.io/moved-from naming the pod) as the API
// server has them now: the replacement Running: the move is done (the old pod deleted first
// when it is still there); the replacement not yet running: wait; ended: failed; no
// replacement and the pod still there, whatever its phase (a checkpoint ends its container):
// resume it on the node (ResumeMove: undone when the pod's container runs on, finished from the
// checkpoint image when it does not); no replacement and the pod gone: failed, saying so.
struct Leftover {
  enum class Action { kWait, kDone, kDeleteOldThenDone, kResume, kFail };
  Action action = Action::kWait;
  std::string message;
  std::string new_name;
};
// OLD_POD, NEW_POD: the objects' JSON, "" when the API server has none.
Leftover SettleLeftover(const api::PodMove& move, const std::string& old_pod,
                        const std::string& new_pod);

// The options of one taken move: the pod, its namespace, the node and GPU asked (none: the pod's
// node, the packer's GPU), that node's image folder or mover when it is another. An error (a
// node whose folder and mover are both unknown) names what is missing; the move then fails.
// `find_mover` (may be empty) gives a node's mover's HOST:PORT where neither map names the node.
StatusOr<MoveOptions> ServerMoveOptions(
    const api::PodMove& move, const MoverOptions& options,
    const std::function<StatusOr<std::string>(const std::string& node)>& find_mover = nullptr);

// The address of the mover on `node` among `pod_list` (a PodList of the movers' pods): the
// running one's pod IP, with `port`. An error says what is missing (no mover there, not running,
// no IP yet).
StatusOr<std::string> MoverAddress(const std::string& pod_list, const std::string& node, int port);
// MoverAddress over the pods of options.mover_pods as the API server lists them now.
StatusOr<std::string> FindMover(const ApiClient& kube, const MoverOptions& options,
                                const std::string& node);

// One pass, holding the node's pass lock (another pass of the node in flight: this one does
// nothing and returns 0; a lock file that is not root's alone: an error): first each leftover of
// this mover's name is settled (SettleLeftover); then each move
// the server has "requested" for a pod on options.node is taken, carried out and finished,
// oldest first. Returns how many were taken; an error only when the server
// cannot be asked for the list (a move whose take is refused, taken by another mover, is
// skipped). `progress` gets one line per step.
StatusOr<int> RunServerMoves(const ApiClient& kube, const api::Client& server,
                             const MoverOptions& options,
                             const std::function<void(const std::string&)>& progress);

}  // namespace paladin::k8s
