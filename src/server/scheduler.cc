// The scheduler's decisions over core: the packer, the rebalancer's planners, the predictor's
// OOM path. Control carries each decision out (placement.cc, orchestrator.cc, gangs.cc,
// agents.cc).
#include "scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "paladin/base/size.h"
#include "paladin/server/placement.h"

namespace paladin::server {
namespace {

inline constexpr uint64_t kMigrationReservation = uint64_t{1} << 48;

// Sizes in a prediction's reason: the project's one formatter (negative ones never occur).
std::string PredictedBytes(int64_t b) {
  return base::FormatSize(static_cast<uint64_t>(std::max<int64_t>(b, 0)));
}

}  // namespace

int64_t FleetView::LargestGpuMemory() const {
  int64_t largest = 0;
  for (int64_t m : gpu_memory) largest = std::max(largest, m);
  return largest;
}

core::Workload JobShape(const JobRecord& j, int64_t gpu_memory) {
  return GpuShape(j.id, j.team, j.priority, j.gpus, j.quota_bytes, gpu_memory);
}

FleetView BuildFleet(const NodeTable& nodes, const JobTable& jobs, const MigrationTable& migrations,
                     bool reserve_running) {
  FleetView v;
  for (const auto& [name, n] : nodes) {
    if (n.state != NodeState::kAlive || n.draining) continue;
    std::vector<int> healthy;
    int64_t memory = 0;
    std::string model;
    for (const GpuRecord& g : n.gpus) {
      if (!g.healthy || !g.fault.empty() || g.memory_bytes <= 0) continue;
      healthy.push_back(g.index);
      memory = memory == 0 ? g.memory_bytes : std::min(memory, g.memory_bytes);
      if (model.empty()) model = g.model;
    }
    if (healthy.empty() || static_cast<int>(healthy.size()) > core::kMaxGpusPerNode) continue;
    const int64_t mib = memory / kMiB;
    StatusOr<core::ModelId> id = v.fleet.models().Intern(model + "/" + std::to_string(mib));
    if (!id.ok()) continue;
    v.fleet.models().SetMemoryMib(*id, mib);
    StatusOr<int32_t> index = v.fleet.AddNode(name, int64_t{1} << 40, int64_t{1} << 40,
                                              static_cast<int>(healthy.size()), *id);
    if (!index.ok()) continue;
    v.names.push_back(name);
    v.index[name] = *index;
    v.gpu_index.push_back(healthy);
    v.gpu_memory.push_back(memory);
  }
  if (!reserve_running) return v;
  auto fleet_gpu = [&](int32_t node, int gpu) -> int16_t {
    const auto& map = v.gpu_index[static_cast<size_t>(node)];
    auto it = std::find(map.begin(), map.end(), gpu);
    return it == map.end() ? int16_t{-1} : static_cast<int16_t>(it - map.begin());
  };
  auto reserve = [&](uint64_t id, const JobRecord& j, const std::string& node,
                     const std::vector<int>& gpus) {
    auto at = v.index.find(node);
    if (at == v.index.end()) return;
    core::Placement p;
    p.node = at->second;
    for (int g : gpus) {
      const int16_t f = fleet_gpu(p.node, g);
      if (f < 0) return;
      p.gpus.push_back(f);
    }
    const core::Workload w = JobShape(j, v.gpu_memory[static_cast<size_t>(p.node)]);
    if (static_cast<int>(p.gpus.size()) != w.gpu_count) return;
    // A fleet that is over-committed (a GPU that shrank, a restart) still books what runs: the
    // reservation is forced by booking it even when CheckPlacement would refuse.
    (void)v.fleet.Reserve(id, w, p);
  };
  for (const auto& [seq, j] : jobs) {
    if (!j.HoldsGpu()) continue;
    std::vector<int> gpus = j.gpu_indices;
    if (gpus.empty() && j.gpu >= 0) gpus.push_back(j.gpu);
    reserve(static_cast<uint64_t>(seq), j, j.node, gpus);
  }
  for (const auto& [id, m] : migrations) {
    if (m.Finished() || m.commit_answer.value_or(false)) continue;
    const std::string& wanted = m.job;
    auto job = std::find_if(jobs.begin(), jobs.end(),
                            [&wanted](const auto& kv) { return kv.second.id == wanted; });
    if (job == jobs.end()) continue;
    reserve(kMigrationReservation + static_cast<uint64_t>(id), job->second, m.to_node, {m.to_gpu});
  }
  return v;
}

std::vector<JobRecord*> Scheduler::WaitingOrder(JobTable& jobs) {
  std::vector<JobRecord*> waiting;
  for (auto& [seq, j] : jobs) {
    if (j.state() == JobState::kPending || (j.state() == JobState::kRestoring && j.node.empty()))
      waiting.push_back(&j);
  }
  std::stable_sort(waiting.begin(), waiting.end(), [](const JobRecord* a, const JobRecord* b) {
    return a->priority != b->priority ? a->priority > b->priority : a->seq < b->seq;
  });
  return waiting;
}

PlaceDecision Scheduler::Place(FleetView& view, const JobRecord& j, const TeamBook& teams,
                               const JobTable& jobs) {
  PlaceDecision out;
  out.reason = teams.Refusal(j.team, AskOf(j), "this job", jobs);
  if (!out.reason.empty()) {
    out.outcome = PlaceDecision::Outcome::kRefused;
    return out;
  }
  const core::Workload w = JobShape(j, view.LargestGpuMemory());
  core::PackerOptions options;
  options.collect_reasons = true;
  const auto start = std::chrono::steady_clock::now();
  core::Decision d = packer_.Schedule(view.fleet, w, rng_, options);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!d.placed) {
    out.outcome = PlaceDecision::Outcome::kNoRoom;
    out.reason = view.names.empty() ? "no alive node with a healthy GPU" : d.Explain();
    return out;
  }
  // The share was sized for the largest GPU; book it at the chosen node's own share.
  const core::Workload booked = JobShape(j, view.gpu_memory[static_cast<size_t>(d.placement.node)]);
  if (!view.fleet.Reserve(static_cast<uint64_t>(j.seq), booked, d.placement).ok()) {
    out.outcome = PlaceDecision::Outcome::kNotBooked;
    out.reason = "the chosen GPU could not be booked; retrying";
    return out;
  }
  char how[160];
  std::snprintf(how, sizeof how, " by %s (score %.1f, %d feasible node%s)",
                packer_.policy().name.c_str(), d.score, d.feasible_nodes,
                d.feasible_nodes == 1 ? "" : "s");
  out.outcome = PlaceDecision::Outcome::kPlaced;
  out.placement = d.placement;
  out.how = how;
  return out;
}

