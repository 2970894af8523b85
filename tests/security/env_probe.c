/* Loaded into a job through LD_PRELOAD or LD_AUDIT by tests/security/env_injection_test.cc: it
 * records which process loaded it and as whom, so the test can tell whether a team's variables
 * reached a root process (paladin-workload-init) or only the job's own, unprivileged one. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void record(const char* how) {
  const char* out = getenv("PALADIN_TEST_PROBE_OUT");
  if (out == NULL) return;
  char comm[64] = "?";
  const int c = open("/proc/self/comm", O_RDONLY);
  if (c >= 0) {
    const ssize_t n = read(c, comm, sizeof comm - 1);
    comm[n > 0 ? n : 0] = '\0';
    if (n > 0 && comm[n - 1] == '\n') comm[n - 1] = '\0';
    close(c);
  }
  char line[160];
  const int len = snprintf(line, sizeof line, "%s euid=%d comm=%s\n", how, (int)geteuid(), comm);
  const int fd = open(out, O_WRONLY | O_APPEND | O_CREAT, 0666);
  if (fd < 0) return;
  if (write(fd, line, (size_t)len) < 0) { /* nothing to do */
  }
  close(fd);
}

__attribute__((constructor)) static void loaded(void) { record("preload"); }

/* LD_AUDIT's entry point: the loader calls it in every process that names this library. */
unsigned int la_version(unsigned int version) {
  record("audit");
  return version;
}
