#include "paladin/core/forecast_check.h"

#include <algorithm>

namespace paladin::core {

double CheckTotals::UnderRate() const {
  return windows > 0 ? static_cast<double>(under) / static_cast<double>(windows) : 0;
}

double CheckTotals::MeanSlack() const {
  return windows > 0 ? slack_sum / static_cast<double>(windows) : 0;
}

void CheckTotals::Add(const CheckTotals& other) {
  windows += other.windows;
  under += other.under;
  slack_sum += other.slack_sum;
}

std::optional<CheckedWindow> ForecastCheck::Sample(int64_t t_s, double used,
                                                   const Forecast& after) {
  std::optional<CheckedWindow> resolved;
  if (open_ && t_s >= origin_s_ + window_s_) {
    CheckedWindow w{origin_s_, forecast_, peak_, phase_, {}};
    if (peak_ > 0) {
      w.totals.windows = 1;
      w.totals.under = peak_ > forecast_ ? 1 : 0;
      w.totals.slack_sum = forecast_ > 0 ? std::max(0.0, forecast_ - peak_) / forecast_ : 0;
      totals_.Add(w.totals);
      phases_[static_cast<size_t>(phase_)].Add(w.totals);
    }
    resolved = w;
    open_ = false;
  }
  if (!open_) {
    open_ = true;
    origin_s_ = t_s;
    forecast_ = after.value;
    phase_ = after.phase;
    peak_ = used;
  } else {
    peak_ = std::max(peak_, used);
  }
  return resolved;
}

}  // namespace paladin::core
