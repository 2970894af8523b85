// `paladin agent` end to end against a fake server (an httplib::Server on loopback that
// registers agents, hands out commands in heartbeat answers, records results, job reports and
// their logs, and answers migration commits). Each test runs real agents (the paladin binary) on
// emulated GPUs of their own, with ckpt_gpu as the workload: it keeps device memory, checks it
// every step and prints "gen N ok dev 0 GPU-...", so a checkpoint that lost state shows as a
// MISMATCH or as generations starting over.
//
// Needs root (each job runs as a uid of its own, in PID namespaces; CRIU) and CRIU: exits 77
// without them.
//
// The fixture shared by the agent's test files (agent_*_test.cc, one executable agent_test;
// agent_main.cc skips it without root or CRIU): the fake server, /proc helpers and AgentTest,
// which starts agents and sends them commands.
#ifndef PALADIN_TESTS_AGENT_AGENT_FIXTURE_H_
#define PALADIN_TESTS_AGENT_AGENT_FIXTURE_H_

#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "paladin/api/port.h"

namespace paladin::agent_test {

namespace fs = std::filesystem;
using Json = nlohmann::json;

inline constexpr uint64_t kMiB = 1ull << 20;

// --- the fake server -------------------------------------------------------------------------

class FakeServer {
 public:
  FakeServer() {
    http_.Post("/v1/agents/register", [this](const httplib::Request& req, httplib::Response& res) {
      const Json body = Json::parse(req.body, nullptr, false);
      std::lock_guard<std::mutex> lock(mu_);
      if (AnswerDown(body, res)) return;
      const std::string name = body.value("name", "");
      registrations_[name].push_back(body);
      Record(name, body["jobs"]);
      res.set_content(
          Json({{"lease_s", lease_s_}, {"heartbeat_s", heartbeat_s_}, {"checkpoint_store", "/tmp"}})
              .dump(),
          "application/json");
    });
    http_.Post(R"(/v1/agents/([^/]+)/heartbeat)",
               [this](const httplib::Request& req, httplib::Response& res) {
                 const std::string name = req.matches[1];
                 const Json body = Json::parse(req.body, nullptr, false);
                 std::lock_guard<std::mutex> lock(mu_);
                 if (AnswerDown(body, res)) return;
                 ++beats_[name];
                 gpus_[name] = body["gpus"];
                 Record(name, body["jobs"]);
                 for (const Json& r : body["results"]) results_[r["command"].get<int64_t>()] = r;
                 Json commands = Json::array();
                 for (const Json& c : pending_[name]) commands.push_back(c);
                 pending_[name].clear();
                 res.set_content(Json({{"lease_s", lease_s_}, {"commands", commands}}).dump(),
                                 "application/json");
               });
    http_.Post(R"(/v1/migrations/(\d+)/commit)",
               [this](const httplib::Request& /*req*/, httplib::Response& res) {
                 std::lock_guard<std::mutex> lock(mu_);
                 ++commits_;
                 res.set_content(Json({{"commit", commit_}}).dump(), "application/json");
               });
    port_ = http_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { http_.listen_after_bind(); });
  }
  ~FakeServer() {
    http_.stop();
    thread_.join();
  }

