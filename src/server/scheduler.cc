// Placement: the live fleet as a core::Fleet, waiting jobs placed by the core packer (never a
// second packer), team quotas, the initial size of "auto" jobs, predictions and accounting.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>

#include "control.h"
#include "paladin/base/size.h"
#include "paladin/server/placement.h"

namespace paladin::server {
namespace {

inline constexpr uint64_t kMigrationReservation = uint64_t{1} << 48;

// Sizes in reasons and events: the project's one formatter (negative ones never occur).
std::string Bytes(int64_t b) {
  return base::FormatSize(static_cast<uint64_t>(std::max<int64_t>(b, 0)));
}

}  // namespace

int64_t Control::LargestGpuMemory() const {
  int64_t most = 0;
  for (const auto& [name, n] : nodes_) {
    for (const GpuRecord& g : n.gpus) most = std::max(most, g.memory_bytes);
  }
  return most;
}

core::Workload GpuShape(const std::string& name, const std::string& team, int32_t priority,
                        int32_t gpus, int64_t quota_bytes, int64_t gpu_memory) {
  core::Workload w;
  w.name = name;
  w.team = team;
  w.priority = priority;
  w.gpu_count = gpus;
  if (gpus == 0) return w;  // a CPU rank of a gang: no GPU, no GPU memory
  w.gpu_mem_mib = std::max<int64_t>(1, (quota_bytes + kMiB - 1) / kMiB);
  if (gpus > 1 || gpu_memory <= 0) {
    w.gpu_milli = core::kMilliPerGpu;
  } else {
    const double share =
        std::ceil(1000.0 * static_cast<double>(quota_bytes) / static_cast<double>(gpu_memory));
    w.gpu_milli = static_cast<int32_t>(std::clamp(share, 1.0, 1000.0));
  }
  return w;
}

core::Workload Control::ShapeOf(const JobRecord& j, int64_t gpu_memory) const {
  return GpuShape(j.id, j.team, j.priority, j.gpus, j.quota_bytes, gpu_memory);
}

Control::FleetView Control::BuildFleet(bool reserve_running) {
  FleetView v;
  for (const auto& [name, n] : nodes_) {
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
    const core::Workload w = ShapeOf(j, v.gpu_memory[static_cast<size_t>(p.node)]);
    if (static_cast<int>(p.gpus.size()) != w.gpu_count) return;
    // A fleet that is over-committed (a GPU that shrank, a restart) still books what runs: the
    // reservation is forced by booking it even when CheckPlacement would refuse.
    (void)v.fleet.Reserve(id, w, p);
  };
  for (const auto& [seq, j] : jobs_) {
    if (!j.HoldsGpu()) continue;
    std::vector<int> gpus = j.gpu_indices;
    if (gpus.empty() && j.gpu >= 0) gpus.push_back(j.gpu);
    reserve(static_cast<uint64_t>(seq), j, j.node, gpus);
  }
  for (const auto& [id, m] : migrations_) {
    if (m.Finished() || m.commit_answer.value_or(false)) continue;
    const std::string& wanted = m.job;
    auto job = std::find_if(jobs_.begin(), jobs_.end(),
                            [&wanted](const auto& kv) { return kv.second.id == wanted; });
    if (job == jobs_.end()) continue;
    reserve(kMigrationReservation + static_cast<uint64_t>(id), job->second, m.to_node, {m.to_gpu});
  }
  return v;
}

void Control::SizeAutoJob(JobRecord& j) {
  const core::AutoSize size = core::SizeAuto(
      ClassHistoryOf(j.ClassKey()), {.max_bytes = j.mem_max, .largest_gpu = LargestGpuMemory()});
  j.prediction = size.why;
  j.quota_bytes = size.bytes;
  j.predicted_bytes = size.bytes;
}

std::string Control::TeamQuotaRefusal(const JobRecord& j) const {
  return teams_.Refusal(j.team, AskOf(j), "this job", jobs_);
}

void Control::PlaceWaiting(FleetView& view) {
  std::vector<JobRecord*> waiting;
  for (auto& [seq, j] : jobs_) {
    if (j.state() == JobState::kPending || (j.state() == JobState::kRestoring && j.node.empty()))
      waiting.push_back(&j);
  }
  std::stable_sort(waiting.begin(), waiting.end(), [](const JobRecord* a, const JobRecord* b) {
    return a->priority != b->priority ? a->priority > b->priority : a->seq < b->seq;
  });
  std::set<std::string> gangs_tried;
  for (JobRecord* j : waiting) {
    if (j->gang) {
      // A gang is placed as one, at its first waiting rank's turn; never rebalanced for or
      // preempting (a rank alone is not worth anything).
      if (gangs_tried.insert(j->gang->gang).second) TryPlaceGang(view, j->gang->gang);
      continue;
    }
    if (TryPlace(view, *j)) continue;
    const int64_t before = migrations_.made();
    Rebalance(view, *j);
    if (migrations_.made() != before) {
      view = BuildFleet(true);  // destinations are booked now
      continue;
    }
    if (admission_moves_.empty() && Preempt(view, *j)) return;  // room comes once they stop
  }
}

bool Control::Preempt(const FleetView& view, JobRecord& waiting) {
  if (waiting.state() != JobState::kPending || !TeamQuotaRefusal(waiting).empty()) return false;
  if (waiting.preempt_futile_at == Changes()) return false;
  const bool preempted = PreemptFor(view, waiting);
  if (!preempted) waiting.preempt_futile_at = Changes();
  return preempted;
}

bool Control::PreemptFor(const FleetView& view, JobRecord& waiting) {
  // One wave at a time: what is being preempted now may already make room.
  for (const auto& [seq, j] : jobs_) {
    if (j.preempted && j.state() == JobState::kCheckpointing) return false;
  }
  // Candidates: running, lower priority, on a node that can checkpoint them, not moving; the
  // lowest priority first, then the most recently started (the least work since its start).
  std::vector<const JobRecord*> candidates;
  for (const auto& [seq, j] : jobs_) {
    if (j.state() != JobState::kRunning || j.priority >= waiting.priority || j.migration_id != 0 ||
        j.checkpoint_in_flight || j.gang || view.index.count(j.node) == 0) {
      continue;
    }
    const NodeRecord* node = nodes_.Find(j.node);
    if (node == nullptr || !node->checkpointable) continue;
    candidates.push_back(&j);
  }
  if (candidates.empty()) return false;
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const JobRecord* a, const JobRecord* b) {
                     if (a->priority != b->priority) return a->priority < b->priority;
                     return a->started_at.value_or(0) > b->started_at.value_or(0);
                   });
  // The core's planner (the simulator's too) picks the node and the victims: on each node it
  // takes the candidates in this order until the job fits, leaves in place those the job turns
  // out not to need, and prefers the node where the least running GPU share is disturbed.
  std::vector<core::MovableJob> movable;
  core::MigrationCost cost;
  for (const JobRecord* j : candidates) {
    std::optional<core::Fleet::Holding> held = view.fleet.HoldingOf(static_cast<uint64_t>(j->seq));
    if (!held) continue;
    core::MovableJob m;
    m.id = static_cast<uint64_t>(j->seq);
    m.shape = held->workload;
    m.placement = held->placement;
    m.downtime_s = cost.DowntimeS(static_cast<double>(j->used_bytes), 0);
    movable.push_back(std::move(m));
  }
  core::Fleet trial = view.fleet;
  int64_t largest = 0;
  for (int64_t m : view.gpu_memory) largest = std::max(largest, m);
  std::optional<core::PreemptionPlan> plan =
      rebalancer_.PlanPreemption(trial, ShapeOf(waiting, largest), movable, packer_, rng_);
  if (!plan) return false;
  const std::string& node = view.names[static_cast<size_t>(plan->placement.node)];
  int preempted = 0;
  for (uint64_t victim : plan->victims) {
    JobRecord& j = *jobs_.BySeq(static_cast<int64_t>(victim));
    jobs_.SetState(j, JobState::kCheckpointing);
    j.preempted = true;
    j.reason = "preempted by " + waiting.id + " (priority " + std::to_string(waiting.priority) +
               " > " + std::to_string(j.priority) + "): checkpointing to stop";
    ++j.checkpoint_seq;
    SendCommand(j.node, api::CheckpointCommand("stop", CheckpointDir(j, j.checkpoint_seq)), &j);
    Event("preempted", &j, j.node,
          "checkpointed and stopped to make room for " + waiting.id + " (priority " +
              std::to_string(waiting.priority) + "); it resumes when room returns");
    Count("preemptions");
    jobs_.MarkDirty(j);
    ++preempted;
  }
  if (preempted == 0) return false;
  waiting.reason = "preempting " + std::to_string(preempted) + " lower-priority job(s) on " + node +
                   " to make room";
  jobs_.MarkDirty(waiting);
  return true;
}

