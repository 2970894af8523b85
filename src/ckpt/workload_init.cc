// paladin-workload-init: the root of a job that runs as another, unprivileged user in a PID
// namespace of its own (ckpt::StartWorkload starts it as that namespace's pid 1, as root).
//
// Why: CRIU needs a /proc of the dumped tree's PID namespace, which its parasite code mounts from
// inside the tree's root task ("proc.crtools" in that task's working directory) when the task's
// /proc is the host's. A task that has switched to an unprivileged user cannot mount, so CRIU
// refuses it ("can't dump unprivileged task whose /proc doesn't belong to it"). With this program
// as the root, the task that mounts is root, the command runs unprivileged as its only child, and
// the job is dumped and restored with the same CRIU options as a root job. See docs/ckpt.md.
//
// Usage: paladin-workload-init [--lease] [--env-fd FD] UID GID CWD COMMAND [ARG...]
//   --lease: descriptor 10 is the node agent's lease; the job is stopped while it is out
//   (init_fence.cc, docs/agent.md "Fencing").
//   UID, GID: the user and group the command runs as (-1: keep root's); supplementary groups are
//   dropped. CWD: the command's working directory ("-": this program's). FD: a descriptor holding
//   the command's environment (NUL-terminated NAME=VALUE entries); without it the command gets
//   this program's. The job's environment is a team's to choose: it must never reach this
//   program, which runs as root (LD_PRELOAD would load a team's code into it). So this program
//   is started with a fixed environment, reads the job's from FD, closes FD, and applies it only
//   in the command's process, after the switch of user (ckpt::StartWorkload).
// It forwards every signal it can catch to the command, reaps every orphan of the namespace, and
// exits with the command's exit status (128 + N when signal N killed it, as a shell reports it).
//
// Dumped by CRIU with every job it leads: plain libc, no sanitizers, no Paladin libraries.
#include <grp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "init_fence.h"
#include "paladin/ckpt/fence.h"

extern char** environ;

namespace {

constexpr size_t kMaxEnvironmentBytes = 4 << 20;

void Say(const char* what, const char* detail) {
  std::fprintf(stderr, "paladin-workload-init: %s%s: %s\n", what, detail, std::strerror(errno));
}

bool ParseId(const char* text, long* id) {
  char* end = nullptr;
  errno = 0;
  *id = std::strtol(text, &end, 10);
  return errno == 0 && end != text && *end == '\0' && *id >= -1 && *id <= 0x7fffffffL;
}

// The NUL-terminated entries held by `fd`, as an environ array (null-terminated), or null when
// they cannot be read. Closes `fd`: nothing of it stays in the job (nor in its checkpoints).
char** ReadEnvironment(int fd) {
  size_t size = 0;
  size_t capacity = size_t{64} * 1024;
  char* text = static_cast<char*>(std::malloc(capacity + 1));
  for (;;) {
    if (text == nullptr) break;
    const ssize_t n = pread(fd, text + size, capacity - size, static_cast<off_t>(size));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::free(text);
      text = nullptr;
      break;
    }
    if (n == 0) break;
    size += static_cast<size_t>(n);
    if (size == capacity) {
      if (capacity >= kMaxEnvironmentBytes) {
        errno = E2BIG;
        std::free(text);
        text = nullptr;
        break;
      }
      capacity *= 2;
      char* grown = static_cast<char*>(std::realloc(text, capacity + 1));
      if (grown == nullptr) std::free(text);
      text = grown;
    }
  }
  close(fd);
  if (text == nullptr) return nullptr;
  if (size > 0 && text[size - 1] != '\0') text[size++] = '\0';  // a last entry without its NUL
  size_t entries = 0;
  for (size_t i = 0; i < size; ++i) entries += text[i] == '\0' ? 1 : 0;
  char** env = static_cast<char**>(std::calloc(entries + 1, sizeof(char*)));
  if (env == nullptr) return nullptr;
  size_t next = 0;
  for (size_t start = 0; start < size; start += std::strlen(text + start) + 1) {
    if (text[start] != '\0') env[next++] = text + start;
  }
  env[next] = nullptr;
  return env;
}

}  // namespace

