#include "paladin/core/predict.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace paladin::core {

std::string_view PhaseName(Phase p) {
  switch (p) {
    case Phase::kLoading:
      return "loading";
    case Phase::kIdle:
      return "idle";
    case Phase::kGrowth:
      return "growth";
    case Phase::kSteady:
      return "steady";
    case Phase::kActive:
      return "active";
  }
  return "?";
}

namespace {

constexpr double kLogRange = 3.0;

// No forecast goes above the request (or the ceiling, when one is given): nothing above it can
// be allocated (VPA's maxAllowed).
double Ceil(const ResourceSpec& spec, double v) {
  const double most = spec.ceiling > 0 ? std::max(spec.ceiling, spec.request) : spec.request;
  return most > 0 ? std::min(v, most) : v;
}

class RequestPredictor final : public Predictor {
 public:
  explicit RequestPredictor(const ResourceSpec& spec) : spec_(spec) {}
  std::string_view name() const override { return "request"; }
  void Observe(int64_t, double) override {}
  Forecast Predict(int64_t) override { return {spec_.request, 0, Phase::kSteady}; }

 private:
  ResourceSpec spec_;
};

class PeakPredictor final : public Predictor {
 public:
  PeakPredictor(const ResourceSpec& spec, const PeakParams& p) : spec_(spec), p_(p) {}
  std::string_view name() const override { return "peak"; }
  void Observe(int64_t, double v) override {
    seen_ = true;
    max_ = std::max(max_, v);
  }
  void ObserveOom(int64_t, double limit) override {
    seen_ = true;
    max_ = std::max(max_, limit);
  }
  Forecast Predict(int64_t) override {
    if (!seen_) return {spec_.request, 0, Phase::kLoading};
    return {Ceil(spec_, max_ * p_.margin), 0, Phase::kSteady};
  }

 private:
  ResourceSpec spec_;
  PeakParams p_;
  bool seen_ = false;
  double max_ = 0;
};

// VPA's decaying exponential histogram of per-interval memory peaks.
class VpaPredictor final : public Predictor {
 public:
  VpaPredictor(const ResourceSpec& spec, const VpaParams& p) : spec_(spec), p_(p) {
    // Bucket i covers [start(i), start(i+1)); start(i) = first * (ratio^i - 1) / (ratio - 1).
    double start = 0;
    for (int i = 0; start < p_.max_bytes; ++i) {
      starts_.push_back(start);
      start =
          p_.first_bucket_bytes * (std::pow(p_.bucket_ratio, i + 1) - 1) / (p_.bucket_ratio - 1);
    }
    starts_.push_back(start);
    weights_.assign(starts_.size() - 1, 0.0);
  }
  std::string_view name() const override { return "vpa"; }

  void Observe(int64_t t, double v) override { AddSample(t, v * spec_.unit_bytes); }
  void ObserveOom(int64_t t, double limit) override {
    const double m = limit * spec_.unit_bytes;
    AddSample(t, std::max(m * p_.oom_bump_ratio, m + p_.oom_min_bump_bytes));
  }

  Forecast Predict(int64_t) override {
    if (total_ <= 0) return {spec_.request, 0, Phase::kLoading};
    const double target =
        std::max(Percentile(p_.target_percentile) * (1 + p_.safety_margin), p_.min_bytes);
    return {Ceil(spec_, target / spec_.unit_bytes), 0, Phase::kSteady};
  }

