#include "state.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace paladin::migrate {

namespace {

struct StepEntry {
  MoveStep step;
  const char* name;
  bool source;       // the source records it
  bool destination;  // the destination records it
};

// The one table of the steps' names (the state file's and OUTCOME's words).
constexpr StepEntry kSteps[] = {
    {MoveStep::kCheckpointing, "checkpointing", true, false},
    {MoveStep::kSending, "sending", true, false},
    {MoveStep::kRestoring, "restoring", true, true},
    {MoveStep::kServing, "serving", true, false},
    {MoveStep::kResumeSent, "resume_sent", true, false},
    {MoveStep::kDone, "done", true, false},
    {MoveStep::kResumed, "resumed", true, false},
    {MoveStep::kInDoubt, "in_doubt", true, false},
    {MoveStep::kReceived, "received", false, true},
    {MoveStep::kRestored, "restored", false, true},
    {MoveStep::kProvisional, "provisional", false, true},
    {MoveStep::kCommitted, "committed", false, true},
    {MoveStep::kAborted, "aborted", false, true},
};

const StepEntry& EntryOf(MoveStep step) {
  for (const StepEntry& e : kSteps) {
    if (e.step == step) return e;
  }
  return kSteps[0];  // unreachable: every step has its row
}

// "checkpointing, sending, ...": the steps `role` records.
std::string StepsOf(MoveRole role) {
  std::string names;
  for (const StepEntry& e : kSteps) {
    if (!StepOfRole(role, e.step)) continue;
    if (!names.empty()) names += ", ";
    names += e.name;
  }
  return names;
}

}  // namespace

const char* MoveRoleName(MoveRole role) {
  return role == MoveRole::kSource ? "source" : "destination";
}

std::optional<MoveRole> MoveRoleNamed(const std::string& name) {
  for (MoveRole role : {MoveRole::kSource, MoveRole::kDestination}) {
    if (name == MoveRoleName(role)) return role;
  }
  return std::nullopt;
}

const char* MoveStepName(MoveStep step) { return EntryOf(step).name; }

std::optional<MoveStep> MoveStepNamed(const std::string& name) {
  for (const StepEntry& e : kSteps) {
    if (name == e.name) return e.step;
  }
  return std::nullopt;
}

bool StepOfRole(MoveRole role, MoveStep step) {
  const StepEntry& e = EntryOf(step);
  return role == MoveRole::kSource ? e.source : e.destination;
}

Status SaveState(const std::string& path, const MoveState& s) {
  std::ostringstream out;
  out << "role " << MoveRoleName(s.role) << "\nid " << s.id << "\nstep " << MoveStepName(s.step)
      << "\nacked " << (s.acked ? 1 : 0) << "\nrun_dir " << s.run_dir << "\nimage " << s.image
      << "\nhost " << s.host << "\nport " << s.port << "\npid " << s.pid << "\nwait_s " << s.wait_s
      << "\nkeep_image " << (s.keep_image ? 1 : 0) << "\nreleased " << (s.released ? 1 : 0) << "\n";
  const std::string text = out.str();
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return IoError("cannot write " + tmp + ": " + strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string message = "cannot write " + tmp;
      message.append(": ").append(strerror(errno));
      close(fd);
      return IoError(message);
    }
    done += static_cast<size_t>(n);
  }
  // The decision it records must survive a crash of the machine, not only of this process.
  const bool synced = fsync(fd) == 0;
  close(fd);
  if (!synced || rename(tmp.c_str(), path.c_str()) != 0) {
    return IoError("cannot put " + path + " in place: " + strerror(errno));
  }
  return Status::Ok();
}

Status SaveStep(const std::string& path, MoveState* state, MoveStep step) {
  state->step = step;
  return SaveState(path, *state);
}

