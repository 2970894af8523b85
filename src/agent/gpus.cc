// The node's GPUs: the real ones through NVML, or emulated GPUs private to this agent (their
// state file lives in its data directory, so their UUIDs are its own); NVML health events.
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "agent_impl.h"
#include "paladin/base/size.h"
#include "paladin/supervise/supervisor.h"

namespace paladin::agent {

namespace fs = std::filesystem;

Status Agent::DiscoverGpus() {
  StatusOr<quota::Libraries> libs = quota::FindLibraries();
  if (!libs.ok()) return libs.status();
  libs_ = *libs;
  // Set before anything loads the emulated driver (this process, its workloads, the driver's
  // checkpoint calls): every agent has GPUs of its own.
  const std::string state = EmuStatePath();
  setenv("PALADIN_EMU_STATE", state.c_str(), 1);
  driver_ = quota::ChooseDriver(libs_, options_.emulated_gpus);
  if (driver_.emulated) {
    setenv("PALADIN_EMU_GPUS", driver_.emulated_spec.c_str(), 1);
    if (options_.emulated_gpus.empty()) {
      Say("no NVIDIA GPU here (" + driver_.reason + "): using emulated GPUs " +
          driver_.emulated_spec);
    }
  } else {
    unsetenv("PALADIN_EMU_STATE");
  }
  StatusOr<std::unique_ptr<gpu::Nvml>> nvml = gpu::Nvml::Load(driver_.nvml_next);
  if (!nvml.ok()) return Internal("cannot read the GPUs: " + nvml.status().message());
  nvml_ = std::move(*nvml);
  StatusOr<std::vector<gpu::GpuInfo>> gpus = nvml_->Gpus();
  if (!gpus.ok()) return Internal("cannot list the GPUs: " + gpus.status().message());
  gpus_ = *gpus;
  if (!options_.gpus.empty()) {
    if (driver_.emulated) return InvalidArgument("--gpus selects real GPUs; these are emulated");
    std::vector<gpu::GpuInfo> chosen;
    for (int index : options_.gpus) {
      auto it = std::find_if(gpus_.begin(), gpus_.end(),
                             [index](const gpu::GpuInfo& g) { return g.index == index; });
      if (it == gpus_.end()) {
        return InvalidArgument("--gpus: this node has no GPU " + std::to_string(index) +
                               " (it has " + std::to_string(gpus_.size()) + ")");
      }
      chosen.push_back(*it);
    }
    gpus_ = chosen;
  }
  if (driver_.emulated) ShareEmulatedState();
  for (const gpu::GpuInfo& g : gpus_) {
    Say("GPU " + std::to_string(g.index) + ": " + g.name + " " + g.uuid + ", " +
        base::FormatSize(g.total_bytes) + (driver_.emulated ? " (emulated)" : ""));
  }
  if (gpus_.empty()) Say("warning: no GPU found; workloads run without one");
  return Status::Ok();
}

// The emulated driver's control folder (STATE.ctl) carries checkpoint requests by host pid. A
// restored workload still reads them where its first state file was (another agent's, on this
// host), so every agent's folder is a link to one host-wide folder, world-writable and sticky
// like /tmp: requests are per pid, which the host keeps unique.
//
// The state file itself is the emulated hardware (devices, event rings): the agent's, 0644, which
// jobs map read-only. Each CUDA process of a job counts its bytes in a usage file of its own user
// in the sticky folder next to it (docs/agent.md, "What is isolated").
void Agent::ShareEmulatedState() const {
  const std::string state = EmuStatePath();
  chmod(state.c_str(), 0644);  // a file of an earlier version was 0666
  supervise::ShareUsageDir(state);
  mkdir(supervise::kHostControlDir, 01777);
  chmod(supervise::kHostControlDir, 01777);
  // This agent's own folder, unlike one an image names, is replaced even with contents.
  std::error_code ec;
  const std::string own = state + ".ctl";
  if (!fs::is_symlink(fs::symlink_status(own, ec))) fs::remove_all(own, ec);
  supervise::LinkControlDir(state);
  SweepControlDir();
}

// A process killed outright leaves its `<pid>.state` (and `.req`) behind; nothing reads the files
// of a pid that no longer exists (a restored process writes under its new pid).
void Agent::SweepControlDir() const {
  std::error_code ec;
  size_t removed = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(supervise::kHostControlDir, ec)) {
    const std::string name = e.path().filename().string();
    const size_t digits = name.find_first_not_of("0123456789");
    if (digits == 0 || digits == std::string::npos) continue;
    const std::string kind = name.substr(digits);
    if (kind != ".state" && kind != ".req") continue;
    if (fs::exists("/proc/" + name.substr(0, digits), ec)) continue;
    if (fs::remove(e.path(), ec)) ++removed;
  }
  if (removed > 0) {
    Say("removed " + std::to_string(removed) +
        " emulated-driver control file(s) of exited processes");
  }
}

