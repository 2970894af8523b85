// The agent's local socket and the SLURM steps registered through it (docs/slurm.md).
//
// A SLURM step started with --paladin-gpu-mem runs under `paladin slurm task`, a child of
// slurmstepd, so SLURM keeps tracking and signalling it. That shim registers the step here: the
// agent picks a GPU with the quota uncommitted (counting its own jobs and the other steps),
// names the emulated GPUs' state when the GPUs are emulated, and says where the step's
// checkpoints live. Once the workload runs, the shim reports its run directory; from then on
// `paladin slurm checkpoint` asks the agent (root) to checkpoint the step's process tree.
#include "paladin/agent/local.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <thread>

#include "agent_impl.h"
#include "paladin/api/wire.h"
#include "paladin/base/process.h"
#include "paladin/base/size.h"
#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/image.h"
#include "paladin/migrate/control.h"
#include "paladin/quota/region.h"

namespace paladin::agent {

namespace fs = std::filesystem;
namespace key = api::key;

namespace {

Json Refuse(const std::string& why) { return {{key::kOk, false}, {key::kError, why}}; }

// Local calls in progress at once: those of all uids but root's together, and those of any one
// uid. Each call holds a thread for up to kReceiveSeconds while it waits for its request, so
// without a bound a local user's idle connections exhaust the agent's threads; root's calls (the
// steps' root helpers, root's own steps) have their own share, which no other user can take.
constexpr int kMaxLocalCalls = 32;
constexpr int kMaxLocalCallsPerUid = 4;
constexpr double kReceiveSeconds = 10;

// Answers a connection that is not served with one line, without waiting on the peer.
void RefuseAtOnce(int fd, const std::string& why) {
  const std::string line = Json{{key::kOk, false}, {key::kError, why}}.dump() + "\n";
  (void)send(fd, line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  close(fd);
}

// The newest complete image under dir (images are named by the time they were taken).
std::string LatestImage(const std::string& dir) {
  std::error_code ec;
  std::string best;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string path = entry.path().string();
    if (!fs::exists(path + "/manifest.json", ec)) continue;
    if (best.empty() || entry.path().filename().string() > fs::path(best).filename().string()) {
      best = path;
    }
  }
  return best;
}

// The uid that owns /proc/PID (the process's effective uid), or -1 when it is gone.
int64_t ProcOwner(pid_t pid) {
  struct stat st {};
  if (stat(("/proc/" + std::to_string(pid)).c_str(), &st) != 0) return -1;
  return st.st_uid;
}

// Whether `pid` runs inside SLURM step JOB.STEP: one of its ancestors is that step's
// slurmstepd, a root process whose command line names the step ("slurmstepd: [JOB.STEP]"). A
// user cannot make a root process their ancestor, so this is what ties a caller to a step; the
// job id alone is only a number anyone can send.
bool InSlurmStep(pid_t pid, int64_t job, const std::string& step) {
  const std::string want = "[" + std::to_string(job) + "." + step + "]";
  pid_t at = pid;
  for (int depth = 0; depth < 16 && at > 1; ++depth) {
    pid_t parent = 0;
    if (ProcState(at, &parent) == '\0' || parent <= 1) return false;
    at = parent;
    if (ProcOwner(at) != 0) continue;
    std::ifstream in("/proc/" + std::to_string(at) + "/cmdline");
    std::string cmdline;
    std::getline(in, cmdline, '\0');
    if (cmdline.rfind("slurmstepd:", 0) != 0) continue;
    return cmdline.find(want) != std::string::npos;
  }
  return false;
}

}  // namespace

std::string DefaultLocalSocket() {
  const char* env = getenv("PALADIN_AGENT_SOCKET");
  return env != nullptr && env[0] != '\0' ? env : "/var/lib/paladin/agent/agent.sock";
}

const char* SlurmLeaveName(SlurmLeave leave) {
  return leave == SlurmLeave::kRunning ? "running" : "stopped";
}

std::optional<SlurmLeave> SlurmLeaveNamed(const std::string& name) {
  for (SlurmLeave leave : {SlurmLeave::kRunning, SlurmLeave::kStopped}) {
    if (name == SlurmLeaveName(leave)) return leave;
  }
  return std::nullopt;
}

const char* SlurmStepStateName(SlurmStepState state) {
  switch (state) {
    case SlurmStepState::kStarting:
      return "starting";
    case SlurmStepState::kRunning:
      return "running";
    case SlurmStepState::kCheckpointing:
      return "checkpointing";
    case SlurmStepState::kStopped:
      return "stopped";
  }
  return "?";
}

StatusOr<Json> CallLocal(const std::string& socket_path, const Json& request, double timeout_s) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path) {
    return InvalidArgument("socket path too long: " + socket_path);
  }
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof addr.sun_path - 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return IoError(std::string("socket: ") + strerror(errno));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const std::string why = strerror(errno);
    close(fd);
    return Unavailable("no Paladin agent listens at " + socket_path + " (" + why + ")");
  }
  migrate::Channel channel(fd);
  Status sent = channel.Send(request.dump());
  StatusOr<std::string> line = sent.ok() ? channel.Receive(timeout_s) : StatusOr<std::string>(sent);
  if (!line.ok()) {
    return Unavailable("the agent at " + socket_path +
                       " did not answer: " + line.status().message());
  }
  Json answer = Json::parse(*line, nullptr, false);
  if (answer.is_discarded() || !answer.is_object()) {
    return Internal("the agent at " + socket_path + " answered something that is not JSON");
  }
  return answer;
}

