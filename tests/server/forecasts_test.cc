// The server's forecasts of its jobs (src/server/forecasts.h) alone: an `auto` job's forecast
// announced when it moves more than a fifth from the last one announced, a fixed-size job's
// never; the live check scoring one window per minute for the job and its team; a class's
// history learning the peaks of the jobs that used memory. Time is the samples' own.
#include "server/forecasts.h"

#include <gtest/gtest.h>

namespace paladin::server {
namespace {

JobRecord Job(bool mem_auto) {
  JobRecord j;
  j.seq = 1;
  j.id = "j-000001";
  j.team = "vision";
  j.command = {"python", "train.py"};
  j.mem_auto = mem_auto;
  j.quota_bytes = 8 * kGiB;
  j.ceiling_bytes = 80 * kGiB;
  return j;
}

TEST(JobForecastsTest, AnAutoJobsForecastIsAnnouncedOnlyWhenItMovesAFifth) {
  JobForecasts forecasts;
  JobRecord j = Job(true);
  forecasts.Placed(j);  // its quota, 8 GiB, is the forecast announced at placement
  j.used_bytes = 8 * kGiB;
  int announced = 0;
  for (int t = 0; t < 30; ++t) announced += forecasts.Observe(j, 1000.0 + t) ? 1 : 0;
  EXPECT_LE(announced, 1) << j.prediction;  // once at most, while its margin settles
  EXPECT_NE(j.prediction.find("paladin predictor: next-minute peak"), std::string::npos);
  announced = 0;
  for (int t = 30; t < 90; ++t) announced += forecasts.Observe(j, 1000.0 + t) ? 1 : 0;
  EXPECT_EQ(announced, 0) << j.prediction;  // steady: nothing new to say

  j.used_bytes = 20 * kGiB;  // far above: the forecast follows, and says so
  for (int t = 90; t < 120; ++t) announced += forecasts.Observe(j, 1000.0 + t) ? 1 : 0;
  EXPECT_GE(announced, 1);
  EXPECT_GT(j.predicted_bytes, 8 * kGiB * 6 / 5);

  JobRecord fixed = Job(false);
  fixed.seq = 2;
  fixed.used_bytes = 20 * kGiB;
  for (int t = 0; t < 60; ++t) EXPECT_FALSE(forecasts.Observe(fixed, 1000.0 + t));
}

TEST(JobForecastsTest, TheLiveCheckScoresAWindowAMinuteForTheJobAndItsTeam) {
  JobForecasts forecasts;
  JobRecord j = Job(false);
  j.used_bytes = 4 * kGiB;
  EXPECT_EQ(forecasts.Check(j.seq), nullptr);
  for (int t = 0; t <= 3 * kPredictionWindowS; ++t) forecasts.Observe(j, 6000.0 + t);
  ASSERT_NE(forecasts.Check(j.seq), nullptr);
  const int64_t windows = forecasts.Check(j.seq)->totals().windows;
  EXPECT_GE(windows, 2);
  EXPECT_LE(windows, 3);
  EXPECT_EQ(forecasts.team_checks().at("vision").windows, windows);
  EXPECT_NEAR(forecasts.target_under_rate(), 0.02, 1e-9);
}

TEST(JobForecastsTest, AClassLearnsThePeaksOfTheJobsThatUsedMemory) {
  JobForecasts forecasts;
  JobRecord a = Job(true);
  a.peak_used_bytes = 6 * kGiB;
  JobRecord b = Job(true);
  b.seq = 2;
  b.peak_used_bytes = 9 * kGiB;
  JobRecord idle = Job(true);
  idle.seq = 3;  // used nothing: teaches nothing
  for (const JobRecord* j : {&a, &b, &idle}) forecasts.LearnPeak(*j);
  const core::ClassHistory h = forecasts.ClassHistory(a.ClassKey());
  EXPECT_EQ(h.name, a.ClassKey());
  EXPECT_EQ(h.peak_bytes, 9 * kGiB);
  EXPECT_EQ(h.jobs, 2);
  EXPECT_EQ(forecasts.ClassHistory("other/class").jobs, 0);
}

}  // namespace
}  // namespace paladin::server