 private:
  size_t Bucket(double bytes) const {
    auto it = std::upper_bound(starts_.begin(), starts_.end(), bytes);
    const auto i = static_cast<size_t>(std::max<ptrdiff_t>(0, it - starts_.begin() - 1));
    return std::min(i, weights_.size() - 1);
  }
  double Weight(int64_t t) {
    if (!have_ref_) {
      ref_ = t;
      have_ref_ = true;
    }
    return std::exp2(static_cast<double>(t - ref_) / p_.half_life_s);
  }
  void AddSample(int64_t t, double bytes) {
    if (!have_ref_) Weight(t);
    const int64_t interval = (t - ref_) / p_.peak_interval_s;
    if (interval != interval_ || peak_weight_ == 0) {
      interval_ = interval;
      peak_ = -1;
      peak_weight_ = 0;
    }
    if (bytes <= peak_) return;
    if (peak_weight_ > 0) {  // the interval's peak is replaced by a higher one
      weights_[Bucket(peak_)] -= peak_weight_;
      total_ -= peak_weight_;
    }
    peak_ = bytes;
    peak_weight_ = Weight(t);
    weights_[Bucket(bytes)] += peak_weight_;
    total_ += peak_weight_;
  }
  // The end of the first bucket at which the cumulative weight reaches q of the total.
  double Percentile(double q) const {
    const double want = q * total_;
    double acc = 0;
    for (size_t i = 0; i < weights_.size(); ++i) {
      acc += weights_[i];
      if (acc >= want && weights_[i] > 0) return starts_[i + 1];
    }
    return starts_.back();
  }

  ResourceSpec spec_;
  VpaParams p_;
  std::vector<double> starts_;
  std::vector<double> weights_;
  double total_ = 0;
  bool have_ref_ = false;
  int64_t ref_ = 0;
  int64_t interval_ = -1;
  double peak_ = -1;
  double peak_weight_ = 0;
};

// Sliding maximum and minimum over the samples of the last window. Queries take the window's
// start, so a forecast can look at the window ending at any time without changing the state.
class WindowExtremes {
 public:
  static constexpr double kNone = -std::numeric_limits<double>::infinity();
  void Add(int64_t t, double v) {
    all_.push_back({t, v});
    while (!maxq_.empty() && maxq_.back().v <= v) maxq_.pop_back();
    maxq_.push_back({t, v});
    while (!minq_.empty() && minq_.back().v >= v) minq_.pop_back();
    minq_.push_back({t, v});
  }
  // Drops samples older than `from`; returns the largest value dropped (or kNone).
  double ExpireBefore(int64_t from) {
    double dropped = kNone;
    while (!all_.empty() && all_.front().t < from) {
      dropped = std::max(dropped, all_.front().v);
      all_.pop_front();
    }
    while (!maxq_.empty() && maxq_.front().t < from) maxq_.pop_front();
    while (!minq_.empty() && minq_.front().t < from) minq_.pop_front();
    return dropped;
  }
  // Over the samples at or after `from` (kNone when there are none).
  double MaxFrom(int64_t from) const {
    for (const auto& p : maxq_) {
      if (p.t >= from) return p.v;
    }
    return kNone;
  }
  double MinFrom(int64_t from) const {
    for (const auto& p : minq_) {
      if (p.t >= from) return p.v;
    }
    return kNone;
  }
  // The largest sample still held from before `from`.
  double MaxBefore(int64_t from) const {
    double m = kNone;
    for (const auto& p : all_) {
      if (p.t >= from) break;
      m = std::max(m, p.v);
    }
    return m;
  }

 private:
  struct Point {
    int64_t t;
    double v;
  };
  std::deque<Point> all_, maxq_, minq_;
};

class PaladinPredictor final : public Predictor {
 public:
  PaladinPredictor(const ResourceSpec& spec, const PaladinPredictorParams& p,
                   std::shared_ptr<PaladinClassModel> model)
      : spec_(spec), p_(p), model_(std::move(model)) {}
  std::string_view name() const override { return "paladin"; }

  void Observe(int64_t t, double v) override {
    if (!started_) {
      started_ = true;
      first_t_ = t;
      next_origin_ = t;
    }
    // Resolve the windows that ended before this sample: each is a lesson for the class and,
    // under adaptive calibration, for this workload's own miss level.
    while (t >= next_origin_) {
      if (pending_) Learn();
      pending_ = false;  // resolved: Value() must not count it again
      pending_features_ = Features(next_origin_);
      pending_forecast_ = Value(pending_features_, next_origin_).value;
      pending_ = true;
      pending_peak_ = 0;
      next_origin_ += spec_.window_s;
    }
    // The next snapshot (at next_origin_ > t) looks no further back than t - window.
    Advance(t);
    pending_peak_ = std::max(pending_peak_, v);
    window_.Add(t, v);
    max_ = std::max(max_, v);
  }

