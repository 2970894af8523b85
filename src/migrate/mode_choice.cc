// `paladin migrate --mode auto`'s choice of how a direct move carries the job's memory
// (include/paladin/migrate/migrate.h, docs/lazy_migration.md): a policy, no I/O.
#include <algorithm>
#include <string>
#include <vector>

#include "paladin/migrate/migrate.h"

namespace paladin::migrate {

ModeChoice ChooseMode(bool job_has_gpu, const Status& post_copy_here,
                      const std::vector<std::string>& destination_takes) {
  auto takes = [&](const char* mode) {
    return std::find(destination_takes.begin(), destination_takes.end(), mode) !=
           destination_takes.end();
  };
  std::string no_post_copy;
  if (job_has_gpu) {
    no_post_copy = "the job has a GPU, and post-copy of device memory is not done";
  } else if (!post_copy_here.ok()) {
    no_post_copy = "no post-copy CRIU here (scripts/criu_lazy.sh)";
  } else if (!takes("post-copy")) {
    no_post_copy = "the destination has no post-copy CRIU";
  } else {
    return {"post-copy", "both ends have the post-copy CRIU and the job has no GPU"};
  }
  if (takes("stream")) return {"stream", no_post_copy};
  return {"image", no_post_copy + "; the destination takes no page stream"};
}

}  // namespace paladin::migrate
