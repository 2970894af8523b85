// Reading which control groups a process is in (include/paladin/base/cgroup.h): the lines of
// /proc/PID/cgroup, and the group under paladin/ a job's process was put in (root only: making a
// group needs write access to the hierarchy); a removal never takes a group from under a restore.
#include "paladin/base/cgroup.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>
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

// A child that waits to be killed, holding none of this process's descriptors (a lock among them).
pid_t Sleeper() {
  const pid_t child = fork();
  if (child == 0) {
    close_range(3, ~0U, 0);
    pause();
    _exit(0);
  }
  return child;
}

// What a supervisor cleaning up after a checkpoint meets when a restore of the same job has begun:
// the restore holds the groups' lock while CRIU takes the (empty) group and moves the job in, so
// the removal waits, then finds the group in use and leaves it.
TEST(CgroupsLockTest, ARemovalWaitsForARestoreAndLeavesTheGroupItFilled) {
  if (geteuid() != 0 || Cgroup::Version() == "none") GTEST_SKIP() << "needs root and cgroups";
  const std::string name = "cgroup-lock-test-" + std::to_string(getpid());
  StatusOr<Cgroup> group = Cgroup::Create(name);
  ASSERT_TRUE(group.ok()) << group.status().message();
  const pid_t restored = Sleeper();
  ASSERT_GE(restored, 0);
  std::future<Status> removal;
  {
    const CgroupsLock restore = CgroupsLock::Shared();
    removal = std::async(std::launch::async, [&] { return group->Remove(); });
    EXPECT_EQ(removal.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
        << "the removal did not wait for the restore";
    EXPECT_TRUE(group->Add(restored).ok()) << "the group went while the restore held the lock";
  }
  const Status removed = removal.get();
  EXPECT_FALSE(removed.ok()) << "a group with the restored job in it was removed";
  EXPECT_EQ(Cgroup::Of(restored), name);
  kill(restored, SIGKILL);
  waitpid(restored, nullptr, 0);
  EXPECT_TRUE(group->Remove().ok());
}

// An agent's loop never waits: TryExclusive says at once that a restore holds the lock.
TEST(CgroupsLockTest, TryExclusiveGivesNothingWhileARestoreHoldsTheLock) {
  if (geteuid() != 0 || Cgroup::Version() == "none") GTEST_SKIP() << "needs root and cgroups";
  StatusOr<Cgroup> group = Cgroup::Create("cgroup-lock-try-" + std::to_string(getpid()));
  ASSERT_TRUE(group.ok()) << group.status().message();
  {
    const CgroupsLock restore = CgroupsLock::Shared();
    EXPECT_FALSE(std::async(std::launch::async, [] {
                   return CgroupsLock::TryExclusive().has_value();
                 }).get());
  }
  // The lock is the machine's: a restore of another test running beside this one may hold it
  // for a while, so the free lock is asked for again until it comes (at most two minutes).
  auto once_free = [] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    for (;;) {
      std::optional<CgroupsLock> lock = CgroupsLock::TryExclusive();
      if (lock.has_value() || std::chrono::steady_clock::now() >= until) return lock;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  };
  std::optional<CgroupsLock> now = once_free();
  ASSERT_TRUE(now.has_value());
  EXPECT_TRUE(group->RemoveHolding(*now).ok());
}

// A workload holding the lock would stop every restore and clean-up of the machine: the lock is
// a file only root opens.
TEST(CgroupsLockTest, NoOtherUserCanOpenTheLock) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  { const CgroupsLock made = CgroupsLock::Shared(); }
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(2);
    const int fd = open("/run/paladin/places.lock", O_RDONLY | O_CLOEXEC);
    _exit(fd < 0 && errno == EACCES ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "another user opened the lock's file";
}

TEST(CgroupsLockTest, RestoresShareTheLock) {
  if (geteuid() != 0 || Cgroup::Version() == "none") GTEST_SKIP() << "needs root and cgroups";
  StatusOr<Cgroup> group = Cgroup::Create("cgroup-lock-shared-" + std::to_string(getpid()));
  ASSERT_TRUE(group.ok()) << group.status().message();
  {
    const CgroupsLock first = CgroupsLock::Shared();
    std::future<void> second =
        std::async(std::launch::async, [] { const CgroupsLock lock = CgroupsLock::Shared(); });
    EXPECT_EQ(second.wait_for(std::chrono::seconds(30)), std::future_status::ready)
        << "a second restore waited for the first";
  }
  EXPECT_TRUE(group->Remove().ok());
}

}  // namespace
}  // namespace paladin::base
