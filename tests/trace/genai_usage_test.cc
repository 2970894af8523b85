// Reader of the GenAI serving trace's per-pod usage series. Trace files are untrusted input:
// every bad row gives an error naming the file, the line and the field.
#include "paladin/trace/genai_usage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace paladin::trace {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using Series = std::vector<core::UsageSeries>;

Series ParseOk(const std::string& text, GenAiMetric metric, int64_t* skipped = nullptr) {
  auto r = ParseGenAiUsage(text, "usage.csv", metric, skipped);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : Series{};
}

std::string ErrorOf(const std::string& text, GenAiMetric metric) {
  auto r = ParseGenAiUsage(text, "usage.csv", metric);
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().message();
}

// (time, value) pairs of a series, for readable comparisons.
std::vector<std::pair<int64_t, double>> Points(const core::UsageSeries& s) {
  std::vector<std::pair<int64_t, double>> out;
  for (const auto& x : s.samples) out.emplace_back(x.t_s, x.value);
  return out;
}

using P = std::pair<int64_t, double>;

TEST(GenAiFileNameTest, NamesTheThreeFiles) {
  EXPECT_STREQ(GenAiFileName(GenAiMetric::kGpuMemBytes), "pod_gpu_memory_used_bytes_anon.csv");
  EXPECT_STREQ(GenAiFileName(GenAiMetric::kHostMemShare), "pod_memory_util_anon.csv");
  EXPECT_STREQ(GenAiFileName(GenAiMetric::kGpuDutyPct), "pod_gpu_duty_cycle_anon.csv");
}

TEST(ParseGenAiUsageTest, OneSeriesPerPodSortedByTime) {
  const Series s = ParseOk(
      "timestamp_anon,value,container_ip\n"
      "120,3000,10.0.0.2\n"
      "60,1000,10.0.0.1\n"
      "0,2000,10.0.0.2\n"
      "0,500,10.0.0.1\n"
      "60,2500,10.0.0.2\n",
      GenAiMetric::kGpuMemBytes);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].id, "10.0.0.1");
  EXPECT_THAT(Points(s[0]), ::testing::ElementsAre(P{0, 500}, P{60, 1000}));
  EXPECT_EQ(s[1].id, "10.0.0.2");
  EXPECT_THAT(Points(s[1]), ::testing::ElementsAre(P{0, 2000}, P{60, 2500}, P{120, 3000}));
}

TEST(ParseGenAiUsageTest, ColumnsAreFoundByNameInEitherOrder) {
  const Series a = ParseOk(
      "timestamp_anon,value,container_ip\n"
      "0,0.25,pod-a\n"
      "30,0.5,pod-a\n",
      GenAiMetric::kHostMemShare);
  const Series b = ParseOk(
      "value,timestamp_anon,container_ip\n"
      "0.25,0,pod-a\n"
      "0.5,30,pod-a\n",
      GenAiMetric::kHostMemShare);
  const Series c = ParseOk(
      "container_ip,value,timestamp_anon\n"
      "pod-a,0.5,30\n"
      "pod-a,0.25,0\n",
      GenAiMetric::kHostMemShare);
  for (const Series* s : {&a, &b, &c}) {
    ASSERT_EQ(s->size(), 1u);
    EXPECT_EQ((*s)[0].id, "pod-a");
    EXPECT_THAT(Points((*s)[0]), ::testing::ElementsAre(P{0, 0.25}, P{30, 0.5}));
  }
}

TEST(ParseGenAiUsageTest, ARepeatedTimestampKeepsTheLargestValue) {
  const Series s = ParseOk(
      "value,timestamp_anon,container_ip\n"
      "40,0,p\n"
      "10,60,p\n"
      "70,60,p\n"
      "30,60,p\n"
      "20,120,p\n",
      GenAiMetric::kGpuDutyPct);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_THAT(Points(s[0]), ::testing::ElementsAre(P{0, 40}, P{60, 70}, P{120, 20}));
}

TEST(ParseGenAiUsageTest, RowsWithoutAPodAreSkippedAndCounted) {
  int64_t skipped = 99;
  const Series s = ParseOk(
      "value,timestamp_anon,container_ip\n"
      "0.1,0,p\n"
      "0.2,60,\n"
      "not-a-number,120,\n"  // not attributable: skipped before its value is read
      "0.3,180,p\n",
      GenAiMetric::kHostMemShare, &skipped);
  EXPECT_EQ(skipped, 2);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_THAT(Points(s[0]), ::testing::ElementsAre(P{0, 0.1}, P{180, 0.3}));
  // Without a counter the rows are still skipped.
  EXPECT_EQ(
      ParseOk("value,timestamp_anon,container_ip\n0.2,60,\n0.1,0,p\n", GenAiMetric::kHostMemShare)
          .size(),
      1u);
  // The counter is reset on each call.
  ParseOk("value,timestamp_anon,container_ip\n0.1,0,p\n", GenAiMetric::kHostMemShare, &skipped);
  EXPECT_EQ(skipped, 0);
}

