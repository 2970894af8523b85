// Bearer tokens: generation, digests, scopes. The server keeps only SHA-256 digests.
//
// Thread safety: every function is safe to call from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "paladin/base/status.h"

namespace paladin::server {

// Lower-case hex SHA-256 of `text`.
std::string Sha256Hex(std::string_view text);

// A fresh secret: "pal_" + 32 random bytes in hex (OpenSSL RAND_bytes). Fails only when the
// system has no entropy to give.
StatusOr<std::string> NewToken();

// Random hex of `bytes` bytes (migration tokens).
StatusOr<std::string> RandomHex(int bytes);

// Who a request comes from: the scope of its token.
struct Principal {
  enum class Kind { kAdmin, kTeam, kAgent };
  Kind kind = Kind::kAdmin;
  std::string team;  // kTeam only
  // kAgent only: the one node an `agent:NODE` token speaks for; empty for the fleet-wide `agent`
  // token, which speaks for every node.
  std::string node;
  int64_t token_id = 0;

  bool admin() const { return kind == Kind::kAdmin; }
  bool agent() const { return kind == Kind::kAgent; }
  bool team_scoped() const { return kind == Kind::kTeam; }
  bool node_scoped() const { return agent() && !node.empty(); }
  // Whether this principal may see and act on a job of `job_team`.
  bool SeesTeam(const std::string& job_team) const { return admin() || team == job_team; }
  // Whether this principal may act as the agent of `node_name`: register or heartbeat as it,
  // receive its commands, commit or abort its migrations.
  bool SpeaksFor(const std::string& node_name) const {
    return admin() || (agent() && (node.empty() || node == node_name));
  }
  std::string Scope() const;  // "admin", "team:NAME", "agent", "agent:NODE"
};

// "admin", "agent", "agent:NODE" or "team:NAME" (NODE and NAME valid names); an error names what
// is wrong.
StatusOr<Principal> ParseScope(std::string_view scope);

// PermissionDenied unless `who` speaks for agent `node`; `what` is the act refused ("heartbeat as
// node-b"), named in the message with the node the token is for.
Status CheckSpeaksFor(const Principal& who, const std::string& node, const std::string& what);

// The secret of an "Authorization: Bearer <secret>" header value, or "" when it has none.
std::string BearerSecret(std::string_view header);

}  // namespace paladin::server
