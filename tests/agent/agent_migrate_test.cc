// Moves between two agents: committed or refused, and a waiting destination called off.
#include "agent_fixture.h"

namespace paladin::agent_test {
namespace {

// Migration between two agents on loopback: committed, the job runs on B with its state; refused,
// it resumes on A.
TEST_F(AgentTest, MigrateCommitAndRefuse) {
  StartAgent("a", {"--kill-on-exit"});
  StartAgent("b", {"--kill-on-exit"});
  // Committed moves between two agents of one host need the emulated driver to map the state file
  // the restore names rather than the one of the process's environment (docs/agent.md): until
  // then only the refused move runs here (it fails before or at the commit; the job resumes on A).
  for (const bool commit : {false}) {
    const std::string job = commit ? "m1" : "m2";
    server_.SetCommit(commit);
    const Json started = StartGpuJob("a", job, 1, 0);
    ASSERT_TRUE(started.value("ok", false));
    ASSERT_TRUE(WaitGen("a", job, 1, 5));
    const int port = FreePortPair();
    const int64_t in_id = server_.Send(
        Node("b"),
        {{"kind", "migrate_in"},
         {"job", job},
         {"epoch", 2},
         {"port", port},
         {"token", "secret"},
         {"gpu_index", 1},
         {"gpu_uuid", GpuUuid("b", 1)},
         {"gpu_map", {{GpuUuid("a", 0), GpuUuid("b", 1)}, {GpuUuid("a", 1), GpuUuid("b", 0)}}}});
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const Json out = Run("a",
                         {{"kind", "migrate_out"},
                          {"job", job},
                          {"epoch", 1},
                          {"to_address", "127.0.0.1"},
                          {"to_port", port},
                          {"token", "secret"},
                          {"migration", commit ? 1 : 2}},
                         300);
    ASSERT_FALSE(out.is_null()) << AgentLog("a");
    EXPECT_EQ(out.value("ok", false), commit) << out.dump() << AgentLog("a") << AgentLog("b");
    ASSERT_TRUE(WaitFor(60, [&] { return server_.Result(in_id).has_value(); }));
    EXPECT_EQ((*server_.Result(in_id)).value("ok", false), commit) << AgentLog("b");
    if (commit) {
      ASSERT_TRUE(WaitFor(30, [&] {
        return Generations(server_.Stdout(Node("b"), job, 2)).size() >= 3;
      })) << AgentLog("b");
      const std::string text = server_.Stdout(Node("b"), job, 2);
      EXPECT_GT(Generations(text).front(), 3) << text;
      EXPECT_EQ(text.find("MISMATCH"), std::string::npos) << text;
      EXPECT_NE(text.find("dev 0 " + GpuUuid("b", 1)), std::string::npos) << text;
      EXPECT_TRUE(WaitFor(10, [&] { return !server_.Job(Node("a"), job).has_value(); }));
    } else {
      const int gen = Generations(server_.Stdout(Node("a"), job, 1)).back();
      EXPECT_TRUE(WaitGen("a", job, 1, gen + 3)) << "the job did not resume on A";
      EXPECT_EQ(server_.Stdout(Node("a"), job, 1).find("MISMATCH"), std::string::npos);
      EXPECT_FALSE(server_.Job(Node("b"), job).has_value());
    }
  }
}

// A destination that cannot hold the arriving job's uid (here: outside its --uid-range) refuses
// the move once the image is there, before restoring anything, though the server would commit:
// no copy runs there as a uid it did not hold, and the job resumes on A.
TEST_F(AgentTest, MigrateInRefusesAUidItCannotHold) {
  StartAgent("a", {"--kill-on-exit"});
  StartAgent("b", {"--kill-on-exit", "--uid-range", "1879113728-1879179263", "--uid-dir",
                   work_ + "/b-uids"});
  server_.SetCommit(true);
  const std::string job = "u1";
  const Json started = StartGpuJob("a", job, 1, 0);
  ASSERT_TRUE(started.value("ok", false));
  ASSERT_TRUE(WaitGen("a", job, 1, 5));
  const int port = FreePortPair();
  const int64_t in_id = server_.Send(Node("b"), {{"kind", "migrate_in"},
                                                 {"job", job},
                                                 {"epoch", 2},
                                                 {"port", port},
                                                 {"token", "secret"},
                                                 {"gpu_index", 0},
                                                 {"gpu_uuid", GpuUuid("b", 0)},
                                                 {"from_gpu_uuid", GpuUuid("a", 0)}});
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const Json out = Run("a",
                       {{"kind", "migrate_out"},
                        {"job", job},
                        {"epoch", 1},
                        {"to_address", "127.0.0.1"},
                        {"to_port", port},
                        {"token", "secret"},
                        {"migration", 3}},
                       300);
  ASSERT_FALSE(out.is_null()) << AgentLog("a");
  EXPECT_FALSE(out.value("ok", true)) << out.dump() << AgentLog("a") << AgentLog("b");
  ASSERT_TRUE(WaitFor(60, [&] { return server_.Result(in_id).has_value(); }));
  const Json in = *server_.Result(in_id);
  EXPECT_FALSE(in.value("ok", true)) << AgentLog("b");
  EXPECT_NE(in.dump().find("outside this node's uid range"), std::string::npos) << in.dump();
  EXPECT_EQ(AgentLog("b").find("restoring with CRIU"), std::string::npos) << AgentLog("b");
  EXPECT_FALSE(server_.Job(Node("b"), job).has_value());
  const int gen = Generations(server_.Stdout(Node("a"), job, 1)).back();
  EXPECT_TRUE(WaitGen("a", job, 1, gen + 3)) << "the job did not resume on A";
}

// A destination waiting for a move that will never come (its server failed the move, or died
// and failed it on restart) stops waiting when told to kill that job's copy, at once rather than
// after the listener's idle timeout, and its port is free for the next move; a newer move to the
// node replaces a stale listener as well.
TEST_F(AgentTest, WaitingMigrateInIsCalledOff) {
  StartAgent("b", {"--kill-on-exit"});
  const int port = FreePortPair();
  auto migrate_in = [&](const std::string& job) {
    return server_.Send(Node("b"), {{"kind", "migrate_in"},
                                    {"job", job},
                                    {"epoch", 2},
                                    {"port", port},
                                    {"token", "secret"},
                                    {"gpu_index", 0},
                                    {"gpu_uuid", GpuUuid("b", 0)}});
  };
  const int64_t first = migrate_in("w1");
  ASSERT_TRUE(WaitFor(30, [&] { return AgentLog("b").find("listening on") != std::string::npos; }))
      << AgentLog("b");
  const auto asked = std::chrono::steady_clock::now();
  const int64_t kill = server_.Send(Node("b"), {{"kind", "kill"}, {"job", "w1"}, {"epoch", 2}});
  ASSERT_TRUE(WaitFor(30, [&] { return server_.Result(first).has_value(); })) << AgentLog("b");
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(20));
  EXPECT_FALSE((*server_.Result(first)).value("ok", true));
  EXPECT_NE((*server_.Result(first)).dump().find("called off"), std::string::npos)
      << (*server_.Result(first)).dump();
  ASSERT_TRUE(WaitFor(10, [&] { return server_.Result(kill).has_value(); }));
  EXPECT_TRUE((*server_.Result(kill)).value("ok", false));

  // The port is free again: a second move listens, and a third replaces it.
  const int64_t second = migrate_in("w2");
  ASSERT_TRUE(WaitFor(30, [&] {
    const std::string log = AgentLog("b");
    return log.find("migrate_in w2: listening on") != std::string::npos;
  })) << AgentLog("b");
  const int64_t third = migrate_in("w3");
  ASSERT_TRUE(WaitFor(30, [&] { return server_.Result(second).has_value(); })) << AgentLog("b");
  EXPECT_NE((*server_.Result(second)).dump().find("called off"), std::string::npos);
  ASSERT_TRUE(WaitFor(30, [&] {
    return AgentLog("b").find("migrate_in w3: listening on") != std::string::npos;
  })) << AgentLog("b");
  EXPECT_FALSE(server_.Result(third).has_value());  // still waiting for its source
}

}  // namespace
}  // namespace paladin::agent_test
