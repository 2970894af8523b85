// Timing a checkpoint's or a restore's phases (checkpoint.h's PhaseTimes).
#ifndef PALADIN_SRC_CKPT_PHASE_TIMES_H_
#define PALADIN_SRC_CKPT_PHASE_TIMES_H_

#include <chrono>

namespace paladin::ckpt {

// Seconds since it was made or since the last Lap. Not thread-safe.
class Stopwatch {
 public:
  double Lap() {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

}  // namespace paladin::ckpt

#endif  // PALADIN_SRC_CKPT_PHASE_TIMES_H_