GangDecision Scheduler::PlaceGang(FleetView& view, const std::vector<JobRecord*>& members,
                                  const TeamBook& teams, const JobTable& jobs) {
  GangDecision out;
  if (members.empty()) return out;
  const JobRecord& first = *members[0];
  TeamAsk want;
  for (const JobRecord* m : members) {
    const TeamAsk rank = AskOf(*m);
    want.gpus += rank.gpus;
    want.bytes += rank.bytes;
  }
  out.reason = teams.Refusal(first.team, want, "the gang", jobs);
  if (!out.reason.empty()) return out;
  const int64_t largest = view.LargestGpuMemory();
  std::vector<core::Workload> shapes;
  std::vector<uint64_t> ids;
  for (const JobRecord* m : members) {
    shapes.push_back(JobShape(*m, largest));
    ids.push_back(static_cast<uint64_t>(m->seq));
  }
  const core::MaxPerNodePermit per_node(first.gang->ranks_per_node);
  const Status placed =
      packer_.ScheduleGang(view.fleet, shapes, ids, rng_, {&per_node}, &out.placements);
  if (!placed.ok()) {
    out.placements.clear();
    out.reason = "gang " + first.gang->gang + ": " +
                 (view.names.empty() ? "no alive node with a healthy GPU" : placed.message());
    return out;
  }
  out.placed = true;
  out.how = " by " + packer_.policy().name + " with its gang (" + std::to_string(members.size()) +
            " ranks, at most " + std::to_string(first.gang->ranks_per_node) + " per node)";
  return out;
}

bool Scheduler::MayPreempt(const JobRecord& waiting, const TeamBook& teams, const JobTable& jobs) {
  return waiting.state() == JobState::kPending &&
         teams.Refusal(waiting.team, AskOf(waiting), "this job", jobs).empty();
}

