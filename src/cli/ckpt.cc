// `paladin checkpoint`, `paladin restore`, `paladin image inspect|verify` and `paladin doctor`.
#include <dlfcn.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "commands.h"
#include "fleet.h"
#include "paladin/base/cgroup.h"
#include "paladin/base/size.h"
#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/criu.h"
#include "paladin/ckpt/image.h"
#include "paladin/ckpt/rank_net.h"
#include "paladin/ckpt/workload.h"
#include "paladin/gpu/cuda_api.h"
#include "paladin/gpu/nvml.h"
#include "paladin/quota/launch.h"
#include "paladin/supervise/supervisor.h"

namespace paladin::cli {
namespace {

// Whether the note about CRIU and CAP_SYS_RESOURCE was said (once per process); `paladin doctor`
// shows it as a line of its own instead.
bool g_rlimit_note_said = false;

}  // namespace

void Say(const char* command, const std::string& line) {
  std::fprintf(stderr, "paladin %s: %s\n", command, line.c_str());
}

bool GpuMapFlag(const char* command, const std::string& text,
                std::vector<std::pair<std::string, std::string>>* map) {
  if (text.empty()) return true;
  StatusOr<std::vector<std::pair<std::string, std::string>>> parsed = ckpt::ParseGpuMap(text);
  if (!parsed.ok()) {
    Say(command, parsed.status().message());
    return false;
  }
  *map = *parsed;
  return true;
}

StatusOr<ckpt::Criu> ReadyCriu() {
  StatusOr<ckpt::Criu> criu = ckpt::LocateCriu();
  if (!criu.ok()) return criu.status();
  if (!criu->rlimit_note.empty() && !g_rlimit_note_said) {
    Say("criu", criu->rlimit_note);
    g_rlimit_note_said = true;
  }
  std::error_code ec;
  std::filesystem::create_directories(ckpt::RunBase(), ec);
  Status probed = ckpt::ProbeBreakpoints(&*criu, ckpt::RunBase());
  if (!probed.ok()) return probed;
  return criu;
}

namespace {

struct CheckpointArgs {
  std::string job;
  std::string out;
  bool leave_running = false;
  bool leave_stopped = false;
  int pre_dumps = 0;
  double timeout_s = 600;
  FleetFlags fleet;  // a server's job (j-NNNNNN) is checkpointed through the server
};

int RunCheckpoint(const CheckpointArgs& a) {
  StatusOr<ckpt::JobRecord> job = ckpt::FindJob(a.job);
  if (!job.ok()) {
    Say("checkpoint", job.status().message());
    return 1;
  }
  if (job->state != ckpt::RunState::kRunning && job->state != ckpt::RunState::kFrozen) {
    Say("checkpoint", "job " + job->name + " is " + std::string(ckpt::RunStateName(job->state)) +
                          (job->image.empty() ? "" : " (image " + job->image + ")"));
    return 1;
  }
  StatusOr<ckpt::Criu> criu = ReadyCriu();
  if (!criu.ok()) {
    Say("checkpoint", criu.status().message());
    return 1;
  }
  ckpt::CheckpointOptions options;
  options.after = a.leave_running   ? ckpt::CheckpointOptions::After::kLeaveRunning
                  : a.leave_stopped ? ckpt::CheckpointOptions::After::kLeaveStopped
                                    : ckpt::CheckpointOptions::After::kKill;
  options.pre_dumps = a.pre_dumps;
  options.timeout_s = a.timeout_s;
  StatusOr<ckpt::PhaseTimes> times = ckpt::CheckpointJob(
      *criu, &*job, a.out, options, [](const std::string& line) { Say("checkpoint", line); });
  if (!times.ok()) {
    Say("checkpoint", times.status().message() + "; the job keeps running");
    return 1;
  }
  const char* after = a.leave_running   ? "left running"
                      : a.leave_stopped ? "left stopped"
                                        : "stopped";
  std::printf("checkpointed %s (pid %lld) to %s: %s, %s; job %s\n", job->name.c_str(),
              static_cast<long long>(job->pid), job->image.c_str(),
              base::FormatSize(times->image_bytes).c_str(), times->Describe().c_str(), after);
  return 0;
}

struct RestoreArgs {
  std::string dir;
  std::string gpu_map;
  std::string net_ns;
  double timeout_s = 600;
};

// --net-ns NAME|PATH for an image of a job in a network of its own: the namespace file to restore
// into. A rank network (/run/netns/NAME) that is missing is made with the image's address.
StatusOr<std::string> RestoreNetwork(const RestoreArgs& a) {
  if (!a.net_ns.empty() && a.net_ns.find('/') == std::string::npos) {
    PALADIN_RETURN_IF_ERROR(ckpt::CheckRankNetName(a.net_ns));
  } else if (!a.net_ns.empty() && a.net_ns[0] != '/') {
    return InvalidArgument("--net-ns " + a.net_ns + ": a NAME or an absolute path");
  }
  const std::string given = a.net_ns.find('/') == std::string::npos && !a.net_ns.empty()
                                ? ckpt::RankNetPath(a.net_ns)
                                : a.net_ns;
  StatusOr<ckpt::Manifest> m = ckpt::ReadManifest(a.dir);
  if (!m.ok() || m->net_ns.empty()) return given;  // RestoreJob says what is wrong
  const std::string path = given.empty() ? m->net_ns : given;
  const std::string name = ckpt::RankNetNameOf(path);
  std::error_code ec;
  if (name.empty() || m->net_address.empty() || std::filesystem::exists(path, ec)) return given;
  PALADIN_RETURN_IF_ERROR(ckpt::CreateRankNet({name, m->net_address}));
  Say("restore", "made rank network " + name + " with the job's address " + m->net_address);
  return given;
}

int RunRestore(const RestoreArgs& a) {
  supervise::RestoreSpec spec;
  spec.image = a.dir;
  spec.options.timeout_s = a.timeout_s;
  StatusOr<std::string> net_ns = RestoreNetwork(a);
  if (!net_ns.ok()) {
    Say("restore", net_ns.status().message());
    return net_ns.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  spec.options.net_ns = *net_ns;
  if (!GpuMapFlag("restore", a.gpu_map, &spec.options.gpu_map)) return 2;
  StatusOr<ckpt::Criu> criu = ReadyCriu();
  if (!criu.ok()) {
    Say("restore", criu.status().message());
    return 1;
  }
  ckpt::PhaseTimes times;
  StatusOr<ckpt::JobRecord> job = supervise::Restore(
      *criu, spec, [](const std::string& line) { Say("restore", line); }, &times);
  if (!job.ok()) {
    Say("restore", job.status().message());
    return 1;
  }
  // Nothing of Paladin's waits for this job: a watcher removes its group when it ends.
  if (!job->cgroup.empty()) {
    Status watched =
        base::Cgroup::Existing(job->cgroup).RemoveWhenGone(static_cast<pid_t>(job->pid));
    if (!watched.ok())
      Say("restore", "warning: the job's cgroup stays when it ends: " + watched.message());
  }
  std::printf("restored %s as pid %lld: %s; logs in %s\n", job->name.c_str(),
              static_cast<long long>(job->pid), times.Describe().c_str(), job->run_dir.c_str());
  return 0;
}

int RunFreeze(const std::string& name, bool freeze) {
  const char* command = freeze ? "freeze" : "thaw";
  StatusOr<ckpt::JobRecord> job = ckpt::FindJob(name);
  if (!job.ok()) {
    Say(command, job.status().message());
    return 1;
  }
  Status s = freeze ? ckpt::FreezeJob(&*job) : ckpt::ThawJob(&*job);
  if (!s.ok()) {
    Say(command, s.message());
    return 1;
  }
  std::printf("%s %s (pid %lld)\n", freeze ? "froze" : "thawed", job->name.c_str(),
              static_cast<long long>(job->pid));
  return 0;
}

int RunInspect(const std::string& dir) {
  StatusOr<ckpt::Manifest> m = ckpt::ReadManifest(dir);
  if (!m.ok()) {
    Say("image inspect", m.status().message());
    return 1;
  }
  std::printf("%s", ckpt::DescribeManifest(*m).c_str());
  return 0;
}

int RunVerify(const std::string& dir) {
  StatusOr<ckpt::Criu> criu = ckpt::LocateCriu();
  StatusOr<ckpt::VerifyReport> report = ckpt::VerifyImage(dir, criu.ok() ? criu->version : "");
  if (!report.ok()) {
    Say("image verify", dir + ": " + report.status().message());
    return 1;
  }
  std::printf("%s: OK, %d files, %s verified\n", dir.c_str(), report->files_checked,
              base::FormatSize(report->bytes_checked).c_str());
  return 0;
}

// One line per check: OK, or what is missing and how to fix it.
int RunDoctor() {
  int problems = 0;
  auto line = [&](bool ok, const std::string& what, const std::string& detail) {
    std::printf("%-8s %-12s %s\n", ok ? "OK" : "MISSING", what.c_str(), detail.c_str());
    problems += ok ? 0 : 1;
  };
  auto note = [](const std::string& what, const std::string& detail) {
    std::printf("%-8s %-12s %s\n", "NOTE", what.c_str(), detail.c_str());
  };
  utsname u{};
  uname(&u);
  line(true, "kernel", std::string(u.sysname) + " " + u.release + " " + u.machine);
  g_rlimit_note_said = true;  // a line of its own below
  StatusOr<ckpt::Criu> criu = ReadyCriu();
  if (criu.ok()) {
    line(true, "criu",
         criu->version + " at " + criu->path +
             (criu->no_breakpoints ? " (this kernel needs CRIU_FAULT=130: set "
                                     "automatically)"
                                   : ""));
    if (geteuid() == 0) {
      // CRIU dumps a job that runs as another user (the node agent's) only if it can read its
      // resource limits.
      if (criu->rlimit_note.empty()) {
        line(true, "rlimits", "CAP_SYS_RESOURCE: CRIU reads other users' resource limits");
      } else {
        line(criu->dumps_other_users, "rlimits",
             criu->rlimit_note + (criu->dumps_other_users
                                      ? ""
                                      : "\n                      fix: install Paladin "
                                        "with libpaladin-criu-rlimit.so"));
      }
      StatusOr<std::string> init = ckpt::FindWorkloadInit();
      line(init.ok(), "init",
           init.ok() ? *init + " (the root of jobs that run as another user)"
                     : init.status().message() +
                           ": jobs that run as another user cannot be checkpointed");
    }
    // Asked of CRIU itself (a listening TCP and a UDP socket dumped and restored), not read off
    // its version: what matters is what it can do on this kernel.
    Status probed = ckpt::ProbeInetSockets(&*criu, ckpt::RunBase());
    if (!probed.ok()) {
      line(false, "sockets", "cannot probe CRIU for inet sockets: " + probed.message());
    } else if (criu->inet_sockets) {
      line(true, "sockets",
           "inet sockets can be dumped on this kernel (CRIU " + criu->version +
               " dumped and restored a listening TCP and a UDP socket); TCP held still during "
               "dumps by " +
               (criu->network_lock == "nftables" ? std::string("an nftables lock")
                                                 : std::string("nothing (no nftables here)")));
    } else {
      line(false, "sockets",
           "CRIU " + criu->version + " cannot dump inet sockets on this kernel: " +
               criu->inet_error + "\n                      fix: bash scripts/criu.sh (CRIU 4.2)");
    }
    // Optional: `paladin migrate --lazy` needs it, nothing else does.
    StatusOr<ckpt::Criu> lazy = ckpt::LazyCriu(*criu);
    note("post-copy",
         lazy.ok() ? "available: " + lazy->path + " (CRIU " + lazy->version +
                         ", Paladin's patches " + lazy->lazy_patches + "): paladin migrate --lazy"
                   : "unavailable (paladin migrate --lazy is refused): " + lazy.status().message());
    if (!criu->dirty_tracking) {
      note("pre-dumps",
           "unavailable: the kernel does not track dirty memory "
           "(CONFIG_MEM_SOFT_DIRTY); checkpoints dump in one pass");
    }
  } else {
    line(false, "criu",
         criu.status().message() + "\n                      fix: bash scripts/criu.sh");
  }
  const bool root = geteuid() == 0;
  line(root, "namespaces",
       root ? "PID namespaces available (running as root)"
            : "creating PID namespaces and restoring with CRIU need root; fix: run as root");
  const std::string cgroups = base::Cgroup::Version();
  line(cgroups != "none", "cgroups",
       cgroups == "none" ? "no hierarchy at /sys/fs/cgroup; fix: mount cgroup2 there"
                         : cgroups + (root ? "" : " (creating groups needs root or delegation)"));
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda != nullptr) {
    auto version = reinterpret_cast<FnCuDriverGetVersion>(dlsym(cuda, "cuDriverGetVersion"));
    int v = 0;
    if (version != nullptr) version(&v);
    const bool checkpoint = dlsym(cuda, "cuCheckpointProcessCheckpoint") != nullptr;
    line(
        true, "cuda driver",
        "API " + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) +
            (checkpoint ? ", checkpoint API present" : ", no checkpoint API (driver 550+ needed)"));
  } else {
    note("cuda driver", "none (no NVIDIA driver): GPU workloads use the emulated GPU");
  }
  StatusOr<std::unique_ptr<gpu::Nvml>> nvml = gpu::Nvml::Load("libnvidia-ml.so.1");
  if (nvml.ok()) {
    StatusOr<std::vector<gpu::GpuInfo>> gpus = (*nvml)->Gpus();
    line(true, "nvml",
         "driver " + (*nvml)->driver_version() + ", " +
             std::to_string(gpus.ok() ? gpus->size() : 0) + " GPU(s)");
    // What the node agent's health watcher would register (docs/agent.md, Health).
    std::vector<std::string> uuids;
    for (const gpu::GpuInfo& g : gpus.ok() ? *gpus : std::vector<gpu::GpuInfo>{}) {
      uuids.push_back(g.uuid);
    }
    StatusOr<std::vector<std::string>> watched = (*nvml)->WatchHealth(uuids);
    if (!watched.ok()) {
      note("gpu health", "events unavailable (" + watched.status().message() +
                             "): a GPU fault does not mark the GPU unhealthy");
    }
    for (const std::string& w : watched.ok() ? *watched : std::vector<std::string>{}) {
      line(true, "gpu health", w);
    }
  } else {
    note("nvml", "none: " + nvml.status().message());
  }
  StatusOr<quota::Libraries> libs = quota::FindLibraries();
  line(libs.ok(), "interposer",
       libs.ok() ? libs->dir + " (libpaladin-cuda.so, libpaladin-nvml.so, libpaladin-emucuda.so)"
                 : libs.status().message());
  std::printf("%s\n", problems == 0 ? "everything Paladin needs is here"
                                    : (std::to_string(problems) + " problem(s)").c_str());
  return problems == 0 ? 0 : 1;
}

}  // namespace

