// A fleet job's states as the API names them: the server's job table moves a job between them
// (src/server/job_state.h holds the allowed transitions), and its clients (the CLI, the demo)
// read them from the server's answers through this header only. docs/server.md ("A job's life")
// draws the graph.
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

namespace paladin::api {

enum class JobState {
  kPending,        // waiting for room
  kStarting,       // start sent to a node, not reported running yet
  kRunning,        // running on its node
  kMigrating,      // moving to another node or GPU (still running at the source until the commit)
  kCheckpointing,  // a checkpoint asked of its node, not answered yet
  kCheckpointed,   // stopped with its image; resumes on request
  kRestoring,      // waiting for room, or restoring, from its last checkpoint
  kSucceeded,      // exited with 0
  kFailed,         // exited otherwise, or could not be started
  kCancelled,      // cancelled by a user
};

inline constexpr std::array<JobState, 10> kAllJobStates = {
    JobState::kPending,       JobState::kStarting,     JobState::kRunning,   JobState::kMigrating,
    JobState::kCheckpointing, JobState::kCheckpointed, JobState::kRestoring, JobState::kSucceeded,
    JobState::kFailed,        JobState::kCancelled};

// The API's and the store's name ("pending", "running", ...).
std::string_view JobStateName(JobState state);
// The state of that name; nullopt for any other text.
std::optional<JobState> ParseJobState(std::string_view name);
bool IsTerminal(JobState state);  // succeeded, failed or cancelled

// The state named by a job's "state" field (a /v1/jobs answer); nullopt when it has none or an
// unknown one.
std::optional<JobState> JobStateOf(const nlohmann::json& job);
// Whether a job's "state" field names `state`.
bool JobIs(const nlohmann::json& job, JobState state);

}  // namespace paladin::api
