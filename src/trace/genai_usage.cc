#include "paladin/trace/genai_usage.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "paladin/trace/csv.h"

namespace paladin::trace {

const char* GenAiFileName(GenAiMetric metric) {
  switch (metric) {
    case GenAiMetric::kGpuMemBytes:
      return "pod_gpu_memory_used_bytes_anon.csv";
    case GenAiMetric::kHostMemShare:
      return "pod_memory_util_anon.csv";
    case GenAiMetric::kGpuDutyPct:
      return "pod_gpu_duty_cycle_anon.csv";
  }
  return "";
}

StatusOr<std::vector<core::UsageSeries>> ParseGenAiUsage(const std::string& text,
                                                         const std::string& source,
                                                         GenAiMetric metric, int64_t* skipped) {
  if (skipped != nullptr) *skipped = 0;
  auto table = CsvTable::Parse(text, source);
  if (!table.ok()) return table.status();
  const CsvTable& t = *table;
  auto c_time = t.Column("timestamp_anon");
  if (!c_time.ok()) return c_time.status();
  auto c_value = t.Column("value");
  if (!c_value.ok()) return c_value.status();
  auto c_pod = t.Column("container_ip");
  if (!c_pod.ok()) return c_pod.status();
  if (t.rows() == 0) return InvalidArgument(source + ": no samples");

  // Upper bounds that catch a wrong file or unit: 16 TB of GPU memory, 10x the container's
  // limit (the trace's shares stay below 1), 100% busy.
  const double max_value = metric == GenAiMetric::kGpuMemBytes    ? 1.6e13
                           : metric == GenAiMetric::kHostMemShare ? 10.0
                                                                  : 100.0;
  // Readings a hair below zero (the host-memory file has -1.2e-5) are rounding noise and read as
  // zero; anything more negative is an error.
  const double noise = metric == GenAiMetric::kGpuMemBytes    ? 1024.0 * 1024
                       : metric == GenAiMetric::kHostMemShare ? 1e-3
                                                              : 0.1;
  std::map<std::string, std::vector<core::UsageSample>> by_pod;
  for (size_t r = 0; r < t.rows(); ++r) {
    const std::string& pod = t.Cell(r, *c_pod);
    if (pod.empty()) {
      if (skipped != nullptr) ++*skipped;
      continue;
    }
    auto ts = t.Double(r, *c_time, 0, 9.0e15);
    if (!ts.ok()) return ts.status();
    auto v = t.Double(r, *c_value, -noise, max_value);
    if (!v.ok()) return v.status();
    if (*v < 0) *v = 0;  // rounding noise of a zero reading
    by_pod[pod].push_back({static_cast<int64_t>(std::llround(*ts)), *v});
  }
  std::vector<core::UsageSeries> out;
  out.reserve(by_pod.size());
  for (auto& [pod, samples] : by_pod) {
    std::stable_sort(samples.begin(), samples.end(),
                     [](const auto& a, const auto& b) { return a.t_s < b.t_s; });
    core::UsageSeries s{pod, {}};
    for (const auto& x : samples) {
      if (!s.samples.empty() && s.samples.back().t_s == x.t_s) {
        s.samples.back().value = std::max(s.samples.back().value, x.value);
      } else {
        s.samples.push_back(x);
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

StatusOr<std::vector<core::UsageSeries>> ReadGenAiUsage(const std::string& dir, GenAiMetric metric,
                                                        int64_t* skipped) {
  const std::string path = dir + "/" + GenAiFileName(metric);
  auto text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  return ParseGenAiUsage(*text, path, metric, skipped);
}

}  // namespace paladin::trace
