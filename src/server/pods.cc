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
  SettleMoves(list.cluster);
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

// --- moves asked through the server ---

namespace {

constexpr size_t kEndedMovesKept = 1000;

std::string PodPlace(const std::string& node, int gpu) {
  return gpu >= 0 ? node + "/" + std::to_string(gpu) : node;
}

// "move 4 taken by node-1"
std::string UnderWay(const api::PodMove& m) {
  return "move " + std::to_string(m.id) + " " + api::PodMoveStateName(m.state) +
         (m.mover.empty() ? "" : " by " + m.mover);
}

}  // namespace

StatusOr<api::PodMove*> PodBook::MoverMove(const Principal& who, int64_t id,
                                           const std::string& act) {
  for (api::PodMove& m : moves_) {
    if (m.id != id || !SeesMove(who, m)) continue;
    PALADIN_RETURN_IF_ERROR(
        CheckSpeaksFor(who, m.from_node, act + " the move of a pod on " + m.from_node));
    return &m;
  }
  return NotFound("no pod move " + std::to_string(id));
}

Status PodBook::KeepMovesIn(std::unique_ptr<Store> store) {
  std::lock_guard<std::mutex> lock(mu_);
  auto db = std::make_unique<Persistence>(store.get());
  StatusOr<std::vector<api::PodMove>> kept = db->PodMoves();
  if (!kept.ok())
    return Status(kept.status().code(), "the ledger of pod moves: " + kept.status().message());
  moves_.assign(kept->begin(), kept->end());
  for (const api::PodMove& m : moves_) next_move_id_ = std::max(next_move_id_, m.id + 1);
  store_ = std::move(store);
  db_ = std::move(db);
  return Status::Ok();
}

Status PodBook::Save(const api::PodMove& m) {
  if (db_ == nullptr) return Status::Ok();
  Status saved = db_->SavePodMove(m);
  if (saved.ok()) return saved;
  return Unavailable("cannot record pod move " + std::to_string(m.id) +
                     " in the server's database (" + saved.message() + "): nothing changed");
}

StatusOr<Json> PodBook::Commit(api::PodMove* m, const api::PodMove& changed) {
  PALADIN_RETURN_IF_ERROR(Save(changed));
  *m = changed;
  return api::ToJson(*m);
}

void PodBook::SettleMoves(const std::string& cluster) {
  const std::vector<api::PodReport>& pods = clusters_[cluster].pods;
  for (api::PodMove& m : moves_) {
    if (m.cluster != cluster || m.state != api::PodMoveState::kRequested) continue;
    const bool reported = std::any_of(pods.begin(), pods.end(), [&m](const api::PodReport& p) {
      return p.ns == m.ns && p.name == m.name && p.node == m.from_node &&
             !api::PodPhaseEnded(p.phase);
    });
    if (reported) continue;
    api::PodMove failed = m;
    failed.state = api::PodMoveState::kFailed;
    failed.ended_at = clock_();
    failed.outcome.ok = false;
    failed.outcome.message = "pod " + m.ns + "/" + m.name + " no longer runs on " + m.from_node +
                             " (its cluster's scheduler reports it gone, ended or elsewhere) "
                             "before its mover took the move: nothing moved";
    (void)Commit(&m, failed);  // one that cannot be written stays requested until the next report
  }
  size_t ended = static_cast<size_t>(std::count_if(
      moves_.begin(), moves_.end(), [](const api::PodMove& m) { return PodMoveEnded(m.state); }));
  bool dropped = false;
  for (auto it = moves_.begin(); ended > kEndedMovesKept && it != moves_.end();) {
    if (PodMoveEnded(it->state)) {
      it = moves_.erase(it);
      --ended;
      dropped = true;
    } else {
      ++it;
    }
  }
  if (dropped && db_ != nullptr)
    (void)db_->KeepNewestEndedPodMoves(static_cast<int64_t>(kEndedMovesKept));
}

const api::PodMove* PodBook::MoveUnderWay(const std::string& cluster,
                                          const api::PodReport& p) const {
  for (const api::PodMove& m : moves_) {
    if (m.cluster == cluster && m.ns == p.ns && m.name == p.name && !PodMoveEnded(m.state)) {
      return &m;
    }
  }
  return nullptr;
}

StatusOr<Json> PodBook::Ask(const std::string& cluster, const api::PodReport& p,
                            const api::PodMoveAsk& to, const Principal& who, bool drain) {
  api::PodMove m;
  m.id = next_move_id_;
  m.cluster = cluster;
  m.ns = p.ns;
  m.name = p.name;
  m.team = p.team;
  m.from_node = p.node;
  m.from_gpu = p.gpu;
  m.to = to;
  m.asked_by = who.Scope();
  m.requested_at = clock_();
  m.drain = drain;
  PALADIN_RETURN_IF_ERROR(Save(m));
  ++next_move_id_;
  moves_.push_back(m);
  return api::ToJson(m);
}