Status Agent::StartLocal() {
  local_socket_ = options_.local_socket.empty() ? data_dir_ + "/agent.sock" : options_.local_socket;
  slurm_dir_ = options_.slurm_checkpoints.empty() ? data_dir_ + "/slurm-checkpoints"
                                                  : options_.slurm_checkpoints;
  std::error_code ec;
  fs::create_directories(slurm_dir_, ec);
  if (ec) return IoError("cannot create " + slurm_dir_ + ": " + ec.message());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (local_socket_.size() >= sizeof addr.sun_path) {
    return InvalidArgument("--local-socket " + local_socket_ + ": path too long");
  }
  std::strncpy(addr.sun_path, local_socket_.c_str(), sizeof addr.sun_path - 1);
  fs::remove(local_socket_, ec);  // an earlier agent's
  local_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (local_fd_ < 0 || bind(local_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(local_fd_, 16) != 0) {
    const std::string why = strerror(errno);
    if (local_fd_ >= 0) close(local_fd_);
    local_fd_ = -1;
    return IoError("cannot listen on " + local_socket_ + ": " + why);
  }
  // Any local user may register their own steps; the agent checks who asks for what.
  chmod(local_socket_.c_str(), 0666);
  local_thread_ = std::thread([this] { ServeLocal(); });
  Say("local socket " + local_socket_ + "; SLURM steps' checkpoints in " + slurm_dir_);
  return Status::Ok();
}

void Agent::StopLocal() {
  if (!local_thread_.joinable()) return;
  local_stop_.store(true);
  local_thread_.join();
  while (local_calls_.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  close(local_fd_);
  local_fd_ = -1;
  std::error_code ec;
  fs::remove(local_socket_, ec);
}

void Agent::ServeLocal() {
  auto last_sweep = std::chrono::steady_clock::now();
  while (!local_stop_.load() && !stop_->load()) {
    pollfd p{local_fd_, POLLIN, 0};
    if (poll(&p, 1, 200) > 0) {
      const int fd = accept4(local_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        ucred cred{};
        socklen_t len = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
          close(fd);
          continue;
        }
        std::string why;
        if (!AdmitLocalCall(cred.uid, &why)) {
          RefuseAtOnce(fd, why);
          continue;
        }
        ++local_calls_;
        try {
          std::thread([this, fd, cred] {
            migrate::Channel channel(fd);
            StatusOr<std::string> line = channel.Receive(kReceiveSeconds);
            Json answer;
            if (!line.ok()) {
              answer = Refuse(line.status().message());
            } else {
              Json request = Json::parse(*line, nullptr, false);
              answer = request.is_object() ? HandleLocal(request, cred.uid, cred.pid)
                                           : Refuse("the request is not a JSON object");
            }
            (void)channel.Send(answer.dump());
            EndLocalCall(cred.uid);
            --local_calls_;
          }).detach();
        } catch (const std::system_error& e) {
          // Out of threads (the system's, not ours): this call is refused, the agent goes on.
          EndLocalCall(cred.uid);
          --local_calls_;
          RefuseAtOnce(fd, std::string("the agent cannot start a thread for this call (") +
                               e.what() + "); try again");
        }
      }
    }
    if (std::chrono::steady_clock::now() - last_sweep > std::chrono::seconds(2)) {
      last_sweep = std::chrono::steady_clock::now();
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = slurm_.begin(); it != slurm_.end();) {
        if (!it->second.busy && !base::ProcessAlive(it->second.shim_id)) {
          Say("SLURM step " + it->first + ": its shim is gone; forgotten");
          it = slurm_.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
}

bool Agent::AdmitLocalCall(uid_t uid, std::string* why) {
  std::lock_guard<std::mutex> lock(local_mu_);
  auto found = local_by_uid_.find(uid);
  const int mine = found != local_by_uid_.end() ? found->second : 0;
  if (mine >= kMaxLocalCallsPerUid) {
    *why = "uid " + std::to_string(uid) + " already has " + std::to_string(mine) +
           " calls open on the agent's local socket (at most " +
           std::to_string(kMaxLocalCallsPerUid) + " at once); try again when one has ended";
    return false;
  }
  if (uid != 0 && local_unprivileged_ >= kMaxLocalCalls) {
    *why = "the agent's local socket already serves " + std::to_string(local_unprivileged_) +
           " calls (at most " + std::to_string(kMaxLocalCalls) + " at once); try again later";
    return false;
  }
  ++local_by_uid_[uid];  // an entry only while the uid has calls: the map stays small
  if (uid != 0) ++local_unprivileged_;
  return true;
}

void Agent::EndLocalCall(uid_t uid) {
  std::lock_guard<std::mutex> lock(local_mu_);
  auto it = local_by_uid_.find(uid);
  if (it != local_by_uid_.end() && --it->second <= 0) local_by_uid_.erase(it);
  if (uid != 0) --local_unprivileged_;
}

Status Agent::CheckSlurmStep(const std::string& key, const SlurmStep& s) {
  if (!base::ProcessAlive(s.shim_id)) {
    return FailedPrecondition("SLURM step " + key + ": its shim (pid " +
                              std::to_string(s.shim_pid) +
                              ") is gone; the step is over and nothing of it is touched");
  }
  if (s.record.pid <= 0) return FailedPrecondition("SLURM step " + key + " has not started yet");
  const base::ProcessId now = base::ProcessIdOf(std::to_string(s.record.pid));
  if (s.root_id.start_time == 0 || !base::ProcessAlive(s.root_id) ||
      now.pid_namespace != s.root_id.pid_namespace) {
    return FailedPrecondition("SLURM step " + key + ": its workload (pid " +
                              std::to_string(s.record.pid) +
                              ") is gone and that pid is free or belongs to another process now; "
                              "refused: nothing was checkpointed, stopped or continued");
  }
  return Status::Ok();
}

Json Agent::HandleLocal(const Json& r, uid_t uid, pid_t pid) {
  try {
    const std::string op = r.value(key::kOp, "");
    if (op == "register") return SlurmRegister(r, uid, pid);
    if (op == "started") return SlurmStarted(r, uid, pid);
    if (op == "done") return SlurmDone(r, uid);
    if (op == "checkpoint") return SlurmCheckpoint(r, uid);
    if (op == "resume") return SlurmResume(r, uid);
    if (op == "steps") return SlurmSteps(r.value(key::kJob, int64_t{-1}), uid);
    if (op == "step") return SlurmStepFor(r, uid);
    return Refuse("unknown op '" + op +
                  "' (expected register, started, done, checkpoint, resume, steps or step)");
  } catch (const Json::exception& e) {
    return Refuse(std::string("bad request: ") + e.what());
  }
}

uint64_t Agent::CommittedBytes(int gpu_index, int* jobs, int* steps) const {
  uint64_t bytes = 0;
  for (const auto& [key, w] : jobs_) {
    if (w->state == api::CopyState::kExited || w->gpu_index != gpu_index || w->region == nullptr)
      continue;
    bytes += w->region->quota();
    ++*jobs;
  }
  for (const auto& [key, s] : slurm_) {
    if (s.gpu_index != gpu_index) continue;
    bytes += s.gpu_mem;
    ++*steps;
  }
  return bytes;
}

Json Agent::SlurmRegister(const Json& r, uid_t uid, pid_t pid) {
  const int64_t job = r.at(key::kJob).get<int64_t>();
  const std::string step = r.at(key::kStep).get<std::string>();
  // JSON's -1 would read as 2^64 - 1 through get<uint64_t>().
  if (!r.at(key::kGpuMem).is_number_unsigned()) {
    return Refuse("gpu_mem: expected a whole number of bytes, not " + r.at(key::kGpuMem).dump());
  }
  const uint64_t gpu_mem = r.at(key::kGpuMem).get<uint64_t>();
  const int64_t restarts = r.value(key::kRestartCount, int64_t{0});
  if (job <= 0 || step.empty() || step.find('/') != std::string::npos || step[0] == '.') {
    return Refuse("bad SLURM job " + std::to_string(job) + " step '" + step + "'");
  }
  if (gpu_mem == 0) return Refuse("gpu_mem must be more than 0 bytes");
  // Only a process of the step itself registers it: a registration clears or offers the step's
  // checkpoints, which belong to the job's user.
  if (uid != 0 && (ProcOwner(pid) != uid || !InSlurmStep(pid, job, step))) {
    return Refuse("the caller (pid " + std::to_string(pid) + ", uid " + std::to_string(uid) +
                  ") does not run in SLURM step " + std::to_string(job) + "." + step);
  }
  const std::string key = std::to_string(job) + "." + step;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = slurm_.find(key); it != slurm_.end() && base::ProcessAlive(it->second.shim_id)) {
    return Refuse("SLURM step " + key + " is already registered here (shim pid " +
                  std::to_string(it->second.shim_pid) + ")");
  }
  std::string why = "this node has no GPU";
  int best = -1;
  uint64_t best_free = 0;
  {
    std::lock_guard<std::mutex> gpu_lock(gpu_mu_);
    why.clear();
    for (const gpu::GpuInfo& g : gpus_) {
      int jobs = 0;
      int steps = 0;
      const uint64_t committed = CommittedBytes(g.index, &jobs, &steps);
      const uint64_t free = g.total_bytes > committed ? g.total_bytes - committed : 0;
      if (faults_.count(g.index) > 0) {
        why += "; GPU " + std::to_string(g.index) + " is unhealthy";
        continue;
      }
      if (free >= gpu_mem && (best < 0 || free > best_free)) {
        best = g.index;
        best_free = free;
      }
      why += "; GPU " + std::to_string(g.index) + " (" + base::FormatSize(g.total_bytes) +
             ") has " + base::FormatSize(free) + " uncommitted (" + std::to_string(jobs) +
             " Paladin job(s), " + std::to_string(steps) + " SLURM step(s))";
    }
    if (gpus_.empty()) why = "; this node has no GPU";
  }
  if (best < 0) {
    return Refuse("no GPU on node " + options_.name + " has " + base::FormatSize(gpu_mem) +
                  " of memory uncommitted" + why);
  }
  const std::string dir = slurm_dir_ + "/" + std::to_string(job) + "/" + step;
  std::error_code ec;
  if (restarts == 0) fs::remove_all(dir, ec);  // a new job that reuses an old job's id
  const std::string image = restarts > 0 ? LatestImage(dir) : "";
  if (!image.empty()) {
    // CRIU gives the restored processes the credentials the image holds: an image of another
    // user's processes (a dump of a pid that was reused, say) must not come back in this step.
    StatusOr<ckpt::Manifest> manifest = ckpt::ReadManifest(image);
    if (!manifest.ok()) {
      return Refuse("SLURM step " + key + ": its checkpoint " + image +
                    " cannot be read: " + manifest.status().message());
    }
    if (manifest->uid != static_cast<int64_t>(uid)) {
      return Refuse("SLURM step " + key + ": its checkpoint " + image + " holds processes of uid " +
                    std::to_string(manifest->uid) + ", not of the step's uid " +
                    std::to_string(uid) + "; refusing to restore it");
    }
  }
  SlurmStep& s = slurm_[key];
  s = SlurmStep{};
  s.job = job;
  s.step = step;
  s.uid = uid;
  s.shim_pid = pid;
  s.shim_id = base::ProcessIdOf(std::to_string(pid));
  s.gpu_mem = gpu_mem;
  s.gpu_index = best;
  s.gpu_uuid = GpuUuid(best);
  s.checkpoint_dir = dir;
  s.image = image;
  Say("SLURM step " + key + " (uid " + std::to_string(uid) +
      ") registered: " + base::FormatSize(gpu_mem) + " on GPU " + std::to_string(best));
  Json answer = {{key::kOk, true},
                 {key::kKey, key},
                 {key::kNode, options_.name},
                 {key::kGpuIndex, best},
                 {key::kGpuUuid, s.gpu_uuid},
                 {key::kEmulatedGpus, driver_.emulated ? driver_.emulated_spec : ""},
                 {key::kEmuState, driver_.emulated ? EmuStatePath() : ""},
                 {key::kCheckpointDir, dir},
                 {key::kImage, s.image}};
  return answer;
}

// For the step's root helper (`paladin slurm helper`, root): what the agent decided for the step,
// so that the helper never takes the quota, the GPU, the emulated driver's state or the image to
// restore from the step's own (unprivileged) shim.
Json Agent::SlurmStepFor(const Json& r, uid_t uid) {
  if (uid != 0) return Refuse("op step: for the step's root helper only");
  const std::string key =
      std::to_string(r.at(key::kJob).get<int64_t>()) + "." + r.at(key::kStep).get<std::string>();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slurm_.find(key);
  if (it == slurm_.end()) return Refuse("SLURM step " + key + " is not registered here");
  const SlurmStep& s = it->second;
  return {{key::kOk, true},
          {key::kUid, s.uid},
          {key::kGpuMem, s.gpu_mem},
          {key::kGpuUuid, s.gpu_uuid},
          {key::kEmulatedGpus, driver_.emulated ? driver_.emulated_spec : ""},
          {key::kEmuState, driver_.emulated ? EmuStatePath() : ""},
          {key::kImage, s.image}};
}

Json Agent::SlurmStarted(const Json& r, uid_t uid, pid_t pid) {
  const std::string key = r.at(key::kKey).get<std::string>();
  const std::string run_dir = r.at(key::kRunDir).get<std::string>();
  // The agent checkpoints the step as root by this record: a user's step must be one that its
  // root helper started, whose run directory and record only root can write.
  if (uid != 0) {
    struct stat dir {};
    struct stat file {};
    if (lstat(run_dir.c_str(), &dir) != 0 || !S_ISDIR(dir.st_mode) || dir.st_uid != 0 ||
        (dir.st_mode & 022) != 0 || lstat((run_dir + "/job.json").c_str(), &file) != 0 ||
        !S_ISREG(file.st_mode) || file.st_uid != 0) {
      return Refuse("run directory " + run_dir +
                    " is not one that Paladin's root helper made (a root-owned directory with a "
                    "root-owned job.json)");
    }
  }
  StatusOr<ckpt::JobRecord> record = ckpt::ReadJob(run_dir);
  if (!record.ok()) return Refuse(record.status().message());
  // Only the shim's own child may be checkpointed under its name, or its root helper's child
  // (`paladin slurm helper`, which starts a non-root user's step).
  pid_t parent = 0;
  pid_t grandparent = 0;
  if (ProcState(static_cast<pid_t>(record->pid), &parent) == '\0' ||
      (parent != pid && (ProcState(parent, &grandparent) == '\0' || grandparent != pid))) {
    return Refuse("pid " + std::to_string(record->pid) + " is not a child of the caller");
  }
  // Who the workload is, so that a pid the kernel gives to another process later is never
  // taken for it. Read while it is still the caller's child, as just checked.
  const base::ProcessId root_id = base::ProcessIdOf(std::to_string(record->pid));
  if (root_id.start_time == 0) {
    return Refuse("pid " + std::to_string(record->pid) + " ended before it could be recorded");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slurm_.find(key);
  if (it == slurm_.end() || it->second.shim_pid != pid || !base::ProcessAlive(it->second.shim_id)) {
    return Refuse("SLURM step " + key + " is not registered by this process");
  }
  (void)uid;
  it->second.record = *record;
  it->second.root_id = root_id;
  it->second.stopped = false;
  Say("SLURM step " + key + " runs as pid " + std::to_string(record->pid));
  return {{key::kOk, true}};
}

Json Agent::SlurmDone(const Json& r, uid_t uid) {
  const std::string key = r.at(key::kKey).get<std::string>();
  const int code = r.value(key::kExitCode, -1);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slurm_.find(key);
  if (it == slurm_.end()) return {{key::kOk, true}};
  if (uid != 0 && uid != it->second.uid) return Refuse("SLURM step " + key + " is not yours");
  if (it->second.busy) return Refuse("SLURM step " + key + " is being checkpointed");
  if (code == 0) {
    std::error_code ec;
    fs::remove_all(it->second.checkpoint_dir, ec);  // finished: its checkpoints are done with
  }
  Say("SLURM step " + key + " ended with " + std::to_string(code));
  slurm_.erase(it);
  return {{key::kOk, true}};
}

// The registered steps of SLURM job `job` that `uid` may act on; an error names what is wrong.
StatusOr<std::vector<std::string>> Agent::ClaimSlurmJob(int64_t job, uid_t uid) {
  std::vector<std::string> keys;
  for (auto& [key, s] : slurm_) {
    if (s.job != job) continue;
    if (uid != 0 && uid != s.uid) {
      return PermissionDenied("SLURM job " + std::to_string(job) + " is not yours");
    }
    if (s.busy) return FailedPrecondition("SLURM step " + key + " is being checkpointed");
    if (Status ok = CheckSlurmStep(key, s); !ok.ok()) return ok;
    keys.push_back(key);
  }
  if (keys.empty()) {
    return NotFound("no step of SLURM job " + std::to_string(job) + " runs under Paladin on node " +
                    options_.name +
                    " (was it submitted with --paladin-gpu-mem, and does it run here?)");
  }
  for (const std::string& key : keys) slurm_[key].busy = true;
  return keys;
}

Json Agent::SlurmCheckpoint(const Json& r, uid_t uid) {
  const int64_t job = r.at(key::kJob).get<int64_t>();
  const std::string leave_name = r.value(key::kLeave, SlurmLeaveName(SlurmLeave::kRunning));
  const std::optional<SlurmLeave> leave = SlurmLeaveNamed(leave_name);
  if (!leave) return Refuse("leave '" + leave_name + "': expected running or stopped");
  StatusOr<std::vector<std::string>> keys = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return ClaimSlurmJob(job, uid);
  }();
  if (!keys.ok()) return Refuse(keys.status().message());
  StatusOr<ckpt::Criu> criu = ReadyCriu();
  Json steps = Json::array();
  std::string failed;
  for (const std::string& key : *keys) {
    ckpt::JobRecord record;
    std::string dir;
    Status same;
    {
      std::lock_guard<std::mutex> lock(mu_);
      record = slurm_[key].record;
      dir = slurm_[key].checkpoint_dir;
      same = CheckSlurmStep(key, slurm_[key]);  // again: an earlier step's dump took a while
    }
    if (!criu.ok()) {
      failed = criu.status().message();
      break;
    }
    if (!same.ok()) {
      failed = same.message();
      break;
    }
    char name[32];
    std::snprintf(name, sizeof name, "%013lld",
                  static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count()));
    const std::string out = dir + "/" + name;
    std::error_code ec;
    fs::create_directories(dir, ec);
    ckpt::CheckpointOptions options;
    options.after = *leave == SlurmLeave::kRunning ? ckpt::CheckpointOptions::After::kLeaveRunning
                                                   : ckpt::CheckpointOptions::After::kLeaveStopped;
    const auto began = std::chrono::steady_clock::now();
    const std::string who = "SLURM step " + key;
    StatusOr<ckpt::PhaseTimes> times = ckpt::CheckpointJob(
        *criu, &record, out, options, [&who](const std::string& line) { Say(who + ": " += line); });
    if (!times.ok()) {
      failed = who;
      failed += ": " + times.status().message() + "; it keeps running";
      break;
    }
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().string() != out) fs::remove_all(entry.path(), ec);  // the last one is kept
    }
    // The image stays root's (0700): it is restored as root, and CRIU recreates the credentials
    // it holds; a user who could edit it could restore a process as anyone.
    (void)chmod(dir.c_str(), 0700);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    std::string said = who + " checkpointed into ";
    said.append(out).append(" (").append(base::FormatSize(times->image_bytes)).append(", ");
    said.append(times->Describe()).append("), left ").append(SlurmLeaveName(*leave));
    Say(said);
    steps.push_back({{key::kStep, key},
                     {key::kImage, out},
                     {key::kBytes, times->image_bytes},
                     {key::kSeconds, seconds}});
    std::lock_guard<std::mutex> lock(mu_);
    slurm_[key].record = record;
    slurm_[key].stopped = *leave == SlurmLeave::kStopped;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& key : *keys) slurm_[key].busy = false;
  }
  if (!failed.empty()) {
    Json answer = Refuse(failed);
    answer[key::kSteps] = steps;
    return answer;
  }
  return {{key::kOk, true}, {key::kSteps, steps}};
}

