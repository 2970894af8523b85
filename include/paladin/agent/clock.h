// The node agent's clocks, behind an interface so that tests can inject their own
// (AgentOptions::clock). The agent reads time only through it for its lease and its loop's pace;
// the decisions those readings feed are pure functions of them (src/agent/lease_policy.h).
#ifndef PALADIN_AGENT_CLOCK_H_
#define PALADIN_AGENT_CLOCK_H_

#include <cstdint>

namespace paladin::agent {

class Clock {
 public:
  virtual ~Clock() = default;

  // Seconds on a monotonic clock that stands still while the machine is suspended
  // (CLOCK_MONOTONIC): how long the agent has gone without an answer from the server.
  virtual double SteadySeconds() const = 0;

  // Nanoseconds on CLOCK_BOOTTIME, which keeps counting through a suspend: the clock of the lease
  // file's deadline, which every job's paladin-workload-init reads too (ckpt/fence.h).
  virtual uint64_t BootNs() const = 0;
};

// The host's clocks. Thread-safe; lives as long as the program.
const Clock& RealClock();

}  // namespace paladin::agent

#endif  // PALADIN_AGENT_CLOCK_H_