StatusOr<Json> PodBook::Drain(const Principal& who, const api::PodDrainAsk& ask) {
  std::lock_guard<std::mutex> lock(mu_);
  Json moves = Json::array(), left = Json::array();
  for (const auto& [cluster_name, cluster] : clusters_) {
    for (const api::PodReport& p : cluster.pods) {
      if (p.node != ask.node || !Sees(who, p) || api::PodPhaseEnded(p.phase)) continue;
      std::string why;
      if (!api::PodPhaseRunning(p.phase)) {
        why = "is " + p.phase + ": only a running pod moves";
      } else if (const api::PodMove* m = MoveUnderWay(cluster_name, p)) {
        why = "has " + UnderWay(*m);
      }
      if (!why.empty()) {
        left.push_back({{key::kNamespace, p.ns}, {key::kName, p.name}, {key::kWhy, why}});
        continue;
      }
      StatusOr<Json> asked =
          Ask(cluster_name, p, api::PodMoveAsk{.node = ask.to}, who, /*drain=*/true);
      if (!asked.ok()) {
        return Status(asked.status().code(),
                      "drain of " + ask.node + ": " + asked.status().message() + " (" +
                          std::to_string(moves.size()) + " move(s) asked before it stand)");
      }
      moves.push_back(*asked);
    }
  }
  return Json{{key::kNode, ask.node}, {key::kTo, ask.to}, {key::kMoves, moves}, {key::kLeft, left}};
}

StatusOr<Json> PodBook::AskMove(const Principal& who, const std::string& ns,
                                const std::string& name, const api::PodMoveAsk& ask) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string pod = "pod " + ns + "/" + name;
  for (const auto& [cluster_name, cluster] : clusters_) {
    for (const api::PodReport& p : cluster.pods) {
      if (p.ns != ns || p.name != name || !Sees(who, p)) continue;
      if (p.node.empty() || !api::PodPhaseRunning(p.phase)) {
        return FailedPrecondition(pod + " is " + p.phase +
                                  (p.node.empty() ? ", on no node" : " on " + p.node) +
                                  ": only a running pod moves");
      }
      if (const api::PodMove* m = MoveUnderWay(cluster_name, p)) {
        return FailedPrecondition(pod + " has " + UnderWay(*m) +
                                  " already: one move of a pod at a time");
      }
      if (ask.gpu >= 0 && p.gpu < 0) {
        return FailedPrecondition(pod +
                                  " has no Paladin GPU: a GPU is given only for pods "
                                  "Paladin placed on one");
      }
      if ((ask.node.empty() || ask.node == p.node) &&
          (ask.gpu < 0 ? p.gpu < 0 : ask.gpu == p.gpu)) {
        return InvalidArgument(pod + " is on " + PodPlace(p.node, p.gpu) +
                               " already: give another node or GPU");
      }
      return Ask(cluster_name, p, ask, who, /*drain=*/false);
    }
  }
  return NotFound("no " + pod);
}

Json PodBook::Moves(const Principal& who, const std::string& node,
                    std::optional<api::PodMoveState> state, const std::string& cluster) const {
  std::lock_guard<std::mutex> lock(mu_);
  Json list = Json::array();
  for (auto it = moves_.rbegin(); it != moves_.rend(); ++it) {
    if (!SeesMove(who, *it) || (!node.empty() && it->from_node != node) ||
        (state && it->state != *state) || (!cluster.empty() && it->cluster != cluster)) {
      continue;
    }
    list.push_back(api::ToJson(*it));
  }
  return {{key::kMoves, list}};
}

StatusOr<Json> PodBook::Move(const Principal& who, int64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const api::PodMove& m : moves_) {
    if (m.id == id && SeesMove(who, m)) return api::ToJson(m);
  }
  return NotFound("no pod move " + std::to_string(id));
}

StatusOr<Json> PodBook::TakeMove(const Principal& who, int64_t id, const std::string& mover) {
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<api::PodMove*> found = MoverMove(who, id, "take");
  if (!found.ok()) return found.status();
  api::PodMove* m = *found;
  if (m->state != api::PodMoveState::kRequested) {
    return FailedPrecondition("pod move " + std::to_string(id) + " is " +
                              api::PodMoveStateName(m->state) +
                              (m->mover.empty() ? "" : " by " + m->mover) + ": taken once only");
  }
  api::PodMove taken = *m;
  taken.state = api::PodMoveState::kTaken;
  taken.mover = mover;
  taken.taken_at = clock_();
  return Commit(m, taken);
}

StatusOr<Json> PodBook::FinishMove(const Principal& who, int64_t id,
                                   const api::PodMoveOutcome& outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<api::PodMove*> found = MoverMove(who, id, "finish");
  if (!found.ok()) return found.status();
  api::PodMove* m = *found;
  if (m->state != api::PodMoveState::kTaken) {
    return FailedPrecondition("pod move " + std::to_string(id) + " is " +
                              api::PodMoveStateName(m->state) + ": only a taken move ends");
  }
  api::PodMove ended = *m;
  ended.state = outcome.ok ? api::PodMoveState::kDone : api::PodMoveState::kFailed;
  ended.outcome = outcome;
  ended.ended_at = clock_();
  return Commit(m, ended);
}

}  // namespace paladin::server
