#include "gpu_driver.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "paladin/quota/launch.h"

namespace paladin::ckpt {

namespace fs = std::filesystem;

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

void ResumeGpu(const GpuCheckpointer& gpu, const std::vector<pid_t>& pids) {
  (void)ForEachProcessAtOnce(pids, [&gpu](pid_t pid) {
    StatusOr<CUprocessState> state = gpu.State(pid);
    if (!state.ok()) return Status::Ok();
    if (*state == CU_PROCESS_STATE_CHECKPOINTED) (void)gpu.Restore(pid, {});
    (void)gpu.Unlock(pid);
    return Status::Ok();
  });
}

}  // namespace paladin::ckpt
