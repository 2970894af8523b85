// Rolling-origin evaluation of the predictors: which windows are scored, what each predictor is
// told and when, causality and determinism of the replay, and the metrics on hand-computed
// windows.
#include "paladin/core/predict_eval.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fleet_testing.h"

namespace paladin::core {
namespace {

using ::testing::HasSubstr;

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr int64_t kHour = 3600;
const ResourceSpec kSpec{40 * kGiB, kHour, 1};

// --- a predictor that records what it is told ---

struct Call {
  enum Kind { kObserve, kOom, kPredict } kind;
  int series;
  int64_t t;
  double value;  // the sample, the OOM limit, or the forecast returned
};

class RecordingPredictor final : public Predictor {
 public:
  RecordingPredictor(int series, double forecast, std::vector<Call>* log)
      : series_(series), forecast_(forecast), log_(log) {}
  std::string_view name() const override { return "recording"; }
  void Observe(int64_t t, double v) override { log_->push_back({Call::kObserve, series_, t, v}); }
  void ObserveOom(int64_t t, double limit) override {
    log_->push_back({Call::kOom, series_, t, limit});
  }
  Forecast Predict(int64_t now) override {
    log_->push_back({Call::kPredict, series_, now, forecast_});
    return {forecast_, 0, Phase::kSteady};
  }