std::optional<PreemptDecision> Scheduler::PlanPreemption(
    const FleetView& view, const JobRecord& waiting, const TeamBook& teams, const JobTable& jobs,
    const NodeTable& nodes, const core::MoveCostModel& costs) {
  if (!MayPreempt(waiting, teams, jobs)) return std::nullopt;
  // One wave at a time: what is being preempted now may already make room.
  for (const auto& [seq, j] : jobs) {
    if (j.preempted && j.state() == JobState::kCheckpointing) return std::nullopt;
  }
  // Candidates: running, lower priority, on a node that can checkpoint them, not moving; the
  // lowest priority first, then the most recently started (the least work since its start).
  std::vector<const JobRecord*> candidates;
  for (const auto& [seq, j] : jobs) {
    if (j.state() != JobState::kRunning || j.priority >= waiting.priority || j.migration_id != 0 ||
        j.checkpoint_in_flight || j.gang || view.index.count(j.node) == 0) {
      continue;
    }
    const NodeRecord* node = nodes.Find(j.node);
    if (node == nullptr || !node->checkpointable) continue;
    candidates.push_back(&j);
  }
  if (candidates.empty()) return std::nullopt;
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const JobRecord* a, const JobRecord* b) {
                     if (a->priority != b->priority) return a->priority < b->priority;
                     return a->started_at.value_or(0) > b->started_at.value_or(0);
                   });
  // The core's planner (the simulator's too) picks the node and the victims: on each node it
  // takes the candidates in this order until the job fits, leaves in place those the job turns
  // out not to need, and prefers the node where the least running GPU share is disturbed.
  std::vector<core::MovableJob> movable;
  for (const JobRecord* j : candidates) {
    std::optional<core::Fleet::Holding> held = view.fleet.HoldingOf(static_cast<uint64_t>(j->seq));
    if (!held) continue;
    core::MovableJob m;
    m.id = static_cast<uint64_t>(j->seq);
    m.shape = held->workload;
    m.placement = held->placement;
    // Checkpointed now, restored wherever it runs next: what moves off its node have taken.
    m.downtime_s = costs.Estimate(j->node, "", static_cast<double>(j->used_bytes), 0).pause_s;
    movable.push_back(std::move(m));
  }
  core::Fleet trial = view.fleet;
  std::optional<core::PreemptionPlan> plan = rebalancer_.PlanPreemption(
      trial, JobShape(waiting, view.LargestGpuMemory()), movable, packer_, rng_);
  if (!plan) return std::nullopt;
  PreemptDecision out;
  out.node = view.names[static_cast<size_t>(plan->placement.node)];
  for (uint64_t victim : plan->victims) out.victims.push_back(static_cast<int64_t>(victim));
  return out;
}

std::vector<core::Move> Scheduler::PlanAdmission(FleetView& view, const JobRecord& waiting,
                                                 const JobTable& jobs, const NodeTable& nodes,
                                                 const MigrationTable& migrations,
                                                 const core::MoveCostModel& costs) {
  if (migrations.AnyUnfinished()) return {};
  if (!waiting.reason.empty() && waiting.reason.rfind("team ", 0) == 0) return {};
  std::vector<core::MovableJob> movable;
  for (const auto& [seq, j] : jobs) {
    if (j.state() != JobState::kRunning || j.gpus != 1) continue;
    auto at = view.index.find(j.node);
    if (at == view.index.end()) continue;
    const auto& map = view.gpu_index[static_cast<size_t>(at->second)];
    auto g = std::find(map.begin(), map.end(), j.gpu);
    if (g == map.end()) continue;
    core::MovableJob m;
    m.id = static_cast<uint64_t>(seq);
    m.shape = JobShape(j, view.gpu_memory[static_cast<size_t>(at->second)]);
    m.placement.node = at->second;
    m.placement.gpus = {static_cast<int16_t>(g - map.begin())};
    // Where to is not known yet: what moves off this node have taken ranks the jobs; once a
    // destination is tried, what this node pair's moves took.
    const auto bytes = static_cast<double>(j.used_bytes);
    m.downtime_s = costs.Estimate(j.node, "", bytes, 0).pause_s;
    m.downtime_to = [&costs, &names = view.names, from = j.node, bytes](int32_t to) {
      const auto at = static_cast<size_t>(to);
      return costs.Estimate(from, at < names.size() ? names[at] : "", bytes, 0).pause_s;
    };
    m.movable = nodes.At(j.node).migrate_port > 0 && !j.gang;  // a gang rank never moves alone
    movable.push_back(std::move(m));
  }
  if (movable.empty()) return {};
  std::optional<core::AdmissionPlan> plan = rebalancer_.PlanAdmission(
      view.fleet, JobShape(waiting, view.LargestGpuMemory()), movable, packer_, rng_, 1e12);
  if (!plan) return {};
  return plan->moves;
}

core::Decision Scheduler::PlaceMove(const FleetView& view, const core::Workload& w,
                                    const core::PackerOptions& options) {
  return packer_.Schedule(view.fleet, w, rng_, options);
}

bool Scheduler::RestartsAfterOom(const JobRecord& j, std::optional<int> exit_code) {
  return exit_code.value_or(1) != 0 && j.refusals > 0 && j.restarts < 3 && j.mem_auto;
}

OomRestart Scheduler::SizeAfterOom(core::Predictor& predictor, int64_t quota_bytes, double now) {
  const auto t = static_cast<int64_t>(now);
  predictor.ObserveOom(t, static_cast<double>(quota_bytes));
  const core::Forecast f = predictor.Predict(t);
  char why[200];
  std::snprintf(why, sizeof why, "paladin predictor after an OOM at %s: next-minute peak %s",
                PredictedBytes(quota_bytes).c_str(),
                PredictedBytes(static_cast<int64_t>(f.value)).c_str());
  return {static_cast<int64_t>(std::ceil(f.value)), why};
}

}  // namespace paladin::server
