// Reading which control groups a process is in (include/paladin/base/cgroup.h): the lines of
// /proc/PID/cgroup, and the group under paladin/ a job's process was put in (root only: making a
// group needs write access to the hierarchy).
#include "paladin/base/cgroup.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace paladin::base {
namespace {

TEST(CgroupsOfTest, ReadsEveryHierarchyOfALiveProcessAndNothingOfAGoneOne) {
  const std::vector<CgroupLine> own = CgroupsOf(getpid());
  ASSERT_FALSE(own.empty());
  for (const CgroupLine& line : own) EXPECT_EQ(line.path.rfind('/', 0), 0U) << line.path;

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_TRUE(CgroupsOf(child).empty());
  EXPECT_EQ(Cgroup::Of(child), "");
}

TEST(CgroupsOfTest, NamesTheGroupAJobsProcessWasPutIn) {
  if (geteuid() != 0 || Cgroup::Version() == "none") GTEST_SKIP() << "needs root and cgroups";
  const std::string name = "cgroup-test-" + std::to_string(getpid());
  StatusOr<Cgroup> group = Cgroup::Create(name);
  ASSERT_TRUE(group.ok()) << group.status().message();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  ASSERT_TRUE(group->Add(child).ok());
  EXPECT_EQ(Cgroup::Of(child), name);
  bool seen = false;
  for (const CgroupLine& line : CgroupsOf(child)) {
    seen = seen || line.path == "/paladin/" + name;
  }
  EXPECT_TRUE(seen);
  EXPECT_EQ(Cgroup::Of(getpid()), "") << "this test's own process is in no group of Paladin's";
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_TRUE(group->Remove().ok());
}

}  // namespace
}  // namespace paladin::base
