// The live check of forecasts against measured peaks, on series whose answer is worked out by
// hand: which window a sample falls in, which forecast it is checked against, and the totals.
#include "paladin/core/forecast_check.h"

#include <gtest/gtest.h>

namespace paladin::core {
namespace {

Forecast F(double value, Phase phase = Phase::kSteady) { return Forecast{value, 0, phase}; }

TEST(ForecastCheckTest, EachWindowIsCheckedAgainstTheForecastInForceWhenItOpened) {
  ForecastCheck check(60);
  // Window [0, 60): forecast 10, peak 8 -> covered, slack 0.2.
  EXPECT_FALSE(check.Sample(0, 5, F(10)).has_value());
  EXPECT_FALSE(check.Sample(30, 8, F(4)).has_value());  // later forecasts do not count
  // Window [60, 120): forecast 6 (made at 60), peak 9 -> under, no slack.
  auto w = check.Sample(60, 6, F(6, Phase::kGrowth));
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->origin_s, 0);
  EXPECT_EQ(w->forecast, 10);
  EXPECT_EQ(w->peak, 8);
  EXPECT_EQ(w->totals.under, 0);
  EXPECT_DOUBLE_EQ(w->totals.slack_sum, 0.2);
  EXPECT_FALSE(check.Sample(119, 9, F(20)).has_value());
  // A gap: the next sample at 200 resolves [60, 120) and opens [200, 260).
  w = check.Sample(200, 1, F(4));
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->origin_s, 60);
  EXPECT_EQ(w->peak, 9);
  EXPECT_EQ(w->totals.under, 1);
  EXPECT_EQ(w->phase, Phase::kGrowth);
  EXPECT_EQ(check.totals().windows, 2);
  EXPECT_EQ(check.totals().under, 1);
  EXPECT_DOUBLE_EQ(check.totals().UnderRate(), 0.5);
  EXPECT_DOUBLE_EQ(check.totals().MeanSlack(), 0.1);
  EXPECT_EQ(check.by_phase(Phase::kGrowth).under, 1);
  EXPECT_EQ(check.by_phase(Phase::kSteady).windows, 1);
}

TEST(ForecastCheckTest, WindowsWithoutUsageAreLeftOutAsPredictEvalDoes) {
  ForecastCheck check(10);
  (void)check.Sample(0, 0, F(5));
  auto w = check.Sample(10, 0, F(5));
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->totals.windows, 0);
  EXPECT_EQ(check.totals().windows, 0);
  EXPECT_EQ(check.totals().UnderRate(), 0);
  EXPECT_EQ(check.totals().MeanSlack(), 0);
}

TEST(ForecastCheckTest, TotalsAdd) {
  CheckTotals a{4, 1, 1.0}, b{6, 2, 2.0};
  a.Add(b);
  EXPECT_EQ(a.windows, 10);
  EXPECT_DOUBLE_EQ(a.UnderRate(), 0.3);
  EXPECT_DOUBLE_EQ(a.MeanSlack(), 0.3);
}

}  // namespace
}  // namespace paladin::core
