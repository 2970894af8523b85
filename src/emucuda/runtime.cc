#include "emucuda/runtime.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string_view>

#include "emucuda/checkpoint_target.h"

namespace paladin::emucuda {
namespace {

void ForkChildHandler() { Runtime::Get().OnForkChild(); }

// Real CUDA matches a "GPU-..." entry of CUDA_VISIBLE_DEVICES by UUID prefix.
int FindByUuidPrefix(const SharedState& state, std::string_view prefix) {
  int found = -1;
  for (int i = 0; i < state.device_count(); ++i) {
    std::string uuid = UuidString(state.uuid(i));
    if (strncasecmp(uuid.c_str(), std::string(prefix).c_str(), prefix.size()) != 0) continue;
    if (found >= 0) return -1;  // ambiguous
    found = i;
  }
  return found;
}

int ParseVisibleEntry(const SharedState& state, std::string_view entry) {
  while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
  while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
  if (entry.size() > 4 && strncasecmp(entry.data(), "GPU-", 4) == 0) {
    return FindByUuidPrefix(state, entry);
  }
  if (entry.empty() || entry.size() > 3) return -1;
  int index = 0;
  for (char c : entry) {
    if (c < '0' || c > '9') return -1;
    index = index * 10 + (c - '0');
  }
  return index < state.device_count() ? index : -1;
}

}  // namespace

Runtime& Runtime::Get() {
  static Runtime* runtime = new Runtime();
  return *runtime;
}

SharedState* Runtime::AttachState() {
  std::lock_guard<std::mutex> lock(attach_mu_);
  if (!attach_done_) {
    attach_done_ = true;
    const Config& config = ProcessConfig();
    if (!config.device_bytes.empty()) {
      state_ = SharedState::Attach(config.state_path, config.device_bytes);
    }
    control_dir_ = ControlDir(config.state_path);
  }
  return state_;
}

CUresult Runtime::Init() {
  if (forked_child_.load()) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard<std::mutex> lock(init_mu_);
  if (!init_done_) {
    init_result_ = InitOnce();
    init_done_ = true;
    initialised_.store(init_result_ == CUDA_SUCCESS);
  }
  return init_result_;
}

CUresult Runtime::InitOnce() {
  SharedState* state = AttachState();
  if (state == nullptr) return CUDA_ERROR_NO_DEVICE;
  ordinals_ = VisibleOrdinals(*state);
  if (ordinals_.empty()) return CUDA_ERROR_NO_DEVICE;
  if (state->Join(SelfHostProcess(), nullptr, nullptr) != SharedState::JoinResult::kJoined) {
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  owner_pid_ = getpid();
  pthread_atfork(nullptr, nullptr, &ForkChildHandler);
  StartCheckpointControl();
  return CUDA_SUCCESS;
}

// CUDA_VISIBLE_DEVICES: indices or UUIDs, comma-separated; like CUDA, the list ends at the
// first entry that names no device (or one already listed). Unset: every device.
std::vector<Runtime::Ordinal> Runtime::VisibleOrdinals(const SharedState& state) const {
  std::vector<int> physical;
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (env == nullptr) {
    for (int i = 0; i < state.device_count(); ++i) physical.push_back(i);
  } else {
    std::string_view list = env;
    while (!list.empty()) {
      size_t comma = list.find(',');
      int index = ParseVisibleEntry(state, list.substr(0, comma));
      bool listed = false;
      for (int p : physical) listed = listed || p == index;
      if (index < 0 || listed) break;
      physical.push_back(index);
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
  }
  std::vector<Ordinal> ordinals;
  for (int p : physical) {
    Ordinal ordinal{p, {}};
    std::memcpy(ordinal.uuid.bytes, state.uuid(p), 16);
    ordinals.push_back(ordinal);
  }
  return ordinals;
}

CUresult Runtime::Charge(int ordinal, uint64_t bytes) {
  if (bytes == 0) return CUDA_SUCCESS;
  if (!state_->TryCharge(Physical(ordinal), bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  held_[ordinal].fetch_add(bytes);
  return CUDA_SUCCESS;
}

void Runtime::Uncharge(int ordinal, uint64_t bytes) {
  if (bytes == 0) return;
  state_->Uncharge(Physical(ordinal), bytes);
  held_[ordinal].fetch_sub(bytes);
}

CUresult Runtime::ChargeContext(int ordinal) {
  CUresult result = Charge(ordinal, context_overhead());
  if (result != CUDA_SUCCESS) return result;
  state_->AddContexts(Physical(ordinal), 1);
  contexts_[ordinal].fetch_add(1);
  return CUDA_SUCCESS;
}

void Runtime::UnchargeContext(int ordinal) {
  Uncharge(ordinal, context_overhead());
  state_->AddContexts(Physical(ordinal), -1);
  contexts_[ordinal].fetch_sub(1);
}

uint64_t Runtime::HeldBytes() const {
  uint64_t bytes = 0;
  for (const std::atomic<uint64_t>& held : held_) bytes += held.load();
  return bytes;
}

void Runtime::DetachForCheckpoint() {
  if (state_ == nullptr) return;
  state_->Leave();
  delete state_;
  state_ = nullptr;
}

CUresult Runtime::RemapOrdinals(const SharedState& fresh, const std::vector<GpuPair>& pairs,
                                std::vector<Ordinal>* moved) const {
  moved->clear();
  for (const Ordinal& ordinal : ordinals_) {
    CUuuid uuid = ordinal.uuid;
    for (const GpuPair& pair : pairs) {
      if (std::memcmp(pair.old_uuid.bytes, ordinal.uuid.bytes, 16) == 0) uuid = pair.new_uuid;
    }
    int physical = fresh.FindDevice(reinterpret_cast<const unsigned char*>(uuid.bytes));
    if (physical < 0) return CUDA_ERROR_INVALID_DEVICE;
    moved->push_back(Ordinal{physical, uuid});
  }
  return CUDA_SUCCESS;
}

// Counts what the process held again, on the devices its ordinals now map to: all of it or none.
CUresult Runtime::CountAgain(SharedState* fresh, const std::vector<Ordinal>& moved) {
  uint64_t need[kMaxDevices] = {};
  uint32_t contexts[kMaxDevices] = {};
  for (size_t i = 0; i < moved.size(); ++i) {
    need[moved[i].physical] += held_[i].load();
    contexts[moved[i].physical] += contexts_[i].load();
  }
  switch (fresh->Join(SelfHostProcess(), need, contexts)) {
    case SharedState::JoinResult::kJoined:
      return CUDA_SUCCESS;
    case SharedState::JoinResult::kNoRoom:
      return CUDA_ERROR_OUT_OF_MEMORY;
    case SharedState::JoinResult::kNoUsageFile:
      break;
  }
  return CUDA_ERROR_OPERATING_SYSTEM;
}

CUresult Runtime::ReattachForRestore(const std::vector<GpuPair>& pairs,
                                     const std::string& state_path) {
  std::string path = state_path.empty() ? StatePathFromEnv() : state_path;
  std::vector<uint64_t> device_bytes = DeviceSpecFromEnv();
  SharedState* fresh = device_bytes.empty() ? nullptr : SharedState::Attach(path, device_bytes);
  if (fresh == nullptr) return CUDA_ERROR_NO_DEVICE;
  std::vector<Ordinal> moved;
  CUresult result = RemapOrdinals(*fresh, pairs, &moved);
  if (result == CUDA_SUCCESS) result = CountAgain(fresh, moved);
  if (result != CUDA_SUCCESS) {
    delete fresh;
    return result;
  }
  state_ = fresh;
  ordinals_ = moved;
  owner_pid_ = getpid();
  control_dir_ = ControlDir(path);
  return CUDA_SUCCESS;
}

void Runtime::OnForkChild() {
  if (!initialised_.load()) return;
  forked_child_.store(true);
  initialised_.store(false);
  gate_.ResetAfterFork();
}

void Runtime::ReleaseAtExit() {
  if (owner_pid_ != getpid() || state_ == nullptr) return;
  state_->Leave();
  RemoveOwnStateFile();
}

ApiScope::ApiScope() {
  Runtime& runtime = Runtime::Get();
  runtime.gate().EnterShared();
  status_ = runtime.initialised() ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

ApiScope::~ApiScope() { Runtime::Get().gate().ExitShared(); }

namespace {

// Runs at exit (and at dlclose): the driver frees a process's memory when it ends.
__attribute__((destructor)) void ReleaseAtExitHook() { Runtime::Get().ReleaseAtExit(); }

}  // namespace

}  // namespace paladin::emucuda
