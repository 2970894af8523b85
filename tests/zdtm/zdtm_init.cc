// zdtm_init: the root of a ZDTM static test's job, in the place CRIU's own harness gives the
// test's namespace init.
//
//   zdtm_init [--no-reap] PIDFILE TEST [ARGS...]
//
// A ZDTM test daemonizes: its first process forks the test proper, writes that one's pid to
// PIDFILE once it is ready, and exits. Under `paladin run` the command is pid 1 of the job's PID
// namespace, and a namespace whose pid 1 exits is torn down, so the test cannot be the command.
// This program is: it starts TEST, waits for its first process, then reaps every process of the
// namespace until none is left, and exits 0 (or with the first process's failure, when the test
// could not start). SIGTERM to it (what `paladin run` or the harness send to a job's root) goes
// on to the test's pid from PIDFILE, the way CRIU's harness asks a test to check its state.
// --no-reap leaves the namespace's other orphans unreaped until the test itself has ended (what
// CRIU's namespace init does for a test that sets ZDTM_NOREAP: one that keeps a zombie whose
// parent has exited).
//
// Plain C library calls only: CRIU dumps and restores this process with the test, so it carries
// no sanitizer runtime and no threads.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

volatile sig_atomic_t test_pid = 0;      // the test's pid in this namespace, once it is ready
volatile sig_atomic_t pending_term = 0;  // SIGTERM came before the test was ready

void OnTerm(int) {
  if (test_pid > 0) {
    kill(test_pid, SIGTERM);
  } else {
    pending_term = 1;
  }
}

pid_t ReadPidfile(const char* path) {
  FILE* f = fopen(path, "r");
  if (f == nullptr) return 0;
  long pid = 0;
  if (fscanf(f, "%ld", &pid) != 1) pid = 0;
  fclose(f);
  return static_cast<pid_t>(pid);
}

}  // namespace

int main(int argc, char** argv) {
  bool reap = true;
  if (argc > 1 && strcmp(argv[1], "--no-reap") == 0) {
    reap = false;
    ++argv;
    --argc;
  }
  if (argc < 3) {
    fprintf(stderr, "usage: zdtm_init [--no-reap] PIDFILE TEST [ARGS...]\n");
    return 2;
  }
  struct sigaction sa = {};
  sa.sa_handler = OnTerm;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  const pid_t first = fork();
  if (first < 0) {
    perror("zdtm_init: fork");
    return 1;
  }
  if (first == 0) {
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    execv(argv[2], argv + 2);
    fprintf(stderr, "zdtm_init: cannot run %s: %s\n", argv[2], strerror(errno));
    _exit(127);
  }

  int status = 0;
  while (waitpid(first, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "zdtm_init: %s did not start (status 0x%x)\n", argv[2], status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  const pid_t pid = ReadPidfile(argv[1]);
  if (pid <= 0) {
    fprintf(stderr, "zdtm_init: %s started but wrote no pid to %s\n", argv[2], argv[1]);
    return 1;
  }
  test_pid = pid;
  if (pending_term) kill(pid, SIGTERM);

  // The test's processes are this namespace's orphans (the test itself among them, once its
  // first process has exited): reap them all, then end the job.
  if (!reap) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  for (;;) {
    const pid_t p = waitpid(-1, &status, 0);
    if (p < 0 && errno == ECHILD) break;
  }
  return 0;
}
