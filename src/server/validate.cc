#include "paladin/server/validate.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

#include "paladin/base/size.h"

namespace paladin::server {

StatusOr<int64_t> ParseSize(std::string_view text) {
  const std::string shown(text);
  uint64_t bytes = 0;
  switch (base::ReadSize(text, &bytes)) {
    case base::SizeError::kNone:
      break;
    case base::SizeError::kNotANumber:
      return InvalidArgument("'" + shown + "' is not a size (expected e.g. 8GiB, 512MiB, 4096)");
    case base::SizeError::kUnknownUnit:
      return InvalidArgument("'" + shown + "': unknown size unit (use B, KiB, MiB, GiB, TiB)");
    case base::SizeError::kFractionalBytes:
      // "0.0000001" is not a size of 1 byte (it would round up to one).
      return InvalidArgument("'" + shown + "': a number of bytes must be whole");
    case base::SizeError::kTooLarge:
      return InvalidArgument("'" + shown + "' is too large");
  }
  if (bytes > 9000000000000000000ULL) return InvalidArgument("'" + shown + "' is too large");
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
