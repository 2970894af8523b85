// The fleet migration's steps (src/server/migration_steps.h): for every step, with and without
// the commit, what each event makes the orchestrator do, against a table.
#include "server/migration_steps.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace paladin::server {
namespace {

using A = MigrationAction::Kind;
using E = MigrationEvent::Kind;
using S = MigrationStep;

struct Row {
  S step;
  bool committed;
  E event;
  A expected;
};

// Worked out from the transaction (docs/server.md): before the commit a failure fails the move
// and the source runs on; after it, the destination has the job and any report finishes it.
const std::vector<Row> kTable = {
    // The row is made: the destination is asked to listen, once.
    {S::kReserved, false, E::kReserved, A::kSendMigrateIn},
    {S::kMigrateInSent, false, E::kReserved, A::kNone},
    // The destination listens: the source is asked to send, once.
    {S::kMigrateInSent, false, E::kListening, A::kSendMigrateOut},
    {S::kMigrateInSent, false, E::kMigrateInOk, A::kSendMigrateOut},
    {S::kTransfer, false, E::kListening, A::kNone},
    {S::kTransfer, false, E::kMigrateInOk, A::kNone},
    {S::kReserved, false, E::kListening, A::kNone},
    // Failures before the commit fail the move, at every step.
    {S::kReserved, false, E::kMigrateInFailed, A::kFail},
    {S::kMigrateInSent, false, E::kMigrateInFailed, A::kFail},
    {S::kTransfer, false, E::kMigrateInFailed, A::kFail},
    {S::kTransfer, false, E::kMigrateOutFailed, A::kFail},
    // The source done without a commit: it resumed, the move failed.
    {S::kTransfer, false, E::kMigrateOutOk, A::kFail},
    // After the commit nothing fails it: every report finishes it.
    {S::kCommitted, true, E::kMigrateInOk, A::kFinish},
    {S::kCommitted, true, E::kMigrateOutOk, A::kFinish},
    {S::kCommitted, true, E::kMigrateInFailed, A::kFinish},
    {S::kCommitted, true, E::kMigrateOutFailed, A::kFinish},
    {S::kCommitted, true, E::kListening, A::kNone},
    // Finished moves ignore whatever comes late.
    {S::kDone, true, E::kMigrateOutFailed, A::kNone},
    {S::kDone, true, E::kReserved, A::kNone},
    {S::kFailed, false, E::kMigrateInOk, A::kNone},
    {S::kFailed, false, E::kListening, A::kNone},
    {S::kFailed, false, E::kMigrateOutOk, A::kNone},
};

TEST(MigrationStepsTest, EachStepAndEventLeadsToTheActionTheTableSays) {
  for (const Row& r : kTable) {
    const MigrationAction action =
        NextMigrationAction(r.step, r.committed, MigrationEvent{r.event, "disk full"});
    EXPECT_EQ(action.kind, r.expected)
        << MigrationStepName(r.step) << (r.committed ? " (committed)" : "") << ", event "
        << static_cast<int>(r.event);
    if (action.kind == A::kFail && r.event == E::kMigrateInFailed) {
      EXPECT_EQ(action.why, "disk full") << "the agent's error is the reason";
    }
  }
}

TEST(MigrationStepsTest, ResultsOfOtherCommandsAreNotMigrationEvents) {
  EXPECT_EQ(EventOfResult("migrate_in", true, "")->kind, E::kMigrateInOk);
  EXPECT_EQ(EventOfResult("migrate_out", false, "x")->kind, E::kMigrateOutFailed);
  EXPECT_EQ(EventOfResult("migrate_out", false, "x")->error, "x");
  EXPECT_FALSE(EventOfResult("checkpoint", true, "").has_value());
  EXPECT_FALSE(EventOfResult("start", false, "").has_value());
}

TEST(MigrationStepsTest, NamesRoundTripAndUnknownOnesDoNotParse) {
  for (S s : {S::kReserved, S::kMigrateInSent, S::kTransfer, S::kCommitted, S::kDone, S::kFailed}) {
    EXPECT_EQ(ParseMigrationStep(MigrationStepName(s)), s);
  }
  EXPECT_FALSE(ParseMigrationStep("migrating").has_value());
  EXPECT_FALSE(ParseMigrationStep("").has_value());
}

}  // namespace
}  // namespace paladin::server
