// paladin-pause: the first process of every pod of Paladin's test cluster. It holds the pod's
// namespaces open while the pod's containers come and go, reaps the orphans re-parented to it
// (it is PID 1 when the pod shares its PID namespace), and ends at once on SIGINT or SIGTERM.
// Built with `gcc -static` into an image of its own (tests/k8s/oci_image.sh).
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void Stop(int sig) {
  (void)sig;
  _exit(0);
}

static void Reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "-v") == 0) {
    puts("paladin-pause 1");
    return 0;
  }
  if (getpid() != 1) fputs("paladin-pause: not PID 1, orphans are reaped elsewhere\n", stderr);
  struct sigaction stop = {.sa_handler = Stop};
  struct sigaction reap = {.sa_handler = Reap, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
  if (sigaction(SIGINT, &stop, NULL) != 0 || sigaction(SIGTERM, &stop, NULL) != 0 ||
      sigaction(SIGCHLD, &reap, NULL) != 0) {
    perror("paladin-pause: sigaction");
    return 1;
  }
  for (;;) pause();
}
