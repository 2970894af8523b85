// The live check of a predictor: each window's forecast, the one in force when the window opened,
// against the peak measured in that window. The server keeps one per job and sums them per team
// and for the fleet, so a platform team sees how often sizing was short (the under-rate, against
// the configured target) and how much it left idle (the mean slack), as `predict eval` scores
// them offline. Pure, synchronous, not thread-safe (the caller's lock).
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "paladin/core/predict.h"

namespace paladin::core {

// Windows resolved, as `predict eval` scores them: windows whose peak is zero are left out.
struct CheckTotals {
  int64_t windows = 0;
  int64_t under = 0;         // windows whose peak was above the forecast
  double slack_sum = 0;      // sum over windows of max(0, forecast - peak) / forecast
  double UnderRate() const;  // 0 with no windows
  double MeanSlack() const;  // 0 with no windows
  void Add(const CheckTotals& other);
};

struct CheckedWindow {
  int64_t origin_s = 0;
  double forecast = 0;
  double peak = 0;
  Phase phase = Phase::kLoading;  // the forecast's phase
  CheckTotals totals;             // this window alone: 0 or 1 window
};

class ForecastCheck {
 public:
  explicit ForecastCheck(int64_t window_s) : window_s_(window_s > 0 ? window_s : 1) {}

  // A sample measured at t_s (times never go backwards), then the forecast made after it for
  // [t_s, t_s + window). A sample at or past the open window's end resolves that window first
  // (returned) and opens the next one with `after`; otherwise it joins the open window's peak.
  std::optional<CheckedWindow> Sample(int64_t t_s, double used, const Forecast& after);

  const CheckTotals& totals() const { return totals_; }
  const CheckTotals& by_phase(Phase p) const { return phases_[static_cast<size_t>(p)]; }

 private:
  int64_t window_s_;
  bool open_ = false;
  int64_t origin_s_ = 0;
  double forecast_ = 0, peak_ = 0;
  Phase phase_ = Phase::kLoading;
  CheckTotals totals_;
  std::array<CheckTotals, kPhaseCount> phases_{};
};

}  // namespace paladin::core
