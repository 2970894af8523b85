// A ControlHost (src/server/control_host.h) for unit tests of the control plane's parts: a clock
// the test sets, the events, counters and commands it was asked for, checkpoint records kept on
// the job, and a fleet view the test builds (or none).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "server/control_host.h"

namespace paladin::server {

struct Sent {
  std::string node;
  api::Command command;
  std::string job;
};

class FakeHost : public ControlHost {
 public:
  double Now() const override { return now; }
  void Event(const std::string& kind, const JobRecord* /*job*/, const std::string& /*node*/,
             const std::string& message) override {
    events.push_back(kind + ": " + message);
  }
  void Count(const std::string& key, int64_t by) override { counts[key] += by; }
  int64_t SendCommand(const std::string& node, api::Command c, const JobRecord* job) override {
    if (!c.epoch && job != nullptr) c.epoch = job->epoch;
    sent.push_back(Sent{node, std::move(c), job == nullptr ? "" : job->id});
    return static_cast<int64_t>(sent.size());
  }
  Json JobJson(const JobRecord& j) const override { return Json{{"id", j.id}}; }
  Status Flush() override { return Status::Ok(); }
  void Wake() override {}
  void SizeAutoJob(JobRecord& /*j*/) override {}
  void Accrue(JobRecord& /*j*/, double /*now*/) override {}
  void ReleaseJob(JobRecord& j) override {
    j.node.clear();
    released.push_back(j.id);
  }
  void RecordCheckpoint(JobRecord& j, const Json& detail, const std::string& dir) override {
    j.last_checkpoint =
        CheckpointRef{.path = dir, .at = now, .bytes = detail.value("bytes", int64_t{0})};
  }
  std::string CheckpointDir(const JobRecord& j, int seq) const override {
    return "/ck/" + j.id + "/" + std::to_string(seq);
  }
  FleetView BuildFleet(bool reserve_running) override {
    return fleet ? fleet(reserve_running) : FleetView{};
  }
  void Bind(FleetView& /*view*/, JobRecord& /*j*/, const core::Placement& /*p*/,
            const std::string& /*how*/) override {}
  void CrashPoint(const std::string& /*step*/) override {}

  // The commands sent since the last call, as "node kind" (a checkpoint's with its mode).
  std::vector<std::string> TakeSent() {
    std::vector<std::string> out;
    for (const Sent& s : sent) {
      std::string line = s.node + " " + std::string(api::CommandKindName(s.command.kind));
      if (s.command.kind == api::CommandKind::kCheckpoint) line += " " + s.command.mode;
      out.push_back(line);
    }
    taken.insert(taken.end(), sent.begin(), sent.end());
    sent.clear();
    return out;
  }

  double now = 1000;
  std::function<FleetView(bool)> fleet;  // BuildFleet; empty: an empty view
  std::vector<Sent> sent;
  std::vector<Sent> taken;
  std::vector<std::string> events;
  std::map<std::string, int64_t> counts;
  std::vector<std::string> released;
};

}  // namespace paladin::server
