#include "paladin/base/cgroup.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace paladin::base {

namespace fs = std::filesystem;

namespace {

constexpr const char* kRoot = "/sys/fs/cgroup";
constexpr uint64_t kV1Unlimited = 0x7FFFFFFFFFFFF000ull;

// Whether `path` exists (false where it cannot be told: this library throws nothing).
bool Exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

bool IsV2() {
  return Exists(std::string(kRoot) + "/cgroup.controllers") &&
         !Exists(std::string(kRoot) + "/memory");
}

// A counter the kernel wrote; 0 where the text is not a number.
uint64_t Number(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = strtoull(text.c_str(), &end, 10);
  return errno != 0 || end == text.c_str() ? 0 : value;
}

Status WriteValue(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  out << value;
  out.flush();
  if (!out) return IoError("cannot write '" + value + "' to " + path + ": " + strerror(errno));
  return Status::Ok();
}

std::string ReadValue(const std::string& path) {
  std::ifstream in(path);
  std::string value;
  in >> value;
  return value;
}

// CgroupsLock's file. Not the groups' directory: any user may open that one and hold a lock on
// it, and a workload could then stop every restore and clean-up of the machine.
constexpr const char* kLockDir = "/run/paladin";
constexpr const char* kLockFile = "/run/paladin/places.lock";

// Opens the lock's file, made where missing (mode 0600), never through a link; -1 where it
// cannot be, or is not a file of this user's (not root: then there is nothing to lock). System
// calls only: the detached watcher of RemoveWhenGone calls it after a fork.
int OpenLockFile() {
  (void)mkdir(kLockDir, 0755);
  const int fd = open(kLockFile, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & 077) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Opens and locks the lock's file (LOCK_SH or LOCK_EX), waiting as long as it takes; -1 where
// it cannot be opened. System calls only, as OpenLockFile.
int LockFile(int operation) {
  const int fd = OpenLockFile();
  if (fd < 0) return -1;
  while (flock(fd, operation) != 0) {
    if (errno != EINTR) {
      close(fd);
      return -1;
    }
  }
  return fd;
}

}  // namespace

CgroupsLock::CgroupsLock(int operation) : fd_(LockFile(operation)) {}

CgroupsLock CgroupsLock::Shared() { return CgroupsLock(LOCK_SH); }

CgroupsLock CgroupsLock::Exclusive() { return CgroupsLock(LOCK_EX); }

std::optional<CgroupsLock> CgroupsLock::TryExclusive() {
  CgroupsLock lock;
  lock.fd_ = OpenLockFile();
  if (lock.fd_ < 0) return lock;  // nothing to lock: nothing to wait for
  while (flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return std::nullopt;
    if (errno != EINTR) break;  // unlockable: as where there is no directory
  }
  return lock;
}

CgroupsLock::~CgroupsLock() {
  if (fd_ >= 0) close(fd_);
}

std::string Cgroup::Version() {
  if (IsV2()) return "v2";
  if (Exists(std::string(kRoot) + "/memory")) return "v1";
  return "none";
}

Cgroup Cgroup::Existing(const std::string& name) {
  Cgroup g;
  g.name_ = name;
  g.v2_ = IsV2();
  if (g.v2_) {
    g.dirs_ = {std::string(kRoot) + "/paladin/" + name};
  } else {
    for (const char* c : {"memory", "cpuacct", "pids"}) {
      g.dirs_.push_back(std::string(kRoot) + "/" + c + "/paladin/" + name);
    }
  }
  return g;
}

StatusOr<Cgroup> Cgroup::Create(const std::string& name) {
  if (Version() == "none") return FailedPrecondition("no cgroup hierarchy at /sys/fs/cgroup");
  Cgroup g = Existing(name);
  if (g.v2_) {
    // Controllers must be enabled in every ancestor's subtree_control.
    (void)WriteValue(std::string(kRoot) + "/cgroup.subtree_control", "+memory +cpu +pids");
    std::error_code ec;
    fs::create_directories(std::string(kRoot) + "/paladin", ec);
    (void)WriteValue(std::string(kRoot) + "/paladin/cgroup.subtree_control", "+memory +cpu +pids");
  }
  for (const std::string& dir : g.dirs_) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return IoError("cannot create cgroup " + dir + ": " + ec.message());
  }
  return g;
}

