// The server's queue of agent commands (src/server/command_queue.h) alone: ids after the store's
// highest, handed out once and again after the resend interval, acknowledged only by their own
// node, withdrawn before an answer, dropped after the Flush that wrote them acknowledged. Times
// are passed in: no clock, no store.
#include "server/command_queue.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace paladin::server {
namespace {

std::vector<int64_t> Ids(const std::vector<const CommandRecord*>& commands) {
  std::vector<int64_t> out;
  for (const CommandRecord* c : commands) out.push_back(c->id);
  return out;
}

TEST(CommandQueueTest, SendNumbersTheCommandAndTiesItToItsJob) {
  CommandQueue q;
  const int64_t id = q.Send("node-a", api::KillCommand(3), "j-000001", 100);
  EXPECT_EQ(id, 1);
  const CommandRecord* c = q.Pending(id);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->node, "node-a");
  EXPECT_EQ(c->job, "j-000001");
  EXPECT_EQ(c->created_at, 100);
  EXPECT_EQ(c->command.id, id);
  EXPECT_EQ(c->command.job, "j-000001");
  EXPECT_EQ(c->command.epoch, 3);
  EXPECT_EQ(Ids(q.Dirty()), std::vector<int64_t>{1});
  // No job: the command's own job field is left as it was.
  const int64_t fault = q.Send("node-a", api::FaultCommand(0, "xid", 79), "", 100);
  EXPECT_EQ(fault, 2);
  EXPECT_EQ(q.Pending(fault)->job, "");
}

TEST(CommandQueueTest, IdsContinueAfterTheHighestTheStoreGave) {
  CommandQueue q;
  CommandRecord waiting;
  waiting.id = 5;
  waiting.node = "node-a";
  waiting.command = api::KillCommand(1);
  q.Load({waiting}, 9);
  EXPECT_FALSE(q.HasDirty());
  ASSERT_NE(q.Pending(5), nullptr);
  EXPECT_EQ(q.Send("node-a", api::KillCommand(1), "", 0), 10);
}

TEST(CommandQueueTest, ANodeIsHandedItsCommandsOnceThenAgainAfterTheResendInterval) {
  CommandQueue q;
  q.Send("node-a", api::KillCommand(1), "j-000001", 0);
  q.Send("node-b", api::KillCommand(1), "j-000002", 0);
  q.Send("node-a", api::KillCommand(2), "j-000003", 0);
  q.Flushed();
  EXPECT_EQ(Ids(q.TakeDue("node-a", 10, 3)), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(Ids(q.Dirty()), (std::vector<int64_t>{1, 3}));  // sent_at is written
  EXPECT_EQ(q.Pending(1)->sent_at, 10);
  EXPECT_TRUE(q.TakeDue("node-a", 12.9, 3).empty());  // within the interval
  EXPECT_EQ(Ids(q.TakeDue("node-a", 13, 3)), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(Ids(q.TakeDue("node-b", 13, 3)), std::vector<int64_t>{2});
}

TEST(CommandQueueTest, OnlyTheCommandsNodeAcknowledgesItAndOnlyOnce) {
  CommandQueue q;
  const int64_t id = q.Send("node-a", api::KillCommand(1), "j-000001", 0);
  q.Flushed();
  EXPECT_EQ(q.Acknowledge(id, "node-b", true, Json::object()), nullptr);
  EXPECT_EQ(q.Acknowledge(99, "node-a", true, Json::object()), nullptr);
  EXPECT_FALSE(q.HasDirty());
  const CommandRecord* c = q.Acknowledge(id, "node-a", true, Json{{"ok", true}});
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->acked);
  EXPECT_TRUE(c->ok);
  EXPECT_EQ(c->result, (Json{{"ok", true}}));
  EXPECT_EQ(q.Pending(id), nullptr);
  EXPECT_TRUE(q.TakeDue("node-a", 100, 3).empty());
  EXPECT_EQ(q.Acknowledge(id, "node-a", false, Json::object()), nullptr);  // a repeat
  // Written once more (acknowledged), then dropped.
  EXPECT_EQ(Ids(q.Dirty()), std::vector<int64_t>{id});
  q.Flushed();
  EXPECT_EQ(q.size(), 0u);
  EXPECT_FALSE(q.HasDirty());
}

TEST(CommandQueueTest, AWithdrawnCommandIsNotHandedOutAndItsLateResultIsIgnored) {
  CommandQueue q;
  const int64_t id = q.Send("node-a", api::KillCommand(1), "j-000001", 0);
  EXPECT_TRUE(q.Withdraw(id, "withdrawn: migration 4 failed"));
  EXPECT_FALSE(q.Withdraw(id, "again"));
  EXPECT_TRUE(q.TakeDue("node-a", 10, 3).empty());
  EXPECT_EQ(q.Acknowledge(id, "node-a", true, Json::object()), nullptr);
  const std::vector<const CommandRecord*> dirty = q.Dirty();
  ASSERT_EQ(dirty.size(), 1u);
  EXPECT_FALSE(dirty[0]->ok);
  EXPECT_EQ(dirty[0]->result, (Json{{"error", "withdrawn: migration 4 failed"}}));
}

TEST(CommandQueueTest, HasQueuedFindsAKillAlreadySentForThatCopy) {
  CommandQueue q;
  q.Send("node-a", api::KillCommand(2), "j-000001", 0);
  EXPECT_TRUE(q.HasQueued("node-a", api::CommandKind::kKill, "j-000001", 2));
  EXPECT_FALSE(q.HasQueued("node-a", api::CommandKind::kKill, "j-000001", 3));
  EXPECT_FALSE(q.HasQueued("node-b", api::CommandKind::kKill, "j-000001", 2));
  EXPECT_FALSE(q.HasQueued("node-a", api::CommandKind::kKill, "j-000002", 2));
}

}  // namespace
}  // namespace paladin::server
