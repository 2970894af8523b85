#include "job_manifest.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>

#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/fence.h"
#include "paladin/ckpt/rank_net.h"
#include "paladin/gpu/nvml.h"
#include "paladin/quota/launch.h"

namespace paladin::ckpt {

namespace fs = std::filesystem;

namespace {

std::string Hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
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

Manifest DescribeJob(const JobRecord& job, const Criu& criu, int64_t root_pid) {
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
  m.net_ns = job.net_ns;
  if (const std::string name = RankNetNameOf(job.net_ns); !name.empty()) {
    StatusOr<std::string> address = RankNetAddress(name);
    if (address.ok()) m.net_address = *address;
  }
  return m;
}

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

}  // namespace paladin::ckpt
