#include "paladin/ckpt/criu.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "paladin/base/cgroup.h"
#include "paladin/ckpt/subprocess.h"

namespace paladin::ckpt {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefixCriu = "/opt/paladin/criu/criu";
constexpr const char* kPrefixLazyCriu = "/opt/paladin/criu-lazy/criu";
constexpr int kCapSysResource = 24;  // CAP_SYS_RESOURCE, <linux/capability.h>

// CRIU's first error line (what went wrong first; later ones are its consequences) and where its
// whole log is. Without an error line (CRIU killed, say), its last line.
std::string ErrorReport(const std::string& log) {
  std::ifstream in(log);
  std::string first_error;
  std::string last;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    last = line;
    // "(00.012345) Error (criu/sockets.c:628): ...": the time is of no use to the reader.
    const size_t error = line.find("Error (");
    // CRIU reports, and goes on after, a failure to raise its own descriptor limit where root
    // lacks CAP_SYS_RESOURCE.
    if (line.find("Can't setup RLIMIT_NOFILE") != std::string::npos) continue;
    if (error != std::string::npos && (error == 0 || line[error - 1] == ' ')) {
      first_error = line.substr(error);
      break;
    }
  }
  if (last.empty()) return "\n  (CRIU wrote no log at " + log + ")";
  return "\n  " + (first_error.empty() ? "no error line; its last line: " + last : first_error) +
         "\n  (CRIU's full log: " + log + ")";
}

// What a failed dump's log says about its cause, when it is one Paladin knows how to avoid.
std::string DumpHint(const Criu& criu, const std::string& log) {
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    // CRIU before 4.2 reads SO_PASSCRED on every socket, which Linux 6.16+ refuses on inet ones.
    if (line.find("Can't get 1:16 opt") != std::string::npos) {
      return "\n  (CRIU " + criu.version +
             " cannot dump inet sockets on this kernel; CRIU 4.2 can: bash scripts/criu.sh)";
    }
    // The parasite could not mount a /proc of the job's namespace from inside its root task.
    if (line.find("Can't get /proc fd") != std::string::npos ||
        line.find("doesn't belong to it") != std::string::npos) {
      return "\n  (the root of the job's tree cannot mount a /proc for its PID namespace: it runs "
             "as an unprivileged user, or cannot create proc.crtools in its working directory; "
             "ckpt::StartWorkload starts unprivileged jobs under paladin-workload-init when it "
             "can find it)";
    }
    if (line.find("Can't get rlimit") != std::string::npos &&
        line.find("Operation not permitted") != std::string::npos) {
      return criu.rlimit_preload.empty()
                 ? "\n  (CRIU reads the resource limits of a process that runs as another user "
                   "only with CAP_SYS_RESOURCE, which this process lacks, or through "
                   "libpaladin-criu-rlimit.so, which was not found: install Paladin with it, or "
                   "set PALADIN_LIB_DIR to its folder)"
                 : "\n  (CRIU could not read the resource limits of a process of another user "
                   "even through " +
                       criu.rlimit_preload + ")";
    }
  }
  return "";
}

bool IsFile(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

std::string KernelRelease() {
  utsname u{};
  return uname(&u) == 0 ? u.release : "unknown";
}

// A `sleep` leading its own session as pid 1 of a new PID namespace: what CRIU dumps in the probe.
// It works in `dir` with /dev/null for stdio, as a job does: a caller's working directory or
// output on a mount CRIU cannot resolve (a node agent in a mount namespace of its own) would
// otherwise fail the probe, and with it every checkpoint.
// Nothing of the caller's is inherited either: a descriptor holding a file lock (an agent started
// under flock(1), say) would make CRIU refuse the probe's process, and every checkpoint with it.
pid_t StartProbeProcess(const std::string& dir) {
  const pid_t pid = static_cast<pid_t>(
      syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, nullptr, nullptr, nullptr, nullptr));
  if (pid != 0) return pid;
  setsid();
  const int null = open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3 && null >= 0; ++fd) dup2(null, fd);
  close_range(3, ~0U, 0);
  if (chdir(dir.c_str()) != 0) _exit(126);
  char sleep_path[] = "sleep";
  char seconds[] = "60";
  char* argv[] = {sleep_path, seconds, nullptr};
  execvp("sleep", argv);
  _exit(127);
}

