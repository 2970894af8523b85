#include "paladin/core/predict_eval.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <string>

namespace paladin::core {
namespace {

// An open window of one series: its forecasts (one per maker) and what has been seen in it.
struct OpenWindow {
  int64_t origin = 0;
  std::vector<double> forecast;
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
      out[m].push_back(
          {static_cast<int32_t>(s), st.window.origin, st.window.forecast[m], st.window.peak});
    }
  };
  const auto open_window = [&](size_t s) {
    SeriesState& st = states[s];
    st.has_window = true;
    st.window.origin = st.next_origin;
    st.window.peak = 0;
    st.window.any = false;
    st.window.forecast.resize(makers.size());
    st.window.oom_told.assign(makers.size(), false);
    for (size_t m = 0; m < makers.size(); ++m) {
      st.window.forecast[m] = st.predictors[m]->Predict(st.next_origin).value;
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

StatusOr<PredictorStudy> StudyPredictors(std::span<const UsageSeries> series,
                                         const ResourceSpec& spec,
                                         const std::vector<std::string>& names, bool sweep) {
  struct Run {
    std::string predictor, knob;
    double value = 0;
    bool is_default = false;
  };
  std::vector<Run> runs;
  std::vector<PredictorMaker> makers;
  const auto add = [&](const std::string& name, const std::string& knob, double value,
                       bool is_default, auto&& tune) -> Status {
    auto f = PredictorFactory::ForName(name);
    if (!f.ok()) return f.status();
    auto factory = std::make_shared<PredictorFactory>(std::move(*f));
    tune(*factory);
    makers.push_back([factory](const ResourceSpec& s) { return factory->Make(s); });
    runs.push_back({name, knob, value, is_default});
    return Status::Ok();
  };
  const auto keep = [](PredictorFactory&) {};
  for (const auto& n : names) {
    auto canonical = PredictorFactory::ForName(n);
    if (!canonical.ok()) return canonical.status();
    PALADIN_RETURN_IF_ERROR(add(canonical->name(), "default", 0, true, keep));
  }
  if (sweep) {
    for (const auto& n : names) {
      const std::string name = PredictorFactory::ForName(n)->name();
      if (name == "peak") {
        for (int i = 0; i <= 60; ++i) {
          const double m = 1.0 + 0.02 * i;
          PALADIN_RETURN_IF_ERROR(
              add(name, "margin", m, false, [m](PredictorFactory& f) { f.peak.margin = m; }));
        }
      } else if (name == "vpa") {
        for (double pct : {0.5, 0.75, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 1.0}) {
          for (double margin : {0.0, 0.15, 0.3, 0.5, 0.75, 1.0}) {
            PALADIN_RETURN_IF_ERROR(
                add(name, "target_percentile@safety_margin=" + std::to_string(margin).substr(0, 4),
                    pct, false, [pct, margin](PredictorFactory& f) {
                      f.vpa.target_percentile = pct;
                      f.vpa.safety_margin = margin;
                    }));
          }
        }
      } else if (name == "paladin") {
        for (double q : {0.5, 0.7, 0.8, 0.85, 0.9, 0.925, 0.95, 0.96, 0.97, 0.975, 0.98, 0.985,
                         0.99, 0.9925, 0.995, 0.9975, 0.999}) {
          PALADIN_RETURN_IF_ERROR(add(name, "quantile", q, false,
                                      [q](PredictorFactory& f) { f.paladin.quantile = q; }));
        }
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

}  // namespace paladin::core
