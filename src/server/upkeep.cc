// The control plane's upkeep (control.h): failure detection and recovery from dead nodes,
// drains, moves off unhealthy GPUs, periodic checkpoints and their records, the rebalancer's
// admission plans; and the agents' calls that decide a migration (the decision itself is the
// MigrationOrchestrator's, orchestrator.h).
#include <algorithm>
#include <cstdio>

#include "control.h"

namespace paladin::server {

namespace key = api::key;

namespace {

// Whether `who` may learn that migration `m` exists: a node's own token (agent:NODE) only when
// the node is its source or destination; to any other node's token it is as if it did not exist
// (404, not a 403 naming its nodes), so a node learns nothing of moves between others.
bool IsParty(const Principal& who, const MigrationRecord& m) {
  return !who.node_scoped() || who.node == m.from_node || who.node == m.to_node;
}

}  // namespace

StatusOr<Json> Control::AbortUnlessCommitted(const Principal& who, int64_t migration) {
  std::lock_guard<std::mutex> lock(mu_);
  MigrationRecord* found_m = migrations_.Find(migration);
  if (found_m == nullptr) return NotFound("migration " + std::to_string(migration) + " not found");
  MigrationRecord& m = *found_m;
  if (!IsParty(who, m)) return NotFound("migration " + std::to_string(migration) + " not found");
  // The destination asks when it lost its source; a restarted source asks for a move it had
  // begun. Nobody else is a party to it.
  if (!who.SpeaksFor(m.to_node)) {
    PALADIN_RETURN_IF_ERROR(CheckSpeaksFor(who, m.from_node,
                                           "abort migration " + std::to_string(m.id) + " (from " +
                                               m.from_node + " to " + m.to_node + ")"));
  }
  return moves_.AbortUnlessCommitted(m);
}

StatusOr<Json> Control::Commit(const Principal& who, int64_t migration) {
  std::lock_guard<std::mutex> lock(mu_);
  MigrationRecord* found_m = migrations_.Find(migration);
  if (found_m == nullptr) return NotFound("migration " + std::to_string(migration) + " not found");
  MigrationRecord& m = *found_m;
  if (!IsParty(who, m)) return NotFound("migration " + std::to_string(migration) + " not found");
  // Only the source commits: it has stopped the job and sent its image (migrate_out).
  PALADIN_RETURN_IF_ERROR(CheckSpeaksFor(
      who, m.from_node,
      "commit migration " + std::to_string(m.id) + " (its source is " + m.from_node + ")"));
  return moves_.Commit(m);
}

std::string Control::CheckpointDir(const JobRecord& j, int seq) const {
  char name[16];
  std::snprintf(name, sizeof name, "%04d", seq);
  return options_.checkpoint_store + "/" + j.id + "/" + name;
}

void Control::DetectFailures(double now) {
  for (auto& [name, n] : nodes_) {
    if (nodes_.LeaseExpired(n, now)) {
      nodes_.MarkDead(n, now);
      Event("node_dead", nullptr, n.name,
            "no heartbeat for " + std::to_string(static_cast<int>(now - n.last_heartbeat)) + " s");
      moves_.FailUndecidedOf(n.name, "node " + n.name + " died");
    }
    // Its agent has frozen its workloads by now: the jobs may run elsewhere.
    if (nodes_.FenceElapsed(n, now)) {
      RecoverNode(n);
      nodes_.MarkRecovered(n);
    }
  }
}

void Control::RecoverNode(NodeRecord& n) {
  const double now = Now();
  gangs_.ForgetStoppingOn(n.name);
  for (auto& [seq, j] : jobs_) {
    if (j.node != n.name || !j.HoldsGpu()) continue;
    if (j.gang) {
      gangs_.Recover(j, n.name);
      continue;
    }
    moves_.FailActive(j, "node " + n.name + " died");
    Accrue(j, now);
    ReleaseJob(j);
    j.pending_since = now;
    j.cancel_requested = false;
    if (j.last_checkpoint) {
      jobs_.SetState(j, JobState::kRestoring);
      j.recovering = true;
      j.reason = "node " + n.name + " died: restoring from " + j.last_checkpoint->path;
    } else {
      jobs_.SetState(j, JobState::kPending);
      ++j.restarts;
      Count("restarts");
      j.reason = "node " + n.name + " died and the job had no checkpoint: starting over";
      Event("restarted", &j, n.name, j.reason);
    }
    jobs_.MarkDirty(j);
  }
}

void Control::DrainNodes() {
  for (auto& [name, n] : nodes_) {
    if (!n.draining || n.state == NodeState::kDead) continue;
    for (auto& [seq, j] : jobs_) {
      if (j.node != name || j.state() != JobState::kRunning || j.migration_id != 0) continue;
      if (j.gang) {
        j.reason = "draining " + name + ": a rank of gang " + j.gang->gang +
                   " does not move alone (checkpoint and resume the gang)";
        continue;
      }
      FleetView view = BuildFleet(true);
      core::PackerOptions options;
      options.collect_reasons = true;
      core::Decision d = scheduler_.PlaceMove(view, JobShape(j, 0), options);
      if (!d.placed) {
        j.reason = "draining " + name + ": nowhere to go yet (" + d.Explain() + ")";
        continue;
      }
      const std::string& to = view.names[static_cast<size_t>(d.placement.node)];
      if (migrations_.HasIncoming(to)) continue;
      const int gpu = view.gpu_index[static_cast<size_t>(d.placement.node)]
                                    [static_cast<size_t>(d.placement.gpus[0])];
      (void)moves_.Start(j, to, gpu, "draining " + name, nullptr);
    }
  }
}

StatusOr<Json> Control::Drain(const std::string& node) {
  std::lock_guard<std::mutex> lock(mu_);
  NodeRecord* found = nodes_.Find(node);
  if (found == nullptr) return NotFound("node " + node + " not found");
  NodeRecord& n = *found;
  n.draining = true;
  if (n.state != NodeState::kDead) n.state = NodeState::kDraining;
  Event("draining", nullptr, n.name, "drain asked: its jobs move off, nothing new is placed");
  nodes_.MarkDirty(n);
  PALADIN_RETURN_IF_ERROR(Flush());
  Wake();
  return NodeDoc(n);
}

StatusOr<Json> Control::Fault(const std::string& node, int gpu, const Json& body) {
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  std::string kind = "xid";
  if (body.contains(key::kKind) && !body[key::kKind].is_null()) {
    constexpr const char* kKinds = "kind: expected \"xid\", \"ecc\" or \"ecc-corrected\"";
    if (!body[key::kKind].is_string()) return InvalidArgument(kKinds);
    kind = body[key::kKind].get<std::string>();
    if (kind != "xid" && kind != "ecc" && kind != "ecc-corrected") return InvalidArgument(kKinds);
  }
  int64_t code = 79;
  if (body.contains(key::kCode) && !body[key::kCode].is_null()) {
    if (!body[key::kCode].is_number_integer()) return InvalidArgument("code: expected an integer");
    code = body[key::kCode].get<int64_t>();
    if (code < 0 || code > 1000000) return InvalidArgument("code: out of range");
  }
  std::lock_guard<std::mutex> lock(mu_);
  const NodeRecord* n = nodes_.Find(node);
  if (n == nullptr) return NotFound("node " + node + " not found");
  const GpuRecord* g = n->Gpu(gpu);
  if (g == nullptr) return NotFound("node " + node + " has no GPU " + std::to_string(gpu));
  if (!g->emulated)
    return FailedPrecondition("GPU " + std::to_string(gpu) + " of " + node +
                              " is a real GPU: faults are injected into emulated ones");
  // "kind" names the command itself: the fault's kind travels as fault_kind.
  SendCommand(node, api::FaultCommand(gpu, kind, code), nullptr);
  PALADIN_RETURN_IF_ERROR(Flush());
  return Json{
      {key::kNode, node}, {key::kGpu, gpu}, {key::kKind, kind}, {key::kCode, code}, {"sent", true}};
}

void Control::GpuHealthMoves() {
  for (auto& [seq, j] : jobs_) {
    if (j.gang || j.state() != JobState::kRunning || j.migration_id != 0) continue;
    const NodeRecord* n = nodes_.Find(j.node);
    if (n == nullptr || n->state == NodeState::kDead) continue;
    const GpuRecord* g = n->Gpu(j.gpu);
    if (g == nullptr || g->healthy) continue;
    FleetView view = BuildFleet(true);
    core::PackerOptions options;
    options.exclude_node = -1;
    core::Decision d = scheduler_.PlaceMove(view, JobShape(j, 0), options);
    if (!d.placed) continue;
    const std::string& to = view.names[static_cast<size_t>(d.placement.node)];
    if (migrations_.HasIncoming(to)) continue;
    // The unhealthy GPU is not in the view: the packer may well choose another GPU of this node.
    const int gpu = view.gpu_index[static_cast<size_t>(d.placement.node)]
                                  [static_cast<size_t>(d.placement.gpus[0])];
    (void)moves_.Start(j, to, gpu, "GPU " + std::to_string(j.gpu) + " unhealthy", nullptr);
  }
}

void Control::PeriodicCheckpoints(double now) {
  if (options_.checkpoint_every_s <= 0) return;
  gangs_.PeriodicCheckpoints(now);  // a gang's ranks only as one cut
  for (auto& [seq, j] : jobs_) {
    if (j.gang || j.state() != JobState::kRunning || j.migration_id != 0 || !j.started_at) continue;
    // One at a time: a dump that takes longer than the period must not queue up more.
    if (j.checkpoint_in_flight) continue;
    if (const NodeRecord* node = nodes_.Find(j.node); node && !node->checkpointable) {
      continue;
    }
    const double since = std::max(
        {*j.started_at, j.last_checkpoint_cmd_at, j.last_checkpoint ? j.last_checkpoint->at : 0.0});
    if (now - since < options_.checkpoint_every_s) continue;
    j.last_checkpoint_cmd_at = now;
    j.checkpoint_in_flight = true;
    ++j.checkpoint_seq;
    SendCommand(j.node, api::CheckpointCommand("keep", CheckpointDir(j, j.checkpoint_seq)), &j);
    jobs_.MarkDirty(j);
  }
}

void Control::RecordCheckpoint(JobRecord& j, const Json& detail, const std::string& dir) {
  CheckpointRef ref;
  ref.path = detail.contains(key::kPath) && detail[key::kPath].is_string()
                 ? detail[key::kPath].get<std::string>()
                 : dir;
  ref.bytes = detail.contains(key::kBytes) && detail[key::kBytes].is_number_integer()
                  ? detail[key::kBytes].get<int64_t>()
                  : 0;
  ref.at = Now();
  j.last_checkpoint = ref;
  ++j.checkpoints;
  Count("checkpoints");
  (void)db_.AddCheckpoint(j.id, j.checkpoint_seq, ref);
  Event("checkpointed", &j, j.node,
        "checkpoint " + ref.path + " (" + std::to_string(ref.bytes) + " bytes)");
  // Keep the newest --keep-checkpoints images of this job.
  StatusOr<std::vector<std::string>> beyond =
      db_.CheckpointsBeyond(j.id, std::max(1, options_.keep_checkpoints));
  if (beyond.ok()) {
    for (const std::string& path : *beyond) {
      // Only directories inside the checkpoint store are ever deleted.
      if (path.rfind(options_.checkpoint_store + "/", 0) == 0 &&
          path.find("..") == std::string::npos) {
        deleted_dirs_.emplace_back(j.id, path);
      }
    }
  }
  jobs_.MarkDirty(j);
}

void Control::Rebalance(FleetView& view, JobRecord& waiting) {
  // One plan at a time: carry on with the current one first.
  if (!admission_moves_.empty()) {
    std::vector<core::Move> left;
    for (const core::Move& move : admission_moves_) {
      JobRecord* j = jobs_.BySeq(static_cast<int64_t>(move.job));
      if (j == nullptr || j->state() != JobState::kRunning) continue;
      const std::string& to = view.names.size() > static_cast<size_t>(move.to.node)
                                  ? view.names[static_cast<size_t>(move.to.node)]
                                  : std::string();
      if (to.empty() || j->node == to) continue;
      if (migrations_.HasIncoming(to) || j->migration_id != 0) {
        left.push_back(move);
        continue;
      }
      const int gpu =
          view.gpu_index[static_cast<size_t>(move.to.node)][static_cast<size_t>(move.to.gpus[0])];
      if (!moves_.Start(*j, to, gpu, "rebalance for " + waiting.id, nullptr).ok()) {
        continue;
      }
    }
    admission_moves_ = left;
    return;
  }
  std::vector<core::Move> plan =
      scheduler_.PlanAdmission(view, waiting, jobs_, nodes_, migrations_, moves_.costs());
  if (plan.empty()) return;
  admission_moves_ = std::move(plan);
  Event("rebalance", &waiting, "",
        "the rebalancer plans " + std::to_string(admission_moves_.size()) +
            " migration(s) to make room for " + waiting.id);
  Rebalance(view, waiting);
}

}  // namespace paladin::server