Status ProbeDump(const Criu& criu, const std::string& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  const pid_t pid = StartProbeProcess(dir);
  if (pid < 0) return FailedPrecondition("cannot start a process in a new PID namespace (root?)");
  usleep(100 * 1000);
  SubprocessResult r = RunBounded(
      {criu.path, "dump", "-t", std::to_string(pid), "-D", dir, "-o", "dump.log"}, criu.Env(), 20);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  if (r.timed_out) return FailedPrecondition("criu dump still running after 20 s");
  if (r.exit_code != 0) {
    return FailedPrecondition("criu dump failed (exit " + std::to_string(r.exit_code) +
                              "):" + ErrorReport(dir + "/dump.log"));
  }
  return Status::Ok();
}

// Paladin's sockets policy (docs/ckpt.md, "Sockets"): connections between the job's processes are
// dumped with their state (CRIU's TCP repair mode) and restored; the job's connections to outside
// peers are closed before the dump (CloseOutsideConnections), so no lock of the network is needed
// while the job is away (CRIU's default locks with iptables, which a node may not have); a
// connection still waiting in a listening socket's queue is dropped (its client sees a reset).
const std::vector<std::string> kDumpSocketFlags = {"--tcp-established", "--skip-in-flight"};

// The cgroup v1 hierarchies in which `pid` has a group of its own (not the hierarchy's root), as
// /proc/PID/cgroup names them ("memory", "cpu,cpuacct", "name=systemd"). CRIU dumps each
// hierarchy a tree is in from the tree's group down: a tree left at the root of one (cpuset,
// say, where Paladin makes no group) would take every group of the host into its image (other
// jobs', a kubelet's pods'), and its restore fails once one of them is gone ("Failed writing 0 to
// cpuset/kubepods/.../cgroup.clone_children: No such device"). Empty on a cgroup v2 host (one
// hierarchy, whose group the tree has from Paladin) or when unreadable.
std::vector<std::string> OwnCgroupHierarchies(pid_t pid) {
  std::vector<std::string> own;
  bool v1 = false;
  for (const base::CgroupLine& line : base::CgroupsOf(pid)) {
    if (line.controllers.empty()) continue;  // the unified hierarchy
    v1 = true;
    if (line.path != "/") own.push_back(line.controllers);
  }
  return v1 ? own : std::vector<std::string>();
}

// A process's mount namespace ("mnt:[INODE]"), "" when unreadable.
std::string MountNamespace(const std::string& pid) {
  std::error_code ec;
  return fs::read_symlink("/proc/" + pid + "/ns/mnt", ec).string();
}

// Whether a dump holds the job's own mount namespace (its mount points image).
bool HoldsMountNamespace(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind("mountpoints-", 0) == 0) return true;
  }
  return false;
}

// Whether a dump saved the state of TCP connections (one tcp-stream image per connection).
bool HoldsTcpStreams(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind("tcp-stream-", 0) == 0) return true;
  }
  return false;
}

