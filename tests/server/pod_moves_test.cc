// Moves of Kubernetes pods asked through Paladin's server (docs/kubernetes.md, "Moves through
// Paladin's server"): a team asks for a move of its own pod and of no other team's (404, as for
// reading it); the mover of the pod's node takes each move once and says how it ended; no token
// but one speaking for that node takes it; a pod that is not running, already moving or asked to
// stay where it is is refused naming why; a requested move whose pod disappears fails. The ledger
// is in the server's database: a restarted server knows every move and who took it, a change it
// cannot write is refused with nothing changed, and a ledger it cannot read keeps it down.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "harness.h"
#include "paladin/server/store.h"

namespace paladin::server {
namespace {

using testing::Json;

Json MovePod(const std::string& ns, const std::string& name, const std::string& team,
             const std::string& node, int gpu, const std::string& phase = "Running") {
  return {{"namespace", ns},
          {"name", name},
          {"team", team},
          {"phase", phase},
          {"node", node},
          {"gpu", gpu},
          {"gpu_mem_bytes", int64_t{2} << 30}};
}

class PodMovesTest : public ::testing::Test {
 protected:
  PodMovesTest() : h_("pod-moves") {
    research_ = h_.Token("team:research");
    other_ = h_.Token("team:k8s-other");
    Report({MovePod("ml", "a", "research", "node-1", 0),
            MovePod("ml", "p", "research", "", -1, "Pending"),
            MovePod("ml", "cpu", "research", "node-1", -1),
            MovePod("other", "c", "k8s-other", "node-1", 1)});
  }
  void Report(const Json& pods) {
    StatusOr<Json> put = h_.Admin().Put("/v1/pods", {{"cluster", "prod"}, {"pods", pods}});
    ASSERT_TRUE(put.ok()) << put.status().ToString();
  }
  StatusOr<Json> Ask(const std::string& token, const std::string& pod, const Json& to) {
    return h_.Client(token).Post("/v1/pods/" + pod + "/move", to);
  }
  testing::ServerHarness h_;
  std::string research_;
  std::string other_;
};

TEST_F(PodMovesTest, ATeamMovesItsOwnPodAndTheNodesMoverCarriesItOutOnce) {
  StatusOr<Json> asked = Ask(research_, "ml/a", {{"gpu", 1}});
  ASSERT_TRUE(asked.ok()) << asked.status().ToString();
  const int64_t id = (*asked)["id"];
  EXPECT_EQ((*asked)["state"], "requested");
  EXPECT_EQ((*asked)["from_node"], "node-1");
  EXPECT_EQ((*asked)["from_gpu"], 0);
  EXPECT_EQ((*asked)["to"]["gpu"], 1);
  EXPECT_TRUE((*asked)["to"]["node"].is_null());
  EXPECT_EQ((*asked)["asked_by"], "team:research");
  StatusOr<api::PodMove> decoded = api::DecodePodMove(*asked);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->id, id);
  EXPECT_EQ(decoded->to.gpu, 1);

  // The mover of node-1 (its own agent token) finds it; node-2's does not.
  const std::string node1 = h_.Token("agent:node-1");
  const std::string node2 = h_.Token("agent:node-2");
  StatusOr<Json> mine = h_.Client(node1).Get("/v1/pod-moves?node=node-1&state=requested");
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  ASSERT_EQ((*mine)["moves"].size(), 1U);
  EXPECT_EQ((*mine)["moves"][0]["id"], id);
  StatusOr<Json> theirs = h_.Client(node2).Get("/v1/pod-moves");
  ASSERT_TRUE(theirs.ok());
  EXPECT_TRUE((*theirs)["moves"].empty());

  // Neither the team, nor another node's token, nor another team takes it.
  const std::string take = "/v1/pod-moves/" + std::to_string(id) + "/take";
  EXPECT_EQ(h_.Client(research_).Post(take, {{"mover", "node-1"}}).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(h_.Client(node2).Post(take, {{"mover", "node-2"}}).status().code(),
            StatusCode::kNotFound);
  StatusOr<Json> taken = h_.Client(node1).Post(take, {{"mover", "node-1"}});
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ((*taken)["state"], "taken");
  EXPECT_EQ((*taken)["mover"], "node-1");
  // Taken once: a second take, by anyone, is refused naming who has it.
  for (const std::string& token : {node1, h_.server().admin_token()}) {
    StatusOr<Json> again = h_.Client(token).Post(take, {{"mover", "node-1"}});
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(again.status().message().find("taken by node-1"), std::string::npos)
        << again.status().message();
  }
  // One move of a pod at a time.
  StatusOr<Json> second = Ask(research_, "ml/a", {{"node", "node-2"}});
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("has move " + std::to_string(id) + " taken by node-1"),
            std::string::npos)
      << second.status().message();

