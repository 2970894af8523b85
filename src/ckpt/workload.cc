#include "paladin/ckpt/workload.h"

#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "paladin/base/cgroup.h"
#include "paladin/ckpt/fence.h"

extern char** environ;

namespace paladin::ckpt {

namespace fs = std::filesystem;
using nlohmann::json;

std::string_view RunStateName(RunState state) {
  switch (state) {
    case RunState::kRunning:
      return "running";
    case RunState::kFrozen:
      return "frozen";
    case RunState::kCheckpointing:
      return "checkpointing";
    case RunState::kCheckpointed:
      return "checkpointed";
    case RunState::kMoving:
      return "moving";
    case RunState::kMoved:
      return "moved";
    case RunState::kStopped:
      return "stopped";
  }
  return "unknown";
}

std::optional<RunState> ParseRunState(std::string_view name) {
  for (RunState s : kAllRunStates) {
    if (RunStateName(s) == name) return s;
  }
  return std::nullopt;
}

Status WriteJob(const JobRecord& job) { return WriteJobFile(job, job.run_dir + "/job.json"); }

StatusOr<JobRecord> ReadJob(const std::string& run_dir) {
  return ReadJobFile(run_dir + "/job.json");
}

bool RemoveRunDirUnlessTaken(const JobRecord& job) {
  return !job.run_dir.empty() && RemoveRunDirUnlessTaken(job, base::CgroupsLock::Exclusive());
}

bool RemoveRunDirUnlessTaken(const JobRecord& job, const base::CgroupsLock& /*held*/) {
  if (job.run_dir.empty()) return false;
  StatusOr<JobRecord> there = ReadJob(job.run_dir);
  if (there.ok() && there->pid > 0 && there->pid != job.pid) return false;
  std::error_code ec;
  std::filesystem::remove_all(job.run_dir, ec);
  return !ec;
}

Status WriteJobFile(const JobRecord& job, const std::string& path) {
  json j = {{"name", job.name},
            {"command", job.command},
            {"cwd", job.cwd},
            {"run_dir", job.run_dir},
            {"pid", job.pid},
            {"pid_namespace", job.pid_namespace},
            {"cgroup", job.cgroup},
            {"stdout_log", job.stdout_log},
            {"stderr_log", job.stderr_log},
            {"state", RunStateName(job.state)},
            {"image", job.image},
            {"gpu", job.gpu},
            {"region", job.region},
            {"emu_state", job.emu_state},
            {"emu_gpus", job.emu_gpus},
            {"stopped", job.stopped}};
  if (!job.net_ns.empty()) j["net_ns"] = job.net_ns;
  {
    // A fresh file, never through a symlink: the run directory may be its workload's user's.
    const std::string tmp = path + ".tmp";
    unlink(tmp.c_str());
    const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    const std::string text = j.dump(2) + "\n";
    const bool written =
        fd >= 0 && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    if (fd >= 0) close(fd);
    if (!written) return IoError("cannot write " + path);
  }
  std::error_code ec;
  fs::rename(path + ".tmp", path, ec);
  if (ec) return IoError("cannot write " + path + ": " + ec.message());
  return Status::Ok();
}

StatusOr<JobRecord> ReadJobFile(const std::string& path) {
  // The record lies in the job's own run directory, which the job can write: whoever reads it
  // (the agent, as root) must not follow a link, block on a FIFO or read without end.
  constexpr off_t kMaxRecord = 1 << 20;
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound("no job record at " + path);
    return IoError("cannot open the job record " + path + ": " + strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > kMaxRecord) {
    close(fd);
    return InvalidArgument(path + ": not a job record (not a regular file of at most 1 MiB)");
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  text.resize(got);
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(path + ": not valid JSON");
  JobRecord job;
  try {
    job.name = j.at("name").get<std::string>();
    job.command = j.at("command").get<std::vector<std::string>>();
    job.cwd = j.at("cwd").get<std::string>();
    job.run_dir = j.at("run_dir").get<std::string>();
    job.pid = j.at("pid").get<int64_t>();
    job.pid_namespace = j.at("pid_namespace").get<bool>();
    job.cgroup = j.at("cgroup").get<std::string>();
    job.stdout_log = j.at("stdout_log").get<std::string>();
    job.stderr_log = j.at("stderr_log").get<std::string>();
    const std::string state = j.at("state").get<std::string>();
    const std::optional<RunState> known = ParseRunState(state);
    if (!known) return InvalidArgument(path + ": state '" + state + "' is not a job's state");
    job.state = *known;
    job.image = j.at("image").get<std::string>();
    job.gpu = j.at("gpu").get<std::string>();
    job.region = j.at("region").get<std::string>();
    job.emu_state = j.at("emu_state").get<std::string>();
    job.emu_gpus = j.at("emu_gpus").get<std::string>();
    // Optional: records written before it was kept lack it.
    if (j.contains("stopped")) job.stopped = j.at("stopped").get<std::vector<int64_t>>();
    if (j.contains("net_ns")) job.net_ns = j.at("net_ns").get<std::string>();
  } catch (const json::exception& e) {
    return InvalidArgument(path + ": " + e.what());
  }
  return job;
}

std::string RunBase() {
  if (const char* dir = getenv("PALADIN_RUN_DIR")) return dir;
  const char* runtime = getenv("XDG_RUNTIME_DIR");
  return std::string(runtime != nullptr ? runtime : "/tmp") + "/paladin-" +
         std::to_string(getuid());
}

StatusOr<JobRecord> FindJob(const std::string& name_or_pid) {
  const bool by_pid =
      !name_or_pid.empty() && name_or_pid.find_first_not_of("0123456789") == std::string::npos;
  std::error_code ec;
  JobRecord best;
  fs::file_time_type newest{};
  for (const auto& entry : fs::directory_iterator(RunBase(), ec)) {
    StatusOr<JobRecord> job = ReadJob(entry.path().string());
    if (!job.ok()) continue;
    const bool match = by_pid ? std::to_string(job->pid) == name_or_pid : job->name == name_or_pid;
    if (!match) continue;
    const fs::file_time_type t = fs::last_write_time(entry.path() / "job.json", ec);
    if (best.run_dir.empty() || t > newest) {
      best = *job;
      newest = t;
    }
  }
  if (best.run_dir.empty()) {
    return NotFound(
        "no job " + name_or_pid + " under " + RunBase() +
        " (paladin run records its jobs there; set PALADIN_RUN_DIR if it was elsewhere)");
  }
  return best;
}

namespace {

// Everything the child needs, prepared before the fork: after a raw clone only async-signal-safe
// calls are allowed.
struct Prepared {
  std::vector<std::string> env_storage;
  std::vector<char*> envp;
  std::vector<char*> argv;
  int out = -1;
  int err = -1;
  int go[2] = {-1, -1};
  const char* cwd = nullptr;
  int64_t uid = -1;
  int64_t gid = -1;
  // Set when the workload runs under paladin-workload-init: its path, its arguments (the
  // workload's user, group, working directory and command) and its own working directory.
  const char* init = nullptr;
  std::vector<std::string> init_storage;
  std::vector<char*> init_argv;
  const char* init_dir = nullptr;
  // The job's environment for paladin-workload-init (a sealed memfd, descriptor kInitEnvFd in
  // it): init itself runs as root with kFixedEnvironment only.
  int env_fd = -1;
  int lease_fd = -1;   // given to the init as fence::kLeaseFd
  int net_ns_fd = -1;  // the network namespace to join first (WorkloadSpec::net_ns), or -1
  // The job has a mount namespace of its own (a private copy of this one's): it mounts its own
  // /proc there and opens its files again by these paths, so that no descriptor of its refers
  // to a mount outside its namespace, which CRIU could not dump.
  bool own_mounts = false;
  bool own_shm = false;  // with own_mounts: a tmpfs of its own on /dev/shm
  const char* stdout_path = nullptr;
  const char* stderr_path = nullptr;
  std::string lease_path;  // "" when unknown
};

constexpr int kInitEnvFd = 3;
constexpr const char* kFixedPath =
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
char* const kFixedEnvironment[] = {const_cast<char*>(kFixedPath), nullptr};

// Only async-signal-safe calls after the clone: writes the parts to stderr.
void ChildSay(const char* what, const char* detail) {
  const char* why = strerrordesc_np(errno);
  const char* parts[] = {"paladin run: ", what, detail, ": ", why != nullptr ? why : "?", "\n"};
  for (const char* part : parts) {
    ssize_t ignored = write(STDERR_FILENO, part, strlen(part));
    (void)ignored;
  }
}

// Whether `fd` and `other` are the same file. Async-signal-safe.
bool SameFile(int fd, int other) {
  struct stat a {};
  struct stat b {};
  return fstat(fd, &a) == 0 && fstat(other, &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

// `fd` opened again by `path` in this mount namespace when that is the same file, else `fd`
// itself. Async-signal-safe.
int Reopened(int fd, const char* path, int flags) {
  if (path == nullptr || path[0] == '\0') return fd;
  const int again = open(path, flags | O_CLOEXEC, 0644);
  if (again < 0) return fd;
  if (!SameFile(fd, again)) {
    close(again);
    return fd;
  }
  return again;
}

// Unmounts every mount of a namespace file (nsfs: /run/netns/NAME and the like) from the job's
// view: they come and go with other software's namespaces, and a restore would need each again
// (CRIU binds every mount of the job's namespace from the restoring node's). Reads
// /proc/self/mountinfo line by line with plain system calls (async-signal-safe).
void DropNamespaceMounts() {
  const int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[8192];
  char line[4096];
  size_t used = 0;
  bool overlong = false;
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) {
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] != '\n') {
        if (used + 1 < sizeof line) {
          line[used++] = buf[i];
        } else {
          overlong = true;
        }
        continue;
      }
      line[used] = '\0';
      // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPER": the fifth
      // field is the mount point (octal escapes for spaces: such a mount stays).
      const char* type = strstr(line, " - ");
      char* point = line;
      for (int field = 0; field < 4 && point != nullptr; ++field) {
        point = strchr(point, ' ');
        if (point != nullptr) ++point;
      }
      if (!overlong && type != nullptr && point != nullptr && strncmp(type + 3, "nsfs ", 5) == 0) {
        char* end = strchr(point, ' ');
        if (end != nullptr) *end = '\0';
        if (strchr(point, '\\') == nullptr) (void)umount2(point, MNT_DETACH);
      }
      used = 0;
      overlong = false;
    }
  }
  close(fd);
}

// A tmpfs of the job's own on /dev/shm, in place of the host's: CRIU dumps the contents of a
// tmpfs that is not the host's with the job, so its POSIX semaphores and shared memory (files
// there, often unlinked or renamed while mapped) travel with it; the host's /dev/shm is external
// to the image and its files would have to be there at a restore. Async-signal-safe; where
// /dev/shm is missing or the mount fails, the job keeps the host's (said on stderr).
void MountOwnShm() {
  struct stat st {};
  if (stat("/dev/shm", &st) != 0 || !S_ISDIR(st.st_mode)) return;
  for (int i = 0; i < 8 && umount2("/dev/shm", MNT_DETACH) == 0; ++i) {
  }
  if (mount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0) {
    ChildSay("cannot mount the job's /dev/shm (it shares the host's)", "");
  }
}

// The job's own mounts: a copy of the launcher's whose mounts are slaves of the launcher's (a
// mount the host makes or removes below a shared mount reaches the job; the job's never reach the
// host), with a /proc of its PID namespace in place of the host's. Async-signal-safe; false (said
// on stderr) when the job cannot have them.
bool EnterOwnMounts(bool own_shm) {
  if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) {
    ChildSay("cannot make the job's mounts slaves of the host's", "");
    return false;
  }
  // Except where `ip netns` binds namespace files: one bound there later would reach the job, and
  // CRIU cannot restore it as a slave ("Failed to copy sharing"). Not a mount point: no matter.
  (void)mount(nullptr, "/run/netns", nullptr, MS_REC | MS_PRIVATE, nullptr);
  // The host's /proc (and whatever is mounted below it) leaves the job's view entirely.
  for (int i = 0; i < 8 && umount2("/proc", MNT_DETACH) == 0; ++i) {
  }
  if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    ChildSay("cannot mount the job's /proc", "");
    return false;
  }
  DropNamespaceMounts();
  if (own_shm) MountOwnShm();
  return true;
}

