#include "paladin/server/auth.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <vector>

#include "paladin/server/validate.h"

namespace paladin::server {
namespace {

std::string Hex(const unsigned char* data, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[data[i] >> 4]);
    out.push_back(kDigits[data[i] & 15]);
  }
  return out;
}

}  // namespace

std::string Sha256Hex(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(text.data(), text.size(), digest, &length, EVP_sha256(), nullptr);
  return Hex(digest, length);
}

StatusOr<std::string> RandomHex(int bytes) {
  std::vector<unsigned char> buffer(static_cast<size_t>(bytes));
  if (RAND_bytes(buffer.data(), bytes) != 1) {
    return Internal("RAND_bytes failed: no randomness for a secret");
  }
  return Hex(buffer.data(), buffer.size());
}

StatusOr<std::string> NewToken() {
  StatusOr<std::string> hex = RandomHex(32);
  if (!hex.ok()) return hex.status();
  return "pal_" + *hex;
}

std::string Principal::Scope() const {
  switch (kind) {
    case Kind::kAdmin:
      return "admin";
    case Kind::kAgent:
      return node.empty() ? "agent" : "agent:" + node;
    case Kind::kTeam:
      return "team:" + team;
  }
  return "admin";
}

StatusOr<Principal> ParseScope(std::string_view scope) {
  Principal p;
  if (scope == "admin") return p;
  if (scope == "agent") {
    p.kind = Principal::Kind::kAgent;
    return p;
  }
  if (scope.rfind("agent:", 0) == 0) {
    p.kind = Principal::Kind::kAgent;
    p.node = std::string(scope.substr(6));
    if (!ValidName(p.node)) {
      return InvalidArgument("scope: node name '" + p.node.substr(0, 64) +
                             "' must be 1-63 characters of letters, digits, '.', '_', '-'");
    }
    return p;
  }
  if (scope.rfind("team:", 0) == 0) {
    p.kind = Principal::Kind::kTeam;
    p.team = std::string(scope.substr(5));
    if (!ValidName(p.team)) {
      return InvalidArgument("scope: team name '" + p.team.substr(0, 64) +
                             "' must be 1-63 characters of letters, digits, '.', '_', '-'");
    }
    return p;
  }
  return InvalidArgument("scope: '" + std::string(scope.substr(0, 64)) +
                         "' is not one of admin, agent, agent:NODE, team:NAME");
}

Status CheckSpeaksFor(const Principal& who, const std::string& node, const std::string& what) {
  if (who.SpeaksFor(node)) return Status::Ok();
  if (who.node_scoped()) {
    return PermissionDenied("a token of agent " + who.node + " may not " + what +
                            ": it speaks for node " + who.node + " only");
  }
  return PermissionDenied("a " + who.Scope() + " token may not " + what);
}

std::string BearerSecret(std::string_view header) {
  constexpr std::string_view kPrefix = "Bearer ";
  if (header.size() <= kPrefix.size() || header.substr(0, kPrefix.size()) != kPrefix) return "";
  std::string_view secret = header.substr(kPrefix.size());
  while (!secret.empty() && secret.front() == ' ') secret.remove_prefix(1);
  while (!secret.empty() && (secret.back() == ' ' || secret.back() == '\r'))
    secret.remove_suffix(1);
  return std::string(secret);
}

}  // namespace paladin::server