Status Cgroup::Add(pid_t pid) const {
  for (const std::string& dir : dirs_) {
    PALADIN_RETURN_IF_ERROR(WriteValue(dir + "/cgroup.procs", std::to_string(pid)));
  }
  return Status::Ok();
}

Status Cgroup::SetMemoryLimit(uint64_t bytes) const {
  if (v2_) return WriteValue(dirs_[0] + "/memory.max", bytes == 0 ? "max" : std::to_string(bytes));
  return WriteValue(dirs_[0] + "/memory.limit_in_bytes",
                    bytes == 0 ? std::to_string(kV1Unlimited) : std::to_string(bytes));
}

uint64_t Cgroup::MemoryLimit() const {
  const std::string v = ReadValue(dirs_[0] + (v2_ ? "/memory.max" : "/memory.limit_in_bytes"));
  if (v.empty() || v == "max") return 0;
  const uint64_t bytes = Number(v);
  return bytes >= kV1Unlimited ? 0 : bytes;
}

uint64_t Cgroup::MemoryBytes() const {
  const std::string v = ReadValue(dirs_[0] + (v2_ ? "/memory.current" : "/memory.usage_in_bytes"));
  return Number(v);
}

double Cgroup::CpuSeconds() const {
  if (v2_) {
    std::ifstream in(dirs_[0] + "/cpu.stat");
    std::string key;
    uint64_t value = 0;
    while (in >> key >> value) {
      if (key == "usage_usec") return static_cast<double>(value) / 1e6;
    }
    return 0;
  }
  const std::string v = ReadValue(dirs_[1] + "/cpuacct.usage");
  return static_cast<double>(Number(v)) / 1e9;
}

Status Cgroup::Remove() const { return RemoveHolding(CgroupsLock::Exclusive()); }

Status Cgroup::RemoveHolding(const CgroupsLock& /*held*/) const {
  for (const std::string& dir : dirs_) {
    if (rmdir(dir.c_str()) != 0 && errno != ENOENT) {
      return IoError("cannot remove cgroup " + dir + ": " + strerror(errno));
    }
  }
  return Status::Ok();
}

std::vector<CgroupLine> CgroupsOf(pid_t pid) {
  std::vector<CgroupLine> lines;
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    lines.push_back({line.substr(a + 1, b - a - 1), line.substr(b + 1)});
  }
  return lines;
}

std::string Cgroup::Of(pid_t pid) {
  // "/paladin/NAME[/...]" in any hierarchy.
  const std::string prefix = "/paladin/";
  for (const CgroupLine& line : CgroupsOf(pid)) {
    if (line.path.rfind(prefix, 0) != 0) continue;
    const std::string rest = line.path.substr(prefix.size());
    std::string name = rest.substr(0, rest.find('/'));
    if (!name.empty() && name != "." && name != "..") return name;
  }
  return "";
}

Status Cgroup::RemoveWhenGone(pid_t root) const {
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, root, 0));
  if (pidfd < 0) return IoError("pidfd_open " + std::to_string(root) + ": " + strerror(errno));
  // Everything the watcher needs, prepared here: after the fork it makes system calls only.
  std::vector<const char*> dirs;
  for (const std::string& dir : dirs_) dirs.push_back(dir.c_str());
  const pid_t first = fork();
  if (first < 0) {
    const std::string why = strerror(errno);
    close(pidfd);
    return IoError("cannot start the cgroup's watcher: " + why);
  }
  if (first == 0) {
    // Detached from the caller's session, and a grandchild, so that init reaps it.
    setsid();
    if (fork() != 0) _exit(0);
    const int null = open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd) dup2(null, fd);
    close_range(3, pidfd - 1, 0);
    close_range(pidfd + 1, ~0U, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    pollfd watch = {pidfd, POLLIN, 0};
    while (poll(&watch, 1, -1) < 0 && errno == EINTR) {
    }
    const timespec pause = {0, 100L * 1000 * 1000};
    for (int attempt = 0; attempt < 100; ++attempt) {
      bool left = false;
      const int lock = LockFile(LOCK_EX);
      for (const char* dir : dirs) left |= rmdir(dir) != 0 && errno != ENOENT;
      if (lock >= 0) close(lock);
      if (!left) break;
      nanosleep(&pause, nullptr);
    }
    _exit(0);
  }
  close(pidfd);
  int status = 0;
  while (waitpid(first, &status, 0) < 0 && errno == EINTR) {
  }
  return Status::Ok();
}

}  // namespace paladin::base
