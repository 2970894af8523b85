// What a node agent tells the server in its heartbeat (and, for its jobs, when it registers), as
// types both sides use: the agent encodes with ToJson, the server decodes once with
// DecodeHeartbeat / DecodeJobReports, whose errors name the list, the field and what is wrong
// (docs/formats/api.md, "Agents"). What the server sends back (commands) is not typed yet.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "paladin/base/status.h"

namespace paladin::api {

// A job copy on the node, as the agent sees it.
struct JobReport {
  std::string id;                 // the server's job id (its syntax is the server's to check)
  int64_t epoch = 0;              // which copy: a copy of an older epoch is stale
  std::string state = "running";  // running | stopped | frozen | exited
  int64_t pid = 0;
  std::optional<int64_t> used_bytes;  // GPU memory in use; absent: unknown (the last figure stands)
  int64_t quota_bytes = 0;            // 0: no quota region
  int64_t quota_grows = 0;
  int64_t refusals = 0;
  std::optional<int> exit_code;  // when exited with a code
  std::string stdout_text;       // log text since the last delivered beat
  std::string stderr_text;
};

struct GpuReport {
  int index = 0;
  int64_t used_bytes = 0;
  bool healthy = true;
  std::string fault;  // "" when none
};

// The outcome of a command the server sent.
struct CommandResult {
  int64_t command = 0;
  bool ok = false;
  std::string error;
  nlohmann::json detail = nlohmann::json::object();
};

struct Heartbeat {
  std::vector<GpuReport> gpus;
  std::vector<JobReport> jobs;
  std::vector<CommandResult> results;
};

nlohmann::json ToJson(const JobReport& r);
nlohmann::json ToJson(const GpuReport& g);
nlohmann::json ToJson(const CommandResult& c);

// A list of job reports ("jobs"): null or absent is none.
StatusOr<std::vector<JobReport>> DecodeJobReports(const nlohmann::json& list);
StatusOr<Heartbeat> DecodeHeartbeat(const nlohmann::json& body);

}  // namespace paladin::api
