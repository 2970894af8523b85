// The scheduler's decisions: where a waiting job or gang goes, which running jobs are
// preempted for it, which moves an admission plan makes, where a moving job goes, and the size
// of a job's run after an OOM. It calls only core (core::Packer and its policy,
// core::Rebalancer's admission and preemption planners, a core::Predictor's OOM path): the live
// server and the simulator decide with the same code. It reads the job table, the nodes (as a
// FleetView) and the teams' quotas (TeamBook) and changes none of them: each call answers a
// decision that Control carries out (binds, sends commands, writes events and reasons).
//
// Every packer and planner call draws on the scheduler's one core::Rng (seed 42), so a pass's
// decisions depend only on what it is given, in the order it is asked.
//
// Thread safety: none; Control calls it under its lock. No I/O, no clock (Place times the packer
// for the decision-latency metric only).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "job_table.h"
#include "migration_table.h"
#include "model.h"
#include "node_table.h"
#include "paladin/core/fleet.h"
#include "paladin/core/move_cost.h"
#include "paladin/core/packer.h"
#include "paladin/core/predict.h"
#include "paladin/core/rebalance.h"
#include "paladin/core/rng.h"
#include "team_book.h"

namespace paladin::server {

// The live fleet as the packer sees it: one core::Node per alive, non-draining node with a
// healthy GPU, one core::Gpu per healthy GPU.
struct FleetView {
  core::Fleet fleet;
  std::vector<std::string> names;           // fleet node index -> node name
  std::map<std::string, int32_t> index;     // node name -> fleet node index
  std::vector<std::vector<int>> gpu_index;  // [node][fleet gpu] -> GPU index on the node
  std::vector<int64_t> gpu_memory;          // [node] -> bytes per GPU (smallest)

  // The largest GPU's memory in the view (0 when none): a waiting job's share is sized for it.
  int64_t LargestGpuMemory() const;
};

// The fleet of NODES; with `reserve_running`, every job of JOBS that holds a GPU is booked where
// it runs, and every uncommitted migration of MIGRATIONS at its destination.
FleetView BuildFleet(const NodeTable& nodes, const JobTable& jobs, const MigrationTable& migrations,
                     bool reserve_running);

// The job's shape for the packer on GPUs of `gpu_memory` bytes (GpuShape).
core::Workload JobShape(const JobRecord& j, int64_t gpu_memory);

// Where a waiting job goes, or why not.
struct PlaceDecision {
  enum class Outcome {
    kPlaced,     // booked in the view's fleet at `placement`; Control binds it
    kRefused,    // its team's quota (TeamBook::Refusal): `reason`
    kNoRoom,     // the packer placed it nowhere: `reason` (Decision::Explain)
    kNotBooked,  // chosen but not booked: `reason` (retried next pass)
  };
  Outcome outcome = Outcome::kNoRoom;
  core::Placement placement;
  std::string how;     // kPlaced: " by POLICY (score S, N feasible nodes)"
  std::string reason;  // otherwise: why not
  double seconds = 0;  // how long the packer took (the decision-latency metric)
  bool placed() const { return outcome == Outcome::kPlaced; }
};

// Where a gang's ranks go, all or none.
struct GangDecision {
  bool placed = false;
  std::vector<core::Placement> placements;  // by rank, as the members were given
  std::string how;                          // " by POLICY with its gang (...)"
  std::string reason;                       // when not placed: every rank's reason
};

// The running jobs to checkpoint and stop so that a waiting job fits on `node`.
struct PreemptDecision {
  std::string node;
  std::vector<int64_t> victims;  // job seqs, in the planner's order
};

// A job's next run after it ran out of GPU memory under its quota.
struct OomRestart {
  int64_t quota_bytes = 0;
  std::string why;  // the prediction's reason
};

class Scheduler {
 public:
  explicit Scheduler(core::Policy policy) : packer_(std::move(policy)) {}
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  const core::Packer& packer() const { return packer_; }

  // The jobs waiting for room (pending, and restoring ones without a node) in the order they are
  // placed: higher priority first, then submission order.
  static std::vector<JobRecord*> WaitingOrder(JobTable& jobs);

  // A waiting job (an `auto` one already sized): refused by its team's quota, else placed by
  // the packer at the largest GPU's share and booked in the view at the chosen node's own.
  PlaceDecision Place(FleetView& view, const JobRecord& j, const TeamBook& teams,
                      const JobTable& jobs);

  // A gang whose every rank waits (sized): the team's quota over all ranks, then
  // core::Packer::ScheduleGang with at most ranks_per_node on a node. Books the ranks in the
  // view when placed.
  GangDecision PlaceGang(FleetView& view, const std::vector<JobRecord*>& members,
                         const TeamBook& teams, const JobTable& jobs);

  // Which lower-priority running jobs to checkpoint and stop so that `waiting` fits on one node
  // (core::Rebalancer::PlanPreemption), or nothing: only a pending job that its team's quota
  // allows preempts; one wave at a time (nothing while a preempted job still checkpoints);
  // candidates run on a checkpointable node, move nowhere,
  // checkpoint nothing, are no gang's rank; the lowest priority first, then the most recently
  // started. A victim's cost is the pause its node's measured moves predict (COSTS).
  std::optional<PreemptDecision> PlanPreemption(const FleetView& view, const JobRecord& waiting,
                                                const TeamBook& teams, const JobTable& jobs,
                                                const NodeTable& nodes,
                                                const core::MoveCostModel& costs);
  // Whether `waiting` may preempt at all: pending (a restoring job waits for room), and allowed
  // by its team's quota (the room made would not run it otherwise).
  static bool MayPreempt(const JobRecord& waiting, const TeamBook& teams, const JobTable& jobs);

  // The migrations of running single-GPU jobs that make room for `waiting`
  // (core::Rebalancer::PlanAdmission; a move's downtime from COSTS), or none. Nothing while a
  // migration is unfinished, or when the job waits for its team's quota.
  std::vector<core::Move> PlanAdmission(FleetView& view, const JobRecord& waiting,
                                        const JobTable& jobs, const NodeTable& nodes,
                                        const MigrationTable& migrations,
                                        const core::MoveCostModel& costs);

  // Where a running job that must move goes (a drain, an unhealthy GPU, a migration to a node
  // without a GPU named): the packer's decision over the view, not booked.
  core::Decision PlaceMove(const FleetView& view, const core::Workload& w,
                           const core::PackerOptions& options);

  // Whether a job that exited with `exit_code` ran out of GPU memory under its quota and starts
  // again, bigger: an `auto` job, refused an allocation, that failed, at most 3 times.
  static bool RestartsAfterOom(const JobRecord& j, std::optional<int> exit_code);
  // Its next quota: PREDICTOR (the job's) hears of the OOM at `quota_bytes` (ObserveOom), and its
  // forecast for the next window is the new quota (paladin: at least 1.2 x the quota it outgrew,
  // never above the job's ceiling).
  static OomRestart SizeAfterOom(core::Predictor& predictor, int64_t quota_bytes, double now);

 private:
  core::Packer packer_;
  core::Rebalancer rebalancer_;
  core::Rng rng_{42};
};

}  // namespace paladin::server
