// The clocks Paladin's services read, behind one interface so that tests inject their own: the
// server (ControlOptions::clock) and the node agent (AgentOptions::clock) read time only through
// it, and the decisions those readings feed (leases, periodic checkpoints, timeouts) are tested
// on a clock the test sets, without sleeping.
#ifndef PALADIN_BASE_CLOCK_H_
#define PALADIN_BASE_CLOCK_H_

#include <cstdint>

namespace paladin::base {

class Clock {
 public:
  virtual ~Clock() = default;

  // Seconds since the epoch (CLOCK_REALTIME): when things happened, as records and events say.
  virtual double WallSeconds() const = 0;

  // Seconds on a monotonic clock that stands still while the machine is suspended
  // (CLOCK_MONOTONIC): how long the agent has gone without an answer from the server.
  virtual double SteadySeconds() const = 0;

  // Nanoseconds on CLOCK_BOOTTIME, which keeps counting through a suspend: the clock of the lease
  // file's deadline, which every job's paladin-workload-init reads too (ckpt/fence.h).
  virtual uint64_t BootNs() const = 0;
};

// The host's clocks. Thread-safe; lives as long as the program.
const Clock& RealClock();

}  // namespace paladin::base

#endif  // PALADIN_BASE_CLOCK_H_
