// The words of the agent's local socket that both ends spell through include/paladin/agent/local.h:
// `checkpoint`'s "leave" and the "state" that `steps` reports (docs/slurm.md). They are the wire's
// and never change.
#include <gtest/gtest.h>

#include "paladin/agent/local.h"

namespace paladin::agent {
namespace {

TEST(LocalNamesTest, LeaveRoundTrips) {
  EXPECT_STREQ(SlurmLeaveName(SlurmLeave::kRunning), "running");
  EXPECT_STREQ(SlurmLeaveName(SlurmLeave::kStopped), "stopped");
  for (SlurmLeave leave : {SlurmLeave::kRunning, SlurmLeave::kStopped}) {
    EXPECT_EQ(SlurmLeaveNamed(SlurmLeaveName(leave)), leave);
  }
  EXPECT_EQ(SlurmLeaveNamed("frozen"), std::nullopt);
  EXPECT_EQ(SlurmLeaveNamed(""), std::nullopt);
}

TEST(LocalNamesTest, StepStatesAreTheWiresWords) {
  EXPECT_STREQ(SlurmStepStateName(SlurmStepState::kStarting), "starting");
  EXPECT_STREQ(SlurmStepStateName(SlurmStepState::kRunning), "running");
  EXPECT_STREQ(SlurmStepStateName(SlurmStepState::kCheckpointing), "checkpointing");
  EXPECT_STREQ(SlurmStepStateName(SlurmStepState::kStopped), "stopped");
}

}  // namespace
}  // namespace paladin::agent
