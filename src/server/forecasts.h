// What the server predicts of its jobs, and how well (docs/predictors.md, "The live loop"): one
// core predictor per placed job (the `paladin` predictor, as the simulator uses), the live check
// of its forecasts per job and per team (core::ForecastCheck, over kPredictionWindowS windows),
// and each class's history of ended jobs for `auto` sizing (the highest peak seen, how many jobs
// it is over). In memory: a restarted server learns the history again from the stored jobs
// (LearnPeak for each at load) and starts the checks over. Control owns one; its methods run
// under Control's lock and take none.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "model.h"
#include "paladin/core/auto_size.h"
#include "paladin/core/forecast_check.h"
#include "paladin/core/predict.h"

namespace paladin::server {

// The server's predictor forecasts each job's peak over the next minute; the live check scores
// it over the same windows.
inline constexpr int64_t kPredictionWindowS = 60;

class JobForecasts {
 public:
  JobForecasts();
  JobForecasts(const JobForecasts&) = delete;
  JobForecasts& operator=(const JobForecasts&) = delete;

  // J's predictor, made on first use: its request is the ceiling the user declared, else the
  // quota; no forecast goes above what the job may grow to (its ceiling, or its quota).
  core::Predictor& Of(const JobRecord& j);
  // A measured usage of J at NOW: its predictor learns it, the forecast goes into
  // j.predicted_bytes and j.prediction, and the window it closes is scored. True when J is an
  // `auto` job whose forecast moved more than 20% from the one last announced (the caller says
  // so in an event; it is the one announced from here on).
  bool Observe(JobRecord& j, double now);
  // J was placed (an `auto` job's quota is its announced forecast) or released: its predictor
  // starts over at its next sample.
  void Placed(const JobRecord& j);
  void Released(const JobRecord& j);
  // J's measured peak joins its class's history (when it ends, and for every stored job at
  // load); a job that used nothing teaches nothing.
  void LearnPeak(const JobRecord& j);

  // The class's history of ended jobs (its measured Kubernetes pods are the caller's to add).
  core::ClassHistory ClassHistory(const std::string& class_key) const;
  // J's live check, or null before its first window.
  const core::ForecastCheck* Check(int64_t seq) const;
  // Every team's live check, summed over its jobs' windows.
  const std::map<std::string, core::CheckTotals>& team_checks() const { return team_checks_; }
  // The share of windows the predictor aims to under-predict.
  double target_under_rate() const { return 1 - factory_.paladin.quantile; }

 private:
  core::PredictorFactory factory_;
  std::map<int64_t, std::unique_ptr<core::Predictor>> predictors_;  // by job seq
  std::map<int64_t, int64_t> announced_;                            // by job seq
  std::map<int64_t, core::ForecastCheck> checks_;  // by job seq, kept after it ends (explain)
  std::map<std::string, core::CheckTotals> team_checks_;
  std::map<std::string, int64_t> class_peak_;  // ClassKey -> highest used bytes seen
  std::map<std::string, int64_t> class_jobs_;  // ClassKey -> ended jobs that peak is over
};

}  // namespace paladin::server
