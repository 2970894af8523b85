#include "paladin/core/dynamic_sim.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <unordered_map>

#include "paladin/core/frag.h"
#include "paladin/core/packer.h"
#include "paladin/core/policies.h"

namespace paladin::core {

std::vector<DynamicConfig> DefaultDynamicConfigs() {
  return {
      {"FGD+request", "FGD", "request", false},
      {"FGD+vpa", "FGD", "vpa", false},
      {"paladin+request", "paladin", "request", false},
      {"paladin+paladin", "paladin", "paladin", false, true, true, true},
      {"paladin+paladin+rebalance", "paladin", "paladin", true, true, true, true},
  };
}

std::vector<DynamicJob> BuildDynamicJobs(std::span<const TraceJob> trace, size_t curves,
                                         std::span<const int64_t> curve_lengths_s, int32_t profiles,
                                         double load, uint64_t seed) {
  Rng rng(seed * 0x9e3779b97f4a7c15ULL + 17);
  std::vector<size_t> pick;
  if (load == 1.0) {
    for (size_t i = 0; i < trace.size(); ++i) pick.push_back(i);
  } else {
    const auto n = static_cast<size_t>(std::llround(load * static_cast<double>(trace.size())));
    for (size_t i = 0; i < n; ++i) pick.push_back(rng.Uniform(trace.size()));
  }
  std::vector<DynamicJob> jobs;
  jobs.reserve(pick.size());
  for (size_t i : pick) {
    DynamicJob j;
    j.request = trace[i].request;
    j.arrival_s = trace[i].arrival_s;
    j.duration_s = trace[i].duration_s;
    if (curves > 0) {
      j.curve = static_cast<int32_t>(rng.Uniform(curves));
      const int64_t len = curve_lengths_s[static_cast<size_t>(j.curve)];
      j.curve_offset_s =
          len > 0 ? static_cast<int64_t>(rng.Uniform(static_cast<uint64_t>(len))) : 0;
    }
    j.profile = (profiles > 0 && j.request.gpu_count > 0)
                    ? static_cast<int32_t>(rng.Uniform(static_cast<uint64_t>(profiles)))
                    : -1;
    jobs.push_back(std::move(j));
  }
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const auto& a, const auto& b) { return a.arrival_s < b.arrival_s; });
  return jobs;
}

namespace {

enum class JobStatus : uint8_t { kNotArrived, kQueued, kRunning, kDone };

struct JobState {
  JobStatus status = JobStatus::kNotArrived;
  int64_t queued_since = 0;
  double queued_s = 0;
  int64_t run_start = 0;  // the current run's start: the usage curve restarts with it
  double progress_s = 0;
  double checkpoint_progress_s = 0;
  double run_since_checkpoint_s = 0;
  double gpu_quota = 0;   // share of the GPU's memory
  double host_quota = 0;  // MiB
  Workload shape;         // what it holds in the fleet
  Placement placement;
  std::unique_ptr<Predictor> gpu_pred, host_pred;
  int64_t next_resize = 0;
  int64_t paused_until = 0;
  int64_t pinned_until = 0;
  int64_t finish_s = -1;
  int64_t failed_version = -1;                 // the fleet version at its last failed placement
  double resume_pause_s = 0;                   // a preempted job's checkpoint and restore time
  int64_t next_plan_s = 0;                     // when a job waiting for a plan gets another
  double gpu_use = 0, host_use = 0, busy = 0;  // this tick
  double run_s = 0;
};

int32_t MilliOf(double share) {
  return static_cast<int32_t>(
      std::clamp(std::ceil(share * kMilliPerGpu - 1e-9), 1.0, static_cast<double>(kMilliPerGpu)));
}

class Sim {
 public:
  Sim(const DynamicInputs& in, const DynamicConfig& config, const DynamicParams& params,
      Policy policy, std::shared_ptr<const std::vector<TypicalWorkload>> typical)
      : in_(in),
        typical_(std::move(typical)),
        config_(config),
        p_(params),
        fleet_(*in.fleet),
        packer_(std::move(policy)),
        rebalancer_(params.rebalance),
        states_(in.jobs.size()) {
    auto gpu_factory = PredictorFactory::ForName(config.predictor);
    auto host_factory = PredictorFactory::ForName(config.predictor);
    gpu_factory_ = std::make_unique<PredictorFactory>(std::move(*gpu_factory));
    host_factory_ = std::make_unique<PredictorFactory>(std::move(*host_factory));
    if (config.grow_on_demand && params.paladin_quantile > 0) {
      gpu_factory_->paladin.quantile = params.paladin_quantile;
      host_factory_->paladin.quantile = params.paladin_quantile;
    }
    // A copy per run: a frozen model still caches its readings, and runs share the inputs
    // across threads.
    if (config.predictor == "paladin" && !in.curve_fold.empty()) {
      for (const auto& m : in.gpu_class_models)
        gpu_models_.push_back(std::make_shared<PaladinClassModel>(*m));
      for (const auto& m : in.host_class_models)
        host_models_.push_back(std::make_shared<PaladinClassModel>(*m));
    }
  }

