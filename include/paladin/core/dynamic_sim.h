// The dynamic simulation: jobs arrive at their trace times, run for their trace durations, follow
// a real usage curve (GPU memory, GPU busy share, host memory) over their lives, are sized by a
// predictor, placed by a packing policy, slowed by the jobs they share a GPU with, killed when
// they use more than their quota, and (in the full cycle) moved by the rebalancer.
//
// Units: a job's GPU quota and usage are shares of one GPU's memory (1.0 = the whole memory of
// one of its GPUs); the packer sees the quota as the job's GPU share (milli-GPU). Host memory is
// in MiB. Time is in seconds from the trace's origin. See docs/formats/dynamic.md for how every
// gap in the traces is filled.
//
// Deterministic: same inputs, config and seed give identical results. No I/O, no clocks.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "paladin/core/fleet.h"
#include "paladin/core/move_cost.h"
#include "paladin/core/predict.h"
#include "paladin/core/rebalance.h"

namespace paladin::core {

// A usage curve sampled every step_s, looped when a job outlives it.
struct UsageCurve {
  std::string id;
  int64_t step_s = 60;
  std::vector<float> gpu_mem;   // share of the GPU's memory, at a whole-GPU request
  std::vector<float> gpu_busy;  // 0..1
  std::vector<float> host_mem;  // share of the container's memory limit
};

// Speed of co-located jobs (1 = as fast as alone). Profiles are indices into a measured table
// (Lucid's jobs); without one, GPU time is shared in proportion to each job's busy share.
struct Interference {
  int32_t profiles = 0;
  // speed[a * profiles + b] = speed of a profile-a job sharing a GPU with a profile-b job; NaN
  // where the pair was not measured (unmeasured_speed is used instead).
  std::vector<double> pair_speed;
  double unmeasured_speed = 0.955;  // median of Lucid's measured pairs
  // Lucid's sharing label per profile: 0 shares well, 1 somewhat, 2 is slowed (or slows others)
  // by sharing. Paladin's packing gives label-2 jobs GPUs of their own when it knows the label
  // (Lucid learns it by profiling a job for a few minutes).
  std::vector<int8_t> label;
};

struct DynamicJob {
  Workload request;  // the trace's request: CPU, memory, GPU count and share
  int64_t arrival_s = 0;
  int64_t duration_s = 0;  // run time alone
  int32_t curve = 0;       // index into the usage curves
  int64_t curve_offset_s = 0;
  int32_t profile = -1;  // interference profile, -1 = none
};

// A job of the trace: its request, when it arrived and how long it ran.
struct TraceJob {
  Workload request;
  int64_t arrival_s = 0;
  int64_t duration_s = 0;
};

// The jobs of one run at `load`: the trace itself at 1.0, else round(load x N) jobs drawn
// uniformly with replacement (each keeps its arrival and duration). Each job is matched to a
// usage curve and a start offset into it, and GPU jobs to an interference profile, uniformly at
// random; all of it depends on the seed only.
std::vector<DynamicJob> BuildDynamicJobs(std::span<const TraceJob> trace, size_t curves,
                                         std::span<const int64_t> curve_lengths_s, int32_t profiles,
                                         double load, uint64_t seed);

struct DynamicConfig {
  std::string name;                   // e.g. "paladin+paladin+rebalance"
  std::string policy = "paladin";     // placement policy (core/policies.h)
  std::string predictor = "request";  // sizing (core/predict.h)
  bool rebalance = false;
  // Paladin's runtime: a job about to exceed its quota gets it grown in place when its GPUs (and
  // node) have room, instead of an out-of-memory kill (the interposer asks its launcher first).
  bool grow_on_demand = false;
  // Packs by interference label where profiles are known: label-2 jobs get whole GPUs.
  bool interference_aware = false;
  // A job that asked for a whole GPU keeps its GPU's compute to itself; its memory quota still
  // follows the predictor. Only work that asked for a fraction of a GPU is co-located.
  bool keep_whole_gpus = false;
};

// The five configurations compared, in report order.
std::vector<DynamicConfig> DefaultDynamicConfigs();

struct DynamicParams {
  int64_t tick_s = 300;               // the simulation's step (usage peaks are taken per tick)
  int64_t resize_every_s = 3600;      // predictor-sized quotas are revised this often
  int64_t checkpoint_every_s = 1800;  // periodic checkpoints: work since the last is lost on OOM
  int64_t horizon_s = -1;             // -1: the last arrival
  double gpu_mem_gib_default = 32;    // GPU memory for models whose memory is unknown
  MigrationCost migration;
  // What a fleet's moves measured (`sim dynamic --move-costs`, a model with `migration` as its
  // prior, fed a server's finished moves): when set, a simulated move costs the model's
  // fleet-wide estimate for the job's bytes (the simulated nodes are not the measured ones),
  // else `migration`'s rates. Read-only, shared by the runs.
  std::shared_ptr<const MoveCostModel> measured_costs;
  RebalanceParams rebalance;
  int max_admission_plans_per_tick = 4;
  // A job that got a plan (admission or preemption) and still waits gets the next one this much
  // later, even if nothing in the fleet changed.
  int64_t plan_retry_s = 3600;
  // Only jobs that waited this long get an admission plan (moving others has a cost for them).
  int64_t admission_min_wait_s = int64_t{24} * 3600;
  // Jobs asking more GPUs than this get no admission plan (0 = no limit).
  int32_t admission_max_gpus = 0;
  // Only the job at the head of the queue (the oldest waiting) gets an admission plan.
  bool admission_head_only = false;
  int64_t min_time_between_moves_s = 3600;  // a job moved is pinned for this long
  // The full cycle's last resort for a GPU job that waited preemption_min_wait_s and that no
  // move can admit: checkpoint a few running jobs off one node (those that have waited less in
  // all, most recently started first) and queue them again with their progress kept. Ten days:
  // only starvation, not an ordinary queue, is worth the waits it moves onto others (see
  // docs/dynamic.md).
  bool preemption = true;
  int64_t preemption_min_wait_s = int64_t{240} * 3600;
  // Whether configurations that keep whole GPUs do (false: they co-locate whole-GPU requests by
  // their memory quota, as the other predictor-sized configurations do).
  bool keep_whole_gpus = true;
  // The full cycle's consolidation while jobs wait: at most this many fragmentation-lowering
  // moves of shared jobs an hour, each lowering expected fragmentation by at least the gain.
  int defrag_moves = 0;  // off by default: see docs/dynamic.md
  double defrag_min_gain_milli = 50;
  // paladin's sizing quantile when quotas can grow on demand (0: the predictor's default).
  double paladin_quantile = 0.5;
  // Whether interference-aware configurations give label-2 jobs whole GPUs.
  bool isolate_sensitive = true;
};

struct DynamicSeries {  // one row per hour of the run
  int64_t t_s = 0;
  int32_t queued = 0;
  int32_t running = 0;
  double mem_alloc_gib = 0;
  double mem_used_gib = 0;
};

struct DynamicResult {
  std::string config;
  double load = 1;
  uint64_t seed = 0;
  double completed_gpu_hours = 0;
  double possible_gpu_hours = 0;  // of the jobs that could finish by the horizon if run at once
  int64_t jobs_completed = 0;
  int64_t jobs = 0;
  double queue_mean_s = 0, queue_p99_s = 0;
  double jct_mean_s = 0;
  double gpu_active_pct = 0;  // GPUs holding at least one running job, time-averaged, % of all
  double mem_alloc_gib_h = 0, mem_used_gib_h = 0;
  double oom_per_1k_job_h = 0;
  int64_t ooms = 0;
  int64_t migrations = 0;  // moves, and checkpoint-preemptions (a move through the queue)
  double migration_downtime_s = 0;
  int64_t preemptions = 0;
  int64_t grown_in_place = 0;   // quota raised at a resize, on the same GPUs
  int64_t grown_on_demand = 0;  // quota raised when use reached it (an OOM avoided)
  std::vector<DynamicSeries> series;
};

struct DynamicInputs {
  const Fleet* fleet = nullptr;
  std::span<const DynamicJob> jobs;  // sorted by arrival
  std::span<const UsageCurve> curves;
  const Interference* interference = nullptr;  // null: busy-share model
  std::span<const Workload> shape_trace;       // what FGD and paladin may know of the workload mix
  // Out of sample (`sim dynamic --folds K`): the fold of each usage curve (by its pod, as
  // `predict eval --folds` splits them) and, per fold, the frozen class models that the `paladin`
  // predictor of a job replaying a curve of that fold reads, trained without that fold's pods
  // (core::TrainFoldModels). Empty: one class model per run and resource learns online from
  // every job's windows, including those of other jobs replaying the same pod.
  std::span<const int32_t> curve_fold;
  std::span<const std::shared_ptr<const PaladinClassModel>> gpu_class_models, host_class_models;
};

StatusOr<DynamicResult> RunDynamicSim(const DynamicInputs& in, const DynamicConfig& config,
                                      const DynamicParams& params, double load, uint64_t seed);

}  // namespace paladin::core