// pid 1 of a new PID namespace, leading its own session, holding a listening TCP socket and a
// bound UDP socket on loopback and sleeping; *port is the TCP one. Its stdio is /dev/null (a
// terminal would be external to the dump) and it works in `dir`, where CRIU puts proc.crtools.
pid_t StartSocketProbe(const std::string& dir, int* port) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return -1;
  const pid_t pid = static_cast<pid_t>(
      syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, nullptr, nullptr, nullptr, nullptr));
  if (pid == 0) {
    setsid();
    const int null = open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd) dup2(null, fd);
    // As StartProbeProcess: only stdio and the pipe that reports the port.
    if (dup2(ready[1], 3) != 3) _exit(126);
    ready[1] = 3;
    close_range(4, ~0U, 0);
    if (chdir(dir.c_str()) != 0) _exit(126);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    const int tcp = socket(AF_INET, SOCK_STREAM, 0);
    const int udp = socket(AF_INET, SOCK_DGRAM, 0);
    if (tcp < 0 || udp < 0 || bind(tcp, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(tcp, 4) != 0 || bind(udp, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        getsockname(tcp, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      _exit(126);
    }
    const int bound = ntohs(addr.sin_port);
    if (write(ready[1], &bound, sizeof(bound)) != sizeof(bound)) _exit(126);
    char sleep_path[] = "sleep";
    char seconds[] = "60";
    char* argv[] = {sleep_path, seconds, nullptr};
    execvp("sleep", argv);
    _exit(127);
  }
  close(ready[1]);
  if (pid > 0 && read(ready[0], port, sizeof(*port)) != sizeof(*port)) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    close(ready[0]);
    return -1;
  }
  close(ready[0]);
  return pid;
}

bool AcceptsOnLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

// FNV-1a: a stable short name for a CRIU's path in the probe's cache file name.
std::string PathKey(const std::string& path) {
  uint32_t h = 2166136261U;
  for (unsigned char c : path) h = (h ^ c) * 16777619U;
  char hex[9];
  snprintf(hex, sizeof(hex), "%08x", h);
  return hex;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> Criu::Env() const {
  std::vector<std::pair<std::string, std::string>> env;
  if (no_breakpoints) env.emplace_back("CRIU_FAULT", "130");
  if (!rlimit_preload.empty()) {
    const char* existing = getenv("LD_PRELOAD");
    env.emplace_back("LD_PRELOAD", existing != nullptr && existing[0] != '\0'
                                       ? rlimit_preload + ":" + existing
                                       : rlimit_preload);
  }
  return env;
}

bool HasSysResource() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    const unsigned long long caps = std::strtoull(line.c_str() + 7, nullptr, 16);
    return ((caps >> kCapSysResource) & 1U) != 0;
  }
  return false;
}

StatusOr<std::string> FindCriuRlimitLibrary() {
  constexpr const char* kName = "libpaladin-criu-rlimit.so";
  std::vector<std::string> dirs;
  if (const char* dir = getenv("PALADIN_LIB_DIR"); dir != nullptr && dir[0] != '\0') {
    dirs.emplace_back(dir);
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    dirs.push_back(exe.parent_path().string());
    dirs.push_back((exe.parent_path().parent_path() / "lib" / "paladin").string());
  }
  std::string searched;
  for (const std::string& dir : dirs) {
    const std::string path = dir + "/" + kName;
    if (IsFile(path)) return path;
    searched += (searched.empty() ? "" : ", ") + dir;
  }
  return NotFound(std::string("cannot find ") + kName + " (looked in " + searched +
                  "; set PALADIN_LIB_DIR)");
}

