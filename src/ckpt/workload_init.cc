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
// Usage: paladin-workload-init UID GID CWD COMMAND [ARG...]
//   UID, GID: the user and group the command runs as (-1: keep root's); supplementary groups are
//   dropped. CWD: the command's working directory ("-": this program's).
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

namespace {

void Say(const char* what, const char* detail) {
  std::fprintf(stderr, "paladin-workload-init: %s%s: %s\n", what, detail, std::strerror(errno));
}

bool ParseId(const char* text, long* id) {
  char* end = nullptr;
  errno = 0;
  *id = std::strtol(text, &end, 10);
  return errno == 0 && end != text && *end == '\0' && *id >= -1 && *id <= 0x7fffffffL;
}

}  // namespace

int main(int argc, char** argv) {
  long uid = -1;
  long gid = -1;
  if (argc < 5 || !ParseId(argv[1], &uid) || !ParseId(argv[2], &gid)) {
    std::fprintf(stderr, "usage: paladin-workload-init UID GID CWD COMMAND [ARG...]\n");
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
    execvp(argv[4], argv + 4);
    Say("cannot run ", argv[4]);
    _exit(127);
  }
  for (;;) {
    siginfo_t info;
    const int signo = sigwaitinfo(&all, &info);
    if (signo < 0) continue;  // EINTR, e.g. when CRIU let it go after a dump or a restore
    if (signo != SIGCHLD) {
      kill(child, signo);
      continue;
    }
    int status = 0;
    for (pid_t done; (done = waitpid(-1, &status, WNOHANG)) > 0;) {
      if (done != child) continue;  // an orphan of the namespace
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }
}
