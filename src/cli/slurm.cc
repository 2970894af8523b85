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
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "paladin/agent/local.h"
#include "paladin/api/wire.h"
#include "paladin/base/size.h"
#include "paladin/ckpt/image.h"
#include "paladin/migrate/control.h"
#include "paladin/quota/launch.h"
#include "paladin/quota/region.h"
#include "run.h"

extern char** environ;

namespace paladin::cli {

namespace key = api::key;

namespace {

using Json = nlohmann::json;

void Note(const std::string& line) { std::fprintf(stderr, "paladin: %s\n", line.c_str()); }

struct TaskArgs {
  std::string socket;
  std::string gpu_mem;
  std::string on_agent_down = "run";
  int64_t job = 0;
  std::string step;
  int helper_fd = -1;  // a root `paladin slurm helper` (non-root steps; the plugin starts it)
  std::vector<std::string> command;
};

struct HelperArgs {
  int fd = -1;
  int64_t uid = -1;
  int64_t gid = -1;
  std::string socket;  // the node agent's, from the plugin's configuration
  int64_t job = 0;     // from SLURM, through the plugin
  std::string step;
};

// The shim and its root helper speak JSON lines over a socket pair (migrate::Channel); first the
// shim passes its stdout and stderr (the job's output) as one byte with two descriptors, so the
// helper writes there.
struct StdioMessage {
  StdioMessage() {
    msg.msg_iov = &io;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  StdioMessage(const StdioMessage&) = delete;
  StdioMessage& operator=(const StdioMessage&) = delete;

  char mark = 'F';
  iovec io{&mark, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr msg{};
};

Status SendStdio(int fd) {
  StdioMessage m;
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(2 * sizeof(int));
  const int fds[2] = {1, 2};
  std::memcpy(CMSG_DATA(c), fds, sizeof fds);
  if (sendmsg(fd, &m.msg, MSG_NOSIGNAL) != 1) {
    return IoError(std::string("sendmsg: ") + strerror(errno));
  }
  return Status::Ok();
}

// Makes the shim's stdout and stderr this process's.
Status ReceiveStdio(int fd) {
  StdioMessage m;
  m.mark = 0;
  if (recvmsg(fd, &m.msg, MSG_CMSG_CLOEXEC) != 1 || m.mark != 'F') {
    return Unavailable("no request from the step's shim");
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&m.msg); c != nullptr; c = CMSG_NXTHDR(&m.msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int fds[2] = {-1, -1};
    std::memcpy(fds, CMSG_DATA(c), std::min(sizeof fds, c->cmsg_len - CMSG_LEN(0)));
    if (fds[0] >= 0) dup2(fds[0], 1);
    if (fds[1] >= 0) dup2(fds[1], 2);
    if (fds[0] > 2) close(fds[0]);
    if (fds[1] > 2) close(fds[1]);
  }
  return Status::Ok();
}

constexpr double kForever = 1e9;  // the peer's end is what ends a wait

// One JSON object; blocks until it comes or the peer is gone.
StatusOr<Json> Receive(migrate::Channel& channel) {
  StatusOr<std::string> line = channel.Receive(kForever);
  if (!line.ok()) return line.status();
  Json j = Json::parse(*line, nullptr, false);
  if (!j.is_object()) return InvalidArgument("not a JSON object: " + *line);
  return j;
}

// `paladin slurm helper`: started as root by the plugin for a step of a non-root user, a child of
// the step's task; runs the step the shim describes as that user under a root-owned pid 1, which
// is what lets CRIU checkpoint it (docs/ckpt.md), or restores it; then reports its exit.
int RunHelper(const HelperArgs& a) {
  if (geteuid() != 0 || a.fd < 0 || a.uid <= 0 || a.gid < 0 || a.job <= 0 || a.step.empty() ||
      a.socket.empty()) {
    Note(
        "slurm helper: for the SPANK plugin only (root, with --fd, --uid, --gid, --socket, --job "
        "and --step)");
    return 2;
  }
  migrate::Channel channel(a.fd);
  if (!ReceiveStdio(a.fd).ok()) return 1;
  StatusOr<Json> request = Receive(channel);
  if (!request.ok()) return 1;
  const Json& r = *request;
  // The shim runs as the step's user: what it sends is that user's to choose. Only the command,
  // its environment and its working directory are taken from it, and they reach only the
  // workload, after the switch of user. The quota, the GPU, the emulated driver and the image to
  // restore from are what the agent decided for this step (SLURM's job and step, from the plugin).
  StatusOr<Json> decided = agent::CallLocal(
      a.socket, {{key::kOp, "step"}, {key::kJob, a.job}, {key::kStep, a.step}}, 30);
  if (decided.ok() && !decided->value(key::kOk, false)) {
    decided = PermissionDenied(decided->value(key::kError, "refused"));
  }
  if (decided.ok() && decided->value(key::kUid, int64_t{-1}) != a.uid) {
    decided = PermissionDenied("the step was registered by uid " +
                               std::to_string(decided->value(key::kUid, int64_t{-1})) + ", not " +
                               std::to_string(a.uid));
  }
  if (!decided.ok()) {
    Note("slurm helper: the agent does not vouch for step " + std::to_string(a.job) + "." + a.step +
         ": " + decided.status().message());
    (void)channel.Send(Json{{"event", "failed"}, {key::kCode, 1}}.dump());
    return 1;
  }
  RunArgs run;
  run.inherit_env = false;
  for (const Json& kv : r.value(key::kEnv, Json::array())) {
    if (!kv.is_string()) continue;
    const std::string entry = kv.get<std::string>();
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    run.env.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
  }
  run.cwd = r.value("cwd", "/");
  if (run.cwd.empty() || run.cwd[0] != '/') run.cwd = "/";
  run.name = r.value(key::kName, "slurm-step");
  run.gpu_mem = std::to_string(decided->value(key::kGpuMem, uint64_t{0}));
  run.emulated_gpus = decided->value(key::kEmulatedGpus, "");
  run.gpus = decided->value(key::kGpuUuid, "");
  if (!run.emulated_gpus.empty()) {
    setenv("PALADIN_EMU_GPUS", run.emulated_gpus.c_str(), 1);
    setenv("PALADIN_EMU_STATE", decided->value(key::kEmuState, "").c_str(), 1);
  }
  run.command = r.value(key::kCommand, std::vector<std::string>{});
  if (!r.value("restore_from", "").empty()) {
    run.restore_from = decided->value(key::kImage, "");
    if (run.restore_from.empty()) {
      Note("slurm helper: the shim asks for a restore, but the agent has no checkpoint of step " +
           std::to_string(a.job) + "." + a.step);
      (void)channel.Send(Json{{"event", "failed"}, {key::kCode, 1}}.dump());
      return 1;
    }
    StatusOr<ckpt::Manifest> m = ckpt::ReadManifest(run.restore_from);
    if (m.ok()) {
      for (const ckpt::ImageGpu& g : m->gpus) {
        if (g.uuid != run.gpus && !run.gpus.empty()) run.gpu_map.emplace_back(g.uuid, run.gpus);
      }
    }
  }
  run.say_as = "paladin";
  run.uid = a.uid;
  run.gid = a.gid;
  bool started = false;
  // The step ends with its shim: were the shim killed first, this helper and the workload would
  // fall out of the step's process tree, where SLURM finds what to kill.
  std::atomic<pid_t> root{0};
  const pid_t shim = getppid();
  std::thread([&root, shim] {
    while (getppid() == shim) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (root.load() > 0) kill(root.load(), SIGKILL);  // the namespace's pid 1: all of it
    _exit(137);
  }).detach();
  run.on_started = [&](const ckpt::JobRecord& record) {
    started = true;
    root.store(static_cast<pid_t>(record.pid));
    (void)channel.Send(
        Json{{"event", "started"}, {key::kPid, record.pid}, {key::kRunDir, record.run_dir}}.dump());
  };
  const int code = RunWorkload(run);
  (void)channel.Send(Json{{"event", started ? "exited" : "failed"}, {key::kCode, code}}.dump());
  return code;
}

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

// A non-root step: the root helper runs (or restores) it and writes its output; this shim tells
// the agent once it runs and returns its exit code.
int RunThroughHelper(int fd, const RunArgs& run) {
  Json env = Json::array();
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  Json map = Json::object();
  for (const auto& [from, to] : run.gpu_map) map[from] = to;
  char cwd[4096] = "/";
  if (getcwd(cwd, sizeof cwd) == nullptr) std::strcpy(cwd, "/");
  const Json request = {{key::kName, run.name},
                        {key::kGpuMem, run.gpu_mem},
                        {key::kEmulatedGpus, run.emulated_gpus},
                        {key::kGpus, run.gpus},
                        {key::kCommand, run.command},
                        {"restore_from", run.restore_from},
                        {key::kGpuMap, map},
                        {key::kEnv, env},
                        {"cwd", cwd}};
  std::fflush(stdout);
  std::fflush(stderr);
  // SLURM signals every process of the step: the workload ends on its own signal, and this shim
  // stays until then so that the helper and the workload remain in the step's process tree.
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  migrate::Channel channel(fd);
  Status sent = SendStdio(fd);
  if (sent.ok()) sent = channel.Send(request.dump());
  if (!sent.ok()) {
    Note("error: the step's root helper cannot be reached (" + sent.message() + ")");
    return 1;
  }
  while (true) {
    StatusOr<Json> event = Receive(channel);
    if (!event.ok()) {
      Note("error: the step's root helper ended without saying how the step ended");
      return 1;
    }
    const std::string kind = event->value("event", "");
    if (kind == "started") {
      ckpt::JobRecord record;
      record.pid = event->value(key::kPid, int64_t{0});
      record.run_dir = event->value(key::kRunDir, "");
      if (run.on_started) run.on_started(record);
    } else if (kind == "exited" || kind == "failed") {
      return event->value(key::kCode, 1);
    }
  }
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
  if (!base::ParseSize(a.gpu_mem, &gpu_mem) || gpu_mem == 0) {
    Note("--paladin-gpu-mem '" + a.gpu_mem + "': not a size (expected e.g. 4GiB or 512MiB)");
    return 2;
  }
  const int64_t job = a.job > 0 ? a.job : EnvInt("SLURM_JOB_ID");
  const std::string step = !a.step.empty() ? a.step : "batch";
  const int64_t restarts = EnvInt("SLURM_RESTART_COUNT");
  StatusOr<Json> reg = agent::CallLocal(a.socket,
                                        {{key::kOp, "register"},
                                         {key::kJob, job},
                                         {key::kStep, step},
                                         {key::kGpuMem, gpu_mem},
                                         {key::kRestartCount, restarts}},
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
  if (!reg->value(key::kOk, false)) {
    Note("error: the node's Paladin agent refused this step: " + reg->value(key::kError, "?"));
    return 1;
  }
  const std::string key = reg->value(key::kKey, "");
  const std::string emu_gpus = reg->value(key::kEmulatedGpus, "");
  if (!emu_gpus.empty()) {
    setenv("PALADIN_EMU_GPUS", emu_gpus.c_str(), 1);
    setenv("PALADIN_EMU_STATE", reg->value(key::kEmuState, "").c_str(), 1);
  }
  RunArgs run;
  run.name = "slurm-" + key;
  run.gpu_mem = a.gpu_mem;
  run.emulated_gpus = emu_gpus;
  run.gpus = reg->value(key::kGpuUuid, "");
  run.command = a.command;
  run.say_as = "paladin";
  run.on_started = [&](const ckpt::JobRecord& record) {
    StatusOr<Json> told = agent::CallLocal(
        a.socket, {{key::kOp, "started"}, {key::kKey, key}, {key::kRunDir, record.run_dir}}, 30);
    if (!told.ok() || !told->value(key::kOk, false)) {
      Note("warning: the agent did not take the step's record (" +
           (told.ok() ? told->value(key::kError, "?") : told.status().message()) +
           "); it cannot be checkpointed");
    }
  };
  const std::string image = reg->value(key::kImage, "");
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
    Note("step " + key + " on node " + reg->value(key::kNode, "?") + ", GPU " +
         std::to_string(reg->value(key::kGpuIndex, -1)) + ", quota " + base::FormatSize(gpu_mem));
  }
  const int code = a.helper_fd >= 0 ? RunThroughHelper(a.helper_fd, run) : RunWorkload(run);
  (void)agent::CallLocal(a.socket, {{key::kOp, "done"}, {key::kKey, key}, {key::kExitCode, code}},
                         30);
  return code;
}

// Prints why the call failed or was refused, and says whether it did.
bool Failed(const char* what, const StatusOr<Json>& answer) {
  if (!answer.ok()) {
    Say(what, answer.status().message());
    return true;
  }
  if (!answer->value(key::kOk, false)) {
    Say(what, answer->value(key::kError, "refused"));
    return true;
  }
  return false;
}

void PrintSteps(const Json& answer) {
  for (const Json& s : answer.value(key::kSteps, Json::array())) {
    std::printf("checkpointed %s into %s (%s, %.1f s)\n", s.value(key::kStep, "?").c_str(),
                s.value(key::kImage, "?").c_str(),
                base::FormatSize(s.value(key::kBytes, uint64_t{0})).c_str(),
                s.value(key::kSeconds, 0.0));
  }
}

int Checkpoint(const std::string& socket, int64_t job, agent::SlurmLeave leave) {
  const std::string left = agent::SlurmLeaveName(leave);
  Say("slurm checkpoint",
      "checkpointing SLURM job " + std::to_string(job) + "'s steps (left " + left + ")");
  StatusOr<Json> answer = agent::CallLocal(
      socket, {{key::kOp, "checkpoint"}, {key::kJob, job}, {key::kLeave, left}}, 3600);
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
  if (int code = Checkpoint(socket, job, agent::SlurmLeave::kStopped); code != 0) return code;
  const int code = Scontrol({"scontrol", "requeue", std::to_string(job)});
  if (code == 0) {
    std::printf("requeued SLURM job %lld: it continues from the checkpoint when it starts again\n",
                static_cast<long long>(job));
    return 0;
  }
  Say("slurm requeue", "scontrol requeue " + std::to_string(job) + " failed (exit " +
                           std::to_string(code) + "); letting the job run on");
  StatusOr<Json> resumed = agent::CallLocal(socket, {{key::kOp, "resume"}, {key::kJob, job}}, 120);
  (void)Failed("slurm requeue", resumed);
  return 1;
}

int Steps(const std::string& socket, bool json) {
  StatusOr<Json> answer = agent::CallLocal(socket, {{key::kOp, "steps"}}, 30);
  if (Failed("slurm steps", answer)) return 1;
  if (json) {
    std::printf("%s\n", answer->dump(2).c_str());
    return 0;
  }
  std::printf("%-14s %-8s %-6s %-4s %-10s %-14s %s\n", "STEP", "UID", "PID", "GPU", "QUOTA",
              "STATE", "LAST CHECKPOINT");
  for (const Json& s : answer->value(key::kSteps, Json::array())) {
    const std::string image = s.value(key::kImage, "");
    std::printf("%-14s %-8lld %-6lld %-4d %-10s %-14s %s\n", s.value(key::kKey, "?").c_str(),
                static_cast<long long>(s.value(key::kUid, int64_t{0})),
                static_cast<long long>(s.value(key::kPid, int64_t{0})), s.value(key::kGpuIndex, -1),
                base::FormatSize(s.value(key::kGpuMem, uint64_t{0})).c_str(),
                s.value(key::kState, "?").c_str(), image.empty() ? "-" : image.c_str());
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
  t->add_option("--helper-fd", task->helper_fd, "The root helper's socket (from the plugin)");
  t->add_option("command", task->command, "The step's command, after --")->required();
  t->callback([task, socket, exit_code] {
    if (task->socket.empty()) task->socket = *socket;
    *exit_code = RunTask(*task);
  });

  auto helper = std::make_shared<HelperArgs>();
  CLI::App* h = slurm->add_subcommand(
      "helper", "Run a non-root SLURM step as its user under a root pid 1 (paladin_spank.so only)");
  h->add_option("--fd", helper->fd, "The socket to the step's shim")->required();
  h->add_option("--uid", helper->uid, "The step's user")->required();
  h->add_option("--gid", helper->gid, "The step's group")->required();
  h->add_option("--socket", helper->socket, "The node agent's local socket")->required();
  h->add_option("--job", helper->job, "The SLURM job id")->required();
  h->add_option("--step", helper->step, "The step: batch or its number")->required();
  h->callback([helper, exit_code] { *exit_code = RunHelper(*helper); });

  auto job = std::make_shared<int64_t>(0);
  auto leave_stopped = std::make_shared<bool>(false);
  CLI::App* c = slurm->add_subcommand(
      "checkpoint", "Checkpoint a SLURM job's Paladin steps on this node; they run on");
  c->add_option("jobid", *job, "The SLURM job id")->required()->check(CLI::PositiveNumber);
  c->add_option("--socket", *socket, socket_help);
  c->add_flag("--leave-stopped", *leave_stopped, "Leave the steps stopped after");
  c->callback([job, socket, leave_stopped, exit_code] {
    *exit_code = Checkpoint(
        *socket, *job, *leave_stopped ? agent::SlurmLeave::kStopped : agent::SlurmLeave::kRunning);
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
