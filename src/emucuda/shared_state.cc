#include "emucuda/shared_state.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "paladin/gpu/uuid.h"

namespace paladin::emucuda {

using AtomicU64 = std::atomic<uint64_t>;
using AtomicU32 = std::atomic<uint32_t>;
static_assert(AtomicU64::is_always_lock_free && AtomicU32::is_always_lock_free,
              "the state file's atomics must be lock-free to work across processes");
static_assert(sizeof(AtomicU64) == 8 && sizeof(AtomicU32) == 4);

namespace {

constexpr uint64_t kMagic = 0x5453554d45444c50ull;  // "PLDEMUST"
constexpr int kAttachWaitMs = 2000;

enum SlotState : uint32_t { kFree = 0, kClaiming = 1, kLive = 2, kReclaiming = 3 };
enum ReadyState : uint32_t { kNotReady = 0, kReady = 1, kReinitialising = 2 };

}  // namespace

struct SharedDevice {
  unsigned char uuid[16];
  char name[64];
  uint64_t total_bytes;
  AtomicU64 used_bytes;
};

struct SharedProcess {
  AtomicU32 state;
  AtomicU32 pid;
  AtomicU64 start_time;
  AtomicU32 view;  // since version 3: the PID namespace whose /proc numbers `pid`; 0: the host's
  uint32_t pad;
  AtomicU64 used_bytes[kMaxDevices];
  AtomicU32 contexts[kMaxDevices];
};

// The events posted on one device: a ring of the last kEventRing. An entry's sequence number is
// written last, so a reader that finds the sequence it expects before and after reading the
// entry has read it whole.
struct SharedEvents {
  AtomicU64 posted;  // sequence number of the newest event (the first is 1)
  AtomicU64 seq[kEventRing];
  AtomicU64 type[kEventRing];
  AtomicU64 data[kEventRing];
};

struct StateLayout {
  uint64_t magic;
  uint32_t version;
  uint32_t layout_bytes;
  AtomicU32 ready;
  AtomicU32 device_count;
  SharedDevice devices[kMaxDevices];
  SharedProcess processes[kMaxProcesses];
  SharedEvents events[kMaxDevices];  // since version 2
};

namespace {

uint64_t MonotonicMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000u + static_cast<uint64_t>(ts.tv_nsec) / 1000000u;
}

void SleepMs(int ms) {
  timespec ts{0, ms * 1000000L};
  nanosleep(&ts, nullptr);
}

uint64_t Fnv1a(uint64_t hash, const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// Deterministic from (path, index), and recognisable: it starts with "EMU" and the index.
void DeviceUuid(const std::string& path, int index, unsigned char* uuid) {
  auto index_byte = static_cast<unsigned char>(index);
  uint64_t first = Fnv1a(Fnv1a(0xcbf29ce484222325ull, path.data(), path.size()), &index_byte, 1);
  uint64_t second = Fnv1a(first ^ 0x9e3779b97f4a7c15ull, "paladin-emucuda", 15);
  uuid[0] = 'E';
  uuid[1] = 'M';
  uuid[2] = 'U';
  uuid[3] = index_byte;
  std::memcpy(uuid + 4, &first, 8);
  std::memcpy(uuid + 12, &second, 4);
}

void SubtractClamped(AtomicU64& counter, uint64_t bytes) {
  uint64_t current = counter.load();
  while (!counter.compare_exchange_weak(current, current >= bytes ? current - bytes : 0)) {
  }
}

void FillDevices(StateLayout* layout, const std::string& path,
                 const std::vector<uint64_t>& device_bytes) {
  layout->device_count.store(static_cast<uint32_t>(device_bytes.size()));
  for (int i = 0; i < kMaxDevices; ++i) {
    SharedDevice& device = layout->devices[i];
    bool present = i < static_cast<int>(device_bytes.size());
    std::memset(device.uuid, 0, sizeof(device.uuid));
    std::memset(device.name, 0, sizeof(device.name));
    device.total_bytes = present ? device_bytes[i] : 0;
    device.used_bytes.store(0);
    SharedEvents& events = layout->events[i];
    events.posted.store(0);
    for (int e = 0; e < kEventRing; ++e) {
      events.seq[e].store(0);
      events.type[e].store(0);
      events.data[e].store(0);
    }
    if (!present) continue;
    DeviceUuid(path, i, device.uuid);
    std::snprintf(device.name, sizeof(device.name), "Paladin Emulated GPU %s (emulated)",
                  FormatSize(device_bytes[i]).c_str());
  }
}

void ClearProcesses(StateLayout* layout) {
  for (SharedProcess& process : layout->processes) {
    process.pid.store(0);
    process.start_time.store(0);
    for (int d = 0; d < kMaxDevices; ++d) {
      process.used_bytes[d].store(0);
      process.contexts[d].store(0);
    }
    process.state.store(kFree);
  }
}

std::string DescribeDevices(const std::vector<uint64_t>& device_bytes) {
  std::string text;
  for (size_t i = 0; i < device_bytes.size();) {
    size_t same = i;
    while (same < device_bytes.size() && device_bytes[same] == device_bytes[i]) ++same;
    if (!text.empty()) text += ",";
    text += std::to_string(same - i) + "x" + FormatSize(device_bytes[i]);
    i = same;
  }
  return text;
}

StateLayout* MapLayout(int fd) {
  void* map = mmap(nullptr, sizeof(StateLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return map == MAP_FAILED ? nullptr : static_cast<StateLayout*>(map);
}

void UnmapLayout(StateLayout* layout) { munmap(layout, sizeof(StateLayout)); }

StateLayout* CreateLayout(int fd, const std::string& path,
                          const std::vector<uint64_t>& device_bytes) {
  StateLayout* layout = nullptr;
  if (ftruncate(fd, sizeof(StateLayout)) == 0) layout = MapLayout(fd);
  if (layout == nullptr) {
    LogLine("cannot create the device-state file %s: %s", path.c_str(), std::strerror(errno));
    unlink(path.c_str());
    return nullptr;
  }
  FillDevices(layout, path, device_bytes);
  layout->magic = kMagic;
  layout->version = kStateVersion;
  layout->layout_bytes = sizeof(StateLayout);
  layout->ready.store(kReady, std::memory_order_release);
  return layout;
}

// Waits (bounded) for the file to reach its full size, as its creator makes it.
bool WaitForSize(int fd, const std::string& path, uint64_t deadline_ms) {
  while (true) {
    struct stat info {};
    if (fstat(fd, &info) != 0) return false;
    if (info.st_size == static_cast<off_t>(sizeof(StateLayout))) return true;
    if (info.st_size != 0) {
      LogLine("%s is not a device-state file of this version; remove it", path.c_str());
      return false;
    }
    if (MonotonicMs() > deadline_ms) {
      LogLine("%s was never completed by the process creating it; remove it", path.c_str());
      return false;
    }
    SleepMs(1);
  }
}

bool WaitForReady(StateLayout* layout, const std::string& path, uint64_t deadline_ms) {
  while (layout->ready.load(std::memory_order_acquire) != kReady) {
    if (MonotonicMs() > deadline_ms) {
      LogLine("%s was never completed by the process creating it; remove it", path.c_str());
      return false;
    }
    SleepMs(1);
  }
  if (layout->magic != kMagic || layout->version != kStateVersion ||
      layout->layout_bytes != sizeof(StateLayout)) {
    LogLine("%s is not a device-state file of this version; remove it", path.c_str());
    return false;
  }
  return true;
}

StateLayout* AttachLayout(int fd, const std::string& path) {
  uint64_t deadline = MonotonicMs() + kAttachWaitMs;
  StateLayout* layout = WaitForSize(fd, path, deadline) ? MapLayout(fd) : nullptr;
  if (layout != nullptr && !WaitForReady(layout, path, deadline)) {
    UnmapLayout(layout);
    layout = nullptr;
  }
  return layout;
}

}  // namespace

SharedState* SharedState::Attach(const std::string& path,
                                 const std::vector<uint64_t>& device_bytes) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      StateLayout* layout = CreateLayout(fd, path, device_bytes);
      close(fd);
      return layout == nullptr ? nullptr : new SharedState(path, layout);
    }
    if (errno != EEXIST) break;
    fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) continue;  // removed meanwhile: try to create it again
    if (fd < 0) break;
    StateLayout* layout = AttachLayout(fd, path);
    close(fd);
    if (layout == nullptr) return nullptr;
    auto* state = new SharedState(path, layout);
    state->SweepDead();
    state->MatchDevices(device_bytes);
    return state;
  }
  LogLine("cannot open the device-state file %s: %s", path.c_str(), std::strerror(errno));
  return nullptr;
}

