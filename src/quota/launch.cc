#include "paladin/quota/launch.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "paladin/base/size.h"
#include "paladin/gpu/cuda_api.h"

namespace paladin::quota {

namespace fs = std::filesystem;

namespace {

bool IsFile(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The file a library name resolves to, loading it (and keeping it loaded) to find out.
std::string LoadedPath(void* handle) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_name == nullptr) {
    return "";
  }
  std::error_code ec;
  fs::path resolved = fs::canonical(map->l_name, ec);
  return ec ? std::string(map->l_name) : resolved.string();
}

// Loads `library` and checks it drives at least one GPU. Returns "" and sets *why otherwise.
std::string ProbeRealDriver(const std::string& library, std::string* why) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    *why = "no NVIDIA driver (" + std::string(dlerror()) + ")";
    return "";
  }
  auto init = reinterpret_cast<FnCuInit>(dlsym(handle, "cuInit"));
  auto count = reinterpret_cast<FnCuDeviceGetCount>(dlsym(handle, "cuDeviceGetCount"));
  int devices = 0;
  CUresult r = init != nullptr ? init(0) : CUDA_ERROR_NOT_FOUND;
  if (r == CUDA_SUCCESS && count != nullptr) r = count(&devices);
  if (r != CUDA_SUCCESS || devices == 0) {
    *why = "the NVIDIA driver sees no GPU (cuInit/cuDeviceGetCount: " + std::to_string(r) + ")";
    return "";
  }
  return LoadedPath(handle);
}

Status Symlink(const std::string& target, const std::string& link) {
  if (symlink(target.c_str(), link.c_str()) != 0) {
    return IoError("cannot link " + link + " -> " + target + ": " + strerror(errno));
  }
  return Status::Ok();
}

std::string WithPrefix(const std::string& first, const char* existing) {
  if (existing == nullptr || existing[0] == '\0') return first;
  return first + ":" + existing;
}

}  // namespace

StatusOr<Libraries> FindLibraries() {
  std::vector<std::string> candidates;
  if (const char* dir = getenv("PALADIN_LIB_DIR")) candidates.emplace_back(dir);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path().string());
    candidates.push_back((exe.parent_path().parent_path() / "lib" / "paladin").string());
  }
  for (const std::string& dir : candidates) {
    Libraries libs{dir, dir + "/libpaladin-cuda.so", dir + "/libpaladin-nvml.so",
                   dir + "/libpaladin-emucuda.so"};
    if (IsFile(libs.cuda_shim) && IsFile(libs.nvml_shim) && IsFile(libs.emucuda)) return libs;
  }
  std::string searched;
  for (const std::string& dir : candidates) searched += (searched.empty() ? "" : ", ") + dir;
  return NotFound(
      "cannot find libpaladin-cuda.so, libpaladin-nvml.so and libpaladin-emucuda.so (looked in " +
      searched + "; set PALADIN_LIB_DIR)");
}

DriverChoice ChooseDriver(const Libraries& libs, const std::string& emulated_spec) {
  DriverChoice choice;
  if (emulated_spec.empty()) {
    const char* override_driver = getenv("PALADIN_CUDA_DRIVER");
    const std::string library = override_driver != nullptr ? override_driver : "libcuda.so.1";
    std::string why;
    std::string path = ProbeRealDriver(library, &why);
    if (!path.empty() && path != fs::weakly_canonical(libs.cuda_shim).string()) {
      choice.cuda_next = path;
      void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
      choice.nvml_next = nvml != nullptr ? LoadedPath(nvml) : "";
      choice.reason = "NVIDIA driver " + path;
      if (choice.nvml_next.empty()) choice.nvml_next = libs.emucuda;  // never reached in practice
      return choice;
    }
    choice.reason = why + "; using an emulated GPU";
  } else {
    choice.reason = "emulated GPUs requested";
  }
  choice.emulated = true;
  choice.emulated_spec = emulated_spec.empty() ? "1x80GiB" : emulated_spec;
  choice.cuda_next = libs.emucuda;
  choice.nvml_next = libs.emucuda;
  return choice;
}

