// A job's state names (paladin/api/job_state.h).
#include "paladin/api/job_state.h"

#include "paladin/api/wire.h"

namespace paladin::api {

std::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kPending:
      return "pending";
    case JobState::kStarting:
      return "starting";
    case JobState::kRunning:
      return "running";
    case JobState::kMigrating:
      return "migrating";
    case JobState::kCheckpointing:
      return "checkpointing";
    case JobState::kCheckpointed:
      return "checkpointed";
    case JobState::kRestoring:
      return "restoring";
    case JobState::kSucceeded:
      return "succeeded";
    case JobState::kFailed:
      return "failed";
    case JobState::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

std::optional<JobState> ParseJobState(std::string_view name) {
  for (JobState s : kAllJobStates) {
    if (JobStateName(s) == name) return s;
  }
  return std::nullopt;
}

bool IsTerminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

std::optional<JobState> JobStateOf(const nlohmann::json& job) {
  if (!job.is_object()) return std::nullopt;
  auto it = job.find(key::kState);
  if (it == job.end() || !it->is_string()) return std::nullopt;
  return ParseJobState(it->get_ref<const std::string&>());
}

bool JobIs(const nlohmann::json& job, JobState state) { return JobStateOf(job) == state; }

}  // namespace paladin::api