StatusOr<MoveState> LoadState(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("no migration state at " + path);
  MoveState s;
  std::string role;
  std::string step;
  std::string line;
  while (std::getline(in, line)) {
    const size_t space = line.find(' ');
    const std::string key = line.substr(0, space);
    const std::string value = space == std::string::npos ? "" : line.substr(space + 1);
    if (key == "role") role = value;
    if (key == "id") s.id = value;
    if (key == "step") step = value;
    if (key == "acked") s.acked = value == "1";
    if (key == "run_dir") s.run_dir = value;
    if (key == "image") s.image = value;
    if (key == "host") s.host = value;
    if (key == "port") s.port = std::atoi(value.c_str());
    if (key == "pid") s.pid = std::atoll(value.c_str());
    if (key == "wait_s") s.wait_s = std::atof(value.c_str());
    if (key == "keep_image") s.keep_image = value == "1";
    if (key == "released") s.released = value == "1";
  }
  const std::optional<MoveRole> known_role = MoveRoleNamed(role);
  if (!known_role) {
    return InvalidArgument(path + ": not a migration state file (role '" + role + "')");
  }
  s.role = *known_role;
  if (s.id.empty() || step.empty()) return InvalidArgument(path + ": no id or step");
  const std::optional<MoveStep> known_step = MoveStepNamed(step);
  if (!known_step || !StepOfRole(s.role, *known_step)) {
    return InvalidArgument(path + ": step '" + step + "' is not a step of the " + role +
                           " of a move (expected one of " + StepsOf(s.role) + ")");
  }
  s.step = *known_step;
  return s;
}

bool FaultSet(const std::string& fault) {
  const char* env = getenv("PALADIN_MIGRATE_FAULT");
  if (env == nullptr) return false;
  std::stringstream list(env);
  std::string item;
  while (std::getline(list, item, ',')) {
    if (item == fault) return true;
  }
  return false;
}

void CrashPoint(const std::string& point) {
  if (FaultSet("crash:" + point)) raise(SIGKILL);
}

Status SendOrDrop(Channel* channel, const std::string& what, const std::string& line) {
  if (FaultSet("drop:" + what)) {
    shutdown(channel->fd(), SHUT_RDWR);
    return IoError("fault injected: " + what + " lost");
  }
  return channel->Send(line);
}

StatusOr<std::string> CallOrDrop(Channel* channel, const std::string& what, const std::string& line,
                                 double timeout_s) {
  if (FaultSet("drop:" + what)) {
    shutdown(channel->fd(), SHUT_RDWR);
    return IoError("fault injected: " + what + " lost");
  }
  return channel->Call(line, timeout_s);
}

Keeper::~Keeper() {
  if (fd_ >= 0) close(fd_);
}

Keeper& Keeper::operator=(Keeper&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    pid_ = other.pid_;
    other.fd_ = -1;
  }
  return *this;
}

StatusOr<Keeper> Keeper::Start(const std::string& exe, const std::string& state,
                               const std::string& token, int listener_fd) {
  int live[2];
  if (pipe2(live, O_CLOEXEC) != 0) return IoError(std::string("pipe: ") + strerror(errno));
  // Everything the child needs is made before fork: this process may have threads.
  const std::string log = state + ".keeper.log";
  std::vector<std::string> args = {exe, "migrate-keeper", state};
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var = *e;
    // The keeper never injects faults: it is what recovers from them.
    if (var.rfind("PALADIN_MIGRATE_FAULT=", 0) == 0) continue;
    if (var.rfind("PALADIN_MIGRATE_KEEPER_TOKEN=", 0) == 0) continue;
    env_text.push_back(var);
  }
  env_text.push_back("PALADIN_MIGRATE_KEEPER_TOKEN=" + token);
  std::vector<char*> envp;
  envp.reserve(env_text.size() + 1);
  for (std::string& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    const std::string why = strerror(errno);
    close(live[0]);
    close(live[1]);
    return IoError("fork: " + why);
  }
  if (pid == 0) {
    setsid();  // a signal to this side's process group must not reach its keeper
    const int pipe_fd = fcntl(live[0], F_DUPFD, 100);
    const int listen_fd = listener_fd >= 0 ? fcntl(listener_fd, F_DUPFD, 100) : -1;
    const int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    const int null = open("/dev/null", O_RDONLY);
    if (pipe_fd < 0 || out < 0 || null < 0) _exit(127);
    dup2(null, 0);
    dup2(out, 1);
    dup2(out, 2);
    dup2(pipe_fd, 3);
    if (listen_fd >= 0) dup2(listen_fd, 4);
    // Nothing else of this side's: a captured stdout must not stay open in the keeper.
    for (int fd = listen_fd >= 0 ? 5 : 4; fd < 4096; ++fd) close(fd);
    execve(exe.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  close(live[0]);
  Keeper k;
  k.fd_ = live[1];
  k.pid_ = pid;
  return k;
}

void Keeper::Done() {
  if (fd_ < 0) return;
  const char done = 'd';
  (void)!write(fd_, &done, 1);
  close(fd_);
  fd_ = -1;
}

}  // namespace paladin::migrate
