// The server's predictions of its jobs and their live check (forecasts.h).
#include "forecasts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "paladin/base/size.h"

namespace paladin::server {
namespace {

// Sizes in a prediction's reason: the project's one formatter (negative ones never occur).
std::string Bytes(int64_t b) {
  return base::FormatSize(static_cast<uint64_t>(std::max<int64_t>(b, 0)));
}

}  // namespace

JobForecasts::JobForecasts() : factory_(*core::PredictorFactory::ForName("paladin")) {}

core::Predictor& JobForecasts::Of(const JobRecord& j) {
  std::unique_ptr<core::Predictor>& predictor = predictors_[j.seq];
  if (!predictor) {
    core::ResourceSpec spec;
    // What the user asked for: the ceiling they declared, else the quota.
    spec.request = static_cast<double>(j.mem_max > 0 ? std::max(j.ceiling_bytes, j.quota_bytes)
                                                     : j.quota_bytes);
    // What the job may grow to, above which no forecast goes: gpu_mem_max, the GPU for an
    // "auto" job, the quota for a fixed size (Bind sets the ceiling so).
    spec.ceiling = static_cast<double>(std::max(j.ceiling_bytes, j.quota_bytes));
    spec.window_s = kPredictionWindowS;
    predictor = factory_.Make(spec);
  }
  return *predictor;
}

bool JobForecasts::Observe(JobRecord& j, double now) {
  core::Predictor& predictor = Of(j);
  const auto t = static_cast<int64_t>(now);
  predictor.Observe(t, static_cast<double>(j.used_bytes));
  const core::Forecast f = predictor.Predict(t);
  auto check = checks_.try_emplace(j.seq, kPredictionWindowS).first;
  if (auto w = check->second.Sample(t, static_cast<double>(j.used_bytes), f))
    team_checks_[j.team].Add(w->totals);
  j.predicted_bytes = static_cast<int64_t>(f.value);
  char why[200];
  std::snprintf(why, sizeof why, "paladin predictor: next-minute peak %s (+/- %s), phase %s",
                Bytes(j.predicted_bytes).c_str(), Bytes(static_cast<int64_t>(f.sigma)).c_str(),
                std::string(core::PhaseName(f.phase)).c_str());
  j.prediction = why;
  int64_t& announced = announced_[j.seq];
  if (!j.mem_auto ||
      (announced > 0 && std::abs(static_cast<double>(j.predicted_bytes - announced)) <=
                            0.2 * static_cast<double>(announced))) {
    return false;
  }
  announced = j.predicted_bytes;
  return true;
}

void JobForecasts::Placed(const JobRecord& j) {
  if (j.mem_auto) announced_[j.seq] = j.quota_bytes;
  predictors_.erase(j.seq);
}

void JobForecasts::Released(const JobRecord& j) {
  predictors_.erase(j.seq);
  announced_.erase(j.seq);
}

void JobForecasts::LearnPeak(const JobRecord& j) {
  if (j.peak_used_bytes <= 0) return;
  int64_t& peak = class_peak_[j.ClassKey()];
  peak = std::max(peak, j.peak_used_bytes);
  ++class_jobs_[j.ClassKey()];
}

core::ClassHistory JobForecasts::ClassHistory(const std::string& class_key) const {
  core::ClassHistory h;
  h.name = class_key;
  if (auto peak = class_peak_.find(class_key); peak != class_peak_.end()) {
    h.peak_bytes = peak->second;
  }
  if (auto jobs = class_jobs_.find(class_key); jobs != class_jobs_.end()) h.jobs = jobs->second;
  return h;
}

const core::ForecastCheck* JobForecasts::Check(int64_t seq) const {
  auto c = checks_.find(seq);
  return c == checks_.end() ? nullptr : &c->second;
}

}  // namespace paladin::server
