// The control plane's migration rows (src/server/migration_table.h) alone: ids after the store's
// highest, the move under way of a job, a destination receiving, a job's last reported move, the
// rows a Flush writes. No store, no clock.
#include "server/migration_table.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace paladin::server {
namespace {

MigrationRecord Row(int64_t id, const std::string& job, const std::string& to, MigrationStep step) {
  MigrationRecord m;
  m.id = id;
  m.job = job;
  m.to_node = to;
  m.step = step;
  return m;
}

std::vector<int64_t> DirtyIds(const MigrationTable& t) {
  std::vector<int64_t> out;
  for (const MigrationRecord* m : t.Dirty()) out.push_back(m->id);
  return out;
}

TEST(MigrationTableTest, AddNumbersTheRowAfterTheStoresHighestAndMarksItDirty) {
  MigrationTable t;
  EXPECT_EQ(t.made(), 0);
  t.Load({Row(4, "j-000001", "node-b", MigrationStep::kDone)});
  EXPECT_FALSE(t.HasDirty());
  EXPECT_EQ(t.made(), 4);
  MigrationRecord& m = t.Add(Row(99, "j-000002", "node-c", MigrationStep::kReserved));
  EXPECT_EQ(m.id, 5);  // the given id is ignored
  EXPECT_EQ(t.made(), 5);
  EXPECT_EQ(t.Find(5), &m);
  EXPECT_EQ(t.Find(6), nullptr);
  EXPECT_EQ(DirtyIds(t), std::vector<int64_t>{5});
  t.ClearDirty();
  t.MarkDirty(*t.Find(4));
  EXPECT_EQ(DirtyIds(t), std::vector<int64_t>{4});
}

TEST(MigrationTableTest, ActiveIsAMoveUnderWayOnly) {
  MigrationTable t;
  t.Load({Row(1, "j-000001", "node-b", MigrationStep::kFailed),
          Row(2, "j-000001", "node-c", MigrationStep::kTransfer)});
  EXPECT_EQ(t.Active(0), nullptr);  // a job's migration_id when it does not move
  EXPECT_EQ(t.Active(1), nullptr);  // finished
  EXPECT_EQ(t.Active(3), nullptr);  // unknown
  ASSERT_NE(t.Active(2), nullptr);
  EXPECT_EQ(t.Active(2)->to_node, "node-c");
  EXPECT_TRUE(t.AnyUnfinished());
  t.Find(2)->step = MigrationStep::kDone;
  EXPECT_EQ(t.Active(2), nullptr);
  EXPECT_FALSE(t.AnyUnfinished());
}

TEST(MigrationTableTest, ANodeReceivesWhileAMoveToItIsUnderWay) {
  MigrationTable t;
  t.Load({Row(1, "j-000001", "node-b", MigrationStep::kDone),
          Row(2, "j-000002", "node-c", MigrationStep::kMigrateInSent)});
  EXPECT_FALSE(t.HasIncoming("node-b"));
  EXPECT_TRUE(t.HasIncoming("node-c"));
  EXPECT_FALSE(t.HasIncoming("node-a"));
}

TEST(MigrationTableTest, LastReportedIsTheJobsNewestMoveItsSourceReportedOn) {
  MigrationTable t;
  MigrationRecord first = Row(1, "j-000001", "node-b", MigrationStep::kDone);
  first.mode_used = "pre-copy";
  MigrationRecord second = Row(2, "j-000001", "node-c", MigrationStep::kDone);
  second.mode_used = "post-copy";
  MigrationRecord unreported = Row(3, "j-000001", "node-a", MigrationStep::kFailed);
  MigrationRecord other = Row(4, "j-000002", "node-a", MigrationStep::kDone);
  other.mode_used = "stream";
  t.Load({first, second, unreported, other});
  ASSERT_NE(t.LastReported("j-000001"), nullptr);
  EXPECT_EQ(t.LastReported("j-000001")->id, 2);
  EXPECT_EQ(t.LastReported("j-000002")->id, 4);
  EXPECT_EQ(t.LastReported("j-000003"), nullptr);
}

}  // namespace
}  // namespace paladin::server
