// The control plane's node table (src/server/node_table.h) alone, on injected times: a node
// silent for longer than the lease is dead, its jobs may move one more lease later (once), a
// heartbeat brings it back; lookup, registration and which records the next write carries. No
// store, no clock, no sleeps.
#include "server/node_table.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace paladin::server {
namespace {

constexpr double kLease = 6;

NodeRecord Stored(const std::string& name, NodeState state, double last_heartbeat) {
  NodeRecord n;
  n.name = name;
  n.state = state;
  n.last_heartbeat = last_heartbeat;
  return n;
}

std::vector<std::string> DirtyNames(const NodeTable& t) {
  std::vector<std::string> out;
  for (const NodeRecord* n : t.Dirty()) out.push_back(n->name);
  return out;
}

TEST(NodeTableTest, ALeaseExpiresOnlyWhenTheSilenceIsLongerThanTheLease) {
  NodeTable t(kLease);
  bool fresh = false;
  NodeRecord& n = t.FindOrAdd("node-a", &fresh);
  t.Heard(n, 100);
  EXPECT_FALSE(t.LeaseExpired(n, 100));
  EXPECT_FALSE(t.LeaseExpired(n, 106)) << "exactly one lease of silence is still alive";
  EXPECT_TRUE(t.LeaseExpired(n, 106.5));
  t.Heard(n, 105.9);  // a beat just inside the lease starts it over
  EXPECT_FALSE(t.LeaseExpired(n, 111.8));
  EXPECT_TRUE(t.LeaseExpired(n, 112));
}

TEST(NodeTableTest, ADeadNodesJobsMayMoveOnlyOneLeaseLaterAndOnce) {
  NodeTable t(kLease);
  t.Load({Stored("node-a", NodeState::kAlive, 100)});
  NodeRecord& n = *t.Find("node-a");
  EXPECT_FALSE(t.FenceElapsed(n, 200)) << "alive: nothing to recover";

  ASSERT_TRUE(t.LeaseExpired(n, 106.5));
  t.MarkDead(n, 106.5);
  EXPECT_EQ(n.state, NodeState::kDead);
  EXPECT_EQ(n.dead_since, 106.5);
  EXPECT_FALSE(t.LeaseExpired(n, 300)) << "declared dead once";
  EXPECT_FALSE(t.FenceElapsed(n, 106.5));
  EXPECT_FALSE(t.FenceElapsed(n, 112.5)) << "exactly one lease after: its fence may not be done";
  EXPECT_TRUE(t.FenceElapsed(n, 112.6));

  t.MarkRecovered(n);
  EXPECT_TRUE(n.recovered);
  EXPECT_FALSE(t.FenceElapsed(n, 500)) << "its jobs are recovered once";
}

TEST(NodeTableTest, AHeartbeatBringsADeadNodeBackAliveOrDraining) {
  NodeTable t(kLease);
  t.Load({Stored("node-a", NodeState::kAlive, 100), Stored("node-b", NodeState::kAlive, 100)});
  NodeRecord& a = *t.Find("node-a");
  NodeRecord& b = *t.Find("node-b");
  b.draining = true;
  t.MarkDead(a, 107);
  t.MarkDead(b, 107);
  t.ClearDirty();

  EXPECT_TRUE(t.Heard(a, 110)) << "it was dead";
  EXPECT_EQ(a.state, NodeState::kAlive);
  EXPECT_EQ(a.last_heartbeat, 110);
  EXPECT_EQ(a.dead_since, 0);
  EXPECT_TRUE(t.Heard(b, 110));
  EXPECT_EQ(b.state, NodeState::kDraining) << "the drain asked before it died still holds";
  EXPECT_EQ(DirtyNames(t), (std::vector<std::string>{"node-a", "node-b"}));

  t.ClearDirty();
  EXPECT_FALSE(t.Heard(a, 111)) << "alive: an ordinary beat";
  EXPECT_FALSE(t.HasDirty()) << "an ordinary beat's time waits for the lazy write";
}

TEST(NodeTableTest, ARestartedServerRenewsTheLeaseOfEveryNodeNotDead) {
  NodeTable t(kLease);
  t.Load({Stored("node-a", NodeState::kAlive, 10), Stored("node-b", NodeState::kDraining, 10),
          Stored("node-c", NodeState::kDead, 10)});
  t.RenewAll(1000);
  EXPECT_EQ(t.Find("node-a")->last_heartbeat, 1000);
  EXPECT_EQ(t.Find("node-b")->last_heartbeat, 1000);
  EXPECT_EQ(t.Find("node-c")->last_heartbeat, 10) << "a dead node stays dead";
  EXPECT_FALSE(t.LeaseExpired(*t.Find("node-a"), 1006));
  EXPECT_FALSE(t.HasDirty());
}

TEST(NodeTableTest, FindOrAddMakesANodeOnceAndKeepsWhatItKnew) {
  NodeTable t(kLease);
  EXPECT_EQ(t.Find("node-a"), nullptr);
  bool fresh = false;
  NodeRecord& made = t.FindOrAdd("node-a", &fresh);
  EXPECT_TRUE(fresh);
  EXPECT_EQ(made.name, "node-a");
  made.address = "10.0.0.1";
  NodeRecord& again = t.FindOrAdd("node-a", &fresh);
  EXPECT_FALSE(fresh);
  EXPECT_EQ(&again, &made);
  EXPECT_EQ(again.address, "10.0.0.1");
  EXPECT_EQ(&t.At("node-a"), &made);
  EXPECT_EQ(t.size(), 1U);
  EXPECT_FALSE(t.HasDirty()) << "the caller marks it once registered";
}

TEST(NodeTableTest, WritesCarryTheDirtyAndThePromotedLazyRecordsAndCountChanges) {
  NodeTable t(kLease);
  t.Load({Stored("node-a", NodeState::kAlive, 0), Stored("node-b", NodeState::kAlive, 0),
          Stored("node-c", NodeState::kAlive, 0)});
  EXPECT_FALSE(t.HasDirty()) << "loading writes nothing back";
  EXPECT_EQ(t.changes(), 0U);

  t.MarkLazy(*t.Find("node-a"));
  t.MarkDirty(*t.Find("node-c"));
  EXPECT_EQ(DirtyNames(t), std::vector<std::string>{"node-c"});
  EXPECT_EQ(t.changes(), 1U);
  t.MarkDead(*t.Find("node-b"), 10);
  EXPECT_EQ(t.changes(), 2U);

  t.PromoteLazy();
  EXPECT_EQ(DirtyNames(t), (std::vector<std::string>{"node-a", "node-b", "node-c"}));
  EXPECT_EQ(t.changes(), 2U) << "a lazy write is not a change a memo keys on";
  t.ClearDirty();
  EXPECT_FALSE(t.HasDirty());
  t.PromoteLazy();
  EXPECT_FALSE(t.HasDirty()) << "promoted once";
}

}  // namespace
}  // namespace paladin::server
