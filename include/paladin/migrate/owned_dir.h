// A move's private folder on this host (its page-stream keys, its streamed pages, a fleet
// agent's folder for a move it receives or sends) that says whether its owner still lives: the
// owning process holds an exclusive flock on the folder's `.owner` file for as long as it uses the
// folder. The kernel drops the lock when that process dies, however it dies, so a later sweep (the
// next move's, the next agent's start) can remove a dead owner's folder and never a live move's
// (docs/lazy_migration.md, "Left behind").
#ifndef PALADIN_MIGRATE_OWNED_DIR_H_
#define PALADIN_MIGRATE_OWNED_DIR_H_

#include <string>
#include <vector>

#include "paladin/base/status.h"

namespace paladin::migrate {

// Not copyable; movable. The lock goes with the object (the folder stays: its owner removes it).
// The descriptor is close-on-exec, so programs this process runs (CRIU) never hold the lock.
class OwnedDir {
 public:
  OwnedDir() = default;
  ~OwnedDir();
  OwnedDir(OwnedDir&& other) noexcept;
  OwnedDir& operator=(OwnedDir&& other) noexcept;
  OwnedDir(const OwnedDir&) = delete;
  OwnedDir& operator=(const OwnedDir&) = delete;

  // A new folder PARENT/PREFIX.XXXXXX (mode 0700), owned by this process.
  static StatusOr<OwnedDir> MakeUnique(const std::string& parent, const std::string& prefix);
  // Takes `dir` (made if missing, mode 0700) as this process's. Its caller makes sure that no
  // live process owns it (a fleet agent's folder named after its command, a receiver's after its
  // port): an earlier owner's mark is replaced.
  static StatusOr<OwnedDir> Claim(const std::string& dir);

  const std::string& path() const { return path_; }
  bool held() const { return lock_fd_ >= 0; }

 private:
  std::string path_;
  int lock_fd_ = -1;
};

// Removes each folder in `parent` whose name starts with `prefix` ("" for any) and whose owner
// died: a real folder (not a link) of this user with a `.owner` file that nobody holds locked.
// A folder without `.owner` (made by an older Paladin, or being made now) is left alone. Returns
// the folders removed.
std::vector<std::string> RemoveOrphanedDirs(const std::string& parent, const std::string& prefix);

}  // namespace paladin::migrate

#endif  // PALADIN_MIGRATE_OWNED_DIR_H_