StatusOr<Criu> LocateCriu() {
  std::vector<std::string> candidates;
  if (const char* p = getenv("PALADIN_CRIU")) candidates.emplace_back(p);
  candidates.emplace_back(kPrefixCriu);
  candidates.emplace_back("criu");
  std::string tried;
  for (const std::string& path : candidates) {
    if (path.find('/') != std::string::npos && !fs::exists(path)) {
      tried += "\n  " + path + ": not there";
      continue;
    }
    SubprocessResult r = RunBounded({path, "--version"}, {}, 10);
    std::istringstream out(r.output);
    std::string word;
    std::string version;
    while (out >> word) {
      if (word == "Version:") out >> version;
    }
    if (r.exit_code != 0 || version.empty()) {
      tried += "\n  " + path + ": " + (r.timed_out ? "timed out" : "does not run");
      continue;
    }
    if (version[0] < '4' || version[1] != '.') {
      tried.append("\n  ")
          .append(path)
          .append(": version ")
          .append(version)
          .append(" (4.0 or newer needed)");
      continue;
    }
    Criu criu;
    criu.path = path;
    criu.version = version;
    if (RunBounded({path, "check", "--feature", "nftables"}, {}, 10).exit_code == 0) {
      criu.network_lock = "nftables";
    }
    // Only root dumps other users' processes; without CAP_SYS_RESOURCE CRIU cannot read their
    // resource limits, unless through libpaladin-criu-rlimit.so.
    if (geteuid() != 0) {
      criu.dumps_other_users = false;
    } else if (!HasSysResource()) {
      StatusOr<std::string> lib = FindCriuRlimitLibrary();
      if (lib.ok()) {
        criu.rlimit_preload = *lib;
        criu.rlimit_note =
            "this process lacks CAP_SYS_RESOURCE: CRIU reads the resource limits of other "
            "users' processes through " +
            *lib;
      } else {
        criu.dumps_other_users = false;
        criu.rlimit_note = "this process lacks CAP_SYS_RESOURCE and " + lib.status().message() +
                           ": CRIU cannot dump jobs that run as another user";
      }
    }
    return criu;
  }
  return NotFound("no usable CRIU; install it with scripts/criu.sh (or set PALADIN_CRIU):" + tried);
}

Status ProbeBreakpoints(Criu* criu, const std::string& cache_dir) {
  const std::string cache = cache_dir + "/criu-probe-" + KernelRelease();
  std::ifstream cached(cache);
  std::string answer;
  std::string tracking;
  if (cached >> answer >> tracking && (answer == "plain" || answer == "no-breakpoints")) {
    criu->no_breakpoints = answer == "no-breakpoints";
    criu->dirty_tracking = tracking == "dirty-tracking";
    return Status::Ok();
  }
  // Per process: two Paladin commands of one run base (a migration's both ends on one node) may
  // probe at the same time.
  const std::string scratch = cache_dir + "/criu-probe-images-" + std::to_string(getpid());
  criu->no_breakpoints = false;
  Status plain = ProbeDump(*criu, scratch);
  if (!plain.ok()) {
    criu->no_breakpoints = true;
    Status fallback = ProbeDump(*criu, scratch);
    if (!fallback.ok()) {
      return FailedPrecondition("CRIU cannot dump here: plainly: " + plain.message() +
                                "; with CRIU_FAULT=130: " + fallback.message());
    }
  }
  std::error_code ec;
  fs::remove_all(scratch, ec);
  criu->dirty_tracking =
      RunBounded({criu->path, "check", "--feature", "mem_dirty_track"}, criu->Env(), 10)
          .exit_code == 0;
  std::ofstream(cache) << (criu->no_breakpoints ? "no-breakpoints" : "plain") << " "
                       << (criu->dirty_tracking ? "dirty-tracking" : "no-dirty-tracking") << "\n";
  return Status::Ok();
}

