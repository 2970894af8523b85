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

std::string RankSubnet::Address(int64_t n) const {
  const uint32_t a = network + static_cast<uint32_t>(n);
  return std::to_string(a >> 24) + "." + std::to_string((a >> 16) & 255) + "." +
         std::to_string((a >> 8) & 255) + "." + std::to_string(a & 255);
}

StatusOr<RankSubnet> ParseRankSubnet(std::string_view text) {
  const std::string shown(text.substr(0, 40));
  auto bad = [&](const std::string& why) {
    return InvalidArgument("rank subnet '" + shown + "': " + why);
  };
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos) return bad("expected A.B.C.D/PREFIX");
  uint32_t addr = 0;
  std::string_view rest = text.substr(0, slash);
  for (int part = 0; part < 4; ++part) {
    const size_t dot = part < 3 ? rest.find('.') : rest.size();
    if (dot == std::string_view::npos || dot == 0 || dot > 3) return bad("expected A.B.C.D/PREFIX");
    int v = 0;
    for (char c : rest.substr(0, dot)) {
      if (c < '0' || c > '9') return bad("expected A.B.C.D/PREFIX");
      v = v * 10 + (c - '0');
    }
    if (v > 255) return bad("each part of the address is 0-255");
    addr = (addr << 8) | static_cast<uint32_t>(v);
    rest = part < 3 ? rest.substr(dot + 1) : std::string_view();
  }
  StatusOr<int64_t> prefix = ParseIntParam(text.substr(slash + 1), 8, 30, "rank subnet prefix");
  if (!prefix.ok()) return bad("the prefix must be 8 to 30");
  RankSubnet s;
  s.prefix = static_cast<int>(*prefix);
  const uint32_t host_mask = (uint32_t{1} << (32 - s.prefix)) - 1;
  if ((addr & host_mask) != 0) return bad("host bits are set (write the network's own address)");
  s.network = addr;
  return s;
}

}  // namespace paladin::server
