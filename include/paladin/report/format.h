// Small formatting helpers shared by the reports and the CLI.
#pragma once

#include <string>

namespace paladin::report {

// `v` with `digits` decimals; empty for NaN (a CSV cell with no value).
std::string Fixed(double v, int digits);
// Text safe inside SVG/XML elements and attribute values.
std::string XmlEscape(const std::string& in);
// The colour of the i-th series in every plot, cycling through one palette.
const char* SeriesColor(size_t i);

}  // namespace paladin::report
