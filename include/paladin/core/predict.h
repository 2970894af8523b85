// Predictors of a workload's resource need: each one watches a usage series (GPU memory, host
// memory) and forecasts the PEAK over the next window, the quantity a quota must cover.
//
//   request  the workload's own request, unchanged (what most clusters allocate)
//   peak     the highest sample seen so far x a margin (the simple rule)
//   vpa      the Kubernetes Vertical Pod Autoscaler's memory recommender
//   paladin  ours: phase-aware; its margin a conformal quantile of what similar workloads did
//
// Deterministic and causal: a forecast depends only on what was observed before it was asked
// for (and on the class model's state, which is itself fed only with past samples). Times are
// seconds on any monotonic scale; values in any unit (bytes, or a fraction of a limit).
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "paladin/base/status.h"

namespace paladin::core {

// What a workload is doing, as seen in its own recent series.
enum class Phase : uint8_t {
  kLoading,  // younger than one window: still bringing its state in
  kIdle,     // its last window's peak is a negligible share of its request
  kGrowth,   // its last window's peak clearly above anything before it
  kSteady,   // flat over the last window
  kActive,   // varying: serving bursts, loading and unloading models
};
inline constexpr int kPhaseCount = 5;
std::string_view PhaseName(Phase p);

struct Forecast {
  double value = 0;  // the forecast peak over the next window: what a quota should be
  double sigma = 0;  // its uncertainty: the spread (one standard deviation) of the peak
  Phase phase = Phase::kLoading;
};

class Predictor {
 public:
  virtual ~Predictor() = default;
  virtual std::string_view name() const = 0;
  // A usage sample at time t_s. Times must not go backwards.
  virtual void Observe(int64_t t_s, double value) = 0;
  // The workload was killed at time t_s for exceeding `limit` (an out-of-memory event). The
  // forecast asked for next is the size to run it again with: the dynamic simulation and the
  // server both size a workload's next run after an OOM this way (paladin: at least 1.2 x the
  // limit for a window; vpa: a sample of max(1.2 x, + 100 MiB); peak: the limit x its margin).
  virtual void ObserveOom(int64_t t_s, double limit) { (void)t_s, (void)limit; }
  // The forecast peak over [now_s, now_s + window).
  virtual Forecast Predict(int64_t now_s) = 0;
};

// Parameters shared by all predictors of one resource.
struct ResourceSpec {
  double request = 0;       // the workload's request (or limit); also the ceiling of forecasts
  int64_t window_s = 3600;  // the forecast window
  double unit_bytes = 1;    // bytes per unit of value (VPA's constants are in bytes)
  // A ceiling above the request, for a workload whose quota may grow past what it was first
  // given (the server's "auto" jobs grow up to their GPU): no forecast goes above it. 0: the
  // request is the ceiling.
  double ceiling = 0;
};

// --- the simple rule --------------------------------------------------------------------------
struct PeakParams {
  double margin = 1.2;
};

// --- VPA: the Kubernetes Vertical Pod Autoscaler recommender for memory -------------------------
// Its defaults (pkg/recommender) except the peak interval, which is 5 min here (24 h upstream)
// because the usage series span less than a day. See docs/predictors.md.
struct VpaParams {
  int64_t peak_interval_s = 300;     // memoryAggregationInterval: one peak sample per interval
  double half_life_s = 24 * 3600.0;  // decaying histogram's half-life
  double target_percentile = 0.9;    // target = this percentile of the peaks ...
  double safety_margin = 0.15;       // ... x (1 + this)
  double first_bucket_bytes = 1e7;   // exponential histogram: first bucket 10 MB,
  double bucket_ratio = 1.05;        // each next bucket 5% wider,
  double max_bytes = 1e12;           // up to 1 TB
  double oom_bump_ratio = 1.2;       // after an OOM at m: a sample of max(1.2 m, m + 100 MiB)
  double oom_min_bump_bytes = 100.0 * 1024 * 1024;
  double min_bytes = 250.0 * 1024 * 1024;  // pod-recommendation-min-memory-mb
};

// --- paladin ---------------------------------------------------------------------------------
struct PaladinPredictorParams {
  // The forecast is a split-conformal quantile: the class model's quantile, at level
  // `quantile`, of a score of the realised peak against a base (log(peak / base), or the scaled
  // difference below), with the finite-sample correction ceil((n + 1) q) / n over the n windows
  // it holds. 1 - quantile is the configured target share
  // of windows under-predicted. 0.98 (2%) is the GPU-memory target; `paladin predict eval` uses
  // 0.99 for host memory (docs/predictors.md).
  double quantile = 0.98;
  // Adaptive conformal inference per workload: after each of its windows resolves, the
  // workload's own miss level moves by aci_rate x (target - missed), so a workload the class
  // model fits badly (or one that drifted) is forecast at a higher quantile until its realised
  // under-rate comes back to the target. 0 turns it off (plain split conformal). 0.005 was
  // chosen out of sample (docs/predictors.md); over a day of hourly windows it barely moves.
  double aci_rate = 0.005;
  // Base of the forecast: a decaying average of the workload's window peaks, the last window
  // weighing 1, the one before history_decay, then history_decay^2, ...
  double history_decay = 0.5;
  // Phase thresholds, as shares of the last window's peak (steady, growth) or of the request.
  double steady_range = 0.05;
  double growth_ratio = 1.2;
  double idle_share = 0.02;
  // Until the class model holds this many resolved windows of a phase, fall back to the pooled
  // phases (all but loading), and before that to `cold_margin` x base (0: the request).
  int min_class_windows = 30;
  double cold_margin = 2.0;
  // Scaled scores: (peak - base) / scale, the scale being the workload's own variability (the
  // larger of its last window's range and the mean change between its window peaks) but at
  // least scale_floor x the request. The class model weighs them against the log ratios per
  // phase; a workload that varies little gets a tight margin, one that jumps a wide one.
  bool scaled_scores = true;
  double scale_floor = 0.03;  // chosen out of sample (docs/predictors.md)
  // Strata (Mondrian conformal): a workload whose scale is at least this share of its last
  // window's peak is "volatile" and calibrated against volatile workloads' windows only; the
  // others against calm ones'. 0 turns strata off (one calibration per phase).
  double volatile_share = 0;
  // A workload with at most this many windows of history is "young" and calibrated against
  // young workloads' windows only: the first hours after start-up jump more than later ones.
  // 0 turns it off.
  int young_windows = 1;
  // Calibrate per phase (else: every phase but loading together, within the stratum).
  bool by_phase = true;
};

// The level at which to read n calibration scores so that a new score exchangeable with them
// exceeds the reading with probability at most 1 - q (split conformal): ceil((n + 1) q) / n.
// Above 1 (too few scores for that guarantee) means "no finite reading covers it".
double ConformalLevel(double q, int64_t n);

// The bases a paladin forecast can start from; the class model picks one per phase.
enum class PaladinBase : uint8_t {
  kRecent,   // a decaying average of the workload's window peaks (history_decay)
  kLast,     // the last window's peak
  kHighest,  // the highest sample so far
};
inline constexpr int kBaseCount = 3;
std::string_view BaseName(PaladinBase b);

// What paladin learns across workloads of one class (same service, same kind of job): for each
// phase and each base, histograms of the scores of resolved windows (log(realised next-window
// peak / base), and the scaled difference). Shared by the class's predictors (through
// shared_ptr) and fed by each of them as their windows resolve.
//
// Windows are also kept apart by stratum (Mondrian conformal): a young workload (a few windows
// old, `PaladinPredictorParams::young_windows`) against young ones; a workload whose own
// variability is a large share of its level (`volatile_share`) against such workloads only, a
// calm one against calm ones, so that the margin a quiet large workload needs is not set by the
// jumps of small volatile ones or of start-ups. Every window also counts in the "any stratum"
// histograms, which are what a predictor without strata reads.
class PaladinClassModel {
 public:
  static constexpr int kBins = 1200;        // log-ratio bins of 0.005 over [-3, +3)
  static constexpr int kScaledBins = 2000;  // scaled-difference bins of 0.02 over [-10, +30)
  static constexpr int kStrata = 3;         // 0: calm, 1: volatile, 2: young
  static constexpr int kAnyStratum = -1;
  using Ratios = std::array<double, kBaseCount>;
  // One resolved window's scores, by base: log(peak / base) and, when given, the scaled
  // difference (peak - base) / scale, the scale being the workload's own variability. Ignored
  // once frozen. Without a stratum: stratum 0.
  void Add(Phase phase, const Ratios& log_ratios);
  void Add(Phase phase, const Ratios& log_ratios, const Ratios& scaled_diffs);
  void Add(Phase phase, int stratum, const Ratios& log_ratios, const Ratios* scaled_diffs);
  // Stops learning: an out-of-sample evaluation trains a model on some workloads, then scores
  // others against it without letting them teach it.
  void Freeze() { frozen_ = true; }
  bool frozen() const { return frozen_; }
  // Windows of `phase` (in `stratum`, or in any); pooled: every phase but loading.
  int64_t count(Phase phase, int stratum = kAnyStratum) const {
    return Slot(phase, false, stratum).count;
  }
  int64_t pooled_count(int stratum = kAnyStratum) const {
    return Slot(Phase::kActive, true, stratum).count;
  }

