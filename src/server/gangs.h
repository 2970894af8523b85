// Gangs (docs/server.md, "Gangs"): a job of N ranks is N jobs tied by a GangMember record.
// GangCoordinator owns what is particular to them: all-or-nothing placement, the ranks' stable
// addresses and rendezvous variables, the routes each node keeps to the ranks on other nodes, the
// coordinated checkpoint (one cut: freeze every rank, dump each while frozen, thaw or stop them
// all), one rank's move as a cut, and recovery of the whole gang from its last cut.
//
// It works over the control plane's records (the job, node and team tables), fails a rank's move
// through the migration orchestrator, and asks the rest of the control plane (ControlHost) for
// what every job shares. Control owns one; its methods run under Control's lock and take none.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "control_host.h"
#include "job_table.h"
#include "model.h"
#include "node_table.h"
#include "orchestrator.h"
#include "paladin/api/wire.h"
#include "paladin/base/status.h"
#include "paladin/core/packer.h"
#include "paladin/server/auth.h"
#include "paladin/server/validate.h"
#include "scheduler.h"
#include "team_book.h"

namespace paladin::server {

// The env keys the server sets for every rank of a gang (MASTER_ADDR, RANK, ...): a gang's own
// env may not set them.
Status CheckGangEnv(const std::map<std::string, std::string>& env);

struct GangSettings {
  double checkpoint_every_s = 0;  // 0: no periodic cuts
  std::string rank_subnet;        // as configured, for messages
};

class GangCoordinator {
 public:
  // SUBNET is read when a gang is submitted (it may be set after construction).
  GangCoordinator(ControlHost& host, JobTable& jobs, const NodeTable& nodes, TeamBook& teams,
                  MigrationOrchestrator& moves, Scheduler& scheduler, const RankSubnet& subnet,
                  GangSettings settings);
  GangCoordinator(const GangCoordinator&) = delete;
  GangCoordinator& operator=(const GangCoordinator&) = delete;

  // Creates the gang's ranks (the caller checked the body; SHAPE holds ranks, ranks_per_node and
  // port); the answer is rank 0's job with "gang_jobs", every rank's id.
  StatusOr<Json> Submit(const Principal& who, const JobRecord& base, const GangMember& shape);
  // Places every rank of the gang at once (core::Packer::ScheduleGang, MaxPerNodePermit), or
  // none; only when every live rank waits and no copy of one is still being killed.
  bool TryPlace(FleetView& view, const std::string& gang);
  // The rank's rendezvous variables and own network, added to its start or restore.
  void AddLaunch(const JobRecord& j, api::Command* launch);
  // The routes NODE keeps: every rank of its ranks' gangs that runs on another node.
  std::vector<api::RankRoute> RoutesFor(const NodeRecord& n) const;
  // A gang rank's command answered: true when it was a step of the gang's cut (handled).
  bool ApplyResult(JobRecord& j, const CommandRecord& c, const api::CommandResult& r);
  // Starts the periodic cut of every gang that is due (settings' checkpoint_every_s).
  void PeriodicCheckpoints(double now);
  // `paladin job checkpoint` / `resume` of a rank: the whole gang.
  StatusOr<Json> Checkpoint(JobRecord& j);
  StatusOr<Json> Resume(JobRecord& j);
  // `paladin job migrate` of a gang's rank: freeze the gang, dump the others, dump the rank
  // killing it, restore it on TO, switch the routes, thaw the others.
  StatusOr<Json> MoveRank(const Principal& who, JobRecord& j, const std::string& to, int gpu);
  // A rank's node died: every rank of the gang comes back from the last cut. WHY, when given,
  // says why instead of "node DEAD_NODE died".
  void Recover(const JobRecord& lost, const std::string& dead_node, const std::string& why = "");
  // DEAD_NODE has fenced its copies: the kills the gangs waited for there are moot.
  void ForgetStoppingOn(const std::string& dead_node);

 private:
  // Every live rank of gang GANG, by rank.
  std::vector<JobRecord*> Members(const std::string& gang);
  // Why the gang cannot be checkpointed now ("" when it can).
  std::string CutRefusal(const std::vector<JobRecord*>& members) const;
  // Begins a coordinated checkpoint (freeze all, dump each, thaw all, or stop all when
  // THEN_STOP); returns why not, or "". MOVER (with TO): the cut moves that rank to node TO
  // instead of thawing it.
  std::string StartCut(const std::string& gang, bool then_stop, const std::string& why,
                       JobRecord* mover = nullptr, const std::string& to = "");
  void GiveUpCut(const std::string& gang, const std::string& why);
  void FinishCut(const std::string& gang);
  bool PlaceMovedRank(JobRecord& j, const std::string& node, const std::string& how);
  void MoveRankOver(const std::string& gang);
  void ApplyMovedRankRestore(JobRecord& j, const api::CommandResult& r);
  void Thaw(JobRecord& m);

  ControlHost& host_;
  JobTable& jobs_;
  const NodeTable& nodes_;
  TeamBook& teams_;
  MigrationOrchestrator& moves_;
  Scheduler& scheduler_;
  const RankSubnet& subnet_;
  GangSettings settings_;
};

}  // namespace paladin::server
