// The control plane's token book (src/server/token_book.h) alone: who a secret speaks as, the
// refusals (no secret, an unknown one, an unusable scope, the fleet-wide agent token on a server
// of node tokens only), and the records listed, found and removed. No store, no HTTP.
#include "server/token_book.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace paladin::server {
namespace {

TokenRecord Stored(int64_t id, const std::string& secret, const std::string& scope) {
  return TokenRecord{id, Sha256Hex(secret), scope, "t" + std::to_string(id), 100};
}

TEST(TokenBookTest, ASecretSpeaksAsItsTokensScopeWithItsId) {
  TokenBook book(false);
  book.Load({Stored(1, "pal_admin", "admin"), Stored(2, "pal_vision", "team:vision"),
             Stored(3, "pal_node", "agent:node-a")});
  StatusOr<Principal> admin = book.Authenticate("pal_admin");
  ASSERT_TRUE(admin.ok()) << admin.status().ToString();
  EXPECT_TRUE(admin->admin());
  EXPECT_EQ(admin->token_id, 1);
  StatusOr<Principal> team = book.Authenticate("pal_vision");
  ASSERT_TRUE(team.ok());
  EXPECT_EQ(team->team, "vision");
  EXPECT_EQ(team->token_id, 2);
  StatusOr<Principal> node = book.Authenticate("pal_node");
  ASSERT_TRUE(node.ok());
  EXPECT_TRUE(node->SpeaksFor("node-a"));
  EXPECT_FALSE(node->SpeaksFor("node-b"));
}

TEST(TokenBookTest, NoUnknownOrUnusableSecretAuthenticates) {
  TokenBook book(false);
  book.Load({Stored(1, "pal_odd", "root")});
  EXPECT_EQ(book.Authenticate("").status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(book.Authenticate("pal_nope").status().message(), "invalid token");
  EXPECT_EQ(book.Authenticate("pal_odd").status().message(), "token with an unusable scope");
}

TEST(TokenBookTest, NodeTokensOnlyRefusesTheFleetWideAgentTokenAndItsCreation) {
  TokenBook strict(true);
  strict.Load({Stored(1, "pal_fleet", "agent"), Stored(2, "pal_node", "agent:node-a")});
  EXPECT_EQ(strict.Authenticate("pal_fleet").status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(strict.Authenticate("pal_node").ok());
  EXPECT_EQ(strict.CheckScope("agent").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(strict.CheckScope("agent:node-b").ok());

  TokenBook open(false);
  open.Load({Stored(1, "pal_fleet", "agent")});
  EXPECT_TRUE(open.Authenticate("pal_fleet").ok());
  EXPECT_TRUE(open.CheckScope("agent").ok());
  EXPECT_FALSE(open.CheckScope("team:").ok()) << "a scope that does not parse";
}

TEST(TokenBookTest, RecordsAreAddedListedByIdAndRemoved) {
  TokenBook book(false);
  book.Load({Stored(5, "pal_e", "team:speech")});
  book.Add(Stored(2, "pal_b", "admin"));
  book.Add(Stored(9, "pal_i", "agent"));
  std::vector<int64_t> ids;
  for (const TokenRecord* t : book.Sorted()) ids.push_back(t->id);
  EXPECT_EQ(ids, (std::vector<int64_t>{2, 5, 9}));
  EXPECT_TRUE(book.HasScope("agent"));
  EXPECT_FALSE(book.HasScope("team:vision"));
  ASSERT_NE(book.ById(5), nullptr);
  EXPECT_EQ(book.ById(5)->scope, "team:speech");

  EXPECT_TRUE(book.Remove(9));
  EXPECT_FALSE(book.Remove(9)) << "removed once";
  EXPECT_FALSE(book.HasScope("agent"));
  EXPECT_EQ(book.ById(9), nullptr);
  EXPECT_FALSE(book.Authenticate("pal_i").ok()) << "a removed token no longer authenticates";
}

}  // namespace
}  // namespace paladin::server
