// The workload supervisor (include/paladin/supervise/supervisor.h): what reaches a job's process,
// whose its run directory is, what becomes of a hostile image's emulated-state path, and what a
// job's end is read as. Real processes; the parts that switch user need root and are skipped
// without it.
#include "paladin/supervise/supervisor.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <sstream>
#include <string>

#include "paladin/base/cgroup.h"

namespace paladin::supervise {
namespace {

namespace fs = std::filesystem;

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/paladin-supervise-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    scratch_ = pattern;
    chmod(scratch_.c_str(), 0755);  // a job of another uid walks through it to its run directory
    setenv("PALADIN_WORKLOAD_INIT", PALADIN_WORKLOAD_INIT_BIN, 1);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(scratch_, ec);
  }

  // A job that writes its environment into its run directory and exits.
  LaunchSpec EnvDumper(const std::string& name) const {
    LaunchSpec spec;
    spec.name = name;
    spec.run_dir = scratch_ + "/" + name;
    spec.command = {"/bin/sh", "-c", "env > \"$RUN_DIR_FOR_TEST/env.out\""};
    spec.inherit_env = false;
    spec.env = {{"RUN_DIR_FOR_TEST", spec.run_dir}};
    return spec;
  }

  static int Wait(const Launched& launched) {
    int status = 0;
    while (waitpid(static_cast<pid_t>(launched.record.pid), &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  static std::map<std::string, std::string> ReadEnv(const std::string& path) {
    std::map<std::string, std::string> env;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const size_t eq = line.find('=');
      if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return env;
  }

  std::string scratch_;
};

TEST_F(SupervisorTest, ATeamsLoaderVariableIsRefusedBeforeAnythingIsMade) {
  for (const char* name : {"LD_PRELOAD", "LD_AUDIT", "GCONV_PATH", "PALADIN_QUOTA_REGION",
                           "CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY"}) {
    LaunchSpec spec = EnvDumper("refused");
    spec.env.emplace_back(name, "/tmp/evil.so");
    spec.env_from_team = true;
    StatusOr<Launched> launched = Launch(spec);
    ASSERT_FALSE(launched.ok()) << name;
    EXPECT_EQ(launched.status().code(), StatusCode::kInvalidArgument) << name;
    EXPECT_NE(launched.status().message().find(name), std::string::npos)
        << "the error names the variable: " << launched.status().message();
    EXPECT_FALSE(fs::exists(spec.run_dir)) << "nothing is made for a refused job";
  }
}

TEST_F(SupervisorTest, PaladinsVariablesWinOverTheJobsAndNothingElseLeaks) {
  setenv("PALADIN_SUPERVISE_TEST_SECRET", "the caller's", 1);
  LaunchSpec spec = EnvDumper("vars");
  spec.home = "/home/of/the/job";
  spec.job_id = "job-7";
  spec.env.emplace_back("PALADIN_JOB", "forged");  // the caller's own user may try; Paladin wins
  spec.env.emplace_back("TEAM_SETTING", "kept");
  StatusOr<Launched> launched = Launch(spec);
  ASSERT_TRUE(launched.ok()) << launched.status().message();
  ASSERT_EQ(Wait(*launched), 0);
  const auto env = ReadEnv(spec.run_dir + "/env.out");
  EXPECT_EQ(env.at("PALADIN_JOB"), "job-7");
  EXPECT_EQ(env.at("TEAM_SETTING"), "kept");
  EXPECT_EQ(env.at("HOME"), "/home/of/the/job");
  EXPECT_EQ(env.count("PALADIN_SUPERVISE_TEST_SECRET"), 0U)
      << "without inherit_env nothing of the caller's environment reaches the job";
  unsetenv("PALADIN_SUPERVISE_TEST_SECRET");

  // Its record says where everything is, and a supervisor reads its end from it.
  StatusOr<ckpt::JobRecord> record = ckpt::ReadJob(spec.run_dir);
  ASSERT_TRUE(record.ok()) << record.status().message();
  EXPECT_EQ(record->pid, launched->record.pid);
  EXPECT_EQ(record->stdout_log, spec.run_dir + "/stdout.log");
  EXPECT_EQ(Finish(launched->record).kind, Ending::Kind::kExited);
}

TEST_F(SupervisorTest, AJobsOwnRunDirectoryIsPrivateToItsUid) {
  if (geteuid() != 0) GTEST_SKIP() << "switching to a job's uid needs root";
  constexpr int64_t kUid = 1879990001;  // in no pool this test shares
  LaunchSpec spec = EnvDumper("private");
  spec.command = {"/bin/sh", "-c", "id -u > \"$HOME/uid.out\""};
  spec.home = spec.run_dir;
  spec.cwd = spec.run_dir;
  spec.uid = spec.gid = kUid;
  spec.owner = Owner::kJob;
  StatusOr<Launched> launched = Launch(spec);
  ASSERT_TRUE(launched.ok()) << launched.status().message();
  ASSERT_EQ(Wait(*launched), 0);
  struct stat st {};
  ASSERT_EQ(stat(spec.run_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kUid);
  EXPECT_EQ(st.st_mode & 0777, 0700U) << "no other job can enter it";
  ASSERT_EQ(stat(launched->record.stdout_log.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kUid) << "its logs are its own";
  std::ifstream in(spec.run_dir + "/uid.out");
  int64_t seen = -1;
  in >> seen;
  EXPECT_EQ(seen, kUid) << "the command ran as the job's uid and could write its own directory";
}

TEST_F(SupervisorTest, AComputeShareOutsideAPercentageIsRefused) {
  for (int share : {-1, 101}) {
    LaunchSpec spec = EnvDumper("share");
    spec.gpu.compute_share = share;
    StatusOr<Launched> launched = Launch(spec);
    ASSERT_FALSE(launched.ok()) << share;
    EXPECT_EQ(launched.status().code(), StatusCode::kInvalidArgument);
    EXPECT_FALSE(fs::exists(spec.run_dir));
  }
}

TEST_F(SupervisorTest, FinishTellsACheckpointAndAMoveFromAnExit) {
  ckpt::JobRecord job;
  job.name = "ended";
  job.run_dir = scratch_ + "/ended";
  fs::create_directory(job.run_dir);
  for (const auto& [state, kind] : std::vector<std::pair<ckpt::RunState, Ending::Kind>>{
           {ckpt::RunState::kCheckpointed, Ending::Kind::kCheckpointed},
           {ckpt::RunState::kMoved, Ending::Kind::kMoved},
           {ckpt::RunState::kMoving, Ending::Kind::kMoved},
           {ckpt::RunState::kRunning, Ending::Kind::kExited}}) {
    const std::string name(ckpt::RunStateName(state));
    job.state = state;
    job.image = "/images/" + name;
    ASSERT_TRUE(ckpt::WriteJob(job).ok());
    const Ending ending = Finish(job);
    EXPECT_EQ(ending.kind, kind) << name;
    EXPECT_EQ(ending.image, job.image) << name;
  }
}

// A copy restored into the same run directory (a move or a restore on this machine, one run
// base) wrote its own record there, whatever its state: the directory is that copy's, not an
// exited job's to clean up.
TEST_F(SupervisorTest, FinishLeavesTheRunDirectoryToACopyRestoredIntoIt) {
  ckpt::JobRecord job;
  job.name = "taken";
  job.pid = 4000;
  job.run_dir = scratch_ + "/taken";
  fs::create_directory(job.run_dir);
  ckpt::JobRecord copy = job;
  copy.pid = 4100;
  for (const ckpt::RunState state : {ckpt::RunState::kRunning, ckpt::RunState::kStopped}) {
    copy.state = state;
    ASSERT_TRUE(ckpt::WriteJob(copy).ok());
    const Ending ending = Finish(job);
    EXPECT_EQ(ending.kind, Ending::Kind::kTakenOver) << ckpt::RunStateName(state);
    EXPECT_EQ(ending.pid, 4100);
  }
  job.state = ckpt::RunState::kRunning;
  ASSERT_TRUE(ckpt::WriteJob(job).ok());
  EXPECT_EQ(Finish(job).kind, Ending::Kind::kExited) << "its own record: it exited";
}

// Whoever cleans up after an old copy of a job removes its run directory only while no other
// copy runs from it, and waits for a restore in flight to say so by its record.
TEST_F(SupervisorTest, ARunDirectoryGoesOnlyWhileNoOtherCopyRunsFromIt) {
  ckpt::JobRecord job;
  job.name = "left";
  job.pid = 5000;
  job.run_dir = scratch_ + "/left";
  fs::create_directory(job.run_dir);
  ckpt::JobRecord copy = job;
  copy.pid = 5100;
  ASSERT_TRUE(ckpt::WriteJob(copy).ok());
  EXPECT_FALSE(ckpt::RemoveRunDirUnlessTaken(job));
  EXPECT_TRUE(fs::exists(job.run_dir)) << "another copy's directory stays";
  ASSERT_TRUE(ckpt::WriteJob(job).ok());
  EXPECT_TRUE(ckpt::RemoveRunDirUnlessTaken(job));
  EXPECT_FALSE(fs::exists(job.run_dir));

  // A restore in flight holds the lock until the record names its copy.
  if (geteuid() != 0 || base::Cgroup::Version() == "none") GTEST_SKIP() << "needs root and cgroups";
  StatusOr<base::Cgroup> group = base::Cgroup::Create("supervise-lock-" + std::to_string(getpid()));
  ASSERT_TRUE(group.ok()) << group.status().message();
  fs::create_directory(job.run_dir);
  ASSERT_TRUE(ckpt::WriteJob(job).ok());
  std::future<bool> removal;
  {
    const base::CgroupsLock restore = base::CgroupsLock::Shared();
    removal = std::async(std::launch::async, [&job] { return ckpt::RemoveRunDirUnlessTaken(job); });
    EXPECT_EQ(removal.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
        << "the removal did not wait for the restore";
    EXPECT_TRUE(ckpt::WriteJob(copy).ok()) << "the run directory went under the restore";
  }
  EXPECT_FALSE(removal.get());
  EXPECT_TRUE(fs::exists(job.run_dir + "/job.json"));
  EXPECT_TRUE(group->Remove().ok());
}

// An image's manifest is untrusted: its emulated state file is linked only where it names a
// *.state file by an absolute, normal path.
TEST_F(SupervisorTest, PrepareForLinksOnlyWhatLooksLikeAStateFile) {
  const std::string own = scratch_ + "/own.state";
  std::ofstream(own) << "state";
  RestoreSpec spec;
  spec.emu_state = own;
  ckpt::Manifest manifest;
  manifest.gpu_mode = "emulated";

  const std::string victim = scratch_ + "/victim";
  fs::create_directory(victim);
  for (const std::string& hostile :
       {victim, victim + "/../victim/x.state", std::string("relative.state"), victim + "/x.txt"}) {
    manifest.emu_state = hostile;
    PrepareFor(manifest, spec);
    EXPECT_FALSE(fs::exists(fs::symlink_status(hostile + ".ctl"))) << hostile;
  }
  EXPECT_TRUE(fs::is_empty(victim)) << "nothing was made in the victim's folder";

  // Another node's state file: a link to this node's, and its control folder to the host's.
  const std::string theirs = scratch_ + "/elsewhere/node-b/emu.state";
  manifest.emu_state = theirs;
  PrepareFor(manifest, spec);
  EXPECT_EQ(fs::read_symlink(theirs), own);
  EXPECT_EQ(fs::read_symlink(theirs + ".ctl"), kHostControlDir);

  // Without a state file of this node's the image's paths are left as they are.
  const std::string untouched = scratch_ + "/untouched/emu.state";
  manifest.emu_state = untouched;
  spec.emu_state.clear();
  PrepareFor(manifest, spec);
  EXPECT_FALSE(fs::exists(fs::path(untouched).parent_path()));
}

}  // namespace
}  // namespace paladin::supervise