  // After an out-of-memory kill at `limit`, the next window's forecast is at least 1.2x it.
  void ObserveOom(int64_t t, double limit) override {
    oom_floor_ = t < oom_floor_until_ ? std::max(oom_floor_, limit * 1.2) : limit * 1.2;
    oom_floor_until_ = t + spec_.window_s;
  }

  Forecast Predict(int64_t now) override { return Value(Features(now), now); }

 private:
  struct Snapshot {
    Phase phase = Phase::kLoading;
    std::array<double, kBaseCount> base{};  // by PaladinBase
    double scale = 0;                       // the workload's own variability (Scale)
    // 0: calm, 1: volatile (scale >= volatile_share x its last window's peak), 2: young (at
    // most young_windows windows old)
    int stratum = 0;
  };

  // Forgets samples older than one window before `now` (folding them into the maximum before
  // the window), and folds the window peaks that ended by then into the decaying average.
  void Advance(int64_t now) {
    const int64_t from = now - spec_.window_s;
    max_before_window_ = std::max(max_before_window_, window_.ExpireBefore(from));
    while (!completed_.empty() && completed_.front().first <= from) {
      ewma_sum_ = completed_.front().second + p_.history_decay * ewma_sum_;
      ewma_weight_ = 1 + p_.history_decay * ewma_weight_;
      completed_.pop_front();
    }
  }

  // The phase and bases for the window [now, now + window), from samples before `now` only.
  // Reads the state as of `now` without changing it.
  Snapshot Features(int64_t now) const {
    Snapshot s;
    if (!started_ || now - first_t_ < spec_.window_s) {
      // Too young to have a window of its own: forecast from the request, as the class learned.
      s.phase = Phase::kLoading;
      s.base.fill(spec_.request > 0 ? spec_.request : max_);
      return s;
    }
    const int64_t from = now - spec_.window_s;
    const double last = std::max(0.0, window_.MaxFrom(from));
    const double last_min = std::max(0.0, window_.MinFrom(from));
    const double max_before = std::max(max_before_window_, window_.MaxBefore(from));
    double sum = ewma_sum_, weight = ewma_weight_;
    for (const auto& [end, peak] : completed_) {
      if (end > from) break;
      sum = peak + p_.history_decay * sum;
      weight = 1 + p_.history_decay * weight;
    }
    const double avg = (last + p_.history_decay * sum) / (1 + p_.history_decay * weight);
    const double least = p_.idle_share * spec_.request;
    s.base = {std::max(avg, least), std::max(last, least), std::max(max_, least)};
    s.scale = Scale(now, last - last_min);
    const auto last_base = static_cast<size_t>(PaladinBase::kLast);
    s.stratum = p_.volatile_share > 0 && s.scale >= p_.volatile_share * s.base[last_base] ? 1 : 0;
    if (p_.young_windows > 0 && (now - first_t_) / spec_.window_s <= p_.young_windows) {
      s.stratum = 2;
    }
    if (last <= least || last <= 0) {
      s.phase = Phase::kIdle;
    } else if (max_before > 0 && last > p_.growth_ratio * max_before) {
      s.phase = Phase::kGrowth;
    } else if (last - last_min <= p_.steady_range * last) {
      s.phase = Phase::kSteady;
    } else {
      s.phase = Phase::kActive;
    }
    return s;
  }