Status ProbeInetSockets(Criu* criu, const std::string& cache_dir) {
  const std::string cache =
      cache_dir + "/criu-inet-" + KernelRelease() + "-" + criu->version + "-" + PathKey(criu->path);
  std::ifstream cached(cache);
  std::string answer;
  if (cached >> answer && (answer == "yes" || answer == "no")) {
    criu->inet_sockets = answer == "yes";
    cached.ignore(1);
    std::string line;
    criu->inet_error.clear();
    while (std::getline(cached, line))
      criu->inet_error += (criu->inet_error.empty() ? "" : "\n") + line;
    return Status::Ok();
  }
  const std::string scratch = cache_dir + "/criu-inet-probe-" + std::to_string(getpid());
  std::error_code ec;
  fs::remove_all(scratch, ec);
  fs::create_directories(scratch + "/images", ec);
  if (ec) return IoError("cannot create " + scratch + ": " + ec.message());
  int port = 0;
  const pid_t pid = StartSocketProbe(scratch, &port);
  if (pid < 0) return FailedPrecondition("cannot start a process in a new PID namespace (root?)");
  DumpOptions dump;
  dump.timeout_s = 20;
  Status result = Dump(*criu, pid, scratch + "/images", dump);
  kill(pid, SIGKILL);  // the dump killed it, unless it failed
  waitpid(pid, nullptr, 0);
  if (result.ok()) {
    RestoreOptions restore;
    restore.timeout_s = 20;
    StatusOr<pid_t> restored = Restore(*criu, scratch + "/images", restore);
    if (restored.ok()) {
      if (!AcceptsOnLoopback(port)) {
        result = Internal("the restored process does not accept on its port " +
                          std::to_string(port) + " (images in " + scratch + ")");
      }
      kill(*restored, SIGKILL);
      waitpid(*restored, nullptr, WNOHANG);
    } else {
      result = restored.status();
    }
  }
  criu->inet_sockets = result.ok();
  criu->inet_error = result.ok() ? "" : result.message();
  if (result.ok()) fs::remove_all(scratch, ec);
  std::ofstream(cache) << (result.ok() ? "yes" : "no") << "\n" << criu->inet_error << "\n";
  return Status::Ok();
}

namespace {

// CRIU's name for the tree's network namespace `net_ns` as external: "net[INODE]:KEY". The root
// must be in that namespace (a job record naming another one is refused).
StatusOr<std::string> ExternalNet(pid_t root, const std::string& net_ns) {
  struct stat file {};
  struct stat job {};
  if (stat(net_ns.c_str(), &file) != 0) {
    return FailedPrecondition("the job's network namespace " + net_ns + ": " + strerror(errno));
  }
  const std::string own = "/proc/" + std::to_string(root) + "/ns/net";
  if (stat(own.c_str(), &job) != 0) return FailedPrecondition("cannot read " + own);
  if (file.st_dev != job.st_dev || file.st_ino != job.st_ino) {
    return FailedPrecondition("pid " + std::to_string(root) + " is not in the network namespace " +
                              net_ns + " its job record names");
  }
  return "net[" + std::to_string(job.st_ino) + "]:" + kExternalNetKey;
}

}  // namespace

