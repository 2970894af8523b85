// The migration transaction (docs/server.md, DESIGN.md "Migration is a transaction"): one job
// moved between nodes or GPUs, exactly one copy of it the job at every instant.
//
//   reserved -> migrate_in_sent -> transfer (migrate_out sent) -> committed -> done
//            \___________________ failed (before the commit: the job stays on its source)
//
// Which step follows which is migration_steps.h's (NextMigrationAction, a pure function); the
// rows are MigrationTable's. MigrationOrchestrator carries the steps out: it reserves the
// destination (the packer's check, or the GPU named), sends the agents their commands, decides
// the commit once (the source asks; a destination that lost its source asks for an abort, and
// whichever comes first decides), fails a move that cannot finish, and learns what moves cost
// (core::MoveCostModel, from each source's measured pause). Control owns one; its methods run
// under Control's lock and take none.
#pragma once

#include <string>

#include "command_queue.h"
#include "control_host.h"
#include "job_table.h"
#include "migration_steps.h"
#include "migration_table.h"
#include "model.h"
#include "node_table.h"
#include "paladin/api/wire.h"
#include "paladin/base/status.h"
#include "paladin/core/move_cost.h"
#include "scheduler.h"

namespace paladin::server {

struct MoveSettings {
  std::string move_mode = "auto";    // ControlOptions::move_mode: auto, post-copy, pre-copy, image
  double migration_timeout_s = 300;  // an unfinished move is decided after this long
};

class MigrationOrchestrator {
 public:
  MigrationOrchestrator(ControlHost& host, JobTable& jobs, const NodeTable& nodes,
                        MigrationTable& migrations, CommandQueue& commands, Scheduler& scheduler,
                        MoveSettings settings);
  MigrationOrchestrator(const MigrationOrchestrator&) = delete;
  MigrationOrchestrator& operator=(const MigrationOrchestrator&) = delete;

  // Moves running job J to node TO (GPU TO_GPU, or the packer's choice there when negative):
  // refused, with nothing changed, when the job or the destination cannot take part (REFUSAL,
  // when given, gets the packer's reasons); else the row is made, the job is migrating and the
  // destination is told to listen.
  Status Start(JobRecord& j, const std::string& to, int to_gpu, const std::string& why,
               std::string* refusal);
  // Carries out NextMigrationAction for the event.
  void Advance(MigrationRecord& m, const MigrationEvent& event);
  // Ends the move as failed (the job stays, running, on its source; the destination's copy is
  // killed, the move's undelivered commands withdrawn), unless it has ended.
  void Fail(MigrationRecord& m, const std::string& why);
  // Fails J's move under way, if it has one.
  void FailActive(const JobRecord& j, const std::string& why);
  // Fails every undecided move to or from NODE.
  void FailUndecidedOf(const std::string& node, const std::string& why);
  // Ends the move as done (the job runs at the destination).
  void Finish(MigrationRecord& m);
  // Decides the moves older than the settings' timeout: done if committed, else failed.
  void Timeouts(double now);
  // The source's report on a move (its migrate_out result): the mode it used and the pause,
  // learned by the cost model.
  void RecordCost(MigrationRecord& m, const Json& detail);
  // The source asks for the commit (it has stopped the job and sent its image): yes once, unless
  // the move was decided otherwise or the job has ended. Answers {"commit": bool}.
  StatusOr<Json> Commit(MigrationRecord& m);
  // The destination lost its source (or a restarted source settles a move it had begun): the
  // move fails unless it is committed. Answers as Commit.
  StatusOr<Json> AbortUnlessCommitted(MigrationRecord& m);

  // What moves cost, learned from the measured pauses of finished moves (replayed at start).
  core::MoveCostModel& costs() { return costs_; }

 private:
  // How a move between these nodes carries the job's memory (the settings' move_mode), and
  // why: post-copy, or pre-copy, which *STREAM says streams (else it moves by image).
  api::MoveMode ModeFor(const NodeRecord& from, const NodeRecord& to, bool* stream,
                        std::string* why) const;
  JobRecord* JobOf(const MigrationRecord& m) { return jobs_.ById(m.job); }

  ControlHost& host_;
  JobTable& jobs_;
  const NodeTable& nodes_;
  MigrationTable& migrations_;
  CommandQueue& commands_;
  Scheduler& scheduler_;
  MoveSettings settings_;
  core::MoveCostModel costs_;
};

}  // namespace paladin::server