int main(int argc, char** argv) {
  const bool leased = argc > 1 && std::strcmp(argv[1], "--lease") == 0;
  if (leased) {
    if (!paladin::ckpt::fence::AdoptLeaseFd()) {
      Say("--lease: no lease at descriptor 10, or not pid 1 of a PID namespace", "");
      return 126;
    }
    --argc;
    ++argv;
  }
  char** job_env = environ;
  if (argc >= 3 && std::strcmp(argv[1], "--env-fd") == 0) {
    long fd = -1;
    if (!ParseId(argv[2], &fd) || fd < 0 ||
        (job_env = ReadEnvironment(static_cast<int>(fd))) == nullptr) {
      Say("cannot read the job's environment from descriptor ", argv[2]);
      return 126;
    }
    argc -= 2;
    argv += 2;
  }
  long uid = -1;
  long gid = -1;
  if (argc < 5 || !ParseId(argv[1], &uid) || !ParseId(argv[2], &gid)) {
    std::fprintf(
        stderr,
        "usage: paladin-workload-init [--lease] [--env-fd FD] UID GID CWD COMMAND [ARG...]\n");
    return 2;
  }
  const char* cwd = argv[3];
  // Every signal waits in the queue for sigwaitinfo below; none is lost between the fork and
  // the loop. (A namespace's pid 1 would ignore the ones it has no handler for.)
  sigset_t all;
  sigset_t before;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &before);
  const pid_t child = fork();
  if (child < 0) {
    Say("cannot fork", "");
    return 126;
  }
  if (child == 0) {
    sigprocmask(SIG_SETMASK, &before, nullptr);
    if (std::strcmp(cwd, "-") != 0 && chdir(cwd) != 0) {
      Say("cannot enter ", cwd);
      _exit(126);
    }
    if (gid >= 0 &&
        (setgroups(0, nullptr) != 0 || setresgid(static_cast<gid_t>(gid), static_cast<gid_t>(gid),
                                                 static_cast<gid_t>(gid)) != 0)) {
      Say("cannot switch group", "");
      _exit(126);
    }
    if (uid >= 0 &&
        setresuid(static_cast<uid_t>(uid), static_cast<uid_t>(uid), static_cast<uid_t>(uid)) != 0) {
      Say("cannot switch user", "");
      _exit(126);
    }
    // The job's own environment from here on; execvp searches the job's PATH.
    environ = job_env;
    execvp(argv[4], argv + 4);
    Say("cannot run ", argv[4]);
    _exit(127);
  }
  const timespec poll = {0, paladin::ckpt::fence::kPollMs * 1000000L};
  for (;;) {
    siginfo_t info;
    const int signo = leased ? sigtimedwait(&all, &info, &poll) : sigwaitinfo(&all, &info);
    if (signo < 0 && errno == EINTR) paladin::ckpt::fence::ReopenLease();
    paladin::ckpt::fence::CheckLease();
    // < 0: EINTR (e.g. CRIU let it go after a dump or a restore) or the poll's timeout.
    if (signo < 0) continue;
    if (signo != SIGCHLD) {
      // While fenced, the job stays stopped whoever asks. Paladin's own resume continues this
      // process only: the command may be one the job had stopped itself.
      const bool resume = signo == SIGCONT && info.si_code == SI_QUEUE &&
                          info.si_value.sival_int == paladin::ckpt::fence::kResumeValue;
      if (signo != SIGCONT || (!resume && !paladin::ckpt::fence::Fenced())) kill(child, signo);
      continue;
    }
    int status = 0;
    for (pid_t done; (done = waitpid(-1, &status, WNOHANG)) > 0;) {
      if (done != child) continue;  // an orphan of the namespace
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }
}
