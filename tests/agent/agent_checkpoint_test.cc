// Checkpoints through the agent: a checkpoint that keeps the job running, then a restore; a
// recovery from the checkpoint store alone on another agent.
#include "agent_fixture.h"

namespace paladin::agent_test {
namespace {

// checkpoint keep: the job runs on; killed, then restored from the image onto the other GPU, it
// continues from the checkpoint's generation with its device memory intact.
TEST_F(AgentTest, CheckpointKeepThenRestore) {
  StartAgent("a", {"--kill-on-exit"});
  const Json started = StartGpuJob("a", "j1", 1, 1);
  ASSERT_TRUE(started.value("ok", false)) << AgentLog("a");
  ASSERT_TRUE(WaitGen("a", "j1", 1, 5)) << AgentLog("a");
  // A state file that a root process left at the command's pid in the emulated driver's
  // host-wide control folder (sticky): the command (nobody) cannot replace it, so the checkpoint
  // must remove it, or the command could not answer and its GPU state would not be checkpointed.
  const int64_t command = ChildOf(started["detail"]["pid"].get<int64_t>());
  ASSERT_GT(command, 0);
  const int64_t uid = UidOf(command);
  EXPECT_TRUE(JobUid(uid)) << uid;
  const std::string stale = "/dev/shm/paladin-emu-ctl/" + std::to_string(command) + ".state";
  fs::remove(stale);
  std::ofstream(stale) << "stale\n";
  const std::string image = store_ + "/j1-1";
  const Json ckpt = Run(
      "a", {{"kind", "checkpoint"}, {"job", "j1"}, {"epoch", 1}, {"mode", "keep"}, {"dir", image}},
      240);
  ASSERT_TRUE(ckpt.value("ok", false)) << ckpt.dump() << AgentLog("a");
  EXPECT_NE(AgentLog("a").find("checkpointing the GPU state of pid " + std::to_string(command)),
            std::string::npos)
      << AgentLog("a");
  EXPECT_GT(ckpt["detail"]["bytes"].get<uint64_t>(), 64 * kMiB);
  const int at_checkpoint = Generations(server_.Stdout(Node("a"), "j1", 1)).back();
  ASSERT_TRUE(WaitGen("a", "j1", 1, at_checkpoint + 5)) << "the job did not run on";
  ASSERT_TRUE(Run("a", {{"kind", "kill"}, {"job", "j1"}, {"epoch", 1}}).value("ok", false));

  const Json restored = Run("a",
                            {{"kind", "restore"},
                             {"job", "j1"},
                             {"epoch", 2},
                             {"image", image},
                             {"gpu_index", 0},
                             {"gpu_uuid", GpuUuid("a", 0)},
                             {"quota_bytes", 768 * kMiB},
                             {"ceiling_bytes", 0}},
                            240);
  ASSERT_TRUE(restored.value("ok", false)) << restored.dump() << AgentLog("a");
  // Restored as it ran: the command as its own uid under a root paladin-workload-init, and its
  // run directory still its own.
  const int64_t root = restored["detail"]["pid"];
  EXPECT_EQ(UidOf(root), 0);
  EXPECT_EQ(UidOf(ChildOf(root)), uid);
  ASSERT_TRUE(WaitFor(30, [&] {
    return Generations(server_.Stdout(Node("a"), "j1", 2)).size() >= 3;
  })) << AgentLog("a");
  const std::string out = server_.Stdout(Node("a"), "j1", 2);
  const std::vector<int> gens = Generations(out);
  EXPECT_GT(gens.front(), 3) << "restarted from scratch: " << out;
  EXPECT_LE(gens.front(), at_checkpoint + 3) << out;
  EXPECT_EQ(out.find("MISMATCH"), std::string::npos) << out;
  EXPECT_NE(out.find("dev 0 " + GpuUuid("a", 0)), std::string::npos) << out;
  std::optional<Json> j = server_.Job(Node("a"), "j1", 2);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ((*j)["state"], "running");
  EXPECT_EQ((*j)["quota_bytes"].get<uint64_t>(), 768 * kMiB);
  EXPECT_GE((*j)["used_bytes"].get<uint64_t>(), 64 * kMiB);
}

// Recovery: a node dies (agent and workload) and its data is lost; another agent restores the job
// from the checkpoint store alone. The two share the workloads' path, as nodes do whose jobs move
// between them (an agent restores a job only into its own workloads folder).
TEST_F(AgentTest, RecoveryRestoreWithoutRunDirectory) {
  const std::string workloads = work_ + "/workloads";
  StartAgent("a", {"--workloads", workloads});
  const Json started = StartGpuJob("a", "j1", 1, 0);
  ASSERT_TRUE(started.value("ok", false));
  const int64_t pid = started["detail"]["pid"];
  ASSERT_TRUE(WaitGen("a", "j1", 1, 5));
  const std::string image = store_ + "/j1-1";
  const Json ckpt = Run(
      "a", {{"kind", "checkpoint"}, {"job", "j1"}, {"epoch", 1}, {"mode", "keep"}, {"dir", image}},
      240);
  ASSERT_TRUE(ckpt.value("ok", false)) << ckpt.dump() << AgentLog("a");
  StopAgent("a", SIGKILL);
  kill(static_cast<pid_t>(pid), SIGKILL);
  ASSERT_TRUE(WaitFor(10, [&] { return !Alive(pid); }));
  fs::remove_all(Data("a"));
  fs::remove_all(workloads);

  StartAgent("b", {"--kill-on-exit", "--workloads", workloads});
  const Json restored =
      Run("b",
          {{"kind", "restore"},
           {"job", "j1"},
           {"epoch", 2},
           {"image", image},
           {"gpu_index", 1},
           {"gpu_uuid", GpuUuid("b", 1)},
           {"gpu_map", {{GpuUuid("a", 0), GpuUuid("b", 1)}, {GpuUuid("a", 1), GpuUuid("b", 0)}}},
           {"quota_bytes", 512 * kMiB},
           {"ceiling_bytes", 0}},
          240);
  ASSERT_TRUE(restored.value("ok", false)) << restored.dump() << AgentLog("b");
  ASSERT_TRUE(WaitFor(30, [&] {
    return Generations(server_.Stdout(Node("b"), "j1", 2)).size() >= 3;
  })) << AgentLog("b");
  const std::string out = server_.Stdout(Node("b"), "j1", 2);
  EXPECT_GT(Generations(out).front(), 3) << out;
  EXPECT_EQ(out.find("MISMATCH"), std::string::npos) << out;
  EXPECT_NE(out.find("dev 0 " + GpuUuid("b", 1)), std::string::npos) << out;
}

}  // namespace
}  // namespace paladin::agent_test
