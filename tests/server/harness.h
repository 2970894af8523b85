// A server on a loopback port with a fresh data directory, clients for its tokens, and a fake
// node agent that speaks the agent API the way src/agent does.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "paladin/api/client.h"
#include "paladin/server/server.h"

namespace paladin::server::testing {

using api::Json;

inline constexpr int64_t kGiB = int64_t{1} << 30;

// A fresh folder under the temporary directory, removed when the test process exits normally
// (a crashed test leaves its folder to be looked at).
inline std::string TempDir(const std::string& name) {
  static int counter = 0;
  static std::vector<std::string> made;
  if (made.empty()) {
    std::atexit([] {
      std::error_code ignored;
      for (const std::string& dir : made) std::filesystem::remove_all(dir, ignored);
    });
  }
  std::string dir = std::filesystem::temp_directory_path().string() + "/paladin-server-" + name +
                    "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  made.push_back(dir);
  return dir;
}

class ServerHarness {
 public:
  explicit ServerHarness(const std::string& name, ServerOptions options = {}) {
    dir_ = options.data_dir.empty() ? TempDir(name) : options.data_dir;
    options.data_dir = dir_;
    options.listen = "127.0.0.1:0";
    options.schedule_interval_s = 0.1;
    options_ = options;
    Start();
  }
  ~ServerHarness() {
    if (server_) server_->Stop();
  }

