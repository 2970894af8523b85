#include "paladin/ckpt/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "paladin/ckpt/beneath.h"
#include "paladin/ckpt/cgroup.h"
#include "paladin/ckpt/fence.h"
#include "paladin/ckpt/gpu_checkpoint.h"
#include "paladin/ckpt/sockets.h"
#include "paladin/gpu/nvml.h"
#include "paladin/quota/launch.h"
#include "paladin/quota/region.h"
#include "paladin/quota/usage.h"

namespace paladin::ckpt {

namespace fs = std::filesystem;

namespace {

class Stopwatch {
 public:
  double Lap() {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

std::vector<pid_t> Tree(pid_t root) {
  std::vector<pid_t> pids;
  for (uint32_t p : quota::ProcessTree(static_cast<uint32_t>(root))) {
    pids.push_back(static_cast<pid_t>(p));
  }
  return pids;
}

// The driver whose checkpoint API handles this job's GPU processes, or null for a CPU job.
StatusOr<std::unique_ptr<GpuCheckpointer>> DriverFor(const std::string& gpu,
                                                     const std::string& emu_state,
                                                     const std::string& emu_gpus) {
  if (gpu.empty()) return std::unique_ptr<GpuCheckpointer>();
  std::string driver = "libcuda.so.1";
  if (gpu == "emulated") {
    StatusOr<quota::Libraries> libs = quota::FindLibraries();
    if (!libs.ok()) return libs.status();
    driver = libs->emucuda;
    if (!emu_state.empty()) setenv("PALADIN_EMU_STATE", emu_state.c_str(), 1);
    if (!emu_gpus.empty()) setenv("PALADIN_EMU_GPUS", emu_gpus.c_str(), 1);
  }
  return GpuCheckpointer::Load(driver);
}

// The emulated driver answers checkpoint calls through files named by host pid in its control
// folder (STATE.ctl; the node agent's is one sticky folder for the whole host, shared by every
// user's processes). A state file left there by a process of another user whose pid has been
// reused cannot be replaced by the process that has that pid now (the folder is sticky), so it
// could not answer: for each of the job's processes, such a file goes before the driver is asked.
void ClearForeignControlFiles(const std::string& gpu, const std::string& emu_state,
                              const std::vector<pid_t>& pids) {
  if (gpu != "emulated") return;
  std::vector<std::string> dirs;
  std::error_code ec;
  const char* ours = getenv("PALADIN_EMU_STATE");  // the caller's, where it sends requests
  for (const std::string& state : {emu_state, std::string(ours != nullptr ? ours : "")}) {
    if (state.empty()) continue;
    const std::string dir = fs::weakly_canonical(state + ".ctl", ec).string();
    if (!dir.empty() && std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) {
      dirs.push_back(dir);
    }
  }
  for (pid_t pid : pids) {
    struct stat process {};
    if (stat(("/proc/" + std::to_string(pid)).c_str(), &process) != 0) continue;
    for (const std::string& dir : dirs) {
      const std::string path = dir + "/" + std::to_string(pid) + ".state";
      struct stat file {};
      if (lstat(path.c_str(), &file) == 0 && file.st_uid != process.st_uid) unlink(path.c_str());
    }
  }
}

// Puts every locked or checkpointed process back to running.
// The job's own /dev/shm (ckpt::WorkloadSpec::own_shm) seen from here, open; nothing when the
// job shares the host's, whose files stay where they are.
StatusOr<Fd> OwnShm(pid_t root) {
  StatusOr<Fd> job_root = OpenDirectory("/proc/" + std::to_string(root) + "/root");
  if (!job_root.ok()) return job_root.status();
  StatusOr<Fd> shm = OpenBeneath(job_root->get(), "dev/shm", O_RDONLY | O_DIRECTORY);
  if (!shm.ok()) return shm.status();
  struct stat own {};
  struct stat host {};
  if (fstat(shm->get(), &own) != 0 || stat("/dev/shm", &host) != 0 || own.st_dev == host.st_dev) {
    return NotFound("the job has no /dev/shm of its own");
  }
  return shm;
}

// CRIU's link remaps (`link_remap.N`, a second name it gives a file the job holds by a name that
// is gone) in the job's own /dev/shm.
std::set<std::string> LinkRemaps(int shm) {
  std::set<std::string> names;
  const int dup_fd = fcntl(shm, F_DUPFD_CLOEXEC, 0);
  DIR* dir = dup_fd >= 0 ? fdopendir(dup_fd) : nullptr;
  if (dir == nullptr) {
    if (dup_fd >= 0) close(dup_fd);
    return names;
  }
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind("link_remap.", 0) == 0 && name.size() > 11 &&
        name.find_first_not_of("0123456789", 11) == std::string::npos) {
      names.insert(name);
    }
  }
  closedir(dir);
  return names;
}

// CRIU leaves the link remaps it made after a dump that succeeded (a restore opens the files
// through them), and its next dump of the same processes fails on them ("Can't link remap to
// ...: File exists"). A job that goes on running after its dump loses the ones in its own
// /dev/shm again, which the image carries in its copy of that tmpfs: those it had before the dump
// (`before`) stay.
void DropNewLinkRemaps(pid_t root, const std::set<std::string>& before) {
  StatusOr<Fd> shm = OwnShm(root);
  if (!shm.ok()) return;
  for (const std::string& name : LinkRemaps(shm->get())) {
    struct stat st {};
    if (before.count(name) == 0 &&
        fstatat(shm->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
      (void)unlinkat(shm->get(), name.c_str(), 0);
    }
  }
}

void ResumeGpu(const GpuCheckpointer& gpu, const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    StatusOr<CUprocessState> state = gpu.State(pid);
    if (!state.ok()) continue;
    if (*state == CU_PROCESS_STATE_CHECKPOINTED) (void)gpu.Restore(pid, {});
    (void)gpu.Unlock(pid);
  }
}

Status CopyFile(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::create_directories(fs::path(to).parent_path(), ec);
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec) return IoError("cannot copy " + from + " to " + to + ": " + ec.message());
  return Status::Ok();
}

std::vector<quota::ProcessId> RestoredIds(const std::vector<pid_t>& pids) {
  std::vector<quota::ProcessId> ids;
  ids.reserve(pids.size());
  for (pid_t pid : pids) ids.push_back(quota::ProcessIdOf(std::to_string(pid)));
  return ids;
}

std::string Hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// The uid the job's command runs as: its first process that is not root's (the root may be
// paladin-workload-init, as root), else root's; -1 when none could be read.
int64_t CommandUid(const std::vector<pid_t>& pids) {
  int64_t found = -1;
  for (pid_t pid : pids) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    int64_t uid = -1;
    while (std::getline(in, line)) {
      if (line.rfind("Uid:", 0) == 0) {
        std::istringstream(line.substr(4)) >> uid;
        break;
      }
    }
    if (uid > 0) return uid;
    if (uid == 0) found = 0;
  }
  return found;
}

}  // namespace