Json Agent::SlurmResume(const Json& r, uid_t uid) {
  const int64_t job = r.at(key::kJob).get<int64_t>();
  StatusOr<std::vector<std::string>> keys = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return ClaimSlurmJob(job, uid);
  }();
  if (!keys.ok()) return Refuse(keys.status().message());
  std::string failed;
  for (const std::string& key : *keys) {
    std::lock_guard<std::mutex> lock(mu_);
    SlurmStep& s = slurm_[key];
    if (Status same = CheckSlurmStep(key, s); !same.ok()) {
      failed = same.message();
    } else if (s.stopped) {
      Status resumed = ckpt::ResumeJob(&s.record);
      if (!resumed.ok()) failed = "SLURM step " + key + ": " + resumed.message();
      s.stopped = !resumed.ok();
    }
    s.busy = false;
  }
  if (!failed.empty()) return Refuse(failed);
  return {{key::kOk, true}};
}

// The steps `uid` may see: its own (root: all of them).
Json Agent::SlurmSteps(int64_t job, uid_t uid) {
  std::lock_guard<std::mutex> lock(mu_);
  Json out = Json::array();
  for (const auto& [key, s] : slurm_) {
    if (job >= 0 && s.job != job) continue;
    if (uid != 0 && s.uid != uid) continue;
    out.push_back(
        {{key::kKey, key},
         {key::kJob, s.job},
         {key::kStep, s.step},
         {key::kUid, s.uid},
         {key::kGpuIndex, s.gpu_index},
         {key::kGpuMem, s.gpu_mem},
         {key::kPid, s.record.pid},
         {key::kState, SlurmStepStateName(s.busy             ? SlurmStepState::kCheckpointing
                                          : s.stopped        ? SlurmStepState::kStopped
                                          : s.record.pid > 0 ? SlurmStepState::kRunning
                                                             : SlurmStepState::kStarting)},
         {key::kImage, LatestImage(s.checkpoint_dir)}});
  }
  return {{key::kOk, true}, {key::kNode, options_.name}, {key::kSteps, out}};
}

}  // namespace paladin::agent