SharedState::~SharedState() { UnmapLayout(layout_); }

std::vector<uint64_t> SharedState::DeviceBytes() const {
  std::vector<uint64_t> bytes(device_count());
  for (int i = 0; i < device_count(); ++i) bytes[i] = total(i);
  return bytes;
}

bool SharedState::HasLiveProcess() const {
  for (const SharedProcess& process : layout_->processes) {
    if (process.state.load() != kFree) return true;
  }
  return false;
}

void SharedState::MatchDevices(const std::vector<uint64_t>& device_bytes) {
  if (DeviceBytes() == device_bytes) return;
  uint32_t expected = kReady;
  if (!layout_->ready.compare_exchange_strong(expected, kReinitialising)) {
    WaitForReady(layout_, path_, MonotonicMs() + kAttachWaitMs);
    return;  // another process re-initialised it; use what it made
  }
  SweepDead();
  if (HasLiveProcess()) {
    LogLine("PALADIN_EMU_GPUS asks for %s but %s is in use with %s; using those",
            DescribeDevices(device_bytes).c_str(), path_.c_str(),
            DescribeDevices(DeviceBytes()).c_str());
  } else {
    ClearProcesses(layout_);
    FillDevices(layout_, path_, device_bytes);
  }
  layout_->ready.store(kReady, std::memory_order_release);
}

