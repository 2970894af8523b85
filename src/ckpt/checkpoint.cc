// CheckpointJob: a running job into an image directory, step by step (checkpoint.h). Each step
// that fails undoes what the steps before it did, so that the job keeps running.
#include "paladin/ckpt/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "gpu_driver.h"
#include "job_manifest.h"
#include "link_remaps.h"
#include "paladin/base/cgroup.h"
#include "paladin/ckpt/gpu_checkpoint.h"
#include "paladin/ckpt/sockets.h"
#include "paladin/quota/region.h"
#include "phase_times.h"
#include "process_tree.h"

namespace paladin::ckpt {

namespace fs = std::filesystem;

namespace {

// Copies a file of the job's run directory into the image, with its mode. The job may have put
// something else in its place since: a link is not followed and nothing but a regular file is
// read (root would otherwise copy whatever the link names into an image the team can read).
Status CopyFromRunDir(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::create_directories(fs::path(to).parent_path(), ec);
  const int in = open(from.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (in < 0) {
    return IoError("cannot copy " + from + ": " +
                   (errno == ELOOP ? std::string("it is a symbolic link") : strerror(errno)));
  }
  struct stat st {};
  if (fstat(in, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(in);
    return IoError("cannot copy " + from + ": not a regular file");
  }
  const int out =
      open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, st.st_mode & 0777);
  if (out < 0) {
    const std::string why = strerror(errno);
    close(in);
    return IoError("cannot create " + to + ": " + why);
  }
  char buf[1 << 16];
  ssize_t n = 0;
  bool ok = true;
  while (ok && (n = read(in, buf, sizeof buf)) > 0) {
    for (ssize_t done = 0; ok && done < n;) {
      const ssize_t w = write(out, buf + done, static_cast<size_t>(n - done));
      ok = w > 0;
      done += ok ? w : 0;
    }
  }
  const std::string why = strerror(errno);
  close(in);
  if (close(out) != 0 || !ok || n < 0)
    return IoError("cannot copy " + from + " to " + to + ": " + why);
  return Status::Ok();
}

// Creates the image directory `out`, which must not exist or be empty; returns its canonical
// path.
StatusOr<std::string> MakeImageDirectory(const std::string& out) {
  std::error_code ec;
  if (fs::exists(out) && !fs::is_empty(out, ec)) {
    return AlreadyExists(out + " exists and is not empty; give a new directory");
  }
  fs::create_directories(out, ec);
  if (ec) return IoError("cannot create " + out + ": " + ec.message());
  return fs::canonical(out).string();
}

// One CheckpointJob, whose steps Run takes in order. What a failed step must undo grows with
// the steps taken: Fail removes the partial image, UndoGpu also gives the job its GPU back, and
// FailDumped (after the dump) also lets a job that runs on run again.
class CheckpointRun {
 public:
  CheckpointRun(const Criu& criu, JobRecord* job, std::string image,
                const CheckpointOptions& options, const Progress& progress)
      : criu_(criu),
        job_(job),
        image_(std::move(image)),
        options_(options),
        progress_(progress),
        root_(static_cast<pid_t>(job->pid)) {}

  StatusOr<PhaseTimes> Run();

 private:
  Status CheckNetwork() const;
  StatusOr<std::string> PreDumps();
  Status FindGpuProcesses();
  void DescribeRunningJob();
  Status CheckpointGpu();
  Status OpenRegion();
  void MarkCheckpointing();
  void UnmarkCheckpointing();
  Status CloseOutsidePeers();
  DumpOptions FinalDumpOptions(const std::string& parent) const;
  Status DumpTree(const std::string& parent);
  Status FillImage();
  void Finish();

  Status Fail(const Status& s);
  Status UndoGpu(const Status& s);
  Status FailDumped(const Status& s);
  void GiveGpuBack();

  bool KillAfter() const { return options_.after == CheckpointOptions::After::kKill; }
  // A job that stays alive (running on, or stopped for a move) is stopped by Paladin before the
  // dump, and CRIU leaves it as it found it, stopped: CRIU undoes what it did to hold the job's
  // TCP connections still (each socket's repair mode, its nftables lock) and its link remaps
  // only for a tree it leaves alive, and with --leave-stopped the connections between the job's
  // processes stayed frozen after Paladin resumed them. The tree stays stopped until its logs
  // are copied: what it writes after the dump must not be in the image. A post-copy dump keeps
  // --leave-stopped (its page server serves the stopped tree's memory).
  bool StopFirst() const { return !KillAfter() && options_.lazy_socket < 0; }
  // Frozen by FreezeJob (a gang's coordinated cut): it stays stopped when a dump fails, and what
  // it had stopped itself was recorded when it was frozen.
  bool Frozen() const {
    return previous_state_ == RunState::kFrozen || job_->state == RunState::kFrozen;
  }

  const Criu& criu_;
  JobRecord* const job_;
  const std::string image_;
  const CheckpointOptions& options_;
  const Progress& progress_;
  const pid_t root_;
  PhaseTimes times_;
  Stopwatch watch_;
  std::vector<pid_t> pids_;
  std::unique_ptr<GpuCheckpointer> gpu_;  // null for a CPU job
  std::vector<pid_t> cuda_;               // the processes with GPU state
  Manifest manifest_;
  std::unique_ptr<base::Cgroup> group_;  // set while its memory limit is lifted
  uint64_t memory_limit_ = 0;            // the limit lifted, 0 for none
  std::unique_ptr<quota::Region> region_;
  RunState previous_state_ = RunState::kRunning;
};

StatusOr<PhaseTimes> CheckpointRun::Run() {
  Status network = CheckNetwork();
  if (!network.ok()) return Fail(network);
  StatusOr<std::string> parent = PreDumps();
  if (!parent.ok()) return Fail(parent.status());
  pids_ = Tree(root_);
  Status s = FindGpuProcesses();
  if (!s.ok()) return Fail(s);
  DescribeRunningJob();
  s = CheckpointGpu();
  if (s.ok()) s = OpenRegion();
  if (!s.ok()) return UndoGpu(s);
  MarkCheckpointing();
  s = CloseOutsidePeers();
  if (!s.ok()) {
    UnmarkCheckpointing();
    return UndoGpu(s);
  }
  s = DumpTree(*parent);
  if (!s.ok()) return UndoGpu(s);
  s = FillImage();
  if (!s.ok()) return FailDumped(s);
  Finish();
  return times_;
}

// A job in a network of its own (a rank's) keeps its connections to the other ranks: CRIU must
// hold that network still while it dumps them, or a peer's next segment meets a closed socket
// and is answered with a reset (docs/distributed.md, "Ranks with their own network").
Status CheckpointRun::CheckNetwork() const {
  if (job_->net_ns.empty() || criu_.network_lock != "skip") return Status::Ok();
  return FailedPrecondition(
      "job " + job_->name + " runs in its own network (" + job_->net_ns +
      ") and keeps its connections to other ranks, which needs CRIU's network lock; this CRIU "
      "cannot lock with nftables here (`criu check --feature nftables`)");
}

// Memory passes while the job runs: the final pause only copies what changed since. They need
// the kernel to track dirty memory. Returns the last pass's folder in the image ("" for none).
StatusOr<std::string> CheckpointRun::PreDumps() {
  int pre_dumps = options_.pre_dumps;
  if (pre_dumps > 0 && !criu_.dirty_tracking) {
    progress_(
        "warning: this kernel does not track dirty memory (CONFIG_MEM_SOFT_DIRTY), which "
        "pre-dumps need; dumping in one pass");
    pre_dumps = 0;
  }
  std::string parent;
  for (int i = 1; i <= pre_dumps; ++i) {
    const std::string dir = "pre-" + std::to_string(i);
    const std::string pre_dir = (fs::path(image_) / dir).string();
    std::error_code ec;
    fs::create_directories(pre_dir, ec);
    DumpOptions pre;
    pre.pre_dump = true;
    pre.parent_images = parent.empty() ? "" : "../" + parent;
    pre.timeout_s = options_.timeout_s;
    pre.net_ns = job_->net_ns;
    if (!job_->run_dir.empty()) pre.failed_log = job_->run_dir + "/criu-pre-dump.log";
    progress_("pre-dump " + std::to_string(i) + " of " + std::to_string(pre_dumps));
    PALADIN_RETURN_IF_ERROR(Dump(criu_, root_, pre_dir, pre));
    parent = dir;
    times_.seconds.emplace_back("pre-dump " + std::to_string(i), watch_.Lap());
  }
  return parent;
}

Status CheckpointRun::FindGpuProcesses() {
  StatusOr<std::unique_ptr<GpuCheckpointer>> driver =
      DriverFor(job_->gpu, job_->emu_state, job_->emu_gpus);
  if (!driver.ok()) return driver.status();
  gpu_ = std::move(*driver);
  ClearForeignControlFiles(job_->gpu, job_->emu_state, pids_);
  if (gpu_ != nullptr) cuda_ = gpu_->CudaProcesses(pids_);
  if (options_.lazy_socket >= 0 && !cuda_.empty()) {
    return FailedPrecondition("post-copy moves of jobs with GPU state are not supported");
  }
  return Status::Ok();
}

// What the job holds on which GPU, while it still holds it.
void CheckpointRun::DescribeRunningJob() {
  manifest_ = DescribeJob(*job_, criu_, job_->pid);
  manifest_.uid = CommandUid(pids_);
  // What the job stopped itself stays stopped wherever it is resumed; a frozen job's was
  // recorded before it was frozen.
  manifest_.stopped = job_->state == RunState::kFrozen ? job_->stopped : StoppedProcesses(pids_);
  job_->stopped = manifest_.stopped;
  // No process with a CUDA context (a job under a quota that never touched CUDA, or not yet):
  // the image holds no GPU state, and its restore must not wait for a process to answer for one.
  if (!cuda_.empty()) DescribeGpus(*job_, pids_, &manifest_);
}

Status CheckpointRun::CheckpointGpu() {
  // GPU memory is about to land in the job's RAM: its cgroup limit must not kill it meanwhile.
  if (!cuda_.empty() && !job_->cgroup.empty()) {
    group_ = std::make_unique<base::Cgroup>(base::Cgroup::Existing(job_->cgroup));
    memory_limit_ = group_->MemoryLimit();
    if (memory_limit_ > 0) (void)group_->SetMemoryLimit(0);
  }
  for (pid_t pid : cuda_) {
    progress_("locking the GPU state of pid " + std::to_string(pid));
    PALADIN_RETURN_IF_ERROR(gpu_->Lock(pid, 10000));
  }
  if (!cuda_.empty()) times_.seconds.emplace_back("gpu lock", watch_.Lap());
  // Each process's device memory leaves through a driver call of its own: the job's processes
  // go side by side, so the GPU part of the pause is its largest process's, not their sum.
  for (pid_t pid : cuda_) {
    progress_("checkpointing the GPU state of pid " + std::to_string(pid));
  }
  if (cuda_.size() > 1) {
    progress_("checkpointing " + std::to_string(cuda_.size()) + " processes' GPU state, " +
              std::to_string(std::min<size_t>(cuda_.size(), GpuCallsAtOnce())) + " at once");
  }
  PALADIN_RETURN_IF_ERROR(
      ForEachProcessAtOnce(cuda_, [this](pid_t pid) { return gpu_->Checkpoint(pid); }));
  if (!cuda_.empty()) times_.seconds.emplace_back("gpu checkpoint", watch_.Lap());
  return Status::Ok();
}

// The quota's counters must outlive the processes the dump kills: they come back with them.
Status CheckpointRun::OpenRegion() {
  if (job_->region.empty()) return Status::Ok();
  std::string error;
  region_ = quota::Region::Open(job_->region, &error);
  if (region_ == nullptr) return Internal(error);
  return Status::Ok();
}

void CheckpointRun::MarkCheckpointing() {
  if (region_ != nullptr && KillAfter()) region_->FreezeProcesses();
  previous_state_ = job_->state;
  job_->state = KillAfter() ? RunState::kCheckpointing : job_->state;
  (void)WriteJob(*job_);
}

// Back to how MarkCheckpointing found the job: its state, and its processes thawed.
void CheckpointRun::UnmarkCheckpointing() {
  job_->state = previous_state_;
  (void)WriteJob(*job_);
  if (region_ != nullptr && KillAfter()) region_->ThawProcesses(RestoredIds(pids_));
}

// Nothing outside the job is dumped with it: its connections to outside peers are closed now,
// the peers see a reset (docs/ckpt.md, "Sockets").
Status CheckpointRun::CloseOutsidePeers() {
  // A rank's peers are the other ranks, frozen and dumped with it as one cut: all its
  // connections are kept.
  if (!job_->net_ns.empty()) return Status::Ok();
  // For tests: a failure at this step must leave the job as it was.
  if (const char* fault = getenv("PALADIN_CKPT_FAULT");
      fault != nullptr && std::string(fault) == "close-peers") {
    return Internal("fault injected: closing the job's outside connections failed");
  }
  StatusOr<std::vector<TcpConnection>> connections = JobConnections(pids_);
  if (!connections.ok()) return connections.status();
  for (const TcpConnection& c : *connections) {
    if (!c.internal)
      progress_("closing the connection " + c.Describe() + " to a peer outside the job");
  }
  return CloseOutsideConnections(*connections);
}

DumpOptions CheckpointRun::FinalDumpOptions(const std::string& parent) const {
  DumpOptions dump;
  dump.leave_running = StopFirst();
  dump.leave_stopped = !KillAfter() && !StopFirst();
  dump.parent_images = parent;
  dump.timeout_s = options_.timeout_s;
  if (!job_->run_dir.empty()) dump.failed_log = job_->run_dir + "/criu-dump.log";
  dump.lazy_socket = options_.lazy_socket;
  dump.lazy_log = options_.lazy_log;
  dump.lazy_dump = options_.lazy_dump;
  dump.page_server_socket = options_.page_server_socket;
  dump.net_ns = job_->net_ns;
  return dump;
}

// The final dump. When it fails, the job is as it was before MarkCheckpointing.
Status CheckpointRun::DumpTree(const std::string& parent) {
  const DumpOptions dump = FinalDumpOptions(parent);
  progress_("dumping " + std::to_string(pids_.size()) + " process(es) with CRIU");
  std::set<std::string> remaps_before;
  if (StatusOr<Fd> shm = OwnShm(root_); shm.ok()) remaps_before = LinkRemaps(shm->get());
  Status dumped = StopFirst() ? StopTree(root_) : Status::Ok();
  if (dumped.ok()) dumped = Dump(criu_, root_, image_, dump);
  if (dumped.ok() && dump.leave_stopped) DropNewLinkRemaps(root_, remaps_before);
  if (dumped.ok()) return dumped;
  // CRIU resumes a tree whose dump failed as it found it: this one, stopped by Paladin. A frozen
  // one stays frozen: the rest of its gang is.
  if (StopFirst() && !Frozen()) ContinueTree(root_, job_->stopped);
  UnmarkCheckpointing();
  return dumped;
}

// What the image holds beside CRIU's files: the quota region, the logs and the manifest.
Status CheckpointRun::FillImage() {
  if (region_ != nullptr) {
    PALADIN_RETURN_IF_ERROR(CopyFromRunDir(job_->region, image_ + "/quota.region"));
  }
  times_.seconds.emplace_back("criu dump", watch_.Lap());
  // The logs travel with the image, as they were at the dump (CRIU checks open files' sizes).
  const std::vector<std::pair<std::string, std::string>> logs = {
      {job_->stdout_log, "logs/stdout.log"}, {job_->stderr_log, "logs/stderr.log"}};
  for (const auto& [host, rel] : logs) {
    if (host.empty() || !fs::exists(host)) continue;
    PALADIN_RETURN_IF_ERROR(CopyFromRunDir(host, (fs::path(image_) / rel).string()));
    manifest_.logs.push_back(rel);
    manifest_.log_targets.push_back(host);
  }
  PALADIN_RETURN_IF_ERROR(WriteManifest(image_, manifest_));
  times_.seconds.emplace_back("manifest", watch_.Lap());
  std::error_code ec;
  for (const auto& entry : fs::recursive_directory_iterator(image_, ec)) {
    if (entry.is_regular_file()) times_.image_bytes += entry.file_size();
  }
  return Status::Ok();
}

void CheckpointRun::Finish() {
  if (options_.after == CheckpointOptions::After::kLeaveRunning) {
    // Running again first (its CUDA calls still block until unlocked), so that the driver's
    // restore can reach it; what the job had stopped itself stays stopped.
    ContinueTree(root_, job_->stopped);
    GiveGpuBack();
  }
  job_->image = image_;
  job_->state = KillAfter() ? RunState::kCheckpointed
                : options_.after == CheckpointOptions::After::kLeaveRunning ? RunState::kRunning
                                                                            : previous_state_;
  (void)WriteJob(*job_);
}

Status CheckpointRun::Fail(const Status& s) {
  std::error_code ec;
  fs::remove_all(image_, ec);
  return s;
}

void CheckpointRun::GiveGpuBack() {
  if (gpu_ != nullptr) ResumeGpu(*gpu_, cuda_);
  if (group_ && memory_limit_ > 0) (void)group_->SetMemoryLimit(memory_limit_);
}

Status CheckpointRun::UndoGpu(const Status& s) {
  GiveGpuBack();
  return Fail(s);
}

// A job that runs on is not left stopped because its image could not be finished.
Status CheckpointRun::FailDumped(const Status& s) {
  if (options_.after == CheckpointOptions::After::kLeaveRunning) {
    ContinueTree(root_, job_->stopped);
    return UndoGpu(s);
  }
  return Fail(s);
}

}  // namespace

StatusOr<PhaseTimes> CheckpointJob(const Criu& criu, JobRecord* job, const std::string& out,
                                   const CheckpointOptions& options, const Progress& progress) {
  if (job->pid <= 0 || kill(static_cast<pid_t>(job->pid), 0) != 0) {
    return FailedPrecondition("job " + job->name + " (pid " + std::to_string(job->pid) +
                              ") is not running");
  }
  StatusOr<std::string> image = MakeImageDirectory(out);
  if (!image.ok()) return image.status();
  return CheckpointRun(criu, job, *image, options, progress).Run();
}

}  // namespace paladin::ckpt
