#include "paladin/report/format.h"

#include <cmath>
#include <cstdio>

namespace paladin::report {

std::string Fixed(double v, int digits) {
  if (std::isnan(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string XmlEscape(const std::string& in) {
  std::string out;
  for (char c : in) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

const char* SeriesColor(size_t i) {
  static const char* const kColors[] = {"#7f7f7f", "#1f77b4", "#2ca02c", "#9467bd",
                                        "#8c564b", "#ff7f0e", "#d62728", "#17becf"};
  return kColors[i % (sizeof kColors / sizeof kColors[0])];
}

}  // namespace paladin::report