Status Dump(const Criu& criu, pid_t root, const std::string& dir, const DumpOptions& options) {
  std::vector<std::string> argv = {criu.path, options.pre_dump ? "pre-dump" : "dump",
                                   "-t",      std::to_string(root),
                                   "-D",      dir,
                                   "-o",      options.pre_dump ? "pre-dump.log" : "dump.log",
                                   "-v4",     "--file-locks"};
  argv.insert(argv.end(), kDumpSocketFlags.begin(), kDumpSocketFlags.end());
  argv.insert(argv.end(), {"--network-lock", criu.network_lock});
  // A file the job holds by a name it no longer has, while another name still links it (glibc's
  // sem_open maps a temporary file, then links it under the semaphore's name and removes the
  // temporary one; Python's multiprocessing keeps the name): CRIU links it once more in its
  // folder (link_remap.N) and restores it from there. In the job's own /dev/shm the link goes
  // with the tmpfs's contents.
  if (!options.pre_dump) argv.emplace_back("--link-remap");
  if (options.pre_dump || !options.parent_images.empty()) argv.emplace_back("--track-mem");
  if (!options.parent_images.empty()) {
    argv.emplace_back("--prev-images-dir");
    argv.push_back(options.parent_images);
  }
  // A job with its own mount namespace (ckpt::StartWorkload) sees a copy of the host's mounts,
  // slaves of the host's, with its own /proc: every mount of the copy is the host's, declared
  // external (CRIU finds them itself) and bound again from the restoring node's at a restore,
  // where it becomes again a slave of the host's mount (the masters are external too).
  const std::string job_mounts = MountNamespace(std::to_string(root));
  if (!job_mounts.empty() && job_mounts != MountNamespace("self")) {
    argv.insert(argv.end(), {"--external", "mnt[]", "--enable-external-masters"});
  }
  // Only the tree's own groups go into the image (OwnCgroupHierarchies); a tree with none keeps
  // CRIU's default.
  for (const std::string& hierarchy : OwnCgroupHierarchies(root)) {
    argv.insert(argv.end(), {"--cgroup-dump-controller", hierarchy});
  }
  if (!options.net_ns.empty()) {
    StatusOr<std::string> external = ExternalNet(root, options.net_ns);
    if (!external.ok()) return external.status();
    argv.insert(argv.end(), {"--external", *external});
  }
  if (options.leave_running && !options.pre_dump) argv.emplace_back("--leave-running");
  if (options.leave_stopped) argv.emplace_back("--leave-stopped");
  const bool streaming =
      options.page_server_socket >= 0 && options.lazy_socket < 0 && !options.pre_dump;
  if (streaming) {
    argv.insert(argv.end(), {"--page-server", "--ps-socket", std::to_string(kPassedFd)});
  }
  if (options.lazy_socket >= 0 && !options.pre_dump) {
    // The log goes outside the image: the image is sent while the dump still writes it.
    argv[7] = options.lazy_log;
    argv[8] = "-v3";  // -v4 logs every page served, which slows the transfer
    argv.insert(argv.end(), {"--lazy-pages", "--ps-socket", std::to_string(kPassedFd)});
    StatusOr<pid_t> dump =
        StartServing(criu, argv, options.lazy_log, options.timeout_s, options.lazy_socket);
    if (!dump.ok()) {
      return Status(dump.status().code(), "criu dump --lazy-pages of pid " + std::to_string(root) +
                                              ": " + dump.status().message() +
                                              DumpHint(criu, options.lazy_log));
    }
    if (options.lazy_dump != nullptr) *options.lazy_dump = *dump;
    return Status::Ok();
  }
  SubprocessResult r = RunBounded(argv, criu.Env(), options.timeout_s, "",
                                  streaming ? options.page_server_socket : -1);
  std::string log = dir + (options.pre_dump ? "/pre-dump.log" : "/dump.log");
  if ((r.timed_out || r.exit_code != 0) && !options.failed_log.empty()) {
    std::error_code ec;
    fs::copy_file(log, options.failed_log, fs::copy_options::overwrite_existing, ec);
    if (!ec) log = options.failed_log;
  }
  if (r.timed_out) {
    return Internal("criu dump of pid " + std::to_string(root) + " still running after " +
                    std::to_string(static_cast<int>(options.timeout_s)) + " s; killed" +
                    ErrorReport(log));
  }
  if (r.exit_code != 0) {
    return Internal("criu dump of pid " + std::to_string(root) + " failed (exit " +
                    std::to_string(r.exit_code) + "):" + ErrorReport(log) + DumpHint(criu, log));
  }
  return Status::Ok();
}

