// The rebalancer: plans migrations of running work. It never moves anything itself; it returns a
// plan the caller carries out (the simulator, or the server's migration orchestrator).
//
//   admission  a workload that fits nowhere would fit on some node once a few running jobs move
//              off it; each of those must land on another node, within its allowed GPU models
//   growth     a running job predicted to outgrow its GPU: grow in place when the GPU has room
//              (the caller checks that first), else move it where its new size fits
//   preemption a workload that fits nowhere, not even after moves, takes a node once a few
//              running jobs are checkpointed off it and queued again (their progress is kept)
//
// Every plan is checked on the fleet itself (reserve, try, roll back): the fleet is exactly as
// it was when a call returns. A plan never moves a job twice and never targets a node that
// cannot hold the job. Plans are deterministic: same fleet, jobs and seed, same plan.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "paladin/core/fleet.h"
#include "paladin/core/frag.h"
#include "paladin/core/packer.h"
#include "paladin/core/rng.h"

namespace paladin::core {

// What moving a job costs: downtime = fixed + GPU bytes out / gpu_out + GPU bytes in / gpu_in +
// host bytes / disk, twice (written at the source, read at the destination). Defaults are the
// rates measured on an H200 (docs/formats/dynamic.md, DESIGN.md).
struct MigrationCost {
  double fixed_s = 2.0;
  double gpu_out_gbps = 1.6;  // driver checkpoint, GPU -> host, GB/s
  double gpu_in_gbps = 4.6;   // driver restore, host -> GPU
  double disk_gbps = 1.6;     // host state, written and read
  double DowntimeS(double gpu_bytes, double host_bytes) const {
    return fixed_s + gpu_bytes / (gpu_out_gbps * 1e9) + gpu_bytes / (gpu_in_gbps * 1e9) +
           2 * host_bytes / (disk_gbps * 1e9);
  }
};

// A running job the rebalancer may move.
struct MovableJob {
  uint64_t id = 0;  // its reservation id in the fleet
  Workload shape;   // what it holds now
  Placement placement;
  double downtime_s = 0;  // what moving it would cost it, from MigrationCost
  bool movable = true;    // false: pinned (not checkpointable, or moved recently)
  // What a move to node `to` costs it where that depends on the pair (the server's measured
  // moves); empty: downtime_s wherever it goes. downtime_s still ranks the jobs to move before
  // their destinations are known.
  std::function<double(int32_t to)> downtime_to;
  double DowntimeTo(int32_t to) const { return downtime_to ? downtime_to(to) : downtime_s; }
};

struct Move {
  uint64_t job = 0;
  Placement from;
  Placement to;
  double downtime_s = 0;
};

struct AdmissionPlan {
  std::vector<Move> moves;  // carry out in order, then place the workload at `placement`
  Placement placement;
  double cost = 0;  // sum over moves of downtime x the moved job's GPU share (GPU-seconds)
};

struct PreemptionPlan {
  std::vector<uint64_t> victims;  // checkpoint and queue these, then place the workload
  Placement placement;
  double gpu_share = 0;  // GPUs x share the victims held: the running work disturbed
  double cost = 0;       // sum over victims of downtime x GPU share (GPU-seconds)
};

struct RebalanceParams {
  // Jobs moved to admit one workload: single jobs and pairs are tried first, then a node is
  // cleared greedily, cheapest job first, up to this many.
  int max_moves = 8;
  int max_candidate_nodes = 24;  // nodes tried per admission, the most promising first
  int max_preempted = 16;        // jobs checkpointed off a node to admit one workload
};

class Rebalancer {
 public:
  explicit Rebalancer(RebalanceParams params = {}) : params_(params) {}

  // A plan that admits `w` (which the packer placed nowhere) by moving at most max_moves of
  // `jobs`, or nothing. `packer` places the moved jobs (and must not be mid-decision).
  // `max_cost` bounds the plan's cost: a plan must pay for itself.
  std::optional<AdmissionPlan> PlanAdmission(Fleet& fleet, const Workload& w,
                                             std::span<const MovableJob> jobs, Packer& packer,
                                             Rng& rng, double max_cost) const;

  // Consolidation: moves of shared-GPU jobs, one at a time, each lowering the fleet's expected
  // fragmentation (FGD's measure against `typical`) by at least `min_gain_milli`; the jobs of the
  // most fragmented nodes first, at most `max_moves`, each job at most once. The fleet is
  // unchanged; the moves are to be carried out in order.
  std::vector<Move> PlanDefrag(Fleet& fleet, std::span<const MovableJob> jobs,
                               std::span<const TypicalWorkload> typical, int max_moves,
                               double min_gain_milli) const;

  // A plan that admits `w` by checkpointing some of `jobs` off one node and queueing them again,
  // or nothing. Only movable jobs are victims; on a node they are taken in the order `jobs`
  // lists them (the caller's preference: put the jobs it would rather disturb first) until `w`
  // fits, then any victim `w` does not need after all is left in place. Of the nodes that work,
  // the one disturbing the least GPU share wins (then fewer victims, then the lower index). At
  // most max_preempted victims.
  std::optional<PreemptionPlan> PlanPreemption(Fleet& fleet, const Workload& w,
                                               std::span<const MovableJob> jobs, Packer& packer,
                                               Rng& rng) const;

  // Where `job` can go once it grows to `grown` (another node, or other GPUs of its node), or
  // nothing. The move's downtime is the job's.
  std::optional<Move> PlanGrowth(Fleet& fleet, const MovableJob& job, const Workload& grown,
                                 Packer& packer, Rng& rng) const;

 private:
  RebalanceParams params_;
};

}  // namespace paladin::core
