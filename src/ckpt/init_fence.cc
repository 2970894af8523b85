// paladin-workload-init's half of the node's fence: it, not the agent, stops the job when the
// agent's lease runs out, so a dead, stopped or cut-off agent still fences its jobs
// (docs/agent.md, "Fencing"). The state lives in this process's memory and the descriptor at
// kLeaseFd, both of which CRIU dumps and restores; after a restore elsewhere that descriptor is
// the restoring agent's lease (--inherit-fd), so the job follows the node it now runs on.
#include "init_fence.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>

#include "paladin/ckpt/fence.h"

namespace paladin::ckpt::fence {

namespace {

bool leased = false;
Watch watch;

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
  if (action == Action::kFreeze) kill(-1, SIGSTOP);
  if (action == Action::kThaw) kill(-1, SIGCONT);
  if (changed) {
    std::fprintf(stderr, "paladin-workload-init: %s\n",
                 action == Action::kFreeze
                     ? "the node's lease ran out (its agent lost the server): job stopped"
                     : "the node's lease was renewed: job continues");
  }
}

}  // namespace paladin::ckpt::fence
