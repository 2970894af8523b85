// A workload's control group: host memory, CPU accounting and pids, on cgroup v2 or on the v1
// controllers (memory, cpuacct, pids), whichever the machine mounts. Groups live under
// <mount>/paladin/<name>. Creating one needs write access to the hierarchy (root, or a
// delegated subtree).
#ifndef PALADIN_BASE_CGROUP_H_
#define PALADIN_BASE_CGROUP_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "paladin/base/status.h"

namespace paladin::base {

// One line of /proc/PID/cgroup ("ID:CONTROLLERS:PATH"): a v1 hierarchy names its controllers,
// the unified (v2) one none.
struct CgroupLine {
  std::string controllers;  // "" for the unified hierarchy
  std::string path;         // the group within that hierarchy, "/..."
};
// The lines of /proc/PID/cgroup; none where it cannot be read. Malformed lines are skipped.
std::vector<CgroupLine> CgroupsOf(pid_t pid);

class CgroupsLock;

class Cgroup {
 public:
  // "v2", "v1", or "none".
  static std::string Version();
  static StatusOr<Cgroup> Create(const std::string& name);
  // The group a running workload was put in, without creating anything.
  static Cgroup Existing(const std::string& name);

  Status Add(pid_t pid) const;
  // 0 lifts the limit.
  Status SetMemoryLimit(uint64_t bytes) const;
  uint64_t MemoryLimit() const;  // 0 when none
  uint64_t MemoryBytes() const;
  double CpuSeconds() const;
  // Removes the (empty) group, holding CgroupsLock exclusively (waiting for it).
  Status Remove() const;
  // The same, for a caller that holds it already.
  Status RemoveHolding(const CgroupsLock& held) const;
  // Removes the group once the process `root` has ended (and its namespace with it), from a
  // detached watcher process, for a caller that returns while the job runs on (`paladin
  // restore`: CRIU recreates a restored job's group, and nothing else would remove it). The
  // watcher holds a pidfd, not the pid, so a reused pid cannot fool it; it retries the removal
  // for up to 10 s while the namespace's last processes exit, and holds no descriptor of the
  // caller's. It takes CgroupsLock exclusively for each try, as Remove does.
  Status RemoveWhenGone(pid_t root) const;
  // The name of the group under paladin/ that process `pid` is in ("" for none), from
  // /proc/PID/cgroup.
  static std::string Of(pid_t pid);
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  bool v2_ = false;
  std::vector<std::string> dirs_;  // v2: one; v1: memory, cpuacct, pids
};

// A lock on the places a job has on this machine that a copy restored here takes over by name
// (its group under paladin/, its run directory): shared by a restore from before it makes them
// its own until the job's record names the restored copy (CRIU makes a missing group, or takes
// the one it finds, and moves the processes in later), exclusive while a group or a run
// directory is removed. Whoever cleans up after an old copy of the job (its supervisor after a
// checkpoint, an agent forgetting a copy) therefore never takes a place from under a restore of
// the same job that began in the meantime: it waits, then finds the group in use and the record
// another copy's, and leaves them. The lock is a file of root's, /run/paladin/places.lock (mode
// 0600), which no workload can open; a process that cannot make or open it (not root: it makes
// no groups either) holds nothing. The descriptor is close-on-exec; a child forked while it is
// held and that does not exec holds the lock with it, so such a child closes its inherited
// descriptors.
class CgroupsLock {
 public:
  static CgroupsLock Shared();
  static CgroupsLock Exclusive();
  // Exclusive when nobody holds the lock now, nothing while a restore does: for a caller that
  // must not wait (an agent's loop, whose heartbeats keep its lease).
  static std::optional<CgroupsLock> TryExclusive();
  CgroupsLock(CgroupsLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  CgroupsLock& operator=(CgroupsLock&&) = delete;
  CgroupsLock(const CgroupsLock&) = delete;
  CgroupsLock& operator=(const CgroupsLock&) = delete;
  ~CgroupsLock();

 private:
  explicit CgroupsLock(int operation);
  CgroupsLock() = default;
  int fd_ = -1;
};

}  // namespace paladin::base

#endif  // PALADIN_BASE_CGROUP_H_
