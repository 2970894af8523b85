// Sizes in bytes as people write them, and as Paladin prints them: the one parser and the one
// formatter of the project (flags, the API, the agent, the emulated driver, the interposer).
// Pure, exception-free and position-independent: the libraries preloaded into workloads link it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace paladin::base {

// Why a text is not a size.
enum class SizeError {
  kNone,
  kNotANumber,       // no decimal digits first (signs, hexadecimal, exponents, "inf" are refused)
  kUnknownUnit,      // not B, K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024), KB, MB, GB, TB
  kFractionalBytes,  // a count of bytes must be whole ("0.5" is not half a byte)
  kTooLarge,         // past 2^63 - 1 bytes
};

// A decimal number, optional spaces, and a unit in any case (none: bytes). A fraction of a unit
// is rounded up to a whole byte. Leading and trailing spaces are allowed. *bytes is set only on
// success.
SizeError ReadSize(std::string_view text, uint64_t* bytes);
inline bool ParseSize(std::string_view text, uint64_t* bytes) {
  return ReadSize(text, bytes) == SizeError::kNone;
}

// "512 MiB", "10 GiB", "1.50 GiB", "4096 B": whole units when exact, else two decimals; below
// 1 MiB in bytes. ParseSize reads every output back.
std::string FormatSize(uint64_t bytes);

// For a table's narrow column: one unit (up to TiB), one decimal below 10 of it and none above:
// "1.5 GiB", "12 GiB", "512 MiB", "1023 B".
std::string FormatSizeShort(uint64_t bytes);

}  // namespace paladin::base
