// OwnedDir (paladin/migrate/owned_dir.h): a folder's owner shown by a lock that dies with it.
#include "paladin/migrate/owned_dir.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "paladin/migrate/migrate.h"

namespace paladin::migrate {

namespace fs = std::filesystem;

namespace {

constexpr const char* kOwnerFile = ".owner";
constexpr const char* kOwnerFileNew = ".owner-new";

// Locks a new owner file in `dir` and only then gives it the name a sweep looks for: a sweep
// never finds `.owner` unlocked while its owner lives (the lock is the open file's, and a rename
// keeps it).
StatusOr<int> LockAsOwner(const std::string& dir) {
  const std::string fresh = dir + "/" + kOwnerFileNew;
  unlink(fresh.c_str());  // left by a claimer of this folder that died before its rename
  const int fd = open(fresh.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return IoError("cannot make " + fresh + ": " + std::strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0 ||
      rename(fresh.c_str(), (dir + "/" + kOwnerFile).c_str()) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    unlink(fresh.c_str());
    return IoError("cannot take " + dir + " as this process's: " + why);
  }
  return fd;
}

}  // namespace

OwnedDir::~OwnedDir() {
  if (lock_fd_ >= 0) close(lock_fd_);
}

OwnedDir::OwnedDir(OwnedDir&& other) noexcept
    : path_(std::move(other.path_)), lock_fd_(other.lock_fd_) {
  other.path_.clear();
  other.lock_fd_ = -1;
}

OwnedDir& OwnedDir::operator=(OwnedDir&& other) noexcept {
  if (this != &other) {
    if (lock_fd_ >= 0) close(lock_fd_);
    path_ = std::move(other.path_);
    lock_fd_ = other.lock_fd_;
    other.path_.clear();
    other.lock_fd_ = -1;
  }
  return *this;
}

StatusOr<OwnedDir> OwnedDir::MakeUnique(const std::string& parent, const std::string& prefix) {
  std::error_code ec;
  fs::create_directories(parent, ec);
  std::string templ = parent + "/" + prefix + ".XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {  // mode 0700
    return IoError("cannot make a private folder under " + parent + ": " + std::strerror(errno));
  }
  StatusOr<int> fd = LockAsOwner(templ);
  if (!fd.ok()) {
    fs::remove_all(templ, ec);
    return fd.status();
  }
  OwnedDir d;
  d.path_ = templ;
  d.lock_fd_ = *fd;
  return d;
}

StatusOr<OwnedDir> OwnedDir::Claim(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(fs::path(dir).parent_path(), ec);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return IoError("cannot make " + dir + ": " + std::strerror(errno));
  }
  StatusOr<int> fd = LockAsOwner(dir);
  if (!fd.ok()) return fd.status();
  OwnedDir d;
  d.path_ = dir;
  d.lock_fd_ = *fd;
  return d;
}

std::vector<std::string> RemoveOrphanedDirs(const std::string& parent, const std::string& prefix) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || name.rfind(".owner", 0) == 0) continue;
    const std::string dir = entry.path().string();
    struct stat st {};
    if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) continue;
    const int fd = open((dir + "/" + kOwnerFile).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;  // not an owned folder, or one being made
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      std::error_code gone;
      fs::remove_all(dir, gone);
      if (!gone) removed.push_back(dir);
    }
    close(fd);
  }
  return removed;
}

std::vector<std::string> RemoveOrphanedMoveFolders(const std::vector<std::string>& move_dirs) {
  std::error_code ec;
  const std::string temp = fs::temp_directory_path(ec).string();
  // paladin-page-tls.*: the page stream's keys of a Paladin before the sealed relays.
  std::vector<std::pair<std::string, std::string>> where = {{temp, "paladin-page-tls."},
                                                            {"/dev/shm", "paladin-pages."}};
  for (const std::string& dir : move_dirs) where.emplace_back(dir, "");
  std::vector<std::string> removed;
  for (const auto& [parent, prefix] : where) {
    if (parent.empty()) continue;
    std::vector<std::string> here = RemoveOrphanedDirs(parent, prefix);
    removed.insert(removed.end(), here.begin(), here.end());
  }
  return removed;
}

}  // namespace paladin::migrate
