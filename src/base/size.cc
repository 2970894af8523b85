// Sizes (include/paladin/base/size.h): integer arithmetic throughout, so that no rounding of a
// double turns "0.1GiB" or "9.99TB" into a byte more or less than the same text elsewhere.
#include "paladin/base/size.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>

namespace paladin::base {
namespace {

// GCC's 128-bit integer, which ISO C++ lacks (__extension__ keeps -Wpedantic quiet about it).
__extension__ using Uint128 = unsigned __int128;

constexpr uint64_t kMaxBytes = uint64_t{INT64_MAX};

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool UnitFactor(std::string_view unit, uint64_t* factor) {
  struct Unit {
    const char* name;
    uint64_t factor;
  };
  static constexpr Unit kUnits[] = {{"", 1},
                                    {"b", 1},
                                    {"k", 1ull << 10},
                                    {"kib", 1ull << 10},
                                    {"m", 1ull << 20},
                                    {"mib", 1ull << 20},
                                    {"g", 1ull << 30},
                                    {"gib", 1ull << 30},
                                    {"t", 1ull << 40},
                                    {"tib", 1ull << 40},
                                    {"kb", 1000ull},
                                    {"mb", 1000000ull},
                                    {"gb", 1000000000ull},
                                    {"tb", 1000000000000ull}};
  for (const Unit& u : kUnits) {
    std::string_view name(u.name);
    if (name.size() != unit.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i) same = Lower(unit[i]) == name[i];
    if (same) {
      *factor = u.factor;
      return true;
    }
  }
  return false;
}

}  // namespace

SizeError ReadSize(std::string_view text, uint64_t* bytes) {
  text = Trim(text);
  size_t i = 0;
  uint64_t whole = 0;
  size_t whole_digits = 0;
  bool overflow = false;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++whole_digits) {
    overflow = overflow || __builtin_mul_overflow(whole, 10u, &whole) ||
               __builtin_add_overflow(whole, static_cast<uint64_t>(text[i] - '0'), &whole);
  }
  // The fraction's first 18 digits count (the rest cannot change a byte of any unit here).
  uint64_t fraction = 0;
  uint64_t scale = 1;
  size_t fraction_digits = 0;
  bool fraction_beyond = false;  // a non-zero digit past the 18th
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++fraction_digits) {
      if (fraction_digits < 18) {
        fraction = fraction * 10 + static_cast<uint64_t>(text[i] - '0');
        scale *= 10;
      } else if (text[i] != '0') {
        fraction_beyond = true;
      }
    }
  }
  if (whole_digits + fraction_digits == 0) return SizeError::kNotANumber;
  // "0x10", "1e9": what follows the number must be a unit, and these are not.
  uint64_t factor = 0;
  if (!UnitFactor(Trim(text.substr(i)), &factor)) {
    const char next = i < text.size() ? Lower(text[i]) : '\0';
    const char after = i + 1 < text.size() ? text[i + 1] : '\0';
    const bool hexadecimal = next == 'x' && whole_digits == 1 && whole == 0 && fraction_digits == 0;
    const bool exponent =
        next == 'e' && ((after >= '0' && after <= '9') || after == '+' || after == '-');
    if (next == '.' || hexadecimal || exponent) return SizeError::kNotANumber;
    return SizeError::kUnknownUnit;
  }
  const bool has_fraction = fraction != 0 || fraction_beyond;
  if (factor == 1 && has_fraction) return SizeError::kFractionalBytes;
  uint64_t total = 0;
  if (overflow || __builtin_mul_overflow(whole, factor, &total)) return SizeError::kTooLarge;
  if (has_fraction) {
    // fraction / scale of a unit, rounded up: factor <= 2^40 and fraction < 10^18, so the
    // product fits in 128 bits.
    const Uint128 part = static_cast<Uint128>(fraction) * factor;
    uint64_t up = static_cast<uint64_t>((part + scale - 1) / scale);
    if (fraction_beyond && part % scale == 0) ++up;  // a digit past the 18th is still a part
    if (__builtin_add_overflow(total, up, &total)) return SizeError::kTooLarge;
  }
  if (total > kMaxBytes) return SizeError::kTooLarge;
  *bytes = total;
  return SizeError::kNone;
}

std::string FormatSize(uint64_t bytes) {
  char buf[64];
  const auto b = static_cast<double>(bytes);
  if (bytes >= (1ull << 30)) {
    if (bytes % (1ull << 30) == 0) {
      std::snprintf(buf, sizeof buf, "%" PRIu64 " GiB", bytes >> 30);
    } else {
      std::snprintf(buf, sizeof buf, "%.2f GiB", b / static_cast<double>(1ull << 30));
    }
  } else if (bytes >= (1ull << 20)) {
    if (bytes % (1ull << 20) == 0) {
      std::snprintf(buf, sizeof buf, "%" PRIu64 " MiB", bytes >> 20);
    } else {
      std::snprintf(buf, sizeof buf, "%.2f MiB", b / static_cast<double>(1ull << 20));
    }
  } else {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " B", bytes);
  }
  return buf;
}

std::string FormatSizeShort(uint64_t bytes) {
  static constexpr const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (unit < 4 && bytes >= (uint64_t{1} << (10 * (unit + 1)))) ++unit;
  if (unit == 0) return std::to_string(bytes) + " B";
  const double v = static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << (10 * unit));
  char buf[64];
  // Rounds as printf will, so 9.96 GiB prints "10 GiB", not "10.0 GiB".
  if (std::round(v * 10) / 10 < 10) {
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kNames[unit]);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f %s", v, kNames[unit]);
  }
  return buf;
}

}  // namespace paladin::base