  const std::string finish = "/v1/pod-moves/" + std::to_string(id) + "/finish";
  const Json outcome = {{"ok", true},         {"message", "moved ml/a -> ml/a-m1, GPU 0 -> 1"},
                        {"new_name", "a-m1"}, {"to_node", "node-1"},
                        {"to_gpu", 1},        {"paused_ms", 840}};
  StatusOr<Json> done = h_.Client(node1).Post(finish, outcome);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ((*done)["state"], "done");
  EXPECT_EQ(h_.Client(node1).Post(finish, outcome).status().code(),
            StatusCode::kFailedPrecondition);

  // The team reads how it ended; another team does not see it at all.
  StatusOr<Json> seen = h_.Client(research_).Get("/v1/pod-moves/" + std::to_string(id));
  ASSERT_TRUE(seen.ok()) << seen.status().ToString();
  EXPECT_EQ((*seen)["state"], "done");
  EXPECT_EQ((*seen)["ok"], true);
  EXPECT_EQ((*seen)["new_name"], "a-m1");
  EXPECT_EQ((*seen)["to_gpu"], 1);
  EXPECT_EQ((*seen)["paused_ms"], 840);
  EXPECT_EQ(h_.Client(other_).Get("/v1/pod-moves/" + std::to_string(id)).status().code(),
            StatusCode::kNotFound);
  StatusOr<Json> others = h_.Client(other_).Get("/v1/pod-moves");
  ASSERT_TRUE(others.ok());
  EXPECT_TRUE((*others)["moves"].empty());
}

TEST_F(PodMovesTest, AnotherTeamsPodCannotBeMovedAndBadAsksAreRefusedNamingWhy) {
  // Another team's pod does not exist for research, and a node's token asks no move.
  StatusOr<Json> theirs = Ask(research_, "other/c", {{"gpu", 0}});
  ASSERT_FALSE(theirs.ok());
  EXPECT_EQ(theirs.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Ask(h_.Token("agent:node-1"), "ml/a", {{"gpu", 1}}).status().code(),
            StatusCode::kPermissionDenied);

  struct Case {
    const char* pod;
    Json to;
    StatusCode code;
    const char* expected;
  } cases[] = {
      {"ml/p", Json::object(), StatusCode::kFailedPrecondition, "is Pending, on no node"},
      {"ml/a", {{"gpu", 0}}, StatusCode::kInvalidArgument, "is on node-1/0 already"},
      {"ml/a",
       {{"node", "node-1"}, {"gpu", 0}},
       StatusCode::kInvalidArgument,
       "is on node-1/0 already"},
      {"ml/cpu", Json::object(), StatusCode::kInvalidArgument, "is on node-1 already"},
      {"ml/cpu", {{"gpu", 1}}, StatusCode::kFailedPrecondition, "has no Paladin GPU"},
      {"ml/a",
       {{"gpu", -2}},
       StatusCode::kInvalidArgument,
       "gpu: expected an integer from -1 to 1023"},
      {"ml/a", {{"gpu", "one"}}, StatusCode::kInvalidArgument, "gpu: expected an integer"},
      {"ml/a",
       {{"node", "Node_1"}},
       StatusCode::kInvalidArgument,
       "node: expected a Kubernetes node name"},
  };
  for (const Case& c : cases) {
    StatusOr<Json> r = Ask(research_, c.pod, c.to);
    ASSERT_FALSE(r.ok()) << c.pod << " " << c.to.dump();
    EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos)
        << c.pod << " " << c.to.dump() << ": " << r.status().message();
  }
  StatusOr<Json> listed = h_.Admin().Get("/v1/pod-moves");
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE((*listed)["moves"].empty());

