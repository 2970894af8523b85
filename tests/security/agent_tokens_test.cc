// One node's agent token against the rest of the fleet (docs/server.md, "Agent tokens"): node-c,
// holding a token of scope agent:node-c, tries every agent route as node-a and node-b (register,
// heartbeat with fake jobs, GPU faults and command results, taking their command queues, commit
// and abort of their migration) and every user and admin route. Each is refused with a 403 that
// names node-c (their migration: a 404 naming no node, as if it did not exist), and afterwards the
// jobs, the nodes, the migration, the tokens and node-b's command queue are as they were; the real
// agents carry on. Prints "security: node tokens: tried N, refused N".
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "../server/harness.h"

namespace paladin::server {
namespace {

using testing::AwaitCommand;
using testing::FakeAgent;
using testing::Job;
using testing::Json;
using testing::kGiB;
using testing::WaitFor;

// What an attack could change: every job's placement and step, every node as the admin sees it
// (address, GPUs' health, last heartbeat), and the tokens.
Json Snapshot(const api::Client& admin) {
  Json out = Json::object();
  StatusOr<Json> jobs = admin.Get("/v1/jobs?all=1");
  EXPECT_TRUE(jobs.ok());
  for (const Json& j : (*jobs)["jobs"]) {
    out["jobs"][j["id"].get<std::string>()] = {{"state", j["state"]},
                                               {"node", j["node"]},
                                               {"epoch", j["epoch"]},
                                               {"migration", j["migration"]}};
  }
  StatusOr<Json> nodes = admin.Get("/v1/nodes");
  StatusOr<Json> tokens = admin.Get("/v1/tokens");
  EXPECT_TRUE(nodes.ok() && tokens.ok());
  out["nodes"] = (*nodes)["nodes"];
  out["tokens"] = (*tokens)["tokens"];
  return out;
}

TEST(AgentTokensTest, ANodesTokenSpeaksForNoOtherNode) {
  testing::ServerHarness h("agent-tokens");
  api::Client admin = h.Admin();
  const std::string a_token = h.Token("agent:node-a");
  FakeAgent a(h.Client(a_token), "node-a", 1, 16 * kGiB, 7100);
  FakeAgent b(h.Client(h.Token("agent:node-b")), "node-b", 2, 16 * kGiB, 7200);
  const std::string c_token = h.Token("agent:node-c");
  api::Client c = h.Client(c_token);
  FakeAgent node_c(c, "node-c", 1, 16 * kGiB, 7300);

  // j1 runs on node-a, on its way to node-b at the commit point; j2 is placed on node-b (only its
  // free GPU has room), its start not yet delivered (node-b's queue holds it).
  ASSERT_TRUE(a.Register().ok());
  StatusOr<Json> j1 = admin.Post("/v1/jobs", Json{{"command", {"w"}}, {"gpu_mem", "2GiB"}});
  ASSERT_TRUE(j1.ok());
  const std::string id1 = (*j1)["id"];
  std::optional<Json> start = AwaitCommand(a, "start", id1);
  ASSERT_TRUE(start.has_value());
  a.Obey(*start);
  ASSERT_TRUE(a.Heartbeat().ok());
  ASSERT_TRUE(b.Register().ok());
  ASSERT_TRUE(admin.Post("/v1/jobs/" + id1 + "/migrate", Json{{"to", "node-b"}}).ok());
  ASSERT_TRUE(AwaitCommand(b, "migrate_in", id1).has_value());
  ASSERT_TRUE(b.Heartbeat().ok());
  std::optional<Json> out = AwaitCommand(a, "migrate_out", id1);
  ASSERT_TRUE(out.has_value());
  const std::string migration = "/v1/migrations/" + (*out)["migration"].dump();
  StatusOr<Json> j2 = admin.Post("/v1/jobs", Json{{"command", {"w"}}, {"gpu_mem", "15GiB"}});
  ASSERT_TRUE(j2.ok());
  const std::string id2 = (*j2)["id"];
  ASSERT_TRUE(WaitFor([&] { return Job(admin, id2)["node"] == "node-b"; }));
  ASSERT_TRUE(node_c.Register().ok());  // node-c itself is a member in good standing
  ASSERT_TRUE(node_c.Heartbeat().ok());
  const Json before = Snapshot(admin);

  int tried = 0;
  int refused = 0;
  auto attempt = [&](const std::string& what, const Status& s) {
    ++tried;
    if (s.code() == StatusCode::kPermissionDenied &&
        s.message().find("node-c") != std::string::npos) {
      ++refused;
    } else {
      ADD_FAILURE() << what << ": not refused with a 403 naming node-c: " << s.ToString();
    }
  };

  // Registering as the others: another address and port (where their migrations would go), no
  // GPUs, a report that their jobs exited.
  for (const std::string& victim : std::vector<std::string>{"node-a", "node-b"}) {
    FakeAgent impostor(c, victim, 0, 0, 9999);
    attempt("register as " + victim, impostor.Register());
    FakeAgent reporter(c, victim, 1, 16 * kGiB, 9999);
    reporter.jobs()[id1] = FakeAgent::Job{id1, 1, "exited"};
    reporter.jobs()[id1].exit_code = 0;
    attempt("register as " + victim + " reporting j1 exited", reporter.Register());
  }
  // Heartbeating as them: an empty beat (their commands), a GPU fault, their jobs exited or at a
  // newer epoch, results for their commands.
  const int64_t out_id = (*out)["id"];
  const std::vector<Json> beats = {
      Json::object(),
      Json{{"gpus", Json::array({Json{{"index", 0}, {"healthy", false}, {"fault", "xid 79"}}})}},
      Json{{"jobs",
            Json::array({Json{{"id", id1}, {"epoch", 1}, {"state", "exited"}, {"exit_code", 0}}})}},
      Json{{"jobs", Json::array({Json{{"id", id2}, {"epoch", 9}, {"state", "running"}}})}},
      Json{{"results", Json::array({Json{{"command", out_id}, {"ok", false}, {"error", "x"}}})}},
      Json{{"results", Json::array({Json{{"command", out_id + 1}, {"ok", true}}})}},
  };
  for (const std::string& victim : std::vector<std::string>{"node-a", "node-b"}) {
    for (const Json& beat : beats) {
      attempt("heartbeat as " + victim + ": " + beat.dump(),
              c.Post("/v1/agents/" + victim + "/heartbeat", beat).status());
    }
  }
  // The migration between node-a and node-b.
  // Their migration does not exist for node-c, which is no party to it: a 404 that names no
  // node, as for a migration that does not exist at all.
  auto unknown = [&](const std::string& what, const Status& s) {
    ++tried;
    if (s.code() == StatusCode::kNotFound && s.message().find("node-a") == std::string::npos &&
        s.message().find("node-b") == std::string::npos) {
      ++refused;
    } else {
      ADD_FAILURE() << what << ": not a 404 naming no node: " << s.ToString();
    }
  };
  unknown("commit " + migration, c.Post(migration + "/commit", Json::object()).status());
  unknown("abort " + migration, c.Post(migration + "/abort", Json::object()).status());
  // User and admin routes.
  const std::vector<std::pair<std::string, Json>> posts = {
      {"/v1/tokens", {{"scope", "admin"}}},
      {"/v1/tokens", {{"scope", "agent:node-a"}}},
      {"/v1/tokens", {{"scope", "agent"}}},
      {"/v1/jobs", {{"command", {"x"}}, {"gpu_mem", "1GiB"}}},
      {"/v1/jobs/" + id1 + "/cancel", Json::object()},
      {"/v1/jobs/" + id1 + "/migrate", {{"to", "node-c"}}},
      {"/v1/jobs/" + id2 + "/checkpoint", Json::object()},
      {"/v1/jobs/" + id2 + "/resume", Json::object()},
      {"/v1/nodes/node-a/drain", Json::object()},
      {"/v1/nodes/node-b/gpus/0/fault", {{"kind", "xid"}, {"code", 79}}},
  };
  for (const auto& [path, body] : posts) {
    attempt("POST " + path, c.Post(path, body).status());
  }
  for (const std::string& path :
       {std::string("/v1/tokens"), std::string("/v1/jobs"), "/v1/jobs/" + id1,
        "/v1/jobs/" + id1 + "/logs", std::string("/v1/teams"), std::string("/v1/events")}) {
    attempt("GET " + path, c.Get(path).status());
  }
  attempt("PUT /v1/teams/default", c.Put("/v1/teams/default", Json{{"max_gpus", 0}}).status());
  attempt("DELETE /v1/tokens/1", c.Delete("/v1/tokens/1").status());

  // Nothing changed, and the server still serves the real agents.
  EXPECT_EQ(Snapshot(admin), before);
  EXPECT_TRUE(AwaitCommand(b, "start", id2).has_value());  // node-b's queue was not taken
  ASSERT_TRUE(a.Heartbeat().ok());
  StatusOr<Json> committed = h.Client(a_token).Post(migration + "/commit", Json::object());
  ASSERT_TRUE(committed.ok()) << committed.status().ToString();
  EXPECT_EQ((*committed)["commit"], true);
  EXPECT_EQ(Job(admin, id1)["node"], "node-b");

  std::printf("security: node tokens: tried %d, refused %d\n", tried, refused);
  EXPECT_EQ(tried, refused);
}

}  // namespace
}  // namespace paladin::server
