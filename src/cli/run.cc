// `paladin run`: runs one workload on this machine the way the node agent will, under the
// GPU-memory quota interposer, on the real driver or the emulated one.
#include "run.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "paladin/base/cgroup.h"
#include "paladin/base/size.h"
#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/rank_net.h"
#include "paladin/ckpt/workload.h"
#include "paladin/gpu/nvml.h"
#include "paladin/quota/launch.h"
#include "paladin/quota/region.h"
#include "paladin/quota/usage.h"
#include "paladin/supervise/supervisor.h"

namespace paladin::cli {
namespace {

std::string g_say_as = "paladin run";

void RunSay(const std::string& line) {
  std::fprintf(stderr, "%s: %s\n", g_say_as.c_str(), line.c_str());
}

std::atomic<pid_t> g_child{0};

std::atomic<int> g_signals{0};

// The workload is pid 1 of its namespace, which ignores signals it does not handle: a second
// interrupt kills it.
void Forward(int signal) {
  const pid_t child = g_child.load();
  if (child > 0) kill(child, g_signals.fetch_add(1) == 0 ? signal : SIGKILL);
}

// --net-ns and --rank-address: the namespace file the workload joins ("" for none), the rank
// network made first when asked for.
StatusOr<std::string> NetNamespaceFor(const RunArgs& args) {
  if (args.net_ns.empty()) {
    if (args.rank_address.empty()) return std::string();
    return InvalidArgument("--rank-address needs --net-ns NAME");
  }
  if (args.net_ns.find('/') != std::string::npos) {
    if (!args.rank_address.empty()) {
      return InvalidArgument(
          "--rank-address makes a rank network by name: --net-ns NAME, not a "
          "path");
    }
    if (args.net_ns[0] != '/')
      return InvalidArgument("--net-ns " + args.net_ns +
                             ": a NAME or "
                             "an absolute path");
    return args.net_ns;
  }
  PALADIN_RETURN_IF_ERROR(ckpt::CheckRankNetName(args.net_ns));
  if (!args.rank_address.empty()) {
    PALADIN_RETURN_IF_ERROR(ckpt::CheckRankAddress(args.rank_address));
    PALADIN_RETURN_IF_ERROR(ckpt::CreateRankNet({args.net_ns, args.rank_address}));
  }
  return ckpt::RankNetPath(args.net_ns);
}

std::string DefaultRunDir(const std::string& name) {
  std::string base;
  if (const char* dir = getenv("PALADIN_RUN_DIR")) {
    base = dir;
  } else {
    const char* runtime = getenv("XDG_RUNTIME_DIR");
    base =
        std::string(runtime != nullptr ? runtime : "/tmp") + "/paladin-" + std::to_string(getuid());
  }
  return base + "/" + name + "-" + std::to_string(getpid());
}

// Samples the workload every `every_s` seconds into a CSV file until stopped.
class UsageLog {
 public:
  UsageLog(FILE* out, const quota::Region& region, const gpu::Nvml* nvml, double every_s)
      : out_(out), region_(region), nvml_(nvml), every_s_(every_s) {
    std::fprintf(out_,
                 "time_s,gpu_uuid,quota_bytes,counted_bytes,counted_peak_bytes,context_bytes,"
                 "nvml_bytes,sm_util_pct,host_rss_bytes,cpu_seconds,refusals,grows,processes\n");
  }
  void Start(pid_t root, std::string cgroup) {
    root_ = root;
    cgroup_ = std::move(cgroup);
    start_ = std::chrono::steady_clock::now();
    thread_ = std::thread([this] { Loop(); });
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      Write();
      cv_.wait_for(lock, std::chrono::duration<double>(every_s_), [this] { return stop_; });
    }
  }
  void Write() {
    const double t =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const quota::WorkloadUsage u =
        quota::SampleUsage(region_, nvml_, static_cast<uint32_t>(root_), cgroup_);
    for (const quota::GpuUsage& g : u.gpus) {
      std::fprintf(out_, "%.3f,%s,%llu,%llu,%llu,%llu,%s,%u,%llu,%.2f,%llu,%llu,%zu\n", t,
                   g.uuid.c_str(), static_cast<unsigned long long>(g.quota_bytes),
                   static_cast<unsigned long long>(g.counted_bytes),
                   static_cast<unsigned long long>(g.counted_peak_bytes),
                   static_cast<unsigned long long>(g.context_bytes),
                   g.nvml_available ? std::to_string(g.nvml_bytes).c_str() : "", g.sm_util_pct,
                   static_cast<unsigned long long>(u.host_rss_bytes), u.cpu_seconds,
                   static_cast<unsigned long long>(u.refusals),
                   static_cast<unsigned long long>(u.grows), u.pids.size());
    }
    std::fflush(out_);
  }

