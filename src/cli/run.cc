// `paladin run`: runs one workload on this machine the way the node agent will, under the
// GPU-memory quota interposer, on the real driver or the emulated one.
#include <signal.h>
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
#include "paladin/gpu/nvml.h"
#include "paladin/quota/launch.h"
#include "paladin/quota/region.h"
#include "paladin/quota/usage.h"

namespace paladin::cli {
namespace {

struct RunArgs {
  std::string name;
  std::string gpu_mem;
  std::string gpu_mem_max;
  std::string emulated_gpus;
  std::string gpus;
  int compute_share = 0;
  std::string usage_log;
  double usage_every_s = 1.0;
  std::string run_dir;
  bool keep_run_dir = false;
  std::vector<std::string> command;
};

void Say(const std::string& line) { std::fprintf(stderr, "paladin run: %s\n", line.c_str()); }

std::atomic<pid_t> g_child{0};

void Forward(int signal) {
  const pid_t child = g_child.load();
  if (child > 0) kill(child, signal);
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

// MPS caps each client's share of the SMs; without it, compute is shared with no cap.
bool MpsRunning() {
  const char* pipe = getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string dir = pipe != nullptr ? pipe : "/tmp/nvidia-mps";
  return std::filesystem::exists(dir + "/control");
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
  void Start(pid_t root) {
    root_ = root;
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
    const quota::WorkloadUsage u = quota::SampleUsage(region_, nvml_, static_cast<uint32_t>(root_));
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
  std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Parses the size flags into region settings; an error names the flag and the value.
StatusOr<quota::RegionSettings> QuotaSettings(const RunArgs& a) {
  quota::RegionSettings s;
  if (!quota::ParseSize(a.gpu_mem, &s.quota_bytes) || s.quota_bytes == 0) {
    return InvalidArgument("--gpu-mem '" + a.gpu_mem +
                           "': not a size (expected e.g. 10GiB, 512MiB or a number of bytes)");
  }
  if (!a.gpu_mem_max.empty()) {
    if (!quota::ParseSize(a.gpu_mem_max, &s.ceiling_bytes)) {
      return InvalidArgument("--gpu-mem-max '" + a.gpu_mem_max +
                             "': not a size (expected e.g. 20GiB)");
    }
    if (s.ceiling_bytes < s.quota_bytes) {
      return InvalidArgument("--gpu-mem-max " + quota::FormatSize(s.ceiling_bytes) +
                             " is below --gpu-mem " + quota::FormatSize(s.quota_bytes));
    }
  }
  return s;
}

pid_t Spawn(const std::vector<std::string>& command,
            const std::vector<std::pair<std::string, std::string>>& env) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  for (const auto& [key, value] : env) setenv(key.c_str(), value.c_str(), 1);
  std::vector<char*> argv;
  argv.reserve(command.size() + 1);
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "paladin run: cannot run %s: %s\n", argv[0], strerror(errno));
  _exit(127);
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
    line += "; " + gpu::FormatGpuUuid(uuid) + " peak " + quota::FormatSize(region.peak(slot)) +
            " of " + quota::FormatSize(region.quota());
  }
  line += "; " + std::to_string(region.refusals()) + " allocation(s) refused past the quota";
  if (region.grows() > 0) line += "; quota grown " + std::to_string(region.grows()) + " time(s)";
  Say(line);
}

int RunWorkload(RunArgs args) {
  if (args.command.empty()) {
    Say("nothing to run: give the command after --, e.g. paladin run --gpu-mem 10GiB -- python "
        "train.py");
    return 2;
  }
  if (args.name.empty()) args.name = std::filesystem::path(args.command[0]).filename().string();
  if (args.compute_share < 0 || args.compute_share > 100) {
    Say("--compute-share " + std::to_string(args.compute_share) + ": expected a percentage, 1-100");
    return 2;
  }
  if (args.gpu_mem.empty()) {
    if (!args.gpu_mem_max.empty() || !args.emulated_gpus.empty()) {
      Say("--gpu-mem-max and --emulated-gpus need --gpu-mem");
      return 2;
    }
    // No GPU quota asked for: the workload runs as it is.
    g_child = Spawn(args.command, {});
    return WaitForChild(g_child);
  }
  StatusOr<quota::RegionSettings> settings = QuotaSettings(args);
  if (!settings.ok()) {
    Say(settings.status().message());
    return 2;
  }
  StatusOr<quota::Libraries> libs = quota::FindLibraries();
  if (!libs.ok()) {
    Say(libs.status().message());
    return 1;
  }
  const quota::DriverChoice driver = quota::ChooseDriver(*libs, args.emulated_gpus);
  if (driver.emulated) {
    // The launcher reads the emulated GPUs through the same library the workload uses.
    setenv("PALADIN_EMU_GPUS", driver.emulated_spec.c_str(), 1);
  }
  StatusOr<std::unique_ptr<gpu::Nvml>> nvml = gpu::Nvml::Load(driver.nvml_next);
  if (!nvml.ok()) {
    Say(nvml.status().message() + " (no usage figures from NVML; the quota cannot grow)");
  }
  const gpu::Nvml* gpus = nvml.ok() ? nvml->get() : nullptr;
  if (gpus != nullptr && driver.emulated) {
    StatusOr<std::vector<gpu::GpuInfo>> list = gpus->Gpus();
    if (list.ok() && list->empty()) {
      Say("--emulated-gpus '" + driver.emulated_spec + "' gives no GPU (see the line above)");
      return 2;
    }
  }
  const std::string run_dir = args.run_dir.empty() ? DefaultRunDir(args.name) : args.run_dir;
  std::unique_ptr<quota::Region> region;
  StatusOr<quota::WorkloadSetup> setup =
      quota::PrepareWorkload(run_dir, *libs, driver, *settings, &region);
  if (!setup.ok()) {
    Say(setup.status().message());
    return 1;
  }
  std::vector<std::pair<std::string, std::string>> env = setup->env;
  if (!args.gpus.empty()) env.emplace_back("CUDA_VISIBLE_DEVICES", args.gpus);
  std::string share = "compute is shared without a cap (no MPS control daemon)";
  if (MpsRunning()) {
    share = "MPS is running: compute share " +
            (args.compute_share > 0 ? std::to_string(args.compute_share) + "%" : "uncapped") +
            "; the workload cannot be checkpointed by the driver while it is an MPS client";
    if (args.compute_share > 0) {
      env.emplace_back("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(args.compute_share));
    }
  } else if (args.compute_share > 0) {
    share = "--compute-share needs NVIDIA MPS, which is not running: " + share;
  }
  std::string limit = quota::FormatSize(settings->quota_bytes) + " GPU-memory quota";
  if (settings->ceiling_bytes > settings->quota_bytes) {
    limit += " (grows on demand up to " + quota::FormatSize(settings->ceiling_bytes) + ")";
  }
  Say(args.name + ": " + limit + "; " + driver.reason +
      (driver.emulated ? " (" + driver.emulated_spec + ", emulated)" : "") + "; " + share);

  quota::QuotaGrower grower(region.get(), gpus, [](const std::string& line) { Say(line); });
  if (settings->ceiling_bytes > settings->quota_bytes) grower.Start();

  std::unique_ptr<UsageLog> log;
  FILE* log_file = nullptr;
  if (!args.usage_log.empty()) {
    log_file = std::fopen(args.usage_log.c_str(), "w");
    if (log_file == nullptr) {
      Say("cannot write --usage-log " + args.usage_log + ": " + strerror(errno));
    } else {
      log = std::make_unique<UsageLog>(log_file, *region, gpus, args.usage_every_s);
    }
  }
  struct sigaction forward {};
  forward.sa_handler = Forward;
  sigaction(SIGINT, &forward, nullptr);
  sigaction(SIGTERM, &forward, nullptr);
  sigaction(SIGHUP, &forward, nullptr);
  g_child = Spawn(args.command, env);
  if (log) log->Start(g_child);
  const int code = WaitForChild(g_child);
  if (log) log->Stop();
  if (log_file != nullptr) std::fclose(log_file);
  grower.Stop();
  Summarise(*region, args.name, code);
  region.reset();
  if (!args.keep_run_dir) {
    std::error_code ec;
    std::filesystem::remove_all(run_dir, ec);
  }
  return code;
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
                  "Use emulated GPUs, e.g. 1x80GiB or 2x40GiB (default when no GPU is found: "
                  "1x80GiB)");
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
  run->add_option("command", args->command, "The command and its arguments, after --")->required();
  run->callback([args, exit_code] { *exit_code = RunWorkload(*args); });
}

}  // namespace paladin::cli
