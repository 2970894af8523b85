#include "paladin/core/predict_eval.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <string>

#include "paladin/core/rng.h"

namespace paladin::core {
namespace {

// An open window of one series: its forecasts (one per maker) and what has been seen in it.
struct OpenWindow {
  int64_t origin = 0;
  std::vector<double> forecast;
  std::vector<Phase> phase;
  std::vector<bool> oom_told;
  double peak = 0;
  bool any = false;  // a sample fell in it
};

struct SeriesState {
  std::vector<std::unique_ptr<Predictor>> predictors;
  size_t next_sample = 0;
  int64_t next_origin = 0;
  bool has_window = false;
  OpenWindow window;
};

}  // namespace

std::vector<std::vector<WindowScore>> EvaluateRolling(std::span<const UsageSeries> series,
                                                      const ResourceSpec& spec,
                                                      std::span<const PredictorMaker> makers) {
  std::vector<std::vector<WindowScore>> out(makers.size());
  std::vector<SeriesState> states(series.size());
  for (size_t s = 0; s < series.size(); ++s) {
    for (const auto& make : makers) states[s].predictors.push_back(make(spec));
    if (!series[s].samples.empty()) {
      states[s].next_origin = series[s].samples.front().t_s + spec.window_s;
    }
  }
  const auto close_window = [&](size_t s) {
    SeriesState& st = states[s];
    if (!st.has_window) return;
    st.has_window = false;
    if (!st.window.any) return;
    for (size_t m = 0; m < makers.size(); ++m) {
      out[m].push_back({static_cast<int32_t>(s), st.window.origin, st.window.forecast[m],
                        st.window.peak, st.window.phase[m]});
    }
  };
  const auto open_window = [&](size_t s) {
    SeriesState& st = states[s];
    st.has_window = true;
    st.window.origin = st.next_origin;
    st.window.peak = 0;
    st.window.any = false;
    st.window.forecast.resize(makers.size());
    st.window.phase.resize(makers.size());
    st.window.oom_told.assign(makers.size(), false);
    for (size_t m = 0; m < makers.size(); ++m) {
      const Forecast f = st.predictors[m]->Predict(st.next_origin);
      st.window.forecast[m] = f.value;
      st.window.phase[m] = f.phase;
    }
    st.next_origin += spec.window_s;
  };

  // Global replay: the earliest event first; at equal times, forecasts before samples (a window
  // starting at t sees samples before t only), and series in index order.
  using Event = std::pair<int64_t, size_t>;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> samples, origins;
  for (size_t s = 0; s < series.size(); ++s) {
    if (series[s].samples.empty()) continue;
    samples.push({series[s].samples.front().t_s, s});
    origins.push({states[s].next_origin, s});
  }
  while (!samples.empty()) {
    const auto [t, s] = samples.top();
    if (!origins.empty() && origins.top().first <= t) {
      const size_t o = origins.top().second;
      origins.pop();
      close_window(o);
      if (states[o].next_sample < series[o].samples.size()) {
        open_window(o);
        origins.push({states[o].next_origin, o});
      }
      continue;
    }
    samples.pop();
    SeriesState& st = states[s];
    const UsageSample& x = series[s].samples[st.next_sample++];
    for (size_t m = 0; m < makers.size(); ++m) st.predictors[m]->Observe(x.t_s, x.value);
    if (st.has_window) {
      st.window.any = true;
      st.window.peak = std::max(st.window.peak, x.value);
      for (size_t m = 0; m < makers.size(); ++m) {
        if (!st.window.oom_told[m] && x.value > st.window.forecast[m]) {
          st.window.oom_told[m] = true;
          st.predictors[m]->ObserveOom(x.t_s, st.window.forecast[m]);
        }
      }
    }
    if (st.next_sample < series[s].samples.size()) {
      samples.push({series[s].samples[st.next_sample].t_s, s});
    }
  }
  for (size_t s = 0; s < series.size(); ++s) close_window(s);
  return out;
}

PredictorMetrics ScoreWindows(std::span<const WindowScore> windows) {
  PredictorMetrics m;
  std::vector<double> rel;
  double slack = 0;
  int64_t under = 0;
  for (const auto& w : windows) {
    if (w.peak <= 0) continue;
    rel.push_back(std::abs(w.forecast - w.peak) / w.peak);
    if (w.forecast < w.peak) ++under;
    if (w.forecast > 0) slack += std::max(0.0, w.forecast - w.peak) / w.forecast;
  }
  m.windows = static_cast<int64_t>(rel.size());
  if (rel.empty()) return m;
  std::sort(rel.begin(), rel.end());
  // Nearest-rank percentiles.
  const auto rank = [&](double q) {
    const auto k = static_cast<size_t>(std::ceil(q * static_cast<double>(rel.size())));
    return rel[std::clamp<size_t>(k, 1, rel.size()) - 1];
  };
  m.median_rel_err = rank(0.5);
  m.p95_rel_err = rank(0.95);
  m.under_rate = static_cast<double>(under) / static_cast<double>(m.windows);
  m.mean_slack = slack / static_cast<double>(m.windows);
  return m;
}

double FrontierSlack(std::span<const TradeoffPoint> points, const std::string& predictor,
                     double max_under) {
  double best = std::numeric_limits<double>::quiet_NaN();
  for (const auto& p : points) {
    if (p.predictor != predictor || p.metrics.under_rate > max_under + 1e-12) continue;
    if (std::isnan(best) || p.metrics.mean_slack < best) best = p.metrics.mean_slack;
  }
  return best;
}

namespace {

// One setting of a predictor's knob in the trade-off sweep.
struct Setting {
  std::string knob;
  double value = 0;
  std::function<void(PredictorFactory&)> tune;
};

std::vector<Setting> SweepOf(const std::string& name) {
  std::vector<Setting> out;
  if (name == "peak") {
    for (int i = 0; i <= 60; ++i) {
      const double m = 1.0 + 0.02 * i;
      out.push_back({"margin", m, [m](PredictorFactory& f) { f.peak.margin = m; }});
    }
  } else if (name == "vpa") {
    for (double pct : {0.5, 0.75, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 1.0}) {
      for (double margin : {0.0, 0.15, 0.3, 0.5, 0.75, 1.0}) {
        out.push_back({"target_percentile@safety_margin=" + std::to_string(margin).substr(0, 4),
                       pct, [pct, margin](PredictorFactory& f) {
                         f.vpa.target_percentile = pct;
                         f.vpa.safety_margin = margin;
                       }});
      }
    }
  } else if (name == "paladin") {
    for (double q : {0.5, 0.7, 0.8, 0.85, 0.9, 0.925, 0.95, 0.96, 0.97, 0.975, 0.98, 0.985, 0.99,
                     0.9925, 0.995, 0.9975, 0.999}) {
      out.push_back({"quantile", q, [q](PredictorFactory& f) { f.paladin.quantile = q; }});
    }
  }
  return out;
}

}  // namespace

StatusOr<PredictorStudy> StudyPredictors(std::span<const UsageSeries> series,
                                         const ResourceSpec& spec,
                                         const std::vector<std::string>& names, bool sweep,
                                         const PaladinPredictorParams& paladin) {
  struct Run {
    std::string predictor, knob;
    double value = 0;
    bool is_default = false;
  };
  std::vector<Run> runs;
  std::vector<PredictorMaker> makers;
  const auto add = [&](const std::string& name, const Setting& setting, bool is_default) -> Status {
    auto f = PredictorFactory::ForName(name);
    if (!f.ok()) return f.status();
    auto factory = std::make_shared<PredictorFactory>(std::move(*f));
    factory->paladin = paladin;
    if (setting.tune) setting.tune(*factory);
    makers.push_back([factory](const ResourceSpec& s) { return factory->Make(s); });
    runs.push_back({name, setting.knob, setting.value, is_default});
    return Status::Ok();
  };
  for (const auto& n : names) {
    auto canonical = PredictorFactory::ForName(n);
    if (!canonical.ok()) return canonical.status();
    PALADIN_RETURN_IF_ERROR(add(canonical->name(), Setting{"default", 0, {}}, true));
  }
  if (sweep) {
    for (const auto& n : names) {
      const std::string name = PredictorFactory::ForName(n)->name();
      for (const Setting& setting : SweepOf(name)) {
        PALADIN_RETURN_IF_ERROR(add(name, setting, false));
      }
    }
  }
  const auto windows = EvaluateRolling(series, spec, makers);
  PredictorStudy study;
  for (size_t i = 0; i < runs.size(); ++i) {
    const PredictorMetrics m = ScoreWindows(windows[i]);
    if (runs[i].is_default) {
      study.defaults.emplace_back(runs[i].predictor, m);
    } else {
      study.tradeoff.push_back({runs[i].predictor, runs[i].knob, runs[i].value, m});
    }
  }
  return study;
}

// --- out of sample ---

int FoldOf(std::string_view id, int folds, uint64_t seed) {
  if (folds <= 1) return 0;
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a, then a splitmix64 finish with the seed
  for (char c : id) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  h ^= seed * 0x9e3779b97f4a7c15ULL;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return static_cast<int>(h % static_cast<uint64_t>(folds));
}

std::shared_ptr<PaladinClassModel> TrainClassModel(std::span<const UsageSeries> training,
                                                   const ResourceSpec& spec,
                                                   const PaladinPredictorParams& params) {
  auto model = std::make_shared<PaladinClassModel>();
  const std::vector<PredictorMaker> trainer = {
      [&params, model](const ResourceSpec& s) { return MakePaladinPredictor(s, params, model); }};
  (void)EvaluateRolling(training, spec, trainer);
  model->Freeze();
  return model;
}

std::vector<std::shared_ptr<const PaladinClassModel>> TrainFoldModels(
    std::span<const UsageSeries> series, const ResourceSpec& spec,
    const PaladinPredictorParams& params, int folds, uint64_t seed) {
  std::vector<std::shared_ptr<const PaladinClassModel>> models;
  for (int f = 0; f < std::max(folds, 1); ++f) {
    std::vector<UsageSeries> training;
    for (const auto& s : series) {
      if (!s.samples.empty() && FoldOf(s.id, folds, seed) != f) training.push_back(s);
    }
    models.push_back(TrainClassModel(training, spec, params));
  }
  return models;
}

namespace {

// Paladin's class model learns from the training series only: they are replayed through
// predictors sharing one model, which is then frozen for the held-out fold.
// What a class model learns depends on the training series and on the parameters that shape the
// features, not on the quantile, the ACI rate or anything else only forecasts read: candidates
// that differ only in those share one trained model per fold.
class TrainedModels {
 public:
  std::shared_ptr<PaladinClassModel> Get(std::span<const UsageSeries> training,
                                         const PaladinPredictorParams& params,
                                         const ResourceSpec& spec) {
    std::string key = Fingerprint(training);
    for (double v : {params.history_decay, params.steady_range, params.growth_ratio,
                     params.idle_share, params.scale_floor, params.scaled_scores ? 1.0 : 0.0}) {
      key += "," + std::to_string(v);
    }
    auto& model = models_[key];
    if (model == nullptr) model = TrainClassModel(training, spec, params);
    return model;
  }

