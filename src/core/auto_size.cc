#include "paladin/core/auto_size.h"

#include <algorithm>

#include "paladin/base/size.h"

namespace paladin::core {
namespace {

std::string Size(int64_t b) {
  return base::FormatSize(static_cast<uint64_t>(std::max<int64_t>(b, 0)));
}

std::string Count(int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// "2 earlier jobs and 1 pod", "1 earlier pod".
std::string Earlier(const ClassHistory& h) {
  if (h.jobs <= 0 && h.pods <= 0) return "earlier workloads";
  if (h.pods <= 0) return std::to_string(h.jobs) + " earlier " + (h.jobs == 1 ? "job" : "jobs");
  if (h.jobs <= 0) return std::to_string(h.pods) + " earlier " + (h.pods == 1 ? "pod" : "pods");
  return std::to_string(h.jobs) + " earlier " + (h.jobs == 1 ? "job" : "jobs") + " and " +
         Count(h.pods, "pod", "pods");
}

}  // namespace

AutoSize SizeAuto(const ClassHistory& history, const AutoSizeLimits& limits) {
  AutoSize s;
  if (history.peak_bytes > 0) {
    s.from_history = true;
    s.bytes = static_cast<int64_t>(static_cast<double>(history.peak_bytes) * kAutoMargin);
    s.why = "highest peak of " + history.name + "'s " + Earlier(history) + " " +
            Size(history.peak_bytes) + " x 1.2 = " + Size(s.bytes);
  } else {
    s.bytes = kAutoDefaultBytes;
    s.why = "no history for " + history.name + ": the default " + Size(s.bytes);
  }
  if (limits.max_bytes > 0 && s.bytes > limits.max_bytes) {
    s.bytes = limits.max_bytes;
    s.why += ", capped at gpu_mem_max";
  }
  if (limits.largest_gpu > 0 && s.bytes > limits.largest_gpu) {
    s.bytes = limits.largest_gpu;
    s.why += ", capped at the largest GPU";
  }
  s.bytes = std::max(s.bytes, kAutoFloorBytes);
  return s;
}

}  // namespace paladin::core
