// Where a restore writes on this node (checkpoint.h's RestorePlacement): the manifest's places
// checked against this node's, the run directory opened, and the ownership checks that keep
// anyone else from changing what a restore reads or writes.
#ifndef PALADIN_SRC_CKPT_PLACEMENT_H_
#define PALADIN_SRC_CKPT_PLACEMENT_H_

#include <string>

#include "paladin/base/status.h"
#include "paladin/ckpt/beneath.h"
#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/image.h"

namespace paladin::ckpt {

// This node's places for a restored job (RestorePlacement), open: writes go through `dir`.
struct Placement {
  std::string run_dir;
  std::string stdout_log;
  std::string stderr_log;
  std::string region;  // "" without a quota
  Fd dir;
};

// Checks the manifest's places against this node's and opens the run directory (created where
// missing). Each refusal names the manifest's field and what this node expected.
StatusOr<Placement> Place(const Manifest& m, const RestorePlacement& where);

// A directory this node writes jobs' files into must not be writable by anyone else: whoever
// could write it could put a symlink or a FIFO where a restore is about to write. `what` and
// `path` name the directory `fd` in the error.
Status CheckOwnDirectory(int fd, const std::string& what, const std::string& path);

// Every directory of the image (`image`, open, at `dir`) must be writable only by this user or
// root (RestoreJob's contract).
Status CheckImageWriters(int image, const std::string& dir);

// A cgroup name from a job record kept in a run directory its user may write: only a plain
// relative name is kept ("" otherwise).
std::string SafeCgroup(const std::string& name);

// Copies the image's `rel` (`image` is its directory, open) into the run directory as `name`;
// what is written must hash to what the manifest says (the image may have changed since it was
// verified). `mode` is the file's mode when Paladin knows it; otherwise (-1) the read and write
// bits of the image's copy.
Status CopyIntoRunDir(int image, const Manifest& m, const std::string& rel, const Placement& p,
                      const std::string& name, int mode = -1);

}  // namespace paladin::ckpt

#endif  // PALADIN_SRC_CKPT_PLACEMENT_H_
