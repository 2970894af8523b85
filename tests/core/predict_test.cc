// The resource-need predictors (request, peak, vpa, paladin) on synthetic usage curves whose
// right answers are known: step growth, a periodic load, a spike, out-of-memory events, and the
// request as a ceiling on every forecast.
#include "paladin/core/predict.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fleet_testing.h"
#include "paladin/core/rng.h"

namespace paladin::core {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr double kMiB = 1024.0 * 1024;
constexpr int64_t kHour = 3600;
constexpr int64_t kStep = 60;  // one sample a minute

ResourceSpec Spec(double request) { return ResourceSpec{request, kHour, 1}; }

// Feeds `p` one sample a minute over [from, to), the value given by `curve(t)`.
void Feed(Predictor& p, int64_t from, int64_t to, const std::function<double(int64_t)>& curve) {
  for (int64_t t = from; t < to; t += kStep) p.Observe(t, curve(t));
}

double Flat10(int64_t) { return 10 * kGiB; }
// 10 GiB for three hours, then 20 GiB.
double Step10To20(int64_t t) { return t < 3 * kHour ? 10 * kGiB : 20 * kGiB; }
// 8 GiB and 16 GiB in turn, each for 30 minutes (starting low), shifted by `shift` seconds.
double Square(int64_t t, int64_t shift = 0) {
  return ((t + shift) / 1800) % 2 == 0 ? 8 * kGiB : 16 * kGiB;
}
// 10 GiB with a single 30 GiB sample at 1 h 30 min.
double Spike(int64_t t) { return t == 5400 ? 30 * kGiB : 10 * kGiB; }

// The end of the VPA histogram bucket holding `bytes`, computed from the documented layout
// (first bucket 10 MB, each next 5% wider): what VPA reports as the percentile.
double VpaBucketEnd(double bytes, const VpaParams& p = {}) {
  for (int i = 0;; ++i) {
    const double end =
        p.first_bucket_bytes * (std::pow(p.bucket_ratio, i + 1) - 1) / (p.bucket_ratio - 1);
    if (end > bytes) return end;
  }
}

// All four predictors for one workload; paladin has a class model of its own.
std::vector<std::unique_ptr<Predictor>> AllPredictors(const ResourceSpec& spec) {
  std::vector<std::unique_ptr<Predictor>> out;
  out.push_back(MakeRequestPredictor(spec));
  out.push_back(MakePeakPredictor(spec, PeakParams{}));
  out.push_back(MakeVpaPredictor(spec, VpaParams{}));
  out.push_back(
      MakePaladinPredictor(spec, PaladinPredictorParams{}, std::make_shared<PaladinClassModel>()));
  return out;
}

// --- names and the factory ---

TEST(PredictorFactoryTest, NamesAreTheFourPredictorsInOrder) {
  EXPECT_THAT(PredictorFactory::Names(),
              ::testing::ElementsAre("request", "peak", "vpa", "paladin"));
}

TEST(PredictorFactoryTest, MakesEachPredictorByNameIgnoringCase) {
  for (const std::string name : {"request", "peak", "vpa", "paladin", "PALADIN", "Vpa"}) {
    auto f = PredictorFactory::ForName(name);
    PALADIN_ASSERT_OK(f);
    std::string lower = name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_EQ(f->name(), lower);
    EXPECT_EQ(f->Make(Spec(kGiB))->name(), lower);
  }
}

TEST(PredictorFactoryTest, UnknownNameListsTheValidOnes) {
  auto f = PredictorFactory::ForName("oracle");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(f.status().message(),
              AllOf(HasSubstr("'oracle'"), HasSubstr("request, peak, vpa, paladin")));
}

TEST(PredictorFactoryTest, FactoryParametersReachThePredictor) {
  auto f = PredictorFactory::ForName("peak");
  PALADIN_ASSERT_OK(f);
  f->peak.margin = 1.5;
  auto p = f->Make(Spec(100 * kGiB));
  p->Observe(0, 10 * kGiB);
  EXPECT_DOUBLE_EQ(p->Predict(60).value, 15 * kGiB);
}

TEST(PhaseNameTest, NamesEveryPhaseAndBase) {
  EXPECT_EQ(PhaseName(Phase::kLoading), "loading");
  EXPECT_EQ(PhaseName(Phase::kIdle), "idle");
  EXPECT_EQ(PhaseName(Phase::kGrowth), "growth");
  EXPECT_EQ(PhaseName(Phase::kSteady), "steady");
  EXPECT_EQ(PhaseName(Phase::kActive), "active");
  EXPECT_EQ(BaseName(PaladinBase::kRecent), "recent");
  EXPECT_EQ(BaseName(PaladinBase::kLast), "last");
  EXPECT_EQ(BaseName(PaladinBase::kHighest), "highest");
}

// --- request ---

TEST(RequestPredictorTest, AlwaysForecastsTheRequest) {
  auto p = MakeRequestPredictor(Spec(40 * kGiB));
  EXPECT_EQ(p->Predict(0).value, 40 * kGiB);
  for (int64_t t = 0; t < 6 * kHour; t += kStep) {
    p->Observe(t, Step10To20(t));
    if (t % 1800 == 0) p->ObserveOom(t, 50 * kGiB);
    ASSERT_EQ(p->Predict(t + kStep).value, 40 * kGiB) << "at t=" << t;
  }
}

// --- peak ---

TEST(PeakPredictorTest, ForecastsTheRequestBeforeAnySample) {
  auto p = MakePeakPredictor(Spec(40 * kGiB), PeakParams{});
  const Forecast f = p->Predict(0);
  EXPECT_EQ(f.value, 40 * kGiB);
  EXPECT_EQ(f.phase, Phase::kLoading);
}

TEST(PeakPredictorTest, StepGrowthIsTheMaxSoFarTimesTheMargin) {
  auto p = MakePeakPredictor(Spec(40 * kGiB), PeakParams{});
  Feed(*p, 0, 3 * kHour, Step10To20);
  EXPECT_DOUBLE_EQ(p->Predict(3 * kHour).value, 12 * kGiB);
  Feed(*p, 3 * kHour, 3 * kHour + 60, Step10To20);  // the first sample at 20 GiB
  EXPECT_DOUBLE_EQ(p->Predict(3 * kHour + 60).value, 24 * kGiB);
  Feed(*p, 3 * kHour + 60, 6 * kHour, Step10To20);
  EXPECT_DOUBLE_EQ(p->Predict(6 * kHour).value, 24 * kGiB);
}

TEST(PeakPredictorTest, StepGrowthIsCappedAtTheRequest) {
  auto p = MakePeakPredictor(Spec(22 * kGiB), PeakParams{});
  Feed(*p, 0, 6 * kHour, Step10To20);
  EXPECT_EQ(p->Predict(6 * kHour).value, 22 * kGiB);  // not 24 GiB
}

TEST(PeakPredictorTest, RemembersASpike) {
  auto p = MakePeakPredictor(Spec(40 * kGiB), PeakParams{});
  Feed(*p, 0, 6 * kHour, Spike);
  EXPECT_DOUBLE_EQ(p->Predict(6 * kHour).value, 36 * kGiB);
  auto capped = MakePeakPredictor(Spec(32 * kGiB), PeakParams{});
  Feed(*capped, 0, 6 * kHour, Spike);
  EXPECT_EQ(capped->Predict(6 * kHour).value, 32 * kGiB);
}

TEST(PeakPredictorTest, AnOomRaisesTheMaxToTheLimit) {
  auto p = MakePeakPredictor(Spec(40 * kGiB), PeakParams{});
  Feed(*p, 0, kHour, Flat10);
  p->ObserveOom(kHour, 15 * kGiB);
  EXPECT_DOUBLE_EQ(p->Predict(kHour).value, 18 * kGiB);
}

// --- vpa ---

TEST(VpaPredictorTest, ForecastsTheRequestBeforeAnySample) {
  auto p = MakeVpaPredictor(Spec(40 * kGiB), VpaParams{});
  const Forecast f = p->Predict(0);
  EXPECT_EQ(f.value, 40 * kGiB);
  EXPECT_EQ(f.phase, Phase::kLoading);
}

TEST(VpaPredictorTest, FlatSeriesGivesTheBucketEndTimesTheSafetyMargin) {
  auto p = MakeVpaPredictor(Spec(40 * kGiB), VpaParams{});
  Feed(*p, 0, 3 * kHour, Flat10);
  const double f = p->Predict(3 * kHour).value;
  // The p90 of the peaks is 10 GiB; VPA reports the end of its bucket (at most 5% + 10 MB above
  // it), then adds 15%.
  EXPECT_GT(f, 1.15 * 10 * kGiB);
  EXPECT_LE(f, 1.15 * (1.05 * 10 * kGiB + 1e7));
  EXPECT_DOUBLE_EQ(f, 1.15 * VpaBucketEnd(10 * kGiB));
}

TEST(VpaPredictorTest, StepGrowthMovesUpOnceTheNewLevelHoldsTenPercentOfThePeaks) {
  auto p = MakeVpaPredictor(Spec(40 * kGiB), VpaParams{});
  const double low = 1.15 * VpaBucketEnd(10 * kGiB);
  const double high = 1.15 * VpaBucketEnd(20 * kGiB);
  Feed(*p, 0, 3 * kHour, Step10To20);
  EXPECT_DOUBLE_EQ(p->Predict(3 * kHour).value, low);
  // Ten minutes in: 2 of 38 five-minute peaks at 20 GiB, under 10% of the weight.
  Feed(*p, 3 * kHour, 3 * kHour + 600, Step10To20);
  EXPECT_DOUBLE_EQ(p->Predict(3 * kHour + 600).value, low);
  // An hour in: 12 of 48, the p90 is now in the 20 GiB bucket.
  Feed(*p, 3 * kHour + 600, 4 * kHour, Step10To20);
  EXPECT_DOUBLE_EQ(p->Predict(4 * kHour).value, high);
  EXPECT_GE(high, 1.15 * 20 * kGiB);
}

TEST(VpaPredictorTest, ForgetsASingleSpikeAmongManyPeaks) {
  // One five-minute peak in 72 is under the 10% above the p90.
  auto p = MakeVpaPredictor(Spec(40 * kGiB), VpaParams{});
  Feed(*p, 0, 6 * kHour, Spike);
  EXPECT_DOUBLE_EQ(p->Predict(6 * kHour).value, 1.15 * VpaBucketEnd(10 * kGiB));
}

TEST(VpaPredictorTest, AnOomOnAnEmptyHistoryBumpsByTwentyPercent) {
  auto p = MakeVpaPredictor(Spec(40 * kGiB), VpaParams{});
  p->ObserveOom(0, 10 * kGiB);  // max(1.2 x 10 GiB, 10 GiB + 100 MiB) = 12 GiB
  const double f = p->Predict(60).value;
  EXPECT_GE(f, 1.15 * 1.2 * 10 * kGiB);
  EXPECT_DOUBLE_EQ(f, 1.15 * VpaBucketEnd(12 * kGiB));
}

TEST(VpaPredictorTest, AnOomOnASmallLimitBumpsByAtLeast100MiB) {
  auto p = MakeVpaPredictor(Spec(40 * kGiB), VpaParams{});
  p->ObserveOom(0, 300 * kMiB);  // max(360 MiB, 400 MiB) = 400 MiB
  const double f = p->Predict(60).value;
  EXPECT_GE(f, 1.15 * 400 * kMiB);
  EXPECT_DOUBLE_EQ(f, 1.15 * VpaBucketEnd(400 * kMiB));
}

TEST(VpaPredictorTest, RepeatedOomsDominateTheHistogram) {
  auto p = MakeVpaPredictor(Spec(40 * kGiB), VpaParams{});
  for (int64_t t = 0; t < kHour; t += 300) p->ObserveOom(t, 10 * kGiB);
  EXPECT_GE(p->Predict(kHour).value, 1.2 * 10 * kGiB);
}

TEST(VpaPredictorTest, NeverBelowTheMinimumRecommendation) {
  auto p = MakeVpaPredictor(Spec(40 * kGiB), VpaParams{});
  Feed(*p, 0, kHour, [](int64_t) { return kMiB; });
  EXPECT_EQ(p->Predict(kHour).value, 250 * kMiB);
}

TEST(VpaPredictorTest, ValuesInOtherUnitsAreScaledByUnitBytes) {
  // The same series in GiB with unit_bytes = 1 GiB gives the same forecast, in GiB.
  auto bytes = MakeVpaPredictor(Spec(40 * kGiB), VpaParams{});
  auto gib = MakeVpaPredictor(ResourceSpec{40, kHour, kGiB}, VpaParams{});
  Feed(*bytes, 0, 6 * kHour, Step10To20);
  Feed(*gib, 0, 6 * kHour, [](int64_t t) { return Step10To20(t) / kGiB; });
  EXPECT_DOUBLE_EQ(gib->Predict(6 * kHour).value * kGiB, bytes->Predict(6 * kHour).value);
}

// --- paladin ---

TEST(PaladinPredictorTest, PhasesOfFlatVaryingIdleAndYoungSeries) {
  const auto phase_at = [](const std::function<double(int64_t)>& curve, int64_t now) {
    auto p = MakePaladinPredictor(Spec(40 * kGiB), PaladinPredictorParams{},
                                  std::make_shared<PaladinClassModel>());
    Feed(*p, 0, now, curve);
    return p->Predict(now).phase;
  };
  const auto square = [](int64_t t) { return Square(t); };
  EXPECT_EQ(phase_at(Flat10, 2 * kHour), Phase::kSteady);
  EXPECT_EQ(phase_at(square, 2 * kHour), Phase::kActive);
  EXPECT_EQ(phase_at([](int64_t) { return 0.0; }, 2 * kHour), Phase::kIdle);
  EXPECT_EQ(phase_at(Flat10, 1800), Phase::kLoading);
  EXPECT_EQ(phase_at(square, kHour - kStep), Phase::kLoading);
  // Once the old level has left the window, the new one is steady.
  EXPECT_EQ(phase_at(Step10To20, 5 * kHour + 1800), Phase::kSteady);
}

// kGrowth: the last window's peak clearly above anything before it. A step from 10 to 20 GiB and
// a steady ramp (1 GiB an hour from 2 GiB) are growth.
TEST(PaladinPredictorTest, PhaseIsGrowthWhenTheLastPeakIsAboveEverythingBefore) {
  const auto phase_at = [](const std::function<double(int64_t)>& curve, int64_t now) {
    auto p = MakePaladinPredictor(Spec(40 * kGiB), PaladinPredictorParams{},
                                  std::make_shared<PaladinClassModel>());
    Feed(*p, 0, now, curve);
    return p->Predict(now).phase;
  };
  // Window [2.5 h, 3.5 h) peaks at 20 GiB; everything before 2.5 h was 10 GiB.
  EXPECT_EQ(phase_at(Step10To20, 3 * kHour + 1800), Phase::kGrowth);
  // An hour later half an hour of 20 GiB lies before the window: no longer growth.
  EXPECT_EQ(phase_at(Step10To20, 4 * kHour + 1800), Phase::kSteady);
  // Window [3 h, 4 h) peaks near 6 GiB; everything before 3 h was under 5 GiB.
  const auto ramp = [](int64_t t) { return 2 * kGiB + static_cast<double>(t) / kHour * kGiB; };
  EXPECT_EQ(phase_at(ramp, 4 * kHour), Phase::kGrowth);
  // A drop then a climb above the old peak is growth too (the old peak left the window
  // undominated).
  const auto dip = [](int64_t t) { return (t < kHour ? 10 : t < 2 * kHour ? 5 : 20) * kGiB; };
  EXPECT_EQ(phase_at(dip, 2 * kHour + 1800), Phase::kGrowth);
}

TEST(PaladinPredictorTest, LoadingForecastIsTheRequest) {
  auto p = MakePaladinPredictor(Spec(40 * kGiB), PaladinPredictorParams{},
                                std::make_shared<PaladinClassModel>());
  EXPECT_EQ(p->Predict(0).value, 40 * kGiB);
  Feed(*p, 0, 1800, Flat10);
  EXPECT_EQ(p->Predict(1800).value, 40 * kGiB);
}

TEST(PaladinPredictorTest, ColdClassModelForecastsTwiceTheRecentPeak) {
  auto p = MakePaladinPredictor(Spec(40 * kGiB), PaladinPredictorParams{},
                                std::make_shared<PaladinClassModel>());
  Feed(*p, 0, 3 * kHour, [](int64_t t) { return Square(t); });
  EXPECT_NEAR(p->Predict(3 * kHour).value, 32 * kGiB, 1e-6 * kGiB);
}

// Eight workloads of one class (one factory), fed in lockstep: the class model learns that a
// square wave's next peak is its last one, and the forecast covers the 16 GiB peak closely.
TEST(PaladinPredictorTest, SharedClassModelLearnsThePeriodicPeak) {
  auto factory = PredictorFactory::ForName("paladin");
  PALADIN_ASSERT_OK(factory);
  const ResourceSpec spec = Spec(40 * kGiB);
  std::vector<std::unique_ptr<Predictor>> fleet;
  for (int i = 0; i < 8; ++i) fleet.push_back(factory->Make(spec));
  // The same workload alone, with a class model of its own: still cold.
  auto alone =
      MakePaladinPredictor(spec, PaladinPredictorParams{}, std::make_shared<PaladinClassModel>());
  // 8 x 8 resolved active windows: enough for the default 0.98 quantile's finite-sample
  // correction (ceil(65 x 0.98) = 64 of 64); with fewer, no finite reading would cover it.
  const int64_t end = 10 * kHour;
  for (int64_t t = 0; t < end; t += kStep) {
    for (size_t i = 0; i < fleet.size(); ++i) {
      fleet[i]->Observe(t, Square(t, 420 * static_cast<int64_t>(i)));
    }
    alone->Observe(t, Square(t));
  }
  for (size_t i = 0; i < fleet.size(); ++i) {
    const Forecast f = fleet[i]->Predict(end);
    EXPECT_EQ(f.phase, Phase::kActive) << "workload " << i;
    EXPECT_GE(f.value, 16 * kGiB) << "workload " << i;
    EXPECT_LE(f.value, 16 * kGiB * 1.01) << "workload " << i;
    EXPECT_GE(f.sigma, 0) << "workload " << i;
  }
  EXPECT_NEAR(alone->Predict(end).value, 32 * kGiB, 1e-6 * kGiB);
}

TEST(PaladinPredictorTest, AnOomRaisesTheNextWindowToTwentyPercentAboveTheLimit) {
  auto p = MakePaladinPredictor(Spec(40 * kGiB), PaladinPredictorParams{},
                                std::make_shared<PaladinClassModel>());
  const auto flat5 = [](int64_t) { return 5 * kGiB; };
  Feed(*p, 0, 2 * kHour, flat5);
  EXPECT_NEAR(p->Predict(2 * kHour).value, 10 * kGiB, 1e-6 * kGiB);  // cold: 2 x 5 GiB
  p->ObserveOom(2 * kHour, 10 * kGiB);
  EXPECT_DOUBLE_EQ(p->Predict(2 * kHour + 60).value, 12 * kGiB);
  Feed(*p, 2 * kHour, 3 * kHour, flat5);
  EXPECT_DOUBLE_EQ(p->Predict(3 * kHour - 60).value, 12 * kGiB);
  // A window later the floor is gone.
  EXPECT_NEAR(p->Predict(3 * kHour).value, 10 * kGiB, 1e-6 * kGiB);
}

// A ceiling above the request (the server's "auto" jobs, whose quota grows up to their GPU): an
// OOM at the request is forecast above it, up to the ceiling; without one, the request caps it.
TEST(PaladinPredictorTest, AnOomForecastGoesAboveTheRequestUpToTheCeiling) {
  ResourceSpec capped = Spec(10 * kGiB);
  ResourceSpec roomy = capped;
  roomy.ceiling = 11 * kGiB;
  for (const ResourceSpec& spec : {capped, roomy}) {
    auto p =
        MakePaladinPredictor(spec, PaladinPredictorParams{}, std::make_shared<PaladinClassModel>());
    Feed(*p, 0, 2 * kHour, [](int64_t) { return 4 * kGiB; });
    EXPECT_NEAR(p->Predict(2 * kHour).value, 8 * kGiB, 1e-6 * kGiB);  // cold: 2 x 4 GiB
    p->ObserveOom(2 * kHour, 10 * kGiB);                              // floor 12 GiB
    EXPECT_DOUBLE_EQ(p->Predict(2 * kHour + 60).value, spec.ceiling > 0 ? 11 * kGiB : 10 * kGiB);
  }
}

// An OOM's floor lasts one window. A later OOM at a lower limit must not bring back the floor of
// an earlier, already expired one.
TEST(PaladinPredictorTest, AnExpiredOomFloorDoesNotComeBack) {
  auto p = MakePaladinPredictor(Spec(40 * kGiB), PaladinPredictorParams{},
                                std::make_shared<PaladinClassModel>());
  const auto flat5 = [](int64_t) { return 5 * kGiB; };
  Feed(*p, 0, 2 * kHour, flat5);
  p->ObserveOom(2 * kHour, 20 * kGiB);  // floor 24 GiB until 3 h
  EXPECT_DOUBLE_EQ(p->Predict(2 * kHour + 60).value, 24 * kGiB);
  Feed(*p, 2 * kHour, 4 * kHour, flat5);
  EXPECT_NEAR(p->Predict(4 * kHour).value, 10 * kGiB, 1e-6 * kGiB);
  // A sample exceeds the 10 GiB forecast: the next window's floor is 1.2 x 10 GiB.
  p->ObserveOom(4 * kHour, 10 * kGiB);
  EXPECT_DOUBLE_EQ(p->Predict(4 * kHour + 60).value, 12 * kGiB);
}

// A forecast depends only on the samples observed, not on when earlier forecasts were asked
// for: asking between two window boundaries must not change what the class model learns.
TEST(PaladinPredictorTest, AskingForAForecastDoesNotChangeWhatIsLearned) {
  PaladinPredictorParams params;
  params.min_class_windows = 1;
  const ResourceSpec spec = Spec(40 * kGiB);
  auto asked_model = std::make_shared<PaladinClassModel>();
  auto quiet_model = std::make_shared<PaladinClassModel>();
  auto asked = MakePaladinPredictor(spec, params, asked_model);
  auto quiet = MakePaladinPredictor(spec, params, quiet_model);
  // 10 GiB, then 20 GiB over [1 h, 1.5 h), 10 GiB to 2 h; a gap; 10 GiB again from 2.5 h.
  const auto curve = [](int64_t t) { return t >= kHour && t < 5400 ? 20 * kGiB : 10 * kGiB; };
  for (auto* p : {asked.get(), quiet.get()}) Feed(*p, 0, 2 * kHour, curve);
  (void)asked->Predict(2 * kHour + 1800);  // in the gap
  for (auto* p : {asked.get(), quiet.get()}) Feed(*p, 2 * kHour + 1800, 5 * kHour, curve);
  for (Phase ph : {Phase::kLoading, Phase::kIdle, Phase::kGrowth, Phase::kSteady, Phase::kActive}) {
    EXPECT_EQ(asked_model->count(ph), quiet_model->count(ph)) << PhaseName(ph);
  }
  EXPECT_EQ(asked->Predict(5 * kHour).value, quiet->Predict(5 * kHour).value);
}

// --- the class model ---

TEST(PaladinClassModelTest, CountsPerPhaseAndPooledWithoutLoading) {
  PaladinClassModel m;
  m.Add(Phase::kLoading, {0, 0, 0});
  m.Add(Phase::kSteady, {0, 0, 0});
  m.Add(Phase::kSteady, {0.1, 0.1, 0.1});
  m.Add(Phase::kActive, {0, 0, 0});
  EXPECT_EQ(m.count(Phase::kLoading), 1);
  EXPECT_EQ(m.count(Phase::kSteady), 2);
  EXPECT_EQ(m.count(Phase::kActive), 1);
  EXPECT_EQ(m.count(Phase::kIdle), 0);
  EXPECT_EQ(m.pooled_count(), 3);
}

TEST(PaladinClassModelTest, ChoosesTheBaseWithTheLeastSlack) {
  // Against base "recent" the next peak varies (log ratios 0 .. 0.99), against "highest" half as
  // much; against "last" it is always the same (0.2): "last" leaves less slack at any quantile.
  PaladinClassModel m;
  for (int i = 0; i < 100; ++i) m.Add(Phase::kActive, {0.01 * i, 0.2, 0.5 + 0.005 * i});
  const auto c = m.Choose(Phase::kActive, 0.9, false);
  EXPECT_EQ(c.base, PaladinBase::kLast);
  EXPECT_NEAR(c.log_q, 0.2, 0.006);  // the upper edge of a 0.005-wide bin
  EXPECT_GE(c.log_q, 0.2);
  EXPECT_NEAR(c.exp_slack, 0, 0.006);
  // Against "last" and "highest" the ratios spread twice and three times as wide: "recent" wins,
  // its 0.9 quantile the 90th of 100 ratios, 0.89.
  PaladinClassModel recent_only;
  for (int i = 0; i < 100; ++i) recent_only.Add(Phase::kActive, {0.01 * i, 0.02 * i, 0.03 * i});
  const auto r = recent_only.Choose(Phase::kActive, 0.9, false);
  EXPECT_EQ(r.base, PaladinBase::kRecent);
  EXPECT_NEAR(r.log_q, 0.89, 0.006);
}

TEST(PaladinClassModelTest, QuantilesAndSlackAreThoseOfTheWindowsForAnyLevel) {
  // The model reads a quantile and the sums below it from prefix sums; a scan of the windows
  // themselves (binned as the model bins them: 0.005 wide over [-3, 3)) must agree at every
  // level, the levels above 1 (a class with few windows) reading the range's top.
  Rng rng(7);
  PaladinClassModel m;
  std::array<std::vector<int>, 3> bins;
  const auto bin = [](double x) {
    return static_cast<int>((std::clamp(x, -3.0, 3.0 - 1e-9) + 3.0) / 6.0 * 1200);
  };
  for (int i = 0; i < 500; ++i) {
    const double r = -0.8 + 1.6 * rng.UniformDouble();
    const PaladinClassModel::Ratios ratios = {r, 2 * r, 0.4 + 0.1 * r};
    m.Add(Phase::kActive, ratios);
    for (size_t b = 0; b < 3; ++b) bins[b].push_back(bin(ratios[b]));
  }
  for (auto& v : bins) std::sort(v.begin(), v.end());
  for (const double q : {0.02, 0.5, 0.9, 0.99, 1.0, 1.3}) {
    const auto want = static_cast<size_t>(std::max(1.0, std::ceil(q * 500 - 1e-9)));
    // Each base's quantile and mean slack; the model picks the least slack.
    size_t best = 0;
    std::array<double, 3> log_q{}, slack{};
    for (size_t b = 0; b < 3; ++b) {
      const int top = want > bins[b].size() ? 1199 : bins[b][want - 1];
      log_q[b] = want > bins[b].size() ? 3.0 : -3.0 + 6.0 * (top + 1) / 1200;
      for (const int k : bins[b]) {
        if (k <= top) slack[b] += (1 - std::exp(-3.0 + 6.0 * (k + 0.5) / 1200 - log_q[b])) / 500;
      }
      if (slack[b] < slack[best]) best = b;
    }
    const auto c = m.Choose(Phase::kActive, q, false);
    EXPECT_EQ(c.base, static_cast<PaladinBase>(best)) << q;
    EXPECT_NEAR(c.log_q, log_q[best], 1e-9) << q;
    EXPECT_NEAR(c.exp_slack, slack[best], 1e-9) << q;
  }
}

// --- every predictor ---

TEST(AllPredictorsTest, PeriodicLoadIsCoveredAfterAFewHours) {
  const ResourceSpec spec = Spec(40 * kGiB);
  for (auto& p : AllPredictors(spec)) {
    Feed(*p, 0, 4 * kHour, [](int64_t t) { return Square(t); });
    const double f = p->Predict(4 * kHour).value;
    EXPECT_GE(f, 16 * kGiB) << p->name();
    EXPECT_LE(f, 40 * kGiB) << p->name();
  }
  auto peak = MakePeakPredictor(spec, PeakParams{});
  Feed(*peak, 0, 4 * kHour, [](int64_t t) { return Square(t); });
  EXPECT_DOUBLE_EQ(peak->Predict(4 * kHour).value, 1.2 * 16 * kGiB);
  auto vpa = MakeVpaPredictor(spec, VpaParams{});
  Feed(*vpa, 0, 4 * kHour, [](int64_t t) { return Square(t); });
  EXPECT_DOUBLE_EQ(vpa->Predict(4 * kHour).value, 1.15 * VpaBucketEnd(16 * kGiB));
}

// No forecast, at any time, on any curve, after any OOM, is above the request.
TEST(AllPredictorsTest, NoForecastExceedsTheRequest) {
  const std::vector<std::function<double(int64_t)>> curves = {Flat10, Step10To20, Spike,
                                                              [](int64_t t) { return Square(t); }};
  for (double request : {5 * kGiB, 18 * kGiB, 32 * kGiB}) {
    for (size_t c = 0; c < curves.size(); ++c) {
      for (auto& p : AllPredictors(Spec(request))) {
        for (int64_t t = 0; t < 6 * kHour; t += kStep) {
          const double f = p->Predict(t).value;
          ASSERT_LE(f, request) << p->name() << " curve " << c << " t=" << t;
          ASSERT_GT(f, 0) << p->name() << " curve " << c << " t=" << t;
          const double v = curves[c](t);
          p->Observe(t, v);
          if (v > f) p->ObserveOom(t, f);
        }
        if (request == 5 * kGiB) {  // every curve is above it: every forecast is the request
          EXPECT_EQ(p->Predict(6 * kHour).value, request) << p->name() << " curve " << c;
        }
      }
    }
  }
}

TEST(AllPredictorsTest, AHugeOomIsStillCappedAtTheRequest) {
  for (auto& p : AllPredictors(Spec(20 * kGiB))) {
    Feed(*p, 0, 2 * kHour, Flat10);
    p->ObserveOom(2 * kHour, 100 * kGiB);
    const double f = p->Predict(2 * kHour + 60).value;
    EXPECT_LE(f, 20 * kGiB) << p->name();
    // VPA's bumped sample is one five-minute peak in 25; the others jump to the limit.
    if (p->name() != "vpa") {
      EXPECT_EQ(f, 20 * kGiB) << p->name();
    }
  }
}

}  // namespace
}  // namespace paladin::core
