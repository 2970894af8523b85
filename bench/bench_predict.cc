// Cost of one predictor update (Observe) and one forecast (Predict), per predictor, on a
// realistic series: a GenAI-like GPU-memory curve (a minute per sample, bursts of model loading
// over a steady floor). Compare against `peak` (a max and a multiply) measured in the same run:
// these machines are shared and noisy.
//
//   build/release/bench/bench_predict
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <vector>

#include "paladin/core/predict.h"
#include "paladin/core/rng.h"

namespace {

using namespace paladin;

constexpr double kGiB = 1024.0 * 1024 * 1024;

std::vector<double> Series(size_t n) {
  core::Rng rng(7);
  std::vector<double> v(n);
  double level = 24 * kGiB;
  for (size_t i = 0; i < n; ++i) {
    if (rng.Uniform(90) == 0) level = (20 + static_cast<double>(rng.Uniform(25))) * kGiB;
    v[i] = level + (i % 60 < 5 ? 8 * kGiB : 0);
  }
  return v;
}

void Observe(benchmark::State& state, const char* name) {
  auto factory = core::PredictorFactory::ForName(name);
  const core::ResourceSpec spec{48 * kGiB, 3600, 1};
  const std::vector<double> series = Series(1 << 16);
  auto p = factory->Make(spec);
  size_t i = 0;
  int64_t t = 0;
  for (auto _ : state) {
    p->Observe(t, series[i]);
    t += 60;
    if (++i == series.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}

// One forecast per window after an hour of samples, as the dynamic simulation and the agent ask.
void ObserveHourThenPredict(benchmark::State& state, const char* name) {
  auto factory = core::PredictorFactory::ForName(name);
  const core::ResourceSpec spec{48 * kGiB, 3600, 1};
  const std::vector<double> series = Series(1 << 16);
  // Several workloads share paladin's class model, so it has learned by the time we measure.
  std::vector<std::unique_ptr<core::Predictor>> warm;
  for (int k = 0; k < 8; ++k) warm.push_back(factory->Make(spec));
  for (int64_t m = 0; m < 24 * 60; ++m) {
    for (size_t k = 0; k < warm.size(); ++k) {
      warm[k]->Observe(m * 60, series[(static_cast<size_t>(m) * 7 + k * 101) % series.size()]);
    }
  }
  auto p = factory->Make(spec);
  size_t i = 0;
  int64_t t = 0;
  double sink = 0;
  for (auto _ : state) {
    for (int s = 0; s < 60; ++s) {
      p->Observe(t, series[i]);
      t += 60;
      if (++i == series.size()) i = 0;
    }
    sink += p->Predict(t).value;
  }
  benchmark::DoNotOptimize(sink);
  state.SetItemsProcessed(state.iterations() * 61);
}

}  // namespace

BENCHMARK_CAPTURE(Observe, peak, "peak");
BENCHMARK_CAPTURE(Observe, vpa, "vpa");
BENCHMARK_CAPTURE(Observe, paladin, "paladin");
BENCHMARK_CAPTURE(ObserveHourThenPredict, peak, "peak");
BENCHMARK_CAPTURE(ObserveHourThenPredict, vpa, "vpa");
BENCHMARK_CAPTURE(ObserveHourThenPredict, paladin, "paladin");

BENCHMARK_MAIN();
