// Placement carried out: the scheduler's decisions (scheduler.h) for the waiting jobs applied in
// a pass (bound, preemptions sent), the initial size of "auto" jobs, usage samples (the
// predictions themselves are JobForecasts', forecasts.h) and accounting.
#include "paladin/server/placement.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "control.h"

namespace paladin::server {

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

void Control::SizeAutoJob(JobRecord& j) {
  const core::AutoSize size = core::SizeAuto(
      ClassHistoryOf(j.ClassKey()), {.max_bytes = j.mem_max, .largest_gpu = LargestGpuMemory()});
  j.prediction = size.why;
  j.quota_bytes = size.bytes;
  j.predicted_bytes = size.bytes;
}

void Control::PlaceWaiting(FleetView& view) {
  std::set<std::string> gangs_tried;
  for (JobRecord* j : Scheduler::WaitingOrder(jobs_)) {
    if (j->gang) {
      // A gang is placed as one, at its first waiting rank's turn; never rebalanced for or
      // preempting (a rank alone is not worth anything).
      if (gangs_tried.insert(j->gang->gang).second) gangs_.TryPlace(view, j->gang->gang);
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
  // The rule first: what it reads (the team's quota, its pods) is not in the memo's key.
  if (!Scheduler::MayPreempt(waiting, teams_, jobs_)) return false;
  if (waiting.preempt_futile_at == Changes()) return false;
  const bool preempted = PreemptFor(view, waiting);
  if (!preempted) waiting.preempt_futile_at = Changes();
  return preempted;
}

bool Control::PreemptFor(const FleetView& view, JobRecord& waiting) {
  std::optional<PreemptDecision> plan =
      scheduler_.PlanPreemption(view, waiting, teams_, jobs_, nodes_, moves_.costs());
  if (!plan || plan->victims.empty()) return false;
  for (int64_t victim : plan->victims) {
    JobRecord& j = *jobs_.BySeq(victim);
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
  }
  waiting.reason = "preempting " + std::to_string(plan->victims.size()) +
                   " lower-priority job(s) on " + plan->node + " to make room";
  jobs_.MarkDirty(waiting);
  return true;
}

bool Control::TryPlace(FleetView& view, JobRecord& j) {
  if (j.mem_auto && j.state() == JobState::kPending) SizeAutoJob(j);
  const PlaceDecision d = scheduler_.Place(view, j, teams_, jobs_);
  if (d.outcome != PlaceDecision::Outcome::kRefused) decision_seconds_.Add(d.seconds);  // packed
  switch (d.outcome) {
    case PlaceDecision::Outcome::kPlaced:
      Bind(view, j, d.placement, d.how);
      return true;
    case PlaceDecision::Outcome::kNotBooked:
      j.reason = d.reason;
      return false;
    case PlaceDecision::Outcome::kRefused:
    case PlaceDecision::Outcome::kNoRoom:
      if (j.reason != d.reason) {
        j.reason = d.reason;
        jobs_.MarkDirty(j);
      }
      return false;
  }
  return false;
}

FleetView Control::BuildFleet(bool reserve_running) {
  return server::BuildFleet(nodes_, jobs_, migrations_, reserve_running);
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
  teams_.NoteQueued(j.team, now - j.pending_since);
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
  if (j.gang) gangs_.AddLaunch(j, &launch);
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
  }
  forecasts_.Placed(j);
  jobs_.MarkDirty(j);
}

void Control::Accrue(JobRecord& j, double now) {
  if (j.accounted_at <= 0) j.accounted_at = now;
  const double dt = now - j.accounted_at;
  if (dt <= 0) return;
  j.accounted_at = now;
  teams_.NoteHeld(j, dt);
  j.gpu_seconds += dt * j.gpus;
}

void Control::ReleaseJob(JobRecord& j) {
  forecasts_.Released(j);
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
  forecasts_.LearnPeak(j);
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

void Control::ObserveUsage(JobRecord& j, double now) {
  j.peak_used_bytes = std::max(j.peak_used_bytes, j.used_bytes);
  if (forecasts_.Observe(j, now)) {
    Event("predicted", &j, j.node, std::to_string(j.predicted_bytes) + " bytes: " + j.prediction);
  }
  if (now - j.last_sample_at >= 2.0) {
    j.last_sample_at = now;
    samples_.push_back(
        UsageSampleRecord{j.seq, now, j.used_bytes, j.quota_bytes, j.predicted_bytes});
  }
}

}  // namespace paladin::server
