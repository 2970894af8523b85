// Authentication and scopes: no token is 401; a team sees and acts on its own jobs only
// (another team's job is 404 everywhere); an agent token cannot submit; admin sees everything.
#include <gtest/gtest.h>

#include "harness.h"

namespace paladin::server {
namespace {

using testing::Json;

class AuthTest : public ::testing::Test {
 protected:
  AuthTest() : h_("auth") {
    vision_ = h_.Token("team:vision");
    speech_ = h_.Token("team:speech");
    StatusOr<Json> job = h_.Client(speech_).Post(
        "/v1/jobs", Json{{"command", {"python3", "x.py"}}, {"gpu_mem", "1GiB"}});
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    speech_job_ = (*job)["id"];
  }
  testing::ServerHarness h_;
  std::string vision_;
  std::string speech_;
  std::string speech_job_;
};

TEST_F(AuthTest, NoOrBadTokenIs401) {
  for (const std::string& token : {std::string(), std::string("pal_nope"), std::string("x")}) {
    api::Client c = h_.Client(token);
    for (const char* path : {"/v1/jobs", "/v1/nodes", "/v1/summary", "/metrics", "/v1/teams"}) {
      StatusOr<Json> r = c.Get(path);
      ASSERT_FALSE(r.ok()) << path;
      EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated) << path;
    }
  }
  // Public pages need none.
  EXPECT_TRUE(h_.Client("").Get("/healthz").ok());
  EXPECT_TRUE(h_.Client("").GetText("/").ok());
  EXPECT_TRUE(h_.Client("").GetText("/dashboard.html").ok());
}

TEST_F(AuthTest, TeamCannotSeeOrTouchAnotherTeamsJob) {
  api::Client vision = h_.Client(vision_);
  const std::string j = speech_job_;
  for (const std::string& path :
       {"/v1/jobs/" + j, "/v1/jobs/" + j + "/logs", "/v1/jobs/" + j + "/usage",
        "/v1/jobs/" + j + "/explain", "/v1/events?job=" + j}) {
    StatusOr<Json> r = vision.Get(path);
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << path;
  }
  for (const std::string& path : {"/v1/jobs/" + j + "/cancel", "/v1/jobs/" + j + "/migrate",
                                  "/v1/jobs/" + j + "/checkpoint", "/v1/jobs/" + j + "/resume"}) {
    StatusOr<Json> r = vision.Post(path, Json{{"to", "node-b"}});
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << path;
  }
  StatusOr<Json> list = vision.Get("/v1/jobs?all=1");
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE((*list)["jobs"].empty());
  StatusOr<Json> events = vision.Get("/v1/events");
  ASSERT_TRUE(events.ok());
  EXPECT_TRUE((*events)["events"].empty());
  StatusOr<std::string> metrics = vision.GetText("/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(metrics->find(j), std::string::npos);
  StatusOr<Json> summary = vision.Get("/v1/summary");
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ((*summary)["jobs_submitted"], 0);
  StatusOr<Json> teams = vision.Get("/v1/teams");
  ASSERT_TRUE(teams.ok());
  for (const Json& t : (*teams)["teams"]) EXPECT_EQ(t["name"], "vision");
  // Its owner and the admin see it.
  EXPECT_TRUE(h_.Client(speech_).Get("/v1/jobs/" + j).ok());
  EXPECT_TRUE(h_.Admin().Get("/v1/jobs/" + j).ok());
  StatusOr<Json> admin_list = h_.Admin().Get("/v1/jobs");
  ASSERT_TRUE(admin_list.ok());
  EXPECT_EQ((*admin_list)["jobs"].size(), 1u);
  // The owner can cancel it.
  StatusOr<Json> cancelled = h_.Client(speech_).Post("/v1/jobs/" + j + "/cancel", Json::object());
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_EQ((*cancelled)["state"], "cancelled");
}

TEST_F(AuthTest, TeamSubmitsAsItselfOnly) {
  api::Client vision = h_.Client(vision_);
  StatusOr<Json> own = vision.Post("/v1/jobs", Json{{"command", {"a"}}, {"gpu_mem", 1 << 30}});
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_EQ((*own)["team"], "vision");
  StatusOr<Json> other =
      vision.Post("/v1/jobs", Json{{"command", {"a"}}, {"team", "speech"}, {"gpu_mem", "1GiB"}});
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kPermissionDenied);
}

TEST_F(AuthTest, ScopesLimitEndpoints) {
  api::Client agent = h_.Agent();
  StatusOr<Json> submit = agent.Post("/v1/jobs", Json{{"command", {"a"}}});
  ASSERT_FALSE(submit.ok());
  EXPECT_EQ(submit.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(agent.Get("/v1/jobs").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(agent.Get("/v1/tokens").status().code(), StatusCode::kPermissionDenied);
  api::Client vision = h_.Client(vision_);
  EXPECT_EQ(vision.Post("/v1/agents/register", Json{{"name", "n"}}).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(vision.Post("/v1/tokens", Json{{"scope", "admin"}}).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(vision.Put("/v1/teams/vision", Json{{"max_gpus", 100}}).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(vision.Post("/v1/nodes/n/drain", Json::object()).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(vision.Post("/v1/migrations/1/commit", Json::object()).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(agent.Post("/v1/agents/register", Json{{"name", "n"}}).ok());
}

TEST_F(AuthTest, TokensCanBeListedAndRevoked) {
  StatusOr<Json> created = h_.Admin().Post("/v1/tokens", Json{{"scope", "team:x"}, {"name", "t"}});
  ASSERT_TRUE(created.ok());
  const std::string secret = (*created)["token"];
  EXPECT_TRUE(h_.Client(secret).Get("/v1/jobs").ok());
  StatusOr<Json> list = h_.Admin().Get("/v1/tokens");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->dump().find(secret), std::string::npos);  // secrets are never shown again
  const int64_t id = (*created)["id"];
  EXPECT_TRUE(h_.Admin().Delete("/v1/tokens/" + std::to_string(id)).ok());
  EXPECT_EQ(h_.Client(secret).Get("/v1/jobs").status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(h_.Admin().Delete("/v1/tokens/" + std::to_string(id)).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(h_.Admin().Post("/v1/tokens", Json{{"scope", "root"}}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace paladin::server