void RegisterCheckpoint(CLI::App& app, int* exit_code) {
  auto c = std::make_shared<CheckpointArgs>();
  CLI::App* checkpoint =
      app.add_subcommand("checkpoint",
                         "Checkpoint a job started by paladin run (CPU state with CRIU, GPU state "
                         "through the driver) into an image directory");
  checkpoint->add_option("job", c->job, "Job name or the host pid of its root")->required();
  checkpoint->add_option("--out", c->out,
                         "Image directory to create (a local job; a server's job j-NNNNNN goes "
                         "to the server's checkpoint store)");
  AddFleetFlags(checkpoint, &c->fleet);
  auto* running =
      checkpoint->add_flag("--leave-running", c->leave_running, "Let the job continue after");
  checkpoint->add_flag("--leave-stopped", c->leave_stopped, "Leave the job stopped after")
      ->excludes(running);
  checkpoint
      ->add_option("--pre-dump", c->pre_dumps,
                   "Memory passes while the job runs, to shorten the final pause")
      ->check(CLI::Range(0, 10));
  checkpoint->add_option("--timeout", c->timeout_s, "Seconds allowed for each CRIU call")
      ->capture_default_str();
  checkpoint->callback([c, exit_code] {
    if (c->out.empty() && LooksLikeFleetJob(c->job) && FleetServerConfigured(c->fleet)) {
      *exit_code = FleetCheckpoint(c->job, c->fleet);
      return;
    }
    if (c->out.empty()) {
      Say("checkpoint", "--out DIR is required for a local job");
      *exit_code = 2;
      return;
    }
    *exit_code = RunCheckpoint(*c);
  });

  auto r = std::make_shared<RestoreArgs>();
  CLI::App* restore = app.add_subcommand(
      "restore", "Verify an image and resume the job it holds (its logs come back with it)");
  restore->add_option("dir", r->dir, "Image directory")->required();
  restore->add_option("--gpu-map", r->gpu_map, "Restore onto other GPUs: OLD-UUID=NEW-UUID[,...]");
  restore->add_option("--net-ns", r->net_ns,
                      "For a job that ran in a network of its own (paladin run --net-ns): the "
                      "network namespace to restore it into, a rank network's NAME or a path "
                      "(default: the one it had; a missing rank network is made with the job's "
                      "address)");
  restore->add_option("--timeout", r->timeout_s, "Seconds allowed for each CRIU call")
      ->capture_default_str();
  restore->callback([r, exit_code] { *exit_code = RunRestore(*r); });

  auto frozen = std::make_shared<std::string>();
  CLI::App* freeze = app.add_subcommand(
      "freeze",
      "Stop every process of a job started by paladin run (a gang's coordinated cut: freeze "
      "every rank, then checkpoint each, then thaw those that go on)");
  freeze->add_option("job", *frozen, "Job name or the host pid of its root")->required();
  freeze->callback([frozen, exit_code] { *exit_code = RunFreeze(*frozen, true); });
  CLI::App* thaw = app.add_subcommand("thaw", "Let a frozen job run again");
  thaw->add_option("job", *frozen, "Job name or the host pid of its root")->required();
  thaw->callback([frozen, exit_code] { *exit_code = RunFreeze(*frozen, false); });

  CLI::App* image = app.add_subcommand("image", "Inspect or verify checkpoint images");
  image->require_subcommand(1);
  AddImageTransfer(image, exit_code);
  auto dir = std::make_shared<std::string>();
  CLI::App* inspect = image->add_subcommand("inspect", "Print an image's manifest");
  inspect->add_option("dir", *dir, "Image directory")->required();
  inspect->callback([dir, exit_code] { *exit_code = RunInspect(*dir); });
  CLI::App* verify = image->add_subcommand(
      "verify", "Check every file's size and digests and that this host can restore the image");
  verify->add_option("dir", *dir, "Image directory")->required();
  verify->callback([dir, exit_code] { *exit_code = RunVerify(*dir); });

  CLI::App* doctor = app.add_subcommand(
      "doctor",
      "Check what Paladin needs on this machine: CRIU, kernel, namespaces, cgroups, "
      "CUDA driver, NVML");
  doctor->callback([exit_code] { *exit_code = RunDoctor(); });

  RegisterRankNet(app, exit_code);
}

}  // namespace paladin::cli
