// The control plane's team book (src/server/team_book.h) alone: what a team holds (its jobs that
// hold GPUs and its Kubernetes pods) and the one rule of its quotas, refused at the first byte and
// the first GPU over, exactly at the quota not; a gang that never fits; the usage its jobs add.
// No store, no clock.
#include "server/team_book.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace paladin::server {
namespace {

JobRecord Held(int64_t seq, const std::string& team, int gpus, int64_t quota, JobState state) {
  JobRecord j;
  j.seq = seq;
  j.id = "j-" + std::to_string(seq);
  j.team = team;
  j.gpus = gpus;
  j.quota_bytes = quota;
  j.node = "node-a";
  j.LoadState(state);
  return j;
}

// Team vision: two GPUs and 20 GiB; it runs j-1 (one GPU, 8 GiB) and j-2 (is starting: one GPU,
// 4 GiB); j-3 ended and j-4 waits (neither counts); team audio's j-5 is not vision's.
class TeamBookTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<JobRecord> jobs;
    jobs.push_back(Held(1, "vision", 1, 8 * kGiB, JobState::kRunning));
    jobs.push_back(Held(2, "vision", 1, 4 * kGiB, JobState::kStarting));
    jobs.push_back(Held(3, "vision", 1, 8 * kGiB, JobState::kSucceeded));
    jobs.push_back(Held(4, "vision", 1, 8 * kGiB, JobState::kPending));
    jobs.push_back(Held(5, "audio", 2, 30 * kGiB, JobState::kRunning));
    jobs_.Load(std::move(jobs));
    TeamRecord vision;
    vision.name = "vision";
    vision.max_gpus = 3;
    vision.max_gpu_mem = 20 * kGiB;
    TeamRecord audio;  // no quota
    audio.name = "audio";
    book_.Load({vision, audio});
  }

  std::map<std::string, std::map<std::string, PodsHeld>> pods_;
  TeamBook book_{[this](const std::string& team) { return pods_[team]; }};
  JobTable jobs_;
};

TEST_F(TeamBookTest, CountsTheJobsThatHoldGpusAsQuotaTimesGpus) {
  const TeamUse use = book_.InUse("vision", jobs_);
  EXPECT_EQ(use.job_gpus, 2);
  EXPECT_EQ(use.job_bytes, 12 * kGiB);
  EXPECT_EQ(use.pod_gpus, 0);
  EXPECT_EQ(book_.InUse("audio", jobs_).job_bytes, 60 * kGiB);  // 30 GiB on each of 2 GPUs
}

TEST_F(TeamBookTest, RefusesAtTheFirstByteOverTheMemoryQuota) {
  // 12 GiB in use of 20: 8 GiB more fits exactly, one byte more does not.
  EXPECT_EQ(book_.Refusal("vision", {1, 8 * kGiB}, "this job", jobs_), "");
  EXPECT_EQ(book_.Refusal("vision", {1, 8 * kGiB + 1}, "this job", jobs_),
            "team vision quota: 12 GiB of its 20 GiB GPU memory in use, this job needs 8.00 GiB");
}

TEST_F(TeamBookTest, RefusesAtTheFirstGpuOverTheGpuQuotaAndSaysSoFirst) {
  // 2 GPUs in use of 3: one more fits, two do not (the GPU count is checked before the bytes).
  EXPECT_EQ(book_.Refusal("vision", {1, kGiB}, "this job", jobs_), "");
  EXPECT_EQ(book_.Refusal("vision", {2, 30 * kGiB}, "the gang", jobs_),
            "team vision quota: 2 of its 3 GPUs in use, the gang needs 2");
}

TEST_F(TeamBookTest, CountsTheTeamsKubernetesPodsInEveryCluster) {
  pods_["vision"]["east"] = {.bytes = 4 * kGiB, .gpus = 1};
  pods_["vision"]["west"] = {.bytes = 2 * kGiB, .gpus = 0};
  const TeamUse use = book_.InUse("vision", jobs_);
  EXPECT_EQ(use.pod_gpus, 1);
  EXPECT_EQ(use.pod_bytes, 6 * kGiB);
  EXPECT_EQ(use.pods.size(), 2u);
  // 3 GPUs held now (2 jobs, 1 pod): no GPU more.
  EXPECT_EQ(
      book_.Refusal("vision", {1, kGiB}, "this job", jobs_),
      "team vision quota: 3 of its 3 GPUs in use (1 by its Kubernetes pods), this job needs 1");
  book_.FindOrAdd("vision").max_gpus = 0;  // memory only: 18 GiB in use of 20
  EXPECT_EQ(book_.Refusal("vision", {1, 2 * kGiB}, "this job", jobs_), "");
  EXPECT_EQ(book_.Refusal("vision", {1, 2 * kGiB + 1}, "this job", jobs_),
            "team vision quota: 18 GiB of its 20 GiB GPU memory in use (6 GiB by its Kubernetes "
            "pods), this job needs 2.00 GiB");
}