int SharedState::device_count() const {
  uint32_t count = layout_->device_count.load();
  return count > kMaxDevices ? kMaxDevices : static_cast<int>(count);
}

uint64_t SharedState::total(int device) const { return layout_->devices[device].total_bytes; }

uint64_t SharedState::used(int device) const { return layout_->devices[device].used_bytes.load(); }

uint64_t SharedState::free(int device) const {
  uint64_t total_bytes = total(device);
  uint64_t used_bytes = used(device);
  return used_bytes >= total_bytes ? 0 : total_bytes - used_bytes;
}

const unsigned char* SharedState::uuid(int device) const { return layout_->devices[device].uuid; }

const char* SharedState::name(int device) const { return layout_->devices[device].name; }

int SharedState::FindDevice(const unsigned char* wanted) const {
  for (int i = 0; i < device_count(); ++i) {
    if (std::memcmp(uuid(i), wanted, 16) == 0) return i;
  }
  return -1;
}

bool SharedState::TryReserve(int device, uint64_t bytes) {
  AtomicU64& used_bytes = layout_->devices[device].used_bytes;
  uint64_t limit = total(device);
  uint64_t current = used_bytes.load();
  do {
    if (bytes > limit || current > limit - bytes) return false;
  } while (!used_bytes.compare_exchange_weak(current, current + bytes));
  return true;
}

void SharedState::Release(int device, uint64_t bytes) {
  SubtractClamped(layout_->devices[device].used_bytes, bytes);
}

int SharedState::ClaimSlot(const HostProcess& self) {
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < kMaxProcesses; ++i) {
      SharedProcess& process = layout_->processes[i];
      uint32_t expected = kFree;
      if (!process.state.compare_exchange_strong(expected, kClaiming)) continue;
      process.pid.store(self.pid);
      process.start_time.store(self.start_time);
      process.view.store(self.view);
      for (int d = 0; d < kMaxDevices; ++d) {
        process.used_bytes[d].store(0);
        process.contexts[d].store(0);
      }
      process.state.store(kLive);
      return i;
    }
    SweepDead();
  }
  return -1;
}

