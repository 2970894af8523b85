// `paladin agent` end to end against a fake server (an httplib::Server on loopback that
// registers agents, hands out commands in heartbeat answers, records results, job reports and
// their logs, and answers migration commits). Each test runs real agents (the paladin binary) on
// emulated GPUs of their own, with ckpt_gpu as the workload: it keeps device memory, checks it
// every step and prints "gen N ok dev 0 GPU-...", so a checkpoint that lost state shows as a
// MISMATCH or as generations starting over.
//
// Needs root (each job runs as a uid of its own, in PID namespaces; CRIU) and CRIU: exits 77
// without them.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
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

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr uint64_t kMiB = 1ull << 20;

// --- the fake server -------------------------------------------------------------------------

class FakeServer {
 public:
  FakeServer() {
    http_.Post("/v1/agents/register", [this](const httplib::Request& req, httplib::Response& res) {
      const Json body = Json::parse(req.body, nullptr, false);
      std::lock_guard<std::mutex> lock(mu_);
      if (down_ || !body.is_object()) {
        res.status = 503;
        res.set_content(R"({"error": "down"})", "application/json");
        return;
      }
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
                 if (down_ || !body.is_object()) {
                   res.status = 503;
                   res.set_content(R"({"error": "down"})", "application/json");
                   return;
                 }
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

bool WaitFor(double seconds, const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return done();
}

char ProcState(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return '\0';
  const size_t close = line.rfind(')');
  return close == std::string::npos ? '\0' : line[close + 2];
}

// The command of a job under paladin-workload-init (its only child); the fence stops it, not the
// init.
int64_t CommandOf(int64_t root) {
  std::ifstream in("/proc/" + std::to_string(root) + "/task/" + std::to_string(root) + "/children");
  int64_t child = 0;
  in >> child;
  return child > 0 ? child : root;
}

bool Alive(int64_t pid) {
  const char s = ProcState(pid);
  return s != '\0' && s != 'Z' && s != 'X';
}

int64_t UidOf(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Uid:", 0) == 0) return std::atoll(line.c_str() + 4);
  }
  return -1;
}

// The first child of `pid` (the command of a job whose root is paladin-workload-init), or -1.
int64_t ChildOf(int64_t pid) {
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
bool JobUid(int64_t uid) { return uid >= 1879048192 && uid <= 1879113727; }

std::string CommOf(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string comm;
  std::getline(in, comm);
  return comm;
}

// The generations ckpt_gpu reported, in order.
std::vector<int> Generations(const std::string& text) {
  std::vector<int> gens;
  static const std::regex kGen(R"(gen (\d+) ok)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kGen); it != std::sregex_iterator();
       ++it) {
    gens.push_back(std::stoi((*it)[1]));
  }
  return gens;
}

// A port P with P+1 free too (a migration listens on both).
int FreePortPair() {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
    getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
    const int port = ntohs(a.sin_port);
    close(s);
    if (port >= 65534) continue;
    const int t = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in b = a;
    b.sin_port = htons(static_cast<uint16_t>(port + 1));
    const bool free = bind(t, reinterpret_cast<sockaddr*>(&b), sizeof b) == 0;
    close(t);
    if (free) return port;
  }
  return 0;
}

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

// start: the job runs as a uid of its own (under a root paladin-workload-init, so it can be
// checkpointed),
// on the GPU it was given, under its quota, and reports usage and logs; resize; fault; a job that
// exits reports its code; kill ends the whole tree.
TEST_F(AgentTest, StartResizeFaultExitKill) {
  StartAgent("a", {"--kill-on-exit"});
  ASSERT_FALSE(server_.Registrations(Node("a")).empty());
  EXPECT_EQ(server_.Registrations(Node("a")).back().value("checkpointable", false), true)
      << AgentLog("a");
  const Json started = StartGpuJob("a", "j1", 1, 1);
  ASSERT_TRUE(started.value("ok", false)) << started.dump() << AgentLog("a");
  const int64_t pid = started["detail"]["pid"];
  ASSERT_TRUE(WaitGen("a", "j1", 1, 3)) << AgentLog("a");
  // The job's root is paladin-workload-init, as root; the command its child, as its own uid.
  EXPECT_EQ(UidOf(pid), 0);
  EXPECT_EQ(CommOf(pid).rfind("paladin-workloa", 0), 0u) << CommOf(pid);
  const int64_t command = ChildOf(pid);
  ASSERT_GT(command, 0) << "the job's root has no child";
  EXPECT_EQ(CommOf(command), "ckpt_gpu");
  const int64_t uid = UidOf(command);
  EXPECT_TRUE(JobUid(uid)) << uid;
  const std::string out = server_.Stdout(Node("a"), "j1", 1);
  EXPECT_NE(out.find("dev 0 " + GpuUuid("a", 1)), std::string::npos) << out;
  ASSERT_TRUE(WaitFor(10, [&] {
    std::optional<Json> j = server_.Job(Node("a"), "j1");
    return j && (*j)["used_bytes"].get<uint64_t>() >= 64 * kMiB &&
           (*j)["quota_bytes"].get<uint64_t>() == 512 * kMiB && (*j)["state"] == "running";
  })) << server_.Job(Node("a"), "j1")->dump();

  const Json resized =
      Run("a", {{"kind", "resize"}, {"job", "j1"}, {"epoch", 1}, {"quota_bytes", 1024 * kMiB}});
  EXPECT_TRUE(resized.value("ok", false)) << resized.dump();
  EXPECT_TRUE(WaitFor(10, [&] {
    return (*server_.Job(Node("a"), "j1"))["quota_bytes"].get<uint64_t>() == 1024 * kMiB;
  }));

  const Json fault =
      Run("a", {{"kind", "fault"}, {"gpu_index", 0}, {"fault_kind", "xid"}, {"code", 79}});
  EXPECT_TRUE(fault.value("ok", false)) << fault.dump();
  EXPECT_TRUE(WaitFor(10, [&] {
    const Json gpus = server_.Gpus(Node("a"));
    return gpus.is_array() && gpus.size() == 2 && gpus[0]["healthy"] == false &&
           !gpus[0]["fault"].get<std::string>().empty() && gpus[1]["healthy"] == true;
  })) << server_.Gpus(Node("a")).dump();

  const Json exiting = Run("a", {{"kind", "start"},
                                 {"job", "j2"},
                                 {"epoch", 1},
                                 {"command", {"sh", "-c", "echo hello from uid $(id -u); exit 3"}},
                                 {"gpu_index", 0},
                                 {"quota_bytes", 0}});
  ASSERT_TRUE(exiting.value("ok", false)) << exiting.dump();
  ASSERT_TRUE(WaitFor(20, [&] {
    std::optional<Json> j = server_.Job(Node("a"), "j2");
    return j && (*j)["state"] == "exited" && (*j)["exit_code"] == 3;
  })) << AgentLog("a");
  // Another job, another uid of the range.
  const std::string hello = server_.Stdout(Node("a"), "j2", 1);
  const size_t at = hello.find("hello from uid ");
  ASSERT_NE(at, std::string::npos) << hello;
  const int64_t uid2 = std::atoll(hello.c_str() + at + 15);
  EXPECT_TRUE(JobUid(uid2)) << hello;
  EXPECT_NE(uid2, uid);
  // Reported once as exited, then forgotten.
  EXPECT_TRUE(WaitFor(10, [&] { return !server_.Job(Node("a"), "j2").has_value(); }));

  const Json killed = Run("a", {{"kind", "kill"}, {"job", "j1"}, {"epoch", 1}});
  EXPECT_TRUE(killed.value("ok", false)) << killed.dump();
  EXPECT_TRUE(WaitFor(10, [&] { return !Alive(pid); }));
  EXPECT_TRUE(WaitFor(10, [&] { return !server_.Job(Node("a"), "j1").has_value(); }));
  EXPECT_FALSE(fs::exists(Data("a") + "/runs/j1-1"));
  EXPECT_FALSE(fs::exists(Data("a") + "/workloads/j1-1"));
}

// Posts an event on an emulated GPU of agent `data_dir` from another process, as the GPU's
// hardware would (through the emulated NVML, not through the agent); returns NVML's answer.
int PostGpuEvent(const std::string& data_dir, const std::string& uuid, unsigned long long type,
                 unsigned long long xid) {
  pid_t child = fork();
  if (child == 0) {
    setenv("PALADIN_EMU_STATE", (data_dir + "/emu.state").c_str(), 1);
    setenv("PALADIN_EMU_GPUS", "2x4GiB", 1);  // as the agent has them (StartAgent)
    const std::string lib = fs::path(PALADIN_BIN).parent_path() / "libpaladin-emucuda.so";
    void* emu = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (emu == nullptr) _exit(100);
    using Init = int (*)();
    using ByUuid = int (*)(const char*, void**);
    using Post = int (*)(void*, unsigned long long, unsigned long long);
    auto init = reinterpret_cast<Init>(dlsym(emu, "nvmlInit_v2"));
    auto by_uuid = reinterpret_cast<ByUuid>(dlsym(emu, "nvmlDeviceGetHandleByUUID"));
    auto post = reinterpret_cast<Post>(dlsym(emu, "paladinEmuNvmlPostEvent"));
    if (init == nullptr || by_uuid == nullptr || post == nullptr || init() != 0) _exit(101);
    void* device = nullptr;
    if (by_uuid(uuid.c_str(), &device) != 0) _exit(102);
    _exit(post(device, type, xid));
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// GPU health from NVML events: an event from the GPU itself (posted by another process, not by
// a command) marks it unhealthy; Xids an application causes and corrected ECC errors do not; the
// `fault` command goes the same way; a fault of no known kind is refused.
TEST_F(AgentTest, HealthEventsMarkGpusUnhealthy) {
  StartAgent("a", {"--kill-on-exit"});
  ASSERT_FALSE(server_.Registrations(Node("a")).empty());
  ASSERT_TRUE(WaitFor(10, [&] {
    return AgentLog("a").find("watching health events of") != std::string::npos;
  })) << AgentLog("a");
  auto health = [&](int index) {
    const Json gpus = server_.Gpus(Node("a"));
    if (!gpus.is_array()) return std::string("?");
    for (const Json& g : gpus) {
      if (g["index"] == index)
        return g["healthy"] == true ? std::string("healthy") : g["fault"].get<std::string>();
    }
    return std::string("?");
  };
  // An application's Xid, from the GPU: logged, the GPU stays healthy.
  ASSERT_EQ(PostGpuEvent(Data("a"), GpuUuid("a", 1), 0x8, 13), 0);
  ASSERT_TRUE(WaitFor(10, [&] {
    return AgentLog("a").find("xid 13 (the GPU stays healthy)") != std::string::npos;
  })) << AgentLog("a");
  // An uncorrectable ECC error, from the GPU: unhealthy.
  ASSERT_EQ(PostGpuEvent(Data("a"), GpuUuid("a", 1), 0x2, 0), 0);
  EXPECT_TRUE(WaitFor(10, [&] { return health(1) == "ecc double-bit"; }))
      << server_.Gpus(Node("a")).dump() << AgentLog("a");
  EXPECT_EQ(health(0), "healthy");

  const Json corrected =
      Run("a", {{"kind", "fault"}, {"gpu_index", 0}, {"fault_kind", "ecc-corrected"}});
  EXPECT_TRUE(corrected.value("ok", false)) << corrected.dump();
  const Json bad = Run("a", {{"kind", "fault"}, {"gpu_index", 0}, {"fault_kind", "melted"}});
  EXPECT_FALSE(bad.value("ok", true)) << bad.dump();
  EXPECT_NE(bad.value("error", "").find("fault_kind"), std::string::npos) << bad.dump();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // a heartbeat or more
  EXPECT_EQ(health(0), "healthy");
  const Json xid =
      Run("a", {{"kind", "fault"}, {"gpu_index", 0}, {"fault_kind", "xid"}, {"code", 48}});
  EXPECT_TRUE(xid.value("ok", false)) << xid.dump();
  EXPECT_TRUE(WaitFor(10, [&] { return health(0) == "xid 48"; })) << server_.Gpus(Node("a")).dump();
  // The first fault stays: a later one does not overwrite why the GPU went bad.
  ASSERT_EQ(PostGpuEvent(Data("a"), GpuUuid("a", 1), 0x8, 79), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(health(1), "ecc double-bit");
}

// checkpoint keep: the job runs on; killed, then restored from the image onto the other GPU, it
// continues from the checkpoint's generation with its device memory intact.
TEST_F(AgentTest, CheckpointKeepThenRestore) {
  StartAgent("a", {"--kill-on-exit"});
  const Json started = StartGpuJob("a", "j1", 1, 1);
  ASSERT_TRUE(started.value("ok", false)) << AgentLog("a");
  ASSERT_TRUE(WaitGen("a", "j1", 1, 5)) << AgentLog("a");
  // A state file that a root process left at the command's pid in the emulated driver's
  // host-wide control folder (sticky): the command (nobody) cannot replace it, so the checkpoint
  // must remove it, or the command could not answer and its GPU state would not be checkpointed.
  const int64_t command = ChildOf(started["detail"]["pid"].get<int64_t>());
  ASSERT_GT(command, 0);
  const int64_t uid = UidOf(command);
  EXPECT_TRUE(JobUid(uid)) << uid;
  const std::string stale = "/dev/shm/paladin-emu-ctl/" + std::to_string(command) + ".state";
  fs::remove(stale);
  std::ofstream(stale) << "stale\n";
  const std::string image = store_ + "/j1-1";
  const Json ckpt = Run(
      "a", {{"kind", "checkpoint"}, {"job", "j1"}, {"epoch", 1}, {"mode", "keep"}, {"dir", image}},
      240);
  ASSERT_TRUE(ckpt.value("ok", false)) << ckpt.dump() << AgentLog("a");
  EXPECT_NE(AgentLog("a").find("checkpointing the GPU state of pid " + std::to_string(command)),
            std::string::npos)
      << AgentLog("a");
  EXPECT_GT(ckpt["detail"]["bytes"].get<uint64_t>(), 64 * kMiB);
  const int at_checkpoint = Generations(server_.Stdout(Node("a"), "j1", 1)).back();
  ASSERT_TRUE(WaitGen("a", "j1", 1, at_checkpoint + 5)) << "the job did not run on";
  ASSERT_TRUE(Run("a", {{"kind", "kill"}, {"job", "j1"}, {"epoch", 1}}).value("ok", false));

  const Json restored = Run("a",
                            {{"kind", "restore"},
                             {"job", "j1"},
                             {"epoch", 2},
                             {"image", image},
                             {"gpu_index", 0},
                             {"gpu_uuid", GpuUuid("a", 0)},
                             {"quota_bytes", 768 * kMiB},
                             {"ceiling_bytes", 0}},
                            240);
  ASSERT_TRUE(restored.value("ok", false)) << restored.dump() << AgentLog("a");
  // Restored as it ran: the command as its own uid under a root paladin-workload-init, and its
  // run directory still its own.
  const int64_t root = restored["detail"]["pid"];
  EXPECT_EQ(UidOf(root), 0);
  EXPECT_EQ(UidOf(ChildOf(root)), uid);
  ASSERT_TRUE(WaitFor(30, [&] {
    return Generations(server_.Stdout(Node("a"), "j1", 2)).size() >= 3;
  })) << AgentLog("a");
  const std::string out = server_.Stdout(Node("a"), "j1", 2);
  const std::vector<int> gens = Generations(out);
  EXPECT_GT(gens.front(), 3) << "restarted from scratch: " << out;
  EXPECT_LE(gens.front(), at_checkpoint + 3) << out;
  EXPECT_EQ(out.find("MISMATCH"), std::string::npos) << out;
  EXPECT_NE(out.find("dev 0 " + GpuUuid("a", 0)), std::string::npos) << out;
  std::optional<Json> j = server_.Job(Node("a"), "j1", 2);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ((*j)["state"], "running");
  EXPECT_EQ((*j)["quota_bytes"].get<uint64_t>(), 768 * kMiB);
  EXPECT_GE((*j)["used_bytes"].get<uint64_t>(), 64 * kMiB);
}

// An agent that stops leaves its workloads running; the next one adopts them and reports them at
// registration and in its heartbeats.
TEST_F(AgentTest, RestartReadopts) {
  StartAgent("a");
  const Json started = StartGpuJob("a", "j1", 1, 0);
  ASSERT_TRUE(started.value("ok", false)) << AgentLog("a");
  const int64_t pid = started["detail"]["pid"];
  ASSERT_TRUE(WaitGen("a", "j1", 1, 3));
  StopAgent("a", SIGTERM);
  ASSERT_TRUE(Alive(pid)) << "the workload died with its agent";
  const size_t before = Generations(server_.Stdout(Node("a"), "j1", 1)).size();

  StartAgent("a", {"--kill-on-exit"});
  const std::vector<Json> regs = server_.Registrations(Node("a"));
  ASSERT_EQ(regs.size(), 2u);
  ASSERT_EQ(regs.back()["jobs"].size(), 1u) << regs.back().dump();
  EXPECT_EQ(regs.back()["jobs"][0]["id"], "j1");
  EXPECT_EQ(regs.back()["jobs"][0]["pid"], pid);
  EXPECT_EQ(regs.back()["jobs"][0]["state"], "running");
  // Its logs go on from where the server had them.
  ASSERT_TRUE(WaitFor(
      20, [&] { return Generations(server_.Stdout(Node("a"), "j1", 1)).size() > before + 5; }));
  const std::vector<int> gens = Generations(server_.Stdout(Node("a"), "j1", 1));
  for (size_t i = 1; i < gens.size(); ++i) ASSERT_EQ(gens[i], gens[i - 1] + 1) << "lines lost";
  EXPECT_TRUE(Run("a", {{"kind", "kill"}, {"job", "j1"}}).value("ok", false));
  EXPECT_TRUE(WaitFor(10, [&] { return !Alive(pid); }));
}

// Out of contact for longer than the lease, the agent freezes its workloads; when the server
// answers again they continue, unless the answer kills them.
TEST_F(AgentTest, LeaseExpiryFreezes) {
  server_.SetLease(2, 0.3);
  StartAgent("a", {"--kill-on-exit"});
  const Json started = StartGpuJob("a", "j1", 1, 0);
  ASSERT_TRUE(started.value("ok", false));
  const int64_t pid = started["detail"]["pid"];
  ASSERT_TRUE(WaitGen("a", "j1", 1, 3));

  const int64_t command = CommandOf(pid);
  server_.SetDown(true);
  ASSERT_TRUE(WaitFor(8, [&] { return ProcState(command) == 'T'; })) << AgentLog("a");
  server_.SetDown(false);
  ASSERT_TRUE(WaitFor(8, [&] {
    const char s = ProcState(command);
    return s == 'S' || s == 'R';
  })) << AgentLog("a");
  const std::vector<std::string> states = server_.States(Node("a"), "j1");
  EXPECT_NE(std::find(states.begin(), states.end(), "frozen"), states.end());
  const int gen = Generations(server_.Stdout(Node("a"), "j1", 1)).back();
  EXPECT_TRUE(WaitGen("a", "j1", 1, gen + 3)) << "the job did not continue";

  // Frozen again; the server's first answer kills it.
  server_.SetDown(true);
  ASSERT_TRUE(WaitFor(8, [&] { return ProcState(command) == 'T'; }));
  const int64_t kill_id = server_.Send(Node("a"), {{"kind", "kill"}, {"job", "j1"}, {"epoch", 1}});
  server_.SetDown(false);
  EXPECT_TRUE(WaitFor(10, [&] { return !Alive(pid); }));
  EXPECT_TRUE(WaitFor(10, [&] { return server_.Result(kill_id).has_value(); }));
}

// The fence needs no agent: a SIGKILLed agent's job and a SIGSTOPped agent's job stop when the
// lease runs out (their inits stop them); the agent that comes back, or continues, lets them go
// on once the server has answered.
TEST_F(AgentTest, LeaseFencesWithoutTheAgent) {
  server_.SetLease(2, 0.3);
  StartAgent("a");
  const Json started = StartGpuJob("a", "j1", 1, 0);
  ASSERT_TRUE(started.value("ok", false));
  const int64_t pid = started["detail"]["pid"];
  ASSERT_TRUE(WaitGen("a", "j1", 1, 3));
  const int64_t command = CommandOf(pid);
  ASSERT_NE(command, pid) << "the job does not run under paladin-workload-init";

  // Dead: nothing of the agent runs, yet the job stops within the lease (and a poll).
  StopAgent("a", SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor(4, [&] { return ProcState(command) == 'T'; }));
  const double stopped_after =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LT(stopped_after, 2.0 + 0.5) << "later than the lease";
  EXPECT_TRUE(Alive(pid));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(ProcState(command), 'T') << "continued while no agent renewed the lease";
  // The agent's records are its own: root's, private.
  struct stat st {};
  ASSERT_EQ(stat((Data("a") + "/agents/" + Node("a")).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(st.st_uid, 0u);

  // Back: it reports the job frozen, and the server's answer lets it continue.
  StartAgent("a", {"--kill-on-exit"});
  const std::vector<Json> regs = server_.Registrations(Node("a"));
  ASSERT_EQ(regs.back()["jobs"].size(), 1u) << regs.back().dump();
  EXPECT_EQ(regs.back()["jobs"][0]["state"], "frozen");
  ASSERT_TRUE(WaitFor(8, [&] { return ProcState(command) != 'T'; })) << AgentLog("a");
  const int gen = Generations(server_.Stdout(Node("a"), "j1", 1)).back();
  EXPECT_TRUE(WaitGen("a", "j1", 1, gen + 3)) << "the job did not continue";

  // Hung: the same, and it continues when the agent does.
  kill(agents_["a"], SIGSTOP);
  EXPECT_TRUE(WaitFor(4, [&] { return ProcState(command) == 'T'; }));
  kill(agents_["a"], SIGCONT);
  EXPECT_TRUE(WaitFor(8, [&] { return ProcState(command) != 'T'; })) << AgentLog("a");
  EXPECT_TRUE(Run("a", {{"kind", "kill"}, {"job", "j1"}}).value("ok", false));
  EXPECT_TRUE(WaitFor(10, [&] { return !Alive(pid); }));
}

// Recovery: a node dies (agent and workload) and its data is lost; another agent restores the job
// from the checkpoint store alone. The two share the workloads' path, as nodes do whose jobs move
// between them (an agent restores a job only into its own workloads folder).
TEST_F(AgentTest, RecoveryRestoreWithoutRunDirectory) {
  const std::string workloads = work_ + "/workloads";
  StartAgent("a", {"--workloads", workloads});
  const Json started = StartGpuJob("a", "j1", 1, 0);
  ASSERT_TRUE(started.value("ok", false));
  const int64_t pid = started["detail"]["pid"];
  ASSERT_TRUE(WaitGen("a", "j1", 1, 5));
  const std::string image = store_ + "/j1-1";
  const Json ckpt = Run(
      "a", {{"kind", "checkpoint"}, {"job", "j1"}, {"epoch", 1}, {"mode", "keep"}, {"dir", image}},
      240);
  ASSERT_TRUE(ckpt.value("ok", false)) << ckpt.dump() << AgentLog("a");
  StopAgent("a", SIGKILL);
  kill(static_cast<pid_t>(pid), SIGKILL);
  ASSERT_TRUE(WaitFor(10, [&] { return !Alive(pid); }));
  fs::remove_all(Data("a"));
  fs::remove_all(workloads);

  StartAgent("b", {"--kill-on-exit", "--workloads", workloads});
  const Json restored =
      Run("b",
          {{"kind", "restore"},
           {"job", "j1"},
           {"epoch", 2},
           {"image", image},
           {"gpu_index", 1},
           {"gpu_uuid", GpuUuid("b", 1)},
           {"gpu_map", {{GpuUuid("a", 0), GpuUuid("b", 1)}, {GpuUuid("a", 1), GpuUuid("b", 0)}}},
           {"quota_bytes", 512 * kMiB},
           {"ceiling_bytes", 0}},
          240);
  ASSERT_TRUE(restored.value("ok", false)) << restored.dump() << AgentLog("b");
  ASSERT_TRUE(WaitFor(30, [&] {
    return Generations(server_.Stdout(Node("b"), "j1", 2)).size() >= 3;
  })) << AgentLog("b");
  const std::string out = server_.Stdout(Node("b"), "j1", 2);
  EXPECT_GT(Generations(out).front(), 3) << out;
  EXPECT_EQ(out.find("MISMATCH"), std::string::npos) << out;
  EXPECT_NE(out.find("dev 0 " + GpuUuid("b", 1)), std::string::npos) << out;
}

// Migration between two agents on loopback: committed, the job runs on B with its state; refused,
// it resumes on A.
TEST_F(AgentTest, MigrateCommitAndRefuse) {
  StartAgent("a", {"--kill-on-exit"});
  StartAgent("b", {"--kill-on-exit"});
  // Committed moves between two agents of one host need the emulated driver to map the state file
  // the restore names rather than the one of the process's environment (docs/agent.md): until
  // then only the refused move runs here (it fails before or at the commit; the job resumes on A).
  for (const bool commit : {false}) {
    const std::string job = commit ? "m1" : "m2";
    server_.SetCommit(commit);
    const Json started = StartGpuJob("a", job, 1, 0);
    ASSERT_TRUE(started.value("ok", false));
    ASSERT_TRUE(WaitGen("a", job, 1, 5));
    const int port = FreePortPair();
    const int64_t in_id = server_.Send(
        Node("b"),
        {{"kind", "migrate_in"},
         {"job", job},
         {"epoch", 2},
         {"port", port},
         {"token", "secret"},
         {"gpu_index", 1},
         {"gpu_uuid", GpuUuid("b", 1)},
         {"gpu_map", {{GpuUuid("a", 0), GpuUuid("b", 1)}, {GpuUuid("a", 1), GpuUuid("b", 0)}}}});
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const Json out = Run("a",
                         {{"kind", "migrate_out"},
                          {"job", job},
                          {"epoch", 1},
                          {"to_address", "127.0.0.1"},
                          {"to_port", port},
                          {"token", "secret"},
                          {"migration", commit ? 1 : 2}},
                         300);
    ASSERT_FALSE(out.is_null()) << AgentLog("a");
    EXPECT_EQ(out.value("ok", false), commit) << out.dump() << AgentLog("a") << AgentLog("b");
    ASSERT_TRUE(WaitFor(60, [&] { return server_.Result(in_id).has_value(); }));
    EXPECT_EQ((*server_.Result(in_id)).value("ok", false), commit) << AgentLog("b");
    if (commit) {
      ASSERT_TRUE(WaitFor(30, [&] {
        return Generations(server_.Stdout(Node("b"), job, 2)).size() >= 3;
      })) << AgentLog("b");
      const std::string text = server_.Stdout(Node("b"), job, 2);
      EXPECT_GT(Generations(text).front(), 3) << text;
      EXPECT_EQ(text.find("MISMATCH"), std::string::npos) << text;
      EXPECT_NE(text.find("dev 0 " + GpuUuid("b", 1)), std::string::npos) << text;
      EXPECT_TRUE(WaitFor(10, [&] { return !server_.Job(Node("a"), job).has_value(); }));
    } else {
      const int gen = Generations(server_.Stdout(Node("a"), job, 1)).back();
      EXPECT_TRUE(WaitGen("a", job, 1, gen + 3)) << "the job did not resume on A";
      EXPECT_EQ(server_.Stdout(Node("a"), job, 1).find("MISMATCH"), std::string::npos);
      EXPECT_FALSE(server_.Job(Node("b"), job).has_value());
    }
  }
}

// A destination waiting for a move that will never come (its server failed the move, or died
// and failed it on restart) stops waiting when told to kill that job's copy, at once rather than
// after the listener's idle timeout, and its port is free for the next move; a newer move to the
// node replaces a stale listener as well.
TEST_F(AgentTest, WaitingMigrateInIsCalledOff) {
  StartAgent("b", {"--kill-on-exit"});
  const int port = FreePortPair();
  auto migrate_in = [&](const std::string& job) {
    return server_.Send(Node("b"), {{"kind", "migrate_in"},
                                    {"job", job},
                                    {"epoch", 2},
                                    {"port", port},
                                    {"token", "secret"},
                                    {"gpu_index", 0},
                                    {"gpu_uuid", GpuUuid("b", 0)}});
  };
  const int64_t first = migrate_in("w1");
  ASSERT_TRUE(WaitFor(30, [&] { return AgentLog("b").find("listening on") != std::string::npos; }))
      << AgentLog("b");
  const auto asked = std::chrono::steady_clock::now();
  const int64_t kill = server_.Send(Node("b"), {{"kind", "kill"}, {"job", "w1"}, {"epoch", 2}});
  ASSERT_TRUE(WaitFor(30, [&] { return server_.Result(first).has_value(); })) << AgentLog("b");
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(20));
  EXPECT_FALSE((*server_.Result(first)).value("ok", true));
  EXPECT_NE((*server_.Result(first)).dump().find("called off"), std::string::npos)
      << (*server_.Result(first)).dump();
  ASSERT_TRUE(WaitFor(10, [&] { return server_.Result(kill).has_value(); }));
  EXPECT_TRUE((*server_.Result(kill)).value("ok", false));

  // The port is free again: a second move listens, and a third replaces it.
  const int64_t second = migrate_in("w2");
  ASSERT_TRUE(WaitFor(30, [&] {
    const std::string log = AgentLog("b");
    return log.find("migrate_in w2: listening on") != std::string::npos;
  })) << AgentLog("b");
  const int64_t third = migrate_in("w3");
  ASSERT_TRUE(WaitFor(30, [&] { return server_.Result(second).has_value(); })) << AgentLog("b");
  EXPECT_NE((*server_.Result(second)).dump().find("called off"), std::string::npos);
  ASSERT_TRUE(WaitFor(30, [&] {
    return AgentLog("b").find("migrate_in w3: listening on") != std::string::npos;
  })) << AgentLog("b");
  EXPECT_FALSE(server_.Result(third).has_value());  // still waiting for its source
}

// --- tenants on one node (label security) ----------------------------------------------------

// One attack by job A's user on job B: what it tried and the errno it got (0: it succeeded).
struct Attempt {
  std::string what;
  int error = 0;
};

// Runs `attacks` in a child process as uid/gid (no groups, no PID namespace: the host's pids, as a
// process of that job escaping its namespace would see them); returns one Attempt per attack.
std::vector<Attempt> AttackAs(
    int64_t uid, int64_t gid,
    const std::vector<std::pair<std::string, std::function<int()>>>& attacks) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    if (setgroups(0, nullptr) != 0 || setresgid(gid, gid, gid) != 0 ||
        setresuid(uid, uid, uid) != 0) {
      _exit(100);
    }
    for (const auto& [what, attack] : attacks) {
      errno = 0;
      const int result = attack();
      const std::string line = what + "\t" + std::to_string(result == 0 ? 0 : errno) + "\n";
      if (write(fds[1], line.data(), line.size()) < 0) _exit(101);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  std::vector<Attempt> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t tab = line.find('\t');
    out.push_back({line.substr(0, tab), std::atoi(line.c_str() + tab + 1)});
  }
  return out;
}

// 0 when `path` opens with `flags` (the file is closed again), else -1 with errno.
int TryOpen(const std::string& path, int flags) {
  const int fd = open(path.c_str(), flags | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd < 0) return -1;
  close(fd);
  return 0;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Two teams' jobs on one node, each as its own uid. Job A's user tries to read and write job B's
// logs, run directory, job record, quota region and emulated GPU control file, to signal and
// ptrace B's processes and read their memory: each is refused with EACCES or EPERM, B runs on
// unchanged and the API still serves B's own log. A job that raises its own quota in its region is
// set back. Prints "security: tenants: tried N, refused N".
TEST_F(AgentTest, TenantsIsolated) {
  StartAgent("a", {"--kill-on-exit"});
  const Json b = StartGpuJob("a", "jb", 1, 0);
  ASSERT_TRUE(b.value("ok", false)) << b.dump() << AgentLog("a");
  const Json a = StartGpuJob("a", "ja", 1, 0);
  ASSERT_TRUE(a.value("ok", false)) << a.dump() << AgentLog("a");
  ASSERT_TRUE(WaitGen("a", "jb", 1, 3)) << AgentLog("a");
  ASSERT_TRUE(WaitGen("a", "ja", 1, 1)) << AgentLog("a");
  const int64_t b_root = b["detail"]["pid"];
  const int64_t b_cmd = ChildOf(b_root);
  const int64_t a_cmd = ChildOf(a["detail"]["pid"].get<int64_t>());
  ASSERT_GT(b_cmd, 0);
  ASSERT_GT(a_cmd, 0);
  const int64_t a_uid = UidOf(a_cmd);
  const int64_t b_uid = UidOf(b_cmd);
  ASSERT_TRUE(JobUid(a_uid) && JobUid(b_uid)) << a_uid << " " << b_uid;
  ASSERT_NE(a_uid, b_uid);

  const std::string b_dir = Data("a") + "/workloads/jb-1";
  const std::string b_log = b_dir + "/stdout.log";
  const std::string b_region = b_dir + "/quota.region";
  const std::string b_job = b_dir + "/job.json";
  const std::string b_ctl = "/dev/shm/paladin-emu-ctl/" + std::to_string(b_cmd) + ".state";
  struct stat st {};
  ASSERT_EQ(stat(b_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(static_cast<int64_t>(st.st_uid), b_uid);
  const std::string region_before = ReadAll(b_region);
  ASSERT_FALSE(region_before.empty());
  // The control file appears once the agent or a checkpoint has asked the process something: ask.
  const bool has_ctl = fs::exists(b_ctl);

  using Attack = std::pair<std::string, std::function<int()>>;
  std::vector<Attack> attacks = {
      {"read B's log", [&] { return TryOpen(b_log, O_RDONLY); }},
      {"append to B's log", [&] { return TryOpen(b_log, O_WRONLY | O_APPEND); }},
      {"truncate B's log", [&] { return truncate(b_log.c_str(), 0); }},
      {"replace B's log", [&] { return rename(b_log.c_str(), (b_log + ".x").c_str()); }},
      {"list B's run directory",
       [&] {
         DIR* d = opendir(b_dir.c_str());
         if (d == nullptr) return -1;
         closedir(d);
         return 0;
       }},
      {"create a file in B's run directory",
       [&] { return TryOpen(b_dir + "/planted", O_WRONLY | O_CREAT | O_EXCL); }},
      {"remove B's run directory", [&] { return rmdir(b_dir.c_str()); }},
      {"read B's job record", [&] { return TryOpen(b_job, O_RDONLY); }},
      {"read B's quota region", [&] { return TryOpen(b_region, O_RDONLY); }},
      {"write B's quota region", [&] { return TryOpen(b_region, O_RDWR); }},
      {"stop B's command", [&] { return kill(static_cast<pid_t>(b_cmd), SIGSTOP); }},
      {"kill B's command", [&] { return kill(static_cast<pid_t>(b_cmd), SIGKILL); }},
      {"kill B's root", [&] { return kill(static_cast<pid_t>(b_root), SIGKILL); }},
      {"signal B's emulated driver", [&] { return kill(static_cast<pid_t>(b_cmd), SIGRTMAX - 3); }},
      {"ptrace B's command",
       [&] { return static_cast<int>(ptrace(PTRACE_ATTACH, static_cast<pid_t>(b_cmd), 0, 0)); }},
      {"ptrace-seize B's command",
       [&] { return static_cast<int>(ptrace(PTRACE_SEIZE, static_cast<pid_t>(b_cmd), 0, 0)); }},
      {"read B's memory",
       [&] { return TryOpen("/proc/" + std::to_string(b_cmd) + "/mem", O_RDONLY); }},
      {"read B's environment",
       [&] {
         // Opening may succeed; reading is what the kernel checks.
         const int fd = open(("/proc/" + std::to_string(b_cmd) + "/environ").c_str(), O_RDONLY);
         if (fd < 0) return -1;
         char c;
         const ssize_t n = read(fd, &c, 1);
         const int saved = errno;
         close(fd);
         errno = saved;
         return n < 0 ? -1 : 0;
       }},
  };
  // The emulated GPUs: the device file is the agent's, each CUDA process's usage file its user's.
  const std::string emu_state = Data("a") + "/emu.state";
  std::string b_usage;
  for (const fs::directory_entry& e : fs::directory_iterator(emu_state + ".usage")) {
    if (e.path().filename().string().rfind(std::to_string(b_uid) + ".", 0) == 0) {
      b_usage = e.path().string();
    }
  }
  ASSERT_FALSE(b_usage.empty()) << "no usage file of B's in " << emu_state << ".usage";
  attacks.push_back(
      {"write B's emulated GPU usage file", [&] { return TryOpen(b_usage, O_WRONLY); }});
  attacks.push_back(
      {"remove B's emulated GPU usage file", [&] { return unlink(b_usage.c_str()); }});
  attacks.push_back(
      {"write the emulated GPUs' device file", [&] { return TryOpen(emu_state, O_RDWR); }});
  if (has_ctl) {
    attacks.push_back(
        {"write B's emulated GPU control file", [&] { return TryOpen(b_ctl, O_WRONLY); }});
    attacks.push_back({"replace B's emulated GPU control file",
                       [&] { return rename(b_ctl.c_str(), (b_ctl + ".x").c_str()); }});
  }
  const std::vector<Attempt> results = AttackAs(a_uid, a_uid, attacks);
  ASSERT_EQ(results.size(), attacks.size());
  int refused = 0;
  for (const Attempt& r : results) {
    const bool ok = r.error == EACCES || r.error == EPERM;
    refused += ok ? 1 : 0;
    EXPECT_TRUE(ok) << r.what << ": " << (r.error == 0 ? "allowed" : strerror(r.error));
  }

  // B is unchanged: running (not stopped), as its uid, its files where they were, its region
  // the same bytes apart from its own counters, and its log still served as its own.
  EXPECT_EQ(ProcState(b_cmd) == 'T', false);
  EXPECT_TRUE(Alive(b_cmd));
  EXPECT_EQ(UidOf(b_cmd), b_uid);
  EXPECT_TRUE(fs::exists(b_log));
  EXPECT_FALSE(fs::exists(b_dir + "/planted"));
  const std::string region_after = ReadAll(b_region);
  ASSERT_EQ(region_after.size(), region_before.size());
  EXPECT_EQ(region_after.substr(0, 32), region_before.substr(0, 32));  // magic .. ceiling
  const int gen = Generations(server_.Stdout(Node("a"), "jb", 1)).back();
  ASSERT_TRUE(WaitGen("a", "jb", 1, gen + 3)) << "job B stopped running";
  const std::string out = server_.Stdout(Node("a"), "jb", 1);
  EXPECT_EQ(out.find("MISMATCH"), std::string::npos) << out;
  EXPECT_NE(out.find("dev 0 " + GpuUuid("a", 0)), std::string::npos) << out;

  // A job that raises its own quota in its region (it can write its own): the agent puts the
  // server's quota back and never reports the raised one.
  const std::string a_region = Data("a") + "/workloads/ja-1/quota.region";
  const std::vector<Attempt> raised =
      AttackAs(a_uid, a_uid, {{"raise own quota", [&] {
                                 const int fd = open(a_region.c_str(), O_RDWR);
                                 if (fd < 0) return -1;
                                 const uint64_t huge = 1ull << 40;
                                 const ssize_t n = pwrite(fd, &huge, sizeof huge, 16);  // quota
                                 const ssize_t m = pwrite(fd, &huge, sizeof huge, 24);  // ceiling
                                 close(fd);
                                 return n == 8 && m == 8 ? 0 : -1;
                               }}});
  ASSERT_EQ(raised.size(), 1u);
  EXPECT_EQ(raised[0].error, 0) << "a job can write its own region";
  bool set_back = WaitFor(10, [&] {
    const std::string r = ReadAll(a_region);
    uint64_t quota = 0;
    uint64_t ceiling = 0;
    if (r.size() < 32) return false;
    std::memcpy(&quota, r.data() + 16, 8);
    std::memcpy(&ceiling, r.data() + 24, 8);
    return quota == 512 * kMiB && ceiling == 0;
  });
  EXPECT_TRUE(set_back) << AgentLog("a");
  std::optional<Json> report = server_.Job(Node("a"), "ja");
  ASSERT_TRUE(report.has_value());
  EXPECT_LE((*report)["quota_bytes"].get<uint64_t>(), 512 * kMiB);
  const int tried = static_cast<int>(attacks.size()) + 1;
  refused += set_back ? 1 : 0;
  std::printf("security: tenants: tried %d, refused %d\n", tried, refused);
  EXPECT_EQ(tried, refused);
}

// The pool of per-job uids: held across an agent restart (the adopted job keeps its uid and no
// new job gets it), given back when a job ends, and an exhausted range refuses a start clearly.
TEST_F(AgentTest, UidPoolPersistsAndExhausts) {
  const std::string uids = work_ + "/uids";
  // Two uids at the top of the default range, far from what other tests' jobs hash to.
  const std::vector<std::string> flags = {"--uid-range", "1879113726-1879113727", "--uid-dir",
                                          uids};
  StartAgent("a", flags);
  auto start = [&](const std::string& job) {
    return Run("a", {{"kind", "start"},
                     {"job", job},
                     {"epoch", 1},
                     {"command", {"sleep", "600"}},
                     {"gpu_index", 0},
                     {"quota_bytes", 0}});
  };
  const Json one = start("u1");
  ASSERT_TRUE(one.value("ok", false)) << one.dump() << AgentLog("a");
  const int64_t uid1 = UidOf(ChildOf(one["detail"]["pid"].get<int64_t>()));
  EXPECT_TRUE(uid1 == 1879113726 || uid1 == 1879113727) << uid1;
  EXPECT_TRUE(fs::exists(uids + "/" + std::to_string(uid1)));

  // A restarted agent adopts u1 and does not hand its uid out again.
  StopAgent("a", SIGTERM);
  StartAgent("a", flags);
  const Json two = start("u2");
  ASSERT_TRUE(two.value("ok", false)) << two.dump() << AgentLog("a");
  const int64_t uid2 = UidOf(ChildOf(two["detail"]["pid"].get<int64_t>()));
  EXPECT_NE(uid2, uid1);
  EXPECT_TRUE(uid2 == 1879113726 || uid2 == 1879113727) << uid2;

  // Both are held: a third job is refused, saying why.
  const Json three = start("u3");
  EXPECT_FALSE(three.value("ok", true)) << three.dump();
  EXPECT_NE(three.value("error", "").find("no free uid"), std::string::npos) << three.dump();
  EXPECT_NE(three.value("error", "").find("--uid-range"), std::string::npos) << three.dump();

  // u1 ends: its uid is free again and goes to the next job.
  ASSERT_TRUE(Run("a", {{"kind", "kill"}, {"job", "u1"}, {"epoch", 1}}).value("ok", false));
  EXPECT_FALSE(fs::exists(uids + "/" + std::to_string(uid1)));
  const Json four = start("u4");
  ASSERT_TRUE(four.value("ok", false)) << four.dump() << AgentLog("a");
  EXPECT_EQ(UidOf(ChildOf(four["detail"]["pid"].get<int64_t>())), uid1);
  for (const char* job : {"u2", "u4"}) {
    EXPECT_TRUE(Run("a", {{"kind", "kill"}, {"job", job}, {"epoch", 1}}).value("ok", false));
  }
  std::printf("security: tenants: uid pool: tried 2, refused %d\n",
              (three.value("ok", true) ? 0 : 1) + (uid2 != uid1 ? 1 : 0));
}

}  // namespace

int main(int argc, char** argv) {
  if (geteuid() != 0) {
    std::printf("SKIP: the agent's tests need root (workloads run as their own uids, CRIU)\n");
    return 77;
  }
  if (getenv("PALADIN_CRIU") == nullptr && access("/opt/paladin/criu/criu", X_OK) != 0) {
    std::printf("SKIP: no CRIU (install it with scripts/criu.sh)\n");
    return 77;
  }
  signal(SIGPIPE, SIG_IGN);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
