// `paladin predict eval`: every predictor on real usage series, by rolling origin; in sample (one
// replay of every pod) or out of sample (--folds K: each fold scored by what learned on the
// others).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "commands.h"
#include "paladin/core/predict_eval.h"
#include "paladin/report/chart.h"
#include "paladin/report/fgd_report.h"
#include "paladin/report/format.h"
#include "paladin/trace/genai_usage.h"

namespace paladin::cli {
namespace {

struct EvalArgs {
  std::string usage;
  std::string out = "predict-results";
  std::string predictors = "request,peak,vpa,paladin";
  int64_t window_s = 3600;
  double gpu_request_gib = 48;
  double host_unit_gib = 64;
  bool sweep = true;
  // Out of sample: pods split into `folds` folds by pod (0: the in-sample rolling replay).
  int folds = 0;
  uint64_t seed = 1;
  int bootstrap = 1000;
  // paladin's configured under-prediction targets and its per-workload adaptive rate.
  double target_gpu = 0.02;
  double target_host = 0.01;
  double aci_rate = core::PaladinPredictorParams{}.aci_rate;
  bool scaled_scores = core::PaladinPredictorParams{}.scaled_scores;
  double scale_floor = core::PaladinPredictorParams{}.scale_floor;
  double volatile_share = core::PaladinPredictorParams{}.volatile_share;
  bool by_phase = core::PaladinPredictorParams{}.by_phase;
  int young_windows = core::PaladinPredictorParams{}.young_windows;
  double history_decay = core::PaladinPredictorParams{}.history_decay;
  double steady_range = core::PaladinPredictorParams{}.steady_range;
  double growth_ratio = core::PaladinPredictorParams{}.growth_ratio;
  int min_class_windows = core::PaladinPredictorParams{}.min_class_windows;
  // Only pods whose id begins with one of these characters ("": every pod).
  std::string pods_from;
};

struct Resource {
  const char* name;
  trace::GenAiMetric metric;
  core::ResourceSpec spec;
  double target;  // paladin's target under-rate
};

// Everything written, accumulated over the resources.
struct Outputs {
  std::string table;
  // In sample.
  std::string csv = "predictor,resource,windows,median_rel_err,p95_rel_err,under_rate,mean_slack\n";
  std::string tradeoff =
      "predictor,resource,knob,value,windows,median_rel_err,p95_rel_err,under_rate,mean_slack\n";
  std::string frontier;
  // Out of sample.
  std::string cv_predictors =
      "predictor,resource,fold,windows,median_rel_err,p95_rel_err,under_rate,mean_slack,"
      "under_rate_lo,under_rate_hi,mean_slack_lo,mean_slack_hi\n";
  std::string cv_tradeoff =
      "predictor,resource,knob,value,fold,windows,under_rate,mean_slack,under_rate_lo,"
      "under_rate_hi,mean_slack_lo,mean_slack_hi\n";
  std::string cv_frontier = "resource,max_under_rate,predictor,fold,mean_slack,lo,hi\n";
  std::string calibration =
      "resource,target_under_rate,windows,under_rate,under_rate_lo,under_rate_hi,mean_slack,"
      "within_1_5x\n";
  std::string folds = "resource,pod,fold\n";
  // Where the slack goes: every held-out window of each predictor's defaults, and per phase.
  std::string cv_windows = "predictor,resource,pod,fold,origin_s,phase,forecast,peak,slack\n";
  std::string cv_phases = "predictor,resource,phase,windows,under_rate,mean_slack,slack_share\n";
};

std::vector<std::string> NonEmpty(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const auto& i : items) {
    if (!i.empty()) out.push_back(i);
  }
  return out;
}

// Empty for a value that does not exist (NaN: no setting reaches the rate; infinity: the same
// in a bootstrap draw).
std::string EvalNum(double v, int digits = 4) {
  return std::isinf(v) ? std::string() : report::Fixed(v, digits);
}

int EvalFail(const Status& st) {
  std::fprintf(stderr, "paladin predict eval: error: %s\n", st.message().c_str());
  return 2;
}

core::PaladinPredictorParams PaladinParams(const EvalArgs& a, const Resource& r) {
  core::PaladinPredictorParams p;
  p.quantile = 1 - r.target;
  p.aci_rate = a.aci_rate;
  p.scaled_scores = a.scaled_scores;
  p.scale_floor = a.scale_floor;
  p.volatile_share = a.volatile_share;
  p.by_phase = a.by_phase;
  p.young_windows = a.young_windows;
  p.history_decay = a.history_decay;
  p.steady_range = a.steady_range;
  p.growth_ratio = a.growth_ratio;
  p.min_class_windows = a.min_class_windows;
  return p;
}

std::vector<std::string> CanonicalNames(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  out.reserve(names.size());
  for (const auto& n : names) out.push_back(core::PredictorFactory::ForName(n)->name());
  return out;
}

// The chart of each predictor's frontier from its trade-off points.
Status WriteChart(const EvalArgs& a, const Resource& r, const std::vector<std::string>& names,
                  const std::vector<core::TradeoffPoint>& tradeoff,
                  const std::vector<std::pair<std::string, core::PredictorMetrics>>& defaults,
                  const std::string& title) {
  report::Chart chart;
  chart.title = title;
  chart.x_label = "under-prediction rate (share of windows)";
  chart.y_label = "mean slack (share of the forecast)";
  chart.x_min = 0, chart.x_max = 0.3, chart.y_min = 0, chart.y_max = 0.8;
  for (const auto& name : names) {
    report::ChartSeries cs{name + " (frontier)", {}, true};
    for (int u = 0; u <= 30; ++u) {
      const double slack = core::FrontierSlack(tradeoff, name, u / 100.0);
      if (!std::isnan(slack)) cs.points.emplace_back(u / 100.0, slack);
    }
    if (name == "request") {  // a single setting: the default
      for (const auto& [dn, m] : defaults) {
        if (dn == name) cs.points = {{m.under_rate, m.mean_slack}};
      }
    }
    chart.series.push_back(std::move(cs));
  }
  return report::WriteFile(a.out + "/tradeoff_" + r.name + ".svg", report::LineChartSvg(chart));
}

Status InSample(const EvalArgs& a, const Resource& r, const std::vector<std::string>& names,
                std::span<const core::UsageSeries> series,
                const core::PaladinPredictorParams& paladin, Outputs* out) {
  auto study = core::StudyPredictors(series, r.spec, names, a.sweep, paladin);
  if (!study.ok()) return study.status();
  char buf[256];
  std::snprintf(buf, sizeof buf, "\n%s (%zu series)\n%-9s %8s %10s %10s %10s %10s\n", r.name,
                series.size(), "predictor", "windows", "median_err", "p95_err", "under_rate",
                "mean_slack");
  out->table += buf;
  for (const auto& [name, m] : study->defaults) {
    out->csv += name + "," + r.name + "," + std::to_string(m.windows) + "," +
                EvalNum(m.median_rel_err) + "," + EvalNum(m.p95_rel_err) + "," +
                EvalNum(m.under_rate) + "," + EvalNum(m.mean_slack) + "\n";
    std::snprintf(buf, sizeof buf, "%-9s %8lld %10.3f %10.3f %10.3f %10.3f\n", name.c_str(),
                  static_cast<long long>(m.windows), m.median_rel_err, m.p95_rel_err, m.under_rate,
                  m.mean_slack);
    out->table += buf;
  }
  // paladin against VPA at VPA's own under-prediction rate: the claim the sweep checks.
  for (const auto& [name, m] : study->defaults) {
    if (name != "vpa" || !a.sweep) continue;
    const double slack = core::FrontierSlack(study->tradeoff, "paladin", m.under_rate);
    if (std::isnan(slack)) continue;
    std::snprintf(buf, sizeof buf,
                  "at vpa's under_rate %.3f: paladin's least slack %.3f, vpa's %.3f\n",
                  m.under_rate, slack, m.mean_slack);
    out->table += buf;
  }
  for (const auto& name : names) {
    for (const auto& p : study->tradeoff) {
      if (p.predictor != name) continue;
      out->tradeoff += p.predictor + "," + r.name + "," + p.knob + "," + EvalNum(p.value, 4) + "," +
                       std::to_string(p.metrics.windows) + "," + EvalNum(p.metrics.median_rel_err) +
                       "," + EvalNum(p.metrics.p95_rel_err) + "," + EvalNum(p.metrics.under_rate) +
                       "," + EvalNum(p.metrics.mean_slack) + "\n";
    }
  }
  for (int u = 1; u <= 10; ++u) {
    out->frontier += std::string(r.name) + "," + EvalNum(u / 100.0, 2);
    for (const auto& name : names) {
      out->frontier += "," + EvalNum(core::FrontierSlack(study->tradeoff, name, u / 100.0));
    }
    out->frontier += "\n";
  }
  return WriteChart(a, r, names, study->tradeoff, study->defaults,
                    std::string("Slack against under-prediction, ") + r.name +
                        " (each point: one setting of the predictor's knob)");
}

// The held-out windows of candidate `c` one by one, and their slack split by the phase each
// forecast was made in: which phases hold the slack and the misses.
void WindowsByPhase(const Resource& r, const std::string& predictor,
                    std::span<const core::UsageSeries> series, const core::CrossValidation& cv,
                    size_t c, Outputs* out) {
  std::array<core::PredictorMetrics, core::kPhaseCount> by_phase{};
  std::array<double, core::kPhaseCount> slack{};
  std::array<int64_t, core::kPhaseCount> under{};
  double total = 0;
  for (const core::WindowScore& w : cv.windows[c]) {
    if (w.peak <= 0) continue;
    const double s = w.forecast > 0 ? std::max(0.0, w.forecast - w.peak) / w.forecast : 0;
    const auto ph = static_cast<size_t>(w.phase);
    ++by_phase[ph].windows;
    slack[ph] += s;
    if (w.forecast < w.peak) ++under[ph];
    total += s;
    const auto sr = static_cast<size_t>(w.series);
    out->cv_windows += predictor + "," + r.name + "," + series[sr].id + "," +
                       std::to_string(cv.fold_of[sr]) + "," + std::to_string(w.origin_s) + "," +
                       std::string(core::PhaseName(w.phase)) + "," + EvalNum(w.forecast, 6) + "," +
                       EvalNum(w.peak, 6) + "," + EvalNum(s) + "\n";
  }
  for (int p = 0; p < core::kPhaseCount; ++p) {
    const auto ph = static_cast<size_t>(p);
    const int64_t n = by_phase[ph].windows;
    if (n == 0) continue;
    out->cv_phases += predictor + "," + r.name + "," +
                      std::string(core::PhaseName(static_cast<core::Phase>(p))) + "," +
                      std::to_string(n) + "," +
                      EvalNum(static_cast<double>(under[ph]) / static_cast<double>(n)) + "," +
                      EvalNum(slack[ph] / static_cast<double>(n)) + "," +
                      EvalNum(total > 0 ? slack[ph] / total : 0) + "\n";
  }
}

std::string FoldName(int fold) { return fold < 0 ? "pooled" : std::to_string(fold); }

Status Folded(const EvalArgs& a, const Resource& r, const std::vector<std::string>& names,
              std::span<const core::UsageSeries> series,
              const core::PaladinPredictorParams& paladin, Outputs* out) {
  auto candidates = core::MakeCandidates(names, a.sweep, paladin, r.spec);
  if (!candidates.ok()) return candidates.status();
  const core::CrossValidation cv =
      core::CrossValidate(series, r.spec, *candidates, a.folds, a.seed);
  const core::PodBootstrap boot(cv, a.bootstrap, a.seed);
  for (size_t s = 0; s < series.size(); ++s) {
    if (cv.fold_of[s] >= 0) {
      out->folds +=
          std::string(r.name) + "," + series[s].id + "," + std::to_string(cv.fold_of[s]) + "\n";
    }
  }
  for (size_t c = 0; c < candidates->size(); ++c) {
    if ((*candidates)[c].is_default)
      WindowsByPhase(r, (*candidates)[c].predictor, series, cv, c, out);
  }
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "\n%s (%zu series, %d folds, out of sample; pooled, [95%% bootstrap over pods])\n"
                "%-9s %8s %24s %24s\n",
                r.name, series.size(), a.folds, "predictor", "windows", "under_rate", "mean_slack");
  out->table += buf;
  // Per fold then pooled: the defaults, every sweep point, the frontiers.
  std::vector<std::pair<std::string, core::PredictorMetrics>> pooled_defaults;
  std::vector<core::TradeoffPoint> pooled_tradeoff;
  std::vector<int> folds;
  folds.reserve(static_cast<size_t>(a.folds) + 1);
  for (int k = 0; k < a.folds; ++k) folds.push_back(k);
  folds.push_back(-1);
  for (const int fold : folds) {
    std::vector<core::TradeoffPoint> tradeoff;
    for (size_t c = 0; c < candidates->size(); ++c) {
      const auto& cand = (*candidates)[c];
      const core::PredictorMetrics m = core::ScoreWindows(core::FoldWindows(cv, c, fold));
      std::string iv = ",,,";
      if (fold < 0) {
        const auto u = boot.UnderRate(c), sl = boot.MeanSlack(c);
        iv = EvalNum(u.lo) + "," + EvalNum(u.hi) + "," + EvalNum(sl.lo) + "," + EvalNum(sl.hi);
      }
      if (cand.is_default) {
        out->cv_predictors += cand.predictor + "," + r.name + "," + FoldName(fold) + "," +
                              std::to_string(m.windows) + "," + EvalNum(m.median_rel_err) + "," +
                              EvalNum(m.p95_rel_err) + "," + EvalNum(m.under_rate) + "," +
                              EvalNum(m.mean_slack) + "," + iv + "\n";
        if (fold < 0) {
          pooled_defaults.emplace_back(cand.predictor, m);
          const auto u = boot.UnderRate(c), sl = boot.MeanSlack(c);
          std::snprintf(buf, sizeof buf, "%-9s %8lld %6.3f [%6s, %6s] %6.3f [%6s, %6s]\n",
                        cand.predictor.c_str(), static_cast<long long>(m.windows), m.under_rate,
                        EvalNum(u.lo, 3).c_str(), EvalNum(u.hi, 3).c_str(), m.mean_slack,
                        EvalNum(sl.lo, 3).c_str(), EvalNum(sl.hi, 3).c_str());
          out->table += buf;
        }
        continue;
      }
      tradeoff.push_back({cand.predictor, cand.knob, cand.value, m});
      out->cv_tradeoff += cand.predictor + "," + r.name + "," + cand.knob + "," +
                          EvalNum(cand.value, 4) + "," + FoldName(fold) + "," +
                          std::to_string(m.windows) + "," + EvalNum(m.under_rate) + "," +
                          EvalNum(m.mean_slack) + "," + iv + "\n";
    }
    for (int u = 1; u <= 10; ++u) {
      for (const auto& name : names) {
        const double slack = core::FrontierSlack(tradeoff, name, u / 100.0);
        std::string iv = ",";
        if (fold < 0) {
          std::vector<size_t> of;
          for (size_t c = 0; c < candidates->size(); ++c) {
            if (!(*candidates)[c].is_default && (*candidates)[c].predictor == name) of.push_back(c);
          }
          const auto ci = boot.Frontier(of, u / 100.0);
          iv = EvalNum(ci.lo) + "," + EvalNum(ci.hi);
        }
        std::string row = std::string(r.name) + ",";
        row += EvalNum(u / 100.0, 2) + "," + name + ",";
        row += FoldName(fold) + "," + EvalNum(slack) + ",";
        row += iv + "\n";
        out->cv_frontier += row;
      }
    }
    if (fold < 0) pooled_tradeoff = std::move(tradeoff);
  }
  // The pooled frontier at 1% .. 10%, as a table, and paladin's calibration: each configured
  // target (1 - quantile) against the under-rate it realised on pods it never learned from.
  out->table += "least slack at under_rate <= u, pooled [95% interval]:\n  u    ";
  for (const auto& name : names) {
    if (name != "request")
      out->table += std::string(" ") + name + std::string(20 - name.size(), ' ');
  }
  out->table += "\n";
  for (int u = 1; u <= 10; ++u) {
    std::snprintf(buf, sizeof buf, "  %.2f", u / 100.0);
    out->table += buf;
    for (const auto& name : names) {
      if (name == "request") continue;
      std::vector<size_t> of;
      for (size_t c = 0; c < candidates->size(); ++c) {
        if (!(*candidates)[c].is_default && (*candidates)[c].predictor == name) of.push_back(c);
      }
      const auto ci = boot.Frontier(of, u / 100.0);
      std::snprintf(buf, sizeof buf, " %6s [%6s,%6s]",
                    EvalNum(core::FrontierSlack(pooled_tradeoff, name, u / 100.0), 3).c_str(),
                    EvalNum(ci.lo, 3).c_str(), EvalNum(ci.hi, 3).c_str());
      out->table += buf;
    }
    out->table += "\n";
  }
  for (size_t c = 0; c < candidates->size(); ++c) {
    const auto& cand = (*candidates)[c];
    if (cand.is_default || cand.predictor != "paladin") continue;
    const double target = 1 - cand.value;
    const core::PredictorMetrics m = core::ScoreWindows(core::FoldWindows(cv, c, -1));
    const auto u = boot.UnderRate(c);
    const bool within = m.under_rate <= 1.5 * target && m.under_rate >= target / 1.5;
    out->calibration += std::string(r.name) + "," + EvalNum(target) + "," +
                        std::to_string(m.windows) + "," + EvalNum(m.under_rate) + "," +
                        EvalNum(u.lo) + "," + EvalNum(u.hi) + "," + EvalNum(m.mean_slack) + "," +
                        (within ? "yes" : "no") + "\n";
    if (std::abs(target - 0.01) < 1e-9 || std::abs(target - 0.02) < 1e-9 ||
        std::abs(target - 0.05) < 1e-9) {
      std::snprintf(buf, sizeof buf,
                    "paladin target %.2f: realised under_rate %.4f [%s, %s], slack %.3f, "
                    "within 1.5x: %s\n",
                    target, m.under_rate, EvalNum(u.lo).c_str(), EvalNum(u.hi).c_str(),
                    m.mean_slack, within ? "yes" : "no");
      out->table += buf;
    }
  }
  return WriteChart(a, r, names, pooled_tradeoff, pooled_defaults,
                    std::string("Slack against under-prediction out of sample, ") + r.name +
                        " (pooled over folds)");
}

