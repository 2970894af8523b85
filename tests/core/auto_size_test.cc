// core::SizeAuto, the one rule an `auto` workload's first size comes from (the server's auto jobs
// and Kubernetes pods annotated paladin.io/gpu-memory: auto): a table of histories and limits,
// each expected size worked out in its comment.
#include "paladin/core/auto_size.h"

#include <gtest/gtest.h>

namespace paladin::core {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

TEST(SizeAuto, TheHighestPeakTimesOnePointTwoElseTheDefaultWithinTheCaps) {
  struct Case {
    ClassHistory history;
    AutoSizeLimits limits;
    int64_t bytes;
    bool from_history;
    const char* why;
  } cases[] = {
      // No history: 4 GiB.
      {{"r/train", 0, 0, 0}, {}, 4 * kGiB, false, "no history for r/train: the default 4 GiB"},
      // 512 MiB x 1.2 = 614.4 MiB (644245094 bytes, rounded down).
      {{"r/train", 512 * kMiB, 0, 2},
       {},
       644245094,
       true,
       "highest peak of r/train's 2 earlier pods 512 MiB x 1.2 = 614.40 MiB"},
      // 10 GiB x 1.2 = 12 GiB, past gpu_mem_max 11 GiB and the largest GPU 8 GiB: 8 GiB.
      {{"r/train", 10 * kGiB, 1, 1},
       {11 * kGiB, 8 * kGiB},
       8 * kGiB,
       true,
       "highest peak of r/train's 1 earlier job and 1 pod 10 GiB x 1.2 = 12 GiB, capped at "
       "gpu_mem_max, capped at the largest GPU"},
      // The default past a 2 GiB gpu_mem_max: 2 GiB.
      {{"r/x", 0, 0, 0},
       {2 * kGiB, 0},
       2 * kGiB,
       false,
       "no history for r/x: the default 4 GiB, capped at gpu_mem_max"},
      // 10 MiB x 1.2 = 12 MiB, under the 64 MiB floor.
      {{"r/tiny", 10 * kMiB, 3, 0},
       {},
       64 * kMiB,
       true,
       "highest peak of r/tiny's 3 earlier jobs 10 MiB x 1.2 = 12 MiB"},
  };
  for (const Case& c : cases) {
    const AutoSize s = SizeAuto(c.history, c.limits);
    EXPECT_EQ(s.bytes, c.bytes) << c.why;
    EXPECT_EQ(s.from_history, c.from_history) << c.why;
    EXPECT_EQ(s.why, c.why);
  }
}

}  // namespace
}  // namespace paladin::core
