// The pods of Kubernetes clusters that Paladin's scheduler places, as it last reported them
// (PUT /v1/pods after each pass; docs/kubernetes.md, "Pods in Paladin's server"). Kept in memory:
// the scheduler reports a cluster's whole set every pass, so a restarted server has it back one
// pass later. A team sees the pods of its namespaces only; to a team another team's pod does not
// exist (404, not 403).
//
// Thread safety: every method takes the book's own lock (not Control's).
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "paladin/api/wire.h"
#include "paladin/base/status.h"
#include "paladin/server/auth.h"

namespace paladin::server {

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

  // The GPU memory (paladin.io/gpu-memory) booked by the team's pods that hold a GPU (bound to a
  // node, not Succeeded or Failed), by cluster. The server's team quota counts it with the
  // team's jobs; each cluster's scheduler counts the other clusters' with the jobs.
  std::map<std::string, int64_t> TeamBooked(const std::string& team) const;

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
};

}  // namespace paladin::server