TEST_F(TeamBookTest, ATeamWithoutARecordOrAQuotaRefusesNothing) {
  EXPECT_EQ(book_.Refusal("audio", {100, 1000 * kGiB}, "this job", jobs_), "");
  EXPECT_EQ(book_.Refusal("nobody", {100, 1000 * kGiB}, "this job", jobs_), "");
}

TEST_F(TeamBookTest, AFirstNamedTeamIsMadeWithoutQuotaAndWritten) {
  EXPECT_FALSE(book_.HasDirty());  // loaded, nothing to write
  EXPECT_EQ(book_.Find("speech"), nullptr);
  TeamRecord& t = book_.FindOrAdd("speech");
  EXPECT_EQ(t.name, "speech");
  EXPECT_EQ(t.max_gpus, 0);
  ASSERT_EQ(book_.Dirty().size(), 1u);
  EXPECT_EQ(book_.Dirty()[0]->name, "speech");
  EXPECT_EQ(&book_.FindOrAdd("speech"), &t);
  book_.ClearDirty();
  book_.FindOrAdd("vision");  // known: nothing to write
  EXPECT_FALSE(book_.HasDirty());
}

TEST_F(TeamBookTest, AnAskPastTheQuotaItselfNeverFitsExactlyAtItDoes) {
  // Vision holds 2 GPUs and 12 GiB: what is held does not count here, only the quota.
  EXPECT_EQ(book_.NeverFits("vision", {3, 20 * kGiB}, "ranks: the gang"), "");
  EXPECT_EQ(book_.NeverFits("vision", {4, 0}, "ranks: the gang"),
            "ranks: the gang needs 4 GPUs, more than team vision's quota of 3");
  EXPECT_EQ(book_.NeverFits("vision", {2, 20 * kGiB + 1}, "ranks: the gang"),
            "ranks: the gang needs 21474836481 bytes of GPU memory, more than team vision's "
            "quota");
  EXPECT_EQ(book_.NeverFits("audio", {100, 1000 * kGiB}, "ranks: the gang"), "");
  EXPECT_EQ(book_.NeverFits("nobody", {100, 1000 * kGiB}, "ranks: the gang"), "");
}

TEST_F(TeamBookTest, UsageAddsUpWhatTheTeamsJobsDidAndIsWritten) {
  book_.NoteSubmitted("vision");
  book_.NoteSubmitted("vision");
  book_.NoteQueued("vision", 30);
  book_.NoteQueued("vision", -5);  // a clock step back counts nothing
  // j-1 (1 GPU, 8 GiB quota) held for 10 s using 2 GiB; j-5 (2 GPUs, 30 GiB) for 1 s.
  jobs_.BySeq(1)->used_bytes = 2 * kGiB;
  book_.NoteHeld(*jobs_.BySeq(1), 10);
  book_.NoteHeld(*jobs_.BySeq(5), 1);
  const TeamUsage& v = book_.Find("vision")->usage;
  EXPECT_EQ(v.jobs, 2);
  EXPECT_DOUBLE_EQ(v.queue_seconds, 30);
  EXPECT_DOUBLE_EQ(v.gpu_seconds, 10);
  EXPECT_DOUBLE_EQ(v.mem_alloc_byte_seconds, 10.0 * 8 * kGiB);
  EXPECT_DOUBLE_EQ(v.mem_used_byte_seconds, 10.0 * 2 * kGiB);
  const TeamUsage& a = book_.Find("audio")->usage;
  EXPECT_DOUBLE_EQ(a.gpu_seconds, 2);
  EXPECT_DOUBLE_EQ(a.mem_alloc_byte_seconds, 2.0 * 30 * kGiB);  // quota x GPUs
  ASSERT_EQ(book_.Dirty().size(), 2u);
  // A view adds the time since the last pass by the same rule, to a copy.
  TeamUsage now = v;
  TeamBook::AddHeld(&now, *jobs_.BySeq(1), 5);
  EXPECT_DOUBLE_EQ(now.gpu_seconds, 15);
  EXPECT_DOUBLE_EQ(v.gpu_seconds, 10);
}

}  // namespace
}  // namespace paladin::server
