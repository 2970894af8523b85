#include "phase_times.h"

#include <cstdio>
#include <sstream>

#include "paladin/ckpt/checkpoint.h"

namespace paladin::ckpt {

std::string PhaseTimes::Describe() const {
  std::ostringstream out;
  for (size_t i = 0; i < seconds.size(); ++i) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s %.2f s", seconds[i].first.c_str(), seconds[i].second);
    out << (i > 0 ? ", " : "") << buf;
  }
  return out.str();
}

}  // namespace paladin::ckpt
