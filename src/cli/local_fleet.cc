#include "local_fleet.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "paladin/api/wire.h"
#include "paladin/base/process.h"

extern char** environ;

namespace paladin::cli {

namespace fs = std::filesystem;
namespace key = api::key;

namespace {

std::string ReadTrimmed(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

void Sleep(double seconds) {
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(seconds * 1000)));
}

}  // namespace

std::string SelfExe() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("paladin") : exe.string();
}

LocalFleet::LocalFleet(std::string data_dir) : data_dir_(std::move(data_dir)), exe_(SelfExe()) {}

LocalFleet::~LocalFleet() { StopAll(); }

api::Client LocalFleet::Admin() const {
  StatusOr<api::Endpoint> endpoint = api::ParseUrl(url_);
  return api::Client(endpoint.ok() ? *endpoint : api::Endpoint{}, admin_token_);
}

StatusOr<pid_t> LocalFleet::Spawn(const std::string& name, const std::vector<std::string>& args) {
  std::error_code ec;
  fs::create_directories(data_dir_ + "/logs", ec);
  const std::string log = LogPath(name);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<std::string> argv_storage = {exe_};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(argv_storage.size() + 1);
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, exe_.c_str(), &files, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return IoError("cannot start " + name + ": " + std::strerror(rc));
  children_[name] = pid;
  order_.push_back(name);
  return pid;
}

Status LocalFleet::StartServer(const std::string& listen,
                               const std::vector<std::string>& extra_flags) {
  const std::string dir = data_dir_ + "/server";
  std::error_code ec;
  fs::create_directories(dir, ec);
  fs::remove(dir + "/server.url", ec);
  std::vector<std::string> args = {"server", "--listen", listen, "--data", dir};
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  StatusOr<pid_t> pid = Spawn("server", args);
  if (!pid.ok()) return pid.status();
  for (int i = 0; i < 300; ++i) {
    if (!Exited().empty()) {
      return FailedPrecondition("the server exited at start; see " + LogPath("server"));
    }
    if (fs::exists(dir + "/server.url") && fs::exists(dir + "/admin.token")) {
      url_ = ReadTrimmed(dir + "/server.url");
      admin_token_ = ReadTrimmed(dir + "/admin.token");
      if (Admin().Get("/v1/summary").ok()) return Status::Ok();
    }
    Sleep(0.1);
  }
  return Unavailable("the server did not answer within 30 s; see " + LogPath("server"));
}

// The agent's own token (scope agent:NAME: it speaks for its node only), made through the admin
// API the first time and kept in DIR/agent.token (mode 0600) for its restarts.
StatusOr<std::string> LocalFleet::NodeTokenFile(const std::string& name, const std::string& dir) {
  const std::string path = dir + "/agent.token";
  if (!ReadTrimmed(path).empty()) return path;
  StatusOr<api::Json> made = Admin().Post(
      "/v1/tokens", api::Json{{key::kScope, "agent:" + name}, {key::kName, "agent of " + name}});
  if (!made.ok()) return made.status();
  const std::string token = made->value(key::kToken, "");
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return IoError("cannot write " + path + ": " + std::strerror(errno));
  const std::string line = token + "\n";
  const bool written = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  close(fd);
  if (token.empty() || !written) return IoError("cannot write the agent's token to " + path);
  return path;
}

Status LocalFleet::StartAgent(const std::string& name,
                              const std::vector<std::string>& extra_flags) {
  const std::string dir = AgentDir(name);
  std::error_code ec;
  fs::create_directories(dir, ec);
  StatusOr<std::string> token_file = NodeTokenFile(name, dir);
  if (!token_file.ok()) return token_file.status();
  std::vector<std::string> args = {"agent", "--server", url_, "--token-file", *token_file, "--name",
                                   name,    "--data",   dir};
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  StatusOr<pid_t> pid = Spawn("agent-" + name, args);
  if (!pid.ok()) return pid.status();
  if (std::find(extra_flags.begin(), extra_flags.end(), "--kill-on-exit") != extra_flags.end()) {
    kill_on_exit_.insert("agent-" + name);
  }
  const api::Client admin = Admin();
  for (int i = 0; i < 600; ++i) {
    if (Exited() == "agent-" + name) {
      return FailedPrecondition("agent " + name + " exited at start; see " +
                                LogPath("agent-" + name));
    }
    StatusOr<api::Json> nodes = admin.Get("/v1/nodes");
    if (nodes.ok() && nodes->contains(key::kNodes)) {
      for (const api::Json& n : (*nodes)[key::kNodes]) {
        if (n.value(key::kName, "") == name && n.value(key::kState, "") == "alive")
          return Status::Ok();
      }
    }
    Sleep(0.1);
  }
  return Unavailable("agent " + name + " did not register within 60 s; see " +
                     LogPath("agent-" + name));
}

Status LocalFleet::KillNode(const std::string& name) {
  auto it = children_.find("agent-" + name);
  if (it == children_.end()) return NotFound("no agent " + name + " was started here");
  // Its workloads die with the node: the agent is their subreaper, so they are its descendants
  // (jobs restored or moved here by CRIU included; those that moved away are not).
  const std::vector<uint32_t> tree = base::ProcessTree(static_cast<uint32_t>(it->second));
  kill(it->second, SIGKILL);
  for (uint32_t pid : tree) kill(static_cast<pid_t>(pid), SIGKILL);
  waitpid(it->second, nullptr, 0);
  children_.erase(it);
  return Status::Ok();
}

std::string LocalFleet::Exited() {
  for (auto it = children_.begin(); it != children_.end(); ++it) {
    int status = 0;
    if (waitpid(it->second, &status, WNOHANG) == it->second) {
      std::string name = it->first;
      children_.erase(it);
      return name;
    }
  }
  return "";
}

void LocalFleet::StopAll(double grace_s) {
  // Agents first (they report to the server on the way out), then the server.
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<std::pair<std::string, pid_t>> waiting;
    for (const auto& [name, pid] : children_) {
      const bool is_server = name == "server";
      if ((pass == 0) == is_server) continue;
      kill(pid, SIGTERM);
      waiting.emplace_back(name, pid);
    }
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int>(grace_s * 1000));
    for (const auto& [name, pid] : waiting) {
      while (waitpid(pid, nullptr, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          // An agent that would have killed its workloads on the way out had it stopped in
          // time: they go with it, as with KillNode.
          const std::vector<uint32_t> tree = kill_on_exit_.count(name) > 0
                                                 ? base::ProcessTree(static_cast<uint32_t>(pid))
                                                 : std::vector<uint32_t>{};
          kill(pid, SIGKILL);
          for (uint32_t p : tree) kill(static_cast<pid_t>(p), SIGKILL);
          waitpid(pid, nullptr, 0);
          break;
        }
        Sleep(0.05);
      }
    }
    for (auto it = children_.begin(); it != children_.end();) {
      const bool is_server = it->first == "server";
      it = ((pass == 0) != is_server) ? children_.erase(it) : std::next(it);
    }
  }
}

}  // namespace paladin::cli