  DynamicResult Run(uint64_t seed) {
    Rng rng(seed);
    DynamicResult r;
    r.config = config_.name;
    r.seed = seed;
    r.jobs = static_cast<int64_t>(in_.jobs.size());
    if (in_.jobs.empty()) return r;
    const int64_t t0 = in_.jobs.front().arrival_s / p_.tick_s * p_.tick_s;
    horizon_ = p_.horizon_s >= 0 ? p_.horizon_s : in_.jobs.back().arrival_s;
    size_t next_arrival = 0;
    double active_gpu_s = 0, time_s = 0;
    // Each step covers the tick ending at t; the last one is the tick that reaches the horizon.
    for (int64_t t = t0; t - p_.tick_s < horizon_; t += p_.tick_s) {
      // Skip idle stretches: nothing queued or running until the next arrival.
      if (running_.empty() && queue_.empty() && next_arrival < in_.jobs.size() &&
          in_.jobs[next_arrival].arrival_s > t) {
        const int64_t next = in_.jobs[next_arrival].arrival_s / p_.tick_s * p_.tick_s;
        if (next > t) {
          time_s += static_cast<double>(std::min(next, horizon_) - t);
          t = next;
        }
      }
      if (t - p_.tick_s >= horizon_) break;
      while (next_arrival < in_.jobs.size() && in_.jobs[next_arrival].arrival_s <= t) {
        Enqueue(next_arrival++, t);
      }
      Step(t, r);
      Resize(t, rng, r);
      Schedule(t, rng, r);
      // Accounting for the tick that starts now.
      double mem_alloc = 0, mem_used = 0;
      active_gpus_.clear();
      for (size_t j : running_) {
        const JobState& s = states_[j];
        const double gib = GpuGib(s.placement.node) * s.shape.gpu_count;
        for (int16_t g : s.placement.gpus)
          active_gpus_.push_back(int64_t{s.placement.node} * 64 + g);
        mem_alloc += s.gpu_quota * gib;
        mem_used += s.gpu_use * gib;
      }
      std::sort(active_gpus_.begin(), active_gpus_.end());
      const auto active = static_cast<double>(
          std::unique(active_gpus_.begin(), active_gpus_.end()) - active_gpus_.begin());
      // Accounting for the tick that starts now, up to the horizon.
      const auto dt = static_cast<double>(std::clamp<int64_t>(horizon_ - t, 0, p_.tick_s));
      active_gpu_s += active * dt;
      time_s += dt;
      r.mem_alloc_gib_h += mem_alloc * dt / 3600;
      r.mem_used_gib_h += mem_used * dt / 3600;
      if ((t - t0) % 3600 == 0 && t <= horizon_) {
        r.series.push_back({t, static_cast<int32_t>(queue_.size()),
                            static_cast<int32_t>(running_.size()), mem_alloc, mem_used});
      }
    }
    // Results.
    std::vector<double> waits;
    double jct = 0, run_h = 0;
    for (size_t j = 0; j < states_.size(); ++j) {
      JobState& s = states_[j];
      if (s.status == JobStatus::kQueued)
        s.queued_s += static_cast<double>(horizon_ - s.queued_since);
      if (s.status == JobStatus::kNotArrived) continue;
      if (in_.jobs[j].arrival_s + in_.jobs[j].duration_s <= horizon_) {
        r.possible_gpu_hours += static_cast<double>(in_.jobs[j].request.TotalGpuMilli()) /
                                kMilliPerGpu * static_cast<double>(in_.jobs[j].duration_s) / 3600;
      }
      waits.push_back(s.queued_s);
      run_h += s.run_s / 3600;
      if (s.status == JobStatus::kDone && s.finish_s <= horizon_) {
        const Workload& w = in_.jobs[j].request;
        ++r.jobs_completed;
        r.completed_gpu_hours += static_cast<double>(w.TotalGpuMilli()) / kMilliPerGpu *
                                 static_cast<double>(in_.jobs[j].duration_s) / 3600;
        jct += static_cast<double>(s.finish_s - in_.jobs[j].arrival_s);
      }
    }
    if (!waits.empty()) {
      double sum = 0;
      for (double w : waits) sum += w;
      r.queue_mean_s = sum / static_cast<double>(waits.size());
      std::sort(waits.begin(), waits.end());
      const auto k = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(waits.size())));
      r.queue_p99_s = waits[std::clamp<size_t>(k, 1, waits.size()) - 1];
    }
    if (r.jobs_completed > 0) r.jct_mean_s = jct / static_cast<double>(r.jobs_completed);
    if (time_s > 0 && fleet_.GpuMilliCapacity() > 0) {
      r.gpu_active_pct = 100 * active_gpu_s * kMilliPerGpu /
                         (time_s * static_cast<double>(fleet_.GpuMilliCapacity()));
    }
    r.oom_per_1k_job_h = run_h > 0 ? 1000.0 * static_cast<double>(r.ooms) / run_h : 0;
    return r;
  }

 private:
  double GpuGib(int32_t node) const {
    const ModelId m = fleet_.node(node).model;
    const int64_t mib = m == kNoModel ? 0 : fleet_.models().MemoryMib(m);
    return mib > 0 ? static_cast<double>(mib) / 1024 : p_.gpu_mem_gib_default;
  }
  double RequestShare(size_t j) const {
    const Workload& w = in_.jobs[j].request;
    return w.gpu_count > 0 ? static_cast<double>(w.gpu_milli) / kMilliPerGpu : 0;
  }

  void Enqueue(size_t j, int64_t t) {
    JobState& s = states_[j];
    s.status = JobStatus::kQueued;
    s.queued_since = t;
    const Workload& w = in_.jobs[j].request;
    ResourceSpec gspec{RequestShare(j), 3600, 48.0 * (1 << 30)};
    ResourceSpec hspec{static_cast<double>(w.mem_mib), 3600, 1024.0 * 1024};
    if (gpu_models_.empty()) {
      if (w.gpu_count > 0) s.gpu_pred = gpu_factory_->Make(gspec);
      s.host_pred = host_factory_->Make(hspec);
    } else {
      // Sized only by what was learned without the pod this job replays.
      const auto fold = static_cast<size_t>(in_.curve_fold[static_cast<size_t>(in_.jobs[j].curve)]);
      if (w.gpu_count > 0)
        s.gpu_pred = MakePaladinPredictor(gspec, gpu_factory_->paladin, gpu_models_[fold]);
      s.host_pred = MakePaladinPredictor(hspec, host_factory_->paladin, host_models_[fold]);
    }
    queue_.push_back(j);
  }

  // The usage of job j over the tick ending at t (peaks of memory, mean busy share).
  void Usage(size_t j, int64_t t, JobState& s) const {
    const DynamicJob& job = in_.jobs[j];
    const UsageCurve& c = in_.curves[static_cast<size_t>(job.curve)];
    const auto n = static_cast<int64_t>(c.host_mem.size());
    s.gpu_use = s.host_use = s.busy = 0;
    if (n == 0) return;
    const int64_t from = std::max<int64_t>(0, t - p_.tick_s - s.run_start);
    const int64_t to = std::max<int64_t>(from + 1, t - s.run_start);
    double busy = 0;
    int k = 0;
    for (int64_t x = from; x < to; x += c.step_s, ++k) {
      const auto i = static_cast<size_t>(((x + job.curve_offset_s) / c.step_s) % n);
      s.gpu_use = std::max(s.gpu_use, static_cast<double>(c.gpu_mem[i]));
      s.host_use = std::max(s.host_use, static_cast<double>(c.host_mem[i]));
      busy += c.gpu_busy[i];
    }
    const double share = RequestShare(j);
    s.gpu_use *= share;
    s.busy = k > 0 ? busy / k * share : 0;
    s.host_use *= static_cast<double>(job.request.mem_mib);
  }

  // Advances every running job over the tick ending at t.
  void Step(int64_t t, DynamicResult& r) {
    if (running_.empty()) return;
    for (size_t j : running_) Usage(j, t, states_[j]);
    // Speeds from co-location, GPU by GPU.
    std::unordered_map<int64_t, std::vector<size_t>> on_gpu;
    for (size_t j : running_) {
      const JobState& s = states_[j];
      for (int16_t g : s.placement.gpus) on_gpu[int64_t{s.placement.node} * 64 + g].push_back(j);
    }
    std::vector<size_t> done, killed;
    const double dt = static_cast<double>(p_.tick_s);
    for (size_t j : running_) {
      JobState& s = states_[j];
      double speed = 1;
      for (int16_t g : s.placement.gpus) {
        speed = std::min(speed, SpeedOn(j, on_gpu[int64_t{s.placement.node} * 64 + g]));
      }
      // Observe, then check the quota.
      if (s.gpu_pred) s.gpu_pred->Observe(t, s.gpu_use);
      s.host_pred->Observe(t, s.host_use);
      bool gpu_oom = s.shape.gpu_count > 0 && s.gpu_use > s.gpu_quota + 1e-9;
      bool host_oom = s.host_use > s.host_quota + 1e-6;
      if ((gpu_oom || host_oom) && config_.grow_on_demand && GrowToUse(j, s)) {
        ++r.grown_on_demand;
        gpu_oom = host_oom = false;
      }
      const double active =
          std::clamp(static_cast<double>(t - std::max(s.paused_until, t - p_.tick_s)), 0.0, dt);
      if (gpu_oom || host_oom) {
        if (gpu_oom) s.gpu_pred->ObserveOom(t, s.gpu_quota);
        if (host_oom) s.host_pred->ObserveOom(t, s.host_quota);
        ++r.ooms;
        s.run_s += active;
        s.progress_s = s.checkpoint_progress_s;
        killed.push_back(j);
        continue;
      }
      s.run_s += active;
      s.progress_s += speed * active;
      s.run_since_checkpoint_s += active;
      const auto duration = static_cast<double>(in_.jobs[j].duration_s);
      if (s.progress_s >= duration) {
        const double over = (s.progress_s - duration) / std::max(speed, 1e-9);
        s.finish_s = t - static_cast<int64_t>(std::min(over, dt));
        done.push_back(j);
        continue;
      }
      if (s.run_since_checkpoint_s >= static_cast<double>(p_.checkpoint_every_s)) {
        s.checkpoint_progress_s = s.progress_s;
        s.run_since_checkpoint_s = 0;
      }
    }
    for (size_t j : done) {
      Release(j);
      states_[j].status = JobStatus::kDone;
    }
    for (size_t j : killed) {
      Requeue(j, t);
      queue_.push_back(j);
    }
    if (!killed.empty()) SortQueue();
  }

  // Whether job j should have its GPUs to itself: its profile's label says sharing hurts.
  bool Exclusive(size_t j) const {
    const Interference* f = in_.interference;
    const int32_t p = in_.jobs[j].profile;
    return config_.interference_aware && p_.isolate_sensitive && f != nullptr && p >= 0 &&
           static_cast<size_t>(p) < f->label.size() && f->label[static_cast<size_t>(p)] >= 2;
  }

  // Whether job j holds whole GPUs whatever its memory quota.
  bool WholeGpus(size_t j) const {
    const Workload& w = in_.jobs[j].request;
    return w.gpu_count > 1 || Exclusive(j) ||
           (config_.keep_whole_gpus && p_.keep_whole_gpus && w.gpu_milli >= kMilliPerGpu);
  }

  // Raises job j's quotas in place to what it uses now, when its GPUs and node have room.
  bool GrowToUse(size_t j, JobState& s) {
    Workload want = s.shape;
    if (s.shape.gpu_count > 0 && !WholeGpus(j)) {
      want.gpu_milli = std::max(want.gpu_milli, MilliOf(s.gpu_use));
    }
    want.mem_mib = std::max(want.mem_mib, static_cast<int64_t>(std::ceil(s.host_use)));
    fleet_.Unreserve(j);
    if (!fleet_.Reserve(j, want, s.placement).ok()) {
      (void)fleet_.Reserve(j, s.shape, s.placement);
      return false;
    }
    s.shape = want;
    s.gpu_quota = WholeGpus(j) ? std::max(s.gpu_quota, MilliOf(s.gpu_use) / double{kMilliPerGpu})
                               : static_cast<double>(want.gpu_milli) / kMilliPerGpu;
    s.host_quota = static_cast<double>(want.mem_mib);
    return true;
  }

  double SpeedOn(size_t j, const std::vector<size_t>& here) const {
    if (here.size() <= 1) return 1;
    if (in_.interference != nullptr && in_.interference->profiles > 0 && in_.jobs[j].profile >= 0) {
      const Interference& f = *in_.interference;
      double speed = 1;
      for (size_t k : here) {
        if (k == j || in_.jobs[k].profile < 0) continue;
        const double v = f.pair_speed[static_cast<size_t>(in_.jobs[j].profile) *
                                          static_cast<size_t>(f.profiles) +
                                      static_cast<size_t>(in_.jobs[k].profile)];
        speed *= std::min(1.0, std::isnan(v) ? f.unmeasured_speed : v);
      }
      return speed;
    }
    double busy = 0;
    for (size_t k : here) busy += states_[k].busy;
    return busy > 1 ? 1 / busy : 1;
  }

  void Release(size_t j) {
    fleet_.Unreserve(j);
    ++version_;
    running_.erase(std::find(running_.begin(), running_.end(), j));
    states_[j].placement = Placement{};
  }

  void SortQueue() {
    std::stable_sort(queue_.begin(), queue_.end(), [&](size_t a, size_t b) {
      return in_.jobs[a].arrival_s < in_.jobs[b].arrival_s ||
             (in_.jobs[a].arrival_s == in_.jobs[b].arrival_s && a < b);
    });
  }

  // The shape job j asks for now: its request with the predicted quotas.
  Workload ShapeFor(size_t j, int64_t t, double* gpu_quota, double* host_quota) {
    JobState& s = states_[j];
    Workload w = in_.jobs[j].request;
    const double floor_gpu = s.status == JobStatus::kRunning ? s.gpu_use : 0;
    const double floor_host = s.status == JobStatus::kRunning ? s.host_use : 0;
    if (w.gpu_count > 0) {
      *gpu_quota = std::max(s.gpu_pred->Predict(t).value, floor_gpu);
      *gpu_quota = std::min(*gpu_quota, 1.0);
      *gpu_quota = static_cast<double>(MilliOf(*gpu_quota)) / kMilliPerGpu;
      // Jobs on whole GPUs (several GPUs, or a GPU of their own) keep their quota on memory
      // only; the others pack by it.
      w.gpu_milli = WholeGpus(j) ? kMilliPerGpu : MilliOf(*gpu_quota);
    } else {
      *gpu_quota = 0;
    }
    *host_quota = std::max(s.host_pred->Predict(t).value, floor_host);
    w.mem_mib = static_cast<int64_t>(std::ceil(*host_quota));
    *host_quota = static_cast<double>(w.mem_mib);
    return w;
  }

  void Start(size_t j, int64_t t, const Workload& shape, const Placement& p, double gpu_quota,
             double host_quota) {
    JobState& s = states_[j];
    (void)fleet_.Reserve(j, shape, p);
    s.status = JobStatus::kRunning;
    s.queued_s += static_cast<double>(t - s.queued_since);
    s.run_start = t;
    s.shape = shape;
    s.placement = p;
    s.gpu_quota = gpu_quota;
    s.host_quota = host_quota;
    s.next_resize = t + p_.resize_every_s;
    s.run_since_checkpoint_s = 0;
    // A job preempted earlier restores from its checkpoint first.
    s.paused_until = t + static_cast<int64_t>(std::ceil(s.resume_pause_s));
    s.resume_pause_s = 0;
    running_.push_back(j);
    recent_wait_s_ = 0.9 * recent_wait_s_ + 0.1 * static_cast<double>(t - s.queued_since);
  }

  MovableJob Movable(size_t j, int64_t t) const {
    const JobState& s = states_[j];
    MovableJob m;
    m.id = j;
    m.shape = s.shape;
    m.placement = s.placement;
    const double gpu_bytes =
        s.gpu_use * GpuGib(s.placement.node) * s.shape.gpu_count * 1024.0 * 1024 * 1024;
    const double host_bytes = s.host_use * 1024 * 1024;
    m.downtime_s = p_.measured_costs != nullptr
                       ? p_.measured_costs->Estimate("", "", gpu_bytes, host_bytes).pause_s
                       : p_.migration.DowntimeS(gpu_bytes, host_bytes);
    m.movable = t >= s.pinned_until;
    return m;
  }

  void ApplyMove(const Move& mv, int64_t t, DynamicResult& r) {
    JobState& s = states_[mv.job];
    fleet_.Unreserve(mv.job);
    (void)fleet_.Reserve(mv.job, s.shape, mv.to);
    ++version_;
    s.placement = mv.to;
    s.paused_until = std::max(s.paused_until, t) + static_cast<int64_t>(std::ceil(mv.downtime_s));
    s.pinned_until = t + p_.min_time_between_moves_s;
    ++r.migrations;
    r.migration_downtime_s += mv.downtime_s;
  }

  void Resize(int64_t t, Rng& rng, DynamicResult& r) {
    if (config_.predictor == "request") return;
    for (size_t idx = 0; idx < running_.size(); ++idx) {
      const size_t j = running_[idx];
      JobState& s = states_[j];
      if (t < s.next_resize) continue;
      s.next_resize = t + p_.resize_every_s;
      double gq = 0, hq = 0;
      const Workload want = ShapeFor(j, t, &gq, &hq);
      if (want.gpu_milli == s.shape.gpu_milli && want.mem_mib == s.shape.mem_mib) {
        s.gpu_quota = gq;  // whole-GPU jobs: the quota changes, the reservation does not
        continue;
      }
      // In place: release, try the bigger (or smaller) shape on the same GPUs, else put back.
      const Workload old = s.shape;
      fleet_.Unreserve(j);
      if (fleet_.Reserve(j, want, s.placement).ok()) {
        if (want.gpu_milli > old.gpu_milli || want.mem_mib > old.mem_mib) ++r.grown_in_place;
        ++version_;
        s.shape = want;
        s.gpu_quota = gq;
        s.host_quota = hq;
        continue;
      }
      (void)fleet_.Reserve(j, old, s.placement);
      // Shrink what can shrink (never below use: ShapeFor floors at it).
      Workload partial = old;
      partial.gpu_milli = std::min(old.gpu_milli, want.gpu_milli);
      partial.mem_mib = std::min(old.mem_mib, want.mem_mib);
      if (config_.rebalance) {
        const MovableJob m = Movable(j, t);
        // Moving pays when its downtime is less than what an OOM would cost: the work since the
        // last checkpoint plus a wait in the queue.
        if (m.downtime_s < s.run_since_checkpoint_s + recent_wait_s_) {
          if (auto mv = rebalancer_.PlanGrowth(fleet_, m, want, packer_, rng)) {
            s.shape = want;  // the move re-homes the job under its new shape
            ApplyMove(*mv, t, r);
            s.gpu_quota = gq;
            s.host_quota = hq;
            continue;
          }
        }
      }
      if (partial.gpu_milli != old.gpu_milli || partial.mem_mib != old.mem_mib) {
        fleet_.Unreserve(j);
        (void)fleet_.Reserve(j, partial, s.placement);
        ++version_;
        s.shape = partial;
        s.gpu_quota = WholeGpus(j) ? gq : static_cast<double>(partial.gpu_milli) / kMilliPerGpu;
        s.host_quota = static_cast<double>(partial.mem_mib);
      }
    }
  }

  // Consolidation while jobs wait: moves of shared jobs that lower fragmentation, once an hour.
  void Defrag(int64_t t, DynamicResult& r) {
    if (!config_.rebalance || p_.defrag_moves <= 0 || queue_.empty() || t < next_defrag_) return;
    next_defrag_ = t + 3600;
    std::vector<MovableJob> movable;
    movable.reserve(running_.size());
    for (size_t k : running_) {
      if (!WholeGpus(k)) movable.push_back(Movable(k, t));
    }
    for (const Move& mv : rebalancer_.PlanDefrag(fleet_, movable, *typical_, p_.defrag_moves,
                                                 p_.defrag_min_gain_milli)) {
      ApplyMove(mv, t, r);
    }
  }

  void Schedule(int64_t t, Rng& rng, DynamicResult& r) {
    Defrag(t, r);
    int plans = 0;
    bool requeued = false;
    std::vector<size_t> still;
    still.reserve(queue_.size());
    for (size_t j : queue_) {
      JobState& s = states_[j];
      const bool may_plan = config_.rebalance && t - s.queued_since >= p_.admission_min_wait_s;
      // Nothing was freed since it last failed; a job waiting for a plan still gets one an hour
      // (the waits that decide who may be preempted keep growing).
      if (s.failed_version == version_ && !(may_plan && t >= s.next_plan_s)) {
        still.push_back(j);
        continue;
      }
      double gq = 0, hq = 0;
      const Workload shape = ShapeFor(j, t, &gq, &hq);
      const Decision d = packer_.Schedule(fleet_, shape, rng);
      if (d.placed) {
        Start(j, t, shape, d.placement, gq, hq);
        continue;
      }
      if (may_plan && plans < p_.max_admission_plans_per_tick &&
          (!p_.admission_head_only || j == queue_.front()) &&
          (p_.admission_max_gpus <= 0 || shape.gpu_count <= p_.admission_max_gpus)) {
        ++plans;
        s.next_plan_s = t + p_.plan_retry_s;
        std::vector<MovableJob> movable;
        movable.reserve(running_.size());
        for (size_t k : running_) movable.push_back(Movable(k, t));
        const double share = static_cast<double>(shape.TotalGpuMilli()) / kMilliPerGpu;
        // What admitting it now is worth: its share x the wait it would otherwise see, at least
        // what it has waited already (a job that waited long tends to wait longer).
        const double wait = std::max({recent_wait_s_, static_cast<double>(t - s.queued_since),
                                      static_cast<double>(p_.tick_s)});
        const double worth = share * wait;
        if (auto plan = rebalancer_.PlanAdmission(fleet_, shape, movable, packer_, rng, worth)) {
          for (const Move& mv : plan->moves) ApplyMove(mv, t, r);
          Start(j, t, shape, plan->placement, gq, hq);
          continue;
        }
        if (p_.preemption && shape.gpu_count > 0 &&
            t - s.queued_since >= p_.preemption_min_wait_s) {
          if (auto plan = PlanPreemption(j, t, shape, rng)) {
            for (uint64_t k : plan->victims) {
              Preempt(k, t, r);
              still.push_back(k);
            }
            Start(j, t, shape, plan->placement, gq, hq);
            states_[j].pinned_until = t + p_.min_time_between_moves_s;
            requeued = true;
            continue;
          }
        }
      }
      s.failed_version = version_;
      still.push_back(j);
    }
    queue_ = std::move(still);
    if (requeued) SortQueue();
  }

  // Victims for admitting job j: running jobs not pinned that have waited less than j in all,
  // the most recently started first (they lose the least momentum).
  std::optional<PreemptionPlan> PlanPreemption(size_t j, int64_t t, const Workload& shape,
                                               Rng& rng) {
    const JobState& s = states_[j];
    const double waited = s.queued_s + static_cast<double>(t - s.queued_since);
    std::vector<size_t> order;
    for (size_t k : running_) {
      const JobState& v = states_[k];
      if (t >= v.pinned_until && v.queued_s < waited) order.push_back(k);
    }
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return states_[a].run_start > states_[b].run_start ||
             (states_[a].run_start == states_[b].run_start && a < b);
    });
    std::vector<MovableJob> victims;
    victims.reserve(order.size());
    for (size_t k : order) victims.push_back(Movable(k, t));
    return rebalancer_.PlanPreemption(fleet_, shape, victims, packer_, rng);
  }

  // Takes running job j off its GPUs and marks it queued from t (the caller puts it in the queue).
  void Requeue(size_t j, int64_t t) {
    Release(j);
    JobState& s = states_[j];
    s.status = JobStatus::kQueued;
    s.queued_since = t;
    s.failed_version = -1;
  }

  // Checkpoints running job k and queues it again: it keeps its progress and pays the checkpoint
  // and restore time when it starts again.
  void Preempt(size_t k, int64_t t, DynamicResult& r) {
    const double downtime = Movable(k, t).downtime_s;
    JobState& s = states_[k];
    s.checkpoint_progress_s = s.progress_s;
    s.run_since_checkpoint_s = 0;
    s.resume_pause_s = downtime;
    Requeue(k, t);
    ++r.migrations;
    ++r.preemptions;
    r.migration_downtime_s += downtime;
  }

  const DynamicInputs& in_;
  std::shared_ptr<const std::vector<TypicalWorkload>> typical_;
  int64_t next_defrag_ = 0;
  DynamicConfig config_;
  DynamicParams p_;
  Fleet fleet_;
  Packer packer_;
  Rebalancer rebalancer_;
  std::unique_ptr<PredictorFactory> gpu_factory_, host_factory_;
  std::vector<std::shared_ptr<PaladinClassModel>> gpu_models_, host_models_;  // by fold
  std::vector<JobState> states_;
  std::vector<size_t> queue_;         // by arrival
  std::vector<size_t> running_;       // in start order
  int64_t version_ = 0;               // bumped whenever resources are freed
  std::vector<int64_t> active_gpus_;  // scratch: GPUs with a running job this tick
  int64_t horizon_ = 0;
  double recent_wait_s_ = 0;  // decaying mean of recent queue waits
};

}  // namespace

