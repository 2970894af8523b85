// main of agent_test (agent_fixture.h): the agent's tests need root and CRIU, and are skipped
// (exit 77) without them.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (geteuid() != 0) {
    std::printf("SKIP: the agent's tests need root (workloads run as their own uids, CRIU)\n");
    return 77;
  }
  if (getenv("PALADIN_CRIU") == nullptr && access("/opt/paladin/criu/criu", X_OK) != 0) {
    std::printf("SKIP: no CRIU (install it with scripts/criu.sh)\n");
    return 77;
  }
  signal(SIGPIPE, SIG_IGN);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