  struct Choice {
    PaladinBase base = PaladinBase::kRecent;
    // The forecast is base + log_q x scale (a scaled difference), not base x exp(log_q).
    bool scaled = false;
    double log_q = 0;   // the q-quantile of the score: log(peak / base), or the scaled difference
    double log_lo = 0;  // its 16th and 84th percentiles: the spread
    double log_hi = 0;
    double exp_slack = 0;  // the slack the q-quantile forecast is expected to leave
  };
  // For `phase` (or, when `pooled`, every phase but loading, whose base is the request), in
  // `stratum` (or any): the base whose q-quantile forecast of log(peak / base) leaves the least
  // expected slack.
  Choice Choose(Phase phase, double q, bool pooled, int stratum = kAnyStratum) const;
  // The same, also weighing the scaled differences for a workload whose bases (by PaladinBase)
  // and scale are these (when every window of the histogram has them).
  Choice Choose(Phase phase, double q, bool pooled, const Ratios& bases, double scale,
                int stratum = kAnyStratum) const;

 private:
  // A histogram over bins 0..kN-1 whose prefix sums cost O(log kN) (a Fenwick tree): the counts,
  // and the counts weighted by a fixed value per bin. Choose() reads a quantile and the sums
  // below it for a level each workload sets, so neither a scan nor a cache would do.
  template <int kN>
  class PrefixHist {
   public:
    void Add(int bin, double weight) {
      for (int i = bin + 1; i <= kN; i += i & -i) {
        ++count_[static_cast<size_t>(i)];
        weight_[static_cast<size_t>(i)] += weight;
      }
    }
    // Counts and weights in bins [0, end).
    int64_t Count(int end) const {
      int64_t s = 0;
      for (int i = end; i > 0; i -= i & -i) s += count_[static_cast<size_t>(i)];
      return s;
    }
    double Weight(int end) const {
      double s = 0;
      for (int i = end; i > 0; i -= i & -i) s += weight_[static_cast<size_t>(i)];
      return s;
    }
    // The bin holding the want-th smallest count (want >= 1); kN when there are fewer.
    int Find(int64_t want) const {
      int pos = 0;
      for (int step = std::bit_floor(static_cast<unsigned>(kN)); step > 0; step >>= 1) {
        const int next = pos + step;
        if (next <= kN && count_[static_cast<size_t>(next)] < want) {
          pos = next;
          want -= count_[static_cast<size_t>(next)];
        }
      }
      return pos;
    }