std::string HeldLease(int64_t root_pid) {
  const std::string proc = "/proc/" + std::to_string(root_pid);
  std::ifstream in(proc + "/cmdline", std::ios::binary);
  std::string arg0;
  std::string arg1;
  if (!std::getline(in, arg0, '\0') || !std::getline(in, arg1, '\0') || arg1 != "--lease" ||
      fs::path(arg0).filename() != "paladin-workload-init") {
    return "";
  }
  std::error_code ec;
  const fs::path target = fs::read_symlink(proc + "/fd/" + std::to_string(fence::kLeaseFd), ec);
  return ec ? "" : target.string();
}

namespace {

Manifest Describe(const JobRecord& job, const Criu& criu, int64_t root_pid) {
  Manifest m;
  m.lease = HeldLease(root_pid);
  m.region = job.region;
  m.gpu_mode = job.gpu;
  m.emu_state = job.emu_state;
  m.emu_gpus = job.emu_gpus;
  m.created_unix = static_cast<int64_t>(time(nullptr));
  m.name = job.name;
  m.command = job.command;
  m.cwd = job.cwd;
  m.pid = root_pid;
  m.run_dir = job.run_dir;
  m.hostname = Hostname();
  utsname u{};
  if (uname(&u) == 0) {
    m.kernel = u.release;
    m.arch = u.machine;
  }
  m.criu_version = criu.version;
  m.criu_no_breakpoints = criu.no_breakpoints;
  return m;
}

// The GPUs the job's processes hold memory on, from NVML (real or emulated).
void DescribeGpus(const JobRecord& job, const std::vector<pid_t>& pids, Manifest* m) {
  if (job.gpu.empty()) return;
  m->gpu_driver = job.gpu == "emulated" ? "emulated" : "nvidia";
  std::string nvml_lib = "libnvidia-ml.so.1";
  if (job.gpu == "emulated") {
    StatusOr<quota::Libraries> libs = quota::FindLibraries();
    if (!libs.ok()) return;
    nvml_lib = libs->emucuda;
  }
  StatusOr<std::unique_ptr<gpu::Nvml>> nvml = gpu::Nvml::Load(nvml_lib);
  if (!nvml.ok()) return;
  m->gpu_driver += " " + (*nvml)->driver_version();
  StatusOr<std::vector<gpu::GpuInfo>> gpus = (*nvml)->Gpus();
  if (!gpus.ok()) return;
  for (const gpu::GpuInfo& g : *gpus) {
    StatusOr<std::vector<gpu::GpuProcess>> procs = (*nvml)->Processes(g.uuid);
    if (!procs.ok()) continue;
    uint64_t held = 0;
    for (const gpu::GpuProcess& p : *procs) {
      for (pid_t pid : pids) held += p.pid == static_cast<uint32_t>(pid) ? p.used_bytes : 0;
    }
    if (held > 0) m->gpus.push_back({g.uuid, g.name, held});
  }
}

// This node's places for a restored job (RestorePlacement), open: writes go through `dir`.
struct Placement {
  std::string run_dir;
  std::string stdout_log;
  std::string stderr_log;
  std::string region;  // "" without a quota
  Fd dir;
};

bool SamePath(const std::string& a, const std::string& b) {
  return fs::path(a).lexically_normal() == fs::path(b).lexically_normal();
}

// A directory this node writes jobs' files into must not be writable by anyone else: whoever
// could write it could put a symlink or a FIFO where a restore is about to write.
Status CheckOwnDirectory(int fd, const std::string& what, const std::string& path) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return IoError("cannot stat " + path + ": " + strerror(errno));
  const uid_t me = geteuid();
  if ((st.st_uid != me && st.st_uid != 0) || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return FailedPrecondition(what + " " + path + " is owned by uid " + std::to_string(st.st_uid) +
                              " with mode " + mode + ": only this user (uid " + std::to_string(me) +
                              ") or root may be able to write it");
  }
  return Status::Ok();
}