  std::string Url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void SetLease(double lease_s, double heartbeat_s) {
    std::lock_guard<std::mutex> lock(mu_);
    lease_s_ = lease_s;
    heartbeat_s_ = heartbeat_s;
  }
  void SetDown(bool down) {
    std::lock_guard<std::mutex> lock(mu_);
    down_ = down;
  }
  void SetCommit(bool commit) {
    std::lock_guard<std::mutex> lock(mu_);
    commit_ = commit;
  }
  int64_t Send(const std::string& agent, Json command) {
    std::lock_guard<std::mutex> lock(mu_);
    command["id"] = next_id_;
    pending_[agent].push_back(command);
    return next_id_++;
  }
  std::optional<Json> Result(int64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = results_.find(id);
    if (it == results_.end()) return std::nullopt;
    return it->second;
  }
  // The latest report of a job by an agent (any epoch when epoch < 0).
  std::optional<Json> Job(const std::string& agent, const std::string& id, int64_t epoch = -1) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Json& j : jobs_[agent]) {
      if (j["id"] == id && (epoch < 0 || j["epoch"] == epoch)) return j;
    }
    return std::nullopt;
  }
  std::string Stdout(const std::string& agent, const std::string& id, int64_t epoch) {
    std::lock_guard<std::mutex> lock(mu_);
    return stdout_[agent + "/" + id + "/" + std::to_string(epoch)];
  }
  std::vector<Json> Registrations(const std::string& agent) {
    std::lock_guard<std::mutex> lock(mu_);
    return registrations_[agent];
  }
  Json Gpus(const std::string& agent) {
    std::lock_guard<std::mutex> lock(mu_);
    return gpus_[agent];
  }
  int Beats(const std::string& agent) {
    std::lock_guard<std::mutex> lock(mu_);
    return beats_[agent];
  }
  std::set<int64_t> Pids() {
    std::lock_guard<std::mutex> lock(mu_);
    return pids_;
  }
  std::vector<std::string> States(const std::string& agent, const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return states_[agent + "/" + id];
  }

 private:
  // Answers 503 while the server is down, or to a body that is not an object; true when it did.
  // The caller holds mu_.
  bool AnswerDown(const Json& body, httplib::Response& res) const {
    if (!down_ && body.is_object()) return false;
    res.status = 503;
    res.set_content(R"({"error": "down"})", "application/json");
    return true;
  }

  void Record(const std::string& agent, const Json& jobs) {
    if (!jobs.is_array()) return;
    jobs_[agent] = jobs;
    for (const Json& j : jobs) {
      const std::string key = agent + "/" + j["id"].get<std::string>() + "/" +
                              std::to_string(j["epoch"].get<int64_t>());
      stdout_[key] += j.value("stdout", "");
      if (j["pid"].is_number_integer()) pids_.insert(j["pid"].get<int64_t>());
      states_[agent + "/" + j["id"].get<std::string>()].push_back(j["state"]);
    }
  }

  httplib::Server http_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  double lease_s_ = 20;
  double heartbeat_s_ = 0.3;
  bool down_ = false;
  bool commit_ = true;
  int commits_ = 0;
  int64_t next_id_ = 1;
  std::map<std::string, std::deque<Json>> pending_;
  std::map<int64_t, Json> results_;
  std::map<std::string, Json> jobs_;
  std::map<std::string, Json> gpus_;
  std::map<std::string, std::string> stdout_;
  std::map<std::string, std::vector<Json>> registrations_;
  std::map<std::string, std::vector<std::string>> states_;
  std::map<std::string, int> beats_;
  std::set<int64_t> pids_;
};

// --- helpers ---------------------------------------------------------------------------------

inline bool WaitFor(double seconds, const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return done();
}

inline char ProcState(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return '\0';
  const size_t close = line.rfind(')');
  return close == std::string::npos ? '\0' : line[close + 2];
}

// The command of a job under paladin-workload-init (its only child); the fence stops it, not the
// init.
inline int64_t CommandOf(int64_t root) {
  std::ifstream in("/proc/" + std::to_string(root) + "/task/" + std::to_string(root) + "/children");
  int64_t child = 0;
  in >> child;
  return child > 0 ? child : root;
}

inline bool Alive(int64_t pid) {
  const char s = ProcState(pid);
  return s != '\0' && s != 'Z' && s != 'X';
}

inline int64_t UidOf(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Uid:", 0) == 0) return std::atoll(line.c_str() + 4);
  }
  return -1;
}

// The first child of `pid` (the command of a job whose root is paladin-workload-init), or -1.
inline int64_t ChildOf(int64_t pid) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    const size_t close = line.rfind(')');
    if (close == std::string::npos || close + 4 >= line.size()) continue;
    if (std::atoll(line.c_str() + close + 4) == pid) return std::atoll(name.c_str());
  }
  return -1;
}

// In the agent's default range of per-job uids (docs/agent.md, "Users").
inline bool JobUid(int64_t uid) { return uid >= 1879048192 && uid <= 1879113727; }

inline std::string CommOf(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string comm;
  std::getline(in, comm);
  return comm;
}

// The generations ckpt_gpu reported, in order.
inline std::vector<int> Generations(const std::string& text) {
  std::vector<int> gens;
  static const std::regex kGen(R"(gen (\d+) ok)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kGen); it != std::sregex_iterator();
       ++it) {
    gens.push_back(std::stoi((*it)[1]));
  }
  return gens;
}