namespace {

// The emulated driver's devices and its shared state file, named in the workload's own
// environment: a workload inherits nothing else of its launcher's (a node agent's jobs do not).
void AddEmulatedDriverEnv(const DriverChoice& driver,
                          std::vector<std::pair<std::string, std::string>>* env) {
  if (!driver.emulated) return;
  env->emplace_back("PALADIN_EMU_GPUS", driver.emulated_spec);
  env->emplace_back("PALADIN_EMU_STATE", EmulatedStatePath());
}

}  // namespace

StatusOr<WorkloadSetup> PrepareWorkload(const std::string& run_dir, const Libraries& libs,
                                        const DriverChoice& driver, const RegionSettings& settings,
                                        std::unique_ptr<Region>* region) {
  WorkloadSetup setup;
  setup.run_dir = run_dir;
  setup.lib_dir = run_dir + "/lib";
  setup.region_path = run_dir + "/quota.region";
  std::error_code ec;
  fs::create_directories(fs::path(run_dir).parent_path(), ec);
  if (mkdir(run_dir.c_str(), 0700) != 0) {
    return IoError("cannot create run directory " + run_dir + ": " + strerror(errno));
  }
  if (mkdir(setup.lib_dir.c_str(), 0700) != 0) {
    return IoError("cannot create " + setup.lib_dir + ": " + strerror(errno));
  }
  if (settings.quota_bytes == 0) {
    PALADIN_RETURN_IF_ERROR(Symlink(driver.cuda_next, setup.lib_dir + "/libcuda.so.1"));
    PALADIN_RETURN_IF_ERROR(Symlink(driver.cuda_next, setup.lib_dir + "/libcuda.so"));
    PALADIN_RETURN_IF_ERROR(Symlink(driver.nvml_next, setup.lib_dir + "/libnvidia-ml.so.1"));
    setup.env.emplace_back("LD_LIBRARY_PATH", WithPrefix(setup.lib_dir, getenv("LD_LIBRARY_PATH")));
    AddEmulatedDriverEnv(driver, &setup.env);
    return setup;
  }
  const std::string cuda_shim = fs::canonical(libs.cuda_shim, ec).string();
  const std::string nvml_shim = fs::canonical(libs.nvml_shim, ec).string();
  PALADIN_RETURN_IF_ERROR(Symlink(cuda_shim, setup.lib_dir + "/libcuda.so.1"));
  PALADIN_RETURN_IF_ERROR(Symlink(cuda_shim, setup.lib_dir + "/libcuda.so"));
  PALADIN_RETURN_IF_ERROR(Symlink(nvml_shim, setup.lib_dir + "/libnvidia-ml.so.1"));
  PALADIN_RETURN_IF_ERROR(Symlink(driver.cuda_next, setup.lib_dir + "/libpaladin-cuda-next.so.1"));
  PALADIN_RETURN_IF_ERROR(Symlink(driver.nvml_next, setup.lib_dir + "/libpaladin-nvml-next.so.1"));

  std::string error;
  *region = Region::Create(setup.region_path, settings, &error);
  if (*region == nullptr) return IoError(error);

  setup.env.emplace_back("LD_PRELOAD",
                         WithPrefix(setup.lib_dir + "/libcuda.so.1", getenv("LD_PRELOAD")));
  setup.env.emplace_back("LD_LIBRARY_PATH", WithPrefix(setup.lib_dir, getenv("LD_LIBRARY_PATH")));
  setup.env.emplace_back("PALADIN_QUOTA_REGION", setup.region_path);
  AddEmulatedDriverEnv(driver, &setup.env);
  return setup;
}