  // The forecast for the window starting at `now` from its snapshot `f`: the class model's
  // conformal quantile at this workload's current level, over the base it finds tightest.
  Forecast Value(const Snapshot& f, int64_t now) const {
    Forecast out;
    out.phase = f.phase;
    if (f.base[0] <= 0) {
      out.value = spec_.request;
      return out;
    }
    const double floor = now < oom_floor_until_ ? oom_floor_ : 0;
    double q_lr = std::log(p_.cold_margin), lo = 0, hi = 0, base = f.base[0];
    if (p_.cold_margin <= 0) q_lr = kLogRange;
    // The calibration group: the workload's phase, else every phase but loading; in its own
    // stratum first when strata are on; the first with enough windows.
    const int stratum =
        p_.volatile_share > 0 || p_.young_windows > 0 ? f.stratum : PaladinClassModel::kAnyStratum;
    bool pooled = false;
    int in = PaladinClassModel::kAnyStratum;
    int64_t n = 0;
    for (const int st : {stratum, static_cast<int>(PaladinClassModel::kAnyStratum)}) {
      if (n >= p_.min_class_windows) break;
      if (p_.by_phase && (n = model_->count(f.phase, st)) >= p_.min_class_windows) {
        pooled = false, in = st;
      } else if ((n = model_->pooled_count(st)) >= p_.min_class_windows) {
        pooled = true, in = st;
      }
    }
    if (n >= p_.min_class_windows) {
      const double miss_level = MissLevel(now);
      // A miss level at or below zero asks for certainty: only the request gives it.
      if (miss_level <= 0 && spec_.request > 0) {
        out.value = spec_.request;
        return out;
      }
      const double level = ConformalLevel(std::clamp(1 - miss_level, 0.0, 1.0), n);
      const auto c = p_.scaled_scores ? model_->Choose(f.phase, level, pooled, f.base, f.scale, in)
                                      : model_->Choose(f.phase, level, pooled, in);
      base = f.base[static_cast<size_t>(c.base)];
      if (c.scaled) {
        out.value = Ceil(spec_, std::max(base + c.log_q * f.scale, floor));
        out.sigma = f.scale * (c.log_hi - c.log_lo) / 2;
        return out;
      }
      q_lr = c.log_q, lo = c.log_lo, hi = c.log_hi;
    }
    out.value = Ceil(spec_, std::max(base * std::exp(q_lr), floor));
    out.sigma = base * (std::exp(hi) - std::exp(lo)) / 2;
    return out;
  }

  // Adaptive conformal inference: the level moves against this workload's own misses, by
  // aci_rate x (target - missed); over T windows its under-rate is at most the target plus
  // (1 + aci_rate) / (aci_rate x T) whatever the series does (Gibbs and Candes, 2021).
  double AciStep() const {
    if (p_.aci_rate <= 0 || pending_peak_ <= 0) return 0;
    const double missed = pending_peak_ > pending_forecast_ ? 1.0 : 0.0;
    return p_.aci_rate * ((1 - p_.quantile) - missed);
  }
  // The miss level for a forecast at `now`: a window that ended by then counts even before the
  // next sample resolves it, so a forecast asked at a window's origin already knows its outcome.
  double MissLevel(int64_t now) const {
    return pending_ && now >= next_origin_ ? std::min(1.0, miss_level_ + AciStep()) : miss_level_;
  }

  // The change between the pending window's peak and the one before, once the pending window
  // has ended by `now` (0 before: it is not known yet).
  double PendingChange(int64_t now) const {
    if (!pending_ || now < next_origin_ || pending_peak_ <= 0 || prev_peak_ < 0) return -1;
    return std::abs(pending_peak_ - prev_peak_);
  }
  // The workload's own variability as of `now`, from its last window and its resolved peaks.
  double Scale(int64_t now, double last_range) const {
    double sum = change_sum_;
    int64_t n = change_count_;
    if (const double c = PendingChange(now); c >= 0) sum += c, ++n;
    const double mean_change = n > 0 ? sum / static_cast<double>(n) : 0;
    const double floor = p_.scale_floor * (spec_.request > 0 ? spec_.request : max_);
    return std::max({floor, last_range, mean_change});
  }

  void Learn() {
    // Capped at 1: a workload that never misses even at the lowest score would otherwise wind
    // the level up without bound and take as long to come back after a change. The cap only
    // lets it over-cover; its under-rate stays within ACI's bound above the target.
    miss_level_ = std::min(1.0, miss_level_ + AciStep());
    if (const double c = PendingChange(next_origin_); c >= 0) change_sum_ += c, ++change_count_;
    if (pending_peak_ > 0) prev_peak_ = pending_peak_;
    completed_.emplace_back(next_origin_, pending_peak_);
    const auto& f = pending_features_;
    if (f.base[0] > 0 && f.base[1] > 0 && f.base[2] > 0 && pending_peak_ > 0) {
      PaladinClassModel::Ratios r, d;
      for (size_t b = 0; b < kBaseCount; ++b) {
        r[b] = std::log(pending_peak_ / f.base[b]);
        d[b] = f.scale > 0 ? (pending_peak_ - f.base[b]) / f.scale : 0;
      }
      model_->Add(f.phase, f.stratum, r, f.scale > 0 ? &d : nullptr);
    }
  }

