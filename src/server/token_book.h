// The control plane's API tokens: every TokenRecord the server keeps, by the digest of its
// secret, and the rules of who a secret speaks as. Control owns one and is its only user; it
// writes each change to the store itself (Persistence::AddToken, DeleteToken) before telling the
// book.
//
// - Authenticate: the principal a secret speaks as (its scope parsed, its token's id), or why not:
//   no secret, an unknown one, an unusable scope, or the fleet-wide `agent` scope on a server
//   that takes node tokens only (ControlOptions::node_tokens_only).
// - CheckScope: whether a token of that scope may be created here (the same refusal).
// - Add, Remove, ById: the records; Sorted lists them by id; HasScope says whether any token of
//   a scope exists (first start creates the admin and agent tokens).
// Secrets are never kept: only their SHA-256 digests (auth.h).
//
// Thread safety: none; Control calls it under its lock. No I/O, no clock.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/server/auth.h"
#include "persistence.h"

namespace paladin::server {

class TokenBook {
 public:
  explicit TokenBook(bool node_tokens_only) : node_tokens_only_(node_tokens_only) {}
  TokenBook(const TokenBook&) = delete;
  TokenBook& operator=(const TokenBook&) = delete;

  // The records read back from the store at start-up.
  void Load(std::vector<TokenRecord> tokens);

  StatusOr<Principal> Authenticate(const std::string& secret) const;
  // The principal SCOPE names, when a token of it may be created here.
  StatusOr<Principal> CheckScope(const std::string& scope) const;

  // T, already stored with its id.
  void Add(const TokenRecord& t) { tokens_[t.digest] = t; }
  const TokenRecord* ById(int64_t id) const;
  // The record of the secret whose SHA-256 is `digest`; nullptr when none.
  const TokenRecord* ByDigest(const std::string& digest) const {
    auto it = tokens_.find(digest);
    return it != tokens_.end() ? &it->second : nullptr;
  }
  // Forgets the token of that id; false when there is none.
  bool Remove(int64_t id);
  std::vector<const TokenRecord*> Sorted() const;  // by id
  bool HasScope(const std::string& scope) const;

 private:
  bool node_tokens_only_;
  std::map<std::string, TokenRecord> tokens_;  // by digest
};

}  // namespace paladin::server
