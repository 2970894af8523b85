#include "paladin/server/validate.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

namespace paladin::server {

StatusOr<int64_t> ParseSize(std::string_view text) {
  const std::string shown(text);
  size_t i = 0;
  while (i < text.size() && text[i] == ' ') ++i;
  const size_t number_start = i;
  bool dot = false;
  while (i < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[i])) != 0 || (text[i] == '.' && !dot))) {
    dot = dot || text[i] == '.';
    ++i;
  }
  if (i == number_start) {
    return InvalidArgument("'" + shown + "' is not a size (expected e.g. 8GiB, 512MiB, 4096)");
  }
  const double number =
      std::strtod(std::string(text.substr(number_start, i - number_start)).c_str(), nullptr);
  while (i < text.size() && text[i] == ' ') ++i;
  std::string unit;
  for (; i < text.size(); ++i) unit.push_back(static_cast<char>(std::tolower(text[i])));
  while (!unit.empty() && unit.back() == ' ') unit.pop_back();
  double scale = 0;
  constexpr double kKi = 1024.0;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "k" || unit == "kib") {
    scale = kKi;
  } else if (unit == "m" || unit == "mib") {
    scale = kKi * kKi;
  } else if (unit == "g" || unit == "gib") {
    scale = kKi * kKi * kKi;
  } else if (unit == "t" || unit == "tib") {
    scale = kKi * kKi * kKi * kKi;
  } else if (unit == "kb") {
    scale = 1e3;
  } else if (unit == "mb") {
    scale = 1e6;
  } else if (unit == "gb") {
    scale = 1e9;
  } else if (unit == "tb") {
    scale = 1e12;
  } else {
    return InvalidArgument("'" + shown + "': unknown size unit (use B, KiB, MiB, GiB, TiB)");
  }
  // A count of bytes is whole: "0.0000001" is not a size of 1 byte (it would round up to one).
  if (scale == 1 && number != std::floor(number)) {
    return InvalidArgument("'" + shown + "': a number of bytes must be whole");
  }
  const double bytes = std::ceil(number * scale);
  if (!std::isfinite(bytes) || bytes > 9.0e18)
    return InvalidArgument("'" + shown + "' is too large");
  return static_cast<int64_t>(bytes);
}

StatusOr<int64_t> SizeField(const nlohmann::json& value, const std::string& field) {
  if (value.is_number_integer()) {
    const int64_t n = value.get<int64_t>();
    if (n < 0) return InvalidArgument(field + ": a size cannot be negative");
    if (value.is_number_unsigned() && value.get<uint64_t>() > 9000000000000000000ULL) {
      return InvalidArgument(field + ": too large");
    }
    return n;
  }
  if (value.is_string()) {
    StatusOr<int64_t> n = ParseSize(value.get<std::string>());
    if (!n.ok()) return InvalidArgument(field + ": " + n.status().message());
    return n;
  }
  return InvalidArgument(field + ": expected bytes (an integer) or a size such as \"8GiB\"");
}

bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  if (std::isalnum(static_cast<unsigned char>(name[0])) == 0) return false;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

StatusOr<int64_t> ParseJobId(std::string_view id) {
  const std::string shown(id.substr(0, 80));
  if (id.size() < 8 || id.size() > 14 || id.substr(0, 2) != "j-") {
    return InvalidArgument("job id '" + shown + "' is not of the form j-000001");
  }
  int64_t n = 0;
  for (char c : id.substr(2)) {
    if (c < '0' || c > '9')
      return InvalidArgument("job id '" + shown + "' is not of the form j-000001");
    n = n * 10 + (c - '0');
  }
  return n;
}

std::string FormatJobId(int64_t seq) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "j-%06lld", static_cast<long long>(seq));
  return buffer;
}

StatusOr<int64_t> ParseIntParam(std::string_view text, int64_t lo, int64_t hi,
                                const std::string& what) {
  if (text.empty() || text.size() > 18) return InvalidArgument(what + ": expected an integer");
  int64_t n = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      return InvalidArgument(what + ": '" + std::string(text.substr(0, 40)) +
                             "' is not a non-negative integer");
    }
    n = n * 10 + (c - '0');
  }
  if (n < lo || n > hi) {
    return InvalidArgument(what + ": " + std::to_string(n) + " is out of range " +
                           std::to_string(lo) + ".." + std::to_string(hi));
  }
  return n;
}

}  // namespace paladin::server
