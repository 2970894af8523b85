// What the control plane's parts ask of the control plane they are part of: its clock, its
// records of what happened (events, counters), the agents' command queue, the store, and the
// operations every job shares (accounting, binding, checkpoint records). Control implements it;
// GangCoordinator (gangs.h) and MigrationOrchestrator (orchestrator.h) are given it, so each
// names what it needs and is tested with a fake (tests/server/fake_host.h, used by
// gang_coordinator_test.cc and orchestrator_test.cc). Every call is made under Control's lock.
#pragma once

#include <cstdint>
#include <string>

#include "model.h"
#include "paladin/api/wire.h"
#include "paladin/base/status.h"
#include "paladin/core/packer.h"
#include "scheduler.h"

namespace paladin::server {

class ControlHost {
 public:
  virtual ~ControlHost() = default;
  virtual double Now() const = 0;
  virtual void Event(const std::string& kind, const JobRecord* job, const std::string& node,
                     const std::string& message) = 0;
  virtual void Count(const std::string& key, int64_t by) = 0;
  // Queues command C for NODE about JOB (its id, and its epoch unless C names one); returns the
  // command's id.
  virtual int64_t SendCommand(const std::string& node, api::Command c, const JobRecord* job) = 0;
  virtual Json JobJson(const JobRecord& j) const = 0;
  // Writes every change to the store, in one transaction.
  virtual Status Flush() = 0;
  // Wakes the scheduling loop: something changed.
  virtual void Wake() = 0;
  // The server's fault injection (PALADIN_SERVER_FAULT=crash-at:STEP): exits at STEP.
  virtual void CrashPoint(const std::string& step) = 0;
  virtual void SizeAutoJob(JobRecord& j) = 0;
  virtual void Accrue(JobRecord& j, double now) = 0;
  virtual void ReleaseJob(JobRecord& j) = 0;
  virtual void RecordCheckpoint(JobRecord& j, const Json& detail, const std::string& dir) = 0;
  virtual std::string CheckpointDir(const JobRecord& j, int seq) const = 0;
  virtual FleetView BuildFleet(bool reserve_running) = 0;
  virtual void Bind(FleetView& view, JobRecord& j, const core::Placement& p,
                    const std::string& how) = 0;
};

}  // namespace paladin::server
