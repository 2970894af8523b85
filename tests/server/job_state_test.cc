// The job state graph (src/server/job_state.h): every pair of states, allowed or refused, against
// the table below; names round-trip; an illegal move is refused.
#include "server/job_state.h"

#include <gtest/gtest.h>

#include <string>

#include "server/model.h"

namespace paladin::server {
namespace {

// Rows: from; columns: to, in kAllJobStates' order
// (pending starting running migrating checkpointing checkpointed restoring succeeded failed
// cancelled). 1: allowed.
constexpr int kAllowed[10][10] = {
    // pe st ru mi cp cd re su fa ca
    {1, 1, 0, 0, 0, 0, 1, 1, 1, 1},  // pending: placed, or restored from the image it waited with
    {1, 1, 1, 0, 0, 0, 1, 1, 1, 1},  // starting: runs, or placed again (start failed, node died)
    {1, 0, 1, 1, 1, 0, 1, 1, 1, 1},  // running: moves, checkpoints, or starts over / restores
    {1, 0, 1, 1, 0, 0, 1, 1, 1, 1},  // migrating: runs (here or there), or its node died
    {1, 0, 1, 0, 1, 1, 1, 1, 1, 1},  // checkpointing: runs on, stopped with its image, preempted
    {0, 0, 0, 0, 0, 1, 1, 1, 1, 1},  // checkpointed: resumed on request
    {1, 0, 1, 0, 0, 1, 1, 1, 1, 1},  // restoring: runs, keeps its image, or starts over
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0},  // succeeded
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0},  // failed
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0},  // cancelled
};

TEST(JobStateTest, EveryTransitionIsAllowedOrRefusedAsTheTableSays) {
  int refused = 0;
  for (size_t from = 0; from < kAllJobStates.size(); ++from) {
    for (size_t to = 0; to < kAllJobStates.size(); ++to) {
      const bool allowed = JobStateAllows(kAllJobStates[from], kAllJobStates[to]);
      EXPECT_EQ(allowed, kAllowed[from][to] == 1)
          << JobStateName(kAllJobStates[from]) << " -> " << JobStateName(kAllJobStates[to]);
      refused += allowed ? 0 : 1;
    }
  }
  EXPECT_EQ(refused, 52) << "the refused transitions: 30 from the ended states, 22 others";
}

TEST(JobStateTest, NamesRoundTripAndNothingElseParses) {
  for (JobState s : kAllJobStates) EXPECT_EQ(ParseJobState(JobStateName(s)), s);
  for (const char* other : {"", "lost", "exited", "Running", "running ", "alive"}) {
    EXPECT_FALSE(ParseJobState(other).has_value()) << other;
  }
  EXPECT_TRUE(IsTerminal(JobState::kCancelled));
  EXPECT_FALSE(IsTerminal(JobState::kCheckpointed));
}

TEST(JobStateTest, AJobMovesAlongTheGraphAndAnEndedJobNeverChanges) {
  JobRecord j;
  j.id = "j-000001";
  EXPECT_EQ(j.state(), JobState::kPending);
  EXPECT_TRUE(j.MoveTo(JobState::kStarting));
  EXPECT_TRUE(j.MoveTo(JobState::kRunning));
  EXPECT_TRUE(j.HoldsGpu());
  EXPECT_TRUE(j.MoveTo(JobState::kCheckpointing));
  EXPECT_TRUE(j.MoveTo(JobState::kCheckpointed));
  EXPECT_FALSE(j.HoldsGpu());
  EXPECT_TRUE(j.MoveTo(JobState::kRestoring));
  EXPECT_FALSE(j.HoldsGpu()) << "restoring without a node waits for room";
  j.node = "node-a";
  EXPECT_TRUE(j.HoldsGpu());
  EXPECT_TRUE(j.MoveTo(JobState::kRunning));
  EXPECT_TRUE(j.MoveTo(JobState::kSucceeded));
  EXPECT_TRUE(j.Terminal());
  EXPECT_EQ(j.StateName(), "succeeded");
#ifdef NDEBUG
  EXPECT_FALSE(j.MoveTo(JobState::kRunning));
  EXPECT_EQ(j.state(), JobState::kSucceeded);
#else
  EXPECT_DEATH(j.MoveTo(JobState::kRunning), "succeeded -> running is not a transition");
#endif
}

}  // namespace
}  // namespace paladin::server
