// A job's states and the transitions between them, in one place: the control plane compares and
// sets states only through this type, and the API, the store and /metrics spell them only through
// JobStateName. docs/server.md ("A job's life") draws the same graph.
//
//   pending ──▶ starting ──▶ running ──▶ migrating ──▶ running
//      ▲            │          │  ▲
//      │            ▼          ▼  │
//      └──── restoring ◀── checkpointing ──▶ checkpointed ──▶ restoring ──▶ running
//
// Any state that has not ended may end (succeeded, failed, cancelled); a job that lost its node,
// or ran out of GPU memory, goes back to pending (no checkpoint) or restoring (from its last
// one). An ended job never changes again.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace paladin::server {

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
// Whether a job may go from `from` to `to`. Staying in a state is allowed (a no-op); an ended job
// goes nowhere.
bool JobStateAllows(JobState from, JobState to);

}  // namespace paladin::server