Status PrepareSharedLibraryDir(const std::string& dir, const Libraries& libs) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError("cannot create " + dir + ": " + ec.message());
  fs::permissions(dir, fs::perms(0755), ec);
  const std::pair<const std::string*, const char*> copies[] = {
      {&libs.cuda_shim, "libpaladin-cuda.so"},
      {&libs.nvml_shim, "libpaladin-nvml.so"},
      {&libs.emucuda, "libpaladin-emucuda.so"}};
  for (const auto& [from, name] : copies) {
    // Copied, then renamed over: a pod starting meanwhile maps either the old file or the new.
    const std::string to = dir + "/" + name;
    fs::copy_file(*from, to + ".new", fs::copy_options::overwrite_existing, ec);
    if (ec) return IoError("cannot copy " + *from + " to " + dir + ": " + ec.message());
    fs::permissions(to + ".new", fs::perms(0755), ec);
    fs::rename(to + ".new", to, ec);
    if (ec) return IoError("cannot write " + to + ": " + ec.message());
  }
  const std::pair<const char*, const char*> links[] = {
      {"libcuda.so.1", "libpaladin-cuda.so"},
      {"libcuda.so", "libpaladin-cuda.so"},
      {"libnvidia-ml.so.1", "libpaladin-nvml.so"},
      {"libpaladin-cuda-next.so.1", "libpaladin-emucuda.so"},
      {"libpaladin-nvml-next.so.1", "libpaladin-emucuda.so"}};
  for (const auto& [name, target] : links) {
    const std::string at = dir + "/" + name;
    fs::remove(at, ec);
    PALADIN_RETURN_IF_ERROR(Symlink(target, at));
  }
  return Status::Ok();
}

std::string EmulatedStatePath() {
  if (const char* path = getenv("PALADIN_EMU_STATE"); path != nullptr && path[0] != '\0') {
    return path;
  }
  return "/dev/shm/paladin-emu-" + std::to_string(getuid()) + ".state";
}

uint64_t GrownQuota(uint64_t quota, uint64_t ceiling, uint64_t shortfall, uint64_t gpu_free,
                    uint64_t step) {
  if (ceiling <= quota || shortfall == 0) return quota;
  if (step == 0) step = 1;
  uint64_t grow = (shortfall + step - 1) / step * step;
  if (grow > ceiling - quota) grow = ceiling - quota;
  if (grow < shortfall) return quota;  // the ceiling does not leave room for what is asked
  if (grow > gpu_free) {
    if (shortfall > gpu_free) return quota;  // the GPU does not have it
    grow = shortfall;
  }
  return quota + grow;
}

QuotaGrower::QuotaGrower(Region* region, const gpu::Nvml* nvml, Log log)
    : region_(region), nvml_(nvml), log_(std::move(log)) {}

QuotaGrower::~QuotaGrower() { Stop(); }

void QuotaGrower::Start() {
  region_->SetListening(true);
  thread_ = std::thread([this] { Loop(); });
}

void QuotaGrower::Stop() {
  if (!thread_.joinable()) return;
  stop_ = true;
  region_->SetListening(false);
  thread_.join();
}

void QuotaGrower::Loop() {
  while (!stop_) {
    uint64_t shortfall = 0;
    uint32_t ticket = 0;
    if (region_->WaitGrowthRequest(100, &shortfall, &ticket)) Answer(shortfall, ticket);
  }
}

void QuotaGrower::Answer(uint64_t shortfall, uint32_t ticket) {
  const uint64_t quota = region_->quota();
  // The least free memory over the GPUs the workload uses: the quota is per GPU.
  uint64_t gpu_free = UINT64_MAX;
  for (int slot = 0; slot < kMaxDevices && nvml_ != nullptr; ++slot) {
    if (slot >= region_->device_count()) break;
    char uuid[16];
    region_->DeviceUuid(slot, uuid);
    StatusOr<gpu::GpuInfo> info = nvml_->GpuByUuid(gpu::FormatGpuUuid(uuid));
    if (info.ok() && info->free_bytes < gpu_free) gpu_free = info->free_bytes;
  }
  if (nvml_ == nullptr || gpu_free == UINT64_MAX) gpu_free = 0;
  constexpr uint64_t kStep = 256ull << 20;
  const uint64_t grown = GrownQuota(quota, region_->ceiling(), shortfall, gpu_free, kStep);
  if (grown > quota) {
    region_->SetQuota(grown);
    log_("GPU-memory quota grown from " + base::FormatSize(quota) + " to " +
         base::FormatSize(grown) + " (the workload needed " + base::FormatSize(shortfall) +
         " more; the GPU had " + base::FormatSize(gpu_free) + " free)");
  } else {
    log_("GPU-memory quota not grown: the workload needed " + base::FormatSize(shortfall) +
         " more; ceiling " + base::FormatSize(region_->ceiling()) + ", quota " +
         base::FormatSize(quota) + ", the GPU has " + base::FormatSize(gpu_free) + " free");
  }
  region_->AnswerGrowth(ticket, grown > quota);
}

}  // namespace paladin::quota
