// The heartbeat's wire types (paladin/api/wire.h): what the agent encodes the server decodes to
// the same values, and a hostile body is refused with the list, the index and the field named.
#include "paladin/api/wire.h"

#include <gtest/gtest.h>

#include <string>

namespace paladin::api {
namespace {

using Json = nlohmann::json;

TEST(WireTest, AHeartbeatRoundTrips) {
  JobReport job;
  job.id = "j-000007";
  job.epoch = 3;
  job.state = "exited";
  job.pid = 4242;
  job.used_bytes = int64_t{5} << 30;
  job.quota_bytes = int64_t{8} << 30;
  job.quota_grows = 2;
  job.refusals = 1;
  job.exit_code = -9;
  job.stdout_text = "step 1 ok\n";
  GpuReport gpu{1, int64_t{3} << 30, false, "Xid 79"};
  CommandResult result{17, false, "disk full", Json{{"path", "/ckpt/x"}}};
  const Json body = {
      {"gpus", {ToJson(gpu)}}, {"jobs", {ToJson(job)}}, {"results", {ToJson(result)}}};

  StatusOr<Heartbeat> beat = DecodeHeartbeat(body);
  ASSERT_TRUE(beat.ok()) << beat.status().ToString();
  ASSERT_EQ(beat->jobs.size(), 1U);
  const JobReport& j = beat->jobs[0];
  EXPECT_EQ(j.id, job.id);
  EXPECT_EQ(j.epoch, 3);
  EXPECT_EQ(j.state, "exited");
  EXPECT_EQ(j.used_bytes, job.used_bytes);
  EXPECT_EQ(j.quota_grows, 2);
  EXPECT_EQ(j.exit_code, -9);
  EXPECT_EQ(j.stdout_text, "step 1 ok\n");
  ASSERT_EQ(beat->gpus.size(), 1U);
  EXPECT_EQ(beat->gpus[0].index, 1);
  EXPECT_FALSE(beat->gpus[0].healthy);
  EXPECT_EQ(beat->gpus[0].fault, "Xid 79");
  ASSERT_EQ(beat->results.size(), 1U);
  EXPECT_EQ(beat->results[0].command, 17);
  EXPECT_EQ(beat->results[0].error, "disk full");
  EXPECT_EQ(beat->results[0].detail["path"], "/ckpt/x");
}

TEST(WireTest, AbsentFieldsTakeTheirDefaults) {
  StatusOr<Heartbeat> beat = DecodeHeartbeat(Json{{"jobs", {{{"id", "j-000001"}}}}});
  ASSERT_TRUE(beat.ok()) << beat.status().ToString();
  EXPECT_EQ(beat->jobs[0].state, "running");
  EXPECT_FALSE(beat->jobs[0].used_bytes.has_value()) << "unknown, not zero";
  EXPECT_FALSE(beat->jobs[0].exit_code.has_value());
  EXPECT_TRUE(DecodeHeartbeat(Json::object())->jobs.empty());
  EXPECT_TRUE(DecodeHeartbeat(Json{{"jobs", nullptr}})->jobs.empty());
}

TEST(WireTest, AHostileBodyIsRefusedNamingWhereAndWhat) {
  struct Case {
    Json body;
    std::string says;
  };
  const Case cases[] = {
      {Json::array(), "body: expected a JSON object"},
      {Json{{"jobs", 5}}, "jobs: expected a list"},
      {Json{{"jobs", {5}}}, "jobs[0]: expected an object"},
      {Json{{"jobs", {{{"id", 5}}}}}, "jobs[0]: id: expected a string"},
      {Json{{"jobs", {{{"id", "a"}}, {{"id", "b"}, {"used_bytes", -5}}}}},
       "jobs[1]: used_bytes: expected an integer from 0"},
      {Json{{"jobs", {{{"id", "a"}, {"epoch", "x"}}}}}, "jobs[0]: epoch: expected an integer"},
      {Json{{"jobs", {{{"id", "a"}, {"exit_code", 5000}}}}}, "jobs[0]: exit_code"},
      {Json{{"jobs", {{{"id", "a"}, {"stdout", 5}}}}}, "jobs[0]: stdout: expected a string"},
      {Json{{"jobs", {{{"id", "a"}, {"quota_bytes", 18446744073709551615ULL}}}}},
       "jobs[0]: quota_bytes: too large"},
      {Json{{"gpus", {{{"index", "0"}}}}}, "gpus[0]: index: expected an integer"},
      {Json{{"gpus", {{{"index", 2000}}}}}, "gpus[0]: index"},
      {Json{{"gpus", {{{"healthy", "yes"}}}}}, "gpus[0]: healthy: expected true or false"},
      {Json{{"results", 5}}, "results: expected a list"},
      {Json{{"results", {{{"command", 1}, {"detail", 5}}}}}, "results[0]: detail"},
      {Json{{"results", {{{"command", 1}, {"ok", "yes"}}}}}, "results[0]: ok"},
  };
  for (const Case& c : cases) {
    StatusOr<Heartbeat> beat = DecodeHeartbeat(c.body);
    ASSERT_FALSE(beat.ok()) << c.body.dump();
    EXPECT_EQ(beat.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(beat.status().message().find(c.says), std::string::npos)
        << c.body.dump() << " -> " << beat.status().message();
  }
}

}  // namespace
}  // namespace paladin::api
