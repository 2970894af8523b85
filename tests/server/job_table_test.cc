// The control plane's job table (src/server/job_table.h) alone: ids handed out after what the
// store held, lookup by seq and id, state changes along the graph and marked dirty, the lazy
// writes brought forward, the change count a memo keys on. No store, no clock.
#include "server/job_table.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace paladin::server {
namespace {

JobRecord Stored(int64_t seq, JobState state) {
  JobRecord j;
  j.seq = seq;
  j.id = "j-" + std::string(6 - std::to_string(seq).size(), '0') + std::to_string(seq);
  j.LoadState(state);
  return j;
}

std::vector<int64_t> DirtySeqs(const JobTable& t) {
  std::vector<int64_t> out;
  for (const JobRecord* j : t.Dirty()) out.push_back(j->seq);
  return out;
}

TEST(JobTableTest, AddGivesTheNextSeqAndIdAndMarksTheJobDirty) {
  JobTable t;
  EXPECT_EQ(t.NextId(), "j-000001");
  JobRecord draft;
  draft.name = "train";
  draft.seq = 99;  // ignored: the table numbers its jobs
  draft.id = "j-bogus";
  JobRecord& j = t.Add(draft);
  EXPECT_EQ(j.seq, 1);
  EXPECT_EQ(j.id, "j-000001");
  EXPECT_EQ(j.name, "train");
  EXPECT_EQ(j.state(), JobState::kPending);
  EXPECT_EQ(t.NextId(), "j-000002");
  EXPECT_EQ(DirtySeqs(t), std::vector<int64_t>{1});
  EXPECT_EQ(t.changes(), 1u);
}

TEST(JobTableTest, LoadKeepsTheStoredRecordsAndNumbersNewJobsAfterTheHighest) {
  JobTable t;
  std::vector<JobRecord> stored;
  stored.push_back(Stored(3, JobState::kRunning));
  stored.push_back(Stored(41, JobState::kSucceeded));
  t.Load(std::move(stored));
  EXPECT_EQ(t.size(), 2u);
  EXPECT_FALSE(t.HasDirty());  // read back, nothing to write
  EXPECT_EQ(t.changes(), 0u);
  EXPECT_EQ(t.NextId(), "j-000042");
  EXPECT_EQ(t.Add(JobRecord{}).seq, 42);
}

TEST(JobTableTest, LooksUpBySeqAndById) {
  JobTable t;
  std::vector<JobRecord> stored;
  stored.push_back(Stored(7, JobState::kRunning));
  t.Load(std::move(stored));
  ASSERT_NE(t.BySeq(7), nullptr);
  EXPECT_EQ(t.BySeq(7)->id, "j-000007");
  EXPECT_EQ(t.ById("j-000007"), t.BySeq(7));
  EXPECT_EQ(t.BySeq(8), nullptr);
  EXPECT_EQ(t.ById("j-000008"), nullptr);  // names no job
  EXPECT_EQ(t.ById("j-7x"), nullptr);      // does not parse
  EXPECT_EQ(t.ById(""), nullptr);
  const JobTable& read = t;
  EXPECT_EQ(read.ById("j-000007"), t.BySeq(7));
}

TEST(JobTableTest, SetStateMovesAlongTheGraphAndMarksTheJobDirty) {
  JobTable t;
  JobRecord& j = t.Add(JobRecord{});
  t.ClearDirty();
  const uint64_t before = t.changes();
  EXPECT_TRUE(t.SetState(j, JobState::kStarting));
  EXPECT_TRUE(t.SetState(j, JobState::kRunning));
  EXPECT_EQ(j.state(), JobState::kRunning);
  EXPECT_EQ(DirtySeqs(t), std::vector<int64_t>{1});
  EXPECT_EQ(t.changes(), before + 2);
}

TEST(JobTableTest, SetStateRefusesAnEndedJob) {
  JobTable t;
  JobRecord& j = t.Add(JobRecord{});
  ASSERT_TRUE(t.SetState(j, JobState::kCancelled));
  EXPECT_DEATH(t.SetState(j, JobState::kRunning), "cancelled -> running is not a transition");
}

TEST(JobTableTest, LazyJobsWaitUntilPromoted) {
  JobTable t;
  std::vector<JobRecord> stored;
  stored.push_back(Stored(1, JobState::kRunning));
  stored.push_back(Stored(2, JobState::kRunning));
  t.Load(std::move(stored));
  t.MarkLazy(*t.BySeq(2));
  EXPECT_FALSE(t.HasDirty());
  EXPECT_EQ(t.changes(), 0u);  // a lazy write is no change a memo must see
  t.MarkDirty(*t.BySeq(1));
  EXPECT_EQ(DirtySeqs(t), std::vector<int64_t>{1});
  t.PromoteLazy();
  EXPECT_EQ(DirtySeqs(t), (std::vector<int64_t>{1, 2}));
  t.ClearDirty();
  EXPECT_FALSE(t.HasDirty());
  t.PromoteLazy();  // promoted once: nothing left waiting
  EXPECT_FALSE(t.HasDirty());
}

TEST(JobTableTest, IteratesInSubmissionOrder) {
  JobTable t;
  for (int i = 0; i < 3; ++i) t.Add(JobRecord{});
  std::vector<int64_t> forward;
  for (const auto& [seq, j] : t) forward.push_back(j.seq);
  EXPECT_EQ(forward, (std::vector<int64_t>{1, 2, 3}));
  std::vector<int64_t> backward;
  for (auto it = t.rbegin(); it != t.rend(); ++it) backward.push_back(it->first);
  EXPECT_EQ(backward, (std::vector<int64_t>{3, 2, 1}));
}

}  // namespace
}  // namespace paladin::server