  FILE* out_;
  const quota::Region& region_;
  const gpu::Nvml* nvml_;
  double every_s_;
  pid_t root_ = 0;
  std::string cgroup_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Parses the size flags into region settings; an error names the flag and the value.
StatusOr<quota::RegionSettings> QuotaSettings(const RunArgs& a) {
  quota::RegionSettings s;
  if (!base::ParseSize(a.gpu_mem, &s.quota_bytes) || s.quota_bytes == 0) {
    return InvalidArgument("--gpu-mem '" + a.gpu_mem +
                           "': not a size (expected e.g. 10GiB, 512MiB or a number of bytes)");
  }
  if (!a.gpu_mem_max.empty()) {
    if (!base::ParseSize(a.gpu_mem_max, &s.ceiling_bytes)) {
      return InvalidArgument("--gpu-mem-max '" + a.gpu_mem_max +
                             "': not a size (expected e.g. 20GiB)");
    }
    if (s.ceiling_bytes < s.quota_bytes) {
      return InvalidArgument("--gpu-mem-max " + base::FormatSize(s.ceiling_bytes) +
                             " is below --gpu-mem " + base::FormatSize(s.quota_bytes));
    }
  }
  return s;
}

int WaitForChild(pid_t child) {
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return 1;
  }
  g_child = 0;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

void Summarise(const quota::Region& region, const std::string& name, int code) {
  std::string line = name + " exited with " + std::to_string(code);
  for (int slot = 0; slot < region.device_count(); ++slot) {
    char uuid[16];
    region.DeviceUuid(slot, uuid);
    line += "; " + gpu::FormatGpuUuid(uuid) + " peak " + base::FormatSize(region.peak(slot)) +
            " of " + base::FormatSize(region.quota());
  }
  line += "; " + std::to_string(region.refusals()) + " allocation(s) refused past the quota";
  if (region.grows() > 0) line += "; quota grown " + std::to_string(region.grows()) + " time(s)";
  RunSay(line);
}

// The GPU side of a run: the driver behind the workload and NVML for its usage figures.
struct GpuSetup {
  supervise::GpuSpec spec;
  std::unique_ptr<gpu::Nvml> nvml;
};

// Returns an exit code (non-zero) when the run cannot go ahead.
int PrepareGpu(const RunArgs& args, GpuSetup* gpu) {
  if (!args.gpu_mem.empty()) {
    StatusOr<quota::RegionSettings> settings = QuotaSettings(args);
    if (!settings.ok()) {
      RunSay(settings.status().message());
      return 2;
    }
    gpu->spec.quota = *settings;
  } else if (!args.gpu_mem_max.empty()) {
    RunSay("--gpu-mem-max needs --gpu-mem");
    return 2;
  }
  StatusOr<quota::Libraries> libs = quota::FindLibraries();
  if (!libs.ok()) {
    RunSay(libs.status().message());
    return 1;
  }
  gpu->spec.enabled = true;
  gpu->spec.libs = *libs;
  gpu->spec.driver = quota::ChooseDriver(*libs, args.emulated_gpus);
  gpu->spec.visible = args.gpus;
  gpu->spec.compute_share = args.compute_share;
  const quota::DriverChoice& driver = gpu->spec.driver;
  if (driver.emulated) {
    // The launcher (and later `paladin checkpoint`) reads the emulated GPUs through the same
    // library and state file the workload uses.
    setenv("PALADIN_EMU_GPUS", driver.emulated_spec.c_str(), 1);
    setenv("PALADIN_EMU_STATE", quota::EmulatedStatePath().c_str(), 1);
  }
  StatusOr<std::unique_ptr<gpu::Nvml>> nvml = gpu::Nvml::Load(driver.nvml_next);
  if (!nvml.ok() && driver.emulated) {
    RunSay("--emulated-gpus '" + driver.emulated_spec +
           "' gives no GPU: " + nvml.status().message() + " (see the line above)");
    return 2;
  }
  if (!nvml.ok()) {
    RunSay(nvml.status().message() + " (no usage figures from NVML; the quota cannot grow)");
  } else {
    gpu->nvml = std::move(*nvml);
  }
  return 0;
}

// Says what became of the job once its root is gone; true when it is not its end (the run
// directory stays for the restore).
bool SayEnding(const ckpt::JobRecord& job) {
  const supervise::Ending ending = supervise::Finish(job);
  switch (ending.kind) {
    case supervise::Ending::Kind::kMoved:
      RunSay(job.name + " moved to " + ending.image + "; its run directory stays for it");
      return true;
    case supervise::Ending::Kind::kCheckpointed:
      RunSay(job.name + " was checkpointed to " + ending.image +
             "; resume it with: paladin restore " + ending.image);
      return true;
    case supervise::Ending::Kind::kTakenOver:
      RunSay(job.name + " runs on as pid " + std::to_string(ending.pid) +
             ", restored into its run directory, which stays for it");
      return true;
    case supervise::Ending::Kind::kExited:
      return false;
  }
  return false;
}

// The job checkpointed in args.restore_from, restored as this process's child and supervised
// like a started one.
int RestoreAndWait(const RunArgs& args) {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    RunSay(std::string("cannot become a child subreaper: ") + strerror(errno));
    return 1;
  }
  StatusOr<ckpt::Criu> criu = ReadyCriu();
  if (!criu.ok()) {
    RunSay(criu.status().message());
    return 1;
  }
  supervise::RestoreSpec spec;
  spec.image = args.restore_from;
  spec.options.gpu_map = args.gpu_map;
  // The image must be of the user this supervisor runs the workload as (a SLURM step's helper:
  // the step's user; else this process's own), since CRIU gives back whatever uid it holds.
  spec.expect_uid = args.uid >= 0 ? args.uid : static_cast<int64_t>(geteuid());
  // A process restored on another node still names the state file it started with.
  if (const char* state = getenv("PALADIN_EMU_STATE")) spec.emu_state = state;
  ckpt::PhaseTimes times;
  StatusOr<ckpt::JobRecord> job = supervise::Restore(
      *criu, spec, [](const std::string& line) { RunSay(line); }, &times);
  if (!job.ok()) {
    RunSay(job.status().message());
    return 1;
  }
  RunSay("restored " + job->name + " from " + args.restore_from + " (" + times.Describe() +
         "); its output continues below");
  struct sigaction forward {};
  forward.sa_handler = Forward;
  sigaction(SIGINT, &forward, nullptr);
  sigaction(SIGTERM, &forward, nullptr);
  sigaction(SIGHUP, &forward, nullptr);
  g_child = static_cast<pid_t>(job->pid);
  if (args.on_started) args.on_started(*job);
  LogFollower follower(job->stdout_log, job->stderr_log);
  follower.SkipExisting();
  if (args.follow_logs) follower.Start();
  const int code = WaitForChild(static_cast<pid_t>(job->pid));
  follower.Stop();
  if (SayEnding(*job)) return 0;
  RunSay(job->name + " exited with " + std::to_string(code));
  if (!args.keep_run_dir) (void)ckpt::RemoveRunDirUnlessTaken(*job);
  return code;
}

}  // namespace

