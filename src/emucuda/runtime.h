// The emulated driver inside one process: what cuInit set up (the shared device state, this
// process's usage file, the device ordinals CUDA_VISIBLE_DEVICES leaves visible),
// what the process counts on each device, the gate a checkpoint closes, and the lock that guards
// the process's tables of contexts, allocations, pools, VMM handles, streams and modules.
//
// Thread safety: Charge/Uncharge and the accessors may be called from any thread inside the gate;
// DetachForCheckpoint/ReattachForRestore only by the control thread with the gate held
// exclusively (so no other thread is inside the driver).
#ifndef PALADIN_EMUCUDA_RUNTIME_H_
#define PALADIN_EMUCUDA_RUNTIME_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "emucuda/api_gate.h"
#include "emucuda/config.h"
#include "emucuda/host_process.h"
#include "emucuda/shared_state.h"
#include "paladin/gpu/cuda_api.h"

namespace paladin::emucuda {

struct GpuPair {
  CUuuid old_uuid;
  CUuuid new_uuid;
};

class Runtime {
 public:
  // The process's runtime, created on first use and never destroyed (the library may be used
  // from other libraries' destructors at exit).
  static Runtime& Get();

  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // cuInit: attaches the shared state, creates this process's usage file, starts the checkpoint
  // control thread. Idempotent; the first result is kept.
  CUresult Init();
  bool initialised() const { return initialised_.load(); }
  // Maps the shared state file (NVML needs no cuInit). Null when there is no device.
  SharedState* AttachState();
  SharedState* state() const { return state_; }
  ApiGate& gate() { return gate_; }
  std::mutex& mu() { return mu_; }

  int device_count() const { return static_cast<int>(ordinals_.size()); }
  bool ValidDevice(int ordinal) const { return ordinal >= 0 && ordinal < device_count(); }
  int Physical(int ordinal) const { return ordinals_[ordinal].physical; }
  const CUuuid& Uuid(int ordinal) const { return ordinals_[ordinal].uuid; }
  uint64_t context_overhead() const { return ProcessConfig().context_overhead; }
  const std::string& control_dir() const { return control_dir_; }

  // Counts `bytes` on the device of `ordinal` for this process; CUDA_ERROR_OUT_OF_MEMORY when the
  // device lacks room even after the bytes of dead processes were given back.
  CUresult Charge(int ordinal, uint64_t bytes);
  void Uncharge(int ordinal, uint64_t bytes);
  // A context's overhead, and the context count NVML shows.
  CUresult ChargeContext(int ordinal);
  void UnchargeContext(int ordinal);

  // The device memory this process holds, all devices together.
  uint64_t HeldBytes() const;
  // Checkpoint: gives back everything this process counts (removes its usage file) and unmaps the
  // state.
  void DetachForCheckpoint();
  // Restore: maps `state_path` (the restorer's GPUs; "": what PALADIN_EMU_STATE names), moves each
  // ordinal to the device its UUID pairs to (unpaired ones keep their UUID), and counts everything
  // again in a new usage file. Fails without any change (CUDA_ERROR_INVALID_DEVICE,
  // CUDA_ERROR_OUT_OF_MEMORY, ...).
  CUresult ReattachForRestore(const std::vector<GpuPair>& pairs, const std::string& state_path);

  // Called in a child after fork(): the child does not own the parent's usage file or devices.
  void OnForkChild();
  // Called at exit: gives back what this process counts.
  void ReleaseAtExit();

 private:
  struct Ordinal {
    int physical;
    CUuuid uuid;
  };

  Runtime() = default;
  CUresult InitOnce();
  std::vector<Ordinal> VisibleOrdinals(const SharedState& state) const;
  CUresult RemapOrdinals(const SharedState& fresh, const std::vector<GpuPair>& pairs,
                         std::vector<Ordinal>* moved) const;
  CUresult CountAgain(SharedState* fresh, const std::vector<Ordinal>& moved);

  std::mutex init_mu_;
  bool init_done_ = false;
  CUresult init_result_ = CUDA_ERROR_NOT_INITIALIZED;
  std::atomic<bool> initialised_{false};
  std::atomic<bool> forked_child_{false};

  std::mutex attach_mu_;
  bool attach_done_ = false;
  SharedState* state_ = nullptr;

  ApiGate gate_;
  std::mutex mu_;
  std::vector<Ordinal> ordinals_;
  std::string control_dir_;
  std::atomic<uint64_t> held_[kMaxDevices] = {};
  std::atomic<uint32_t> contexts_[kMaxDevices] = {};
  pid_t owner_pid_ = 0;
};

// Enters the gate for one driver entry point; status() is CUDA_ERROR_NOT_INITIALIZED until
// cuInit has succeeded in this process.
class ApiScope {
 public:
  ApiScope();
  ~ApiScope();
  ApiScope(const ApiScope&) = delete;
  ApiScope& operator=(const ApiScope&) = delete;
  CUresult status() const { return status_; }

 private:
  CUresult status_;
};

}  // namespace paladin::emucuda

// The first statement of every driver entry point that needs cuInit.
#define EMU_API_ENTRY()                       \
  ::paladin::emucuda::ApiScope emu_api_scope; \
  if (emu_api_scope.status() != CUDA_SUCCESS) return emu_api_scope.status()

// Entry points introduced after the emulated driver version are not there.
#define EMU_REQUIRE_DRIVER(version) \
  if (!::paladin::emucuda::DriverHas(version)) return CUDA_ERROR_NOT_SUPPORTED

#endif  // PALADIN_EMUCUDA_RUNTIME_H_
