#include "paladin/core/move_cost.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace paladin::core {

namespace {

bool Sane(double v) { return std::isfinite(v) && v >= 0; }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

const char* EstimateBasisName(EstimateBasis basis) {
  switch (basis) {
    case EstimateBasis::kPrior:
      return "prior";
    case EstimateBasis::kFleet:
      return "fleet";
    case EstimateBasis::kSourceNode:
      return "source node";
    case EstimateBasis::kPair:
      return "node pair";
  }
  return "prior";
}

void MoveCostModel::Add(Window* w, const MoveObservation& o) const {
  w->push_back(o);
  while (static_cast<int>(w->size()) > keep_) w->pop_front();
}

void MoveCostModel::Observe(const std::string& from, const std::string& to,
                            const MoveObservation& o) {
  if (!Sane(o.gpu_bytes) || !Sane(o.host_bytes) || !Sane(o.pause_s) || o.pause_s == 0) return;
  Add(&pairs_[{from, to}], o);
  Add(&sources_[from], o);
  Add(&fleet_, o);
}

// The window's moves, fitted to the prior's shape (module comment).
double MoveCostModel::FromWindow(const Window& w, double gpu_bytes, double host_bytes) const {
  const double fixed = prior_.fixed_s;
  auto variable = [&](double g, double h) { return prior_.DowntimeS(g, h) - fixed; };
  const double want = variable(gpu_bytes, host_bytes);
  double lo = INFINITY;
  double hi = 0;
  for (const MoveObservation& o : w) {
    const double v = variable(o.gpu_bytes, o.host_bytes);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  const bool spread = w.size() >= 3 && hi > 0 && hi >= 2 * lo;
  if (spread) {
    const double n = static_cast<double>(w.size());
    double sv = 0, sp = 0, svv = 0, svp = 0;
    for (const MoveObservation& o : w) {
      const double v = variable(o.gpu_bytes, o.host_bytes);
      sv += v;
      sp += o.pause_s;
      svv += v * v;
      svp += v * o.pause_s;
    }
    const double denom = n * svv - sv * sv;
    double b = denom > 0 ? (n * svp - sv * sp) / denom : 0;
    double a = (sp - b * sv) / n;
    if (b < 0) {  // pauses do not shrink with size: the fixed cost is all there is
      b = 0;
      a = sp / n;
    }
    if (a < 0) {  // no fixed cost: a line through zero
      a = 0;
      b = svv > 0 ? svp / svv : 0;
    }
    return a + b * want;
  }
  std::vector<double> ratios;
  ratios.reserve(w.size());
  for (const MoveObservation& o : w) {
    ratios.push_back(o.pause_s / prior_.DowntimeS(o.gpu_bytes, o.host_bytes));
  }
  return prior_.DowntimeS(gpu_bytes, host_bytes) * Median(std::move(ratios));
}

PauseEstimate MoveCostModel::Estimate(const std::string& from, const std::string& to,
                                      double gpu_bytes, double host_bytes) const {
  gpu_bytes = Sane(gpu_bytes) ? gpu_bytes : 0;
  host_bytes = Sane(host_bytes) ? host_bytes : 0;
  auto from_window = [&](const Window& w, EstimateBasis basis) {
    return PauseEstimate{FromWindow(w, gpu_bytes, host_bytes), basis, static_cast<int>(w.size())};
  };
  if (!to.empty()) {
    auto pair = pairs_.find({from, to});
    if (pair != pairs_.end() && !pair->second.empty())
      return from_window(pair->second, EstimateBasis::kPair);
  }
  auto source = sources_.find(from);
  if (source != sources_.end() && !source->second.empty())
    return from_window(source->second, EstimateBasis::kSourceNode);
  if (!fleet_.empty()) return from_window(fleet_, EstimateBasis::kFleet);
  return PauseEstimate{prior_.DowntimeS(gpu_bytes, host_bytes), EstimateBasis::kPrior, 0};
}

}  // namespace paladin::core
