// The sizing read (GET /v1/sizing): the size an `auto` workload of a class would be given now, by
// the one rule the server's own auto jobs are sized with (core::SizeAuto), over the class's
// ended jobs and its Kubernetes pods' measured peaks (docs/kubernetes.md, design 7).
#include <algorithm>

#include "control.h"
#include "paladin/api/wire.h"
#include "paladin/server/validate.h"

namespace paladin::server {

namespace key = api::key;

namespace {

// A class's command as JobRecord::ClassKey takes it: the basename of command[0].
std::string CommandBase(const std::string& command) {
  const size_t slash = command.rfind('/');
  return slash == std::string::npos ? command : command.substr(slash + 1);
}

bool PrintableCommand(const std::string& s) {
  if (s.empty() || s.size() > 255) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return static_cast<unsigned char>(c) >= 0x21 && static_cast<unsigned char>(c) != 0x7f;
  });
}

}  // namespace

core::ClassHistory Control::ClassHistoryOf(const std::string& class_key) const {
  core::ClassHistory h;
  if (options_.class_pods) h = options_.class_pods(class_key);
  h.name = class_key;
  const core::ClassHistory jobs = forecasts_.ClassHistory(class_key);
  h.peak_bytes = std::max(h.peak_bytes, jobs.peak_bytes);
  if (jobs.jobs > 0) h.jobs = jobs.jobs;
  return h;
}

StatusOr<Json> Control::Sizing(const Principal& who, const std::string& team,
                               const std::string& command) {
  if (!ValidName(team))
    return InvalidArgument("team: '" + team.substr(0, 64) + "' is not a team name");
  const std::string base = CommandBase(command);
  if (!PrintableCommand(base)) {
    return InvalidArgument(
        "command: expected a command or image name (printable, no blanks, "
        "up to 255 bytes)");
  }
  if (who.agent() || !who.SeesTeam(team)) {
    return PermissionDenied("a " + who.Scope() + " token reads the sizing of its own team only");
  }
  std::lock_guard<std::mutex> lock(mu_);
  const core::ClassHistory history = ClassHistoryOf(team + "/" + base);
  // No cap at the largest GPU: a pod's GPUs are its cluster's, which the server does not know.
  const core::AutoSize size = core::SizeAuto(history, {});
  return Json{{key::kTeam, team},
              {key::kClass, history.name},
              {key::kBytes, size.bytes},
              {key::kFrom, size.from_history ? "history" : "default"},
              {key::kJobs, history.jobs},
              {key::kPods, history.pods},
              {"peak_bytes", history.peak_bytes},
              {key::kWhy, size.why}};
}

}  // namespace paladin::server
