#include "token_book.h"

#include <algorithm>
#include <utility>

namespace paladin::server {
namespace {

constexpr const char* kFleetAgentTokenRefused =
    "this server takes node tokens only (--node-tokens-only): the fleet-wide agent token is "
    "refused; give each agent a token of its own node (paladin tokens create --scope agent:NODE)";

}  // namespace

void TokenBook::Load(std::vector<TokenRecord> tokens) {
  for (TokenRecord& t : tokens) {
    const std::string digest = t.digest;
    tokens_[digest] = std::move(t);
  }
}

StatusOr<Principal> TokenBook::Authenticate(const std::string& secret) const {
  if (secret.empty()) return Unauthenticated("no bearer token (Authorization: Bearer pal_...)");
  auto it = tokens_.find(Sha256Hex(secret));
  if (it == tokens_.end()) return Unauthenticated("invalid token");
  StatusOr<Principal> p = ParseScope(it->second.scope);
  if (!p.ok()) return Unauthenticated("token with an unusable scope");
  if (node_tokens_only_ && p->agent() && !p->node_scoped()) {
    return PermissionDenied(kFleetAgentTokenRefused);
  }
  p->token_id = it->second.id;
  return p;
}

StatusOr<Principal> TokenBook::CheckScope(const std::string& scope) const {
  StatusOr<Principal> parsed = ParseScope(scope);
  if (!parsed.ok()) return parsed.status();
  if (node_tokens_only_ && parsed->agent() && !parsed->node_scoped()) {
    return FailedPrecondition(kFleetAgentTokenRefused);
  }
  return parsed;
}

const TokenRecord* TokenBook::ById(int64_t id) const {
  for (const auto& [digest, t] : tokens_) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

bool TokenBook::Remove(int64_t id) {
  for (auto it = tokens_.begin(); it != tokens_.end(); ++it) {
    if (it->second.id != id) continue;
    tokens_.erase(it);
    return true;
  }
  return false;
}

std::vector<const TokenRecord*> TokenBook::Sorted() const {
  std::vector<const TokenRecord*> sorted;
  for (const auto& [digest, t] : tokens_) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const TokenRecord* a, const TokenRecord* b) { return a->id < b->id; });
  return sorted;
}

bool TokenBook::HasScope(const std::string& scope) const {
  return std::any_of(tokens_.begin(), tokens_.end(),
                     [&](const auto& kv) { return kv.second.scope == scope; });
}

}  // namespace paladin::server