int RunEval(const EvalArgs& a) {
  const auto given = NonEmpty(SplitComma(a.predictors));
  if (given.empty()) return EvalFail(InvalidArgument("--predictors is empty"));
  for (const auto& n : given) {
    if (auto f = core::PredictorFactory::ForName(n); !f.ok()) return EvalFail(f.status());
  }
  const auto names = CanonicalNames(given);
  if (a.window_s <= 0) return EvalFail(InvalidArgument("--window must be positive"));
  if (a.folds < 0 || a.folds == 1 || a.folds > 100) {
    return EvalFail(InvalidArgument("--folds must be 0 (in sample) or 2 to 100, not " +
                                    std::to_string(a.folds)));
  }
  if (a.bootstrap < 0 || a.bootstrap > 100000) {
    return EvalFail(InvalidArgument("--bootstrap must be 0 to 100000"));
  }
  for (const auto& [flag, v] :
       {std::pair{"--target-gpu", a.target_gpu}, std::pair{"--target-host", a.target_host}}) {
    if (!(v > 0 && v < 1)) {
      return EvalFail(InvalidArgument(std::string(flag) + " must be in (0, 1), not " + EvalNum(v)));
    }
  }
  if (!(a.scale_floor > 0 && a.scale_floor <= 1)) {
    return EvalFail(InvalidArgument("--paladin-scale-floor must be in (0, 1]"));
  }
  if (!(a.history_decay >= 0 && a.history_decay < 1)) {
    return EvalFail(InvalidArgument("--paladin-history-decay must be in [0, 1)"));
  }
  if (!(a.steady_range >= 0 && a.steady_range <= 1)) {
    return EvalFail(InvalidArgument("--paladin-steady-range must be in [0, 1]"));
  }
  if (!(a.growth_ratio >= 1 && a.growth_ratio <= 10)) {
    return EvalFail(InvalidArgument("--paladin-growth-ratio must be in [1, 10]"));
  }
  if (a.min_class_windows < 1 || a.min_class_windows > 100000) {
    return EvalFail(InvalidArgument("--paladin-min-class-windows must be 1 to 100000"));
  }
  if (a.young_windows < 0 || a.young_windows > 1000) {
    return EvalFail(InvalidArgument("--paladin-young-windows must be 0 to 1000"));
  }
  if (!(a.volatile_share >= 0 && a.volatile_share <= 10)) {
    return EvalFail(InvalidArgument("--paladin-volatile-share must be in [0, 10]"));
  }
  if (!(a.aci_rate >= 0 && a.aci_rate <= 1)) {
    return EvalFail(InvalidArgument("--paladin-aci-rate must be in [0, 1]"));
  }
  std::error_code ec;
  std::filesystem::create_directories(a.out, ec);
  if (ec) return EvalFail(IoError("cannot create " + a.out + ": " + ec.message()));

  const double gib = 1024.0 * 1024 * 1024;
  std::vector<Resource> resources = {{"gpu_mem",
                                      trace::GenAiMetric::kGpuMemBytes,
                                      {a.gpu_request_gib * gib, a.window_s, 1},
                                      a.target_gpu},
                                     {"host_mem",
                                      trace::GenAiMetric::kHostMemShare,
                                      {1.0, a.window_s, a.host_unit_gib * gib},
                                      a.target_host}};
  Outputs out;
  out.frontier = "resource,max_under_rate";
  for (const auto& n : names) out.frontier += "," + n;
  out.frontier += "\n";
  for (const auto& r : resources) {
    std::fprintf(stderr, "paladin predict eval: reading %s ...\n", trace::GenAiFileName(r.metric));
    int64_t skipped = 0;
    auto series = trace::ReadGenAiUsage(a.usage, r.metric, &skipped);
    if (!series.ok()) return EvalFail(series.status());
    if (skipped > 0) {
      std::fprintf(stderr, "paladin predict eval: %s: skipped %lld rows with no pod id\n",
                   trace::GenAiFileName(r.metric), static_cast<long long>(skipped));
    }
    if (!a.pods_from.empty()) {
      std::erase_if(*series, [&a](const core::UsageSeries& s) {
        return s.id.empty() || a.pods_from.find(s.id.front()) == std::string::npos;
      });
      if (series->empty()) {
        return EvalFail(InvalidArgument("--pods-from " + a.pods_from + ": no pod of " +
                                        trace::GenAiFileName(r.metric) +
                                        " has an id that begins with one of these characters"));
      }
    }
    size_t samples = 0;
    for (const auto& s : *series) samples += s.samples.size();
    std::fprintf(stderr, "paladin predict eval: %s: %zu series, %zu samples; replaying %s%s%s\n",
                 r.name, series->size(), samples, a.predictors.c_str(),
                 a.sweep ? " and their trade-off sweeps" : "",
                 a.folds > 0 ? (", " + std::to_string(a.folds) + " folds").c_str() : "");
    const core::PaladinPredictorParams paladin = PaladinParams(a, r);
    const Status st = a.folds > 0 ? Folded(a, r, names, *series, paladin, &out)
                                  : InSample(a, r, names, *series, paladin, &out);
    if (!st.ok()) return EvalFail(st);
  }
  std::vector<std::pair<const char*, const std::string*>> files;
  if (a.folds > 0) {
    files = {{"cv_predictors.csv", &out.cv_predictors},
             {"cv_tradeoff.csv", &out.cv_tradeoff},
             {"cv_frontier.csv", &out.cv_frontier},
             {"calibration.csv", &out.calibration},
             {"folds.csv", &out.folds},
             {"cv_windows.csv", &out.cv_windows},
             {"cv_phases.csv", &out.cv_phases}};
  } else {
    files = {{"predictors.csv", &out.csv},
             {"tradeoff.csv", &out.tradeoff},
             {"frontier.csv", &out.frontier}};
  }
  std::string written;
  for (const auto& [file, content] : files) {
    auto st = report::WriteFile(a.out + "/" + file, *content);
    if (!st.ok()) return EvalFail(st);
    written += (written.empty() ? "" : ",") + std::string(file);
  }
  std::printf("%s\nwrote %s/{%s,tradeoff_*.svg}\n", out.table.c_str(), a.out.c_str(),
              written.c_str());
  return 0;
}

}  // namespace

