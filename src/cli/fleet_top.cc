// `paladin top`: the fleet at a glance, refreshed every few seconds: each node and GPU with its
// memory allocated (quotas) against used, the jobs on it, and the queue.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "fleet.h"
#include "fleet_format.h"
#include "paladin/api/job_state.h"
#include "paladin/api/wire.h"

namespace paladin::cli {

namespace key = api::key;

namespace {

using api::Json;
using fleet::Array;
using fleet::Printable;
using fleet::Str;

struct TopArgs {
  FleetFlags flags;
  bool once = false;
  double interval_s = 2;
};

volatile std::sig_atomic_t g_stop = 0;
void OnInterrupt(int /*signal*/) { g_stop = 1; }

std::string Count(const Json& j, const char* key) {
  const std::optional<int64_t> v = fleet::Int(j, key);
  return v.has_value() ? std::to_string(*v) : "-";
}

// One frame as text: a summary line, then per node its GPUs with bars and jobs, then the queue.
StatusOr<std::string> Frame(const FleetApi& api, Json* everything) {
  StatusOr<Json> nodes = api.Get("/v1/nodes");
  if (!nodes.ok()) return nodes.status();
  StatusOr<Json> jobs = api.Get("/v1/jobs");
  if (!jobs.ok()) return jobs.status();
  StatusOr<Json> summary = api.Get("/v1/summary");
  if (!summary.ok()) return summary.status();
  *everything = {{key::kNodes, *nodes}, {key::kJobs, *jobs}, {"summary", *summary}};

  std::map<std::string, const Json*> by_id;
  for (const Json& job : Array(*jobs, key::kJobs)) by_id[Str(job, key::kId)] = &job;
  const double now = FleetNow();
  const Json& s = *summary;
  std::string out =
      "paladin top  " + api.url() + "  nodes alive " + Count(s, key::kNodesAlive) + ", gpus " +
      Count(s, key::kGpus) + " | jobs running " + Count(s, key::kJobsRunning) + ", pending " +
      Count(s, key::kJobsPending) + " | migrations " + Count(s, key::kMigrations) + " (" +
      Count(s, key::kMigrationsFailed) + " failed), recoveries " + Count(s, key::kRecoveries) +
      ", quota grows " + Count(s, key::kQuotaGrows) + "\n\n";
  for (const Json& node : Array(*nodes, key::kNodes)) {
    out += Str(node, key::kName) + "  " + Str(node, key::kState) + "  " + Str(node, key::kAddress) +
           "  heartbeat " + fleet::FormatAgo(fleet::Num(node, key::kLastHeartbeat), now) + "\n";
    for (const Json& gpu : Array(node, key::kGpus)) {
      const uint64_t total = fleet::Bytes(gpu, key::kMemoryBytes).value_or(0);
      const uint64_t allocated = fleet::Bytes(gpu, key::kAllocatedBytes).value_or(0);
      const uint64_t used = fleet::Bytes(gpu, key::kUsedBytes).value_or(0);
      std::string line = "  " + Count(gpu, key::kIndex) + " " + Str(gpu, key::kModel) + " " +
                         fleet::MemoryBar(used, allocated, total, 30) + " alloc " +
                         fleet::FormatBytes(allocated) + ", used " + fleet::FormatBytes(used) +
                         " of " + fleet::FormatBytes(total);
      if (gpu.contains(key::kHealthy) && gpu[key::kHealthy].is_boolean() &&
          !gpu[key::kHealthy].get<bool>()) {
        line += "  UNHEALTHY";
      }
      out += line + "\n";
      for (const Json& id : Array(gpu, key::kJobs)) {
        if (!id.is_string()) continue;
        const auto it = by_id.find(id.get<std::string>());
        std::string row = "      " + id.get<std::string>();
        if (it != by_id.end()) {
          const Json& job = *it->second;
          row += "  " + Str(job, key::kName) + "  " + Str(job, key::kTeam) + "  " +
                 Str(job, key::kState) + "  quota " + fleet::BytesCell(job, key::kQuotaBytes) +
                 ", used " + fleet::BytesCell(job, key::kUsedBytes);
        }
        out += row + "\n";
      }
    }
  }
  std::string queue;
  for (const Json& job : Array(*jobs, key::kJobs)) {
    if (!api::JobIs(job, api::JobState::kPending)) continue;
    queue += "  " + Str(job, key::kId) + "  " + Str(job, key::kName) + "  " + Str(job, key::kTeam) +
             "  waiting " +
             fleet::FormatDuration(now - fleet::Num(job, key::kSubmittedAt).value_or(now)) + "  " +
             Str(job, key::kReason) + "\n";
  }
  if (!queue.empty()) out += "\npending:\n" + queue;
  out += "\n[# used  = allocated, unused  . free  ! used past its allocation]\n";
  // Every line goes through Printable, keeping the newlines.
  std::string safe;
  size_t start = 0;
  while (start < out.size()) {
    const size_t nl = out.find('\n', start);
    safe += Printable(out.substr(start, nl - start)) + "\n";
    start = nl == std::string::npos ? out.size() : nl + 1;
  }
  return safe;
}

int RunTop(const TopArgs& a) {
  FleetApi api("top", a.flags);
  const bool refresh = !a.once && !api.json();
  if (refresh) {
    std::signal(SIGINT, OnInterrupt);
    std::signal(SIGTERM, OnInterrupt);
  }
  const bool tty = isatty(STDOUT_FILENO) == 1;
  while (true) {
    Json everything;
    StatusOr<std::string> frame = Frame(api, &everything);
    if (!frame.ok()) return api.Fail(frame.status());
    if (api.json()) {
      FleetApi::PrintJson(everything);
      return 0;
    }
    if (refresh && tty) std::fputs("\033[H\033[2J", stdout);  // home, clear
    std::fputs(frame->c_str(), stdout);
    std::fflush(stdout);
    if (!refresh) return 0;
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(a.interval_s);
    while (g_stop == 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (g_stop != 0) return 0;
  }
}

}  // namespace

void RegisterFleetTop(CLI::App& app, int* exit_code) {
  auto t = std::make_shared<TopArgs>();
  CLI::App* top = app.add_subcommand(
      "top",
      "The fleet at a glance: nodes and GPUs with memory allocated vs used, their jobs, the "
      "queue; refreshes until Ctrl-C");
  top->add_flag("--once", t->once, "Print one frame and exit");
  top->add_option("--interval", t->interval_s, "Seconds between frames")
      ->capture_default_str()
      ->check(CLI::Range(0.2, 3600.0));
  AddFleetFlags(top, &t->flags);
  top->callback([t, exit_code] { *exit_code = Guarded("top", [&] { return RunTop(*t); }); });
}

}  // namespace paladin::cli
