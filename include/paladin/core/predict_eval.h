// Offline evaluation of predictors on usage series, by rolling origin: for each series, every
// window (one hour by default) from one window after its first sample, each predictor forecasts
// the peak of the next window having seen only samples from before it, and is scored against the
// realised peak. All series are replayed in one global time order, so what paladin's class
// model learned from other series also comes only from their past.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "paladin/core/predict.h"

namespace paladin::core {

struct UsageSample {
  int64_t t_s = 0;
  double value = 0;
};

struct UsageSeries {
  std::string id;
  std::vector<UsageSample> samples;  // strictly increasing times
};

struct WindowScore {
  int32_t series = 0;
  int64_t origin_s = 0;
  double forecast = 0;
  double peak = 0;  // the realised peak of the window
};

// Builds one predictor for one series. A maker may hold state shared across series (paladin's
// class model); a fresh maker is needed per run.
using PredictorMaker = std::function<std::unique_ptr<Predictor>(const ResourceSpec&)>;

// The predictor's windows, one vector per maker. When a window's realised usage first exceeds a
// forecast, the predictor is told of the out-of-memory event it would have caused.
std::vector<std::vector<WindowScore>> EvaluateRolling(std::span<const UsageSeries> series,
                                                      const ResourceSpec& spec,
                                                      std::span<const PredictorMaker> makers);

struct PredictorMetrics {
  int64_t windows = 0;  // windows with a non-zero realised peak
  double median_rel_err = 0;
  double p95_rel_err = 0;
  double under_rate = 0;  // share of windows whose forecast was below the peak
  double mean_slack = 0;  // mean of max(0, forecast - peak) / forecast
};
PredictorMetrics ScoreWindows(std::span<const WindowScore> windows);

// One point of a predictor's slack / under-prediction trade-off.
struct TradeoffPoint {
  std::string predictor;
  std::string knob;  // which parameter was varied
  double value = 0;  // its value
  PredictorMetrics metrics;
};

// The least slack among `points` of `predictor` whose under-rate is at most `max_under`
// (NaN when none qualifies): the predictor's frontier.
double FrontierSlack(std::span<const TradeoffPoint> points, const std::string& predictor,
                     double max_under);

// Every named predictor with its defaults, and (when `sweep`) each one again along its knob:
// peak's margin, vpa's target percentile and safety margin, paladin's quantile. One replay.
struct PredictorStudy {
  std::vector<std::pair<std::string, PredictorMetrics>> defaults;  // in the order asked
  std::vector<TradeoffPoint> tradeoff;
};
StatusOr<PredictorStudy> StudyPredictors(std::span<const UsageSeries> series,
                                         const ResourceSpec& spec,
                                         const std::vector<std::string>& names, bool sweep);

}  // namespace paladin::core
