// The Prometheus text format's pieces that the server's /metrics writers share (Control's jobs
// and nodes, PodBook's pods).
#pragma once

#include <cstdio>
#include <string>

namespace paladin::server {

// A label value, escaped as the format asks (backslash, double quote, newline).
inline std::string MetricLabel(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

// One sample: NAME{LABELS} VALUE (no braces when `labels` is empty).
inline void MetricLine(std::string* out, const std::string& name, const std::string& labels,
                       double value) {
  char number[64];
  std::snprintf(number, sizeof number, "%.17g", value);
  *out += name;
  if (!labels.empty()) *out += "{" + labels + "}";
  *out += " ";
  *out += number;
  *out += "\n";
}

}  // namespace paladin::server