// Checks the manifest's places against this node's and opens the run directory (created where
// missing). Each refusal names the manifest's field and what this node expected.
StatusOr<Placement> Place(const Manifest& m, const RestorePlacement& where) {
  std::string base =
      fs::path(where.run_base.empty() ? RunBase() : where.run_base).lexically_normal().string();
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  if (m.run_dir.empty()) return InvalidArgument("manifest: workload.run_dir is empty");
  fs::path hinted = fs::path(m.run_dir).lexically_normal();
  if (!hinted.has_filename()) hinted = hinted.parent_path();
  const std::string name = hinted.filename().string();
  std::error_code ec;
  const std::string canonical_base = fs::weakly_canonical(base, ec).string();
  const std::string parent = hinted.parent_path().string();
  if (name.empty() || name == "." || name == ".." || (parent != base && parent != canonical_base)) {
    return InvalidArgument("manifest: workload.run_dir '" + m.run_dir +
                           "' is not a run directory of this node (they are directly in " + base +
                           ")");
  }
  if (!where.name_prefix.empty() &&
      (name.size() <= where.name_prefix.size() || name.rfind(where.name_prefix, 0) != 0 ||
       name.find_first_not_of("0123456789", where.name_prefix.size()) != std::string::npos)) {
    return InvalidArgument("manifest: workload.run_dir '" + m.run_dir +
                           "' is not this job's run directory (" + base + "/" + where.name_prefix +
                           "N)");
  }
  Placement p;
  p.run_dir = base + "/" + name;
  p.stdout_log = p.run_dir + "/stdout.log";
  p.stderr_log = p.run_dir + "/stderr.log";
  for (size_t i = 0; i < m.logs.size(); ++i) {
    const std::string index = "[" + std::to_string(i) + "]";
    const std::string expected = m.logs[i] == "logs/stdout.log"   ? p.stdout_log
                                 : m.logs[i] == "logs/stderr.log" ? p.stderr_log
                                                                  : "";
    if (expected.empty()) {
      return InvalidArgument("manifest: workload.logs" + index + " '" + m.logs[i] +
                             "' is neither logs/stdout.log nor logs/stderr.log");
    }
    if (!SamePath(m.log_targets[i], expected)) {
      std::string message = "manifest: workload.log_targets" + index;
      message.append(" '").append(m.log_targets[i]);
      message.append("' is not where this node keeps the job's log (").append(expected).append(")");
      return InvalidArgument(message);
    }
  }
  if (!m.region.empty()) {
    p.region = p.run_dir + "/quota.region";
    if (!SamePath(m.region, p.region)) {
      return InvalidArgument("manifest: workload.region '" + m.region +
                             "' is not where this node keeps the job's quota region (" + p.region +
                             ")");
    }
  }
  fs::create_directories(base, ec);
  StatusOr<Fd> base_fd = OpenDirectory(base);
  if (!base_fd.ok()) return base_fd.status();
  PALADIN_RETURN_IF_ERROR(CheckOwnDirectory(base_fd->get(), "the run base", base));
  // CRIU restores the working directory with the mode it had; the run directory is 0755 when the
  // job starts (the node agent's and paladin run's).
  StatusOr<Fd> dir = MakeDirectoryIn(base_fd->get(), name, 0755);
  if (!dir.ok()) return Status(dir.status().code(), base + "/" + dir.status().message());
  p.dir = std::move(*dir);
  return p;
}

// The file of the manifest's list at `rel`, or null.
const ImageFile* Listed(const Manifest& m, const std::string& rel) {
  for (const ImageFile& f : m.files) {
    if (f.path == rel) return &f;
  }
  return nullptr;
}