 private:
  // The training set: its series' ids, sizes and end points.
  static std::string Fingerprint(std::span<const UsageSeries> training) {
    uint64_t h = 0xcbf29ce484222325ULL;
    const auto mix = [&h](uint64_t x) { h = (h ^ x) * 0x100000001b3ULL; };
    for (const auto& s : training) {
      for (char c : s.id) mix(static_cast<unsigned char>(c));
      mix(s.samples.size());
      if (!s.samples.empty()) {
        mix(static_cast<uint64_t>(s.samples.front().t_s));
        mix(static_cast<uint64_t>(s.samples.back().t_s));
      }
    }
    return std::to_string(training.size()) + ":" + std::to_string(h);
  }
  std::map<std::string, std::shared_ptr<PaladinClassModel>> models_;
};

Candidate PaladinCandidate(const PaladinPredictorParams& params, const ResourceSpec& spec,
                           const std::shared_ptr<TrainedModels>& trained) {
  Candidate c;
  c.predictor = "paladin";
  c.prepare = [params, spec, trained](std::span<const UsageSeries> training) -> PredictorMaker {
    auto model = trained->Get(training, params, spec);
    return
        [params, model](const ResourceSpec& s) { return MakePaladinPredictor(s, params, model); };
  };
  return c;
}

// The baselines learn nothing across workloads: the training folds are not needed.
Candidate FixedCandidate(const std::string& name,
                         const std::function<void(PredictorFactory&)>& tune) {
  Candidate c;
  c.predictor = name;
  c.prepare = [name, tune](std::span<const UsageSeries>) -> PredictorMaker {
    auto factory = std::make_shared<PredictorFactory>(*PredictorFactory::ForName(name));
    if (tune) tune(*factory);
    return [factory](const ResourceSpec& s) { return factory->Make(s); };
  };
  return c;
}

}  // namespace

StatusOr<std::vector<Candidate>> MakeCandidates(const std::vector<std::string>& names, bool sweep,
                                                const PaladinPredictorParams& paladin,
                                                const ResourceSpec& spec) {
  std::vector<Candidate> out;
  auto trained = std::make_shared<TrainedModels>();
  const auto add = [&](const std::string& name, const Setting& setting, bool is_default) {
    Candidate c;
    if (name == "paladin") {
      PredictorFactory tuned = *PredictorFactory::ForName(name);
      tuned.paladin = paladin;
      if (setting.tune) setting.tune(tuned);
      c = PaladinCandidate(tuned.paladin, spec, trained);
    } else {
      c = FixedCandidate(name, setting.tune);
    }
    c.knob = setting.knob;
    c.value = setting.value;
    c.is_default = is_default;
    out.push_back(std::move(c));
  };
  std::vector<std::string> canonical;
  for (const auto& n : names) {
    auto f = PredictorFactory::ForName(n);
    if (!f.ok()) return f.status();
    canonical.push_back(f->name());
    add(f->name(), Setting{"default", 0, {}}, true);
  }
  if (sweep) {
    for (const auto& name : canonical) {
      for (const Setting& setting : SweepOf(name)) add(name, setting, false);
    }
  }
  return out;
}

CrossValidation CrossValidate(std::span<const UsageSeries> series, const ResourceSpec& spec,
                              std::span<const Candidate> candidates, int folds, uint64_t seed) {
  CrossValidation cv;
  cv.folds = std::max(1, folds);
  cv.fold_of.assign(series.size(), -1);
  for (size_t s = 0; s < series.size(); ++s) {
    if (!series[s].samples.empty()) cv.fold_of[s] = FoldOf(series[s].id, cv.folds, seed);
  }
  cv.windows.resize(candidates.size());
  for (int k = 0; k < cv.folds; ++k) {
    std::vector<UsageSeries> training, held_out;
    std::vector<int32_t> index;  // held-out position -> series index
    for (size_t s = 0; s < series.size(); ++s) {
      if (cv.fold_of[s] < 0) continue;
      if (cv.fold_of[s] == k) {
        held_out.push_back(series[s]);
        index.push_back(static_cast<int32_t>(s));
      } else if (cv.folds > 1) {
        training.push_back(series[s]);
      }
    }
    if (held_out.empty()) continue;
    std::vector<PredictorMaker> makers;
    for (const auto& c : candidates) makers.push_back(c.prepare(training));
    auto windows = EvaluateRolling(held_out, spec, makers);
    for (size_t c = 0; c < candidates.size(); ++c) {
      for (WindowScore w : windows[c]) {
        w.series = index[static_cast<size_t>(w.series)];
        cv.windows[c].push_back(w);
      }
    }
  }
  return cv;
}

std::vector<WindowScore> FoldWindows(const CrossValidation& cv, size_t candidate, int fold) {
  std::vector<WindowScore> out;
  for (const auto& w : cv.windows[candidate]) {
    if (fold < 0 || cv.fold_of[static_cast<size_t>(w.series)] == fold) out.push_back(w);
  }
  return out;
}

PodBootstrap::PodBootstrap(const CrossValidation& cv, int resamples, uint64_t seed) {
  // Pods that have a scored window, in series order.
  std::vector<int32_t> pod_of(cv.fold_of.size(), -1);
  int32_t pods = 0;
  for (const auto& ws : cv.windows) {
    for (const auto& w : ws) {
      if (w.peak > 0 && pod_of[static_cast<size_t>(w.series)] < 0)
        pod_of[static_cast<size_t>(w.series)] = 0;
    }
  }
  for (auto& p : pod_of) {
    if (p == 0) p = pods++;
  }
  struct Totals {
    int64_t windows = 0, under = 0;
    double slack = 0;
  };
  const size_t n = static_cast<size_t>(pods);
  std::vector<std::vector<Totals>> totals(cv.windows.size(), std::vector<Totals>(n));
  for (size_t c = 0; c < cv.windows.size(); ++c) {
    for (const auto& w : cv.windows[c]) {
      if (w.peak <= 0) continue;
      Totals& t = totals[c][static_cast<size_t>(pod_of[static_cast<size_t>(w.series)])];
      ++t.windows;
      if (w.forecast < w.peak) ++t.under;
      if (w.forecast > 0) t.slack += std::max(0.0, w.forecast - w.peak) / w.forecast;
    }
  }
  under_.assign(cv.windows.size(), std::vector<double>(static_cast<size_t>(resamples)));
  slack_ = under_;
  Rng rng(seed);
  std::vector<uint32_t> times(n);
  for (int d = 0; d < resamples; ++d) {
    std::fill(times.begin(), times.end(), 0);
    for (size_t i = 0; i < n; ++i) ++times[rng.Uniform(n)];
    for (size_t c = 0; c < totals.size(); ++c) {
      double windows = 0, under = 0, slack = 0;
      for (size_t p = 0; p < n; ++p) {
        if (times[p] == 0) continue;
        windows += times[p] * static_cast<double>(totals[c][p].windows);
        under += times[p] * static_cast<double>(totals[c][p].under);
        slack += times[p] * totals[c][p].slack;
      }
      under_[c][static_cast<size_t>(d)] = windows > 0 ? under / windows : 0;
      slack_[c][static_cast<size_t>(d)] = windows > 0 ? slack / windows : 0;
    }
  }
}

Interval PodBootstrap::Percentiles(std::vector<double> v, double level) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const double tail = (1 - level) / 2;
  const auto at = [&](double q) {
    const auto k = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()) - 1e-9));
    return v[std::clamp<size_t>(k, 1, v.size()) - 1];
  };
  return {at(tail), at(1 - tail)};
}

Interval PodBootstrap::UnderRate(size_t candidate, double level) const {
  return Percentiles(under_[candidate], level);
}

Interval PodBootstrap::MeanSlack(size_t candidate, double level) const {
  return Percentiles(slack_[candidate], level);
}

Interval PodBootstrap::Frontier(std::span<const size_t> candidates, double max_under,
                                double level) const {
  if (under_.empty()) return {};
  const size_t draws = under_.front().size();
  std::vector<double> best(draws, std::numeric_limits<double>::infinity());
  for (size_t c : candidates) {
    for (size_t d = 0; d < draws; ++d) {
      if (under_[c][d] <= max_under + 1e-12) best[d] = std::min(best[d], slack_[c][d]);
    }
  }
  return Percentiles(std::move(best), level);
}

}  // namespace paladin::core