[[noreturn]] void ChildExec(const Prepared& p) {
  setsid();
  close(p.go[1]);  // so that the read below ends if the launcher dies first
  char byte = 0;
  while (read(p.go[0], &byte, 1) < 0 && errno == EINTR) {
  }
  if (p.net_ns_fd >= 0 && setns(p.net_ns_fd, CLONE_NEWNET) != 0) {
    ChildSay("cannot join the job's network namespace", "");
    _exit(126);
  }
  if (p.own_mounts && !EnterOwnMounts(p.own_shm)) _exit(126);
  const int null = open("/dev/null", O_RDONLY);
  if (null >= 0) dup2(null, STDIN_FILENO);
  const int out = p.own_mounts ? Reopened(p.out, p.stdout_path, O_WRONLY | O_APPEND) : p.out;
  const int err = p.own_mounts ? Reopened(p.err, p.stderr_path, O_WRONLY | O_APPEND) : p.err;
  dup2(out, STDOUT_FILENO);
  dup2(err, STDERR_FILENO);
  // The lease first goes out of the way of kInitEnvFd (it may be there); F_DUPFD is
  // async-signal-safe.
  const int held = p.init != nullptr && p.lease_fd >= 0 && p.own_mounts
                       ? Reopened(p.lease_fd, p.lease_path.c_str(), O_RDONLY)
                       : p.lease_fd;
  const int lease = p.init != nullptr && held >= 0 ? fcntl(held, F_DUPFD_CLOEXEC, 64) : -1;
  if (p.init != nullptr && held >= 0 && lease < 0) {
    ChildSay("cannot pass the lease to the init", "");
    _exit(126);
  }
  if (p.init != nullptr) {
    // The job's environment at kInitEnvFd (dup2 clears close-on-exec; so must fcntl when the
    // descriptor is there already).
    if ((p.env_fd == kInitEnvFd ? fcntl(kInitEnvFd, F_SETFD, 0) : dup2(p.env_fd, kInitEnvFd)) < 0) {
      ChildSay("cannot pass the job's environment", "");
      _exit(126);
    }
  }
  // Nothing else of the launcher's: an inherited descriptor would tie the job's checkpoints to a
  // file outside it. The lease is the one exception, and the init keeps it from the command.
  if (lease >= 0) {
    static_assert(fence::kLeaseFd > kInitEnvFd, "the lease goes above the environment");
    if (dup2(lease, fence::kLeaseFd) < 0) {
      ChildSay("cannot pass the lease to the init", "");
      _exit(126);
    }
    close_range(kInitEnvFd + 1, fence::kLeaseFd - 1, 0);
    close_range(fence::kLeaseFd + 1, ~0U, 0);
  } else {
    close_range(p.init != nullptr ? kInitEnvFd + 1 : 3, ~0U, 0);
  }
  if (p.init != nullptr) {
    // It switches user and directory in the workload's process, after its fork.
    if (chdir(p.init_dir) != 0 && chdir("/") != 0) {
      ChildSay("cannot enter ", p.init_dir);
      _exit(126);
    }
    execve(p.init, p.init_argv.data(), kFixedEnvironment);
    ChildSay("cannot run ", p.init);
    _exit(127);
  }
  if (p.cwd != nullptr && chdir(p.cwd) != 0) {
    ChildSay("cannot enter ", p.cwd);
    _exit(126);
  }
  // Raw system calls: after a raw clone glibc's set*id would signal the parent's threads.
  if (p.gid >= 0 && (syscall(SYS_setgroups, 0, nullptr) != 0 ||
                     syscall(SYS_setresgid, p.gid, p.gid, p.gid) != 0)) {
    ChildSay("cannot switch group", "");
    _exit(126);
  }
  if (p.uid >= 0 && syscall(SYS_setresuid, p.uid, p.uid, p.uid) != 0) {
    ChildSay("cannot switch user", "");
    _exit(126);
  }
  execvpe(p.argv[0], p.argv.data(), p.envp.data());
  // Only async-signal-safe calls here: strerrordesc_np neither allocates nor reads the locale.
  const char* why = strerrordesc_np(errno);
  const char* parts[] = {"paladin run: cannot run ", p.argv[0], ": ", why != nullptr ? why : "?",
                         "\n"};
  for (const char* part : parts) {
    ssize_t ignored = write(STDERR_FILENO, part, strlen(part));
    (void)ignored;
  }
  _exit(127);
}

