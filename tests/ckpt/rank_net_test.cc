// A rank's own network (include/paladin/ckpt/rank_net.h): names and addresses checked before
// they reach a command line, the host interface's name, the manifest's record of the job's
// network; a job frozen and thawed for a coordinated cut (checkpoint.h), and a rank refused a
// checkpoint without CRIU's network lock. The namespaces themselves are made and removed by
// gang_net_test.sh (root).
#include "paladin/ckpt/rank_net.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/criu.h"
#include "paladin/ckpt/image.h"

namespace paladin::ckpt {
namespace {

TEST(RankNetName, TakesPlainNamesOnly) {
  EXPECT_TRUE(CheckRankNetName("job-7.rank_0").ok());
  EXPECT_TRUE(CheckRankNetName(std::string(64, 'a')).ok());
  for (const std::string& bad :
       {std::string(), std::string(65, 'a'), std::string("-n"), std::string(".."),
        std::string("a/b"), std::string("a b"), std::string("a;rm"), std::string("a\nb"),
        std::string("r\0x", 3)}) {
    const Status s = CheckRankNetName(bad);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(RankAddress, TakesUnicastDottedQuadsOnly) {
  EXPECT_TRUE(CheckRankAddress("10.77.1.2").ok());
  EXPECT_TRUE(CheckRankAddress("192.168.0.1").ok());
  for (const char* bad : {"", "10.1.2", "10.1.2.3/32", "010.1.2.3", "10.1.2.256", " 10.1.2.3",
                          "10.1.2.3 ", "0.0.0.0", "127.0.0.1", "224.0.0.1", "255.255.255.255",
                          "::1", "10.1.2.3\n", "-10.1.2.3", "1e1.1.1.1"}) {
    EXPECT_FALSE(CheckRankAddress(bad).ok()) << bad;
  }
}

TEST(RankNet, PathAndHostInterface) {
  EXPECT_EQ(RankNetPath("r0"), "/run/netns/r0");
  const std::string a = RankHostInterface("job-1-rank-0");
  EXPECT_EQ(a.size(), 12U);  // "pal-" and 8 hex digits: under the 15 bytes of IFNAMSIZ
  EXPECT_EQ(a.rfind("pal-", 0), 0U);
  EXPECT_EQ(a, RankHostInterface("job-1-rank-0"));
  EXPECT_NE(a, RankHostInterface("job-1-rank-1"));
}

TEST(RankNet, RefusesHostileInputBeforeRunningAnything) {
  EXPECT_EQ(CreateRankNet({"a b", "10.0.0.2"}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateRankNet({"r0", "10.0.0.2 dev lo"}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DestroyRankNet("../x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SetRankRoute("10.0.0.2", "via").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RemoveRankRoute("default").code(), StatusCode::kInvalidArgument);
}

TEST(RankNet, NameOfPath) {
  EXPECT_EQ(RankNetNameOf("/run/netns/r0"), "r0");
  EXPECT_EQ(RankNetNameOf("/run/netns/a/b"), "");
  EXPECT_EQ(RankNetNameOf("/run/netns/"), "");
  EXPECT_EQ(RankNetNameOf("/proc/1/ns/net"), "");
}

class ManifestNetwork : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "rank-net-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // The manifest written by WriteManifest with `edit` applied to its text.
  StatusOr<Manifest> Reread(const std::string& from, const std::string& to) {
    const std::string path = dir_ + "/manifest.json";
    std::string text;
    {
      std::ifstream in(path);
      text.assign(std::istreambuf_iterator<char>(in), {});
    }
    const size_t at = text.find(from);
    if (at != std::string::npos) text.replace(at, from.size(), to);
    std::ofstream(path, std::ios::trunc) << text;
    return ReadManifest(dir_);
  }
  std::string dir_;
};

TEST_F(ManifestNetwork, KeepsTheJobsNetworkAndChecksIt) {
  Manifest m;
  m.name = "rank0";
  m.net_ns = "/run/netns/r0";
  m.net_address = "10.1.2.3";
  ASSERT_TRUE(WriteManifest(dir_, m).ok());
  StatusOr<Manifest> back = ReadManifest(dir_);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->net_ns, "/run/netns/r0");
  EXPECT_EQ(back->net_address, "10.1.2.3");
  StatusOr<Manifest> bad = Reread("\"10.1.2.3\"", "\"10.1.2.3 dev lo\"");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("workload.net_address"), std::string::npos);
  bad = Reread("\"/run/netns/r0\"", "\"run/../netns\"");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("workload.net_ns"), std::string::npos);
}

TEST_F(ManifestNetwork, AJobInItsLaunchersNetworkHasNone) {
  Manifest m;
  m.name = "plain";
  ASSERT_TRUE(WriteManifest(dir_, m).ok());
  std::ifstream in(dir_ + "/manifest.json");
  const std::string text(std::istreambuf_iterator<char>(in), {});
  EXPECT_EQ(text.find("net_ns"), std::string::npos);
  StatusOr<Manifest> back = ReadManifest(dir_);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->net_ns, "");
}

// A job record for a child process that sleeps, in a run directory of its own.
class FrozenJob : public ManifestNetwork {
 protected:
  void SetUp() override {
    ManifestNetwork::SetUp();
    child_ = fork();
    if (child_ == 0) {
      execlp("sleep", "sleep", "60", nullptr);
      _exit(127);
    }
    ASSERT_GT(child_, 0);
    job_.name = "frozen-test";
    job_.run_dir = dir_;
    job_.pid = child_;
  }
  void TearDown() override {
    kill(child_, SIGKILL);
    waitpid(child_, nullptr, 0);
    ManifestNetwork::TearDown();
  }
  char State() const {
    std::ifstream in("/proc/" + std::to_string(child_) + "/stat");
    const std::string text(std::istreambuf_iterator<char>(in), {});
    const size_t paren = text.rfind(')');
    return paren == std::string::npos || paren + 2 >= text.size() ? '?' : text[paren + 2];
  }
  pid_t child_ = -1;
  JobRecord job_;
};

TEST_F(FrozenJob, FreezesAndThaws) {
  // A thaw of a running job, or a freeze of one that is not running, is refused.
  EXPECT_EQ(ThawJob(&job_).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(FreezeJob(&job_).ok());
  EXPECT_EQ(job_.state, RunState::kFrozen);
  EXPECT_EQ(State(), 'T');
  StatusOr<JobRecord> written = ReadJob(dir_);
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(written->state, RunState::kFrozen);
  EXPECT_EQ(FreezeJob(&job_).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(ThawJob(&job_).ok());
  EXPECT_EQ(job_.state, RunState::kRunning);
  for (int i = 0; i < 200 && State() == 'T'; ++i) usleep(10000);
  EXPECT_NE(State(), 'T');
}

TEST_F(FrozenJob, AJobWithAGpuIsNotFrozen) {
  job_.gpu = "emulated";
  const Status s = FreezeJob(&job_);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("GPU"), std::string::npos);
  EXPECT_NE(State(), 'T');
}

// A rank keeps its connections to the other ranks only under CRIU's network lock: without one
// the checkpoint is refused before anything is done, and its image directory is gone.
TEST_F(FrozenJob, ARankIsNotCheckpointedWithoutTheNetworkLock) {
  job_.net_ns = "/run/netns/some-rank";
  Criu criu;
  criu.network_lock = "skip";
  const std::string out = dir_ + "/image";
  StatusOr<PhaseTimes> times =
      CheckpointJob(criu, &job_, out, CheckpointOptions{}, [](const std::string&) {});
  ASSERT_FALSE(times.ok());
  EXPECT_EQ(times.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(times.status().message().find("network lock"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_NE(State(), 'T');
}

}  // namespace
}  // namespace paladin::ckpt
