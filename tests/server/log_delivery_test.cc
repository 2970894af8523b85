// A job's log reaches the server once. An agent killed after a heartbeat was delivered but
// before it noted how far its logs went sends the same bytes again when it comes back; the
// server keeps only what lies beyond what it has of that copy's log. Control driven directly,
// with the clock injected: no HTTP, no sleeps.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "control_fixture.h"

namespace paladin::server {
namespace {

using testing::kGiB;

class LogDeliveryTest : public testing::ControlTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(Open("logs"));
    ASSERT_NO_FATAL_FAILURE(Register("node-a"));
    StatusOr<Json> submitted =
        control_->Submit(admin_, Json{{"name", "train"}, {"command", {"w"}}, {"gpu_mem", "8GiB"}});
    ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
    id_ = (*submitted)["id"];
    control_->Tick();
    StatusOr<Json> r = Beat(Json::array(), Json::array());
    ASSERT_TRUE(r.ok());
    ASSERT_EQ((*r)["commands"].size(), 1U);
    start_ = (*r)["commands"][0];
    epoch_ = start_["epoch"].get<int64_t>();
  }

  // One heartbeat of node-a reporting the job with `text` at [from, to) of its stdout log
  // (from < 0: the report says nothing of where the text lies, as an older agent's).
  StatusOr<Json> Report(const std::string& text, int64_t from, int64_t to, int64_t epoch) {
    Json job = CopyReport(id_, epoch, "running", 0, 8 * kGiB);
    job["stdout"] = text;
    if (from >= 0) {
      job["stdout_from"] = from;
      job["stdout_to"] = to;
    }
    Json results = Json::array();
    if (!answered_) {
      results.push_back(Done(start_));
      answered_ = true;
    }
    return Beat(Json::array({job}), results);
  }

  StatusOr<Json> Beat(const Json& jobs, const Json& results) {
    now_ += 1;
    return control_->Heartbeat(admin_, "node-a",
                               Json{{"gpus", Json::array()}, {"jobs", jobs}, {"results", results}});
  }

  std::string Stdout() {
    StatusOr<Json> logs = control_->Logs(admin_, id_, "stdout", 0);
    EXPECT_TRUE(logs.ok()) << logs.status().ToString();
    return logs.ok() ? (*logs)["text"].get<std::string>() : "";
  }

  std::string id_;
  Json start_;
  int64_t epoch_ = 0;
  bool answered_ = false;
};

TEST_F(LogDeliveryTest, AnAgentResendingAfterARestartAddsOnlyWhatIsNew) {
  ASSERT_TRUE(Report("started: gen 0\n", 0, 15, epoch_).ok());
  ASSERT_TRUE(Report("gen 1\n", 15, 21, epoch_).ok());
  ASSERT_EQ(Stdout(), "started: gen 0\ngen 1\n");

  // Restarted from a record that still said 0: everything again, and one line more.
  ASSERT_TRUE(Report("started: gen 0\ngen 1\ngen 2\n", 0, 27, epoch_).ok());
  EXPECT_EQ(Stdout(), "started: gen 0\ngen 1\ngen 2\n");
  // The same beat twice (its answer lost): nothing new.
  ASSERT_TRUE(Report("gen 2\n", 21, 27, epoch_).ok());
  EXPECT_EQ(Stdout(), "started: gen 0\ngen 1\ngen 2\n");
  // Then on as before.
  ASSERT_TRUE(Report("gen 3\n", 27, 33, epoch_).ok());
  EXPECT_EQ(Stdout(), "started: gen 0\ngen 1\ngen 2\ngen 3\n");
}

TEST_F(LogDeliveryTest, AnotherCopyOrAShorterLogOrAnOlderAgentIsTakenWhole) {
  ASSERT_TRUE(Report("started: gen 0\n", 0, 15, epoch_).ok());
  // The copy's log replaced by a shorter one (a restore in place): the agent says so with an
  // end below its start, then reads on from there.
  ASSERT_TRUE(Report("", 15, 4, epoch_).ok());
  ASSERT_TRUE(Report("gen 1\n", 4, 10, epoch_).ok());
  EXPECT_EQ(Stdout(), "started: gen 0\ngen 1\n");
  // An agent that does not say where its text lies: all of it, as before.
  ASSERT_TRUE(Report("gen 2\n", -1, -1, epoch_).ok());
  EXPECT_EQ(Stdout(), "started: gen 0\ngen 1\ngen 2\n");
  // Text the agent had to rewrite (its length is not that of the bytes read) cannot be cut at a
  // byte offset: kept whole rather than lost.
  ASSERT_TRUE(Report("gen 3\n", 10, 16, epoch_).ok());
  ASSERT_TRUE(Report("gen 3\n\xef\xbf\xbd\n", 10, 18, epoch_).ok());
  EXPECT_EQ(Stdout(), "started: gen 0\ngen 1\ngen 2\ngen 3\ngen 3\n\xef\xbf\xbd\n");
}

}  // namespace
}  // namespace paladin::server
