// The pods of Kubernetes clusters in Paladin's server (PUT /v1/pods by Paladin's scheduler, an
// admin token): a team's token sees its own pods only, and another team's pod does not exist for
// it (404, by name too); only an admin reports pods; a report with a hostile field is refused
// naming it and changes nothing; a cluster's new report replaces its old one.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "harness.h"

namespace paladin::server {
namespace {

using testing::Json;

Json Pod(const std::string& ns, const std::string& name, const std::string& team,
         const std::string& node, int gpu) {
  return {{"namespace", ns},
          {"name", name},
          {"team", team},
          {"phase", node.empty() ? "Pending" : "Running"},
          {"node", node},
          {"gpu", gpu},
          {"gpu_mem_bytes", int64_t{2} << 30},
          {"reason", node.empty() ? "team research: its quota is full" : ""},
          {"placement", node.empty() ? "" : node + "/" + std::to_string(gpu) + " by paladin"}};
}

std::set<std::string> Names(const StatusOr<Json>& list) {
  std::set<std::string> names;
  if (!list.ok()) return names;
  for (const Json& p : (*list)["pods"]) {
    names.insert(p["namespace"].get<std::string>() + "/" + p["name"].get<std::string>());
  }
  return names;
}

// Submits a research job asking `gpu_mem` and waits until the team's quota holds it pending;
// its id ("" when it was refused or placed instead).
std::string QuotaHeldJob(api::Client& admin, const std::string& gpu_mem) {
  StatusOr<Json> job = admin.Post(
      "/v1/jobs",
      Json{{"command", {"python3", "train.py"}}, {"team", "research"}, {"gpu_mem", gpu_mem}});
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  if (!job.ok()) return "";
  const std::string id = (*job)["id"];
  const bool held = testing::WaitFor([&] {
    return testing::Job(admin, id)["reason"].get<std::string>().find("quota") != std::string::npos;
  });
  EXPECT_TRUE(held);
  EXPECT_EQ(testing::Job(admin, id)["state"], "pending");
  return held ? id : "";
}

class PodsTest : public ::testing::Test {
 protected:
  PodsTest() : h_("pods") {
    research_ = h_.Token("team:research");
    other_ = h_.Token("team:k8s-other");
    const Json report = {
        {"cluster", "prod"},
        {"pods",
         {Pod("ml", "a", "research", "node-1", 0), Pod("ml-b", "b", "research", "", -1),
          Pod("other", "c", "k8s-other", "node-1", 1)}}};
    StatusOr<Json> put = h_.Admin().Put("/v1/pods", report);
    EXPECT_TRUE(put.ok()) << put.status().ToString();
  }
  testing::ServerHarness h_;
  std::string research_;
  std::string other_;
};

TEST_F(PodsTest, ATeamSeesItsOwnPodsOnly) {
  EXPECT_EQ(Names(h_.Client(research_).Get("/v1/pods")), (std::set<std::string>{"ml/a", "ml-b/b"}));
  EXPECT_EQ(Names(h_.Client(other_).Get("/v1/pods")), (std::set<std::string>{"other/c"}));
  EXPECT_EQ(Names(h_.Admin().Get("/v1/pods")),
            (std::set<std::string>{"ml/a", "ml-b/b", "other/c"}));
  EXPECT_EQ(Names(h_.Admin().Get("/v1/pods?team=k8s-other")), (std::set<std::string>{"other/c"}));

  StatusOr<Json> a = h_.Client(research_).Get("/v1/pods/ml/a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)["node"], "node-1");
  EXPECT_EQ((*a)["gpu"], 0);
  EXPECT_EQ((*a)["cluster"], "prod");
  EXPECT_EQ((*a)["placement"], "node-1/0 by paladin");  // `paladin explain pod/ml/a` prints it
  StatusOr<Json> b = h_.Client(research_).Get("/v1/pods/ml-b/b");
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE((*b)["gpu"].is_null());
  EXPECT_EQ((*b)["reason"], "team research: its quota is full");
  EXPECT_TRUE((*b)["placement"].is_null());

  // Another team's pod, and one that does not exist, answer alike.
  for (const char* path : {"/v1/pods/other/c", "/v1/pods/nowhere/x"}) {
    StatusOr<Json> r = h_.Client(research_).Get(path);
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << path;
  }
  EXPECT_EQ(h_.Client(other_).Get("/v1/pods/ml/a").status().code(), StatusCode::kNotFound);
  // A node's token reads no pods.
  StatusOr<Json> agent = h_.Agent().Get("/v1/pods");
  EXPECT_FALSE(agent.ok());
}

TEST_F(PodsTest, OnlyAnAdminReportsPods) {
  const Json report = {{"pods", {Pod("other", "c", "research", "node-1", 0)}}};
  for (const std::string& token : {research_, h_.server().agent_token()}) {
    StatusOr<Json> r = h_.Client(token).Put("/v1/pods", report);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(Names(h_.Client(research_).Get("/v1/pods")), (std::set<std::string>{"ml/a", "ml-b/b"}));
}

TEST_F(PodsTest, AHostileReportIsRefusedAndChangesNothing) {
  struct Case {
    Json report;
    const char* expected;
  } cases[] = {
      {{{"cluster", "prod"},
        {"pods", {Pod("ml", "a", "research", "node-1", 0), Pod("x", "y", "no team!", "", -1)}}},
       "pods[1]: team: 'no team!' is not a team name"},
      {{{"cluster", "prod"},
        {"pods", {Pod("ml", "a", "research", "", -1), Pod("ml", "a", "research", "", -1)}}},
       "pods[1]: pod ml/a is listed twice"},
      {{{"cluster", "prod"}, {"pods", {Pod("ML", "a", "research", "", -1)}}}, "pods[0]: namespace"},
  };
  for (const Case& c : cases) {
    StatusOr<Json> r = h_.Admin().Put("/v1/pods", c.report);
    ASSERT_FALSE(r.ok()) << c.expected;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos) << r.status().message();
  }
  EXPECT_EQ(Names(h_.Admin().Get("/v1/pods")),
            (std::set<std::string>{"ml/a", "ml-b/b", "other/c"}));
}

TEST_F(PodsTest, AClustersReportReplacesItsLastOneOnly) {
  ASSERT_TRUE(h_.Admin()
                  .Put("/v1/pods", Json{{"cluster", "dev"},
                                        {"pods", {Pod("ml", "d", "research", "node-9", 0)}}})
                  .ok());
  ASSERT_TRUE(h_.Admin()
                  .Put("/v1/pods", Json{{"cluster", "prod"},
                                        {"pods", {Pod("ml", "a", "research", "node-2", 1)}}})
                  .ok());
  EXPECT_EQ(Names(h_.Client(research_).Get("/v1/pods")), (std::set<std::string>{"ml/a", "ml/d"}));
  StatusOr<Json> a = h_.Client(research_).Get("/v1/pods/ml/a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)["node"], "node-2");
  StatusOr<Json> list = h_.Admin().Get("/v1/pods");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)["clusters"].size(), 2U);
}

// One quota over a team's pods and jobs: research's Running pod books 2 GiB in cluster prod
// (its Pending one nothing), so a 2 GiB job waits under a 3 GiB max_gpu_mem, saying how much its
// pods hold; /v1/teams shows both parts; once the pod is gone from the report, the job starts.
TEST_F(PodsTest, ATeamsPodsCountInItsQuotaWithItsJobs) {
  api::Client admin = h_.Admin();
  ASSERT_TRUE(admin.Put("/v1/teams/research", Json{{"max_gpu_mem", "3GiB"}}).ok());
  testing::FakeAgent agent(h_, "node-a", 1, 16 * testing::kGiB);
  ASSERT_TRUE(agent.Register().ok());
  const std::string id = QuotaHeldJob(admin, "2GiB");
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(testing::Job(admin, id)["reason"],
            "team research quota: 2 GiB of its 3 GiB GPU memory in use (2 GiB by its Kubernetes "
            "pods), this job needs 2 GiB");
  StatusOr<Json> teams = h_.Client(research_).Get("/v1/teams");
  ASSERT_TRUE(teams.ok());
  const Json in_use = (*teams)["teams"][0]["gpu_mem_in_use"];
  EXPECT_EQ(in_use["jobs_bytes"], 0);
  EXPECT_EQ(in_use["pods_bytes"], (Json{{"prod", 2 * testing::kGiB}}));

  ASSERT_TRUE(admin
                  .Put("/v1/pods",
                       Json{{"cluster", "prod"}, {"pods", {Pod("ml-b", "b", "research", "", -1)}}})
                  .ok());
  ASSERT_TRUE(testing::WaitFor([&] { return testing::Job(admin, id)["state"] == "starting"; }));
  teams = h_.Client(research_).Get("/v1/teams");
  ASSERT_TRUE(teams.ok());
  EXPECT_EQ((*teams)["teams"][0]["gpu_mem_in_use"]["jobs_bytes"], 2 * testing::kGiB);
}

// max_gpus over pods and jobs: each bound pod holds one GPU (its share of it). Research's pods
// hold 2 GPUs in two clusters, so a 1-GPU job waits under max_gpus 2, saying how many its pods
// hold; /v1/teams shows the GPUs by part; once one pod is gone from its cluster's report, the job
// starts.
TEST_F(PodsTest, ATeamsPodsCountInItsGpuQuotaWithItsJobs) {
  api::Client admin = h_.Admin();
  ASSERT_TRUE(admin.Put("/v1/teams/research", Json{{"max_gpus", 2}}).ok());
  ASSERT_TRUE(admin
                  .Put("/v1/pods", Json{{"cluster", "dev"},
                                        {"pods", {Pod("ml-dev", "d", "research", "node-9", 3)}}})
                  .ok());
  testing::FakeAgent agent(h_, "node-a", 2, 16 * testing::kGiB);
  ASSERT_TRUE(agent.Register().ok());
  const std::string id = QuotaHeldJob(admin, "1GiB");
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(testing::Job(admin, id)["reason"],
            "team research quota: 2 of its 2 GPUs in use (2 by its Kubernetes pods), this job "
            "needs 1");
  StatusOr<Json> teams = h_.Client(research_).Get("/v1/teams");
  ASSERT_TRUE(teams.ok());
  EXPECT_EQ((*teams)["teams"][0]["gpus_in_use"],
            (Json{{"jobs", 0}, {"pods", {{"dev", 1}, {"prod", 1}}}}));

  ASSERT_TRUE(admin.Put("/v1/pods", Json{{"cluster", "dev"}, {"pods", Json::array()}}).ok());
  ASSERT_TRUE(testing::WaitFor([&] { return testing::Job(admin, id)["state"] == "starting"; }));
  teams = h_.Client(research_).Get("/v1/teams");
  ASSERT_TRUE(teams.ok());
  EXPECT_EQ((*teams)["teams"][0]["gpus_in_use"], (Json{{"jobs", 1}, {"pods", {{"prod", 1}}}}));
}

// /metrics has the pods as it has jobs: counted by cluster, team and phase, and each bound pod's
// GPU memory with its node and GPU; a team's token sees its own pods there only.
TEST_F(PodsTest, MetricsCountThePodsACallerSees) {
  StatusOr<std::string> all = h_.Admin().GetText("/metrics");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_NE(all->find("paladin_pods{cluster=\"prod\",team=\"research\",phase=\"Running\"} 1\n"),
            std::string::npos)
      << *all;
  EXPECT_NE(all->find("paladin_pods{cluster=\"prod\",team=\"research\",phase=\"Pending\"} 1\n"),
            std::string::npos);
  EXPECT_NE(all->find("paladin_pod_gpu_memory_bytes{cluster=\"prod\",team=\"k8s-other\","
                      "namespace=\"other\",pod=\"c\",node=\"node-1\",gpu=\"1\",kind=\"booked\"} "
                      "2147483648\n"),
            std::string::npos)
      << *all;
  StatusOr<std::string> mine = h_.Client(research_).GetText("/metrics");
  ASSERT_TRUE(mine.ok());
  EXPECT_NE(mine->find("pod=\"a\",node=\"node-1\",gpu=\"0\",kind=\"booked\"} 2147483648\n"),
            std::string::npos)
      << *mine;
  EXPECT_EQ(mine->find("k8s-other"), std::string::npos) << *mine;
}

// `auto` pods' sizing (GET /v1/sizing, docs/kubernetes.md design 7): the class's highest measured
// pod peak x 1.2 (core::SizeAuto), the default with no history, each pod counted once, the
// history kept once the pods are gone; a team token reads its own team's sizing only.
Json Measured(const std::string& ns, const std::string& name, const std::string& team,
              const std::string& command, int64_t used) {
  Json p = Pod(ns, name, team, "node-1", 0);
  p["command"] = command;
  p["used_bytes"] = used >= 0 ? Json(used) : Json(nullptr);
  return p;
}

TEST_F(PodsTest, AnAutoPodIsSizedFromItsClassesMeasuredPods) {
  api::Client admin = h_.Admin();
  StatusOr<Json> none = admin.Get("/v1/sizing?team=research&command=train");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ((*none)["bytes"], 4 * testing::kGiB);
  EXPECT_EQ((*none)["from"], "default");
  EXPECT_EQ((*none)["class"], "research/train");
  EXPECT_EQ((*none)["why"], "no history for research/train: the default 4 GiB");

  const int64_t mib = int64_t{1} << 20;
  // Two research pods of train (one still starting, unmeasured), another team's of train at
  // 3 GiB, research's of serve at 1 GiB: only research/train's count for research/train.
  ASSERT_TRUE(
      admin
          .Put("/v1/pods", Json{{"cluster", "prod"},
                                {"pods",
                                 {Measured("ml", "t1", "research", "train", 400 * mib),
                                  Measured("ml-b", "t2", "research", "train", 500 * mib),
                                  Measured("ml", "t3", "research", "train", -1),
                                  Measured("other", "t4", "k8s-other", "train", 3 * testing::kGiB),
                                  Measured("ml", "s1", "research", "serve", testing::kGiB)}}})
          .ok());
  // t1 reported unmeasured for a pass, then again, higher: still one pod; then every pod gone:
  // the history stays.
  ASSERT_TRUE(admin
                  .Put("/v1/pods", Json{{"cluster", "prod"},
                                        {"pods", {Measured("ml", "t1", "research", "train", -1)}}})
                  .ok());
  ASSERT_TRUE(
      admin
          .Put("/v1/pods", Json{{"cluster", "prod"},
                                {"pods", {Measured("ml", "t1", "research", "train", 512 * mib)}}})
          .ok());
  ASSERT_TRUE(admin.Put("/v1/pods", Json{{"cluster", "prod"}, {"pods", Json::array()}}).ok());
  StatusOr<Json> sized = h_.Client(research_).Get("/v1/sizing?team=research&command=train");
  ASSERT_TRUE(sized.ok()) << sized.status().ToString();
  EXPECT_EQ((*sized)["from"], "history");
  EXPECT_EQ((*sized)["pods"], 2);
  EXPECT_EQ((*sized)["jobs"], 0);
  EXPECT_EQ((*sized)["peak_bytes"], 512 * mib);
  EXPECT_EQ((*sized)["bytes"], static_cast<int64_t>(512 * mib * 1.2));
  EXPECT_EQ((*sized)["why"],
            "highest peak of research/train's 2 earlier pods 512 MiB x 1.2 = 614.40 MiB");
  // The command as a path counts as its basename, as a job's command[0] does.
  StatusOr<Json> path = admin.Get("/v1/sizing?team=research&command=%2Fusr%2Fbin%2Ftrain");
  ASSERT_TRUE(path.ok());
  EXPECT_EQ((*path)["bytes"], (*sized)["bytes"]);
  StatusOr<Json> other = h_.Client(other_).Get("/v1/sizing?team=k8s-other&command=train");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)["peak_bytes"], 3 * testing::kGiB);

