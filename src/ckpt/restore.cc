// RestoreJob and ResumeJob (checkpoint.h): an image back into a running (or stopped) job on this
// node, in the places this node keeps for it (placement.h).
#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "gpu_driver.h"
#include "paladin/base/cgroup.h"
#include "paladin/ckpt/checkpoint.h"
#include "paladin/gpu/nvml.h"
#include "paladin/quota/region.h"
#include "phase_times.h"
#include "placement.h"
#include "process_tree.h"

namespace paladin::ckpt {

namespace fs = std::filesystem;

namespace {

using GpuMap = std::vector<std::pair<std::string, std::string>>;

Status Refuse(const Status& s) { return Status(s.code(), "refusing to restore: " + s.message()); }

// Who may write the image, and (unless the caller did it) the image's verification.
Status CheckImage(int image, const Criu& criu, const std::string& dir,
                  const RestoreOptions2& options, const Progress& progress, PhaseTimes* times,
                  Stopwatch* watch) {
  Status writers = CheckImageWriters(image, dir);
  if (!writers.ok()) return Refuse(writers);
  if (options.verified) return Status::Ok();
  progress("verifying " + dir);
  StatusOr<VerifyReport> verified = VerifyImage(dir, criu.version);
  if (!verified.ok()) return Refuse(verified.status());
  times->seconds.emplace_back("verify", watch->Lap());
  return Status::Ok();
}

// The job's record: as this node kept it where the run directory is still there (its paths
// replaced by this node's places), else from the manifest.
JobRecord RecordFor(const Manifest& m, const Placement& place) {
  JobRecord job;
  struct stat record {};
  if (fstatat(place.dir.get(), "job.json", &record, AT_SYMLINK_NOFOLLOW) == 0 &&
      S_ISREG(record.st_mode)) {
    StatusOr<JobRecord> previous = ReadJob(place.run_dir);
    if (previous.ok()) job = *previous;
  }
  job.cgroup = SafeCgroup(job.cgroup);
  job.region = place.region;
  job.gpu = m.gpu_mode;
  job.emu_gpus = m.emu_gpus;
  const char* local_state = getenv("PALADIN_EMU_STATE");
  job.emu_state = local_state != nullptr && local_state[0] != '\0' ? local_state : m.emu_state;
  job.name = m.name;
  job.command = m.command;
  job.cwd = m.cwd;
  job.run_dir = place.run_dir;
  job.stdout_log = place.stdout_log;
  job.stderr_log = place.stderr_log;
  job.net_ns.clear();
  return job;
}

// The network namespace an image's job is restored into, open: options.net_ns, else the one its
// manifest names. -1 for a job in its launcher's network.
StatusOr<int> OpenJobNetwork(const Manifest& m, const RestoreOptions2& options, std::string* path) {
  if (m.net_ns.empty()) {
    if (options.net_ns.empty()) return -1;
    return Refuse(
        InvalidArgument("the image's job ran in its launcher's network, not one of its "
                        "own: it cannot be restored into " +
                        options.net_ns));
  }
  *path = options.net_ns.empty() ? m.net_ns : options.net_ns;
  const int fd = open(path->c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Refuse(FailedPrecondition("the job ran in a network of its own (" + m.net_ns +
                                     (m.net_address.empty() ? "" : ", address " + m.net_address) +
                                     "), and its restore needs one made for it first: " + *path +
                                     ": " + strerror(errno)));
  }
  if (ioctl(fd, NS_GET_NSTYPE) != CLONE_NEWNET) {
    close(fd);
    return Refuse(InvalidArgument(*path + " is not a network namespace"));
  }
  return fd;
}

// Copies the image's logs into the run directory, and its quota region where the run directory
// has none; returns the job's region, open (null without a quota).
StatusOr<std::unique_ptr<quota::Region>> PlaceFiles(int image, const Manifest& m,
                                                    const Placement& place) {
  for (const std::string& rel : m.logs) {
    Status s = CopyIntoRunDir(image, m, rel, place, fs::path(rel).filename().string());
    if (!s.ok()) return Refuse(s);
  }
  if (place.region.empty()) return std::unique_ptr<quota::Region>();
  struct stat st {};
  if (fstatat(place.dir.get(), "quota.region", &st, AT_SYMLINK_NOFOLLOW) != 0) {
    // Always 0600 where it was made (quota::Region::Create), which CRIU insists on; an image
    // that came through a move's transfer holds a copy with the default mode instead.
    Status s = CopyIntoRunDir(image, m, "quota.region", place, "quota.region", 0600);
    if (!s.ok()) return Refuse(s);
  } else if (!S_ISREG(st.st_mode) || st.st_nlink != 1) {
    return FailedPrecondition("refusing to restore: " + place.region + " is " +
                              (S_ISREG(st.st_mode) ? "a hard link" : FileTypeName(st.st_mode)) +
                              ", not the job's quota region");
  }
  std::string error;
  std::unique_ptr<quota::Region> region = quota::Region::Open(place.region, &error);
  if (region == nullptr) return Internal("the job's quota region: " + error);
  return region;
}

// CRIU's restore of the tree; returns its root. The restored tree runs at once: while its GPU
// state is still checkpointed and locked, its CUDA calls block (as after the driver's own lock),
// so nothing touches the GPU until unlock.
StatusOr<pid_t> RunCriuRestore(const Criu& criu, const std::string& dir, const Manifest& m,
                               const RestoreOptions2& options, const Progress& progress) {
  RestoreOptions restore;
  std::string net_path;
  StatusOr<int> net = OpenJobNetwork(m, options, &net_path);
  if (!net.ok()) return net.status();
  restore.net_ns_fd = *net;
  // A tree without GPU state has nothing to wait for: it stays stopped from the start, so that
  // a destination that dies mid-restore leaves no running copy.
  restore.leave_stopped = options.leave_stopped && m.gpu_driver.empty();
  restore.timeout_s = options.timeout_s;
  restore.lazy_pages = options.lazy_pages;
  // The init held its agent's lease: it follows the restoring agent's now, or none.
  int no_lease = -1;
  if (!m.lease.empty()) {
    if (options.lease_fd < 0) no_lease = open("/dev/null", O_RDONLY | O_CLOEXEC);
    restore.inherit_fds.emplace_back(options.lease_fd >= 0 ? options.lease_fd : no_lease, m.lease);
  }
  progress("restoring with CRIU");
  StatusOr<pid_t> pid = Restore(criu, dir, restore);
  if (no_lease >= 0) close(no_lease);
  if (*net >= 0) close(*net);
  return pid;
}

// Moves the region's counters from each old GPU of `gpu_map` to its new one (`back`: from the
// new to the old).
void RenameDevices(quota::Region* region, const GpuMap& gpu_map, bool back) {
  for (const auto& [from, to] : gpu_map) {
    char a[16];
    char b[16];
    if (gpu::ParseGpuUuid(from, a) && gpu::ParseGpuUuid(to, b)) {
      region->RenameDevice(back ? b : a, back ? a : b);
    }
  }
}

// The driver's restore of the GPU state of the restored tree (`root`, its processes `pids`),
// unlocked unless the job is to stay stopped.
Status RestoreGpu(const JobRecord& job, const Manifest& m, pid_t root,
                  const std::vector<pid_t>& pids, const RestoreOptions2& options,
                  const Progress& progress) {
  // The driver's restore needs the processes to answer: a job dumped while Paladin held it
  // stopped comes back stopped (its CUDA calls block until the unlock below).
  ContinueTree(root, m.stopped);
  StatusOr<std::unique_ptr<GpuCheckpointer>> driver =
      DriverFor(job.gpu, job.emu_state, job.emu_gpus);
  if (!driver.ok()) return driver.status();
  ClearForeignControlFiles(job.gpu, job.emu_state, pids);
  ClearForeignControlFiles(job.gpu, m.emu_state, pids);
  const std::vector<pid_t> cuda = (*driver)->CudaProcesses(pids);
  if (cuda.empty()) {
    return Internal(
        "the image holds GPU state but no restored process answers the driver's "
        "checkpoint API");
  }
  // Side by side, as they were checkpointed (checkpoint.cc); unlocked only once all are back.
  for (pid_t p : cuda) progress("restoring the GPU state of pid " + std::to_string(p));
  if (cuda.size() > 1) {
    progress("restoring " + std::to_string(cuda.size()) + " processes' GPU state, " +
             std::to_string(std::min<size_t>(cuda.size(), GpuCallsAtOnce())) + " at once");
  }
  const GpuCheckpointer& gpu = **driver;
  PALADIN_RETURN_IF_ERROR(ForEachProcessAtOnce(
      cuda, [&gpu, &options](pid_t p) { return gpu.Restore(p, options.gpu_map); }));
  if (options.leave_stopped) return Status::Ok();
  for (pid_t p : cuda) PALADIN_RETURN_IF_ERROR(gpu.Unlock(p));
  return Status::Ok();
}

// The image still holds the job; the half-restored copy must not run.
Status Abandon(const Status& s, const std::vector<pid_t>& pids, quota::Region* region,
               const GpuMap& gpu_map) {
  for (pid_t p : pids) kill(p, SIGKILL);
  if (region != nullptr) {
    RenameDevices(region, gpu_map, true);
    region->FreezeProcesses();
  }
  return Status(s.code(), s.message() + " (the restored copy was stopped; the image is intact)");
}

// Left stopped (a migration's destination before the commit): stopped, its GPU state restored
// but still locked; ResumeJob lets it go. Otherwise running, except what the job had stopped
// itself (CRIU restores those stopped; a SIGCONT to the whole tree would wake them). The record
// is written (a failure to is only a warning: the job runs).
void Release(JobRecord* job, const Manifest& m, pid_t root, const std::vector<pid_t>& pids,
             const RestoreOptions2& options, const std::string& dir, const Progress& progress) {
  job->stopped = m.stopped;
  if (options.leave_stopped) {
    for (pid_t p : pids) kill(p, SIGSTOP);
  } else {
    ContinueTree(root, job->stopped);
  }
  job->pid = root;
  // CRIU put the tree back into the group it was dumped in (making it where missing): the
  // record names that group, so that whoever sees the job end removes it (supervise::Finish).
  if (const std::string group = base::Cgroup::Of(root); !group.empty()) job->cgroup = group;
  job->state = options.leave_stopped ? RunState::kStopped : RunState::kRunning;
  std::error_code ec;
  job->image = fs::canonical(dir, ec).string();
  Status s = WriteJob(*job);
  if (!s.ok()) progress("warning: " + s.message());
}

}  // namespace

StatusOr<JobRecord> RestoreJob(const Criu& criu, const std::string& dir,
                               const RestoreOptions2& options, const Progress& progress,
                               PhaseTimes* times) {
  Stopwatch watch;
  StatusOr<Fd> image = OpenDirectory(dir);
  if (!image.ok()) return image.status();
  PALADIN_RETURN_IF_ERROR(CheckImage(image->get(), criu, dir, options, progress, times, &watch));
  StatusOr<Manifest> m = ReadManifest(dir);
  if (!m.ok()) return m.status();
  // Neither the job's group nor its run directory is removed by whoever cleans up after an old
  // copy of it while this restore makes them its own, until its record names the restored copy.
  const base::CgroupsLock places = base::CgroupsLock::Shared();
  StatusOr<Placement> place = Place(*m, options.placement);
  if (!place.ok()) return Refuse(place.status());
  JobRecord job = RecordFor(*m, *place);
  if (!m->net_ns.empty()) job.net_ns = options.net_ns.empty() ? m->net_ns : options.net_ns;
  StatusOr<std::unique_ptr<quota::Region>> region = PlaceFiles(image->get(), *m, *place);
  if (!region.ok()) return region.status();
  StatusOr<pid_t> pid = RunCriuRestore(criu, dir, *m, options, progress);
  if (!pid.ok()) return pid.status();
  times->seconds.emplace_back("criu restore", watch.Lap());
  const std::vector<pid_t> pids = Tree(*pid);
  // The quota's counters now belong to the restored processes, on the GPUs they move to.
  quota::Region* counters = region->get();
  if (counters != nullptr) {
    counters->ThawProcesses(RestoredIds(pids));
    RenameDevices(counters, options.gpu_map, false);
  }
  if (!m->gpu_driver.empty()) {
    Status s = RestoreGpu(job, *m, *pid, pids, options, progress);
    if (!s.ok()) return Abandon(s, pids, counters, options.gpu_map);
    times->seconds.emplace_back("gpu restore", watch.Lap());
  }
  Release(&job, *m, *pid, pids, options, dir, progress);
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
  job->state = RunState::kRunning;
  return WriteJob(*job);
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

}  // namespace paladin::ckpt