bool Control::TryPlace(FleetView& view, JobRecord& j) {
  if (j.mem_auto && j.state() == JobState::kPending) SizeAutoJob(j);
  const std::string refusal = TeamQuotaRefusal(j);
  if (!refusal.empty()) {
    if (j.reason != refusal) {
      j.reason = refusal;
      jobs_.MarkDirty(j);
    }
    return false;
  }
  int64_t largest = 0;
  for (int64_t m : view.gpu_memory) largest = std::max(largest, m);
  const core::Workload w = ShapeOf(j, largest);
  core::PackerOptions options;
  options.collect_reasons = true;
  const auto start = std::chrono::steady_clock::now();
  core::Decision d = packer_.Schedule(view.fleet, w, rng_, options);
  decision_seconds_.Add(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (!d.placed) {
    std::string reason = view.names.empty() ? "no alive node with a healthy GPU" : d.Explain();
    if (j.reason != reason) {
      j.reason = reason;
      jobs_.MarkDirty(j);
    }
    return false;
  }
  // The share was sized for the largest GPU; book it at the chosen node's own share.
  const core::Workload booked = ShapeOf(j, view.gpu_memory[static_cast<size_t>(d.placement.node)]);
  if (!view.fleet.Reserve(static_cast<uint64_t>(j.seq), booked, d.placement).ok()) {
    j.reason = "the chosen GPU could not be booked; retrying";
    return false;
  }
  char how[160];
  std::snprintf(how, sizeof how, " by %s (score %.1f, %d feasible node%s)",
                packer_.policy().name.c_str(), d.score, d.feasible_nodes,
                d.feasible_nodes == 1 ? "" : "s");
  Bind(view, j, d.placement, how);
  return true;
}

void Control::Bind(FleetView& view, JobRecord& j, const core::Placement& p,
                   const std::string& how) {
  const double now = Now();
  const std::string& node_name = view.names[static_cast<size_t>(p.node)];
  const NodeRecord& node = nodes_.At(node_name);
  j.gpu_indices.clear();
  for (int16_t g : p.gpus) {
    j.gpu_indices.push_back(view.gpu_index[static_cast<size_t>(p.node)][static_cast<size_t>(g)]);
  }
  j.node = node_name;
  j.gpu = j.gpu_indices.empty() ? -1 : j.gpu_indices[0];
  const GpuRecord* gpu = node.Gpu(j.gpu);
  j.gpu_uuid = gpu != nullptr ? gpu->uuid : "";
  const int64_t gpu_memory = view.gpu_memory[static_cast<size_t>(p.node)];
  // A quota grows in place up to the ceiling: gpu_mem_max when given, the GPU for an "auto"
  // job, and nowhere for a fixed size (the quota is what the user asked for).
  if (j.mem_max > 0) {
    j.ceiling_bytes = std::max(std::min(j.mem_max, gpu_memory), j.quota_bytes);
  } else if (j.mem_auto) {
    j.ceiling_bytes = std::max(gpu_memory, j.quota_bytes);
  } else {
    j.ceiling_bytes = j.quota_bytes;
  }
  ++j.epoch;
  Team(j.team).usage.queue_seconds += std::max(0.0, now - j.pending_since);
  DirtyTeam(j.team);
  j.accounted_at = now;
  j.used_bytes = 0;
  const std::string where = j.node + "/" + std::to_string(j.gpu);
  api::Command launch;
  launch.name = j.name;
  launch.command = j.command;
  launch.env = j.env;
  launch.gpu_index = j.gpu;
  launch.gpu_indices = j.gpu_indices;
  launch.gpu_uuid = j.gpu_uuid;
  launch.quota_bytes = j.quota_bytes;
  launch.ceiling_bytes = j.ceiling_bytes;
  if (j.gang) AddGangLaunch(j, &launch);
  if (j.state() == JobState::kRestoring && j.last_checkpoint) {
    j.reason = "restoring on " + where + how;
    launch.kind = api::CommandKind::kRestore;
    launch.image = j.last_checkpoint->path;
    SendCommand(j.node, std::move(launch), &j);
    Event("placed", &j, j.node,
          "placed on " + where + how + " to restore from " + j.last_checkpoint->path);
  } else {
    jobs_.SetState(j, JobState::kStarting);
    j.reason = "placed on " + where + how;
    launch.kind = api::CommandKind::kStart;
    SendCommand(j.node, std::move(launch), &j);
    Event("placed", &j, j.node, j.reason);
  }
  if (j.mem_auto) {
    Event("predicted", &j, j.node,
          "quota " + std::to_string(j.quota_bytes) + " bytes: " + j.prediction);
    announced_prediction_[j.seq] = j.quota_bytes;
  }
  predictors_.erase(j.seq);
  jobs_.MarkDirty(j);
}

void Control::Accrue(JobRecord& j, double now) {
  if (j.accounted_at <= 0) j.accounted_at = now;
  const double dt = now - j.accounted_at;
  if (dt <= 0) return;
  j.accounted_at = now;
  TeamUsage& u = Team(j.team).usage;
  u.gpu_seconds += dt * j.gpus;
  u.mem_alloc_byte_seconds += dt * static_cast<double>(j.quota_bytes) * j.gpus;
  u.mem_used_byte_seconds += dt * static_cast<double>(j.used_bytes);
  j.gpu_seconds += dt * j.gpus;
  DirtyTeam(j.team);
}

void Control::ReleaseJob(JobRecord& j) {
  predictors_.erase(j.seq);
  announced_prediction_.erase(j.seq);
  j.node.clear();
  j.gpu = -1;
  j.gpu_indices.clear();
  j.gpu_uuid.clear();
  j.used_bytes = 0;
}

void Control::EndJob(JobRecord& j, JobState state, std::optional<int> exit_code,
                     const std::string& why) {
  const double now = Now();
  if (j.HoldsGpu()) Accrue(j, now);
  if (j.peak_used_bytes > 0) {
    int64_t& peak = class_peak_[j.ClassKey()];
    peak = std::max(peak, j.peak_used_bytes);
    ++class_jobs_[j.ClassKey()];
  }
  const std::string node = j.node;
  ReleaseJob(j);
  jobs_.SetState(j, state);
  j.exit_code = exit_code;
  j.ended_at = now;
  j.reason = why;
  j.cancel_requested = false;
  Event(state == JobState::kCancelled ? "cancelled" : "ended", &j, node, why);
  jobs_.MarkDirty(j);
}

core::Predictor& Control::PredictorOf(const JobRecord& j) {
  std::unique_ptr<core::Predictor>& predictor = predictors_[j.seq];
  if (!predictor) {
    core::ResourceSpec spec;
    // What the user asked for: the ceiling they declared, else the quota.
    spec.request = static_cast<double>(j.mem_max > 0 ? std::max(j.ceiling_bytes, j.quota_bytes)
                                                     : j.quota_bytes);
    // What the job may grow to, above which no forecast goes: gpu_mem_max, the GPU for an
    // "auto" job, the quota for a fixed size (Bind sets the ceiling so).
    spec.ceiling = static_cast<double>(std::max(j.ceiling_bytes, j.quota_bytes));
    spec.window_s = kPredictionWindowS;
    predictor = predictors_factory_.Make(spec);
  }
  return *predictor;
}

// The size of the next run of a job killed for running out of GPU memory under `quota_bytes`:
// core's rule, the one the dynamic simulation applies. The job's predictor hears of the OOM
// (`Predictor::ObserveOom`) and its forecast for the next window is the new quota (for
// `paladin`: at least 1.2 x the quota it outgrew, never above the job's ceiling).
int64_t Control::SizeAfterOom(JobRecord& j, double now) {
  core::Predictor& predictor = PredictorOf(j);
  const auto t = static_cast<int64_t>(now);
  predictor.ObserveOom(t, static_cast<double>(j.quota_bytes));
  const core::Forecast f = predictor.Predict(t);
  char why[200];
  std::snprintf(why, sizeof why, "paladin predictor after an OOM at %s: next-minute peak %s",
                Bytes(j.quota_bytes).c_str(), Bytes(static_cast<int64_t>(f.value)).c_str());
  j.prediction = why;
  return static_cast<int64_t>(std::ceil(f.value));
}

void Control::ObserveUsage(JobRecord& j, double now) {
  j.peak_used_bytes = std::max(j.peak_used_bytes, j.used_bytes);
  {
    core::Predictor& predictor = PredictorOf(j);
    const auto t = static_cast<int64_t>(now);
    predictor.Observe(t, static_cast<double>(j.used_bytes));
    const core::Forecast f = predictor.Predict(t);
    auto check = checks_.try_emplace(j.seq, kPredictionWindowS).first;
    if (auto w = check->second.Sample(t, static_cast<double>(j.used_bytes), f))
      team_checks_[j.team].Add(w->totals);
    j.predicted_bytes = static_cast<int64_t>(f.value);
    char why[200];
    std::snprintf(why, sizeof why, "paladin predictor: next-minute peak %s (+/- %s), phase %s",
                  Bytes(j.predicted_bytes).c_str(), Bytes(static_cast<int64_t>(f.sigma)).c_str(),
                  std::string(core::PhaseName(f.phase)).c_str());
    j.prediction = why;
    int64_t& announced = announced_prediction_[j.seq];
    if (j.mem_auto &&
        (announced <= 0 || std::abs(static_cast<double>(j.predicted_bytes - announced)) >
                               0.2 * static_cast<double>(announced))) {
      announced = j.predicted_bytes;
      Event("predicted", &j, j.node, std::to_string(j.predicted_bytes) + " bytes: " + why);
    }
  }
  if (now - j.last_sample_at >= 2.0) {
    j.last_sample_at = now;
    samples_.push_back(
        UsageSampleRecord{j.seq, now, j.used_bytes, j.quota_bytes, j.predicted_bytes});
  }
}

}  // namespace paladin::server