// Copies the image's `rel` into the run directory as `name`; what is written must hash to what
// the manifest says (the image may have changed since it was verified). `mode` is the file's
// mode when Paladin knows it; otherwise (-1) the read and write bits of the image's copy.
Status CopyIntoRunDir(int image, const Manifest& m, const std::string& rel, const Placement& p,
                      const std::string& name, int mode = -1) {
  const ImageFile* listed = Listed(m, rel);
  if (listed == nullptr) return InvalidArgument(rel + ": not in the image's manifest");
  struct stat from_st {};
  StatusOr<Fd> from = OpenRegularBeneath(image, rel, &from_st);
  if (!from.ok()) return InvalidArgument("the image's " + from.status().message());
  StatusOr<Fd> to = CreateRegularIn(p.dir.get(), name);
  if (!to.ok()) return Status(to.status().code(), p.run_dir + "/" + to.status().message());
  // CRIU checks the mode of the files it reopens; nothing but read and write bits is taken from
  // the image.
  const mode_t want = mode >= 0 ? static_cast<mode_t>(mode) : from_st.st_mode & 0666;
  if (fchmod(to->get(), want) != 0) {
    return IoError("cannot set the mode of " + p.run_dir + "/" + name + ": " + strerror(errno));
  }
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<char> buf(size_t{1} << 20);
  Status copied = Status::Ok();
  for (;;) {
    const ssize_t n = read(from->get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      copied = IoError("cannot read the image's " + rel + ": " + strerror(errno));
      break;
    }
    if (n == 0) break;
    EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(n));
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = write(to->get(), buf.data() + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        copied = IoError("cannot write " + p.run_dir + "/" + name + ": " + strerror(errno));
        break;
      }
      done += w;
    }
    if (!copied.ok()) break;
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, digest, &len);
  EVP_MD_CTX_free(ctx);
  PALADIN_RETURN_IF_ERROR(copied);
  std::string hex;
  char byte[3];
  for (unsigned int i = 0; i < len; ++i) {
    snprintf(byte, sizeof byte, "%02x", digest[i]);
    hex += byte;
  }
  if (hex != listed->sha256) {
    (void)ftruncate(to->get(), 0);
    return InvalidArgument(rel + ": changed since the image was verified (SHA-256 " +
                           hex.substr(0, 16) + "…, the manifest says " +
                           listed->sha256.substr(0, 16) + "…)");
  }
  return Status::Ok();
}

// Every directory of the image must be writable only by this user or root (RestoreJob's
// contract).
Status CheckImageWriters(int image, const std::string& dir) {
  PALADIN_RETURN_IF_ERROR(CheckOwnDirectory(image, "the image directory", dir));
  return WalkBeneath(image, [&](const std::string& rel, const struct stat& st) -> Status {
    if (!S_ISDIR(st.st_mode)) return Status::Ok();
    StatusOr<Fd> sub = OpenBeneath(image, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    if (!sub.ok()) return InvalidArgument("the image's " + sub.status().message());
    return CheckOwnDirectory(sub->get(), "the image directory", dir + "/" + rel);
  });
}

// A cgroup name from a job record kept in a run directory its user may write: only a plain
// relative name is kept.
std::string SafeCgroup(const std::string& name) {
  return CheckRelativePath("cgroup", name).ok() ? name : "";
}

// The pid of host pid `pid` in its own (innermost) PID namespace, or -1.
int64_t NamespacePid(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    int64_t last = -1;
    for (int64_t id = 0; fields >> id;) last = id;
    return last;
  }
  return -1;
}

// The state letter of /proc/PID/stat (after the command's closing parenthesis), or '?'.
char ProcessState(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
}

// Stops every process of the tree below `root` (SIGSTOP) and waits until each is stopped or
// gone, looking again for children forked meanwhile. An error (the tree is then partly
// stopped: the caller continues it) when a process is not stopped within 10 s.
Status StopTree(pid_t root) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::set<pid_t> signalled;
  while (true) {
    bool all_stopped = true;
    for (pid_t pid : Tree(root)) {
      if (signalled.insert(pid).second) kill(pid, SIGSTOP);
      const char state = ProcessState(pid);
      if (state != 'T' && state != 't' && state != 'Z' && state != 'X' && state != '?') {
        all_stopped = false;
      }
    }
    if (all_stopped) return Status::Ok();
    if (std::chrono::steady_clock::now() > deadline) {
      return Internal(
          "the job's processes did not all stop within 10 s of SIGSTOP (one may be "
          "in uninterruptible sleep); nothing was dumped");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

std::vector<int64_t> StoppedProcesses(const std::vector<pid_t>& pids) {
  std::vector<int64_t> stopped;
  for (pid_t pid : pids) {
    if (ProcessState(pid) != 'T') continue;
    const int64_t ns_pid = NamespacePid(pid);
    if (ns_pid > 0) stopped.push_back(ns_pid);
  }
  return stopped;
}

void ContinueTree(pid_t root, const std::vector<int64_t>& stopped) {
  sigval value{};
  value.sival_int = fence::kResumeValue;
  for (pid_t pid : Tree(root)) {
    if (!stopped.empty() &&
        std::find(stopped.begin(), stopped.end(), NamespacePid(pid)) != stopped.end()) {
      continue;
    }
    sigqueue(pid, SIGCONT, value);
  }
}

std::string PhaseTimes::Describe() const {
  std::ostringstream out;
  for (size_t i = 0; i < seconds.size(); ++i) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s %.2f s", seconds[i].first.c_str(), seconds[i].second);
    out << (i > 0 ? ", " : "") << buf;
  }
  return out.str();
}

StatusOr<std::vector<std::pair<std::string, std::string>>> ParseGpuMap(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> map;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t eq = item.find('=');
    char bytes[16];
    if (eq == std::string::npos || !gpu::ParseGpuUuid(item.substr(0, eq), bytes) ||
        !gpu::ParseGpuUuid(item.substr(eq + 1), bytes)) {
      return InvalidArgument("--gpu-map '" + item +
                             "': expected OLD=NEW with GPU UUIDs (GPU-xxxxxxxx-xxxx-…)");
    }
    map.emplace_back(item.substr(0, eq), item.substr(eq + 1));
  }
  return map;
}

