#include "pods.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "metrics_text.h"
#include "paladin/api/wire.h"
#include "paladin/server/validate.h"

namespace paladin::server {

namespace key = api::key;

using Json = nlohmann::json;

Status PodBook::Replace(const api::PodList& list) {
  std::set<std::pair<std::string, std::string>> seen;
  for (size_t i = 0; i < list.pods.size(); ++i) {
    const api::PodReport& p = list.pods[i];
    const std::string where = "pods[" + std::to_string(i) + "]: ";
    if (!ValidName(p.team)) {
      return InvalidArgument(where + "team: '" + p.team + "' is not a team name");
    }
    if (!seen.insert({p.ns, p.name}).second) {
      return InvalidArgument(where + "pod " + p.ns + "/" + p.name + " is listed twice");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  clusters_[list.cluster] = Cluster{clock_(), list.pods};
  Learn(list.cluster, list.pods);
  return Status::Ok();
}

void PodBook::Learn(const std::string& cluster, const std::vector<api::PodReport>& pods) {
  std::set<std::string>& before = counted_[cluster];
  std::set<std::string> now;
  for (const api::PodReport& p : pods) {
    const std::string pod = p.ns + "/" + p.name;
    // Counted once while it is reported, also through a pass its node did not measure.
    if (before.count(pod) != 0) now.insert(pod);
    if (p.command.empty() || p.used_bytes <= 0) continue;
    ClassPeak& c = class_peaks_[p.team + "/" + p.command];
    c.peak_bytes = std::max(c.peak_bytes, p.used_bytes);
    if (now.insert(pod).second) ++c.pods;
  }
  before = std::move(now);
}

core::ClassHistory PodBook::ClassPods(const std::string& class_key) const {
  std::lock_guard<std::mutex> lock(mu_);
  core::ClassHistory h;
  h.name = class_key;
  if (auto c = class_peaks_.find(class_key); c != class_peaks_.end()) {
    h.peak_bytes = c->second.peak_bytes;
    h.pods = c->second.pods;
  }
  return h;
}

Json PodBook::View(const std::string& cluster, const api::PodReport& p) {
  Json v = {{key::kCluster, cluster},
            {key::kNamespace, p.ns},
            {key::kName, p.name},
            {key::kTeam, p.team},
            {key::kPhase, p.phase},
            {key::kNode, p.node},
            {key::kGpuMemBytes, p.gpu_mem_bytes}};
  v[key::kGpu] = p.gpu >= 0 ? Json(p.gpu) : Json(nullptr);
  v[key::kUsedBytes] = p.used_bytes >= 0 ? Json(p.used_bytes) : Json(nullptr);
  v[key::kReason] = p.reason.empty() ? Json(nullptr) : Json(p.reason);
  v[key::kPlacement] = p.placement.empty() ? Json(nullptr) : Json(p.placement);
  return v;
}

Json PodBook::List(const Principal& who, const std::string& team) const {
  std::lock_guard<std::mutex> lock(mu_);
  const double now = clock_();
  Json pods = Json::array();
  Json clusters = Json::array();
  for (const auto& [name, cluster] : clusters_) {
    int64_t shown = 0;
    for (const api::PodReport& p : cluster.pods) {
      if (!Sees(who, p) || (!team.empty() && p.team != team)) continue;
      pods.push_back(View(name, p));
      ++shown;
    }
    clusters.push_back(
        {{key::kName, name}, {key::kReportedSAgo, now - cluster.reported_at}, {key::kPods, shown}});
  }
  return {{key::kPods, pods}, {key::kClusters, clusters}};
}

std::map<std::string, PodsHeld> PodBook::TeamHeld(const std::string& team) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, PodsHeld> held;
  for (const auto& [name, cluster] : clusters_) {
    for (const api::PodReport& p : cluster.pods) {
      if (p.team != team || p.node.empty() || api::PodPhaseEnded(p.phase)) {
        continue;
      }
      held[name].bytes += p.gpu_mem_bytes;
      held[name].gpus += 1;
    }
  }
  return held;
}

std::string PodBook::Metrics(const Principal& who) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, int64_t> counts;  // by the labels cluster, team, phase
  std::string memory;
  for (const auto& [name, cluster] : clusters_) {
    for (const api::PodReport& p : cluster.pods) {
      if (!Sees(who, p)) continue;
      const std::string where =
          "cluster=\"" + MetricLabel(name) + "\",team=\"" + MetricLabel(p.team) + "\"";
      ++counts[where + ",phase=\"" + MetricLabel(p.phase) + "\""];
      if (p.node.empty() || p.gpu < 0) continue;
      const std::string labels = where + ",namespace=\"" + MetricLabel(p.ns) + "\",pod=\"" +
                                 MetricLabel(p.name) + "\",node=\"" + MetricLabel(p.node) +
                                 "\",gpu=\"" + std::to_string(p.gpu) + "\",kind=";
      MetricLine(&memory, "paladin_pod_gpu_memory_bytes", labels + "\"booked\"",
                 static_cast<double>(p.gpu_mem_bytes));
      if (p.used_bytes >= 0) {
        MetricLine(&memory, "paladin_pod_gpu_memory_bytes", labels + "\"used\"",
                   static_cast<double>(p.used_bytes));
      }
    }
  }
  std::string out =
      "# HELP paladin_pods Kubernetes pods placed by Paladin's schedulers, by cluster, team and "
      "phase.\n# TYPE paladin_pods gauge\n";
  for (const auto& [labels, n] : counts) {
    MetricLine(&out, "paladin_pods", labels, static_cast<double>(n));
  }
  out +=
      "# HELP paladin_pod_gpu_memory_bytes GPU memory of each Kubernetes pod bound to a GPU.\n"
      "# TYPE paladin_pod_gpu_memory_bytes gauge\n" +
      memory;
  return out;
}

StatusOr<Json> PodBook::Get(const Principal& who, const std::string& ns,
                            const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [cluster_name, cluster] : clusters_) {
    for (const api::PodReport& p : cluster.pods) {
      if (p.ns == ns && p.name == name && Sees(who, p)) return View(cluster_name, p);
    }
  }
  return NotFound("no pod " + ns + "/" + name);
}

}  // namespace paladin::server
