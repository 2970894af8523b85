// The control plane at scale: `paladin server` with 50 simulated agents heartbeating on loopback
// and 1,000 submitted jobs. Reports the API's latency per endpoint (p50, p99) beside the
// latency of GET /healthz measured in the same run (the baseline: what the HTTP stack alone
// costs on this machine), the scheduling loop's decision latency from the server's /metrics,
// and how long jobs waited to be placed.
//
//   fleet_scale --paladin build/release/paladin [--agents 50] [--jobs 1000] [--gpus 8]
//   (FLEET_SCALE_KEEP=1 keeps the server's data directory and log)
//
// The agents are threads that speak the agent protocol (docs/formats/api.md): they register,
// heartbeat every second, and report every `start` command they get as a running job.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "paladin/api/client.h"

namespace {
namespace fs = std::filesystem;
using paladin::api::Client;
using paladin::api::Json;
using Clock = std::chrono::steady_clock;

struct Latencies {
  std::mutex mu;
  std::map<std::string, std::vector<double>> ms;
  void Add(const std::string& what, double value) {
    std::lock_guard<std::mutex> lock(mu);
    ms[what].push_back(value);
  }
};

double Ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

struct Args {
  std::string paladin = "build/release/paladin";
  int agents = 50;
  int jobs = 1000;
  int gpus = 8;
};

void SimulatedAgent(const paladin::api::Endpoint& server, const std::string& token, int index,
                    int gpus, const std::atomic<bool>& stop, Latencies* lat) {
  const Client client(server, token, 30);
  const std::string name = "sim-" + std::to_string(index);
  Json gpu_list = Json::array();
  for (int g = 0; g < gpus; ++g) {
    char uuid[64];
    std::snprintf(uuid, sizeof uuid, "GPU-5e%06d-0000-4000-8000-%012d", index, g);
    gpu_list.push_back({{"index", g},
                        {"uuid", uuid},
                        {"model", "H200"},
                        {"memory_bytes", int64_t{80} << 30},
                        {"emulated", true},
                        {"healthy", true}});
  }
  Json reg = {{"name", name},
              {"address", "127.0.0.1"},
              {"migrate_port", 30000 + 2 * index},
              {"gpus", gpu_list},
              {"jobs", Json::array()}};
  while (!stop && !client.Post("/v1/agents/register", reg).ok()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::map<std::string, Json> running;  // job id -> report
  Json results = Json::array();
  while (!stop) {
    Json jobs = Json::array();
    for (const auto& [id, report] : running) jobs.push_back(report);
    Json beat = {{"gpus", Json::array()}, {"jobs", jobs}, {"results", results}};
    const auto t0 = Clock::now();
    paladin::StatusOr<Json> answer = client.Post("/v1/agents/" + name + "/heartbeat", beat);
    lat->Add("POST heartbeat", Ms(t0));
    results = Json::array();
    if (answer.ok() && answer->contains("commands")) {
      for (const Json& c : (*answer)["commands"]) {
        const std::string kind = c.value("kind", "");
        const std::string job = c.value("job", "");
        if (kind == "start" || kind == "restore") {
          running[job] = {{"id", job},
                          {"epoch", c.value("epoch", 0)},
                          {"state", "running"},
                          {"pid", 1000 + static_cast<int>(running.size())},
                          {"used_bytes", c.value("quota_bytes", int64_t{0}) / 2},
                          {"quota_bytes", c.value("quota_bytes", int64_t{0})},
                          {"quota_grows", 0},
                          {"refusals", 0}};
        } else if (kind == "kill") {
          running.erase(job);
        }
        results.push_back({{"command", c.value("id", 0)}, {"ok", true}, {"detail", {{"pid", 1}}}});
      }
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

int Run(const Args& args) {
  const std::string dir = "/tmp/paladin-bench-fleet-" + std::to_string(getpid());
  fs::create_directories(dir);
  const pid_t server = fork();
  if (server == 0) {
    const std::string log = dir + "/server.log";
    freopen(log.c_str(), "w", stderr);
    execl(args.paladin.c_str(), args.paladin.c_str(), "server", "--listen", "127.0.0.1:0", "--data",
          dir.c_str(), "--lease", "30", "--heartbeat", "1", nullptr);
    _exit(127);
  }
  for (int i = 0; i < 300 && !fs::exists(dir + "/server.url"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  paladin::StatusOr<paladin::api::Endpoint> endpoint =
      paladin::api::ParseUrl(ReadFile(dir + "/server.url"));
  if (!endpoint.ok()) {
    std::fprintf(stderr, "fleet_scale: the server did not start; see %s/server.log\n", dir.c_str());
    kill(server, SIGKILL);
    return 1;
  }
  const std::string admin_token = ReadFile(dir + "/admin.token");
  const std::string agent_token = ReadFile(dir + "/agent.token");
  const Client admin(*endpoint, admin_token, 30);
  Latencies lat;
  std::atomic<bool> stop{false};
  std::vector<std::thread> agents;
  for (int i = 0; i < args.agents; ++i) {
    agents.emplace_back(SimulatedAgent, *endpoint, agent_token, i, args.gpus, std::cref(stop),
                        &lat);
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  // Readers: what the CLI and the dashboard do while the fleet runs.
  std::thread reader([&] {
    while (!stop) {
      for (const char* path : {"/healthz", "/v1/jobs", "/v1/nodes", "/v1/summary"}) {
        const auto t0 = Clock::now();
        (void)admin.GetText(path);
        lat.Add(std::string("GET ") + path, Ms(t0));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int> gib(1, 40);
  const auto submit_start = Clock::now();
  for (int j = 0; j < args.jobs; ++j) {
    Json body = {{"name", "bench-" + std::to_string(j)},
                 {"team", j % 2 == 0 ? "vision" : "nlp"},
                 {"command", {"sleep", "3600"}},
                 {"gpus", 1}};
    if (j % 5 == 0) {
      body["gpu_mem"] = "auto";
    } else {
      body["gpu_mem"] = std::to_string(gib(rng)) + "GiB";
    }
    const auto t0 = Clock::now();
    paladin::StatusOr<Json> job = admin.Post("/v1/jobs", body);
    lat.Add("POST /v1/jobs", Ms(t0));
    if (!job.ok()) std::fprintf(stderr, "submit %d: %s\n", j, job.status().message().c_str());
  }
  const double submit_s = Ms(submit_start) / 1000;
  // Wait until the placements stop changing.
  int64_t placed = -1;
  for (int stable = 0, i = 0; stable < 3 && i < 120; ++i) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    paladin::StatusOr<Json> s = admin.Get("/v1/summary");
    const int64_t now = s.ok() ? s->value("jobs_running", int64_t{0}) : -1;
    stable = now == placed ? stable + 1 : 0;
    placed = now;
  }
  paladin::StatusOr<std::string> metrics = admin.GetText("/metrics");
  stop = true;
  reader.join();
  for (std::thread& t : agents) t.join();
  kill(server, SIGTERM);
  waitpid(server, nullptr, 0);

  std::printf(
      "fleet_scale: %d simulated agents x %d GPUs, %d jobs submitted in %.1f s, %lld "
      "running at the end\n\n",
      args.agents, args.gpus, args.jobs, submit_s, static_cast<long long>(placed));
  const double base99 = Quantile(lat.ms["GET /healthz"], 0.99);
  std::printf("%-20s %8s %9s %9s %14s\n", "request", "count", "p50 ms", "p99 ms", "p99/healthz");
  for (const auto& [what, values] : lat.ms) {
    const double p99 = Quantile(values, 0.99);
    std::printf("%-20s %8zu %9.2f %9.2f %14.1f\n", what.c_str(), values.size(),
                Quantile(values, 0.5), p99, base99 > 0 ? p99 / base99 : 0);
  }
  if (metrics.ok()) {
    std::printf("\nscheduling loop (from /metrics):\n");
    std::istringstream lines(*metrics);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind("paladin_schedule", 0) == 0) std::printf("  %s\n", line.c_str());
    }
  }
  if (getenv("FLEET_SCALE_KEEP") != nullptr) {
    std::printf("kept %s (FLEET_SCALE_KEEP)\n", dir.c_str());
  } else {
    fs::remove_all(dir);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--paladin") {
      args.paladin = argv[i + 1];
    } else if (flag == "--agents") {
      args.agents = std::atoi(argv[i + 1]);
    } else if (flag == "--jobs") {
      args.jobs = std::atoi(argv[i + 1]);
    } else if (flag == "--gpus") {
      args.gpus = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr,
                   "usage: fleet_scale [--paladin PATH] [--agents N] [--jobs N] [--gpus N]\n");
      return 2;
    }
  }
  return Run(args);
}