StatusOr<PhaseTimes> CheckpointJob(const Criu& criu, JobRecord* job, const std::string& out,
                                   const CheckpointOptions& options, const Progress& progress) {
  const pid_t root = static_cast<pid_t>(job->pid);
  if (job->pid <= 0 || kill(root, 0) != 0) {
    return FailedPrecondition("job " + job->name + " (pid " + std::to_string(job->pid) +
                              ") is not running");
  }
  std::error_code ec;
  if (fs::exists(out) && !fs::is_empty(out, ec)) {
    return AlreadyExists(out + " exists and is not empty; give a new directory");
  }
  fs::create_directories(out, ec);
  if (ec) return IoError("cannot create " + out + ": " + ec.message());
  const std::string image = fs::canonical(out).string();
  PhaseTimes times;
  Stopwatch watch;
  auto fail = [&](const Status& s) {
    fs::remove_all(image, ec);
    return s;
  };

  // Memory passes while the job runs: the final pause only copies what changed since. They need
  // the kernel to track dirty memory.
  int pre_dumps = options.pre_dumps;
  if (pre_dumps > 0 && !criu.dirty_tracking) {
    progress(
        "warning: this kernel does not track dirty memory (CONFIG_MEM_SOFT_DIRTY), which "
        "pre-dumps need; dumping in one pass");
    pre_dumps = 0;
  }
  std::string parent;
  for (int i = 1; i <= pre_dumps; ++i) {
    const std::string dir = "pre-" + std::to_string(i);
    const std::string pre_dir = (fs::path(image) / dir).string();
    fs::create_directories(pre_dir, ec);
    DumpOptions pre;
    pre.pre_dump = true;
    pre.parent_images = parent.empty() ? "" : "../" + parent;
    pre.timeout_s = options.timeout_s;
    if (!job->run_dir.empty()) pre.failed_log = job->run_dir + "/criu-pre-dump.log";
    progress("pre-dump " + std::to_string(i) + " of " + std::to_string(pre_dumps));
    Status s = Dump(criu, root, pre_dir, pre);
    if (!s.ok()) return fail(s);
    parent = dir;
    times.seconds.emplace_back("pre-dump " + std::to_string(i), watch.Lap());
  }

  const std::vector<pid_t> pids = Tree(root);
  StatusOr<std::unique_ptr<GpuCheckpointer>> driver =
      DriverFor(job->gpu, job->emu_state, job->emu_gpus);
  if (!driver.ok()) return fail(driver.status());
  const GpuCheckpointer* gpu = driver->get();
  ClearForeignControlFiles(job->gpu, job->emu_state, pids);
  std::vector<pid_t> cuda = gpu != nullptr ? gpu->CudaProcesses(pids) : std::vector<pid_t>();
  if (options.lazy_port > 0 && !cuda.empty()) {
    return fail(FailedPrecondition("post-copy moves of jobs with GPU state are not supported"));
  }
  // What the job holds on which GPU, while it still holds it.
  Manifest manifest = Describe(*job, criu, job->pid);
  manifest.uid = CommandUid(pids);
  // What the job stopped itself stays stopped wherever it is resumed.
  manifest.stopped = StoppedProcesses(pids);
  job->stopped = manifest.stopped;
  // No process with a CUDA context (a job under a quota that never touched CUDA, or not yet):
  // the image holds no GPU state, and its restore must not wait for a process to answer for one.
  if (!cuda.empty()) DescribeGpus(*job, pids, &manifest);
  // GPU memory is about to land in the job's RAM: its cgroup limit must not kill it meanwhile.
  uint64_t memory_limit = 0;
  std::unique_ptr<Cgroup> group;
  if (!cuda.empty() && !job->cgroup.empty()) {
    group = std::make_unique<Cgroup>(Cgroup::Existing(job->cgroup));
    memory_limit = group->MemoryLimit();
    if (memory_limit > 0) (void)group->SetMemoryLimit(0);
  }
  auto undo_gpu = [&](const Status& s) {
    if (gpu != nullptr) ResumeGpu(*gpu, cuda);
    if (group && memory_limit > 0) (void)group->SetMemoryLimit(memory_limit);
    return fail(s);
  };
  for (pid_t pid : cuda) {
    progress("locking the GPU state of pid " + std::to_string(pid));
    Status s = gpu->Lock(pid, 10000);
    if (!s.ok()) return undo_gpu(s);
  }
  if (!cuda.empty()) times.seconds.emplace_back("gpu lock", watch.Lap());
  for (pid_t pid : cuda) {
    progress("checkpointing the GPU state of pid " + std::to_string(pid));
    Status s = gpu->Checkpoint(pid);
    if (!s.ok()) return undo_gpu(s);
  }
  if (!cuda.empty()) times.seconds.emplace_back("gpu checkpoint", watch.Lap());

  // The quota's counters must outlive the processes the dump kills: they come back with them.
  std::unique_ptr<quota::Region> region;
  if (!job->region.empty()) {
    std::string error;
    region = quota::Region::Open(job->region, &error);
    if (region == nullptr) return undo_gpu(Internal(error));
  }
  const bool kill_after = options.after == CheckpointOptions::After::kKill;
  if (region != nullptr && kill_after) region->FreezeProcesses();
  const std::string previous_state = job->state;
  job->state = options.after == CheckpointOptions::After::kKill ? "checkpointing" : job->state;
  (void)WriteJob(*job);
  // A job that stays alive (running on, or stopped for a move) is stopped by Paladin before the
  // dump, and CRIU leaves it as it found it, stopped: CRIU undoes what it did to hold the job's
  // TCP connections still (each socket's repair mode, its nftables lock) and its link remaps only
  // for a tree it leaves alive, and with --leave-stopped the connections between the job's
  // processes stayed frozen after Paladin resumed them. The tree stays stopped until its logs
  // are copied: what it writes after the dump must not be in the image. A post-copy dump keeps
  // --leave-stopped (its page server serves the stopped tree's memory).
  const bool stays_alive = options.after != CheckpointOptions::After::kKill;
  const bool stop_first = stays_alive && options.lazy_port == 0;
  DumpOptions dump;
  dump.leave_running = stop_first;
  dump.leave_stopped = stays_alive && !stop_first;
  dump.parent_images = parent.empty() ? "" : parent;
  dump.timeout_s = options.timeout_s;
  if (!job->run_dir.empty()) dump.failed_log = job->run_dir + "/criu-dump.log";
  dump.lazy_port = options.lazy_port;
  dump.lazy_address = options.lazy_address;
  dump.lazy_log = options.lazy_log;
  dump.lazy_dump = options.lazy_dump;
  dump.lazy_tls_args = options.lazy_tls_args;
  // Nothing outside the job is dumped with it: its connections to outside peers are closed now,
  // the peers see a reset (docs/ckpt.md, "Sockets").
  StatusOr<std::vector<TcpConnection>> connections = JobConnections(pids);
  if (!connections.ok()) return undo_gpu(connections.status());
  for (const TcpConnection& c : *connections) {
    if (!c.internal)
      progress("closing the connection " + c.Describe() + " to a peer outside the job");
  }
  Status closed = CloseOutsideConnections(*connections);
  if (!closed.ok()) return undo_gpu(closed);
  progress("dumping " + std::to_string(pids.size()) + " process(es) with CRIU");
  std::set<std::string> remaps_before;
  if (StatusOr<Fd> shm = OwnShm(root); shm.ok()) remaps_before = LinkRemaps(shm->get());
  Status dumped = stop_first ? StopTree(root) : Status::Ok();
  if (dumped.ok()) dumped = Dump(criu, root, image, dump);
  if (dumped.ok() && dump.leave_stopped) DropNewLinkRemaps(root, remaps_before);
  if (!dumped.ok()) {
    // CRIU resumes a tree whose dump failed as it found it: this one, stopped by Paladin.
    if (stop_first) ContinueTree(root, job->stopped);
    job->state = previous_state;
    (void)WriteJob(*job);
    if (region != nullptr && kill_after) region->ThawProcesses(RestoredIds(pids));
    return undo_gpu(dumped);
  }
  // A job that runs on is not left stopped because its image could not be finished.
  auto fail_dumped = [&](const Status& s) {
    if (options.after == CheckpointOptions::After::kLeaveRunning) {
      ContinueTree(root, job->stopped);
      return undo_gpu(s);
    }
    return fail(s);
  };
  if (region != nullptr) {
    Status s = CopyFile(job->region, image + "/quota.region");
    if (!s.ok()) return fail_dumped(s);
  }
  times.seconds.emplace_back("criu dump", watch.Lap());

  // The logs travel with the image, as they were at the dump (CRIU checks open files' sizes).
  const std::vector<std::pair<std::string, std::string>> logs = {
      {job->stdout_log, "logs/stdout.log"}, {job->stderr_log, "logs/stderr.log"}};
  for (const auto& [host, rel] : logs) {
    if (host.empty() || !fs::exists(host)) continue;
    Status s = CopyFile(host, (fs::path(image) / rel).string());
    if (!s.ok()) return fail_dumped(s);
    manifest.logs.push_back(rel);
    manifest.log_targets.push_back(host);
  }
  Status written = WriteManifest(image, manifest);
  if (!written.ok()) return fail_dumped(written);
  times.seconds.emplace_back("manifest", watch.Lap());
  for (const auto& entry : fs::recursive_directory_iterator(image, ec)) {
    if (entry.is_regular_file()) times.image_bytes += entry.file_size();
  }

  if (options.after == CheckpointOptions::After::kLeaveRunning) {
    // Running again first (its CUDA calls still block until unlocked), so that the driver's
    // restore can reach it; what the job had stopped itself stays stopped.
    ContinueTree(root, job->stopped);
    if (gpu != nullptr) ResumeGpu(*gpu, cuda);
    if (group && memory_limit > 0) (void)group->SetMemoryLimit(memory_limit);
  }
  job->image = image;
  job->state = options.after == CheckpointOptions::After::kKill ? "checkpointed" : previous_state;
  (void)WriteJob(*job);
  return times;
}