  // A job of the class is sized from the same history, by the same rule.
  StatusOr<Json> job = admin.Post(
      "/v1/jobs", Json{{"command", {"/opt/bin/train"}}, {"team", "research"}, {"gpu_mem", "auto"}});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const std::string id = (*job)["id"];
  StatusOr<Json> explained = admin.Get("/v1/jobs/" + id + "/explain");
  ASSERT_TRUE(explained.ok()) << explained.status().ToString();
  EXPECT_EQ((*explained)["prediction"], (*sized)["why"]);
  EXPECT_EQ(testing::Job(admin, id)["quota_bytes"], (*sized)["bytes"]);
}

TEST_F(PodsTest, ATeamReadsItsOwnTeamsSizingOnly) {
  StatusOr<Json> theirs = h_.Client(research_).Get("/v1/sizing?team=k8s-other&command=train");
  ASSERT_FALSE(theirs.ok());
  EXPECT_EQ(theirs.status().code(), StatusCode::kPermissionDenied);
  EXPECT_FALSE(h_.Agent().Get("/v1/sizing?team=research&command=train").ok());
  struct Bad {
    const char* query;
    const char* expected;
  } bad[] = {{"team=&command=train", "team: '' is not a team name"},
             {"team=re%20search&command=train", "team: 're search' is not a team name"},
             {"team=research&command=", "command: expected"},
             {"team=research&command=a%20b", "command: expected"}};
  for (const Bad& b : bad) {
    StatusOr<Json> r = h_.Admin().Get(std::string("/v1/sizing?") + b.query);
    ASSERT_FALSE(r.ok()) << b.query;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << b.query;
    EXPECT_NE(r.status().message().find(b.expected), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace paladin::server
