// A team's environment variables against the node (issue: root from a team token). Two layers:
//   1. core::CheckJobEnv, the rule the server applies at submit and the agent again at start:
//      every loader or glibc variable, every variable Paladin sets, and every malformed name or
//      value is refused with a message naming it.
//   2. ckpt::StartWorkload, the one launcher: even a variable that got through never reaches a
//      root process. An LD_PRELOAD / LD_AUDIT probe library records the euid of every process
//      that loads it; paladin-workload-init (root) must never be one, and its environment must be
//      the fixed one. Nothing of the launcher's own environment reaches a job that does not
//      inherit it (the node agent's jobs).
// Layer 2 needs root (a job of another user under paladin-workload-init); it is skipped without.
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "paladin/ckpt/workload.h"
#include "paladin/core/job_env.h"

namespace paladin {
namespace {

namespace fs = std::filesystem;
using Env = std::vector<std::pair<std::string, std::string>>;

int g_tried = 0;
int g_refused = 0;

TEST(JobEnvTest, RefusesLoaderGlibcAndPaladinVariablesNamingThem) {
  const std::vector<std::string> refused = {"LD_PRELOAD",
                                            "LD_AUDIT",
                                            "LD_LIBRARY_PATH",
                                            "LD_BIND_NOW",
                                            "LD_DEBUG",
                                            "LD_DEBUG_OUTPUT",
                                            "LD_PROFILE",
                                            "LD_ORIGIN_PATH",
                                            "GCONV_PATH",
                                            "GETCONF_DIR",
                                            "GLIBC_TUNABLES",
                                            "HOSTALIASES",
                                            "LOCALDOMAIN",
                                            "LOCPATH",
                                            "MALLOC_TRACE",
                                            "NIS_PATH",
                                            "NLSPATH",
                                            "RESOLV_HOST_CONF",
                                            "RES_OPTIONS",
                                            "TZDIR",
                                            "PALADIN_JOB",
                                            "PALADIN_QUOTA_REGION",
                                            "PALADIN_EMU_STATE",
                                            "CUDA_VISIBLE_DEVICES",
                                            "CUDA_MPS_PIPE_DIRECTORY"};
  for (const std::string& name : refused) {
    ++g_tried;
    const Status s = core::CheckJobEnv({{"OK_BEFORE", "1"}, {name, "/tmp/x"}});
    EXPECT_FALSE(s.ok()) << name;
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("may not be set"), std::string::npos) << s.message();
    if (!s.ok()) ++g_refused;
  }
}

TEST(JobEnvTest, RefusesMalformedNamesAndValues) {
  const std::vector<Env> bad = {
      {{"", "x"}},
      {{"1ABC", "x"}},
      {{"A=B", "x"}},
      {{"A B", "x"}},
      {{"A-B", "x"}},
      {{"Ä", "x"}},
      {{std::string("A\0B", 3), "x"}},
      {{"A", std::string("x\0LD_PRELOAD=/tmp/evil.so", 25)}},
      {{"A", std::string(core::kMaxJobEnvValueBytes + 1, 'x')}},
      {{std::string(core::kMaxJobEnvNameBytes + 1, 'A'), "x"}},
  };
  for (const Env& env : bad) {
    ++g_tried;
    const Status s = core::CheckJobEnv(env);
    EXPECT_FALSE(s.ok()) << env[0].first;
    EXPECT_EQ(s.message().rfind("env: ", 0), 0u) << s.message();
    if (!s.ok()) ++g_refused;
  }
  Env many;
  for (size_t i = 0; i <= core::kMaxJobEnvVariables; ++i)
    many.emplace_back("V" + std::to_string(i), "1");
  ++g_tried;
  if (!core::CheckJobEnv(many).ok()) ++g_refused;
  Env big;
  for (int i = 0; i < 10; ++i)
    big.emplace_back("V" + std::to_string(i), std::string(120 * 1024, 'x'));
  ++g_tried;
  if (!core::CheckJobEnv(big).ok()) ++g_refused;
  EXPECT_EQ(g_tried, g_refused);
}

TEST(JobEnvTest, AcceptsWhatJobsUse) {
  EXPECT_TRUE(core::CheckJobEnv({{"PYTHONPATH", "/opt/lib"},
                                 {"OMP_NUM_THREADS", "4"},
                                 {"TMPDIR", "/scratch"},
                                 {"HOME", "/home/x"},
                                 {"WANDB_API_KEY", "secret=with=equals"},
                                 {"_private", ""},
                                 {"ld_preload", "lower case is not the loader's"}})
                  .ok());
}

// --- layer 2: the launcher ---

struct Job {
  pid_t pid = 0;
  fs::path dir;
};

class LaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (a job of another user)";
    setenv("PALADIN_WORKLOAD_INIT", PALADIN_WORKLOAD_INIT_PATH, 1);
    const passwd* nobody = getpwnam("nobody");
    ASSERT_NE(nobody, nullptr);
    uid_ = nobody->pw_uid;
    gid_ = nobody->pw_gid;
    char tmpl[] = "/tmp/paladin-envsec.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    chmod(dir_.c_str(), 0777);
    probe_out_ = dir_ / "probe.log";
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  StatusOr<ckpt::StartedWorkload> Start(const std::string& script, Env env, bool inherit) {
    const fs::path run = dir_ / ("run" + std::to_string(++runs_));
    fs::create_directories(run);
    chmod(run.c_str(), 0777);
    ckpt::WorkloadSpec spec;
    spec.command = {"/bin/sh", "-c", script};
    spec.env = std::move(env);
    spec.inherit_env = inherit;
    spec.stdout_log = (run / "stdout.log").string();
    spec.stderr_log = (run / "stderr.log").string();
    spec.cwd = run.string();
    spec.uid = uid_;
    spec.gid = gid_;
    return ckpt::StartWorkload(spec);
  }