StatusOr<JobRecord> RestoreJob(const Criu& criu, const std::string& dir,
                               const RestoreOptions2& options, const Progress& progress,
                               PhaseTimes* times) {
  Stopwatch watch;
  StatusOr<Fd> image = OpenDirectory(dir);
  if (!image.ok()) return image.status();
  Status writers = CheckImageWriters(image->get(), dir);
  if (!writers.ok()) {
    return Status(writers.code(), "refusing to restore: " + writers.message());
  }
  if (!options.verified) {
    progress("verifying " + dir);
    StatusOr<VerifyReport> verified = VerifyImage(dir, criu.version);
    if (!verified.ok()) {
      return Status(verified.status().code(),
                    "refusing to restore: " + verified.status().message());
    }
    times->seconds.emplace_back("verify", watch.Lap());
  }
  StatusOr<Manifest> m = ReadManifest(dir);
  if (!m.ok()) return m.status();
  StatusOr<Placement> place = Place(*m, options.placement);
  if (!place.ok()) {
    return Status(place.status().code(), "refusing to restore: " + place.status().message());
  }

  // The job's record: as this node kept it where the run directory is still there (its paths
  // replaced by this node's places), else from the manifest.
  JobRecord job;
  struct stat record {};
  if (fstatat(place->dir.get(), "job.json", &record, AT_SYMLINK_NOFOLLOW) == 0 &&
      S_ISREG(record.st_mode)) {
    StatusOr<JobRecord> previous = ReadJob(place->run_dir);
    if (previous.ok()) job = *previous;
  }
  job.cgroup = SafeCgroup(job.cgroup);
  job.region = place->region;
  job.gpu = m->gpu_mode;
  job.emu_gpus = m->emu_gpus;
  const char* local_state = getenv("PALADIN_EMU_STATE");
  job.emu_state = local_state != nullptr && local_state[0] != '\0' ? local_state : m->emu_state;
  job.name = m->name;
  job.command = m->command;
  job.cwd = m->cwd;
  job.run_dir = place->run_dir;
  job.stdout_log = place->stdout_log;
  job.stderr_log = place->stderr_log;

  for (const std::string& rel : m->logs) {
    Status s = CopyIntoRunDir(image->get(), *m, rel, *place, fs::path(rel).filename().string());
    if (!s.ok()) return Status(s.code(), "refusing to restore: " + s.message());
  }
  const bool has_gpu = !m->gpu_driver.empty();
  std::unique_ptr<quota::Region> region;
  if (!place->region.empty()) {
    struct stat st {};
    if (fstatat(place->dir.get(), "quota.region", &st, AT_SYMLINK_NOFOLLOW) != 0) {
      // Always 0600 where it was made (quota::Region::Create), which CRIU insists on; an image
      // that came through a move's transfer holds a copy with the default mode instead.
      Status s = CopyIntoRunDir(image->get(), *m, "quota.region", *place, "quota.region", 0600);
      if (!s.ok()) return Status(s.code(), "refusing to restore: " + s.message());
    } else if (!S_ISREG(st.st_mode) || st.st_nlink != 1) {
      return FailedPrecondition("refusing to restore: " + place->region + " is " +
                                (S_ISREG(st.st_mode) ? "a hard link" : FileTypeName(st.st_mode)) +
                                ", not the job's quota region");
    }
    std::string error;
    region = quota::Region::Open(place->region, &error);
    if (region == nullptr) return Internal("the job's quota region: " + error);
  }
  // The restored tree runs at once: while its GPU state is still checkpointed and locked, its
  // CUDA calls block (as after the driver's own lock), so nothing touches the GPU until unlock.
  RestoreOptions restore;
  // A tree without GPU state has nothing to wait for: it stays stopped from the start, so that
  // a destination that dies mid-restore leaves no running copy.
  restore.leave_stopped = options.leave_stopped && !has_gpu;
  restore.timeout_s = options.timeout_s;
  restore.lazy_pages = options.lazy_pages;
  // The init held its agent's lease: it follows the restoring agent's now, or none.
  int no_lease = -1;
  if (!m->lease.empty()) {
    if (options.lease_fd < 0) no_lease = open("/dev/null", O_RDONLY | O_CLOEXEC);
    restore.inherit_fds.emplace_back(options.lease_fd >= 0 ? options.lease_fd : no_lease, m->lease);
  }
  progress("restoring with CRIU");
  StatusOr<pid_t> pid = Restore(criu, dir, restore);
  if (no_lease >= 0) close(no_lease);
  if (!pid.ok()) return pid.status();
  times->seconds.emplace_back("criu restore", watch.Lap());
  const std::vector<pid_t> pids = Tree(*pid);
  // The quota's counters now belong to the restored processes, on the GPUs they move to.
  auto rename_devices = [&](bool back) {
    for (const auto& [from, to] : options.gpu_map) {
      char a[16];
      char b[16];
      if (gpu::ParseGpuUuid(from, a) && gpu::ParseGpuUuid(to, b)) {
        region->RenameDevice(back ? b : a, back ? a : b);
      }
    }
  };
  if (region != nullptr) {
    region->ThawProcesses(RestoredIds(pids));
    rename_devices(false);
  }
  if (has_gpu) {
    // The driver's restore needs the processes to answer: a job dumped while Paladin held it
    // stopped comes back stopped (its CUDA calls block until the unlock below).
    ContinueTree(*pid, m->stopped);
    StatusOr<std::unique_ptr<GpuCheckpointer>> driver =
        DriverFor(job.gpu, job.emu_state, job.emu_gpus);
    Status s = driver.ok() ? Status::Ok() : driver.status();
    std::vector<pid_t> cuda;
    if (s.ok()) {
      ClearForeignControlFiles(job.gpu, job.emu_state, pids);
      ClearForeignControlFiles(job.gpu, m->emu_state, pids);
      cuda = (*driver)->CudaProcesses(pids);
    }
    if (s.ok() && cuda.empty()) {
      s = Internal(
          "the image holds GPU state but no restored process answers the driver's "
          "checkpoint API");
    }
    for (pid_t p : cuda) {
      progress("restoring the GPU state of pid " + std::to_string(p));
      if (s.ok()) s = (*driver)->Restore(p, options.gpu_map);
    }
    for (pid_t p : cuda) {
      if (s.ok() && !options.leave_stopped) s = (*driver)->Unlock(p);
    }
    if (!s.ok()) {
      // The image still holds the job; the half-restored copy must not run.
      for (pid_t p : pids) kill(p, SIGKILL);
      if (region != nullptr) {
        rename_devices(true);
        region->FreezeProcesses();
      }
      return Status(s.code(),
                    s.message() + " (the restored copy was stopped; the image is intact)");
    }
    times->seconds.emplace_back("gpu restore", watch.Lap());
  }
  // Left stopped (a migration's destination before the commit): stopped, its GPU state restored
  // but still locked; ResumeJob lets it go. Otherwise running, except what the job had stopped
  // itself (CRIU restores those stopped; a SIGCONT to the whole tree would wake them).
  job.stopped = m->stopped;
  if (options.leave_stopped) {
    for (pid_t p : pids) kill(p, SIGSTOP);
  } else {
    ContinueTree(*pid, job.stopped);
  }
  job.pid = *pid;
  // CRIU put the tree back into the group it was dumped in (making it where missing): the
  // record names that group, so that whoever sees the job end removes it (supervise::Finish).
  if (const std::string group = Cgroup::Of(*pid); !group.empty()) job.cgroup = group;
  job.state = options.leave_stopped ? "stopped" : "running";
  std::error_code ec;
  job.image = fs::canonical(dir, ec).string();
  Status s = WriteJob(job);
  if (!s.ok()) progress("warning: " + s.message());
  return job;
}

Status ResumeJob(JobRecord* job) {
  const std::vector<pid_t> pids = Tree(static_cast<pid_t>(job->pid));
  if (pids.empty()) return FailedPrecondition("job " + job->name + " has no processes to resume");
  // Running first: the driver's restore and unlock need the process to answer. What the job had
  // stopped itself when it was dumped stays stopped.
  ContinueTree(static_cast<pid_t>(job->pid), job->stopped);
  if (!job->gpu.empty()) {
    StatusOr<std::unique_ptr<GpuCheckpointer>> driver =
        DriverFor(job->gpu, job->emu_state, job->emu_gpus);
    if (!driver.ok()) return driver.status();
    ClearForeignControlFiles(job->gpu, job->emu_state, pids);
    ResumeGpu(**driver, (*driver)->CudaProcesses(pids));
  }
  job->state = "running";
  return WriteJob(*job);
}

}  // namespace paladin::ckpt
