// The pods of Kubernetes clusters that Paladin's scheduler places, as it last reported them
// (PUT /v1/pods after each pass; docs/kubernetes.md, "Pods in Paladin's server"). Kept in memory:
// the scheduler reports a cluster's whole set every pass, so a restarted server has it back one
// pass later. A team sees the pods of its namespaces only; to a team another team's pod does not
// exist (404, not 403).
//
// Thread safety: every method takes the book's own lock (not Control's).
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "paladin/api/wire.h"
#include "paladin/base/status.h"
#include "paladin/core/auto_size.h"
#include "paladin/server/auth.h"
#include "paladin/server/store.h"
#include "persistence.h"

namespace paladin::server {

// What a team's pods hold in one cluster: the GPU memory they book (paladin.io/gpu-memory) and
// the GPUs they hold, one each (a pod holds its share of one GPU, as a job holds each of its).
struct PodsHeld {
  int64_t bytes = 0;
  int64_t gpus = 0;
};

class PodBook {
 public:
  // `clock`: seconds since the epoch (the server's clock, injectable for tests).
  explicit PodBook(std::function<double()> clock) : clock_(std::move(clock)) {}

  // Replaces the cluster's pods with the list's; refuses (nothing changed) a pod whose team is
  // not a Paladin team name, or two pods of one namespace and name, naming which.
  Status Replace(const api::PodList& list);

  // GET /v1/pods: {"pods": [...], "clusters": [{"name", "reported_s_ago", "pods"}]}, the pods
  // `who` sees (an admin: all; a team: its own; an agent: none), by cluster, namespace and
  // name; `team` (optional) narrows an admin's list to one team.
  nlohmann::json List(const Principal& who, const std::string& team) const;

  // GET /v1/pods/NAMESPACE/NAME: the pod in any cluster, NotFound when `who` does not see it.
  StatusOr<nlohmann::json> Get(const Principal& who, const std::string& ns,
                               const std::string& name) const;

  // What the team's pods that hold a GPU (bound to a node, not Succeeded or Failed) hold, by
  // cluster. The server's team quotas (max_gpu_mem, max_gpus) count it with the team's jobs;
  // each cluster's scheduler counts the other clusters' with the jobs.
  std::map<std::string, PodsHeld> TeamHeld(const std::string& team) const;

  // The pods' part of /metrics, of the pods `who` sees: paladin_pods (by cluster, team and
  // phase) and paladin_pod_gpu_memory_bytes (each bound pod's booked and, when measured, used
  // GPU memory, with its node and GPU), as the jobs' part gives jobs.
  std::string Metrics(const Principal& who) const;

  // The measured peaks of the class "TEAM/COMMAND" (a pod's team and PodReport::command): the
  // highest GPU memory any of its pods was reported using (paladin.io/gpu-memory-used, as its
  // node measured it when the scheduler last read it) and how many pods that is over. Kept when
  // the pods are gone; in memory only (a restarted server learns the classes again from the
  // pods it is then told of). The `auto` pods' and jobs' history (core::SizeAuto).
  core::ClassHistory ClassPods(const std::string& class_key) const;

  // --- Moves asked through the server (docs/kubernetes.md, "Moves through Paladin's server").
  // The server keeps the ledger; the mover of the pod's node (`paladin k8s mover`) carries each
  // move out with `paladin k8s move`'s code. The newest 1,000 ended moves are kept.

  // Keeps the ledger in `store` (the server's database, through a connection of the book's own:
  // the book never takes Control's lock) and loads the moves it holds. Each change is written
  // there before it is answered, and a change that cannot be written is refused, so that a
  // restarted server knows every move it accepted and who took it: a move is taken once, also
  // across a restart. Without a store (tests) the ledger is in memory only.
  Status KeepMovesIn(std::unique_ptr<Store> store);

