// A process's identity and its tree (include/paladin/base/process.h), read from /proc.
#include "paladin/base/process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace paladin::base {
namespace {

bool Has(const std::vector<uint32_t>& pids, pid_t pid) {
  return std::find(pids.begin(), pids.end(), static_cast<uint32_t>(pid)) != pids.end();
}

TEST(ProcessTreeTest, HoldsTheRootItsChildrenAndTheirChildrenAndNothingOfAGoneRoot) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A grandchild below it, then word that both are there.
    if (fork() == 0) {
      pause();
      _exit(0);
    }
    (void)!write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);

  const std::vector<uint32_t> tree = ProcessTree(static_cast<uint32_t>(getpid()));
  ASSERT_FALSE(tree.empty());
  EXPECT_EQ(tree.front(), static_cast<uint32_t>(getpid()));
  EXPECT_TRUE(Has(tree, child));
  const std::vector<uint32_t> below = ProcessTree(static_cast<uint32_t>(child));
  EXPECT_EQ(below.size(), 2U) << "the child and its own child";
  EXPECT_EQ(below.front(), static_cast<uint32_t>(child));
  const pid_t grandchild = below.size() == 2 ? static_cast<pid_t>(below[1]) : 0;
  EXPECT_TRUE(Has(tree, grandchild));

  kill(grandchild, SIGKILL);
  kill(child, SIGKILL);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_TRUE(ProcessTree(static_cast<uint32_t>(child)).empty());
  EXPECT_TRUE(ProcessAlive(SelfProcessId()));
}

}  // namespace
}  // namespace paladin::base
