// Offline evaluation of predictors on usage series, by rolling origin: for each series, every
// window (one hour by default) from one window after its first sample, each predictor forecasts
// the peak of the next window having seen only samples from before it, and is scored against the
// realised peak. All series are replayed in one global time order, so what paladin's class
// model learned from other series also comes only from their past.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
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
  double peak = 0;                // the realised peak of the window
  Phase phase = Phase::kLoading;  // the phase the forecast was made in
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
// `paladin` is paladin's parameters, which its sweep varies the quantile of.
StatusOr<PredictorStudy> StudyPredictors(std::span<const UsageSeries> series,
                                         const ResourceSpec& spec,
                                         const std::vector<std::string>& names, bool sweep,
                                         const PaladinPredictorParams& paladin = {});

// --- out of sample: K folds by pod ------------------------------------------------------------

// The fold (0 .. folds-1) of the workload `id`: a hash of the id and the seed, so a pod falls in
// the same fold in every resource's file and the split does not depend on which pods are read.
int FoldOf(std::string_view id, int folds, uint64_t seed);

// Paladin's class model trained on `training` only: the series are replayed (in one global time
// order, as EvaluateRolling does) through predictors with `params` sharing one model, which is
// then frozen. What it learns does not depend on params.quantile or params.aci_rate.
std::shared_ptr<PaladinClassModel> TrainClassModel(std::span<const UsageSeries> training,
                                                   const ResourceSpec& spec,
                                                   const PaladinPredictorParams& params);

// For each fold f of FoldOf(id, folds, seed), a class model trained on the series of every other
// fold (series with no samples are left out): what a held-out workload of fold f may be forecast
// with. The same models `CrossValidate` scores paladin's default with.
std::vector<std::shared_ptr<const PaladinClassModel>> TrainFoldModels(
    std::span<const UsageSeries> series, const ResourceSpec& spec,
    const PaladinPredictorParams& params, int folds, uint64_t seed);

// One predictor setting scored out of sample. `prepare` is called once per fold with the series
// of the other folds, the only ones it may learn from, and returns the maker for the held-out
// fold's series (paladin: a class model trained on the others, then frozen).
struct Candidate {
  std::string predictor;
  std::string knob = "default";
  double value = 0;
  bool is_default = true;
  std::function<PredictorMaker(std::span<const UsageSeries> training)> prepare;
};

// A candidate for each named predictor with its defaults (paladin at `paladin`), and when
// `sweep` each one again along its knob as in StudyPredictors.
StatusOr<std::vector<Candidate>> MakeCandidates(const std::vector<std::string>& names, bool sweep,
                                                const PaladinPredictorParams& paladin,
                                                const ResourceSpec& spec);

struct CrossValidation {
  int folds = 0;
  std::vector<int32_t> fold_of;  // by series index
  // By candidate: every held-out window, each scored by the candidate prepared without its fold.
  std::vector<std::vector<WindowScore>> windows;
};
// Each fold's series are replayed (in one global time order, as EvaluateRolling does) with every
// candidate prepared on the other folds. Series with no samples are left out of every fold.
CrossValidation CrossValidate(std::span<const UsageSeries> series, const ResourceSpec& spec,
                              std::span<const Candidate> candidates, int folds, uint64_t seed);

// The windows of `fold` only (-1: all).
std::vector<WindowScore> FoldWindows(const CrossValidation& cv, size_t candidate, int fold);

// A percentile bootstrap over pods: `resamples` draws of as many pods as scored, with
// replacement (seeded, deterministic); the same draws for every candidate, so intervals of two
// predictors are paired. A statistic that does not exist in a draw (no setting reaches the
// under-rate) counts as +infinity.
struct Interval {  // NaN when there were no draws
  double lo = std::numeric_limits<double>::quiet_NaN();
  double hi = std::numeric_limits<double>::quiet_NaN();
};
class PodBootstrap {
 public:
  PodBootstrap(const CrossValidation& cv, int resamples, uint64_t seed);
  // Of the candidate's pooled under-rate and mean slack.
  Interval UnderRate(size_t candidate, double level = 0.95) const;
  Interval MeanSlack(size_t candidate, double level = 0.95) const;
  // Of the least mean slack among `candidates` whose under-rate is at most max_under.
  Interval Frontier(std::span<const size_t> candidates, double max_under,
                    double level = 0.95) const;

 private:
  static Interval Percentiles(std::vector<double> v, double level);
  // [candidate][draw]: the pooled under-rate and mean slack of the draw's pods.
  std::vector<std::vector<double>> under_, slack_;
};

}  // namespace paladin::core