  // POST /v1/pods/NAMESPACE/NAME/move: a move of a pod `who` sees (NotFound otherwise, as for
  // GET), bound to a node and Running, with no other move of it under way (FailedPrecondition,
  // naming the move), to somewhere it is not (InvalidArgument). The move's view, "requested".
  StatusOr<nlohmann::json> AskMove(const Principal& who, const std::string& ns,
                                   const std::string& name, const api::PodMoveAsk& ask);
  // POST /v1/pods/drain (admins only, as the route says): a move to node `ask.to` of each pod
  // bound to node `ask.node` and Running, in every cluster, marked as a drain's (its mover
  // cordons the node before it takes the first); pods not Running there, or with a move under
  // way, are left, each with why. {"node", "to", "moves": [...], "left": [{"namespace", "name",
  // "why"}]}. A move the database refuses ends the drain there, with an error naming how many
  // were asked before it (those stand: each is in the ledger).
  StatusOr<nlohmann::json> Drain(const Principal& who, const api::PodDrainAsk& ask);
  // GET /v1/pod-moves: the moves `who` sees, newest first: an admin all, a team its pods', a
  // node's agent token those of its node's pods. `node` (the pod's node when asked), `state` and
  // `cluster` (the reporting cluster's name; nodes of two clusters may share names) narrow the
  // list.
  nlohmann::json Moves(const Principal& who, const std::string& node,
                       std::optional<api::PodMoveState> state,
                       const std::string& cluster = "") const;
  // GET /v1/pod-moves/ID: NotFound when `who` does not see it.
  StatusOr<nlohmann::json> Move(const Principal& who, int64_t id) const;
  // POST /v1/pod-moves/ID/take: "requested" -> "taken" by `mover`, once: a second take, by
  // anyone, is refused naming who has it. Only who speaks for the pod's node may take it (an
  // admin, the fleet's agent token, or the node's own).
  StatusOr<nlohmann::json> TakeMove(const Principal& who, int64_t id, const std::string& mover);
  // POST /v1/pod-moves/ID/finish: a taken move "done" or "failed" with its outcome, once.
  StatusOr<nlohmann::json> FinishMove(const Principal& who, int64_t id,
                                      const api::PodMoveOutcome& outcome);

 private:
  struct Cluster {
    double reported_at = 0;
    std::vector<api::PodReport> pods;
  };
  static nlohmann::json View(const std::string& cluster, const api::PodReport& p);
  static bool Sees(const Principal& who, const api::PodReport& p) {
    return !who.agent() && who.SeesTeam(p.team);
  }

  mutable std::mutex mu_;
  std::function<double()> clock_;
  std::map<std::string, Cluster> clusters_;
  struct ClassPeak {
    int64_t peak_bytes = 0;
    int64_t pods = 0;
  };
  std::map<std::string, ClassPeak> class_peaks_;  // by TEAM/COMMAND
  // The pods already counted in class_peaks_ ("CLUSTER/NAMESPACE/NAME"), while they are reported.
  std::map<std::string, std::set<std::string>> counted_;  // by cluster
  void Learn(const std::string& cluster, const std::vector<api::PodReport>& pods);

  bool SeesMove(const Principal& who, const api::PodMove& m) const {
    return who.agent() ? who.SpeaksFor(m.from_node) : who.SeesTeam(m.team);
  }
  // Move ID for a mover's `act` ("take", "finish"): NotFound when `who` does not see it,
  // PermissionDenied unless `who` speaks for the pod's node. Under mu_.
  StatusOr<api::PodMove*> MoverMove(const Principal& who, int64_t id, const std::string& act);
  // Records a new requested move of pod `p` of `cluster` to `to`, asked by `who` (as a drain's
  // when `drain`): saved first, then in the ledger; its view. Under mu_.
  StatusOr<nlohmann::json> Ask(const std::string& cluster, const api::PodReport& p,
                               const api::PodMoveAsk& to, const Principal& who, bool drain);
  // The move of pod `p` of `cluster` that is under way (not ended), or null. Under mu_.
  const api::PodMove* MoveUnderWay(const std::string& cluster, const api::PodReport& p) const;
  // Requested moves of pods their cluster no longer reports fail; the oldest ended are dropped.
  void SettleMoves(const std::string& cluster);
  // Writes `m` to the store, when there is one. Under mu_.
  Status Save(const api::PodMove& m);
  // Saves `changed`, then makes it the ledger's `*m`; a failure changes nothing. Under mu_.
  StatusOr<nlohmann::json> Commit(api::PodMove* m, const api::PodMove& changed);

  std::unique_ptr<Store> store_;
  std::unique_ptr<Persistence> db_;
  std::deque<api::PodMove> moves_;  // oldest first
  int64_t next_move_id_ = 1;
};

}  // namespace paladin::server