   private:
    std::array<int32_t, kN + 1> count_{};
    std::array<double, kN + 1> weight_{};
  };
  // One group of windows: a phase (or every phase but loading) in a stratum (or any). Each log
  // ratio's count is weighted by exp(its bin's centre), each scaled difference's by the centre.
  struct Group {
    std::array<PrefixHist<kBins>, kBaseCount> hist{};
    std::array<PrefixHist<kScaledBins>, kBaseCount> scaled{};
    int64_t count = 0, scaled_count = 0;
  };
  // (kPhaseCount phases + pooled) x (kStrata strata + any).
  static constexpr int kGroups = (kPhaseCount + 1) * (kStrata + 1);
  static size_t Index(Phase phase, bool pooled, int stratum) {
    const int ph = pooled ? kPhaseCount : static_cast<int>(phase);
    const int st = stratum < 0 || stratum >= kStrata ? kStrata : stratum;
    return static_cast<size_t>(ph) * (kStrata + 1) + static_cast<size_t>(st);
  }
  const Group& Slot(Phase phase, bool pooled, int stratum) const {
    return groups_[Index(phase, pooled, stratum)];
  }
  // On the heap: a model is about 2.8 MB (copied whole when a model is copied).
  std::vector<Group> groups_ = std::vector<Group>(kGroups);
  bool frozen_ = false;
  // The best log-ratio choice of group `g`, and each base's scaled choice with its mean
  // shortfall max(0, q - score).
  struct Scores {
    Choice choice;
    std::array<Choice, kBaseCount> scaled{};
    std::array<double, kBaseCount> shortfall{};
  };
  Scores Score(const Group& g, Phase phase, double q, bool pooled, bool with_scaled) const;
};

std::unique_ptr<Predictor> MakeRequestPredictor(const ResourceSpec& spec);
std::unique_ptr<Predictor> MakePeakPredictor(const ResourceSpec& spec, const PeakParams& p);
std::unique_ptr<Predictor> MakeVpaPredictor(const ResourceSpec& spec, const VpaParams& p);
// `model` may be shared by many predictors; it must outlive none of them (shared ownership).
std::unique_ptr<Predictor> MakePaladinPredictor(const ResourceSpec& spec,
                                                const PaladinPredictorParams& p,
                                                std::shared_ptr<PaladinClassModel> model);

// Builds predictors by name with default parameters; one factory per evaluation run so that
// paladin's predictors share their class model.
class PredictorFactory {
 public:
  static const std::vector<std::string>& Names();  // request, peak, vpa, paladin
  // An unknown name is an error listing the valid ones.
  static StatusOr<PredictorFactory> ForName(std::string_view name);

  PeakParams peak;
  VpaParams vpa;
  PaladinPredictorParams paladin;

  const std::string& name() const { return name_; }
  std::unique_ptr<Predictor> Make(const ResourceSpec& spec);

 private:
  std::string name_;
  std::shared_ptr<PaladinClassModel> model_;
};

}  // namespace paladin::core
