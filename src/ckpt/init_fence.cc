// paladin-workload-init's half of the node's fence: it, not the agent, stops the job when the
// agent's lease runs out, so a dead, stopped or cut-off agent still fences its jobs
// (docs/agent.md, "Fencing"). The state lives in this process's memory and the descriptor at
// kLeaseFd, both of which CRIU dumps and restores; after a restore elsewhere that descriptor is
// the restoring agent's lease (--inherit-fd), so the job follows the node it now runs on.
#include "init_fence.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "paladin/ckpt/fence.h"

namespace paladin::ckpt::fence {

namespace {

bool leased = false;
Watch watch;

// The processes the job had stopped itself when the fence came down (their pids in the job's
// namespace): the thaw leaves them stopped.
constexpr int kMaxSelfStopped = 1024;
pid_t self_stopped[kMaxSelfStopped];
int self_stopped_count = 0;

// Whether /proc is the job's own (its mount namespace), where pids are the namespace's.
bool OwnProc() {
  char target[16];
  const ssize_t n = readlink("/proc/self", target, sizeof target);
  return n == 1 && target[0] == '1';
}

// Calls each(pid, state) for every other process of the job, from its own /proc.
template <typename F>
void ForEachOtherProcess(F each) {
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || pid <= 1) continue;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char stat[512];
    const ssize_t n = read(fd, stat, sizeof stat - 1);
    close(fd);
    if (n <= 0) continue;
    stat[n] = '\0';
    const char* name_end = std::strrchr(stat, ')');
    each(static_cast<pid_t>(pid), name_end != nullptr && name_end[1] == ' ' ? name_end[2] : '?');
  }
  closedir(dir);
}

void Freeze(bool first) {
  if (first) {
    self_stopped_count = 0;
    if (OwnProc()) {
      ForEachOtherProcess([](pid_t pid, char state) {
        if (state == 'T' && self_stopped_count < kMaxSelfStopped) {
          self_stopped[self_stopped_count++] = pid;
        }
      });
    }
  }
  kill(-1, SIGSTOP);
}

void Thaw() {
  if (self_stopped_count == 0 || !OwnProc()) {
    kill(-1, SIGCONT);
  } else {
    ForEachOtherProcess([](pid_t pid, char) {
      for (int i = 0; i < self_stopped_count; ++i) {
        if (self_stopped[i] == pid) return;
      }
      kill(pid, SIGCONT);
    });
  }
  self_stopped_count = 0;
}

uint64_t BootNs() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

bool AdoptLeaseFd() {
  // kill(-1) is confined to the job only when this is its namespace's pid 1.
  if (getpid() != 1) return false;
  if (fcntl(kLeaseFd, F_SETFD, FD_CLOEXEC) != 0) return false;
  leased = true;
  return true;
}

bool Fenced() { return leased && watch.fenced; }

void ReopenLease() {
  if (!leased) return;
  char path[4096];
  const ssize_t n = readlink("/proc/self/fd/10", path, sizeof path - 1);
  if (n <= 0 || path[0] != '/') return;
  path[n] = '\0';
  const int again = open(path, O_RDONLY | O_CLOEXEC);
  if (again < 0) return;
  struct stat held {};
  struct stat found {};
  if (fstat(kLeaseFd, &held) == 0 && fstat(again, &found) == 0 && held.st_dev == found.st_dev &&
      held.st_ino == found.st_ino) {
    (void)dup3(again, kLeaseFd, O_CLOEXEC);
  }
  close(again);
}

void CheckLease() {
  if (!leased) return;
  const uint64_t now = BootNs();
  unsigned char record[kRecordBytes];
  uint64_t deadline = 0;
  Read read = Read::kInvalid;
  // A read that overlaps the agent's write is torn: read again at once.
  for (int attempt = 0; attempt < 3 && read == Read::kInvalid; ++attempt) {
    const ssize_t n = pread(kLeaseFd, record, sizeof record, 0);
    read = Decode(record, static_cast<long>(n), &deadline);
  }
  bool changed = false;
  const Action action = Step(&watch, now, read, deadline, &changed);
  // kill(-1) from a namespace's pid 1 reaches every other process of that namespace, and only
  // those. The stop is repeated while the lease stays out: whoever continued a process meanwhile
  // (a failed migration's resume, a user) is overruled within kPollMs.
  // What the job had stopped itself before the fence stays stopped after it (read from the job's
  // own /proc; without one every process is continued).
  if (action == Action::kFreeze) Freeze(changed);
  if (action == Action::kThaw) Thaw();
  if (changed) {
    std::fprintf(stderr, "paladin-workload-init: %s\n",
                 action == Action::kFreeze
                     ? "the node's lease ran out (its agent lost the server): job stopped"
                     : "the node's lease was renewed: job continues");
  }
}

}  // namespace paladin::ckpt::fence
