// The host's clocks (include/paladin/base/clock.h).
#include "paladin/base/clock.h"

#include <time.h>

namespace paladin::base {

namespace {

uint64_t Read(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

class HostClock final : public Clock {
 public:
  double WallSeconds() const override { return static_cast<double>(Read(CLOCK_REALTIME)) / 1e9; }
  double SteadySeconds() const override { return static_cast<double>(Read(CLOCK_MONOTONIC)) / 1e9; }
  uint64_t BootNs() const override { return Read(CLOCK_BOOTTIME); }
};

}  // namespace

const Clock& RealClock() {
  static const HostClock clock;
  return clock;
}

}  // namespace paladin::base