  static int Wait(pid_t pid) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  static std::string Read(const fs::path& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  uid_t uid_ = 0;
  gid_t gid_ = 0;
  fs::path dir_;
  fs::path probe_out_;
  int runs_ = 0;
};

TEST_F(LaunchTest, PreloadAndAuditReachOnlyTheUnprivilegedJob) {
  for (const char* variable : {"LD_PRELOAD", "LD_AUDIT"}) {
    std::error_code ec;
    fs::remove(probe_out_, ec);
    const fs::path done = dir_ / (std::string(variable) + ".done");
    StatusOr<ckpt::StartedWorkload> w =
        Start("touch " + done.string(),
              {{variable, PALADIN_ENV_PROBE_PATH}, {"PALADIN_TEST_PROBE_OUT", probe_out_.string()}},
              /*inherit=*/false);
    ASSERT_TRUE(w.ok()) << w.status().message();
    ASSERT_TRUE(w->init) << "paladin-workload-init was not used";
    EXPECT_EQ(Wait(w->pid), 0);
    EXPECT_TRUE(fs::exists(done));
    const std::string log = Read(probe_out_);
    ++g_tried;
    // The job's own processes did load it (the variable reached the job, as the team asked) ...
    EXPECT_NE(log.find("euid=" + std::to_string(uid_)), std::string::npos) << variable << "\n"
                                                                           << log;
    // ... and no process running as root did.
    EXPECT_EQ(log.find("euid=0 "), std::string::npos) << variable << "\n" << log;
    if (log.find("euid=0 ") == std::string::npos) ++g_refused;
  }
}

TEST_F(LaunchTest, InitRunsWithTheFixedEnvironmentOnly) {
  StatusOr<ckpt::StartedWorkload> w =
      Start("sleep 30", {{"LD_PRELOAD", PALADIN_ENV_PROBE_PATH}, {"TEAM_SECRET", "s3cret"}}, false);
  ASSERT_TRUE(w.ok()) << w.status().message();
  ASSERT_TRUE(w->init);
  // Once the launcher's child has become init (exec), its environment is what it got.
  const std::string proc = "/proc/" + std::to_string(w->pid);
  std::string environ_text;
  for (int i = 0; i < 250; ++i) {
    std::error_code ec;
    // The kernel points exe at the new program before it lays out the new environment, so
    // an empty read in between is the exec still under way, not an empty environment.
    if (fs::read_symlink(proc + "/exe", ec) == fs::path(PALADIN_WORKLOAD_INIT_PATH)) {
      environ_text = Read(proc + "/environ");
      if (!environ_text.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(w->pid, SIGKILL);
  Wait(w->pid);
  ++g_tried;
  EXPECT_EQ(
      environ_text,
      std::string("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin") + '\0');
  if (environ_text.find("LD_PRELOAD") == std::string::npos &&
      environ_text.find("TEAM_SECRET") == std::string::npos) {
    ++g_refused;
  }
}

TEST_F(LaunchTest, LauncherEnvironmentStaysOutUnlessInherited) {
  setenv("PALADIN_TEST_AGENT_SECRET", "agent-only", 1);
  for (const bool inherit : {false, true}) {
    const fs::path out = dir_ / (inherit ? "inherited.env" : "clean.env");
    StatusOr<ckpt::StartedWorkload> w =
        Start("env > " + out.string(), {{"HOME", "/first"}, {"JOB_VAR", "1"}, {"HOME", "/second"}},
              inherit);
    ASSERT_TRUE(w.ok()) << w.status().message();
    EXPECT_EQ(Wait(w->pid), 0);
    const std::string env = Read(out);
    EXPECT_NE(env.find("JOB_VAR=1\n"), std::string::npos) << env;
    // A later entry replaces an earlier one: HOME appears once, with the last value.
    EXPECT_NE(env.find("HOME=/second\n"), std::string::npos) << env;
    EXPECT_EQ(env.find("HOME=/first"), std::string::npos) << env;
    EXPECT_EQ(env.find("PALADIN_TEST_AGENT_SECRET") != std::string::npos, inherit) << env;
    if (!inherit) {
      ++g_tried;
      if (env.find("PALADIN_TEST_AGENT_SECRET") == std::string::npos) ++g_refused;
    }
  }
  unsetenv("PALADIN_TEST_AGENT_SECRET");
}

class CountsPrinter : public ::testing::Environment {
 public:
  void TearDown() override {
    std::printf("security: env: tried %d, refused %d\n", g_tried, g_refused);
  }
};
const ::testing::Environment* const kPrinter =
    ::testing::AddGlobalTestEnvironment(new CountsPrinter);

}  // namespace
}  // namespace paladin
