// The fleet migration's steps (migration_steps.h).
#include "migration_steps.h"

#include <array>

namespace paladin::server {
namespace {

constexpr std::array<MigrationStep, 6> kSteps = {
    MigrationStep::kReserved,  MigrationStep::kMigrateInSent, MigrationStep::kTransfer,
    MigrationStep::kCommitted, MigrationStep::kDone,          MigrationStep::kFailed};

}  // namespace

std::string_view MigrationStepName(MigrationStep step) {
  switch (step) {
    case MigrationStep::kReserved:
      return "reserved";
    case MigrationStep::kMigrateInSent:
      return "migrate_in_sent";
    case MigrationStep::kTransfer:
      return "transfer";
    case MigrationStep::kCommitted:
      return "committed";
    case MigrationStep::kDone:
      return "done";
    case MigrationStep::kFailed:
      return "failed";
  }
  return "unknown";
}

std::optional<MigrationStep> ParseMigrationStep(std::string_view name) {
  for (MigrationStep s : kSteps) {
    if (MigrationStepName(s) == name) return s;
  }
  return std::nullopt;
}

std::optional<MigrationEvent> EventOfResult(std::string_view kind, bool ok,
                                            const std::string& error) {
  using K = MigrationEvent::Kind;
  if (kind == "migrate_in")
    return MigrationEvent{ok ? K::kMigrateInOk : K::kMigrateInFailed, error};
  if (kind == "migrate_out") {
    return MigrationEvent{ok ? K::kMigrateOutOk : K::kMigrateOutFailed, error};
  }
  return std::nullopt;
}

MigrationAction NextMigrationAction(MigrationStep step, bool committed,
                                    const MigrationEvent& event) {
  using A = MigrationAction::Kind;
  using E = MigrationEvent::Kind;
  if (step == MigrationStep::kDone || step == MigrationStep::kFailed) return {A::kNone, ""};
  switch (event.kind) {
    case E::kMigrateInFailed:
    case E::kMigrateOutFailed:
      // The destination has the job once committed: the source's errors come after.
      return committed ? MigrationAction{A::kFinish, ""} : MigrationAction{A::kFail, event.error};
    case E::kMigrateInOk:
      if (committed) return {A::kFinish, ""};
      // migrate_in answers once the destination listens (the agent reports it as it starts).
      return step == MigrationStep::kMigrateInSent ? MigrationAction{A::kSendMigrateOut, ""}
                                                   : MigrationAction{A::kNone, ""};
    case E::kMigrateOutOk:
      return committed ? MigrationAction{A::kFinish, ""}
                       : MigrationAction{A::kFail, "the source finished without a commit"};
    case E::kReserved:
      return step == MigrationStep::kReserved ? MigrationAction{A::kSendMigrateIn, ""}
                                              : MigrationAction{A::kNone, ""};
    case E::kListening:
      return step == MigrationStep::kMigrateInSent ? MigrationAction{A::kSendMigrateOut, ""}
                                                   : MigrationAction{A::kNone, ""};
  }
  return {A::kNone, ""};
}

}  // namespace paladin::server
