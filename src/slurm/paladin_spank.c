/*
 * paladin_spank.so: Paladin's SPANK plugin (docs/slurm.md).
 *
 * A step submitted with --paladin-gpu-mem=SIZE (srun or sbatch) runs under `paladin slurm task`:
 * in the task, after SLURM has set it up (environment, task plugins), the plugin replaces the
 * step's command with the shim, which registers the step with the node's Paladin agent, starts
 * the command under the GPU-memory quota (or restores it from its last checkpoint when SLURM
 * restarted the job) and waits for it. The shim is the task's own process, so SLURM tracks,
 * signals and accounts the step as before.
 *
 * plugstack.conf arguments (all optional):
 *   paladin=PATH         the paladin executable (default /usr/local/bin/paladin)
 *   socket=PATH          the node agent's local socket (default /var/lib/paladin/agent/agent.sock)
 *   on_agent_down=run|fail
 *                        when the agent cannot be reached: run the step without Paladin, with a
 *                        warning in its output (default), or fail it with a message
 * Options of srun, sbatch and salloc:
 *   --paladin-gpu-mem=SIZE          the step's GPU-memory quota; without it Paladin stays out
 *   --paladin-on-agent-down=run|fail
 *                                   overrides on_agent_down for this job
 */
#include <errno.h>
#include <slurm/spank.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

SPANK_PLUGIN(paladin, 1)

/* The batch script's step id (slurm/slurm.h). */
#ifndef SLURM_BATCH_SCRIPT
#define SLURM_BATCH_SCRIPT 0xfffffffbu
#endif

#define PALADIN_MAX_ARG 1024

static char g_paladin[PALADIN_MAX_ARG] = "/usr/local/bin/paladin";
static char g_socket[PALADIN_MAX_ARG] = "/var/lib/paladin/agent/agent.sock";
static char g_on_agent_down[16] = "run";
static char g_gpu_mem[64] = "";
/* The shim's end of the socket to its root helper (a non-root step), or -1. */
static int g_helper_fd = -1;

static int take_gpu_mem(int val, const char* optarg, int remote);
static int take_on_agent_down(int val, const char* optarg, int remote);

struct spank_option spank_options[] = {
    {"paladin-gpu-mem", "SIZE",
     "Run the step under Paladin with this GPU-memory quota (e.g. 4GiB); it can then be "
     "checkpointed and requeued with its progress kept",
     1, 0, take_gpu_mem},
    {"paladin-on-agent-down", "run|fail",
     "When the node's Paladin agent is down: run without Paladin (with a warning) or fail", 1, 0,
     take_on_agent_down},
    SPANK_OPTIONS_TABLE_END};

static int copy_value(char* to, size_t size, const char* value, const char* what) {
  if (value == NULL || value[0] == '\0' || strlen(value) >= size) {
    slurm_error("paladin: %s: a value of 1 to %zu characters is needed", what, size - 1);
    return -1;
  }
  strcpy(to, value);
  return 0;
}

static int valid_policy(const char* value) {
  return value != NULL && (strcmp(value, "run") == 0 || strcmp(value, "fail") == 0);
}

static int take_gpu_mem(int val, const char* optarg, int remote) {
  (void)val;
  (void)remote;
  return copy_value(g_gpu_mem, sizeof g_gpu_mem, optarg, "--paladin-gpu-mem");
}

static int take_on_agent_down(int val, const char* optarg, int remote) {
  (void)val;
  (void)remote;
  if (!valid_policy(optarg)) {
    slurm_error("paladin: --paladin-on-agent-down=%s: expected run or fail", optarg ? optarg : "");
    return -1;
  }
  return copy_value(g_on_agent_down, sizeof g_on_agent_down, optarg, "--paladin-on-agent-down");
}

int slurm_spank_init(spank_t sp, int ac, char** av) {
  for (int i = 0; i < ac; ++i) {
    if (strncmp(av[i], "paladin=", 8) == 0) {
      if (copy_value(g_paladin, sizeof g_paladin, av[i] + 8, "paladin=") != 0) return -1;
    } else if (strncmp(av[i], "socket=", 7) == 0) {
      if (copy_value(g_socket, sizeof g_socket, av[i] + 7, "socket=") != 0) return -1;
    } else if (strncmp(av[i], "on_agent_down=", 14) == 0) {
      if (!valid_policy(av[i] + 14)) {
        slurm_error("paladin: plugstack.conf on_agent_down=%s: expected run or fail", av[i] + 14);
        return -1;
      }
      strcpy(g_on_agent_down, av[i] + 14);
    } else {
      slurm_error(
          "paladin: unknown plugstack.conf argument '%s' (expected paladin=, socket=, "
          "on_agent_down=)",
          av[i]);
      return -1;
    }
  }
  for (struct spank_option* o = spank_options; o->name != NULL; ++o) {
    if (spank_option_register(sp, o) != ESPANK_SUCCESS) {
      slurm_error("paladin: cannot register option --%s", o->name);
      return -1;
    }
  }
  return 0;
}

/* The agent being down is the shim's to handle (it can reach the socket); a shim that cannot run
 * at all is this plugin's. */
static int without_paladin(const char* why) {
  if (strcmp(g_on_agent_down, "fail") == 0) {
    fprintf(stderr, "paladin: error: %s; the step fails (--paladin-on-agent-down=fail)\n", why);
    slurm_error("paladin: %s", why);
    return -1;
  }
  fprintf(stderr,
          "paladin: warning: %s; running this step WITHOUT Paladin: no GPU-memory quota, no "
          "checkpoints (--paladin-on-agent-down=run)\n",
          why);
  return 0;
}