int RunWorkload(RunArgs args) {
  g_say_as = args.say_as;
  if (!args.restore_from.empty()) return RestoreAndWait(args);
  if (args.command.empty()) {
    RunSay(
        "nothing to run: give the command after --, e.g. paladin run --gpu-mem 10GiB -- python "
        "train.py");
    return 2;
  }
  if (args.name.empty()) args.name = std::filesystem::path(args.command[0]).filename().string();
  if (args.compute_share < 0 || args.compute_share > 100) {
    RunSay("--compute-share " + std::to_string(args.compute_share) +
           ": expected a percentage, 1-100");
    return 2;
  }
  StatusOr<std::string> net_ns = NetNamespaceFor(args);
  if (!net_ns.ok()) {
    RunSay(net_ns.status().message());
    return net_ns.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  GpuSetup gpu;
  if (!args.gpu_mem.empty() || !args.emulated_gpus.empty() || !args.gpu_mem_max.empty()) {
    if (int code = PrepareGpu(args, &gpu); code != 0) return code;
  }
  supervise::LaunchSpec spec;
  spec.name = args.name;
  spec.command = args.command;
  spec.run_dir = args.run_dir.empty() ? DefaultRunDir(args.name) : args.run_dir;
  spec.cwd = args.cwd;
  spec.env = args.env;
  spec.inherit_env = args.inherit_env;
  spec.gpu = gpu.spec;
  spec.uid = args.uid;
  spec.gid = args.gid;
  spec.owner = supervise::Owner::kCaller;
  spec.cgroup = args.name + "-" + std::to_string(getpid());
  spec.net_ns = *net_ns;

  struct sigaction forward {};
  forward.sa_handler = Forward;
  sigaction(SIGINT, &forward, nullptr);
  sigaction(SIGTERM, &forward, nullptr);
  sigaction(SIGHUP, &forward, nullptr);
  StatusOr<supervise::Launched> launched = supervise::Launch(spec);
  if (!launched.ok()) {
    RunSay(launched.status().message());
    return 1;
  }
  const ckpt::JobRecord& job = launched->record;
  quota::Region* region = launched->region.get();
  g_child = static_cast<pid_t>(job.pid);
  RunSay(args.name + ": " + supervise::DescribeGpu(gpu.spec) + "; logs in " + job.run_dir);
  for (const std::string& warning : launched->warnings) RunSay(warning);

  quota::QuotaGrower grower(region, gpu.nvml.get(), [](const std::string& line) { RunSay(line); });
  if (region != nullptr && gpu.spec.quota.ceiling_bytes > gpu.spec.quota.quota_bytes) {
    grower.Start();
  }
  std::unique_ptr<UsageLog> log;
  FILE* log_file = nullptr;
  if (!args.usage_log.empty() && region != nullptr) {
    log_file = std::fopen(args.usage_log.c_str(), "w");
    if (log_file == nullptr) {
      RunSay("cannot write --usage-log " + args.usage_log + ": " + strerror(errno));
    } else {
      log = std::make_unique<UsageLog>(log_file, *region, gpu.nvml.get(), args.usage_every_s);
    }
  }
  if (args.on_started) args.on_started(job);
  LogFollower follower(job.stdout_log, job.stderr_log);
  if (args.follow_logs) follower.Start();
  if (log) log->Start(static_cast<pid_t>(job.pid), job.cgroup);
  const int code = WaitForChild(static_cast<pid_t>(job.pid));
  if (log) log->Stop();
  if (log_file != nullptr) std::fclose(log_file);
  follower.Stop();
  grower.Stop();
  if (SayEnding(job)) return 0;
  if (region != nullptr) {
    Summarise(*region, args.name, code);
  } else {
    RunSay(args.name + " exited with " + std::to_string(code));
  }
  launched->region.reset();
  if (!args.keep_run_dir) (void)ckpt::RemoveRunDirUnlessTaken(job);
  return code;
}

namespace {

struct ResizeArgs {
  std::string job;
  std::string gpu_mem;
  std::string gpu_mem_max;
};

// Changes a running job's quota through its accounting region: a raise lets a refused allocation
// succeed on its next try; a cut below use refuses new allocations and frees nothing.
int ResizeJob(const ResizeArgs& a) {
  auto say = [](const std::string& line) {
    std::fprintf(stderr, "paladin resize: %s\n", line.c_str());
  };
  StatusOr<ckpt::JobRecord> job = ckpt::FindJob(a.job);
  if (!job.ok()) {
    say(job.status().message());
    return 1;
  }
  if (job->region.empty()) {
    say("job " + job->name + " has no GPU-memory quota (it was not started with --gpu-mem)");
    return 1;
  }
  uint64_t quota_bytes = 0;
  uint64_t ceiling = 0;
  if (!base::ParseSize(a.gpu_mem, &quota_bytes) || quota_bytes == 0) {
    say("--gpu-mem '" + a.gpu_mem + "': not a size (expected e.g. 10GiB)");
    return 2;
  }
  if (!a.gpu_mem_max.empty() && !base::ParseSize(a.gpu_mem_max, &ceiling)) {
    say("--gpu-mem-max '" + a.gpu_mem_max + "': not a size (expected e.g. 20GiB)");
    return 2;
  }
  std::string error;
  std::unique_ptr<quota::Region> region = quota::Region::Open(job->region, &error);
  if (region == nullptr) {
    say(error);
    return 1;
  }
  const uint64_t before = region->quota();
  region->SetQuota(quota_bytes);
  if (!a.gpu_mem_max.empty()) region->SetCeiling(ceiling);
  std::string use;
  for (int slot = 0; slot < region->device_count(); ++slot) {
    use += (use.empty() ? "" : ", ") + base::FormatSize(region->used(slot));
  }
  std::printf("%s: GPU-memory quota %s -> %s (in use: %s)\n", job->name.c_str(),
              base::FormatSize(before).c_str(), base::FormatSize(quota_bytes).c_str(),
              use.empty() ? "nothing yet" : use.c_str());
  return 0;
}

}  // namespace

void RegisterRun(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* run = app.add_subcommand(
      "run",
      "Run a command under a GPU-memory quota (the real NVIDIA driver when there is a GPU, "
      "otherwise an emulated GPU)");
  run->add_option("--name", args->name, "Workload name (default: the command's name)");
  run->add_option("--gpu-mem", args->gpu_mem,
                  "GPU-memory quota per GPU, e.g. 10GiB; past it allocations fail with "
                  "CUDA_ERROR_OUT_OF_MEMORY");
  run->add_option("--gpu-mem-max", args->gpu_mem_max,
                  "Ceiling up to which the quota grows on demand while the GPU has room");
  run->add_option("--emulated-gpus", args->emulated_gpus,
                  "Use emulated GPUs, e.g. 1x80GiB or 2x40GiB (the default with --gpu-mem when "
                  "no GPU is found: 1x80GiB); without --gpu-mem, no quota");
  run->add_option("--gpus", args->gpus, "CUDA_VISIBLE_DEVICES for the workload");
  run->add_option("--compute-share", args->compute_share,
                  "Percent of the GPU's SMs (needs NVIDIA MPS)");
  run->add_option("--usage-log", args->usage_log,
                  "Write usage samples (quota, counted, NVML, host memory, CPU) to this CSV");
  run->add_option("--usage-every", args->usage_every_s, "Seconds between usage samples")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  run->add_option("--run-dir", args->run_dir,
                  "Directory for the workload's region and libraries (default: "
                  "$PALADIN_RUN_DIR, $XDG_RUNTIME_DIR or /tmp, under paladin-UID/NAME-PID)");
  run->add_flag("--keep-run-dir", args->keep_run_dir, "Leave the run directory when done");
  run->add_option("--net-ns", args->net_ns,
                  "Run in this network namespace: a rank network's NAME (/run/netns/NAME) or a "
                  "namespace file's absolute path (docs/distributed.md)");
  run->add_option("--rank-address", args->rank_address,
                  "With --net-ns NAME: make the rank network NAME with this IPv4 address first "
                  "(kept when it exists with it)");
  run->add_option("command", args->command, "The command and its arguments, after --")->required();
  run->callback([args, exit_code] { *exit_code = RunWorkload(*args); });

  auto resize = std::make_shared<ResizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "resize", "Change the GPU-memory quota of a job started by paladin run, while it runs");
  cmd->add_option("job", resize->job, "Job name or the host pid of its root")->required();
  cmd->add_option("--gpu-mem", resize->gpu_mem, "The new quota per GPU, e.g. 12GiB")->required();
  cmd->add_option("--gpu-mem-max", resize->gpu_mem_max, "A new ceiling for on-demand growth");
  cmd->callback([resize, exit_code] { *exit_code = ResizeJob(*resize); });
}

}  // namespace paladin::cli