StatusOr<pid_t> Restore(const Criu& criu, const std::string& dir, const RestoreOptions& options) {
  const std::string pidfile = fs::absolute(dir).string() + "/restored.pid";
  std::error_code ec;
  fs::remove(pidfile, ec);
  std::vector<std::string> argv = {criu.path,   "restore",     "-D",          dir,
                                   "-o",        "restore.log", "-v4",         "-d",
                                   "--pidfile", pidfile,       "--file-locks"};
  // CRIU restores a connected TCP socket only when told how: with the state it dumped
  // (--tcp-established), or closed. Images of a Paladin before CRIU 4.2 hold their connections
  // without state (they were dumped with --tcp-close): closed, as they were promised.
  argv.emplace_back(HoldsTcpStreams(dir) ? "--tcp-established" : "--tcp-close");
  argv.insert(argv.end(), {"--network-lock", criu.network_lock});
  if (options.leave_stopped) argv.emplace_back("--leave-stopped");
  if (options.lazy_pages) argv.emplace_back("--lazy-pages");
  // CRIU must inherit them: dup() drops close-on-exec. CRIU's key is the path without its '/'.
  std::vector<int> passed;
  for (const auto& [fd, path] : options.inherit_fds) {
    const int copy = dup(fd);
    if (copy < 0) {
      for (int c : passed) close(c);
      return IoError("cannot pass " + path + " to criu restore: " + strerror(errno));
    }
    passed.push_back(copy);
    argv.emplace_back("--inherit-fd");
    const size_t start = path.find_first_not_of('/');
    argv.push_back("fd[" + std::to_string(copy) +
                   "]:" + (start == std::string::npos ? std::string() : path.substr(start)));
  }
  if (options.net_ns_fd >= 0) {
    const int copy = dup(options.net_ns_fd);
    if (copy < 0) {
      for (int c : passed) close(c);
      return IoError("cannot pass the job's network namespace to criu restore: " +
                     std::string(strerror(errno)));
    }
    passed.push_back(copy);
    argv.insert(argv.end(),
                {"--inherit-fd", "fd[" + std::to_string(copy) + "]:" + kExternalNetKey});
  }
  // The job's mount namespace is rebuilt on the host's root file system, bound where CRIU can
  // pivot into it, in a mount namespace of CRIU's own that goes with it.
  std::string root_at;
  if (HoldsMountNamespace(dir)) {
    std::string pattern = (fs::temp_directory_path(ec) / "paladin-criu-root-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      for (int c : passed) close(c);
      return IoError("cannot make a directory for the job's root: " + std::string(strerror(errno)));
    }
    root_at = pattern;
    argv.insert(argv.end(), {"--root", root_at, "--external", "mnt[]"});
  }
  SubprocessResult r = RunBounded(argv, criu.Env(), options.timeout_s, root_at);
  if (!root_at.empty()) fs::remove(root_at, ec);
  for (int c : passed) close(c);
  if (r.timed_out) {
    return Internal("criu restore from " + dir + " still running after " +
                    std::to_string(static_cast<int>(options.timeout_s)) + " s; killed" +
                    ErrorReport(dir + "/restore.log"));
  }
  if (r.exit_code != 0) {
    return Internal("criu restore from " + dir + " failed (exit " + std::to_string(r.exit_code) +
                    "):" + ErrorReport(dir + "/restore.log"));
  }
  std::ifstream in(pidfile);
  pid_t pid = 0;
  if (!(in >> pid) || pid <= 0) return Internal("criu restore wrote no pid to " + pidfile);
  return pid;
}

std::string CriuPatches(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  for (int i = 0; i < 5 && std::getline(in, line); ++i) {
    if (line.find("criu-patches") == std::string::npos) continue;
    // "... with scripts/criu-patches (patches 4f38f0575b8a1f61),"
    for (size_t at = line.find("patches "); at != std::string::npos;
         at = line.find("patches ", at + 1)) {
      std::string hash;
      for (size_t c = at + 8; c < line.size() && isxdigit(static_cast<unsigned char>(line[c]));
           ++c) {
        hash += line[c];
      }
      if (hash.size() >= 8) return hash;
    }
  }
  return "";
}

StatusOr<Criu> LazyCriu(const Criu& criu) {
  std::vector<std::string> candidates = {criu.path};
  if (const char* p = getenv("PALADIN_CRIU_LAZY"); p != nullptr && p[0] != '\0') {
    candidates.emplace_back(p);
  }
  candidates.emplace_back(kPrefixLazyCriu);
  std::string tried;
  for (const std::string& path : candidates) {
    const std::string patches = CriuPatches(path);
    if (patches.empty()) {
      tried += "\n  " + path + ": " + (IsFile(path) ? "without Paladin's patches" : "not there");
      continue;
    }
    Criu lazy = criu;
    lazy.path = path;
    lazy.lazy_patches = patches;
    SubprocessResult r = RunBounded({path, "check", "--feature", "uffd-noncoop"}, lazy.Env(), 10);
    if (r.exit_code != 0) {
      tried += "\n  " + path + ": `criu check --feature uffd-noncoop` fails (no userfaultfd here?)";
      continue;
    }
    // The lock is this binary's to take: the stock CRIU may lock with nftables where this one,
    // built without libnftables, cannot (and would fail the dump it was asked to lock).
    lazy.network_lock =
        RunBounded({path, "check", "--feature", "nftables"}, lazy.Env(), 10).exit_code == 0
            ? "nftables"
            : "skip";
    return lazy;
  }
  return FailedPrecondition(
      "post-copy moves need a CRIU with Paladin's patches (build it with bash "
      "scripts/criu_lazy.sh, into /opt/paladin/criu-lazy; or set PALADIN_CRIU_LAZY):" +
      tried);
}