/* The job's and the step's names as the shim, the helper and the agent spell them: "JOB" and
 * "batch" or the step's number (16 bytes each). */
static void step_names(uint32_t job, uint32_t step, char job_text[16], char step_text[16]) {
  snprintf(job_text, 16, "%u", job);
  if (step == SLURM_BATCH_SCRIPT) {
    strcpy(step_text, "batch");
  } else {
    snprintf(step_text, 16, "%u", step);
  }
}

/* A step of a non-root user gets a root helper (`paladin slurm helper`), forked here while the
 * task still runs as root: it runs the step as the user under a root-owned pid 1, which is what
 * lets CRIU checkpoint it, and it is a child of the task, so SLURM still tracks it. Any failure
 * leaves the step to the shim alone (it then runs, but cannot be checkpointed). */
int slurm_spank_task_init_privileged(spank_t sp, int ac, char** av) {
  (void)ac;
  (void)av;
  if (!spank_remote(sp) || g_gpu_mem[0] == '\0' || access(g_paladin, X_OK) != 0) return 0;
  char wrapped[8];
  if (spank_getenv(sp, "PALADIN_SLURM_STEP", wrapped, sizeof wrapped) == ESPANK_SUCCESS) return 0;
  uid_t uid = 0;
  gid_t gid = 0;
  uint32_t job = 0;
  uint32_t step = 0;
  if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS || uid == 0 ||
      spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS) {
    return 0;
  }
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return 0;
  const pid_t pid = fork();
  if (pid == 0) {
    for (int fd = 3; fd < 1024; ++fd) {
      if (fd != fds[1]) close(fd);
    }
    char fd_text[16];
    char uid_text[16];
    char gid_text[16];
    snprintf(fd_text, sizeof fd_text, "%d", fds[1]);
    snprintf(uid_text, sizeof uid_text, "%u", (unsigned)uid);
    snprintf(gid_text, sizeof gid_text, "%u", (unsigned)gid);
    /* The helper asks the agent, as root, what it decided for this step: SLURM's own job and
     * step ids say which (the step's shim, which runs as the user, is not believed). */
    char job_text[16];
    char step_text[16];
    step_names(job, step, job_text, step_text);
    char* argv[] = {g_paladin, "slurm",  "helper",  "--fd",     fd_text,  "--uid",
                    uid_text,  "--gid",  gid_text,  "--socket", g_socket, "--job",
                    job_text,  "--step", step_text, NULL};
    char* envp[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    execve(g_paladin, argv, envp);
    _exit(127);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return 0;
  }
  g_helper_fd = fds[0];
  return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char** av) {
  (void)ac;
  (void)av;
  if (!spank_remote(sp) || g_gpu_mem[0] == '\0') return 0;
  /* A step started from inside a Paladin step (srun in a wrapped batch script) stays out. */
  char wrapped[8];
  if (spank_getenv(sp, "PALADIN_SLURM_STEP", wrapped, sizeof wrapped) == ESPANK_SUCCESS) {
    fprintf(stderr, "paladin: this step runs inside a Paladin step already; not wrapped again\n");
    return 0;
  }
  uint32_t job = 0;
  uint32_t step = 0;
  int argc = 0;
  char** argv = NULL;
  char** env = NULL;
  if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS || argc < 1) {
    return without_paladin("cannot read the step's job id, command or environment");
  }
  if (access(g_paladin, X_OK) != 0) {
    char why[PALADIN_MAX_ARG + 64];
    snprintf(why, sizeof why, "%s cannot be run (%s)", g_paladin, strerror(errno));
    return without_paladin(why);
  }
  char job_text[16];
  char step_text[16];
  step_names(job, step, job_text, step_text);
  char helper_text[16];
  snprintf(helper_text, sizeof helper_text, "%d", g_helper_fd);
  const char* head[] = {g_paladin,       "slurm",       "task",      "--gpu-mem",
                        g_gpu_mem,       "--socket",    g_socket,    "--on-agent-down",
                        g_on_agent_down, "--job",       job_text,    "--step",
                        step_text,       "--helper-fd", helper_text, "--"};
  const int nhead = (int)(sizeof head / sizeof head[0]);
  char** shim = calloc((size_t)(nhead + argc + 1), sizeof(char*));
  if (shim == NULL) return without_paladin("out of memory");
  for (int i = 0; i < nhead; ++i) shim[i] = (char*)head[i];
  for (int i = 0; i < argc; ++i) shim[nhead + i] = argv[i];
  /* The shim's environment is the task's, plus the mark that stops nested wrapping. */
  int nenv = 0;
  while (env != NULL && env[nenv] != NULL) ++nenv;
  char** shim_env = calloc((size_t)nenv + 2, sizeof(char*));
  if (shim_env == NULL) return without_paladin("out of memory");
  for (int i = 0; i < nenv; ++i) shim_env[i] = env[i];
  shim_env[nenv] = "PALADIN_SLURM_STEP=1";
  execve(g_paladin, shim, shim_env);
  char why[PALADIN_MAX_ARG + 64];
  snprintf(why, sizeof why, "cannot run %s (%s)", g_paladin, strerror(errno));
  free(shim);
  free(shim_env);
  return without_paladin(why);
}
