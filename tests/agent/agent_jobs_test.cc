// The agent's jobs on one node: start, resize, fault, exit and kill; GPU health from NVML
// events; workloads adopted by the next agent.
#include <dlfcn.h>

#include "agent_fixture.h"

namespace paladin::agent_test {
namespace {

// start: the job runs as a uid of its own (under a root paladin-workload-init, so it can be
// checkpointed),
// on the GPU it was given, under its quota, and reports usage and logs; resize; fault; a job that
// exits reports its code; kill ends the whole tree.
TEST_F(AgentTest, StartResizeFaultExitKill) {
  StartAgent("a", {"--kill-on-exit"});
  ASSERT_FALSE(server_.Registrations(Node("a")).empty());
  EXPECT_EQ(server_.Registrations(Node("a")).back().value("checkpointable", false), true)
      << AgentLog("a");
  const Json started = StartGpuJob("a", "j1", 1, 1);
  ASSERT_TRUE(started.value("ok", false)) << started.dump() << AgentLog("a");
  const int64_t pid = started["detail"]["pid"];
  ASSERT_TRUE(WaitGen("a", "j1", 1, 3)) << AgentLog("a");
  // The job's root is paladin-workload-init, as root; the command its child, as its own uid.
  EXPECT_EQ(UidOf(pid), 0);
  EXPECT_EQ(CommOf(pid).rfind("paladin-workloa", 0), 0u) << CommOf(pid);
  const int64_t command = ChildOf(pid);
  ASSERT_GT(command, 0) << "the job's root has no child";
  EXPECT_EQ(CommOf(command), "ckpt_gpu");
  const int64_t uid = UidOf(command);
  EXPECT_TRUE(JobUid(uid)) << uid;
  const std::string out = server_.Stdout(Node("a"), "j1", 1);
  EXPECT_NE(out.find("dev 0 " + GpuUuid("a", 1)), std::string::npos) << out;
  ASSERT_TRUE(WaitFor(10, [&] {
    std::optional<Json> j = server_.Job(Node("a"), "j1");
    return j && (*j)["used_bytes"].get<uint64_t>() >= 64 * kMiB &&
           (*j)["quota_bytes"].get<uint64_t>() == 512 * kMiB && (*j)["state"] == "running";
  })) << server_.Job(Node("a"), "j1")->dump();

  const Json resized =
      Run("a", {{"kind", "resize"}, {"job", "j1"}, {"epoch", 1}, {"quota_bytes", 1024 * kMiB}});
  EXPECT_TRUE(resized.value("ok", false)) << resized.dump();
  EXPECT_TRUE(WaitFor(10, [&] {
    return (*server_.Job(Node("a"), "j1"))["quota_bytes"].get<uint64_t>() == 1024 * kMiB;
  }));

  const Json fault =
      Run("a", {{"kind", "fault"}, {"gpu_index", 0}, {"fault_kind", "xid"}, {"code", 79}});
  EXPECT_TRUE(fault.value("ok", false)) << fault.dump();
  EXPECT_TRUE(WaitFor(10, [&] {
    const Json gpus = server_.Gpus(Node("a"));
    return gpus.is_array() && gpus.size() == 2 && gpus[0]["healthy"] == false &&
           !gpus[0]["fault"].get<std::string>().empty() && gpus[1]["healthy"] == true;
  })) << server_.Gpus(Node("a")).dump();

  const Json exiting = Run("a", {{"kind", "start"},
                                 {"job", "j2"},
                                 {"epoch", 1},
                                 {"command", {"sh", "-c", "echo hello from uid $(id -u); exit 3"}},
                                 {"gpu_index", 0},
                                 {"quota_bytes", 0}});
  ASSERT_TRUE(exiting.value("ok", false)) << exiting.dump();
  ASSERT_TRUE(WaitFor(20, [&] {
    std::optional<Json> j = server_.Job(Node("a"), "j2");
    return j && (*j)["state"] == "exited" && (*j)["exit_code"] == 3;
  })) << AgentLog("a");
  // Another job, another uid of the range.
  const std::string hello = server_.Stdout(Node("a"), "j2", 1);
  const size_t at = hello.find("hello from uid ");
  ASSERT_NE(at, std::string::npos) << hello;
  const int64_t uid2 = std::atoll(hello.c_str() + at + 15);
  EXPECT_TRUE(JobUid(uid2)) << hello;
  EXPECT_NE(uid2, uid);
  // Reported once as exited, then forgotten.
  EXPECT_TRUE(WaitFor(10, [&] { return !server_.Job(Node("a"), "j2").has_value(); }));

  const Json killed = Run("a", {{"kind", "kill"}, {"job", "j1"}, {"epoch", 1}});
  EXPECT_TRUE(killed.value("ok", false)) << killed.dump();
  EXPECT_TRUE(WaitFor(10, [&] { return !Alive(pid); }));
  EXPECT_TRUE(WaitFor(10, [&] { return !server_.Job(Node("a"), "j1").has_value(); }));
  EXPECT_FALSE(fs::exists(Data("a") + "/runs/j1-1"));
  EXPECT_FALSE(fs::exists(Data("a") + "/workloads/j1-1"));
}

// Posts an event on an emulated GPU of agent `data_dir` from another process, as the GPU's
// hardware would (through the emulated NVML, not through the agent); returns NVML's answer.
int PostGpuEvent(const std::string& data_dir, const std::string& uuid, unsigned long long type,
                 unsigned long long xid) {
  pid_t child = fork();
  if (child == 0) {
    setenv("PALADIN_EMU_STATE", (data_dir + "/emu.state").c_str(), 1);
    setenv("PALADIN_EMU_GPUS", "2x4GiB", 1);  // as the agent has them (StartAgent)
    const std::string lib = fs::path(PALADIN_BIN).parent_path() / "libpaladin-emucuda.so";
    void* emu = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (emu == nullptr) _exit(100);
    using Init = int (*)();
    using ByUuid = int (*)(const char*, void**);
    using Post = int (*)(void*, unsigned long long, unsigned long long);
    auto init = reinterpret_cast<Init>(dlsym(emu, "nvmlInit_v2"));
    auto by_uuid = reinterpret_cast<ByUuid>(dlsym(emu, "nvmlDeviceGetHandleByUUID"));
    auto post = reinterpret_cast<Post>(dlsym(emu, "paladinEmuNvmlPostEvent"));
    if (init == nullptr || by_uuid == nullptr || post == nullptr || init() != 0) _exit(101);
    void* device = nullptr;
    if (by_uuid(uuid.c_str(), &device) != 0) _exit(102);
    _exit(post(device, type, xid));
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// GPU health from NVML events: an event from the GPU itself (posted by another process, not by
// a command) marks it unhealthy; Xids an application causes and corrected ECC errors do not; the
// `fault` command goes the same way; a fault of no known kind is refused.
TEST_F(AgentTest, HealthEventsMarkGpusUnhealthy) {
  StartAgent("a", {"--kill-on-exit"});
  ASSERT_FALSE(server_.Registrations(Node("a")).empty());
  ASSERT_TRUE(WaitFor(10, [&] {
    return AgentLog("a").find("watching health events of") != std::string::npos;
  })) << AgentLog("a");
  auto health = [&](int index) {
    const Json gpus = server_.Gpus(Node("a"));
    if (!gpus.is_array()) return std::string("?");
    for (const Json& g : gpus) {
      if (g["index"] == index)
        return g["healthy"] == true ? std::string("healthy") : g["fault"].get<std::string>();
    }
    return std::string("?");
  };
  // An application's Xid, from the GPU: logged, the GPU stays healthy.
  ASSERT_EQ(PostGpuEvent(Data("a"), GpuUuid("a", 1), 0x8, 13), 0);
  ASSERT_TRUE(WaitFor(10, [&] {
    return AgentLog("a").find("xid 13 (the GPU stays healthy)") != std::string::npos;
  })) << AgentLog("a");
  // An uncorrectable ECC error, from the GPU: unhealthy.
  ASSERT_EQ(PostGpuEvent(Data("a"), GpuUuid("a", 1), 0x2, 0), 0);
  EXPECT_TRUE(WaitFor(10, [&] { return health(1) == "ecc double-bit"; }))
      << server_.Gpus(Node("a")).dump() << AgentLog("a");
  EXPECT_EQ(health(0), "healthy");

  const Json corrected =
      Run("a", {{"kind", "fault"}, {"gpu_index", 0}, {"fault_kind", "ecc-corrected"}});
  EXPECT_TRUE(corrected.value("ok", false)) << corrected.dump();
  const Json bad = Run("a", {{"kind", "fault"}, {"gpu_index", 0}, {"fault_kind", "melted"}});
  EXPECT_FALSE(bad.value("ok", true)) << bad.dump();
  EXPECT_NE(bad.value("error", "").find("fault_kind"), std::string::npos) << bad.dump();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // a heartbeat or more
  EXPECT_EQ(health(0), "healthy");
  const Json xid =
      Run("a", {{"kind", "fault"}, {"gpu_index", 0}, {"fault_kind", "xid"}, {"code", 48}});
  EXPECT_TRUE(xid.value("ok", false)) << xid.dump();
  EXPECT_TRUE(WaitFor(10, [&] { return health(0) == "xid 48"; })) << server_.Gpus(Node("a")).dump();
  // The first fault stays: a later one does not overwrite why the GPU went bad.
  ASSERT_EQ(PostGpuEvent(Data("a"), GpuUuid("a", 1), 0x8, 79), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(health(1), "ecc double-bit");
}

// An agent that stops leaves its workloads running; the next one adopts them and reports them at
// registration and in its heartbeats.
TEST_F(AgentTest, RestartReadopts) {
  StartAgent("a");
  const Json started = StartGpuJob("a", "j1", 1, 0);
  ASSERT_TRUE(started.value("ok", false)) << AgentLog("a");
  const int64_t pid = started["detail"]["pid"];
  ASSERT_TRUE(WaitGen("a", "j1", 1, 3));
  StopAgent("a", SIGTERM);
  ASSERT_TRUE(Alive(pid)) << "the workload died with its agent";
  const size_t before = Generations(server_.Stdout(Node("a"), "j1", 1)).size();

  StartAgent("a", {"--kill-on-exit"});
  const std::vector<Json> regs = server_.Registrations(Node("a"));
  ASSERT_EQ(regs.size(), 2u);
  ASSERT_EQ(regs.back()["jobs"].size(), 1u) << regs.back().dump();
  EXPECT_EQ(regs.back()["jobs"][0]["id"], "j1");
  EXPECT_EQ(regs.back()["jobs"][0]["pid"], pid);
  EXPECT_EQ(regs.back()["jobs"][0]["state"], "running");
  // Its logs go on from where the server had them.
  ASSERT_TRUE(WaitFor(
      20, [&] { return Generations(server_.Stdout(Node("a"), "j1", 1)).size() > before + 5; }));
  const std::vector<int> gens = Generations(server_.Stdout(Node("a"), "j1", 1));
  for (size_t i = 1; i < gens.size(); ++i) ASSERT_EQ(gens[i], gens[i - 1] + 1) << "lines lost";
  EXPECT_TRUE(Run("a", {{"kind", "kill"}, {"job", "j1"}}).value("ok", false));
  EXPECT_TRUE(WaitFor(10, [&] { return !Alive(pid); }));
}

}  // namespace
}  // namespace paladin::agent_test