// A sealed memory file holding `env` as NUL-terminated entries, for paladin-workload-init.
StatusOr<int> EnvironmentFile(const std::vector<std::string>& env) {
  const int fd = memfd_create("paladin-job-env", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return IoError(std::string("memfd_create: ") + strerror(errno));
  std::string text;
  for (const std::string& e : env) text.append(e).push_back('\0');
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = strerror(errno);
      close(fd);
      return IoError("cannot write the job's environment: " + why);
    }
    done += static_cast<size_t>(n);
  }
  (void)fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);
  return fd;
}

// The network namespace file `path`, open (close-on-exec); refuses anything that is not one.
StatusOr<int> OpenNetNamespace(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return IoError("cannot open the network namespace " + path + ": " + strerror(errno));
  }
  if (ioctl(fd, NS_GET_NSTYPE) != CLONE_NEWNET) {
    close(fd);
    return InvalidArgument(path + " is not a network namespace");
  }
  return fd;
}

bool IsExecutable(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

StatusOr<std::string> FindHelperProgram(const std::string& name, const char* env) {
  if (const char* path = getenv(env); path != nullptr && path[0] != '\0') {
    if (IsExecutable(path)) return std::string(path);
    return NotFound(std::string(env) + "=" + path + " is not an executable file");
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return NotFound("cannot find " + name + ": /proc/self/exe: " + ec.message());
  // Where Paladin's libraries are staged ($PALADIN_LIB_DIR: `paladin demo` copies it there), then
  // the build tree's and the installed layouts.
  std::vector<fs::path> candidates;
  if (const char* dir = getenv("PALADIN_LIB_DIR"); dir != nullptr && dir[0] != '\0') {
    candidates.push_back(fs::path(dir) / name);
  }
  candidates.push_back(exe.parent_path() / name);
  candidates.push_back(exe.parent_path().parent_path() / "lib/paladin" / name);
  std::string searched;
  for (const fs::path& path : candidates) {
    if (IsExecutable(path.string())) return path.string();
    searched += (searched.empty() ? "" : ", ") + path.parent_path().string();
  }
  return NotFound("cannot find " + name + " (looked in " + searched + "; set " + env + ")");
}

StatusOr<std::string> FindWorkloadInit() {
  return FindHelperProgram("paladin-workload-init", "PALADIN_WORKLOAD_INIT");
}

StatusOr<StartedWorkload> StartWorkload(const WorkloadSpec& spec) {
  if (spec.command.empty()) return InvalidArgument("no command to run");
  Prepared p;
  // The base (this process's environment, or the fixed one), then the spec's variables; a later
  // entry replaces an earlier one of the same name, so that each name appears once.
  std::vector<std::string>& env = p.env_storage;
  auto put = [&env](std::string entry) {
    const size_t name_end = entry.find('=');
    const std::string_view name(entry.data(), name_end == std::string::npos ? 0 : name_end + 1);
    for (std::string& e : env) {
      if (!name.empty() && e.compare(0, name.size(), name) == 0) {
        e = std::move(entry);
        return;
      }
    }
    env.push_back(std::move(entry));
  };
  if (spec.inherit_env) {
    for (char** e = environ; *e != nullptr; ++e) put(*e);
  } else {
    put(kFixedPath);
  }
  for (const auto& [key, value] : spec.env) put(std::string(key).append("=").append(value));
  for (std::string& e : p.env_storage) p.envp.push_back(e.data());
  p.envp.push_back(nullptr);
  for (const std::string& a : spec.command) p.argv.push_back(const_cast<char*>(a.c_str()));
  p.argv.push_back(nullptr);
  p.out = open(spec.stdout_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  p.err = open(spec.stderr_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (p.out < 0 || p.err < 0) {
    return IoError("cannot open the workload's logs in " +
                   fs::path(spec.stdout_log).parent_path().string() + ": " + strerror(errno));
  }
  p.stdout_path = spec.stdout_log.c_str();
  p.stderr_path = spec.stderr_log.c_str();
  if (spec.lease_fd >= 0) {
    std::error_code ec;
    p.lease_path = fs::read_symlink("/proc/self/fd/" + std::to_string(spec.lease_fd), ec).string();
  }
  p.cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();
  p.uid = spec.uid;
  p.gid = spec.gid;
  StartedWorkload started;
  // An unprivileged root cannot be dumped by CRIU (its parasite must mount a /proc for the
  // namespace from inside the root task): root leads the namespace instead.
  // The init also enforces the node's lease, for root workloads too.
  std::string init;
  if (spec.pid_namespace && (spec.uid > 0 || spec.lease_fd >= 0)) {
    StatusOr<std::string> found = FindWorkloadInit();
    if (found.ok()) {
      init = *found;
      StatusOr<int> env_fd = EnvironmentFile(p.env_storage);
      if (!env_fd.ok()) {
        close(p.out);
        close(p.err);
        return env_fd.status();
      }
      p.env_fd = *env_fd;
      // --lease first: HeldLease looks for it there.
      p.init_storage = {init};
      if (spec.lease_fd >= 0) p.init_storage.emplace_back("--lease");
      p.lease_fd = spec.lease_fd;
      p.init_storage.insert(p.init_storage.end(),
                            {"--env-fd", std::to_string(kInitEnvFd), std::to_string(spec.uid),
                             std::to_string(spec.gid), spec.cwd.empty() ? "-" : spec.cwd});
      p.init_storage.insert(p.init_storage.end(), spec.command.begin(), spec.command.end());
      for (std::string& a : p.init_storage) p.init_argv.push_back(a.data());
      p.init_argv.push_back(nullptr);
    } else {
      started.warnings.push_back(
          found.status().message() +
          (spec.uid > 0 ? ": the workload leads its namespace as its user, and CRIU cannot "
                          "checkpoint it"
                        : ": nothing but the agent itself fences the workload"));
    }
  }
  // The run directory: CRIU's parasite creates proc.crtools in the working directory of the root.
  const std::string init_dir = fs::path(spec.stdout_log).parent_path().string();
  p.init_dir = init_dir.empty() ? "/" : init_dir.c_str();
  if (!spec.net_ns.empty()) {
    StatusOr<int> net = OpenNetNamespace(spec.net_ns);
    if (!net.ok()) {
      close(p.out);
      close(p.err);
      if (p.env_fd >= 0) close(p.env_fd);
      return net.status();
    }
    p.net_ns_fd = *net;
  }
  if (pipe2(p.go, O_CLOEXEC) != 0) return IoError(std::string("pipe: ") + strerror(errno));

  pid_t pid = -1;
  if (spec.pid_namespace) {
    p.init = init.empty() ? nullptr : init.c_str();
    // Its own mounts (for a /proc of its own) and its own System V IPC (so that its shared
    // memory, semaphores and message queues are dumped and travel with it); the host's network
    // and hostname stay (docs/ckpt.md, "What a job sees").
    p.own_mounts = spec.own_proc;
    p.own_shm = spec.own_shm;
    const unsigned long own =
        (spec.own_proc ? CLONE_NEWNS : 0UL) | (spec.own_ipc ? CLONE_NEWIPC : 0UL);
    pid = static_cast<pid_t>(
        syscall(SYS_clone, CLONE_NEWPID | own | SIGCHLD, nullptr, nullptr, nullptr, nullptr));
    if (pid < 0 && own != 0) {
      started.warnings.push_back(std::string("no mount or IPC namespace of its own (") +
                                 strerror(errno) +
                                 "): the job sees the host's /proc and System V IPC");
      p.own_mounts = false;
      pid = static_cast<pid_t>(
          syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, nullptr, nullptr, nullptr, nullptr));
    }
    if (pid == 0) ChildExec(p);
    if (pid > 0) started.pid_namespace = true;
    if (pid > 0) started.init = p.init != nullptr;
    if (pid > 0) started.fenced = p.init != nullptr && p.lease_fd >= 0;
    if (pid < 0) {
      started.warnings.push_back(std::string("no PID namespace (") + strerror(errno) +
                                 "): the workload can be restored only where its pids are free");
    }
  }
  if (pid < 0) {
    p.init = nullptr;  // without a namespace CRIU needs no /proc of it
    pid = fork();
    if (pid == 0) ChildExec(p);
  }
  if (pid < 0) {
    const std::string why = strerror(errno);
    if (p.net_ns_fd >= 0) close(p.net_ns_fd);
    return IoError("cannot start the workload: " + why);
  }
  started.pid = pid;
  if (!spec.cgroup.empty()) {
    StatusOr<base::Cgroup> group = base::Cgroup::Create(spec.cgroup);
    Status added = group.ok() ? group->Add(pid) : group.status();
    if (added.ok()) {
      started.cgroup = spec.cgroup;
    } else {
      started.warnings.push_back("no cgroup (" + added.message() +
                                 "): host memory and CPU are not limited or measured by group");
    }
  }
  // Now that it is in its cgroup, let it run.
  close(p.go[0]);
  ssize_t ignored = write(p.go[1], "g", 1);
  (void)ignored;
  close(p.go[1]);
  close(p.out);
  close(p.err);
  if (p.env_fd >= 0) close(p.env_fd);
  if (p.net_ns_fd >= 0) close(p.net_ns_fd);
  return started;
}

}  // namespace paladin::ckpt