  // A mover's hostile finish is refused naming the field, and the move stays taken.
  StatusOr<Json> asked = Ask(research_, "ml/cpu", {{"node", "node-2"}});
  ASSERT_TRUE(asked.ok()) << asked.status().ToString();
  const std::string id = std::to_string((*asked)["id"].get<int64_t>());
  ASSERT_TRUE(h_.Admin().Post("/v1/pod-moves/" + id + "/take", {{"mover", "node-1"}}).ok());
  StatusOr<Json> bad = h_.Admin().Post("/v1/pod-moves/" + id + "/finish",
                                       {{"ok", true}, {"message", "line\nbreak"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("message: expected printable text"), std::string::npos)
      << bad.status().message();
  EXPECT_EQ(h_.Admin()
                    .Post("/v1/pod-moves/" + id + "/finish", {{"message", "no ok"}})
                    .status()
                    .message()
                    .find("ok: missing") != std::string::npos,
            true);
  EXPECT_EQ((*h_.Admin().Get("/v1/pod-moves/" + id))["state"], "taken");
}

TEST_F(PodMovesTest, ARequestedMoveOfAPodThatIsGoneFailsAndATakenOneWaitsForItsMover) {
  StatusOr<Json> a = Ask(research_, "ml/a", {{"gpu", 1}});
  StatusOr<Json> cpu = Ask(research_, "ml/cpu", {{"node", "node-2"}});
  ASSERT_TRUE(a.ok() && cpu.ok());
  const std::string a_id = std::to_string((*a)["id"].get<int64_t>());
  const std::string cpu_id = std::to_string((*cpu)["id"].get<int64_t>());
  ASSERT_TRUE(h_.Admin().Post("/v1/pod-moves/" + cpu_id + "/take", {{"mover", "node-1"}}).ok());
  // The next report has neither pod (deleted, or moved by the mover that took it).
  Report(Json::array({MovePod("other", "c", "k8s-other", "node-1", 1)}));
  StatusOr<Json> gone = h_.Client(research_).Get("/v1/pod-moves/" + a_id);
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ((*gone)["state"], "failed");
  EXPECT_EQ((*gone)["ok"], false);
  EXPECT_NE((*gone)["message"].get<std::string>().find("no longer runs on node-1"),
            std::string::npos)
      << (*gone)["message"];
  EXPECT_EQ((*h_.Client(research_).Get("/v1/pod-moves/" + cpu_id))["state"], "taken");
  // Failed: it is taken by nobody.
  EXPECT_EQ(
      h_.Admin().Post("/v1/pod-moves/" + a_id + "/take", {{"mover", "node-1"}}).status().code(),
      StatusCode::kFailedPrecondition);
}

// Two clusters whose nodes share names: a mover lists its own cluster's moves only.
TEST_F(PodMovesTest, AMoverListsItsOwnClustersMovesWhereNodeNamesRepeat) {
  StatusOr<Json> put = h_.Admin().Put(
      "/v1/pods",
      {{"cluster", "lab"}, {"pods", Json::array({MovePod("ml", "b", "research", "node-1", 0)})}});
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  StatusOr<Json> prod = Ask(research_, "ml/a", {{"gpu", 1}});
  StatusOr<Json> lab = Ask(research_, "ml/b", {{"gpu", 1}});
  ASSERT_TRUE(prod.ok() && lab.ok()) << prod.status().ToString() << lab.status().ToString();
  EXPECT_EQ((*prod)["cluster"], "prod");
  EXPECT_EQ((*lab)["cluster"], "lab");
  auto listed = [&](const std::string& query) {
    StatusOr<Json> got = h_.Admin().Get("/v1/pod-moves?" + query);
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    std::set<std::string> names;
    for (const Json& m : (*got)["moves"]) names.insert(m["name"].get<std::string>());
    return names;
  };
  EXPECT_EQ(listed("node=node-1&state=requested"), (std::set<std::string>{"a", "b"}));
  EXPECT_EQ(listed("node=node-1&state=requested&cluster=prod"), std::set<std::string>{"a"});
  EXPECT_EQ(listed("node=node-1&state=requested&cluster=lab"), std::set<std::string>{"b"});
  EXPECT_TRUE(listed("cluster=default").empty());
  EXPECT_EQ(h_.Admin().Get("/v1/pod-moves?cluster=a%26b").status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(PodMovesTest, TheLedgerOutlivesARestartAndATakenMoveIsNotTakenAgain) {
  StatusOr<Json> a = Ask(research_, "ml/a", {{"gpu", 1}});
  StatusOr<Json> cpu = Ask(research_, "ml/cpu", {{"node", "node-2"}});
  ASSERT_TRUE(a.ok() && cpu.ok());
  const int64_t a_id = (*a)["id"];
  const int64_t cpu_id = (*cpu)["id"];
  const std::string a_path = "/v1/pod-moves/" + std::to_string(a_id);
  StatusOr<Json> taken = h_.Admin().Post(a_path + "/take", {{"mover", "mover-node-1"}});
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();

  h_.Restart();
  StatusOr<Json> after = h_.Client(research_).Get(a_path);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(*after, *taken) << "the taken move comes back as it was, its times and mover too";
  StatusOr<Json> again = h_.Admin().Post(a_path + "/take", {{"mover", "mover-node-1b"}});
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("by mover-node-1"), std::string::npos)
      << again.status().ToString();
  StatusOr<Json> requested = h_.Admin().Get("/v1/pod-moves?state=requested");
  ASSERT_TRUE(requested.ok());
  ASSERT_EQ((*requested)["moves"].size(), 1U);
  EXPECT_EQ((*requested)["moves"][0]["id"], cpu_id);
  // Another team sees neither after the restart either.
  EXPECT_TRUE((*h_.Client(other_).Get("/v1/pod-moves"))["moves"].empty());

  StatusOr<Json> done =
      h_.Admin().Post(a_path + "/finish", {{"ok", true}, {"message", "moved to node-1/1"}});
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  h_.Restart();
  StatusOr<Json> ended = h_.Client(research_).Get(a_path);
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ((*ended)["state"], "done");
  EXPECT_EQ((*ended)["message"], "moved to node-1/1");
  // The pods come back with their scheduler's next report; the ids go on after the last one.
  Report(Json::array({MovePod("ml", "a", "research", "node-1", 1)}));
  StatusOr<Json> next = Ask(research_, "ml/a", {{"gpu", 0}});
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ((*next)["id"], std::max(a_id, cpu_id) + 1);
}

TEST_F(PodMovesTest, AChangeTheDatabaseRefusesChangesNothing) {
  StatusOr<Json> a = Ask(research_, "ml/a", {{"gpu", 1}});
  ASSERT_TRUE(a.ok());
  const std::string path = "/v1/pod-moves/" + std::to_string((*a)["id"].get<int64_t>());
  StatusOr<std::unique_ptr<Store>> db = Store::Open(h_.dir() + "/paladin.db");
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  ASSERT_TRUE((*db)
                  ->ExecScript("CREATE TRIGGER full BEFORE UPDATE ON pod_moves BEGIN "
                               "SELECT RAISE(ABORT, 'database or disk is full'); END;")
                  .ok());
  StatusOr<Json> take = h_.Admin().Post(path + "/take", {{"mover", "node-1"}});
  EXPECT_FALSE(take.ok());
  EXPECT_NE(take.status().message().find("disk is full"), std::string::npos)
      << take.status().ToString();
  EXPECT_EQ((*h_.Admin().Get(path))["state"], "requested") << "nothing changed";
  ASSERT_TRUE((*db)->ExecScript("DROP TRIGGER full;").ok());
  EXPECT_TRUE(h_.Admin().Post(path + "/take", {{"mover", "node-1"}}).ok());
}

TEST_F(PodMovesTest, ADrainAsksAMoveOfEachRunningPodOfTheNodeAndOnlyAnAdminDrains) {
  // node-1 runs ml/a (GPU 0), ml/cpu and other/c (GPU 1); ml/p is Pending on no node. node-2 runs
  // ml/b, which stays out of it.
  Report({MovePod("ml", "a", "research", "node-1", 0),
          MovePod("ml", "p", "research", "", -1, "Pending"),
          MovePod("ml", "cpu", "research", "node-1", -1),
          MovePod("ml", "starting", "research", "node-1", 0, "Pending"),
          MovePod("ml", "old", "research", "node-1", 0, "Succeeded"),
          MovePod("other", "c", "k8s-other", "node-1", 1),
          MovePod("ml", "b", "research", "node-2", 0)});
  // ml/cpu has a move under way already: it is left, naming that move.
  StatusOr<Json> before = Ask(research_, "ml/cpu", {{"node", "node-3"}});
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  const Json drain = {{"node", "node-1"}, {"to", "node-2"}};
  // A team (even one whose pods are there) and a node's token do not drain a node.
  for (const std::string& token : {research_, h_.Token("agent:node-1")}) {
    StatusOr<Json> refused = h_.Client(token).Post("/v1/pods/drain", drain);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied)
        << refused.status().ToString();
  }
  StatusOr<Json> drained = h_.Admin().Post("/v1/pods/drain", drain);
  ASSERT_TRUE(drained.ok()) << drained.status().ToString();
  EXPECT_EQ((*drained)["node"], "node-1");
  EXPECT_EQ((*drained)["to"], "node-2");
  std::set<std::string> moved;
  for (const Json& m : (*drained)["moves"]) {
    moved.insert(m["namespace"].get<std::string>() + "/" + m["name"].get<std::string>());
    EXPECT_EQ(m["state"], "requested");
    EXPECT_EQ(m["from_node"], "node-1");
    EXPECT_EQ(m["to"]["node"], "node-2");
    EXPECT_TRUE(m["to"]["gpu"].is_null());
    EXPECT_EQ(m["drain"], true);
    EXPECT_EQ(m["asked_by"], "admin");
  }
  EXPECT_EQ(moved, (std::set<std::string>{"ml/a", "other/c"}));
  std::map<std::string, std::string> left;
  for (const Json& l : (*drained)["left"]) {
    left[l["namespace"].get<std::string>() + "/" + l["name"].get<std::string>()] = l["why"];
  }
  ASSERT_EQ(left.size(), 2U) << drained->dump();
  EXPECT_EQ(left["ml/cpu"],
            "has move " + std::to_string((*before)["id"].get<int64_t>()) + " requested");
  EXPECT_EQ(left["ml/starting"], "is Pending: only a running pod moves");

  // Node-1's mover finds both; each team sees its own pod's, marked as a drain's.
  StatusOr<Json> mine =
      h_.Client(h_.Token("agent:node-1")).Get("/v1/pod-moves?node=node-1&state=requested");
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ((*mine)["moves"].size(), 3U);  // the two drain moves and ml/cpu's own
  StatusOr<Json> theirs = h_.Client(other_).Get("/v1/pod-moves");
  ASSERT_TRUE(theirs.ok());
  ASSERT_EQ((*theirs)["moves"].size(), 1U);
  EXPECT_EQ((*theirs)["moves"][0]["name"], "c");
  StatusOr<api::PodMove> decoded = api::DecodePodMove((*theirs)["moves"][0]);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(decoded->drain);
  // A second drain asks nothing more: every pod has its move under way.
  StatusOr<Json> again = h_.Admin().Post("/v1/pods/drain", drain);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)["moves"].empty());
  EXPECT_EQ((*again)["left"].size(), 4U);

