// Running a helper program (CRIU, mostly) with a time limit: every call into an external tool is
// bounded, so a hung tool is killed and reported instead of hanging Paladin.
#ifndef PALADIN_CKPT_SUBPROCESS_H_
#define PALADIN_CKPT_SUBPROCESS_H_

#include <string>
#include <utility>
#include <vector>

namespace paladin::ckpt {

struct SubprocessResult {
  int exit_code = -1;  // 128 + signal when killed by one
  bool timed_out = false;
  std::string output;  // stdout and stderr together (the last 64 KiB)
};

// A program's argv and environment (this process's, with `env` set over it) laid out before a
// fork, so that the child only calls execve: a child forked from a program with threads must
// not allocate, as a lock another thread held at the fork (the allocator's) stays held in it.
class ExecArgs {
 public:
  ExecArgs(const std::vector<std::string>& argv,
           const std::vector<std::pair<std::string, std::string>>& env);
  ExecArgs(const ExecArgs&) = delete;
  ExecArgs& operator=(const ExecArgs&) = delete;
  char* const* argv() const { return argv_.data(); }
  char* const* envp() const { return envp_.data(); }
  // execvpe(argv[0], argv, envp): returns only when it failed.
  void Exec() const;

 private:
  std::vector<std::string> words_;
  std::vector<std::string> vars_;
  std::vector<char*> argv_;
  std::vector<char*> envp_;
};

// Runs argv[0] (searched on the PATH) with `env` added to this process's environment, waits at
// most `timeout_s` seconds, then kills its whole process group.
// With `root_at` set, the program runs in a mount namespace of its own (a copy of this one's
// whose mounts are its slaves: CRIU restores a job's mounts as slaves of the host's from them)
// where the root file system is bound at `root_at`, an empty directory: CRIU restores a job's
// mount namespace onto such a root (--root), and nothing of it shows in this namespace.
// With `pass_fd` set, the program gets that descriptor as kPassedFd (a socket CRIU is told to
// use, --ps-socket); the caller keeps its own.
SubprocessResult RunBounded(const std::vector<std::string>& argv,
                            const std::vector<std::pair<std::string, std::string>>& env,
                            double timeout_s, const std::string& root_at = "", int pass_fd = -1);

// The descriptor number a program started by RunBounded or ckpt::StartServing gets `pass_fd` as.
inline constexpr int kPassedFd = 4;

// In a forked child before exec: `fd` becomes kPassedFd, kept across the exec (nothing when fd
// is -1). Allocates nothing.
void PassFd(int fd);

}  // namespace paladin::ckpt

#endif  // PALADIN_CKPT_SUBPROCESS_H_