  ResourceSpec spec_;
  PaladinPredictorParams p_;
  std::shared_ptr<PaladinClassModel> model_;
  bool started_ = false;
  int64_t first_t_ = 0;
  int64_t next_origin_ = 0;
  WindowExtremes window_;
  double max_ = 0;
  double max_before_window_ = 0;
  // Peaks of the workload's own past windows (end time, peak) not yet folded into the average.
  std::deque<std::pair<int64_t, double>> completed_;
  double ewma_sum_ = 0;
  double ewma_weight_ = 0;
  double oom_floor_ = 0;
  int64_t oom_floor_until_ = 0;
  bool pending_ = false;
  Snapshot pending_features_;
  double pending_forecast_ = 0;
  double pending_peak_ = 0;
  // The mean absolute change between consecutive resolved window peaks: part of the scale.
  double prev_peak_ = -1;
  double change_sum_ = 0;
  int64_t change_count_ = 0;
  // This workload's share of windows to under-predict (1 - level): the target, moved by ACI.
  double miss_level_ = 1 - p_.quantile;
};

}  // namespace

std::string_view BaseName(PaladinBase b) {
  switch (b) {
    case PaladinBase::kRecent:
      return "recent";
    case PaladinBase::kLast:
      return "last";
    case PaladinBase::kHighest:
      return "highest";
  }
  return "?";
}

namespace {
size_t BinOf(double log_ratio) {
  const double x = std::clamp(log_ratio, -kLogRange, kLogRange - 1e-9);
  return static_cast<size_t>((x + kLogRange) / (2 * kLogRange) * PaladinClassModel::kBins);
}
double BinUpper(int i) { return -kLogRange + 2 * kLogRange * (i + 1) / PaladinClassModel::kBins; }
double BinCentre(int i) {
  return -kLogRange + 2 * kLogRange * (i + 0.5) / PaladinClassModel::kBins;
}
// exp(BinCentre(i)), computed once: the expected-slack scan reads it for every bin.
const std::array<double, PaladinClassModel::kBins>& ExpBinCentres() {
  static const auto table = [] {
    std::array<double, PaladinClassModel::kBins> t{};
    for (int i = 0; i < PaladinClassModel::kBins; ++i) {
      t[static_cast<size_t>(i)] = std::exp(BinCentre(i));
    }
    return t;
  }();
  return table;
}

// Scaled differences: most lie within a few scales of zero; a jump of many times the workload's
// own variability is clamped at the top (its forecast is then the request in practice).
constexpr double kScaledLow = -10.0, kScaledHigh = 30.0;
constexpr double kScaledWidth = (kScaledHigh - kScaledLow) / PaladinClassModel::kScaledBins;
size_t ScaledBinOf(double x) {
  const double c = std::clamp(x, kScaledLow, kScaledHigh - 1e-9);
  return std::min<size_t>(static_cast<size_t>((c - kScaledLow) / kScaledWidth),
                          PaladinClassModel::kScaledBins - 1);
}
double ScaledBinUpper(int i) { return kScaledLow + kScaledWidth * (i + 1); }
double ScaledBinCentre(int i) { return kScaledLow + kScaledWidth * (i + 0.5); }
}  // namespace

double ConformalLevel(double q, int64_t n) {
  if (n <= 0) return 2;
  const double rank = std::ceil((static_cast<double>(n) + 1) * q - 1e-9);
  return rank / static_cast<double>(n);
}

void PaladinClassModel::Add(Phase phase, const Ratios& log_ratios) {
  Add(phase, 0, log_ratios, nullptr);
}

void PaladinClassModel::Add(Phase phase, const Ratios& log_ratios, const Ratios& scaled_diffs) {
  Add(phase, 0, log_ratios, &scaled_diffs);
}