  // Bad asks name the field.
  for (const auto& [body, want] :
       {std::pair{Json{{"node", "node-1"}}, "to: missing"},
        std::pair{Json{{"node", "node-1"}, {"to", "node-1"}}, "to: expected another node"},
        std::pair{Json{{"node", "Node_1"}, {"to", "node-2"}}, "node: expected a Kubernetes"}}) {
    StatusOr<Json> bad = h_.Admin().Post("/v1/pods/drain", body);
    ASSERT_FALSE(bad.ok()) << body.dump();
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find(want), std::string::npos) << bad.status().message();
  }
}

TEST(PodMovesLedgerTest, AServerDoesNotStartOnALedgerItCannotRead) {
  const std::string dir = testing::TempDir("pod-moves-ledger");
  {
    StatusOr<std::unique_ptr<Store>> db = Store::Open(dir + "/paladin.db");
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    ASSERT_TRUE((*db)
                    ->Run("INSERT INTO pod_moves (id, cluster, namespace, name, state, doc) "
                          "VALUES (7, 'prod', 'ml', 'a', 'taken', ?)",
                          {std::string(R"({"id": 7, "namespace": "ml", "name": "a", )"
                                       R"("from_node": "node-1", "state": "gone"})")})
                    .ok());
  }
  ServerOptions options;
  options.data_dir = dir;
  options.listen = "127.0.0.1:0";
  StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("pod_moves row 7: state"), std::string::npos)
      << server.status().ToString();
}

}  // namespace
}  // namespace paladin::server