Criu StreamCriu(const Criu& criu, const std::optional<StatusOr<Criu>>& lazy) {
  const StatusOr<Criu> patched = lazy ? *lazy : LazyCriu(criu);
  if (!patched.ok() || patched->network_lock != criu.network_lock) return criu;
  return *patched;
}

StatusOr<pid_t> StartServing(const Criu& criu, std::vector<std::string> argv,
                             const std::string& log, double ready_s, int pass_fd) {
  int status[2];
  if (pipe2(status, O_CLOEXEC) != 0) return IoError(std::string("pipe: ") + strerror(errno));
  argv.insert(argv.end(), {"--status-fd", "3"});
  const ExecArgs exec(argv, criu.Env());
  const pid_t pid = fork();
  if (pid < 0) {
    close(status[0]);
    close(status[1]);
    return IoError(std::string("fork: ") + strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0);
    const int null = open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3 && null >= 0; ++fd) dup2(null, fd);
    // Out of the way of 3 and kPassedFd first: either may be the other's number now.
    const int status_fd = fcntl(status[1], F_DUPFD_CLOEXEC, 10);
    const int passed = pass_fd >= 0 ? fcntl(pass_fd, F_DUPFD_CLOEXEC, 10) : -1;
    dup2(status_fd, 3);  // dup2 clears close-on-exec
    PassFd(passed);
    exec.Exec();
    _exit(127);
  }
  close(status[1]);
  pollfd p{status[0], POLLIN, 0};
  int polled;
  do {
    polled = poll(&p, 1, static_cast<int>(ready_s * 1000));
  } while (polled < 0 && errno == EINTR);
  char byte = 1;
  const bool ready = polled == 1 && read(status[0], &byte, 1) == 1;
  close(status[0]);
  if (ready) return pid;
  kill(-pid, SIGKILL);
  int ws = 0;
  waitpid(pid, &ws, 0);
  return Internal(
      std::string(polled == 0 ? "never said it was ready" : "ended before it was ready") +
      ErrorReport(log));
}

StatusOr<pid_t> StartLazyPages(const Criu& criu, const std::string& dir, int socket) {
  const std::string log = fs::absolute(dir).string() + "/lazy-pages.log";
  const std::vector<std::string> argv = {criu.path,
                                         "lazy-pages",
                                         "--page-server",
                                         "--ps-socket",
                                         std::to_string(kPassedFd),
                                         "-D",
                                         dir,
                                         "-o",
                                         log,
                                         "-v3"};
  return StartServing(criu, argv, log, 60, socket);
}

Status ServingResult(pid_t pid, const std::string& what, const std::string& log, double timeout_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int ws = 0;
  for (;;) {
    const pid_t got = waitpid(pid, &ws, WNOHANG);
    if (got == pid) break;
    if (got < 0) return Internal(what + ": cannot wait for pid " + std::to_string(pid));
    if (std::chrono::steady_clock::now() >= until) {
      kill(-pid, SIGKILL);
      waitpid(pid, &ws, 0);
      return Internal(what + " still running after " + std::to_string(static_cast<int>(timeout_s)) +
                      " s; killed" + ErrorReport(log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) return Status::Ok();
  const int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  return Internal(what + " failed (exit " + std::to_string(code) + "):" + ErrorReport(log));
}

}  // namespace paladin::ckpt
