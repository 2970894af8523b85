// The agent's lease: workloads freeze when the server is out of reach for longer than the lease,
// with or without the agent (the fence).
#include "agent_fixture.h"

namespace paladin::agent_test {
namespace {

// Out of contact for longer than the lease, the agent freezes its workloads; when the server
// answers again they continue, unless the answer kills them.
TEST_F(AgentTest, LeaseExpiryFreezes) {
  server_.SetLease(2, 0.3);
  StartAgent("a", {"--kill-on-exit"});
  const Json started = StartGpuJob("a", "j1", 1, 0);
  ASSERT_TRUE(started.value("ok", false));
  const int64_t pid = started["detail"]["pid"];
  ASSERT_TRUE(WaitGen("a", "j1", 1, 3));

  const int64_t command = CommandOf(pid);
  server_.SetDown(true);
  ASSERT_TRUE(WaitFor(8, [&] { return ProcState(command) == 'T'; })) << AgentLog("a");
  server_.SetDown(false);
  ASSERT_TRUE(WaitFor(8, [&] {
    const char s = ProcState(command);
    return s == 'S' || s == 'R';
  })) << AgentLog("a");
  const std::vector<std::string> states = server_.States(Node("a"), "j1");
  EXPECT_NE(std::find(states.begin(), states.end(), "frozen"), states.end());
  const int gen = Generations(server_.Stdout(Node("a"), "j1", 1)).back();
  EXPECT_TRUE(WaitGen("a", "j1", 1, gen + 3)) << "the job did not continue";

  // Frozen again; the server's first answer kills it.
  server_.SetDown(true);
  ASSERT_TRUE(WaitFor(8, [&] { return ProcState(command) == 'T'; }));
  const int64_t kill_id = server_.Send(Node("a"), {{"kind", "kill"}, {"job", "j1"}, {"epoch", 1}});
  server_.SetDown(false);
  EXPECT_TRUE(WaitFor(10, [&] { return !Alive(pid); }));
  EXPECT_TRUE(WaitFor(10, [&] { return server_.Result(kill_id).has_value(); }));
}

// The fence needs no agent: a SIGKILLed agent's job and a SIGSTOPped agent's job stop when the
// lease runs out (their inits stop them); the agent that comes back, or continues, lets them go
// on once the server has answered.
TEST_F(AgentTest, LeaseFencesWithoutTheAgent) {
  server_.SetLease(2, 0.3);
  StartAgent("a");
  const Json started = StartGpuJob("a", "j1", 1, 0);
  ASSERT_TRUE(started.value("ok", false));
  const int64_t pid = started["detail"]["pid"];
  ASSERT_TRUE(WaitGen("a", "j1", 1, 3));
  const int64_t command = CommandOf(pid);
  ASSERT_NE(command, pid) << "the job does not run under paladin-workload-init";

  // Dead: nothing of the agent runs, yet the job stops within the lease (and a poll).
  StopAgent("a", SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor(4, [&] { return ProcState(command) == 'T'; }));
  const double stopped_after =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LT(stopped_after, 2.0 + 0.5) << "later than the lease";
  EXPECT_TRUE(Alive(pid));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(ProcState(command), 'T') << "continued while no agent renewed the lease";
  // The agent's records are its own: root's, private.
  struct stat st {};
  ASSERT_EQ(stat((Data("a") + "/agents/" + Node("a")).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(st.st_uid, 0u);

  // Back: it reports the job frozen, and the server's answer lets it continue.
  StartAgent("a", {"--kill-on-exit"});
  const std::vector<Json> regs = server_.Registrations(Node("a"));
  ASSERT_EQ(regs.back()["jobs"].size(), 1u) << regs.back().dump();
  EXPECT_EQ(regs.back()["jobs"][0]["state"], "frozen");
  ASSERT_TRUE(WaitFor(8, [&] { return ProcState(command) != 'T'; })) << AgentLog("a");
  const int gen = Generations(server_.Stdout(Node("a"), "j1", 1)).back();
  EXPECT_TRUE(WaitGen("a", "j1", 1, gen + 3)) << "the job did not continue";

  // Hung: the same, and it continues when the agent does.
  kill(agents_["a"], SIGSTOP);
  EXPECT_TRUE(WaitFor(4, [&] { return ProcState(command) == 'T'; }));
  kill(agents_["a"], SIGCONT);
  EXPECT_TRUE(WaitFor(8, [&] { return ProcState(command) != 'T'; })) << AgentLog("a");
  EXPECT_TRUE(Run("a", {{"kind", "kill"}, {"job", "j1"}}).value("ok", false));
  EXPECT_TRUE(WaitFor(10, [&] { return !Alive(pid); }));
}

}  // namespace
}  // namespace paladin::agent_test