void PaladinClassModel::Add(Phase phase, int stratum, const Ratios& log_ratios,
                            const Ratios* scaled_diffs) {
  if (frozen_) return;
  stratum = std::clamp(stratum, 0, kStrata - 1);
  // The window counts in its phase and, unless loading, in the pooled phases; each in its own
  // stratum and in "any".
  std::array<size_t, 4> into{};
  size_t n = 0;
  into[n++] = Index(phase, false, stratum);
  into[n++] = Index(phase, false, kAnyStratum);
  if (phase != Phase::kLoading) {
    into[n++] = Index(phase, true, stratum);
    into[n++] = Index(phase, true, kAnyStratum);
  }
  std::array<size_t, kBaseCount> bins{}, scaled_bins{};
  for (size_t b = 0; b < kBaseCount; ++b) {
    bins[b] = BinOf(log_ratios[b]);
    if (scaled_diffs != nullptr) scaled_bins[b] = ScaledBinOf((*scaled_diffs)[b]);
  }
  for (size_t i = 0; i < n; ++i) {
    Group& g = groups_[into[i]];
    for (size_t b = 0; b < kBaseCount; ++b) {
      g.hist[b].Add(static_cast<int>(bins[b]), ExpBinCentres()[bins[b]]);
      if (scaled_diffs != nullptr) {
        g.scaled[b].Add(static_cast<int>(scaled_bins[b]),
                        ScaledBinCentre(static_cast<int>(scaled_bins[b])));
      }
    }
    ++g.count;
    if (scaled_diffs != nullptr) ++g.scaled_count;
  }
}

namespace {
// The bins holding the ceil(q * n)-th smallest values, for each level of `qs`: kN where the
// counts fall short (a level above 1), -1 for an empty histogram. The tolerance keeps a level of
// k / n from reading the (k + 1)-th value through rounding.
template <typename Hist>
std::array<int, 3> QuantileBins(const Hist& h, int64_t n, const std::array<double, 3>& qs) {
  std::array<int, 3> out{-1, -1, -1};
  if (n == 0) return out;
  for (size_t k = 0; k < qs.size(); ++k) {
    const auto want = std::max<int64_t>(
        1, static_cast<int64_t>(std::ceil(qs[k] * static_cast<double>(n) - 1e-9)));
    out[k] = h.Find(want);
  }
  return out;
}
}  // namespace

PaladinClassModel::Scores PaladinClassModel::Score(const Group& g, Phase phase, double q,
                                                   bool pooled, bool with_scaled) const {
  Scores out;
  const int64_t n = g.count;
  bool have = false;
  // A quantile's value is its bin's upper edge (the range's top past the last bin, 0 when there
  // is nothing); the windows below the forecast are those of the bins up to its own.
  const auto edge = [](int bin, int bins, auto upper, double top) {
    return bin < 0 ? 0.0 : bin >= bins ? top : upper(bin);
  };
  for (size_t b = 0; b < kBaseCount; ++b) {
    // Loading has one base only: the request.
    if (phase == Phase::kLoading && !pooled && b != 0) break;
    const PrefixHist<kBins>& h = g.hist[b];
    Choice ch;
    ch.base = static_cast<PaladinBase>(b);
    const std::array<int, 3> at = QuantileBins(h, n, {q, 0.16, 0.84});
    ch.log_q = edge(at[0], kBins, BinUpper, kLogRange);
    ch.log_lo = edge(at[1], kBins, BinUpper, kLogRange);
    ch.log_hi = edge(at[2], kBins, BinUpper, kLogRange);
    // Only windows below the forecast leave slack: sum of k (1 - exp(centre) / m) over them.
    const int below = std::min(at[0] + 1, kBins);
    const double m = std::exp(ch.log_q);
    const double slack = static_cast<double>(h.Count(below)) - h.Weight(below) / m;
    ch.exp_slack = n > 0 ? slack / static_cast<double>(n) : 0;
    if (!have || ch.exp_slack < out.choice.exp_slack) out.choice = ch, have = true;
  }
  const int64_t ns = g.scaled_count;
  for (size_t b = 0; b < kBaseCount && with_scaled && ns > 0; ++b) {
    const PrefixHist<kScaledBins>& h = g.scaled[b];
    Choice& ch = out.scaled[b];
    ch.base = static_cast<PaladinBase>(b);
    ch.scaled = true;
    const std::array<int, 3> at = QuantileBins(h, ns, {q, 0.16, 0.84});
    ch.log_q = edge(at[0], kScaledBins, ScaledBinUpper, kScaledHigh);
    ch.log_lo = edge(at[1], kScaledBins, ScaledBinUpper, kScaledHigh);
    ch.log_hi = edge(at[2], kScaledBins, ScaledBinUpper, kScaledHigh);
    // Sum of k (q - centre) over the bins below the forecast.
    const int below = std::min(at[0] + 1, kScaledBins);
    const double shortfall = ch.log_q * static_cast<double>(h.Count(below)) - h.Weight(below);
    out.shortfall[b] = shortfall / static_cast<double>(ns);
  }
  return out;
}

