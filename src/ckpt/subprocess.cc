#include "paladin/ckpt/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

extern char** environ;

namespace paladin::ckpt {

ExecArgs::ExecArgs(const std::vector<std::string>& argv,
                   const std::vector<std::pair<std::string, std::string>>& env)
    : words_(argv) {
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [key, value] : env) replaced |= key == name;
    if (!replaced) vars_.emplace_back(entry);
  }
  for (const auto& [key, value] : env) vars_.push_back(std::string(key).append("=").append(value));
  argv_.reserve(words_.size() + 1);
  for (std::string& w : words_) argv_.push_back(w.data());
  argv_.push_back(nullptr);
  envp_.reserve(vars_.size() + 1);
  for (std::string& v : vars_) envp_.push_back(v.data());
  envp_.push_back(nullptr);
}

void ExecArgs::Exec() const {
  if (argv_.size() > 1) execvpe(argv_[0], argv_.data(), envp_.data());
}

void PassFd(int fd) {
  if (fd < 0) return;
  if (fd == kPassedFd) {
    fcntl(fd, F_SETFD, 0);  // dup2 onto itself would keep close-on-exec
  } else {
    dup2(fd, kPassedFd);  // dup2 clears close-on-exec
  }
}

SubprocessResult RunBounded(const std::vector<std::string>& argv,
                            const std::vector<std::pair<std::string, std::string>>& env,
                            double timeout_s, const std::string& root_at, int pass_fd) {
  SubprocessResult result;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    result.output = std::string("pipe: ") + strerror(errno);
    return result;
  }
  const ExecArgs exec(argv, env);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    result.output = std::string("fork: ") + strerror(errno);
    close(fds[0]);
    close(fds[1]);
    return result;
  }
  if (pid == 0) {
    setpgid(0, 0);  // its own group, so a timeout kills everything it started
    // The caller waits for it on this thread: if the caller dies (a `paladin receive` cut by a
    // signal), the program dies too rather than live on unwatched (a CRIU restore blocked on a
    // lock would otherwise stay for ever).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(125);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    const int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    PassFd(pass_fd);
    if (!root_at.empty() && (unshare(CLONE_NEWNS) != 0 ||
                             mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0 ||
                             mount("/", root_at.c_str(), nullptr, MS_BIND, nullptr) != 0)) {
      dprintf(STDERR_FILENO, "cannot bind the root file system at %s: %s\n", root_at.c_str(),
              strerror(errno));
      _exit(126);
    }
    exec.Exec();
    dprintf(STDERR_FILENO, "cannot run %s: %s\n", exec.argv()[0], strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[4096];
  int status = 0;
  bool exited = false;
  // Reads until the program exits (a descendant it left behind may keep the pipe open: stop
  // reading then) or the time is up.
  while (!exited) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      result.timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left < 100 ? left : 100));
    if (ready > 0) {
      const ssize_t n = read(fds[0], buf, sizeof buf);
      if (n > 0) {
        result.output.append(buf, static_cast<size_t>(n));
        if (result.output.size() > 65536) result.output.erase(0, result.output.size() - 65536);
        continue;
      }
    }
    exited = waitpid(pid, &status, WNOHANG) == pid;
  }
  if (exited) {  // what it wrote just before exiting
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) {
      result.output.append(buf, static_cast<size_t>(n));
    }
    if (result.output.size() > 65536) result.output.erase(0, result.output.size() - 65536);
  }
  close(fds[0]);
  if (result.timed_out) {
    kill(-pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.exit_code = 128 + WTERMSIG(status);
  return result;
}

}  // namespace paladin::ckpt