  void Start() {
    StatusOr<std::unique_ptr<Server>> s = Server::Start(options_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
  }
  // On the same port, so that fake agents (whose clients hold it) reach the new server.
  void Restart() {
    options_.listen = "127.0.0.1:" + std::to_string(server_->port());
    server_->Stop();
    server_.reset();
    Start();
  }

  api::Client Admin() const { return Client(server_->admin_token()); }
  api::Client Agent() const { return Client(server_->agent_token()); }
  api::Client Client(const std::string& token) const {
    api::Endpoint e;
    e.host = "127.0.0.1";
    e.port = server_->port();
    return api::Client(e, token, 10);
  }
  // A new token of `scope` ("team:vision").
  std::string Token(const std::string& scope) const {
    StatusOr<Json> t = Admin().Post("/v1/tokens", Json{{"scope", scope}, {"name", scope}});
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? (*t)["token"].get<std::string>() : "";
  }
  Server& server() { return *server_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  ServerOptions options_;
  std::unique_ptr<Server> server_;
};

// Waits up to `seconds` for `done`, polling.
inline bool WaitFor(const std::function<bool()>& done, double seconds = 10) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

// A node agent without workloads: it registers, heartbeats on demand, keeps the commands it was
// sent, and reports the jobs the test says it runs.
class FakeAgent {
 public:
  struct Job {
    std::string id;
    int64_t epoch = 0;
    std::string state = "running";
    int64_t used_bytes = 0;
    int64_t quota_bytes = 0;
    int64_t quota_grows = 0;
    std::string stdout_text;
    std::optional<int> exit_code;
  };

  FakeAgent(const ServerHarness& h, std::string name, int gpus, int64_t gpu_bytes, int port = 0)
      : FakeAgent(h.Agent(), std::move(name), gpus, gpu_bytes, port) {}
  FakeAgent(api::Client client, std::string name, int gpus, int64_t gpu_bytes, int port = 0)
      : client_(std::move(client)),
        name_(std::move(name)),
        gpus_(gpus),
        gpu_bytes_(gpu_bytes),
        port_(port) {}

  bool checkpointable = true;        // what Register() says of its workloads
  bool post_copy = false;            // ... and of its CRIU (post-copy moves)
  bool stream = false;               // ... and whether it streams pre-copy moves
  Json gpu_reports = Json::array();  // what Heartbeat() says of the GPUs (health, use)

  Status Register() {
    Json gpus = Json::array();
    for (int i = 0; i < gpus_; ++i) {
      gpus.push_back({{"index", i},
                      {"uuid", "GPU-" + name_ + "-" + std::to_string(i)},
                      {"model", "EMU"},
                      {"memory_bytes", gpu_bytes_},
                      {"emulated", true},
                      {"healthy", true}});
    }
    Json jobs = Json::array();
    for (const auto& [id, j] : jobs_) jobs.push_back(Report(j));
    StatusOr<Json> r = client_.Post("/v1/agents/register", Json{{"name", name_},
                                                                {"address", "127.0.0.1"},
                                                                {"migrate_port", port_},
                                                                {"checkpointable", checkpointable},
                                                                {"post_copy", post_copy},
                                                                {"stream", stream},
                                                                {"gpus", gpus},
                                                                {"jobs", jobs}});
    return r.ok() ? Status::Ok() : r.status();
  }

  // One heartbeat: reports jobs and pending results; returns the commands received.
  StatusOr<Json> Heartbeat() {
    Json jobs = Json::array();
    for (auto& [id, j] : jobs_) {
      jobs.push_back(Report(j));
      j.stdout_text.clear();
    }
    Json body = {{"gpus", gpu_reports}, {"jobs", jobs}, {"results", results_}};
    StatusOr<Json> r = client_.Post("/v1/agents/" + name_ + "/heartbeat", body);
    if (!r.ok()) return r.status();
    results_ = Json::array();
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      it = it->second.state == "exited" ? jobs_.erase(it) : std::next(it);
    }
    for (const Json& c : (*r)["commands"]) {
      const int64_t id = c["id"].get<int64_t>();
      if (seen_.count(id) != 0) continue;  // each command runs once
      seen_[id] = true;
      commands_.push_back(c);
    }
    return (*r)["commands"];
  }

  // Acts like an agent on start/kill/restore: starts or forgets the job, answers ok.
  void Obey(const Json& c) {
    const std::string kind = c["kind"];
    Json result = {{"command", c["id"]}, {"ok", true}, {"error", ""}, {"detail", Json::object()}};
    if (kind == "start" || kind == "restore") {
      Job j;
      j.id = c["job"];
      j.epoch = c["epoch"];
      j.quota_bytes = c["quota_bytes"];
      jobs_[j.id] = j;
      result["detail"] = {{"pid", 1000}};
    } else if (kind == "kill") {
      jobs_.erase(c["job"].get<std::string>());
    }
    results_.push_back(result);
  }
  void Answer(const Json& result) { results_.push_back(result); }

  std::vector<Json>& commands() { return commands_; }
  std::map<std::string, Job>& jobs() { return jobs_; }
  const std::string& name() const { return name_; }

 private:
  static Json Report(const Job& j) {
    Json r = {{"id", j.id},
              {"epoch", j.epoch},
              {"state", j.state},
              {"pid", 1000},
              {"used_bytes", j.used_bytes},
              {"quota_bytes", j.quota_bytes},
              {"quota_grows", j.quota_grows},
              {"refusals", 0},
              {"exit_code", j.exit_code ? Json(*j.exit_code) : Json(nullptr)},
              {"stdout", j.stdout_text},
              {"stderr", ""}};
    return r;
  }

  api::Client client_;
  std::string name_;
  int gpus_;
  int64_t gpu_bytes_;
  int port_;
  std::map<std::string, Job> jobs_;
  std::map<int64_t, bool> seen_;
  std::vector<Json> commands_;
  Json results_ = Json::array();
};

// The job as GET /v1/jobs/ID answers (an empty object, and a test failure, when it does not).
inline Json Job(const api::Client& c, const std::string& id) {
  StatusOr<Json> j = c.Get("/v1/jobs/" + id);
  EXPECT_TRUE(j.ok()) << j.status().ToString();
  return j.ok() ? *j : Json::object();
}

// Heartbeats until the agent has received a command of `kind` for `job`.
inline std::optional<Json> AwaitCommand(FakeAgent& a, const std::string& kind,
                                        const std::string& job) {
  std::optional<Json> found;
  WaitFor([&] {
    EXPECT_TRUE(a.Heartbeat().ok());
    for (const Json& c : a.commands()) {
      if (c["kind"] == kind && c.value("job", "") == job) found = c;
    }
    return found.has_value();
  });
  return found;
}

}  // namespace paladin::server::testing