PaladinClassModel::Choice PaladinClassModel::Choose(Phase phase, double q, bool pooled,
                                                    int stratum) const {
  return Score(Slot(phase, pooled, stratum), phase, q, pooled, false).choice;
}

PaladinClassModel::Choice PaladinClassModel::Choose(Phase phase, double q, bool pooled,
                                                    const Ratios& bases, double scale,
                                                    int stratum) const {
  const Group& g = Slot(phase, pooled, stratum);
  const bool complete = g.scaled_count == g.count && g.count > 0;
  const bool with_scaled = complete && scale > 0 && !(phase == Phase::kLoading && !pooled);
  const Scores c = Score(g, phase, q, pooled, with_scaled);
  Choice best = c.choice;
  if (!with_scaled) return best;
  for (size_t b = 0; b < kBaseCount; ++b) {
    // A forecast base + x scale over a peak base + y scale leaves (x - y) scale / (base + x
    // scale) when y < x: the mean shortfall, over the forecast.
    const double forecast = bases[b] + c.scaled[b].log_q * scale;
    if (forecast <= 0) continue;
    Choice ch = c.scaled[b];
    ch.exp_slack = c.shortfall[b] * scale / forecast;
    if (ch.exp_slack < best.exp_slack) best = ch;
  }
  return best;
}

std::unique_ptr<Predictor> MakeRequestPredictor(const ResourceSpec& spec) {
  return std::make_unique<RequestPredictor>(spec);
}
std::unique_ptr<Predictor> MakePeakPredictor(const ResourceSpec& spec, const PeakParams& p) {
  return std::make_unique<PeakPredictor>(spec, p);
}
std::unique_ptr<Predictor> MakeVpaPredictor(const ResourceSpec& spec, const VpaParams& p) {
  return std::make_unique<VpaPredictor>(spec, p);
}
std::unique_ptr<Predictor> MakePaladinPredictor(const ResourceSpec& spec,
                                                const PaladinPredictorParams& p,
                                                std::shared_ptr<PaladinClassModel> model) {
  return std::make_unique<PaladinPredictor>(spec, p, std::move(model));
}

const std::vector<std::string>& PredictorFactory::Names() {
  static const std::vector<std::string> kNames = {"request", "peak", "vpa", "paladin"};
  return kNames;
}

StatusOr<PredictorFactory> PredictorFactory::ForName(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& n : Names()) {
    if (n == lower) {
      PredictorFactory f;
      f.name_ = n;
      f.model_ = std::make_shared<PaladinClassModel>();
      return f;
    }
  }
  std::string valid;
  for (const auto& n : Names()) valid += (valid.empty() ? "" : ", ") + n;
  return InvalidArgument("unknown predictor '" + std::string(name) + "' (valid: " + valid + ")");
}

std::unique_ptr<Predictor> PredictorFactory::Make(const ResourceSpec& spec) {
  if (name_ == "request") return MakeRequestPredictor(spec);
  if (name_ == "peak") return MakePeakPredictor(spec, peak);
  if (name_ == "vpa") return MakeVpaPredictor(spec, vpa);
  return MakePaladinPredictor(spec, paladin, model_);
}

}  // namespace paladin::core