 private:
  int series_;
  double forecast_;
  std::vector<Call>* log_;
};

// A maker of recording predictors: the k-th predictor made is for series k.
PredictorMaker RecordingMaker(double forecast, std::vector<Call>* log) {
  auto next = std::make_shared<int>(0);
  return [=](const ResourceSpec&) {
    return std::make_unique<RecordingPredictor>((*next)++, forecast, log);
  };
}

std::vector<Call> CallsOf(const std::vector<Call>& log, Call::Kind kind) {
  std::vector<Call> out;
  for (const Call& c : log) {
    if (c.kind == kind) out.push_back(c);
  }
  return out;
}

UsageSeries Regular(const std::string& id, int64_t from, int64_t to, int64_t step,
                    const std::function<double(int64_t)>& curve) {
  UsageSeries s{id, {}};
  for (int64_t t = from; t < to; t += step) s.samples.push_back({t, curve(t)});
  return s;
}

// --- EvaluateRolling: windows and calls ---

TEST(EvaluateRollingTest, ThreeHoursOfSamplesGiveTwoWindows) {
  const int64_t t0 = 1000;
  // 1 everywhere but: 8 in the warm-up hour, 7 then 9 in the first window, 4 over the second.
  const auto curve = [&](int64_t t) {
    if (t == t0 + 120) return 8.0;
    if (t == t0 + 4020) return 7.0;
    if (t == t0 + 4200) return 9.0;
    return t >= t0 + 7200 ? 4.0 : 1.0;
  };
  const std::vector<UsageSeries> series = {Regular("a", t0, t0 + 3 * kHour, 60, curve)};
  ASSERT_EQ(series[0].samples.size(), 180u);
  std::vector<Call> log;
  const std::vector<PredictorMaker> makers = {RecordingMaker(5.0, &log)};
  const auto windows = EvaluateRolling(series, ResourceSpec{10, kHour, 1}, makers);

  ASSERT_EQ(windows.size(), 1u);
  ASSERT_EQ(windows[0].size(), 2u);
  EXPECT_EQ(windows[0][0].series, 0);
  EXPECT_EQ(windows[0][0].origin_s, t0 + 3600);
  EXPECT_EQ(windows[0][0].forecast, 5.0);
  EXPECT_EQ(windows[0][0].peak, 9.0);
  EXPECT_EQ(windows[0][1].series, 0);
  EXPECT_EQ(windows[0][1].origin_s, t0 + 7200);
  EXPECT_EQ(windows[0][1].forecast, 5.0);
  EXPECT_EQ(windows[0][1].peak, 4.0);

  // One forecast per window, at its origin; every sample observed once.
  const auto predicts = CallsOf(log, Call::kPredict);
  ASSERT_EQ(predicts.size(), 2u);
  EXPECT_EQ(predicts[0].t, t0 + 3600);
  EXPECT_EQ(predicts[1].t, t0 + 7200);
  EXPECT_EQ(CallsOf(log, Call::kObserve).size(), 180u);
  // One OOM, at the first sample above the forecast; none in the warm-up hour (no forecast was
  // made there) nor for the second sample above it in the same window.
  const auto ooms = CallsOf(log, Call::kOom);
  ASSERT_EQ(ooms.size(), 1u);
  EXPECT_EQ(ooms[0].t, t0 + 4020);
  EXPECT_EQ(ooms[0].value, 5.0);
}

TEST(EvaluateRollingTest, AForecastSeesExactlyTheSamplesBeforeItsOrigin) {
  const int64_t t0 = 1000;
  const std::vector<UsageSeries> series = {
      Regular("a", t0, t0 + 3 * kHour, 60, [](int64_t) { return 1.0; })};
  std::vector<Call> log;
  const std::vector<PredictorMaker> makers = {RecordingMaker(5.0, &log)};
  (void)EvaluateRolling(series, ResourceSpec{10, kHour, 1}, makers);
  for (size_t i = 0; i < log.size(); ++i) {
    if (log[i].kind != Call::kPredict) continue;
    ASSERT_GT(i, 0u);
    ASSERT_LT(i + 1, log.size());
    EXPECT_EQ(log[i - 1].kind, Call::kObserve);
    EXPECT_EQ(log[i - 1].t, log[i].t - 60);  // the last sample before the origin
    EXPECT_EQ(log[i + 1].kind, Call::kObserve);
    EXPECT_EQ(log[i + 1].t, log[i].t);  // the sample at the origin comes after
  }
}

TEST(EvaluateRollingTest, SeriesAreReplayedInOneGlobalTimeOrder) {
  // b's origins (5400, 9000) fall on a's sample times, and a's (3600, 7200) on b's.
  const std::vector<UsageSeries> series = {
      Regular("a", 0, 3 * kHour, 60, [](int64_t) { return 1.0; }),
      Regular("b", 1800, 1800 + 3 * kHour, 60, [](int64_t) { return 2.0; })};
  std::vector<Call> log;
  const std::vector<PredictorMaker> makers = {RecordingMaker(5.0, &log)};
  const auto windows = EvaluateRolling(series, ResourceSpec{10, kHour, 1}, makers);
  for (size_t i = 1; i < log.size(); ++i) {
    ASSERT_LE(log[i - 1].t, log[i].t) << "call " << i;
    // At equal times every forecast comes before every sample.
    if (log[i - 1].t == log[i].t) {
      EXPECT_FALSE(log[i - 1].kind == Call::kObserve && log[i].kind == Call::kPredict)
          << "call " << i << " at t=" << log[i].t;
    }
  }
  const auto predicts = CallsOf(log, Call::kPredict);
  ASSERT_EQ(predicts.size(), 4u);
  EXPECT_EQ(predicts[0].series, 0);
  EXPECT_EQ(predicts[1].series, 1);
  EXPECT_EQ(predicts[1].t, 5400);
  ASSERT_EQ(windows[0].size(), 4u);
  EXPECT_EQ(windows[0][0].origin_s, 3600);
  EXPECT_EQ(windows[0][0].peak, 1.0);
  EXPECT_EQ(windows[0][1].origin_s, 5400);
  EXPECT_EQ(windows[0][1].peak, 2.0);
}

TEST(EvaluateRollingTest, WindowsWithoutSamplesAreLeftOut) {
  // a: an hour of samples, a gap of 1.5 h, then 30 min more. b: empty. c: one sample.
  UsageSeries a = Regular("a", 0, kHour, 60, [](int64_t) { return 1.0; });
  for (const auto& x :
       Regular("a", 9000, 10800, 60, [](int64_t t) { return t / 1000.0; }).samples) {
    a.samples.push_back(x);
  }
  const std::vector<UsageSeries> series = {a, UsageSeries{"b", {}}, UsageSeries{"c", {{50, 3.0}}}};
  std::vector<Call> log;
  const std::vector<PredictorMaker> makers = {RecordingMaker(5.0, &log)};
  const auto windows = EvaluateRolling(series, ResourceSpec{10, kHour, 1}, makers);
  // [3600, 7200) had no sample; [7200, 10800) holds the last 30 minutes.
  ASSERT_EQ(windows[0].size(), 1u);
  EXPECT_EQ(windows[0][0].series, 0);
  EXPECT_EQ(windows[0][0].origin_s, 7200);
  EXPECT_EQ(windows[0][0].peak, 10740 / 1000.0);
  // b is never told anything; c's one sample is observed, but no window of c is ever opened.
  for (const Call& c : CallsOf(log, Call::kPredict)) EXPECT_EQ(c.series, 0);
  int c_samples = 0;
  for (const Call& c : log) {
    EXPECT_NE(c.series, 1);
    c_samples += c.series == 2;
  }
  EXPECT_EQ(c_samples, 1);
}

TEST(EvaluateRollingTest, NoSeriesOrNoMakersGiveNoWindows) {
  std::vector<Call> log;
  const std::vector<PredictorMaker> makers = {RecordingMaker(5.0, &log)};
  const auto none = EvaluateRolling({}, kSpec, makers);
  ASSERT_EQ(none.size(), 1u);
  EXPECT_TRUE(none[0].empty());
  const std::vector<UsageSeries> series = {
      Regular("a", 0, 3 * kHour, 60, [](int64_t) { return 1.0; })};
  EXPECT_TRUE(EvaluateRolling(series, kSpec, {}).empty());
}

TEST(EvaluateRollingTest, PeakPredictorForecastsTheMaxSoFarTimesTheMargin) {
  const std::vector<UsageSeries> series = {
      Regular("a", 0, 4 * kHour, 60, [](int64_t t) { return (t < 2 * kHour ? 10 : 20) * kGiB; })};
  auto f = PredictorFactory::ForName("peak");
  PALADIN_ASSERT_OK(f);
  auto factory = std::make_shared<PredictorFactory>(std::move(*f));
  const std::vector<PredictorMaker> makers = {
      [factory](const ResourceSpec& s) { return factory->Make(s); }};
  const auto windows = EvaluateRolling(series, kSpec, makers);
  ASSERT_EQ(windows[0].size(), 3u);
  EXPECT_DOUBLE_EQ(windows[0][0].forecast, 12 * kGiB);
  // The step is at the second window's origin: its forecast has not seen it.
  EXPECT_EQ(windows[0][1].origin_s, 2 * kHour);
  EXPECT_DOUBLE_EQ(windows[0][1].forecast, 12 * kGiB);
  EXPECT_DOUBLE_EQ(windows[0][1].peak, 20 * kGiB);
  EXPECT_DOUBLE_EQ(windows[0][2].forecast, 24 * kGiB);
}

// --- causality and determinism with the four real predictors ---

// Twelve series of ten hours: flat, square wave, ramp, spikes, a step, an idle start, a gap;
// different starts and sampling steps. Deterministic.
std::vector<UsageSeries> Fleet() {
  std::vector<UsageSeries> out;
  for (int k = 0; k < 12; ++k) {
    const int64_t start = 137 * k;
    const int64_t step = k % 3 == 0 ? 60 : (k % 3 == 1 ? 30 : 120);
    const double jitter = 0.1 * kGiB * (k + 1);
    UsageSeries s{"s" + std::to_string(k), {}};
    for (int64_t t = start; t < start + 10 * kHour; t += step) {
      const int64_t age = t - start;
      double v = 0;
      switch (k % 6) {
        case 0:
          v = 10 * kGiB;
          break;
        case 1:
          v = (age / 1800) % 2 == 0 ? 8 * kGiB : 16 * kGiB;
          break;
        case 2:
          v = 2 * kGiB + static_cast<double>(age) / kHour * kGiB;
          break;
        case 3:
          v = (age / step) % 97 == 13 ? 25 * kGiB : 6 * kGiB;
          break;
        case 4:
          v = age < 5 * kHour ? 5 * kGiB : 15 * kGiB;
          break;
        case 5:
          if (age >= 3 * kHour && age < 4 * kHour + 1800) continue;  // a gap
          v = age < 2 * kHour ? 0 : 12 * kGiB;
          break;
      }
      v += jitter * std::sin(static_cast<double>(t) / 977.0);
      s.samples.push_back({t, std::max(0.0, v)});
    }
    out.push_back(std::move(s));
  }
  return out;
}

// Fresh makers for the four predictors (paladin's class model is per maker).
std::vector<PredictorMaker> FourMakers() {
  std::vector<PredictorMaker> makers;
  for (const auto& name : PredictorFactory::Names()) {
    auto f = PredictorFactory::ForName(name);
    EXPECT_TRUE(f.ok());
    auto factory = std::make_shared<PredictorFactory>(std::move(*f));
    makers.push_back([factory](const ResourceSpec& s) { return factory->Make(s); });
  }
  return makers;
}

TEST(EvaluateRollingTest, ForecastsDependOnlyOnThePast) {
  const std::vector<UsageSeries> full = Fleet();
  const auto full_windows = EvaluateRolling(full, kSpec, FourMakers());
  const auto& names = PredictorFactory::Names();
  for (const int64_t cut : {4 * kHour + 1017, 6 * kHour, 7 * kHour + 1}) {
    std::vector<UsageSeries> past = full;
    for (auto& s : past) {
      std::erase_if(s.samples, [&](const UsageSample& x) { return x.t_s >= cut; });
    }
    const auto past_windows = EvaluateRolling(past, kSpec, FourMakers());
    ASSERT_EQ(past_windows.size(), names.size());
    for (size_t m = 0; m < names.size(); ++m) {
      SCOPED_TRACE(names[m] + " cut at " + std::to_string(cut));
      std::map<std::pair<int32_t, int64_t>, WindowScore> by_key;
      for (const auto& w : full_windows[m]) by_key[{w.series, w.origin_s}] = w;
      // Every window opened before the cut with a sample before the cut is in both runs.
      size_t expected = 0;
      for (const auto& w : full_windows[m]) {
        const auto& xs = full[static_cast<size_t>(w.series)].samples;
        expected += std::any_of(xs.begin(), xs.end(), [&](const UsageSample& x) {
          return x.t_s >= w.origin_s && x.t_s < std::min(cut, w.origin_s + kHour);
        });
      }
      EXPECT_EQ(past_windows[m].size(), expected);
      EXPECT_GE(past_windows[m].size(), 30u);  // enough for paladin's class model to warm up
      for (const auto& w : past_windows[m]) {
        ASSERT_LT(w.origin_s, cut);
        const auto it = by_key.find({w.series, w.origin_s});
        ASSERT_NE(it, by_key.end()) << "series " << w.series << " origin " << w.origin_s;
        EXPECT_EQ(w.forecast, it->second.forecast)
            << "series " << w.series << " origin " << w.origin_s;
        if (w.origin_s + kHour <= cut) {
          EXPECT_EQ(w.peak, it->second.peak) << "series " << w.series << " origin " << w.origin_s;
        }
      }
    }
  }
}

TEST(EvaluateRollingTest, TwoRunsGiveIdenticalWindows) {
  const std::vector<UsageSeries> series = Fleet();
  const auto a = EvaluateRolling(series, kSpec, FourMakers());
  const auto b = EvaluateRolling(series, kSpec, FourMakers());
  ASSERT_EQ(a.size(), b.size());
  for (size_t m = 0; m < a.size(); ++m) {
    ASSERT_EQ(a[m].size(), b[m].size());
    EXPECT_GT(a[m].size(), 80u);
    for (size_t i = 0; i < a[m].size(); ++i) {
      EXPECT_EQ(a[m][i].series, b[m][i].series);
      EXPECT_EQ(a[m][i].origin_s, b[m][i].origin_s);
      EXPECT_EQ(a[m][i].forecast, b[m][i].forecast);
      EXPECT_EQ(a[m][i].peak, b[m][i].peak);
      EXPECT_LE(a[m][i].forecast, kSpec.request) << PredictorFactory::Names()[m];
    }
  }
}

// --- ScoreWindows ---

TEST(ScoreWindowsTest, HandComputedMetrics) {
  const std::vector<WindowScore> windows = {
      {0, 0, 14, 10},  // rel 0.4, slack 4/14
      {0, 0, 8, 10},   // rel 0.2, under
      {0, 0, 5, 0},    // no peak: left out
      {0, 0, 18, 10},  // rel 0.8, slack 8/18
      {0, 0, 11, 10},  // rel 0.1, slack 1/11
      {0, 0, 0, 0},    // left out
  };
  const PredictorMetrics m = ScoreWindows(windows);
  EXPECT_EQ(m.windows, 4);
  // Nearest rank over {0.1, 0.2, 0.4, 0.8}: the median is the 2nd, the p95 the 4th.
  EXPECT_DOUBLE_EQ(m.median_rel_err, 0.2);
  EXPECT_DOUBLE_EQ(m.p95_rel_err, 0.8);
  EXPECT_DOUBLE_EQ(m.under_rate, 0.25);
  EXPECT_DOUBLE_EQ(m.mean_slack, (4.0 / 14 + 0 + 8.0 / 18 + 1.0 / 11) / 4);
}

TEST(ScoreWindowsTest, NearestRankOnTwentyWindows) {
  std::vector<WindowScore> windows;
  for (int i = 20; i >= 1; --i) windows.push_back({0, 0, 100.0 + i, 100});  // rel i/100
  const PredictorMetrics m = ScoreWindows(windows);
  EXPECT_EQ(m.windows, 20);
  EXPECT_DOUBLE_EQ(m.median_rel_err, 0.10);  // rank 10
  EXPECT_DOUBLE_EQ(m.p95_rel_err, 0.19);     // rank 19
  EXPECT_EQ(m.under_rate, 0);
}

TEST(ScoreWindowsTest, AZeroForecastIsUnderWithNoSlack) {
  const std::vector<WindowScore> windows = {{0, 0, 0, 4}, {0, 0, 8, 4}};
  const PredictorMetrics m = ScoreWindows(windows);
  EXPECT_EQ(m.windows, 2);
  EXPECT_DOUBLE_EQ(m.under_rate, 0.5);
  EXPECT_DOUBLE_EQ(m.mean_slack, 0.25);  // (0 + 4/8) / 2
  EXPECT_DOUBLE_EQ(m.median_rel_err, 1.0);
  EXPECT_DOUBLE_EQ(m.p95_rel_err, 1.0);
}

TEST(ScoreWindowsTest, NoWindowWithAPeakGivesZeros) {
  for (const std::vector<WindowScore>& windows :
       {std::vector<WindowScore>{}, std::vector<WindowScore>{{0, 0, 3, 0}}}) {
    const PredictorMetrics m = ScoreWindows(windows);
    EXPECT_EQ(m.windows, 0);
    EXPECT_EQ(m.median_rel_err, 0);
    EXPECT_EQ(m.p95_rel_err, 0);
    EXPECT_EQ(m.under_rate, 0);
    EXPECT_EQ(m.mean_slack, 0);
  }
}

// --- FrontierSlack ---

TradeoffPoint Point(const std::string& predictor, double under, double slack) {
  TradeoffPoint p;
  p.predictor = predictor;
  p.knob = "k";
  p.metrics.under_rate = under;
  p.metrics.mean_slack = slack;
  return p;
}

TEST(FrontierSlackTest, LeastSlackWithinTheUnderRate) {
  const std::vector<TradeoffPoint> points = {Point("peak", 0.00, 0.5), Point("peak", 0.01, 0.3),
                                             Point("peak", 0.05, 0.1), Point("vpa", 0.0, 0.05)};
  EXPECT_DOUBLE_EQ(FrontierSlack(points, "peak", 0.0), 0.5);
  EXPECT_DOUBLE_EQ(FrontierSlack(points, "peak", 0.01), 0.3);  // the bound is inclusive
  EXPECT_DOUBLE_EQ(FrontierSlack(points, "peak", 0.049), 0.3);
  EXPECT_DOUBLE_EQ(FrontierSlack(points, "peak", 1.0), 0.1);
  EXPECT_DOUBLE_EQ(FrontierSlack(points, "vpa", 0.0), 0.05);
  EXPECT_TRUE(std::isnan(FrontierSlack(points, "peak", -0.01)));
  EXPECT_TRUE(std::isnan(FrontierSlack(points, "paladin", 1.0)));
  EXPECT_TRUE(std::isnan(FrontierSlack({}, "peak", 1.0)));
}

// --- StudyPredictors ---

TEST(StudyPredictorsTest, DefaultsMatchTheRollingEvaluationInTheOrderAsked) {
  std::vector<UsageSeries> series = Fleet();
  series.resize(4);
  auto study = StudyPredictors(series, kSpec, {"Peak", "request"}, false);
  PALADIN_ASSERT_OK(study);
  ASSERT_EQ(study->defaults.size(), 2u);
  EXPECT_EQ(study->defaults[0].first, "peak");
  EXPECT_EQ(study->defaults[1].first, "request");
  EXPECT_TRUE(study->tradeoff.empty());
  const std::vector<PredictorMaker> makers = {FourMakers()[1], FourMakers()[0]};
  const auto windows = EvaluateRolling(series, kSpec, makers);
  for (size_t i = 0; i < 2; ++i) {
    const PredictorMetrics m = ScoreWindows(windows[i]);
    EXPECT_EQ(study->defaults[i].second.windows, m.windows);
    EXPECT_EQ(study->defaults[i].second.mean_slack, m.mean_slack);
    EXPECT_EQ(study->defaults[i].second.under_rate, m.under_rate);
  }
}

TEST(StudyPredictorsTest, SweepsEachKnobAndTheDefaultPointMatches) {
  std::vector<UsageSeries> series = Fleet();
  series.resize(3);
  auto study = StudyPredictors(series, kSpec, {"peak", "vpa", "paladin"}, true);
  PALADIN_ASSERT_OK(study);
  std::map<std::string, int> points;
  for (const auto& p : study->tradeoff) ++points[p.predictor];
  EXPECT_EQ(points["peak"], 61);
  EXPECT_EQ(points["vpa"], 54);
  EXPECT_EQ(points["paladin"], 17);
  // The sweep's margin 1.2 is peak's default: same replay, same metrics.
  bool found = false;
  for (const auto& p : study->tradeoff) {
    if (p.predictor != "peak" || std::abs(p.value - 1.2) > 1e-9) continue;
    found = true;
    EXPECT_EQ(p.knob, "margin");
    EXPECT_EQ(p.metrics.mean_slack, study->defaults[0].second.mean_slack);
    EXPECT_EQ(p.metrics.under_rate, study->defaults[0].second.under_rate);
  }
  EXPECT_TRUE(found);
  const double frontier = FrontierSlack(study->tradeoff, "peak", 1.0);
  EXPECT_FALSE(std::isnan(frontier));
}

TEST(StudyPredictorsTest, UnknownPredictorIsAnError) {
  auto study = StudyPredictors(Fleet(), kSpec, {"peak", "oracle"}, false);
  ASSERT_FALSE(study.ok());
  EXPECT_THAT(study.status().message(), HasSubstr("'oracle'"));
}

}  // namespace
}  // namespace paladin::core
