// Node-scoped agent tokens (scope agent:NODE): each agent route is open to the node's own token and
// refused with a 403 naming the node to every other node's token, with nothing changed (a
// migration is a 404 to a node that is neither its source nor its destination); such a
// token reaches no user or admin route; the fleet-wide agent token still speaks for every node
// unless the server takes node tokens only.
#include <gtest/gtest.h>

#include "harness.h"

namespace paladin::server {
namespace {

using testing::AwaitCommand;
using testing::FakeAgent;
using testing::Job;
using testing::Json;
using testing::kGiB;

bool Names(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

class NodeTokenTest : public ::testing::Test {
 protected:
  NodeTokenTest()
      : h_("nodetoken"),
        token_a_(h_.Token("agent:node-a")),
        token_b_(h_.Token("agent:node-b")),
        a_(h_.Client(token_a_), "node-a", 1, 16 * kGiB, 7100),
        b_(h_.Client(token_b_), "node-b", 1, 16 * kGiB, 7200) {}

  // Node `name` as the admin's /v1/nodes shows it (null when absent).
  Json Node(const std::string& name) {
    StatusOr<Json> nodes = h_.Admin().Get("/v1/nodes");
    EXPECT_TRUE(nodes.ok());
    for (const Json& n : (*nodes)["nodes"]) {
      if (n["name"] == name) return n;
    }
    return nullptr;
  }

  // A job submitted while only `agent` is registered: placed there, its start not yet delivered.
  std::string PlacedOn(FakeAgent& agent) {
    EXPECT_TRUE(agent.Register().ok());
    StatusOr<Json> j =
        h_.Admin().Post("/v1/jobs", Json{{"command", {"w"}}, {"gpu_mem", "2GiB"}, {"team", "t"}});
    EXPECT_TRUE(j.ok());
    const std::string id = (*j)["id"];
    EXPECT_TRUE(testing::WaitFor([&] { return Job(h_.Admin(), id)["state"] == "starting"; }));
    return id;
  }

  // A job running on node-a, with a migration to node-b at the commit point (transfer).
  std::pair<std::string, std::string> MigrationAtCommit() {
    const std::string id = PlacedOn(a_);
    std::optional<Json> start = AwaitCommand(a_, "start", id);
    EXPECT_TRUE(start.has_value());
    a_.Obey(*start);
    EXPECT_TRUE(a_.Heartbeat().ok());
    EXPECT_TRUE(b_.Register().ok());
    EXPECT_TRUE(h_.Admin().Post("/v1/jobs/" + id + "/migrate", Json{{"to", "node-b"}}).ok());
    EXPECT_TRUE(AwaitCommand(b_, "migrate_in", id).has_value());
    EXPECT_TRUE(b_.Heartbeat().ok());  // listening now
    std::optional<Json> out = AwaitCommand(a_, "migrate_out", id);
    EXPECT_TRUE(out.has_value());
    return {id, "/v1/migrations/" + (*out)["migration"].dump()};
  }

  testing::ServerHarness h_;
  std::string token_a_;
  std::string token_b_;
  FakeAgent a_;
  FakeAgent b_;
};

TEST_F(NodeTokenTest, ScopeIsValidatedLikeATeamName) {
  StatusOr<Json> t = h_.Admin().Post("/v1/tokens", Json{{"scope", "agent:node-a"}});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)["scope"], "agent:node-a");
  for (const char* bad : {"agent:", "agent:../x", "agent:a b", "agent:node/a", "agents:x"}) {
    StatusOr<Json> r = h_.Admin().Post("/v1/tokens", Json{{"scope", bad}});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  StatusOr<Json> list = h_.Admin().Get("/v1/tokens");
  ASSERT_TRUE(list.ok());
  EXPECT_NE(list->dump().find("\"agent:node-b\""), std::string::npos);
}

TEST_F(NodeTokenTest, RegistersAsItsOwnNodeOnly) {
  ASSERT_TRUE(a_.Register().ok());
  ASSERT_TRUE(b_.Register().ok());
  const Json before = Node("node-b");
  // node-a's token registering as node-b, with another address and no GPUs.
  FakeAgent impostor(h_.Client(token_a_), "node-b", 0, 0, 9999);
  const Status s = impostor.Register();
  ASSERT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_TRUE(Names(s, "node-a") && Names(s, "node-b")) << s.ToString();
  EXPECT_EQ(Node("node-b"), before);
  // A node not yet known is not created either.
  FakeAgent newcomer(h_.Client(token_a_), "node-c", 1, kGiB);
  EXPECT_EQ(newcomer.Register().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(Node("node-c").is_null());
}

TEST_F(NodeTokenTest, HeartbeatsAndReceivesCommandsAsItsOwnNodeOnly) {
  const std::string id = PlacedOn(b_);
  ASSERT_TRUE(a_.Register().ok());
  const Json before = Node("node-b");
  // node-a's token heartbeating as node-b: GPU 0 failing and the job exited, hoping for
  // node-b's commands (the job's start).
  FakeAgent impostor(h_.Client(token_a_), "node-b", 1, 16 * kGiB);
  impostor.gpu_reports = Json::array({{{"index", 0}, {"healthy", false}, {"fault", "xid 79"}}});
  impostor.jobs()[id] = FakeAgent::Job{id, 1, "exited"};
  impostor.jobs()[id].exit_code = 1;
  StatusOr<Json> stolen = impostor.Heartbeat();
  ASSERT_FALSE(stolen.ok());
  EXPECT_EQ(stolen.status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(Names(stolen.status(), "node-a") && Names(stolen.status(), "node-b"))
      << stolen.status().ToString();
  EXPECT_EQ(Node("node-b"), before);
  EXPECT_EQ(Job(h_.Admin(), id)["state"], "starting");
  // node-b's own heartbeat still gets its start.
  EXPECT_TRUE(AwaitCommand(b_, "start", id).has_value());
  // And node-a's token heartbeats as node-a.
  EXPECT_TRUE(a_.Heartbeat().ok());
}

TEST_F(NodeTokenTest, OnlyTheSourceCommits) {
  const auto [id, migration] = MigrationAtCommit();
  const std::string c_token = h_.Token("agent:node-c");
  for (const std::string& token : {token_b_, c_token}) {
    StatusOr<Json> r = h_.Client(token).Post(migration + "/commit", Json::object());
    ASSERT_FALSE(r.ok());
    if (token == token_b_) {  // the destination, a party: told who commits
      EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
      EXPECT_TRUE(Names(r.status(), "node-a")) << r.status().ToString();  // the source
    } else {  // node-c is no party: the move does not exist for it, its nodes are not named
      EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
      EXPECT_FALSE(Names(r.status(), "node-a") || Names(r.status(), "node-b"))
          << r.status().ToString();
    }
    const Json j = Job(h_.Admin(), id);
    EXPECT_EQ(j["node"], "node-a");
    EXPECT_EQ(j["migration"]["step"], "transfer");
  }
  StatusOr<Json> r = h_.Client(token_a_).Post(migration + "/commit", Json::object());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["commit"], true);
  EXPECT_EQ(Job(h_.Admin(), id)["node"], "node-b");
}

TEST_F(NodeTokenTest, OnlyThePartiesAbort) {
  const auto [id, migration] = MigrationAtCommit();
  const std::string c_token = h_.Token("agent:node-c");
  StatusOr<Json> r = h_.Client(c_token).Post(migration + "/abort", Json::object());
  ASSERT_FALSE(r.ok());
  // As for a migration that does not exist: node-c learns nothing of a move between others.
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().code(),
            h_.Client(c_token).Post("/v1/migrations/999999/abort", Json::object()).status().code());
  EXPECT_FALSE(Names(r.status(), "node-a") || Names(r.status(), "node-b")) << r.status().ToString();
  EXPECT_EQ(Job(h_.Admin(), id)["migration"]["step"], "transfer");
  // The destination may (it lost its source), and so may the source (a restarted agent settling
  // the move): both hear the one answer.
  StatusOr<Json> dest = h_.Client(token_b_).Post(migration + "/abort", Json::object());
  ASSERT_TRUE(dest.ok()) << dest.status().ToString();
  EXPECT_EQ((*dest)["commit"], false);
  StatusOr<Json> source = h_.Client(token_a_).Post(migration + "/abort", Json::object());
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_EQ((*source)["commit"], false);
  EXPECT_EQ(Job(h_.Admin(), id)["node"], "node-a");
}

TEST_F(NodeTokenTest, ReachesNoUserOrAdminRoute) {
  const std::string id = PlacedOn(a_);
  api::Client node = h_.Client(token_a_);
  const std::vector<std::pair<std::string, std::string>> posts = {
      {"/v1/tokens", R"({"scope": "admin"})"},
      {"/v1/tokens", R"({"scope": "agent:node-b"})"},
      {"/v1/jobs", R"({"command": ["x"], "gpu_mem": "1GiB"})"},
      {"/v1/jobs/" + id + "/cancel", "{}"},
      {"/v1/jobs/" + id + "/checkpoint", "{}"},
      {"/v1/nodes/node-a/drain", "{}"},
  };
  for (const auto& [path, body] : posts) {
    EXPECT_EQ(node.Post(path, Json::parse(body)).status().code(), StatusCode::kPermissionDenied)
        << path;
  }
  for (const std::string& path : {std::string("/v1/tokens"), std::string("/v1/jobs"),
                                  "/v1/jobs/" + id, std::string("/v1/teams")}) {
    EXPECT_EQ(node.Get(path).status().code(), StatusCode::kPermissionDenied) << path;
  }
  EXPECT_EQ(node.Put("/v1/teams/t", Json{{"max_gpus", 9}}).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_NE(Job(h_.Admin(), id)["state"], "cancelled");
}

TEST_F(NodeTokenTest, TheFleetWideTokenSpeaksForEveryNode) {
  FakeAgent fleet_a(h_, "node-a", 1, 16 * kGiB);
  FakeAgent fleet_b(h_, "node-b", 1, 16 * kGiB);
  EXPECT_TRUE(fleet_a.Register().ok());
  EXPECT_TRUE(fleet_b.Register().ok());
  EXPECT_TRUE(fleet_a.Heartbeat().ok());
  EXPECT_TRUE(fleet_b.Heartbeat().ok());
}

// --node-tokens-only: the fleet-wide token is refused, even one a data directory already holds,
// and none can be made; node tokens work.
TEST(NodeTokensOnlyTest, RefusesTheFleetWideToken) {
  std::string dir;
  std::string fleet_token;
  {
    testing::ServerHarness first("nodeonly");
    dir = first.dir();
    fleet_token = first.server().agent_token();
  }
  ServerOptions options;
  options.data_dir = dir;
  options.node_tokens_only = true;
  testing::ServerHarness h("nodeonly", options);
  FakeAgent fleet(h.Client(fleet_token), "node-a", 1, 16 * kGiB);
  const Status refused = fleet.Register();
  ASSERT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused.ToString();
  EXPECT_TRUE(Names(refused, "agent:NODE")) << refused.ToString();
  StatusOr<Json> made = h.Admin().Post("/v1/tokens", Json{{"scope", "agent"}});
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), StatusCode::kFailedPrecondition);
  FakeAgent own(h.Client(h.Token("agent:node-a")), "node-a", 1, 16 * kGiB);
  EXPECT_TRUE(own.Register().ok());
  EXPECT_TRUE(own.Heartbeat().ok());

  // A fresh data directory gets no fleet-wide token at all.
  ServerOptions fresh;
  fresh.node_tokens_only = true;
  testing::ServerHarness empty("nodeonly-fresh", fresh);
  EXPECT_EQ(empty.server().agent_token(), "");
  EXPECT_FALSE(std::filesystem::exists(empty.dir() + "/agent.token"));
}

}  // namespace
}  // namespace paladin::server
