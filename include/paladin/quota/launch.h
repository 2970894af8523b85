// Starting a workload under the quota interposer: what `paladin run` does now and the node agent
// will do. The launcher creates the workload's accounting region, a private library directory
// in which libcuda.so.1 and libnvidia-ml.so.1 are the interposers and the names behind them are
// the real (or emulated) driver and NVML, and the environment that points the workload there.
// See docs/quota.md.
#ifndef PALADIN_QUOTA_LAUNCH_H_
#define PALADIN_QUOTA_LAUNCH_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/gpu/nvml.h"
#include "paladin/quota/region.h"

namespace paladin::quota {

// Where Paladin's preloaded libraries are: $PALADIN_LIB_DIR, else next to the running executable
// (a build tree), else <prefix>/lib/paladin (an install).
struct Libraries {
  std::string dir;
  std::string cuda_shim;  // libpaladin-cuda.so
  std::string nvml_shim;  // libpaladin-nvml.so
  std::string emucuda;    // libpaladin-emucuda.so
};
StatusOr<Libraries> FindLibraries();

// Which driver the workload gets behind the interposer.
struct DriverChoice {
  bool emulated = false;
  std::string cuda_next;      // path of the driver library
  std::string nvml_next;      // path of the NVML library
  std::string emulated_spec;  // PALADIN_EMU_GPUS when emulated
  std::string reason;         // why this driver, for the user
};
// `emulated_spec` non-empty forces the emulated driver with those GPUs. Otherwise the real
// driver when it loads and has a GPU ($PALADIN_CUDA_DRIVER names another driver library), else
// the emulated driver with one 80 GiB GPU.
DriverChoice ChooseDriver(const Libraries& libs, const std::string& emulated_spec);

// The emulated GPUs' shared state file: $PALADIN_EMU_STATE, else /dev/shm/paladin-emu-UID.state.
// Every process using the same file shares the same emulated GPUs.
std::string EmulatedStatePath();

struct WorkloadSetup {
  std::string run_dir;
  std::string lib_dir;
  std::string region_path;
  std::vector<std::pair<std::string, std::string>> env;  // to set in the workload
};

// Creates run_dir (which must not exist), its lib/ directory and the accounting region, and
// returns the environment for the workload. The caller removes run_dir when the workload ends.
// With settings.quota_bytes 0 there is no quota: no region, no interposer, and libcuda.so.1 is
// the chosen driver itself (how an emulated GPU is used without a quota).
StatusOr<WorkloadSetup> PrepareWorkload(const std::string& run_dir, const Libraries& libs,
                                        const DriverChoice& driver, const RegionSettings& settings,
                                        std::unique_ptr<Region>* region);

// A folder holding copies of Paladin's interposers and the emulated driver, named as
// PrepareWorkload names them (libcuda.so.1 and libnvidia-ml.so.1 the interposers, the
// libpaladin-*-next.so.1 names the emulated driver) with relative links only, so that it works
// wherever it is mounted: what a Kubernetes node gives its pods through a hostPath volume
// (docs/kubernetes.md). Replaces what an earlier call left there.
Status PrepareSharedLibraryDir(const std::string& dir, const Libraries& libs);

// How far to grow a quota on demand: to cover `shortfall` in steps of `step`, never above the
// ceiling, and only if the GPU has that much free. Returns the new quota, or `quota` unchanged.
uint64_t GrownQuota(uint64_t quota, uint64_t ceiling, uint64_t shortfall, uint64_t gpu_free,
                    uint64_t step);

// Answers the workload's growth requests while it runs (a thread of the launcher).
class QuotaGrower {
 public:
  using Log = std::function<void(const std::string&)>;
  // `nvml` may be null (then growth is refused: the GPU's free memory is unknown).
  QuotaGrower(Region* region, const gpu::Nvml* nvml, Log log);
  ~QuotaGrower();
  QuotaGrower(const QuotaGrower&) = delete;
  QuotaGrower& operator=(const QuotaGrower&) = delete;

  void Start();
  void Stop();

 private:
  void Loop();
  void Answer(uint64_t shortfall, uint32_t ticket);

  Region* region_;
  const gpu::Nvml* nvml_;
  Log log_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace paladin::quota

#endif  // PALADIN_QUOTA_LAUNCH_H_
