// `paladin slurm`: Paladin inside SLURM (docs/slurm.md).
//
//   task        the step shim the SPANK plugin (paladin_spank.so) runs in place of a step's
//               command: registers the step with the node's agent, then starts the command, or
//               restores it from its last checkpoint when SLURM restarted the job, under the
//               quota, and waits for it as a child of slurmstepd
//   checkpoint  checkpoints a job's Paladin steps on this node (they run on)
//   requeue     checkpoints them (left stopped), then `scontrol requeue`: SLURM starts the job
//               again, on whichever node it picks, and the steps continue from the checkpoint
//   steps       lists the steps this node's agent knows
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "paladin/agent/local.h"
#include "paladin/ckpt/image.h"
#include "paladin/quota/launch.h"
#include "paladin/quota/region.h"
#include "run.h"

extern char** environ;

namespace paladin::cli {
namespace {

using Json = nlohmann::json;

void Note(const std::string& line) { std::fprintf(stderr, "paladin: %s\n", line.c_str()); }

struct TaskArgs {
  std::string socket;
  std::string gpu_mem;
  std::string on_agent_down = "run";
  int64_t job = 0;
  std::string step;
  std::vector<std::string> command;
};

int64_t EnvInt(const char* name) {
  const char* v = getenv(name);
  return v != nullptr ? std::strtoll(v, nullptr, 10) : 0;
}

// argv for exec and spawn: the strings' own characters, then a null.
std::vector<char*> Argv(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  return argv;
}

// Runs the step's command as SLURM would have, without Paladin.
int RunPlain(const std::vector<std::string>& command) {
  std::vector<char*> argv = Argv(command);
  execvp(argv[0], argv.data());
  Note("cannot run " + command[0] + ": " + strerror(errno));
  return 127;
}

int RunTask(const TaskArgs& a) {
  if (a.command.empty()) {
    Note("slurm task: no command after --");
    return 2;
  }
  if (a.on_agent_down != "run" && a.on_agent_down != "fail") {
    Note("--on-agent-down '" + a.on_agent_down + "': expected run or fail");
    return 2;
  }
  uint64_t gpu_mem = 0;
  if (!quota::ParseSize(a.gpu_mem, &gpu_mem) || gpu_mem == 0) {
    Note("--paladin-gpu-mem '" + a.gpu_mem + "': not a size (expected e.g. 4GiB or 512MiB)");
    return 2;
  }
  const int64_t job = a.job > 0 ? a.job : EnvInt("SLURM_JOB_ID");
  const std::string step = !a.step.empty() ? a.step : "batch";
  const int64_t restarts = EnvInt("SLURM_RESTART_COUNT");
  StatusOr<Json> reg = agent::CallLocal(a.socket,
                                        {{"op", "register"},
                                         {"job", job},
                                         {"step", step},
                                         {"gpu_mem", gpu_mem},
                                         {"restart_count", restarts}},
                                        30);
  if (!reg.ok()) {
    if (a.on_agent_down == "fail") {
      Note("error: " + reg.status().message() +
           "; the step fails (--paladin-on-agent-down=fail). Start the node's agent (paladin "
           "agent ... --local-socket " +
           a.socket + ") or submit without --paladin-gpu-mem.");
      return 1;
    }
    Note("warning: " + reg.status().message() +
         "; running this step WITHOUT Paladin: no GPU-memory quota, no checkpoints "
         "(--paladin-on-agent-down=run)");
    return RunPlain(a.command);
  }
  if (!reg->value("ok", false)) {
    Note("error: the node's Paladin agent refused this step: " + reg->value("error", "?"));
    return 1;
  }
  const std::string key = reg->value("key", "");
  const std::string emu_gpus = reg->value("emulated_gpus", "");
  if (!emu_gpus.empty()) {
    setenv("PALADIN_EMU_GPUS", emu_gpus.c_str(), 1);
    setenv("PALADIN_EMU_STATE", reg->value("emu_state", "").c_str(), 1);
  }
  RunArgs run;
  run.name = "slurm-" + key;
  run.gpu_mem = a.gpu_mem;
  run.emulated_gpus = emu_gpus;
  run.gpus = reg->value("gpu_uuid", "");
  run.command = a.command;
  run.say_as = "paladin";
  run.on_started = [&](const ckpt::JobRecord& record) {
    StatusOr<Json> told = agent::CallLocal(
        a.socket, {{"op", "started"}, {"key", key}, {"run_dir", record.run_dir}}, 30);
    if (!told.ok() || !told->value("ok", false)) {
      Note("warning: the agent did not take the step's record (" +
           (told.ok() ? told->value("error", "?") : told.status().message()) +
           "); it cannot be checkpointed");
    }
  };
  const std::string image = reg->value("image", "");
  if (restarts > 0 && !image.empty()) {
    // The job was requeued after a checkpoint: continue from it, on this node's GPU.
    StatusOr<ckpt::Manifest> m = ckpt::ReadManifest(image);
    if (m.ok()) {
      for (const ckpt::ImageGpu& g : m->gpus) {
        if (g.uuid != run.gpus && !run.gpus.empty()) run.gpu_map.emplace_back(g.uuid, run.gpus);
      }
    }
    Note("SLURM restart " + std::to_string(restarts) + " of job " + std::to_string(job) +
         ": continuing step " + step + " from its checkpoint " + image);
    run.restore_from = image;
  } else {
    if (restarts > 0) {
      Note("SLURM restart " + std::to_string(restarts) + " of job " + std::to_string(job) +
           ": no checkpoint of step " + step + "; it starts from the beginning");
    }
    Note("step " + key + " on node " + reg->value("node", "?") + ", GPU " +
         std::to_string(reg->value("gpu_index", -1)) + ", quota " + quota::FormatSize(gpu_mem));
  }
  const int code = RunWorkload(run);
  (void)agent::CallLocal(a.socket, {{"op", "done"}, {"key", key}, {"exit_code", code}}, 30);
  return code;
}

// Prints why the call failed or was refused, and says whether it did.
bool Failed(const char* what, const StatusOr<Json>& answer) {
  if (!answer.ok()) {
    Say(what, answer.status().message());
    return true;
  }
  if (!answer->value("ok", false)) {
    Say(what, answer->value("error", "refused"));
    return true;
  }
  return false;
}

void PrintSteps(const Json& answer) {
  for (const Json& s : answer.value("steps", Json::array())) {
    std::printf("checkpointed %s into %s (%s, %.1f s)\n", s.value("step", "?").c_str(),
                s.value("image", "?").c_str(),
                quota::FormatSize(s.value("bytes", uint64_t{0})).c_str(), s.value("seconds", 0.0));
  }
}

int Checkpoint(const std::string& socket, int64_t job, const std::string& leave) {
  Say("slurm checkpoint",
      "checkpointing SLURM job " + std::to_string(job) + "'s steps (left " + leave + ")");
  StatusOr<Json> answer =
      agent::CallLocal(socket, {{"op", "checkpoint"}, {"job", job}, {"leave", leave}}, 3600);
  if (Failed("slurm checkpoint", answer)) {
    if (answer.ok()) PrintSteps(*answer);
    return 1;
  }
  PrintSteps(*answer);
  return 0;
}

int Scontrol(const std::vector<std::string>& args) {
  std::vector<char*> argv = Argv(args);
  pid_t pid = 0;
  if (posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return 127;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int Requeue(const std::string& socket, int64_t job) {
  if (int code = Checkpoint(socket, job, "stopped"); code != 0) return code;
  const int code = Scontrol({"scontrol", "requeue", std::to_string(job)});
  if (code == 0) {
    std::printf("requeued SLURM job %lld: it continues from the checkpoint when it starts again\n",
                static_cast<long long>(job));
    return 0;
  }
  Say("slurm requeue", "scontrol requeue " + std::to_string(job) + " failed (exit " +
                           std::to_string(code) + "); letting the job run on");
  StatusOr<Json> resumed = agent::CallLocal(socket, {{"op", "resume"}, {"job", job}}, 120);
  (void)Failed("slurm requeue", resumed);
  return 1;
}

int Steps(const std::string& socket, bool json) {
  StatusOr<Json> answer = agent::CallLocal(socket, {{"op", "steps"}}, 30);
  if (Failed("slurm steps", answer)) return 1;
  if (json) {
    std::printf("%s\n", answer->dump(2).c_str());
    return 0;
  }
  std::printf("%-14s %-8s %-6s %-4s %-10s %-14s %s\n", "STEP", "UID", "PID", "GPU", "QUOTA",
              "STATE", "LAST CHECKPOINT");
  for (const Json& s : answer->value("steps", Json::array())) {
    const std::string image = s.value("image", "");
    std::printf("%-14s %-8lld %-6lld %-4d %-10s %-14s %s\n", s.value("key", "?").c_str(),
                static_cast<long long>(s.value("uid", int64_t{0})),
                static_cast<long long>(s.value("pid", int64_t{0})), s.value("gpu_index", -1),
                quota::FormatSize(s.value("gpu_mem", uint64_t{0})).c_str(),
                s.value("state", "?").c_str(), image.empty() ? "-" : image.c_str());
  }
  return 0;
}

}  // namespace

void RegisterSlurm(CLI::App& app, int* exit_code) {
  CLI::App* slurm = app.add_subcommand(
      "slurm", "Paladin inside SLURM: the step shim, checkpoint and requeue (docs/slurm.md)");
  slurm->require_subcommand(1);
  auto socket = std::make_shared<std::string>(agent::DefaultLocalSocket());
  const std::string socket_help =
      "The node agent's local socket ($PALADIN_AGENT_SOCKET, else "
      "/var/lib/paladin/agent/agent.sock)";

  auto task = std::make_shared<TaskArgs>();
  CLI::App* t = slurm->add_subcommand(
      "task", "Run a SLURM step under Paladin (what paladin_spank.so runs; not for direct use)");
  t->add_option("--socket", task->socket, socket_help)->default_str(*socket);
  t->add_option("--gpu-mem", task->gpu_mem, "The step's GPU-memory quota, e.g. 4GiB")->required();
  t->add_option("--on-agent-down", task->on_agent_down,
                "When the agent cannot be reached: run (without Paladin, with a warning) or "
                "fail")
      ->capture_default_str();
  t->add_option("--job", task->job, "The SLURM job id (default: $SLURM_JOB_ID)");
  t->add_option("--step", task->step, "The step: batch or its number (default: batch)");
  t->add_option("command", task->command, "The step's command, after --")->required();
  t->callback([task, socket, exit_code] {
    if (task->socket.empty()) task->socket = *socket;
    *exit_code = RunTask(*task);
  });

  auto job = std::make_shared<int64_t>(0);
  auto leave_stopped = std::make_shared<bool>(false);
  CLI::App* c = slurm->add_subcommand(
      "checkpoint", "Checkpoint a SLURM job's Paladin steps on this node; they run on");
  c->add_option("jobid", *job, "The SLURM job id")->required()->check(CLI::PositiveNumber);
  c->add_option("--socket", *socket, socket_help);
  c->add_flag("--leave-stopped", *leave_stopped, "Leave the steps stopped after");
  c->callback([job, socket, leave_stopped, exit_code] {
    *exit_code = Checkpoint(*socket, *job, *leave_stopped ? "stopped" : "running");
  });

  CLI::App* r = slurm->add_subcommand(
      "requeue",
      "Checkpoint a SLURM job's Paladin steps, then scontrol requeue it: it continues from the "
      "checkpoint when SLURM starts it again");
  r->add_option("jobid", *job, "The SLURM job id")->required()->check(CLI::PositiveNumber);
  r->add_option("--socket", *socket, socket_help);
  r->callback([job, socket, exit_code] { *exit_code = Requeue(*socket, *job); });

  auto json = std::make_shared<bool>(false);
  CLI::App* s = slurm->add_subcommand("steps", "The SLURM steps this node's agent runs");
  s->add_option("--socket", *socket, socket_help);
  s->add_flag("--json", *json, "Print JSON");
  s->callback([socket, json, exit_code] { *exit_code = Steps(*socket, *json); });
}

}  // namespace paladin::cli