StatusOr<DynamicResult> RunDynamicSim(const DynamicInputs& in, const DynamicConfig& config,
                                      const DynamicParams& params, double load, uint64_t seed) {
  if (in.fleet == nullptr) return InvalidArgument("no fleet");
  if (in.curves.empty()) return InvalidArgument("no usage curves");
  for (const auto& c : in.curves) {
    if (c.step_s <= 0) return InvalidArgument("usage curve '" + c.id + "': step must be positive");
    if (c.gpu_mem.size() != c.host_mem.size() || c.gpu_busy.size() != c.host_mem.size() ||
        c.host_mem.empty()) {
      return InvalidArgument("usage curve '" + c.id +
                             "': GPU memory, GPU busy and host memory must have the same, "
                             "non-zero number of samples");
    }
  }
  for (const auto& j : in.jobs) {
    if (j.curve < 0 || static_cast<size_t>(j.curve) >= in.curves.size()) {
      return InvalidArgument("job '" + j.request.name + "' has no usage curve");
    }
  }
  if (!in.curve_fold.empty()) {
    if (in.curve_fold.size() != in.curves.size()) {
      return InvalidArgument("curve folds: " + std::to_string(in.curve_fold.size()) + " for " +
                             std::to_string(in.curves.size()) + " usage curves");
    }
    const size_t folds = in.gpu_class_models.size();
    if (folds == 0 || in.host_class_models.size() != folds) {
      return InvalidArgument("curve folds need one GPU and one host class model per fold");
    }
    for (size_t f = 0; f < folds; ++f) {
      if (in.gpu_class_models[f] == nullptr || in.host_class_models[f] == nullptr)
        return InvalidArgument("no class model for fold " + std::to_string(f));
    }
    for (size_t c = 0; c < in.curves.size(); ++c) {
      if (in.curve_fold[c] < 0 || static_cast<size_t>(in.curve_fold[c]) >= folds) {
        return InvalidArgument("usage curve '" + in.curves[c].id + "' has fold " +
                               std::to_string(in.curve_fold[c]) + ", not one of 0.." +
                               std::to_string(folds - 1));
      }
    }
  }
  auto predictor = PredictorFactory::ForName(config.predictor);
  if (!predictor.ok()) return predictor.status();
  DynamicConfig canonical = config;
  canonical.predictor = predictor->name();
  auto typical =
      std::make_shared<const std::vector<TypicalWorkload>>(BuildTypicalWorkloads(in.shape_trace));
  TypicalOptions all;
  all.coverage = 1.0;
  auto shapes = std::make_shared<const std::vector<TypicalWorkload>>(
      BuildTypicalWorkloads(in.shape_trace, all));
  auto policy = MakePolicy(config.policy, PolicyContext{typical, shapes});
  if (!policy.ok()) return policy.status();
  Sim sim(in, canonical, params, std::move(*policy), typical);
  DynamicResult r = sim.Run(seed);
  r.load = load;
  return r;
}

}  // namespace paladin::core
