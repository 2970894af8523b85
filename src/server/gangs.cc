// Gangs (docs/server.md, "Gangs"): a job of N ranks is N jobs tied by a GangMember record. They
// are placed all-or-nothing by the core packer's ScheduleGang (MaxPerNodePermit bounds the
// ranks per node), each has a stable address from the rank subnet, every rank starts with the
// rendezvous variables, agents are told the routes to the ranks on other nodes, and the gang is
// checkpointed as one cut (freeze every rank, dump each while frozen, thaw them all), recovered
// as one from that cut, and never runs a rank twice. One rank moves to another node as a cut
// whose last dump kills it: restored on its new node while the others stay frozen, the routes to
// its address switched once its restore is reported, then the others thawed.
#include "gangs.h"

#include <algorithm>
#include <set>
#include <utility>

namespace paladin::server {

namespace key = api::key;
namespace {

// Variables the server sets for every rank; a gang's own env may not set them.
constexpr const char* kRendezvousEnv[] = {"MASTER_ADDR",       "MASTER_PORT", "RANK",
                                          "WORLD_SIZE",        "LOCAL_RANK",  "LOCAL_WORLD_SIZE",
                                          "GLOO_SOCKET_IFNAME"};

bool Live(const JobRecord& j) { return !j.Terminal(); }

bool Waiting(const JobRecord& j) {
  return j.state() == JobState::kPending || (j.state() == JobState::kRestoring && j.node.empty());
}

// The rank a gang's cut moves, or null when the cut moves none.
JobRecord* MoverOf(const std::vector<JobRecord*>& members) {
  for (JobRecord* m : members) {
    if (!m->gang->move_to.empty()) return m;
  }
  return nullptr;
}

// The node the other nodes route rank J's address to: during a move, the node it left until its
// restore is reported (a peer's segment reaching the new namespace before its sockets are back
// would be answered with a reset).
const std::string& RoutedNode(const JobRecord& j) {
  return j.gang->move_from.empty() ? j.node : j.gang->move_from;
}

}  // namespace

Status CheckGangEnv(const std::map<std::string, std::string>& env) {
  for (const char* key : kRendezvousEnv) {
    if (env.count(key) != 0) {
      return InvalidArgument(std::string("env: ") + key +
                             " is set by the server for each rank of a gang");
    }
  }
  return Status::Ok();
}

GangCoordinator::GangCoordinator(ControlHost& host, JobTable& jobs, const NodeTable& nodes,
                                 TeamBook& teams, MigrationOrchestrator& moves,
                                 Scheduler& scheduler, const RankSubnet& subnet,
                                 GangSettings settings)
    : host_(host),
      jobs_(jobs),
      nodes_(nodes),
      teams_(teams),
      moves_(moves),
      scheduler_(scheduler),
      subnet_(subnet),
      settings_(std::move(settings)) {}

void GangCoordinator::Thaw(JobRecord& m) {
  api::Command thaw;
  thaw.kind = api::CommandKind::kThaw;
  host_.SendCommand(m.node, std::move(thaw), &m);
}

std::vector<JobRecord*> GangCoordinator::Members(const std::string& gang) {
  std::vector<JobRecord*> out;
  for (auto& [seq, j] : jobs_) {
    if (j.gang && j.gang->gang == gang && Live(j)) out.push_back(&j);
  }
  std::sort(out.begin(), out.end(),
            [](const JobRecord* a, const JobRecord* b) { return a->gang->rank < b->gang->rank; });
  return out;
}

StatusOr<Json> GangCoordinator::Submit(const Principal& who, const JobRecord& base,
                                       const GangMember& shape) {
  // Hostile input until checked: the bounds were checked by Submit; here what depends on state.
  const int64_t gpus = int64_t{shape.ranks} * base.gpus;
  if (std::string never = teams_.NeverFits(
          base.team, {gpus, base.mem_auto ? 0 : base.mem_request * gpus}, "ranks: the gang");
      !never.empty()) {
    return ResourceExhausted(never);
  }
  // Stable addresses: the lowest hosts of the rank subnet that no live rank holds.
  std::set<std::string> taken;
  for (const auto& [seq, j] : jobs_) {
    if (j.gang && Live(j)) taken.insert(j.gang->address);
  }
  std::vector<std::string> addresses;
  for (int64_t n = 1; n <= subnet_.Hosts() && std::ssize(addresses) < shape.ranks; ++n) {
    std::string a = subnet_.Address(n);
    if (taken.count(a) == 0) addresses.push_back(std::move(a));
  }
  if (std::ssize(addresses) < shape.ranks) {
    return ResourceExhausted("ranks: the rank subnet " + settings_.rank_subnet + " has " +
                             std::to_string(addresses.size()) + " free addresses, the gang needs " +
                             std::to_string(shape.ranks));
  }
  const double now = host_.Now();
  const std::string gang = jobs_.NextId();
  Json ids = Json::array();
  Json out;
  for (int r = 0; r < shape.ranks; ++r) {
    JobRecord& j = jobs_.Add(base);  // pending
    j.name = base.name.substr(0, 55) + "-r" + std::to_string(r);
    j.submitted_at = now;
    j.pending_since = now;
    j.reason = "waiting for the scheduler (gang " + gang + ")";
    if (j.mem_auto) {
      host_.SizeAutoJob(j);
    } else {
      j.quota_bytes = j.mem_request;
    }
    GangMember m = shape;
    m.gang = gang;
    m.rank = r;
    m.address = addresses[static_cast<size_t>(r)];
    j.gang = m;
    teams_.NoteSubmitted(j.team);
    host_.Count("jobs_submitted", 1);
    host_.Event("submitted", &j, "",
                "submitted by " + who.Scope() + ": rank " + std::to_string(r) + " of gang " + gang +
                    " (" + std::to_string(shape.ranks) + " ranks, at most " +
                    std::to_string(shape.ranks_per_node) + " per node), address " + m.address);
    ids.push_back(j.id);
    if (r == 0) out = host_.JobJson(j);
  }
  out[key::kGangJobs] = ids;
  PALADIN_RETURN_IF_ERROR(host_.Flush());
  host_.Wake();
  return out;
}

bool GangCoordinator::TryPlace(FleetView& view, const std::string& gang) {
  std::vector<JobRecord*> members = Members(gang);
  if (members.empty()) return false;
  auto say = [&](const std::string& why) {
    for (JobRecord* m : members) {
      if (m->reason != why) {
        m->reason = why;
        jobs_.MarkDirty(*m);
      }
    }
  };
  // All or nothing: every live rank is waiting (a rank still running elsewhere, or a copy not yet
  // known to be gone, holds the whole gang back: a rank never runs twice).
  for (JobRecord* m : members) {
    if (!Waiting(*m)) return false;
    if (m->gang->stopping_command != 0) {
      say("gang " + gang + ": waiting until rank " + std::to_string(m->gang->rank) + "'s copy on " +
          m->gang->stopping_node + " is gone");
      return false;
    }
  }
  if (std::ssize(members) != members[0]->gang->ranks) return false;
  for (JobRecord* m : members) {
    if (m->mem_auto && m->state() == JobState::kPending) host_.SizeAutoJob(*m);
  }
  const GangDecision d = scheduler_.PlaceGang(view, members, teams_, jobs_);
  if (!d.placed) {
    say(d.reason);
    return false;
  }
  // Every rank's node first, so that each launch can count the ranks on its node.
  for (size_t i = 0; i < members.size(); ++i) {
    members[i]->node = view.names[static_cast<size_t>(d.placements[i].node)];
  }
  for (size_t i = 0; i < members.size(); ++i) host_.Bind(view, *members[i], d.placements[i], d.how);
  return true;
}

void GangCoordinator::AddLaunch(const JobRecord& j, api::Command* launch) {
  const GangMember& g = *j.gang;
  std::string master;
  int local_rank = 0;
  int local_world = 0;
  for (const JobRecord* m : Members(g.gang)) {
    if (m->gang->rank == 0) master = m->gang->address;
    if (m->node != j.node) continue;
    ++local_world;
    if (m->gang->rank < g.rank) ++local_rank;
  }
  api::RankNet net;
  net.address = g.address;
  launch->env["MASTER_ADDR"] = master;
  launch->env["MASTER_PORT"] = std::to_string(g.port);
  launch->env["RANK"] = std::to_string(g.rank);
  launch->env["WORLD_SIZE"] = std::to_string(g.ranks);
  launch->env["LOCAL_RANK"] = std::to_string(local_rank);
  launch->env["LOCAL_WORLD_SIZE"] = std::to_string(std::max(local_world, 1));
  launch->env["GLOO_SOCKET_IFNAME"] = net.interface;
  launch->rank_net = std::move(net);
}

std::vector<api::RankRoute> GangCoordinator::RoutesFor(const NodeRecord& n) const {
  std::set<std::string> gangs;
  for (const auto& [seq, j] : jobs_) {
    if (j.gang && Live(j) && j.node == n.name) gangs.insert(j.gang->gang);
  }
  std::vector<api::RankRoute> out;
  for (const auto& [seq, j] : jobs_) {
    if (!j.gang || !Live(j) || gangs.count(j.gang->gang) == 0) continue;
    const std::string& routed = RoutedNode(j);
    if (j.node.empty() || j.node == n.name || routed == n.name) continue;
    const NodeRecord* where = nodes_.Find(routed);
    if (where == nullptr || where->address.empty()) continue;
    out.push_back(api::RankRoute{j.gang->address, where->address});
  }
  std::sort(out.begin(), out.end(),
            [](const api::RankRoute& a, const api::RankRoute& b) { return a.address < b.address; });
  return out;
}

// --- the coordinated checkpoint ---

std::string GangCoordinator::CutRefusal(const std::vector<JobRecord*>& members) const {
  if (members.empty()) return "the gang has no live rank";
  if (std::ssize(members) != members[0]->gang->ranks) return "not every rank of the gang is live";
  for (const JobRecord* m : members) {
    const std::string rank = "rank " + std::to_string(m->gang->rank) + " (" + m->id + ")";
    if (m->state() != JobState::kRunning) return rank + " is " + m->StateName();
    if (m->migration_id != 0) return rank + " is moving";
    if (m->gang->cut_in_flight != 0) return "a gang checkpoint is already under way";
    const NodeRecord* node = nodes_.Find(m->node);
    if (node == nullptr || node->state == NodeState::kDead) {
      return rank + "'s node is not alive";
    }
    if (!node->checkpointable) return rank + ": " + std::string(kNotCheckpointable);
  }
  return "";
}

std::string GangCoordinator::StartCut(const std::string& gang, bool then_stop,
                                      const std::string& why, JobRecord* mover,
                                      const std::string& to) {
  std::vector<JobRecord*> members = Members(gang);
  if (std::string refusal = CutRefusal(members); !refusal.empty()) return refusal;
  int generation = 0;
  for (const JobRecord* m : members) generation = std::max(generation, m->gang->generation);
  ++generation;
  for (JobRecord* m : members) {
    GangMember& g = *m->gang;
    g.cut_in_flight = generation;
    g.cut_phase = CutPhase::kFreezing;
    g.cut_stop = then_stop;
    g.cut_path.clear();
    g.cut_bytes = 0;
    g.move_to = m == mover ? to : "";
    g.move_from.clear();
    m->checkpoint_in_flight = true;
    m->last_checkpoint_cmd_at = host_.Now();
    if (then_stop) {
      jobs_.SetState(*m, JobState::kCheckpointing);
      m->reason = "gang " + gang + " checkpoint " + std::to_string(generation) + " (stop): ";
      m->reason += why;
    }
    api::Command freeze;
    freeze.kind = api::CommandKind::kFreeze;
    host_.SendCommand(m->node, std::move(freeze), m);
    jobs_.MarkDirty(*m);
  }
  if (mover != nullptr) {
    mover->reason = "moving to " + to + " with its gang paused: " + why;
    host_.Event(
        "gang_move", mover, mover->node,
        "gang " + gang + ": rank " + std::to_string(mover->gang->rank) + " moves from " +
            mover->node + " to " + to + " as checkpoint generation " + std::to_string(generation) +
            " (freeze every rank, dump the others, dump it last killing it, restore it on " + to +
            ", switch the routes to its address, thaw the others): " + why);
    return "";
  }
  host_.Event("gang_checkpoint", members[0], "",
              "gang " + gang + ": checkpoint generation " + std::to_string(generation) +
                  " begun (freeze every rank, dump each, then " + (then_stop ? "stop" : "thaw") +
                  "): " + why);
  return "";
}

void GangCoordinator::GiveUpCut(const std::string& gang, const std::string& why) {
  std::vector<JobRecord*> members = Members(gang);
  const JobRecord* mover = MoverOf(members);
  const std::string moving = mover == nullptr ? "" : mover->gang->move_to;
  int generation = 0;
  for (JobRecord* m : members) {
    GangMember& g = *m->gang;
    if (g.cut_in_flight == 0) continue;
    generation = g.cut_in_flight;
    g.cut_stop = false;
    g.move_to.clear();
    g.move_from.clear();
    if (m->state() == JobState::kCheckpointing) {
      jobs_.SetState(*m, JobState::kRunning);
      m->reason = "running; gang checkpoint " + std::to_string(generation) + " failed: " + why;
    }
    if (g.cut_phase == CutPhase::kFreezing || g.cut_phase == CutPhase::kDumping) {
      g.cut_phase = CutPhase::kThawPending;  // thawed when that step answers
    } else if (g.cut_phase != CutPhase::kThawing && g.cut_phase != CutPhase::kThawPending) {
      g.cut_phase = CutPhase::kThawing;
      if (!m->node.empty()) Thaw(*m);
    }
    jobs_.MarkDirty(*m);
  }
  if (generation == 0) return;
  if (mover != nullptr) {
    host_.Count("gang_move_failures", 1);
    host_.Event("gang_move_failed", mover, mover->node,
                "gang " + gang + ": rank " + std::to_string(mover->gang->rank) + " stays on " +
                    mover->node + " (not moved to " + moving + "), every rank thawed, generation " +
                    std::to_string(generation - 1) + " kept: " + why);
    return;
  }
  host_.Count("gang_checkpoint_failures", 1);
  host_.Event("gang_checkpoint_failed", members.empty() ? nullptr : members[0], "",
              "gang " + gang + ": checkpoint generation " + std::to_string(generation) +
                  " failed, every rank thawed, generation " + std::to_string(generation - 1) +
                  " kept: " + why);
}

void GangCoordinator::FinishCut(const std::string& gang) {
  std::vector<JobRecord*> members = Members(gang);
  const bool stop = members[0]->gang->cut_stop;
  const int generation = members[0]->gang->cut_in_flight;
  for (JobRecord* m : members) {
    GangMember& g = *m->gang;
    host_.RecordCheckpoint(*m, Json{{key::kPath, g.cut_path}, {key::kBytes, g.cut_bytes}},
                           g.cut_path);
    g.generation = generation;
    if (stop) {
      // The ranks stay frozen until the kill: nothing runs past the cut.
      host_.SendCommand(m->node, api::KillCommand(m->epoch), m);
      host_.Accrue(*m, host_.Now());
      host_.ReleaseJob(*m);
      jobs_.SetState(*m, JobState::kCheckpointed);
      m->reason = "checkpointed with its gang (generation " + std::to_string(generation) +
                  "): `paladin job resume` resumes the whole gang";
      g.cut_in_flight = 0;
      g.cut_phase = CutPhase::kNone;
      m->checkpoint_in_flight = false;
    } else {
      g.cut_phase = CutPhase::kThawing;
      Thaw(*m);
    }
    jobs_.MarkDirty(*m);
  }
  host_.Count("gang_checkpoints", 1);
  host_.Event("gang_checkpointed", members[0], "",
              "gang " + gang + ": generation " + std::to_string(generation) + " of " +
                  std::to_string(members.size()) + " ranks is one cut" +
                  (stop ? "; the ranks are stopped" : "; every rank thawed"));
}

bool GangCoordinator::ApplyResult(JobRecord& j, const CommandRecord& c,
                                  const api::CommandResult& r) {
  GangMember& g = *j.gang;
  const api::CommandKind kind = c.command.kind;
  const std::string& gang = g.gang;
  if (kind == api::CommandKind::kKill && g.stopping_command == c.id) {
    g.stopping_command = 0;
    g.stopping_node.clear();
    jobs_.MarkDirty(j);
    return false;  // the rest of a kill's handling still applies
  }
  // A move's steps: the moving rank's dump (mode stop) and its restore on the new node.
  const bool cut_step =
      kind == api::CommandKind::kFreeze || kind == api::CommandKind::kThaw ||
      (kind == api::CommandKind::kCheckpoint &&
       (c.command.mode == "frozen" || (c.command.mode == "stop" && g.cut_in_flight != 0))) ||
      (kind == api::CommandKind::kRestore && g.cut_phase == CutPhase::kMoving);
  if (!cut_step) return false;
  if (c.command.epoch.value_or(-1) != j.epoch || g.cut_in_flight == 0) return true;  // stale
  const std::string rank = "rank " + std::to_string(g.rank) + " on " + j.node;
  if (kind == api::CommandKind::kRestore) {
    ApplyMovedRankRestore(j, r);
    return true;
  }
  if (g.cut_phase == CutPhase::kThawPending && kind != api::CommandKind::kThaw) {
    // The cut was given up while this step ran: the rank may be frozen now; thaw it.
    g.cut_phase = CutPhase::kThawing;
    Thaw(j);
    jobs_.MarkDirty(j);
    return true;
  }
  if (kind == api::CommandKind::kThaw) {
    if (!r.ok) {
      host_.Event("gang_thaw_failed", &j, j.node, "gang " + gang + ": " + rank + ": " + r.error);
    }
    g.cut_in_flight = 0;
    g.cut_phase = CutPhase::kNone;
    j.checkpoint_in_flight = false;
    jobs_.MarkDirty(j);
    return true;
  }
  if (!r.ok) {
    // This rank's step has answered: it is thawed with the others now (a rank whose freeze
    // failed runs already; one whose dump failed stays frozen until then).
    g.cut_phase = CutPhase::kFrozen;
    GiveUpCut(gang, rank + ": " + std::string(api::CommandKindName(kind)) + ": " + r.error);
    return true;
  }
  std::vector<JobRecord*> members = Members(gang);
  if (kind == api::CommandKind::kFreeze) {
    if (g.cut_phase != CutPhase::kFreezing) return true;
    g.cut_phase = CutPhase::kFrozen;
    jobs_.MarkDirty(j);
    const bool all_frozen = std::all_of(members.begin(), members.end(), [](const JobRecord* m) {
      return m->gang->cut_phase == CutPhase::kFrozen;
    });
    if (!all_frozen) return true;
    // Every rank is frozen: nothing moves between them now. Dump each, leaving it frozen; a rank
    // that moves is dumped last, once every other image is in (its dump kills it).
    const JobRecord* mover = MoverOf(members);
    for (JobRecord* m : members) {
      if (m == mover) continue;
      m->gang->cut_phase = CutPhase::kDumping;
      ++m->checkpoint_seq;
      host_.SendCommand(
          m->node, api::CheckpointCommand("frozen", host_.CheckpointDir(*m, m->checkpoint_seq)), m);
      jobs_.MarkDirty(*m);
    }
    return true;
  }
  // The dump of a frozen rank.
  if (g.cut_phase != CutPhase::kDumping) return true;
  g.cut_phase = CutPhase::kDumped;
  g.cut_path = r.detail.contains(key::kPath) && r.detail[key::kPath].is_string()
                   ? r.detail[key::kPath].get<std::string>()
                   : c.command.dir;
  g.cut_bytes = r.detail.contains(key::kBytes) && r.detail[key::kBytes].is_number_integer()
                    ? r.detail[key::kBytes].get<int64_t>()
                    : 0;
  jobs_.MarkDirty(j);
  JobRecord* mover = MoverOf(members);
  if (mover == &j) {
    MoveRankOver(gang);
    return true;
  }
  const bool all_dumped = std::all_of(members.begin(), members.end(), [&](const JobRecord* m) {
    return m == mover || m->gang->cut_phase == CutPhase::kDumped;
  });
  if (!all_dumped) return true;
  if (mover != nullptr) {
    // Every other rank's image is in: the moving rank's dump kills it (and its network here).
    mover->gang->cut_phase = CutPhase::kDumping;
    ++mover->checkpoint_seq;
    host_.SendCommand(
        mover->node,
        api::CheckpointCommand("stop", host_.CheckpointDir(*mover, mover->checkpoint_seq)), mover);
    jobs_.MarkDirty(*mover);
    return true;
  }
  FinishCut(gang);
  return true;
}

// --- moving one rank ---

StatusOr<Json> GangCoordinator::MoveRank(const Principal& who, JobRecord& j, const std::string& to,
                                         int gpu) {
  const std::string gang = j.gang->gang;
  const std::string what = "job " + j.id + " is rank " + std::to_string(j.gang->rank) +
                           " of gang " + gang + ": it does not move now: ";
  if (nodes_.Find(to) == nullptr) return NotFound("node " + to + " not found");
  if (gpu >= 0) return InvalidArgument("to: a gang's rank moves to a node, not to one GPU");
  if (j.gpus > 0) {
    return FailedPrecondition(what +
                              "only a CPU rank (gpus 0) moves; a rank holding GPU state "
                              "cannot be frozen with its gang");
  }
  std::vector<JobRecord*> members = Members(gang);
  if (std::string refusal = CutRefusal(members); !refusal.empty()) {
    return FailedPrecondition(what + refusal);
  }
  if (j.node == to) return FailedPrecondition(what + "it runs on " + to + " already");
  const NodeRecord& target = nodes_.At(to);
  if (host_.BuildFleet(false).index.count(to) == 0) {
    return FailedPrecondition(what + "node " + to +
                              " takes no work (not alive, draining, or no healthy GPU)");
  }
  if (!target.checkpointable) {
    return FailedPrecondition(what + "node " + to + ": " + std::string(kNotCheckpointable));
  }
  if (target.address.empty()) {
    return FailedPrecondition(what + "node " + to +
                              " registered no address for the other nodes' routes");
  }
  const int there = static_cast<int>(std::count_if(
      members.begin(), members.end(), [&to](const JobRecord* m) { return m->node == to; }));
  if (there + 1 > j.gang->ranks_per_node) {
    return FailedPrecondition(what + "node " + to + " holds " + std::to_string(there) +
                              " of its ranks, at most " + std::to_string(j.gang->ranks_per_node) +
                              " per node");
  }
  if (std::string refusal = StartCut(gang, false, "asked by " + who.Scope(), &j, to);
      !refusal.empty()) {
    return FailedPrecondition(what + refusal);
  }
  Json out = host_.JobJson(j);
  PALADIN_RETURN_IF_ERROR(host_.Flush());
  return out;
}

bool GangCoordinator::PlaceMovedRank(JobRecord& j, const std::string& node,
                                     const std::string& how) {
  FleetView view = host_.BuildFleet(true);
  auto at = view.index.find(node);
  if (at == view.index.end()) return false;
  core::Placement p;
  p.node = at->second;  // a CPU rank: no GPU
  host_.Bind(view, j, p, how);
  return true;
}

void GangCoordinator::MoveRankOver(const std::string& gang) {
  std::vector<JobRecord*> members = Members(gang);
  JobRecord* mover = MoverOf(members);
  if (mover == nullptr) return;
  const int generation = mover->gang->cut_in_flight;
  // Every rank's image is in, the moving rank's last: they are one cut, the gang's generation.
  for (JobRecord* m : members) {
    GangMember& g = *m->gang;
    host_.RecordCheckpoint(*m, Json{{key::kPath, g.cut_path}, {key::kBytes, g.cut_bytes}},
                           g.cut_path);
    g.generation = generation;
    jobs_.MarkDirty(*m);
  }
  // Its dump killed it and its network on that node: from here on it is restored, the others
  // frozen until that is reported.
  GangMember& g = *mover->gang;
  g.move_from = mover->node;
  g.cut_phase = CutPhase::kMoving;
  host_.Accrue(*mover, host_.Now());
  host_.ReleaseJob(*mover);
  jobs_.SetState(*mover, JobState::kRestoring);
  host_.Event("gang_move_dumped", mover, g.move_from,
              "gang " + gang + ": rank " + std::to_string(g.rank) + " dumped and stopped on " +
                  g.move_from + " (generation " + std::to_string(generation) +
                  " of every rank); restoring it on " + g.move_to);
  if (!PlaceMovedRank(*mover, g.move_to, " for its gang's move")) {
    const api::CommandResult gone{.ok = false, .error = "node " + g.move_to + " takes no work"};
    ApplyMovedRankRestore(*mover, gone);
    return;
  }
  jobs_.MarkDirty(*mover);
}

void GangCoordinator::ApplyMovedRankRestore(JobRecord& j, const api::CommandResult& r) {
  GangMember& g = *j.gang;
  const std::string gang = g.gang;
  const std::string rank = "rank " + std::to_string(g.rank);
  const bool back = g.move_to == g.move_from;
  if (r.ok) {
    // Its sockets are back: now the other nodes route its address to it, and the gang goes on.
    const std::string from = g.move_from;
    g.move_to.clear();
    g.move_from.clear();
    g.cut_in_flight = 0;
    g.cut_phase = CutPhase::kNone;
    j.checkpoint_in_flight = false;
    jobs_.MarkDirty(j);
    for (JobRecord* m : Members(gang)) {
      if (m == &j) continue;
      m->gang->cut_phase = CutPhase::kThawing;
      Thaw(*m);
      jobs_.MarkDirty(*m);
    }
    if (back) {
      host_.Count("gang_move_failures", 1);
      host_.Event("gang_move_failed", &j, j.node,
                  "gang " + gang + ": " + rank + " restored again on " + j.node +
                      ", where it was, from generation " + std::to_string(g.generation) +
                      "; every rank thawed");
    } else {
      host_.Count("gang_rank_moves", 1);
      host_.Event("gang_rank_moved", &j, j.node,
                  "gang " + gang + ": " + rank + " moved from " + from + " to " + j.node +
                      " (restored from generation " + std::to_string(g.generation) + ", address " +
                      g.address + "); the routes to it switched, every rank thawed");
    }
    return;
  }
  const std::string failed_on = j.node;
  host_.Event("restore_failed", &j, failed_on,
              "gang " + gang + ": " + rank + ": restore on " + failed_on + " failed: " + r.error);
  host_.Count("restores_failed", 1);
  if (!back) {
    // Back where it was, from the same image: the others are still frozen at that cut.
    host_.Accrue(j, host_.Now());
    host_.ReleaseJob(j);
    g.move_to = g.move_from;
    if (PlaceMovedRank(j, g.move_to, " again (its move failed)")) {
      jobs_.MarkDirty(j);
      return;
    }
  }
  // Nowhere to go: the whole gang comes back from the cut, as after a lost node. No kill goes to
  // FAILED_ON for this rank: nothing of it runs there.
  for (JobRecord* m : Members(gang)) {
    m->gang->cut_in_flight = 0;
    m->gang->cut_phase = CutPhase::kNone;
    m->gang->move_to.clear();
    m->gang->move_from.clear();
  }
  if (j.node.empty()) j.node = failed_on;
  Recover(j, j.node, rank + " could not be restored after its move");
}

void GangCoordinator::PeriodicCheckpoints(double now) {
  if (settings_.checkpoint_every_s <= 0) return;
  std::set<std::string> seen;
  for (auto& [seq, j] : jobs_) {
    if (!j.gang || !Live(j) || !seen.insert(j.gang->gang).second) continue;
    std::vector<JobRecord*> members = Members(j.gang->gang);
    if (!CutRefusal(members).empty()) continue;
    double since = 0;
    for (const JobRecord* m : members) {
      since = std::max({since, m->started_at.value_or(0.0), m->last_checkpoint_cmd_at,
                        m->last_checkpoint ? m->last_checkpoint->at : 0.0});
    }
    if (now - since < settings_.checkpoint_every_s) continue;
    (void)StartCut(j.gang->gang, false, "periodic");
  }
}

StatusOr<Json> GangCoordinator::Checkpoint(JobRecord& j) {
  const std::string gang = j.gang->gang;
  if (std::string refusal = StartCut(gang, true, "asked"); !refusal.empty()) {
    return FailedPrecondition("gang " + gang + ": " + refusal);
  }
  Json out = host_.JobJson(j);
  PALADIN_RETURN_IF_ERROR(host_.Flush());
  return out;
}

StatusOr<Json> GangCoordinator::Resume(JobRecord& j) {
  const std::string gang = j.gang->gang;
  std::vector<JobRecord*> members = Members(gang);
  for (const JobRecord* m : members) {
    if (m->state() != JobState::kCheckpointed || !m->last_checkpoint) {
      return FailedPrecondition("gang " + gang + ": rank " + std::to_string(m->gang->rank) +
                                " is " + m->StateName() + "; only a checkpointed gang resumes");
    }
  }
  for (JobRecord* m : members) {
    jobs_.SetState(*m, JobState::kRestoring);
    m->node.clear();
    m->gpu = -1;
    m->pending_since = host_.Now();
    m->reason = "waiting for room for the whole gang to restore generation " +
                std::to_string(m->gang->generation);
    jobs_.MarkDirty(*m);
  }
  Json out = host_.JobJson(j);
  PALADIN_RETURN_IF_ERROR(host_.Flush());
  host_.Wake();
  return out;
}

void GangCoordinator::Recover(const JobRecord& lost, const std::string& dead_node,
                              const std::string& why) {
  const std::string gang = lost.gang->gang;
  const double now = host_.Now();
  const std::string cause = why.empty() ? "node " + dead_node + " died" : why;
  if (lost.gang->cut_in_flight != 0) GiveUpCut(gang, cause);
  for (JobRecord* m : Members(gang)) {
    GangMember& g = *m->gang;
    g.cut_in_flight = 0;
    g.cut_phase = CutPhase::kNone;
    g.move_to.clear();
    g.move_from.clear();
    m->checkpoint_in_flight = false;
    if (!m->HoldsGpu() && m->node.empty()) continue;  // already waiting
    moves_.FailActive(*m, "its gang is recovering");
    if (m->node != dead_node) {
      // A survivor: stopped here and restored from the same cut with the others. The gang waits
      // for this kill's answer before any rank runs again, so no rank ever runs twice.
      g.stopping_command = host_.SendCommand(m->node, api::KillCommand(m->epoch), m);
      g.stopping_node = m->node;
    }
    host_.Accrue(*m, now);
    host_.ReleaseJob(*m);
    m->pending_since = now;
    m->cancel_requested = false;
    if (g.generation > 0 && m->last_checkpoint) {
      jobs_.SetState(*m, JobState::kRestoring);
      m->recovering = true;
      m->reason = std::string("gang ").append(gang).append(" recovering (").append(cause);
      m->reason.append("): every rank restores generation ").append(std::to_string(g.generation));
    } else {
      jobs_.SetState(*m, JobState::kPending);
      ++m->restarts;
      host_.Count("restarts", 1);
      m->reason = std::string("gang ").append(gang).append(": ").append(cause);
      m->reason.append(" and the gang had no checkpoint: every rank starts over");
      host_.Event("restarted", m, dead_node, m->reason);
    }
    jobs_.MarkDirty(*m);
  }
}

void GangCoordinator::ForgetStoppingOn(const std::string& dead_node) {
  // A node declared dead has fenced its copies (its lease ran out): nothing of them runs.
  for (auto& [seq, j] : jobs_) {
    if (j.gang && j.gang->stopping_command != 0 && j.gang->stopping_node == dead_node) {
      j.gang->stopping_command = 0;
      j.gang->stopping_node.clear();
      jobs_.MarkDirty(j);
    }
  }
}

}  // namespace paladin::server
