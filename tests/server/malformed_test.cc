// Hostile input: hundreds of malformed requests (bad JSON, wrong types, negative sizes, empty
// commands, path tricks, unknown ids, a body over 1 MiB) are each answered 4xx with a JSON error,
// and the server serves normally afterwards.
#include <gtest/gtest.h>
#include <httplib.h>

#include <csignal>

#include "harness.h"

namespace paladin::server {
namespace {

using testing::Json;

struct Request {
  std::string method;
  std::string path;
  std::string body;
  bool admin = true;
};

std::vector<std::string> BadJobBodies() {
  std::vector<std::string> bodies = {
      "",
      "{",
      "}",
      "[]",
      "null",
      "1",
      "\"x\"",
      "{\"command\":}",
      "{'command': ['a']}",
      "{\"command\": [\"a\"],}",
      "\xff\xfe",
      "{\"command\": \"\xff\"}",
      R"({})",
      R"({"command": null})",
      R"({"command": 1})",
      R"({"command": "python3"})",
      R"({"command": []})",
      R"({"command": [""]})",
      R"({"command": [1, 2]})",
      R"({"command": [["a"]]})",
      R"({"command": [null]})",
      R"({"command": {"a": 1}})",
      R"({"command": ["a"], "gpu_mem": -1})",
      R"({"command": ["a"], "gpu_mem": 0})",
      R"({"command": ["a"], "gpu_mem": "-8GiB"})",
      R"({"command": ["a"], "gpu_mem": "8 parsecs"})",
      R"({"command": ["a"], "gpu_mem": "GiB"})",
      R"({"command": ["a"], "gpu_mem": true})",
      R"({"command": ["a"], "gpu_mem": [1]})",
      R"({"command": ["a"], "gpu_mem": {"x": 1}})",
      R"({"command": ["a"], "gpu_mem": 1.5})",
      R"({"command": ["a"], "gpu_mem": "1e400GiB"})",
      R"({"command": ["a"], "gpu_mem": 99999999999999999999999})",
      R"({"command": ["a"], "gpu_mem_max": -5})",
      R"({"command": ["a"], "gpu_mem_max": "x"})",
      R"({"command": ["a"], "gpu_mem": "8GiB", "gpu_mem_max": "1GiB"})",
      R"({"command": ["a"], "gpus": 0})",
      R"({"command": ["a"], "gpus": -1})",
      R"({"command": ["a"], "gpus": 1000})",
      R"({"command": ["a"], "gpus": "1"})",
      R"({"command": ["a"], "gpus": 1.5})",
      R"({"command": ["a"], "gpus": 18446744073709551615})",
      R"({"command": ["a"], "priority": "high"})",
      R"({"command": ["a"], "priority": 1e30})",
      R"({"command": ["a"], "priority": 99999999999})",
      R"({"command": ["a"], "name": 5})",
      R"({"command": ["a"], "name": "../../etc"})",
      R"({"command": ["a"], "name": "a/b"})",
      R"({"command": ["a"], "name": " "})",
      R"({"command": ["a"], "team": 7})",
      R"({"command": ["a"], "team": ""})",
      R"({"command": ["a"], "team": "../x"})",
      R"({"command": ["a"], "team": "a b"})",
      R"({"command": ["a"], "env": "X=1"})",
      R"({"command": ["a"], "env": {"X": 1}})",
      R"({"command": ["a"], "env": {"": "1"}})",
      R"({"command": ["a"], "env": {"A=B": "1"}})",
      R"({"command": ["a"], "env": ["X"]})",
  };
  return bodies;
}

std::vector<Request> MalformedRequests() {
  std::vector<Request> out;
  for (const std::string& body : BadJobBodies()) out.push_back({"POST", "/v1/jobs", body});
  const std::vector<std::string> bad_ids = {"j-1",
                                            "j-",
                                            "x",
                                            "j-00000a",
                                            "..",
                                            "%2e%2e",
                                            "j-000001x",
                                            "J-000001",
                                            "j-0000001234567890",
                                            "%00",
                                            "j-000001%00",
                                            "%2F",
                                            std::string(300, 'j'),
                                            "j-999999",
                                            "j-000000",
                                            "-1",
                                            "0"};
  for (const std::string& id : bad_ids) {
    for (const char* suffix : {"", "/logs", "/usage", "/explain"}) {
      out.push_back({"GET", "/v1/jobs/" + id + suffix, ""});
    }
    for (const char* suffix : {"/cancel", "/migrate", "/checkpoint", "/resume"}) {
      out.push_back({"POST", "/v1/jobs/" + id + suffix, R"({"to": "node-b"})"});
    }
    out.push_back({"GET", "/v1/events?job=" + id, ""});
  }
  for (const char* path :
       {"/v1/jobs/../../etc/passwd", "/v1/../v1/jobs/x", "/v1/jobs/j-000001/../../tokens",
        "/v1/jobs/j-000001/logs/../../x", "/v1//jobs", "/v2/jobs", "/v1/jobs/j-000001/fly",
        "/etc/passwd", "/v1/nodes/x/y", "/v1/agents",
        "/v1/jobs?state="
        "%ff%fe"}) {
    out.push_back({"GET", path, ""});
  }
  for (const char* q : {"tail=-1", "tail=x", "tail=99999999999999999999", "stream=stdin",
                        "stream=", "stream=../../x", "tail=1.5"}) {
    out.push_back({"GET", std::string("/v1/jobs/j-000001/logs?") + q, ""});
  }
  for (const char* q : {"since=x", "since=-1", "since=1e400", "since=nan", "job=../x"}) {
    out.push_back({"GET", std::string("/v1/events?") + q, ""});
  }
  for (const char* body : {"{", "[]", R"({"to": 5})", R"({})", R"({"to": ""})", R"({"to": "../x"})",
                           R"({"to": "node-b", "gpu": "x"})", R"({"to": "node-b", "gpu": -1})",
                           R"({"to": "node-b/x"})", R"({"to": "nowhere"})"}) {
    out.push_back({"POST", "/v1/jobs/j-000001/migrate", body});
  }
  for (const char* body :
       {"{", "[]", R"({"max_gpus": -1})", R"({"max_gpus": "x"})", R"({"max_gpu_mem": -1})",
        R"({"max_gpu_mem": "lots"})", R"({"priority": "x"})", R"({"max_gpus": 1.5})",
        R"({"max_gpu_mem": [1]})"}) {
    out.push_back({"PUT", "/v1/teams/vision", body});
  }
  for (const char* team : {"..", "a%20b", "%2e%2e", "-x"}) {
    out.push_back({"PUT", std::string("/v1/teams/") + team, "{}"});
  }
  for (const char* body : {"{", "[]", R"({})", R"({"scope": 1})", R"({"scope": "root"})",
                           R"({"scope": "team:"})", R"({"scope": "team:../x"})",
                           R"({"scope": "admin", "name": 5})", R"({"scope": "TEAM:x"})"}) {
    out.push_back({"POST", "/v1/tokens", body});
  }
  for (const char* id : {"x", "-1", "999999", "1.5", ".."}) {
    out.push_back({"DELETE", std::string("/v1/tokens/") + id, ""});
  }
  for (const char* body :
       {"{", "[]", R"({})", R"({"name": 5})", R"({"name": ""})", R"({"name": "../x"})",
        R"({"name": "n", "gpus": 5})", R"({"name": "n", "gpus": [5]})",
        R"({"name": "n", "gpus": [{"index": "0"}]})", R"({"name": "n", "gpus": [{"index": -1}]})",
        R"({"name": "n", "gpus": [{"index": 0, "memory_bytes": -1}]})",
        R"({"name": "n", "gpus": [{"index": 0}, {"index": 0}]})",
        R"({"name": "n", "gpus": [{"index": 0, "healthy": "yes"}]})",
        R"({"name": "n", "migrate_port": 70000})", R"({"name": "n", "migrate_port": "x"})",
        R"({"name": "n", "address": 1})", R"({"name": "n", "jobs": [{"id": "../x"}]})",
        R"({"name": "n", "jobs": 5})"}) {
    out.push_back({"POST", "/v1/agents/register", body});
  }
  for (const char* body :
       {"{", "[]", R"({"jobs": 5})", R"({"jobs": [5]})", R"({"jobs": [{"id": 5}]})",
        R"({"jobs": [{"id": "j-1"}]})", R"({"jobs": [{"id": "j-000001", "epoch": "x"}]})",
        R"({"jobs": [{"id": "j-000001", "used_bytes": -5}]})",
        R"({"jobs": [{"id": "j-000001", "stdout": 5}]})",
        R"({"jobs": [{"id": "j-000001", "exit_code": "x"}]})", R"({"results": [{"command": "x"}]})",
        R"({"results": [{"command": 1, "ok": "yes"}]})",
        R"({"results": [{"command": 1, "detail": 5}]})", R"({"results": 5})",
        R"({"gpus": [{"index": "0"}]})", R"({"gpus": [{"used_bytes": -1}]})",
        R"({"gpus": [{"fault": 5}]})"}) {
    out.push_back({"POST", "/v1/agents/node-x/heartbeat", body});
  }
  out.push_back({"POST", "/v1/agents/unknown-node/heartbeat", "{}"});
  out.push_back({"POST", "/v1/agents/../x/heartbeat", "{}"});
  for (const char* id : {"x", "-1", "999", "1.5"}) {
    out.push_back({"POST", std::string("/v1/migrations/") + id + "/commit", "{}"});
  }
  for (const char* path : {"/v1/nodes/x/drain", "/v1/nodes/../drain",
                           "/v1/nodes/node-x/gpus/x/fault", "/v1/nodes/node-x/gpus/-1/fault",
                           "/v1/nodes/node-x/gpus/9/fault", "/v1/nodes/nowhere/gpus/0/fault"}) {
    out.push_back({"POST", path, "{}"});
  }
  for (const char* body : {"{", R"({"kind": "fire"})", R"({"kind": 5})", R"({"code": "x"})"}) {
    out.push_back({"POST", "/v1/nodes/node-x/gpus/0/fault", body});
  }
  // Wrong methods.
  for (const char* path : {"/v1/jobs/j-000001", "/v1/summary", "/metrics"}) {
    out.push_back({"DELETE", path, ""});
    out.push_back({"PUT", path, "{}"});
  }
  return out;
}

TEST(MalformedTest, EveryBadRequestIsA4xxAndTheServerStillServes) {
  // The server answers an oversized body with 413 and closes while this raw client is still
  // sending; that must be an error on the connection here, not a SIGPIPE that ends the test.
  std::signal(SIGPIPE, SIG_IGN);
  testing::ServerHarness h("malformed");
  api::Client admin = h.Admin();
  // Something to point at: a job, a node with an emulated GPU.
  ASSERT_TRUE(admin.Post("/v1/jobs", Json{{"command", {"a"}}, {"gpu_mem", "1GiB"}}).ok());
  ASSERT_TRUE(
      h.Agent()
          .Post("/v1/agents/register",
                Json{{"name", "node-x"},
                     {"gpus", {{{"index", 0}, {"memory_bytes", 1 << 30}, {"emulated", true}}}}})
          .ok());
  const std::vector<Request> requests = MalformedRequests();
  ASSERT_GE(requests.size(), 300u);
  httplib::Client http("127.0.0.1", h.server().port());
  http.set_read_timeout(10, 0);
  httplib::Headers headers = {{"Authorization", "Bearer " + h.server().admin_token()}};
  int checked = 0;
  for (const Request& r : requests) {
    const std::string what = r.method + " " + r.path + " " + r.body.substr(0, 80);
    httplib::Result res =
        r.method == "GET"    ? http.Get(r.path.c_str(), headers)
        : r.method == "POST" ? http.Post(r.path.c_str(), headers, r.body, "application/json")
        : r.method == "PUT"  ? http.Put(r.path.c_str(), headers, r.body, "application/json")
                             : http.Delete(r.path.c_str(), headers);
    ASSERT_TRUE(res) << what << ": no answer (" << httplib::to_string(res.error()) << ")";
    EXPECT_GE(res->status, 400) << what;
    EXPECT_LT(res->status, 500) << what << " -> " << res->body;
    Json body = Json::parse(res->body, nullptr, false);
    EXPECT_TRUE(body.is_object() && body.contains("error")) << what << " -> " << res->body;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(requests.size()));

  // A body over 1 MiB.
  const std::string huge(2 << 20, 'x');
  // The server answers 413 as soon as the declared length is over the limit and closes; a
  // client still sending then sees the connection closed (EPIPE) before it reads the answer.
  httplib::Result big = http.Post("/v1/jobs", headers, huge, "application/json");
  if (big) {
    EXPECT_EQ(big->status, 413);
  } else {
    EXPECT_TRUE(big.error() == httplib::Error::Write || big.error() == httplib::Error::Read)
        << httplib::to_string(big.error());
  }
  // Garbage in an Authorization header, no header.
  httplib::Result bad_auth = http.Get("/v1/jobs", {{"Authorization", "Basic abc"}});
  ASSERT_TRUE(bad_auth);
  EXPECT_EQ(bad_auth->status, 401);

  // Still serving, and nothing was created by the bad requests.
  StatusOr<Json> jobs = admin.Get("/v1/jobs?all=1");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ((*jobs)["jobs"].size(), 1u);
  EXPECT_TRUE(h.Client("").Get("/healthz").ok());
}

// Paladin's own client, with SIGPIPE at its default action: the server's early 413 and close
// reach the caller as an error each time, and the process lives to make the next call.
TEST(MalformedTest, AnOversizedBodyFromTheClientIsAnErrorNotASignal) {
  testing::ServerHarness h("oversized");
  api::Client admin = h.Admin();
  const Json huge = Json{{"command", {std::string(4 << 20, 'x')}}};
  for (int i = 0; i < 8; ++i) {
    StatusOr<Json> posted = admin.Post("/v1/jobs", huge);
    ASSERT_FALSE(posted.ok());
  }
  EXPECT_TRUE(admin.Get("/v1/jobs").ok());
}

}  // namespace
}  // namespace paladin::server
