#include "paladin/ckpt/beneath.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace paladin::ckpt {

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = other.Release();
  }
  return *this;
}

int Fd::Release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void Fd::Reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

namespace {

std::vector<std::string> Components(const std::string& path) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find('/', begin);
    if (end == std::string::npos) end = path.size();
    parts.push_back(path.substr(begin, end - begin));
    begin = end + 1;
  }
  return parts;
}

// What an errno of an open below a directory means for `rel`.
Status OpenError(const std::string& rel, int err) {
  switch (err) {
    case ELOOP:
      return InvalidArgument(rel + ": is a symlink or passes through one (not followed)");
    case EXDEV:
      return InvalidArgument(rel + ": leads out of its directory");
    case ENOENT:
      return NotFound(rel + ": missing");
    case ENOTDIR:
      return InvalidArgument(rel + ": a component of it is not a directory");
    case ENXIO:
    case EAGAIN:
      return InvalidArgument(rel + ": not a regular file (nothing at the other end of it)");
    default:
      return IoError(rel + ": " + strerror(err));
  }
}

// One O_NOFOLLOW step at a time, for kernels without openat2 (before 5.6). Returns -1 with errno.
int OpenByComponents(int dir, const std::string& rel, int flags, mode_t mode) {
  const std::vector<std::string> parts = Components(rel);
  Fd current;
  int at = dir;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    struct stat st {};
    if (fstatat(at, parts[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return -1;
    if (S_ISLNK(st.st_mode)) {
      errno = ELOOP;
      return -1;
    }
    const int next = openat(at, parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return -1;
    current = Fd(next);
    at = current.get();
  }
  const int fd = openat(at, parts.back().c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return -1;
  struct stat st {};
  if ((flags & O_PATH) != 0 && fstat(fd, &st) == 0 && S_ISLNK(st.st_mode)) {
    close(fd);
    errno = ELOOP;
    return -1;
  }
  return fd;
}

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

}  // namespace

Status CheckRelativePath(const std::string& what, const std::string& path) {
  if (path.empty()) return InvalidArgument(what + " is empty");
  if (path.find('\0') != std::string::npos) {
    return InvalidArgument(what + " '" + path.substr(0, path.find('\0')) +
                           "...' contains a NUL byte");
  }
  if (path[0] == '/') {
    return InvalidArgument(what + " '" + path + "' is absolute (it must stay inside the image)");
  }
  for (const std::string& part : Components(path)) {
    if (part.empty() || part == "." || part == "..") {
      std::string message = what;
      message.append(" '").append(path).append("' has a '").append(part);
      message.append("' component (it must stay inside the image)");
      return InvalidArgument(message);
    }
  }
  return Status::Ok();
}

Status CheckAbsolutePath(const std::string& what, const std::string& path) {
  if (path.find('\0') != std::string::npos) {
    return InvalidArgument(what + " '" + path.substr(0, path.find('\0')) +
                           "...' contains a NUL byte");
  }
  if (path.empty() || path[0] != '/') {
    return InvalidArgument(what + " '" + path + "' is not an absolute path");
  }
  for (const std::string& part : Components(path)) {
    if (part == "..") {
      std::string message = what;
      message.append(" '").append(path).append("' has a '..' component");
      return InvalidArgument(message);
    }
  }
  return Status::Ok();
}

std::string FileTypeName(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symlink";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "of an unknown file type";
}

StatusOr<Fd> OpenDirectory(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(path + ": no such directory");
    if (errno == ENOTDIR) return InvalidArgument(path + ": not a directory");
    return IoError("cannot open " + path + ": " + strerror(errno));
  }
  return Fd(fd);
}

StatusOr<Fd> OpenBeneath(int dir, const std::string& rel, int flags, mode_t mode) {
  PALADIN_RETURN_IF_ERROR(CheckRelativePath("path", rel));
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = (flags & O_CREAT) != 0 ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd = syscall(SYS_openat2, dir, rel.c_str(), &how, sizeof how);
  if (fd < 0 && (errno == ENOSYS || errno == EPERM)) {
    // No openat2 (or a seccomp filter that refuses it): the same walk by hand.
    fd = OpenByComponents(dir, rel, flags, mode);
  }
  if (fd < 0) return OpenError(rel, errno);
  return Fd(static_cast<int>(fd));
}

StatusOr<Fd> OpenRegularBeneath(int dir, const std::string& rel, struct stat* out) {
  // Looked at first without opening it for reading: opening a FIFO blocks and opening a device
  // may act on it.
  StatusOr<Fd> path = OpenBeneath(dir, rel, O_PATH | O_NOFOLLOW);
  if (!path.ok()) return path.status();
  struct stat first {};
  if (fstat(path->get(), &first) != 0) return OpenError(rel, errno);
  if (!S_ISREG(first.st_mode)) {
    return InvalidArgument(rel + ": " + FileTypeName(first.st_mode) + ", not a regular file");
  }
  StatusOr<Fd> file = OpenBeneath(dir, rel, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (!file.ok()) return file.status();
  struct stat st {};
  if (fstat(file->get(), &st) != 0) return OpenError(rel, errno);
  if (!S_ISREG(st.st_mode) || !SameFile(first, st)) {
    return InvalidArgument(rel + ": replaced while it was being opened");
  }
  if (out != nullptr) *out = st;
  return file;
}

StatusOr<Fd> CreateRegularIn(int dir, const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    return InvalidArgument("'" + name + "' is not a file name");
  }
  struct stat before {};
  if (fstatat(dir, name.c_str(), &before, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(before.st_mode)) {
    return InvalidArgument(name + ": " + FileTypeName(before.st_mode) + ", not a regular file");
  }
  // Not O_TRUNC: a file is emptied only once it is known to be the one it should be.
  const int fd = openat(dir, name.c_str(),
                        O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644);
  if (fd < 0) return OpenError(name, errno);
  Fd file(fd);
  struct stat st {};
  if (fstat(fd, &st) != 0) return OpenError(name, errno);
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgument(name + ": " + FileTypeName(st.st_mode) + ", not a regular file");
  }
  if (st.st_nlink != 1) {
    return InvalidArgument(name + ": has " + std::to_string(st.st_nlink) +
                           " links (a hard link to a file elsewhere is not written)");
  }
  if (ftruncate(fd, 0) != 0) return IoError("cannot empty " + name + ": " + strerror(errno));
  return file;
}

StatusOr<Fd> MakeDirectoryIn(int dir, const std::string& name, mode_t mode) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    return InvalidArgument("'" + name + "' is not a directory name");
  }
  if (mkdirat(dir, name.c_str(), mode) != 0 && errno != EEXIST) {
    return IoError("cannot create " + name + ": " + strerror(errno));
  }
  struct stat st {};
  if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return OpenError(name, errno);
  if (!S_ISDIR(st.st_mode)) {
    return InvalidArgument(name + ": " + FileTypeName(st.st_mode) + ", not a directory");
  }
  const int fd = openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return OpenError(name, errno);
  return Fd(fd);
}