void Agent::StartHealthWatch() {
  std::vector<std::string> uuids;
  for (const gpu::GpuInfo& g : gpus_) uuids.push_back(g.uuid);
  if (uuids.empty()) return;
  StatusOr<std::vector<std::string>> watched = nvml_->WatchHealth(uuids);
  if (!watched.ok()) {
    health_watch_error_ = watched.status().message();
    Say("warning: GPU health events are not watched (" + health_watch_error_ +
        "): a GPU fault does not mark its GPU unhealthy");
    return;
  }
  for (const std::string& line : *watched) Say("watching health events of " + line);
  health_thread_ = std::thread([this] { WatchHealth(); });
}

void Agent::StopHealthWatch() {
  health_stop_ = true;
  if (health_thread_.joinable()) health_thread_.join();
}

void Agent::WatchHealth() {
  constexpr unsigned int kWaitMs = 200;
  while (!health_stop_.load() && !stop_->load()) {
    StatusOr<std::optional<gpu::HealthEvent>> event = nvml_->WaitHealthEvent(kWaitMs);
    if (!event.ok()) {
      Say("warning: waiting for GPU health events: " + event.status().message());
      std::this_thread::sleep_for(std::chrono::seconds(1));
      continue;
    }
    if (!event->has_value()) continue;
    OnHealthEvent(**event);
    // A lost GPU keeps answering GPU_IS_LOST at once: look again a second later, not in a spin.
    if ((*event)->gpu_lost) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

void Agent::OnHealthEvent(const gpu::HealthEvent& event) {
  const gpu::HealthVerdict verdict = gpu::JudgeHealthEvent(event);
  std::vector<int> affected;
  if (!event.uuid.empty()) {
    if (int index = GpuIndex(event.uuid); index >= 0) affected.push_back(index);
  } else if (event.gpu_lost) {
    // NVML did not say which: the lost ones are those it can no longer read.
    for (const gpu::GpuInfo& g : gpus_) {
      if (!nvml_->Probe(g.uuid).ok()) affected.push_back(g.index);
    }
  }
  std::lock_guard<std::mutex> lock(gpu_mu_);
  for (int index : affected) {
    if (!verdict.unhealthy) {
      Say("GPU " + std::to_string(index) + ": " + verdict.fault + " (the GPU stays healthy)");
    } else if (faults_.emplace(index, verdict.fault).second) {
      Say("GPU " + std::to_string(index) + " unhealthy: " + verdict.fault);
    }
  }
  ++health_events_;
  health_cv_.notify_all();
}

int Agent::GpuIndex(const std::string& uuid) const {
  for (const gpu::GpuInfo& g : gpus_) {
    if (strcasecmp(g.uuid.c_str(), uuid.c_str()) == 0) return g.index;
  }
  return -1;
}

std::string Agent::GpuUuid(int index) const {
  for (const gpu::GpuInfo& g : gpus_) {
    if (g.index == index) return g.uuid;
  }
  return "";
}

std::vector<api::RegisteredGpu> Agent::GpusForRegister() const {
  std::lock_guard<std::mutex> lock(gpu_mu_);
  std::vector<api::RegisteredGpu> out;
  for (const gpu::GpuInfo& g : gpus_) {
    api::RegisteredGpu r;
    r.index = g.index;
    r.uuid = g.uuid;
    r.model = g.name;
    r.memory_bytes = static_cast<int64_t>(g.total_bytes);
    r.emulated = driver_.emulated;
    r.healthy = faults_.count(g.index) == 0;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<api::GpuReport> Agent::GpusForHeartbeat() const {
  StatusOr<std::vector<gpu::GpuInfo>> now = nvml_->Gpus();
  std::lock_guard<std::mutex> lock(gpu_mu_);
  std::vector<api::GpuReport> out;
  for (const gpu::GpuInfo& g : gpus_) {
    uint64_t used = 0;
    if (now.ok()) {
      for (const gpu::GpuInfo& n : *now) used = n.uuid == g.uuid ? n.used_bytes : used;
    }
    auto fault = faults_.find(g.index);
    api::GpuReport r;
    r.index = g.index;
    r.healthy = fault == faults_.end();
    r.fault = fault == faults_.end() ? "" : fault->second;
    r.used_bytes = static_cast<int64_t>(used);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace paladin::agent
