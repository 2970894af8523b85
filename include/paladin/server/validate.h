// Checks on untrusted API input: names, ids and sizes. Every failure is an InvalidArgument whose
// message names the field and says what is wrong; nothing here throws.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "paladin/base/status.h"

namespace paladin::server {

// "8GiB", "512MiB", "1.5 GiB", "10G", "4096" (bytes). Units B, K/KiB, M/MiB, G/GiB, T/TiB are
// binary; KB, MB, GB, TB decimal. Negative, fractional-byte-free overflow and unknown units fail.
StatusOr<int64_t> ParseSize(std::string_view text);

// A size field: a non-negative JSON integer or a size string. `field` names it in errors.
StatusOr<int64_t> SizeField(const nlohmann::json& value, const std::string& field);

// Names of teams, nodes and jobs: 1..63 characters of [A-Za-z0-9._-], starting with a letter or
// digit. Keeps names safe in paths, URLs and Prometheus labels.
bool ValidName(std::string_view name);

// "j-000042" -> 42; anything not matching ^j-[0-9]{6,}$ fails.
StatusOr<int64_t> ParseJobId(std::string_view id);
std::string FormatJobId(int64_t seq);

// A decimal integer path or query parameter within [lo, hi]; `what` names it in errors.
StatusOr<int64_t> ParseIntParam(std::string_view text, int64_t lo, int64_t hi,
                                const std::string& what);

// The subnet gang ranks take their addresses from (ServerOptions::rank_subnet): "A.B.C.D/P",
// P from 8 to 30, no host bits set. Hosts are numbered 1 .. 2^(32-P) - 2 (the network and
// broadcast addresses are never handed out).
struct RankSubnet {
  uint32_t network = 0;  // host byte order
  int prefix = 0;
  int64_t Hosts() const { return (int64_t{1} << (32 - prefix)) - 2; }
  // The address of host `n` (1 .. Hosts()), dotted.
  std::string Address(int64_t n) const;
};
StatusOr<RankSubnet> ParseRankSubnet(std::string_view text);

}  // namespace paladin::server