namespace {

struct Walk {
  const std::function<Status(const std::string&, const struct stat&)>& visit;
  int64_t entries = 0;
};

constexpr int kMaxDepth = 32;
constexpr int64_t kMaxEntries = 1000000;

Status WalkDir(int dir, const std::string& prefix, int depth, Walk* walk) {
  if (depth > kMaxDepth) return InvalidArgument(prefix + ": nested more than 32 levels deep");
  const int fd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot list " + (prefix.empty() ? "." : prefix));
  DIR* listing = fdopendir(fd);
  if (listing == nullptr) {
    close(fd);
    return IoError("cannot list " + (prefix.empty() ? "." : prefix));
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(listing)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (++walk->entries > kMaxEntries) {
      closedir(listing);
      return InvalidArgument("more than 1,000,000 entries");
    }
    names.push_back(name);
  }
  closedir(listing);
  for (const std::string& name : names) {
    const std::string rel = prefix.empty() ? name : std::string(prefix).append("/").append(name);
    struct stat st {};
    if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // gone meanwhile
      return IoError(rel + ": " + strerror(errno));
    }
    PALADIN_RETURN_IF_ERROR(walk->visit(rel, st));
    if (!S_ISDIR(st.st_mode)) continue;
    const int sub = openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) return OpenError(rel, errno);
    Fd child(sub);
    PALADIN_RETURN_IF_ERROR(WalkDir(child.get(), rel, depth + 1, walk));
  }
  return Status::Ok();
}

}  // namespace

Status WalkBeneath(
    int dir, const std::function<Status(const std::string& rel, const struct stat& st)>& visit) {
  Walk walk{visit};
  return WalkDir(dir, "", 0, &walk);
}

}  // namespace paladin::ckpt