void SharedState::AddToSlot(int slot, int device, uint64_t bytes) {
  layout_->processes[slot].used_bytes[device].fetch_add(bytes);
}

void SharedState::SubtractFromSlot(int slot, int device, uint64_t bytes) {
  SubtractClamped(layout_->processes[slot].used_bytes[device], bytes);
}

void SharedState::AddContexts(int slot, int device, int delta) {
  layout_->processes[slot].contexts[device].fetch_add(static_cast<uint32_t>(delta));
}

void SharedState::ReleaseSlot(int slot) {
  SharedProcess& process = layout_->processes[slot];
  for (int d = 0; d < kMaxDevices; ++d) {
    Release(d, process.used_bytes[d].exchange(0));
    process.contexts[d].store(0);
  }
  process.pid.store(0);
  process.state.store(kFree);
}

void SharedState::SweepDead() {
  for (int i = 0; i < kMaxProcesses; ++i) {
    SharedProcess& process = layout_->processes[i];
    if (process.state.load() != kLive) continue;
    if (HostProcessAlive({process.pid.load(), process.start_time.load(), process.view.load()})) {
      continue;
    }
    uint32_t expected = kLive;
    if (process.state.compare_exchange_strong(expected, kReclaiming)) ReleaseSlot(i);
  }
}

std::vector<SharedState::ProcessUsage> SharedState::ProcessesOn(int device) const {
  std::vector<ProcessUsage> usage;
  for (const SharedProcess& process : layout_->processes) {
    if (process.state.load() != kLive) continue;
    ProcessUsage entry{0, process.used_bytes[device].load(), process.contexts[device].load()};
    if (entry.bytes == 0 && entry.contexts == 0) continue;
    // A process of another PID namespace's view is reported by the pid this caller can name.
    entry.pid = PidSeenHere({process.pid.load(), process.start_time.load(), process.view.load()});
    if (entry.pid != 0) usage.push_back(entry);
  }
  return usage;
}

uint64_t SharedState::PostEvent(int device, uint64_t type, uint64_t data) {
  SharedEvents& events = layout_->events[device];
  const uint64_t seq = events.posted.fetch_add(1) + 1;
  const int slot = static_cast<int>(seq % kEventRing);
  events.seq[slot].store(0, std::memory_order_release);  // being written
  events.type[slot].store(type);
  events.data[slot].store(data);
  events.seq[slot].store(seq, std::memory_order_release);
  return seq;
}

uint64_t SharedState::LastEvent(int device) const { return layout_->events[device].posted.load(); }

SharedState::EventRead SharedState::EventsAfter(int device, uint64_t after) const {
  const SharedEvents& events = layout_->events[device];
  EventRead read;
  read.next = after;
  const uint64_t posted = events.posted.load(std::memory_order_acquire);
  if (posted < after) {  // the file was re-initialised: start again from its events
    read.next = 0;
    after = 0;
  }
  uint64_t seq = after + 1;
  if (posted > after + kEventRing) {  // overwritten before this reader came back
    read.lost = posted - after - kEventRing;
    seq = posted - kEventRing + 1;
  }
  for (; seq <= posted; ++seq) {
    const int slot = static_cast<int>(seq % kEventRing);
    const uint64_t before = events.seq[slot].load(std::memory_order_acquire);
    const Event event{seq, events.type[slot].load(), events.data[slot].load()};
    const uint64_t after_read = events.seq[slot].load(std::memory_order_acquire);
    if (before == seq && after_read == seq) {
      read.events.push_back(event);
    } else if (before < seq || after_read < seq) {
      break;  // still being written: read it next time
    } else {
      ++read.lost;  // overwritten while read
    }
    read.next = seq;
  }
  return read;
}

std::string UuidString(const unsigned char* uuid) {
  char text[gpu::kUuidTextSize];
  gpu::FormatUuid(uuid, text);
  return text;
}

}  // namespace paladin::emucuda