TEST(ParseGenAiUsageTest, ATinyNegativeReadingIsZero) {
  const Series host = ParseOk(
      "value,timestamp_anon,container_ip\n"
      "-1e-5,0,p\n"
      "-0.0009,60,p\n",
      GenAiMetric::kHostMemShare);
  ASSERT_EQ(host.size(), 1u);
  EXPECT_THAT(Points(host[0]), ::testing::ElementsAre(P{0, 0}, P{60, 0}));
  const Series gpu = ParseOk(
      "timestamp_anon,value,container_ip\n"
      "0,-4096,p\n",
      GenAiMetric::kGpuMemBytes);
  ASSERT_EQ(gpu.size(), 1u);
  EXPECT_EQ(gpu[0].samples[0].value, 0);
  const Series duty = ParseOk(
      "value,timestamp_anon,container_ip\n"
      "-0.05,0,p\n",
      GenAiMetric::kGpuDutyPct);
  ASSERT_EQ(duty.size(), 1u);
  EXPECT_EQ(duty[0].samples[0].value, 0);
}

TEST(ParseGenAiUsageTest, AClearlyNegativeValueNamesFileLineAndField) {
  const std::string host = ErrorOf(
      "value,timestamp_anon,container_ip\n"
      "0.1,0,p\n"
      "-0.5,60,p\n",
      GenAiMetric::kHostMemShare);
  EXPECT_THAT(host, AllOf(HasSubstr("usage.csv:3"), HasSubstr("'value'"), HasSubstr("-0.5")));
  const std::string gpu = ErrorOf(
      "timestamp_anon,value,container_ip\n"
      "0,-2000000,p\n",
      GenAiMetric::kGpuMemBytes);
  EXPECT_THAT(gpu, AllOf(HasSubstr("usage.csv:2"), HasSubstr("'value'")));
  const std::string duty = ErrorOf(
      "value,timestamp_anon,container_ip\n"
      "-1,0,p\n",
      GenAiMetric::kGpuDutyPct);
  EXPECT_THAT(duty, AllOf(HasSubstr("usage.csv:2"), HasSubstr("'value'")));
}

TEST(ParseGenAiUsageTest, ANonNumberNamesFileLineAndField) {
  EXPECT_THAT(ErrorOf("value,timestamp_anon,container_ip\n"
                      "0.1,0,p\n"
                      "0.2,60,p\n"
                      "lots,120,p\n",
                      GenAiMetric::kHostMemShare),
              AllOf(HasSubstr("usage.csv:4"), HasSubstr("'value'"), HasSubstr("'lots'")));
  EXPECT_THAT(ErrorOf("value,timestamp_anon,container_ip\n"
                      "0.1,,p\n",
                      GenAiMetric::kHostMemShare),
              AllOf(HasSubstr("usage.csv:2"), HasSubstr("'timestamp_anon'")));
  EXPECT_THAT(ErrorOf("value,timestamp_anon,container_ip\n"
                      "nan,0,p\n",
                      GenAiMetric::kHostMemShare),
              AllOf(HasSubstr("usage.csv:2"), HasSubstr("'value'")));
}

TEST(ParseGenAiUsageTest, AValueAboveTheMetricsRangeIsAnError) {
  EXPECT_THAT(ErrorOf("value,timestamp_anon,container_ip\n11,0,p\n", GenAiMetric::kHostMemShare),
              AllOf(HasSubstr("usage.csv:2"), HasSubstr("'value'")));
  EXPECT_THAT(ErrorOf("value,timestamp_anon,container_ip\n100.5,0,p\n", GenAiMetric::kGpuDutyPct),
              AllOf(HasSubstr("usage.csv:2"), HasSubstr("'value'")));
  EXPECT_THAT(ErrorOf("timestamp_anon,value,container_ip\n0,2e13,p\n", GenAiMetric::kGpuMemBytes),
              AllOf(HasSubstr("usage.csv:2"), HasSubstr("'value'")));
  EXPECT_THAT(ErrorOf("timestamp_anon,value,container_ip\n-5,1,p\n", GenAiMetric::kGpuMemBytes),
              AllOf(HasSubstr("usage.csv:2"), HasSubstr("'timestamp_anon'")));
}

TEST(ParseGenAiUsageTest, AMissingColumnIsNamed) {
  EXPECT_THAT(ErrorOf("timestamp_anon,value\n0,1\n", GenAiMetric::kGpuMemBytes),
              AllOf(HasSubstr("usage.csv"), HasSubstr("'container_ip'")));
  EXPECT_THAT(ErrorOf("timestamp_anon,container_ip\n0,p\n", GenAiMetric::kGpuMemBytes),
              AllOf(HasSubstr("usage.csv"), HasSubstr("'value'")));
  EXPECT_THAT(ErrorOf("time,value,container_ip\n0,1,p\n", GenAiMetric::kGpuMemBytes),
              AllOf(HasSubstr("usage.csv"), HasSubstr("'timestamp_anon'")));
}

TEST(ParseGenAiUsageTest, AFileWithoutRowsIsAnError) {
  EXPECT_THAT(ErrorOf("timestamp_anon,value,container_ip\n", GenAiMetric::kGpuMemBytes),
              AllOf(HasSubstr("usage.csv"), HasSubstr("no samples")));
}

TEST(ReadGenAiUsageTest, AMissingFileIsAnError) {
  auto r = ReadGenAiUsage("/nonexistent-paladin-dir", GenAiMetric::kGpuMemBytes);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("pod_gpu_memory_used_bytes_anon.csv"));
}

}  // namespace
}  // namespace paladin::trace
