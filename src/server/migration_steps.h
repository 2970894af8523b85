// The server's side of a fleet migration as a state machine of its own, apart from the control
// plane that carries it out: the steps a migration row goes through, the events that move it,
// and, for each step and event, what the orchestrator must do next (docs/server.md, "The
// migration transaction"; the agents' side is docs/formats/migrate.md). Pure: no I/O, no clock.
//
//   reserved ──(sent migrate_in)──▶ migrate_in_sent ──(destination listens)──▶ transfer
//   transfer ──(the source asks, the server commits)──▶ committed ──(either side reports)──▶ done
//   any step before the commit ──(a failure)──▶ failed
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace paladin::server {

enum class MigrationStep { kReserved, kMigrateInSent, kTransfer, kCommitted, kDone, kFailed };

std::string_view MigrationStepName(MigrationStep step);
std::optional<MigrationStep> ParseMigrationStep(std::string_view name);

// What happened to a migration.
struct MigrationEvent {
  enum class Kind {
    kReserved,         // the row was just made (the destination's room is booked)
    kListening,        // the destination listens for the image
    kMigrateInOk,      // the destination's migrate_in command succeeded
    kMigrateOutOk,     // the source's migrate_out command succeeded
    kMigrateInFailed,  // ... failed (error says why)
    kMigrateOutFailed,
  };
  Kind kind = Kind::kReserved;
  std::string error;
};

// The event an agent's command result is: `kind` is the command's ("migrate_in" or
// "migrate_out"); nullopt for any other command.
std::optional<MigrationEvent> EventOfResult(std::string_view kind, bool ok,
                                            const std::string& error);

// What the orchestrator does next.
struct MigrationAction {
  enum class Kind {
    kNone,            // nothing (a late or repeated event)
    kSendMigrateIn,   // ask the destination to listen; then the step is migrate_in_sent
    kSendMigrateOut,  // ask the source to send; then the step is transfer
    kFinish,          // the move is done (the job runs at the destination)
    kFail,            // the move failed (the job runs on at the source); `why`
  };
  Kind kind = Kind::kNone;
  std::string why;
};

// `committed`: the server has answered the source's commit with yes. After a commit nothing
// fails the move any more: the destination has the job.
MigrationAction NextMigrationAction(MigrationStep step, bool committed,
                                    const MigrationEvent& event);

}  // namespace paladin::server
