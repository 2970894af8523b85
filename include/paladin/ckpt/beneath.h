// Opening files of an untrusted directory tree (a checkpoint image, a job's run directory)
// without being led out of it: every open is relative to a directory descriptor, never follows a
// symlink at any step (openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
// or one O_NOFOLLOW step at a time where the kernel lacks openat2), and reads only regular files:
// a FIFO, a socket, a device or a directory where a file should be is an error, and never blocks.
// Errors name the path relative to the directory; callers say which directory it is.
#ifndef PALADIN_CKPT_BENEATH_H_
#define PALADIN_CKPT_BENEATH_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <functional>
#include <string>

#include "paladin/base/status.h"

namespace paladin::ckpt {

// An owned file descriptor; closed when destroyed. Movable, not copyable.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(Fd&& other) noexcept : fd_(other.Release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  int Release();
  void Reset();

 private:
  int fd_ = -1;
};

// A path inside a directory: relative, with no empty, "." or ".." component and no NUL byte.
// `what` names the field in the error ("manifest: files[3].path").
Status CheckRelativePath(const std::string& what, const std::string& path);
// A host path: absolute, with no ".." component and no NUL byte.
Status CheckAbsolutePath(const std::string& what, const std::string& path);

// "a regular file", "a directory", "a symlink", "a FIFO", "a socket", "a character device", ...
std::string FileTypeName(mode_t mode);

// Opens a directory the caller names (symlinks in `path` are the caller's choice and followed).
StatusOr<Fd> OpenDirectory(const std::string& path);

// Opens `rel` (CheckRelativePath) below the directory `dir` with `flags`, never through a
// symlink and never out of `dir`.
StatusOr<Fd> OpenBeneath(int dir, const std::string& rel, int flags, mode_t mode = 0);

// Opens the regular file `rel` below `dir` for reading; *st receives its status when non-null.
StatusOr<Fd> OpenRegularBeneath(int dir, const std::string& rel, struct stat* st = nullptr);

// Opens `name` (one component) in `dir` for writing, creating it (mode 0644) where missing, and
// empties it. Only a regular file with a single link is written: a symlink, a hard link to a file
// elsewhere, a FIFO or a device in its place is an error naming it, and nothing is changed.
StatusOr<Fd> CreateRegularIn(int dir, const std::string& name);

// The directory `name` (one component) in `dir`, created (mode) where missing; a symlink or
// anything else in its place is an error.
StatusOr<Fd> MakeDirectoryIn(int dir, const std::string& name, mode_t mode);

// Calls visit(rel, status) for every entry below `dir`, depth first, without following symlinks
// (a symlinked directory is visited as a symlink, never entered). Stops at the first error.
// Bounded: deeper than 32 levels or more than 1,000,000 entries is an error.
Status WalkBeneath(
    int dir, const std::function<Status(const std::string& rel, const struct stat& st)>& visit);

}  // namespace paladin::ckpt

#endif  // PALADIN_CKPT_BENEATH_H_
