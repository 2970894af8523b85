// `paladin migrate --mode auto`'s choice (migrate::ChooseMode) as a table: each row is what the
// two ends can, and the mode and reason it must give.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "paladin/migrate/migrate.h"

namespace paladin::migrate {
namespace {

struct Row {
  const char* name;
  bool gpu;                        // the job has a GPU
  bool lazy_here;                  // this side has the patched CRIU
  std::vector<std::string> there;  // the receiver's FEATURES answer
  const char* mode;
  const char* why;  // a part of the reason given
};

TEST(ChooseModeTest, PostCopyElseStreamElseImage) {
  const std::vector<Row> rows = {
      // Both ends can, no GPU: post-copy, the pause that does not grow with the memory.
      {"both post-copy", false, true, {"stream", "post-copy"}, "post-copy", "both ends"},
      // A GPU: never post-copy; the receiver streams.
      {"gpu", true, true, {"stream", "post-copy"}, "stream", "the job has a GPU"},
      // The patched CRIU missing on either side: streamed.
      {"not here", false, false, {"stream", "post-copy"}, "stream", "no post-copy CRIU here"},
      {"not there", false, true, {"stream"}, "stream", "the destination has no post-copy CRIU"},
      // A receiver that names neither (a future one with other modes): by image, and why.
      {"nothing", false, true, {}, "image", "the destination takes no page stream"},
      {"gpu, nothing", true, false, {"other"}, "image", "the job has a GPU"},
  };
  for (const Row& r : rows) {
    const ModeChoice c =
        ChooseMode(r.gpu, r.lazy_here ? Status::Ok() : FailedPrecondition("no patches"), r.there);
    EXPECT_EQ(c.mode, r.mode) << r.name;
    EXPECT_NE(c.why.find(r.why), std::string::npos) << r.name << ": " << c.why;
  }
}

}  // namespace
}  // namespace paladin::migrate
