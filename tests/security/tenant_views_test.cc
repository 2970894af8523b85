// Team-scoped views: two teams' jobs share one GPU of one node; a team token's /v1/nodes and
// /metrics count its own jobs only (allocated and used bytes, job ids), while an admin token sees
// the whole GPU. Prints "security: tenant views: tried N, refused N": each figure a team could
// have learnt about the other team is one attempt, refused when the view leaves it out.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "../server/harness.h"

namespace paladin::server {
namespace {

using testing::AwaitCommand;
using testing::FakeAgent;
using testing::Job;
using testing::Json;
using testing::kGiB;
using testing::WaitFor;

// The figure of `kind` for node-a's GPU 0 in a /metrics text (-1 when absent).
double GpuMetric(const std::string& text, const std::string& kind) {
  const std::string key =
      "paladin_gpu_memory_bytes{node=\"node-a\",gpu=\"0\",kind=\"" + kind + "\"} ";
  const size_t at = text.find(key);
  return at == std::string::npos ? -1 : std::stod(text.substr(at + key.size()));
}

TEST(TenantViewsTest, ATeamSeesOnlyItsOwnFiguresOnNodesAndMetrics) {
  testing::ServerHarness h("tenant-views");
  api::Client admin = h.Admin();
  api::Client vision = h.Client(h.Token("team:vision"));
  api::Client speech = h.Client(h.Token("team:speech"));
  FakeAgent a(h, "node-a", 1, 16 * kGiB);
  ASSERT_TRUE(a.Register().ok());

  StatusOr<Json> jv = vision.Post("/v1/jobs", Json{{"command", {"v"}}, {"gpu_mem", "2GiB"}});
  StatusOr<Json> js = speech.Post("/v1/jobs", Json{{"command", {"s"}}, {"gpu_mem", "6GiB"}});
  ASSERT_TRUE(jv.ok() && js.ok());
  const std::string v = (*jv)["id"];
  const std::string s = (*js)["id"];
  ASSERT_TRUE(AwaitCommand(a, "start", v).has_value());
  ASSERT_TRUE(AwaitCommand(a, "start", s).has_value());
  for (const Json& c : a.commands()) a.Obey(c);
  a.commands().clear();
  a.jobs()[v].used_bytes = 1 * kGiB;
  a.jobs()[s].used_bytes = 5 * kGiB;
  // The node's own measure of the GPU: every process on it, both teams'.
  a.gpu_reports = Json::array(
      {{{"index", 0}, {"healthy", true}, {"fault", ""}, {"used_bytes", 6 * kGiB + 123}}});
  ASSERT_TRUE(WaitFor([&] {
    (void)a.Heartbeat();
    return Job(admin, v)["state"] == "running" && Job(admin, s)["state"] == "running" &&
           Job(admin, s)["used_bytes"] == 5 * kGiB;
  }));

  int tried = 0;
  int refused = 0;
  auto check = [&](bool hidden, const std::string& what) {
    ++tried;
    if (hidden) {
      ++refused;
    } else {
      ADD_FAILURE() << "a team learns " << what;
    }
  };

  StatusOr<Json> nodes = vision.Get("/v1/nodes");
  ASSERT_TRUE(nodes.ok());
  const Json gpu = (*nodes)["nodes"][0]["gpus"][0];
  check(gpu["allocated_bytes"] == 2 * kGiB, "speech's allocation: " + gpu.dump());
  check(gpu["used_bytes"] == 1 * kGiB, "speech's use: " + gpu.dump());
  check(gpu["jobs"] == Json::array({v}), "speech's job id: " + gpu.dump());
  check(gpu["memory_bytes"] == 16 * kGiB, "nothing of the GPU's size");  // the node's, not theirs

  StatusOr<std::string> metrics = vision.GetText("/metrics");
  ASSERT_TRUE(metrics.ok());
  check(GpuMetric(*metrics, "allocated") == 2.0 * kGiB, "speech's allocation in /metrics");
  check(GpuMetric(*metrics, "used") == 1.0 * kGiB, "speech's use in /metrics");
  check(metrics->find(s) == std::string::npos, "speech's job id in /metrics");
  check(metrics->find("team=\"speech\"") == std::string::npos, "speech's team in /metrics");

  // Speech, likewise, sees its own; the admin sees the whole GPU.
  StatusOr<Json> theirs = speech.Get("/v1/nodes");
  ASSERT_TRUE(theirs.ok());
  check((*theirs)["nodes"][0]["gpus"][0]["allocated_bytes"] == 6 * kGiB &&
            (*theirs)["nodes"][0]["gpus"][0]["jobs"] == Json::array({s}),
        "(as speech) vision's allocation");
  StatusOr<Json> all = admin.Get("/v1/nodes");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ((*all)["nodes"][0]["gpus"][0]["allocated_bytes"], 8 * kGiB);
  EXPECT_EQ((*all)["nodes"][0]["gpus"][0]["used_bytes"], 6 * kGiB + 123);
  EXPECT_EQ((*all)["nodes"][0]["gpus"][0]["jobs"].size(), 2u);
  StatusOr<std::string> admin_metrics = admin.GetText("/metrics");
  ASSERT_TRUE(admin_metrics.ok());
  EXPECT_EQ(GpuMetric(*admin_metrics, "allocated"), 8.0 * kGiB);

  std::printf("security: tenant views: tried %d, refused %d\n", tried, refused);
  EXPECT_EQ(tried, refused);
}

}  // namespace
}  // namespace paladin::server