// A port P with P+1 free too (a migration listens on both).
inline int FreePortPair() { return api::FreeLoopbackPorts(2); }

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/paladin-agent-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    work_ = tmpl;
    chmod(work_.c_str(), 0755);
    store_ = work_ + "/store";
    fs::create_directories(store_);
    prefix_ = "t" + std::to_string(getpid()) + "-";
  }

  void TearDown() override {
    while (!agents_.empty()) StopAgent(agents_.begin()->first, SIGKILL);
    for (int64_t pid : server_.Pids()) {
      if (pid > 0 && Alive(pid)) kill(static_cast<pid_t>(pid), SIGKILL);
    }
    // Their cgroups (NODE-JOB-EPOCH under paladin/), once empty.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::error_code ec;
    for (const auto& mount : fs::directory_iterator("/sys/fs/cgroup", ec)) {
      const fs::path dir = mount.path() / "paladin";
      for (const auto& group : fs::directory_iterator(dir, ec)) {
        if (group.path().filename().string().rfind(prefix_, 0) == 0) rmdir(group.path().c_str());
      }
    }
    if (getenv("KEEP_WORK") == nullptr && !HasFailure()) fs::remove_all(work_, ec);
    if (HasFailure()) std::fprintf(stderr, "work folder kept: %s\n", work_.c_str());
  }

  std::string Node(const std::string& name) const { return prefix_ + name; }
  std::string Data(const std::string& name) const { return work_ + "/" + name; }

  // Starts `paladin agent` for node `name` with its own emulated GPUs.
  void StartAgent(const std::string& name, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {PALADIN_BIN, "agent",    "--server",        server_.Url(),
                                     "--token",   "pal_test", "--name",          Node(name),
                                     "--data",    Data(name), "--emulated-gpus", "2x4GiB"};
    args.insert(args.end(), extra.begin(), extra.end());
    const std::string log = work_ + "/" + name + ".agent.log";
    const size_t registered = server_.Registrations(Node(name)).size();
    const int beats = server_.Beats(Node(name));
    const pid_t pid = fork();
    if (pid == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(fd, STDERR_FILENO);
      dup2(fd, STDOUT_FILENO);
      close_range(3, ~0U, 0);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    agents_[name] = pid;
    ASSERT_TRUE(WaitFor(60,
                        [&] {
                          return server_.Registrations(Node(name)).size() > registered &&
                                 server_.Beats(Node(name)) > beats;
                        }))
        << "agent " << name << " never heartbeated: " << AgentLog(name);
  }

  void StopAgent(const std::string& name, int signal) {
    auto it = agents_.find(name);
    if (it == agents_.end()) return;
    kill(it->second, signal);
    int status = 0;
    waitpid(it->second, &status, 0);
    agents_.erase(it);
  }

  std::string AgentLog(const std::string& name) const {
    std::ifstream in(work_ + "/" + name + ".agent.log");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::string GpuUuid(const std::string& name, int index) {
    const std::vector<Json> regs = server_.Registrations(Node(name));
    if (regs.empty()) return "";
    for (const Json& g : regs.back()["gpus"]) {
      if (g["index"] == index) return g["uuid"];
    }
    return "";
  }

  // Sends a command and waits for its result; returns it (or null on timeout).
  Json Run(const std::string& name, const Json& command, double seconds = 60) {
    const int64_t id = server_.Send(Node(name), command);
    Json result;
    WaitFor(seconds, [&] {
      std::optional<Json> r = server_.Result(id);
      if (r) result = *r;
      return r.has_value();
    });
    return result;
  }

  Json StartGpuJob(const std::string& name, const std::string& job, int64_t epoch, int gpu) {
    return Run(name, {{"kind", "start"},
                      {"job", job},
                      {"epoch", epoch},
                      {"name", job},
                      {"command", {CKPT_GPU_BIN, "--mib", "64", "--every-ms", "100"}},
                      {"env", Json::object()},
                      {"gpu_index", gpu},
                      {"gpu_uuid", GpuUuid(name, gpu)},
                      {"quota_bytes", 512 * kMiB},
                      {"ceiling_bytes", 0}});
  }

  // Waits until the job's reported stdout holds generation `gen` or later.
  bool WaitGen(const std::string& name, const std::string& job, int64_t epoch, int gen,
               double seconds = 60) {
    return WaitFor(seconds, [&] {
      const std::vector<int> gens = Generations(server_.Stdout(Node(name), job, epoch));
      return !gens.empty() && gens.back() >= gen;
    });
  }

  FakeServer server_;
  std::string work_;
  std::string store_;
  std::string prefix_;
  std::map<std::string, pid_t> agents_;
};

}  // namespace paladin::agent_test

#endif  // PALADIN_TESTS_AGENT_AGENT_FIXTURE_H_