void RegisterPredict(CLI::App& app, int* exit_code) {
  CLI::App* predict = app.add_subcommand("predict", "Evaluate resource predictors");
  predict->require_subcommand(1);
  auto args = std::make_shared<EvalArgs>();
  args->usage = BundledDataDir() + "/alibaba-genai-2026-pod-usage";
  CLI::App* eval = predict->add_subcommand(
      "eval",
      "Rolling-origin evaluation on per-pod usage series: each hour every predictor forecasts the "
      "next hour's peak GPU and host memory, having seen only earlier samples. With --folds K, "
      "out of sample: pods split into K folds, each scored by what learned on the others.");
  eval->add_option("--usage", args->usage,
                   "Directory with pod_gpu_memory_used_bytes_anon.csv and pod_memory_util_anon.csv")
      ->capture_default_str();
  eval->add_option("--out", args->out, "Output directory")->capture_default_str();
  eval->add_option("--predictors", args->predictors, "Comma-separated predictors")
      ->capture_default_str();
  eval->add_option("--window", args->window_s, "Forecast window, seconds")->capture_default_str();
  eval->add_option("--gpu-request-gib", args->gpu_request_gib,
                   "The GPU-memory request of every pod (the trace publishes none)")
      ->capture_default_str();
  eval->add_option("--host-unit-gib", args->host_unit_gib,
                   "Container memory limit assumed when VPA's byte constants meet host-memory "
                   "shares")
      ->capture_default_str();
  eval->add_flag("!--no-sweep", args->sweep, "Skip the slack/under-prediction trade-off sweep");
  eval->add_option("--folds", args->folds,
                   "Out of sample: split the pods into this many folds by pod (0: in sample)")
      ->capture_default_str();
  eval->add_option("--seed", args->seed, "Seed of the fold split and the bootstrap")
      ->capture_default_str();
  eval->add_option("--bootstrap", args->bootstrap,
                   "Bootstrap resamples over pods for the intervals (with --folds)")
      ->capture_default_str();
  eval->add_option("--target-gpu", args->target_gpu,
                   "paladin's target share of GPU-memory windows under-predicted")
      ->capture_default_str();
  eval->add_option("--target-host", args->target_host,
                   "paladin's target share of host-memory windows under-predicted")
      ->capture_default_str();
  eval->add_option("--paladin-aci-rate", args->aci_rate,
                   "paladin's per-workload adaptive calibration step (0: off)")
      ->capture_default_str();
  eval->add_flag("!--no-paladin-scaled", args->scaled_scores,
                 "paladin: log-ratio scores only (no scores scaled by the workload's variability)");
  eval->add_option("--paladin-scale-floor", args->scale_floor,
                   "paladin: the least scale of a workload's variability, a share of its request")
      ->capture_default_str();
  eval->add_option("--paladin-young-windows", args->young_windows,
                   "paladin: calibrate workloads at most this many windows old apart (0: off)")
      ->capture_default_str();
  eval->add_flag("!--no-paladin-phases", args->by_phase,
                 "paladin: one calibration for every phase but loading, not one per phase");
  eval->add_option("--paladin-volatile-share", args->volatile_share,
                   "paladin: calibrate workloads whose variability is at least this share of "
                   "their level apart from the others (0: one calibration per phase)")
      ->capture_default_str();
  eval->add_option("--paladin-history-decay", args->history_decay,
                   "paladin: weight of each older window peak in the recent base (the last: 1)")
      ->capture_default_str();
  eval->add_option("--paladin-steady-range", args->steady_range,
                   "paladin: a window whose range is at most this share of its peak is steady")
      ->capture_default_str();
  eval->add_option("--paladin-growth-ratio", args->growth_ratio,
                   "paladin: a window whose peak is above this multiple of every earlier one is "
                   "growth")
      ->capture_default_str();
  eval->add_option("--paladin-min-class-windows", args->min_class_windows,
                   "paladin: the fewest windows of a phase calibrated on its own (else the pooled "
                   "phases)")
      ->capture_default_str();
  eval->add_option("--pods-from", args->pods_from,
                   "Only pods whose id begins with one of these characters (the trace's ids are "
                   "hex: 01234 is the half the defaults were tuned on, 56789a the held-out half; "
                   "docs/predictors.md)");
  eval->callback([args, exit_code] { *exit_code = RunEval(*args); });
}

}  // namespace paladin::cli
