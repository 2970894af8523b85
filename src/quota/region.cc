#include "paladin/quota/region.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace paladin::quota {

namespace {

constexpr char kMagic[8] = {'P', 'L', 'D', 'N', 'Q', 'U', 'O', 'T'};

// kFrozen: the process is in a checkpoint; its bytes stay counted and no sweep reclaims them
// until a restore binds the slot to the restored process.
enum SlotState : uint32_t { kFree = 0, kClaiming = 1, kReady = 2, kReclaiming = 3, kFrozen = 4 };

using AtomicU64 = std::atomic<uint64_t>;
using AtomicU32 = std::atomic<uint32_t>;
static_assert(AtomicU64::is_always_lock_free && AtomicU32::is_always_lock_free,
              "the region's atomics must be lock-free to work across processes");

long Futex(AtomicU32* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

void WaitOn(AtomicU32* word, uint32_t expected, int timeout_ms) {
  timespec ts{timeout_ms / 1000, static_cast<long>(timeout_ms % 1000) * 1000000L};
  Futex(word, FUTEX_WAIT, expected, &ts);
}

void WakeAll(AtomicU32* word) { Futex(word, FUTEX_WAKE, INT32_MAX, nullptr); }

uint64_t MonotonicMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000u + static_cast<uint64_t>(ts.tv_nsec) / 1000000u;
}

void SubtractClamped(AtomicU64& counter, uint64_t bytes) {
  uint64_t cur = counter.load();
  while (!counter.compare_exchange_weak(cur, cur >= bytes ? cur - bytes : 0)) {
  }
}

void RaisePeak(AtomicU64& peak, uint64_t value) {
  uint64_t cur = peak.load();
  while (cur < value && !peak.compare_exchange_weak(cur, value)) {
  }
}

}  // namespace

struct Region::Layout {
  char magic[8];
  uint32_t version;
  uint32_t size;  // bytes of the whole layout
  AtomicU64 quota;
  AtomicU64 ceiling;
  uint64_t granularity;
  uint32_t grow_wait_ms;
  AtomicU32 listening;  // 1 while a launcher answers growth requests
  AtomicU32 grow_seq;   // bumped by each request (futex word)
  AtomicU32 grow_ack;   // set to the last answered grow_seq (futex word)
  AtomicU64 grow_want;  // largest shortfall asked for since the last answer
  AtomicU64 grow_count;
  AtomicU64 refusals;
  AtomicU64 last_refused_bytes;
  AtomicU64 context_estimate;  // a context's measured cost, once one has been measured
  struct Device {
    AtomicU32 state;
    uint32_t pad;
    char uuid[16];
    AtomicU64 used;
    AtomicU64 peak;
  } devices[kMaxDevices];
  struct Process {
    AtomicU32 state;
    uint32_t pid;
    uint64_t start_time;
    uint32_t ns_pid;  // the pid inside the workload's own PID namespace (kept by a restore)
    uint32_t view;    // the PID namespace whose /proc numbers `pid`; 0 for the host's
    AtomicU64 used[kMaxDevices];
    AtomicU64 context[kMaxDevices];
  } processes[kMaxProcesses];
};

Region::Region(std::string path, Layout* layout, size_t size, bool owns_memory)
    : path_(std::move(path)), layout_(layout), size_(size), private_memory_(owns_memory) {}

Region::~Region() {
  if (private_memory_) {
    layout_->~Layout();
    free(layout_);
  } else {
    munmap(layout_, size_);
  }
}

namespace {
void Initialise(Region::Layout* l, const RegionSettings& s) {
  memcpy(l->magic, kMagic, sizeof kMagic);
  l->version = kRegionVersion;
  l->size = sizeof(Region::Layout);
  l->quota.store(s.quota_bytes);
  l->ceiling.store(s.ceiling_bytes);
  l->granularity = s.granularity == 0 ? 1 : s.granularity;
  l->grow_wait_ms = s.grow_wait_ms;
  // A region made with room to grow belongs to a launcher that answers growth requests: it is
  // listening from the start, so that a request the workload makes before the launcher's
  // answering thread runs (the workload starts first) waits for its answer instead of being
  // refused at once.
  l->listening.store(s.ceiling_bytes > s.quota_bytes ? 1 : 0);
}
}  // namespace

std::unique_ptr<Region> Region::Create(const std::string& path, const RegionSettings& settings,
                                       std::string* error) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = "cannot create accounting region " + path + ": " + strerror(errno);
    return nullptr;
  }
  const size_t size = sizeof(Layout);
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    *error = "cannot size accounting region " + path + ": " + strerror(errno);
    close(fd);
    unlink(path.c_str());
    return nullptr;
  }
  void* mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mem == MAP_FAILED) {
    *error = "cannot map accounting region " + path + ": " + strerror(errno);
    unlink(path.c_str());
    return nullptr;
  }
  auto* layout = static_cast<Layout*>(mem);  // zero-filled by ftruncate
  Initialise(layout, settings);
  return std::unique_ptr<Region>(new Region(path, layout, size, false));
}

std::unique_ptr<Region> Region::Open(const std::string& path, std::string* error) {
  // Root opens a job's region by name (checkpoint, adoption, a move's announcement), in a run
  // directory the job may own: a link put in its place is not followed, a FIFO does not block the
  // open, and only a regular file with no other name is mapped (a hard link to another file of the
  // right size would have root write into that file).
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    *error = "accounting region " + path + ": " +
             (errno == ELOOP ? std::string("is a symbolic link") : strerror(errno));
    return nullptr;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
    *error = "accounting region " + path + ": not a regular file with one name";
    close(fd);
    return nullptr;
  }
  if (static_cast<size_t>(st.st_size) != sizeof(Layout)) {
    *error = "accounting region " + path + ": size " + std::to_string(st.st_size) +
             " is not a version " + std::to_string(kRegionVersion) + " region (" +
             std::to_string(sizeof(Layout)) + " bytes)";
    close(fd);
    return nullptr;
  }
  void* mem = mmap(nullptr, sizeof(Layout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mem == MAP_FAILED) {
    *error = "cannot map accounting region " + path + ": " + strerror(errno);
    return nullptr;
  }
  auto* layout = static_cast<Layout*>(mem);
  if (memcmp(layout->magic, kMagic, sizeof kMagic) != 0 || layout->version != kRegionVersion) {
    *error = "accounting region " + path + ": not a version " + std::to_string(kRegionVersion) +
             " region (bad magic or version)";
    munmap(mem, sizeof(Layout));
    return nullptr;
  }
  return std::unique_ptr<Region>(new Region(path, layout, sizeof(Layout), false));
}

std::unique_ptr<Region> Region::CreatePrivate(const RegionSettings& settings) {
  void* mem = calloc(1, sizeof(Layout));
  if (mem == nullptr) return nullptr;
  auto* layout = new (mem) Layout();
  Initialise(layout, settings);
  return std::unique_ptr<Region>(new Region("(private)", layout, sizeof(Layout), true));
}

uint64_t Region::quota() const { return layout_->quota.load(); }
uint64_t Region::ceiling() const { return layout_->ceiling.load(); }
uint64_t Region::granularity() const { return layout_->granularity; }
uint32_t Region::grow_wait_ms() const { return layout_->grow_wait_ms; }
void Region::SetQuota(uint64_t bytes) { layout_->quota.store(bytes); }
void Region::SetCeiling(uint64_t bytes) { layout_->ceiling.store(bytes); }

uint64_t Region::Rounded(uint64_t bytes) const {
  const uint64_t g = layout_->granularity;
  if (bytes == 0) return g;
  return (bytes + g - 1) / g * g;
}

int Region::DeviceSlot(const char uuid[16]) {
  for (int i = 0; i < kMaxDevices; ++i) {
    Layout::Device& d = layout_->devices[i];
    uint32_t state = d.state.load();
    if (state == kFree) {
      uint32_t expected = kFree;
      if (d.state.compare_exchange_strong(expected, kClaiming)) {
        memcpy(d.uuid, uuid, 16);
        d.state.store(kReady);
        return i;
      }
      state = expected;
    }
    while (state == kClaiming) state = d.state.load();  // another process is writing the uuid
    if (memcmp(d.uuid, uuid, 16) == 0) return i;
  }
  return -1;
}

int Region::FindDevice(const char uuid[16]) const {
  for (int i = 0; i < kMaxDevices; ++i) {
    const Layout::Device& d = layout_->devices[i];
    if (d.state.load() == kReady && memcmp(d.uuid, uuid, 16) == 0) return i;
  }
  return -1;
}

int Region::device_count() const {
  int n = 0;
  for (const auto& d : layout_->devices) n += d.state.load() == kReady ? 1 : 0;
  return n;
}

void Region::DeviceUuid(int slot, char uuid[16]) const {
  memcpy(uuid, layout_->devices[slot].uuid, 16);
}
uint64_t Region::used(int device) const { return layout_->devices[device].used.load(); }
uint64_t Region::peak(int device) const { return layout_->devices[device].peak.load(); }

int Region::AttachProcess(const ProcessId& id) {
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < kMaxProcesses; ++i) {
      Layout::Process& p = layout_->processes[i];
      uint32_t expected = kFree;
      if (p.state.compare_exchange_strong(expected, kClaiming)) {
        p.pid = id.pid;
        p.start_time = id.start_time;
        p.ns_pid = id.ns_pid;
        p.view = id.view;
        for (int d = 0; d < kMaxDevices; ++d) {
          p.used[d].store(0);
          p.context[d].store(0);
        }
        p.state.store(kReady);
        return i;
      }
    }
    SweepDead();
  }
  return -1;
}

void Region::DetachProcess(int proc) {
  Layout::Process& p = layout_->processes[proc];
  uint32_t expected = kReady;
  if (!p.state.compare_exchange_strong(expected, kReclaiming)) return;
  for (int d = 0; d < kMaxDevices; ++d) {
    SubtractClamped(layout_->devices[d].used, p.used[d].exchange(0));
    p.context[d].store(0);
  }
  p.state.store(kFree);
}

ProcessId Region::process(int proc) const {
  const Layout::Process& p = layout_->processes[proc];
  if (p.state.load() != kReady && p.state.load() != kFrozen) return {};
  return {p.pid, p.start_time, p.ns_pid, p.view};
}
uint64_t Region::process_used(int proc, int device) const {
  return layout_->processes[proc].used[device].load();
}
uint64_t Region::process_context_bytes(int proc, int device) const {
  return layout_->processes[proc].context[device].load();
}

bool Region::TryReserve(int device, int proc, uint64_t bytes) {
  Layout::Device& d = layout_->devices[device];
  uint64_t cur = d.used.load();
  do {
    const uint64_t q = layout_->quota.load();
    if (cur > q || bytes > q - cur) return false;
  } while (!d.used.compare_exchange_weak(cur, cur + bytes));
  layout_->processes[proc].used[device].fetch_add(bytes);
  return true;
}

void Region::NotePeak(int device) {
  Layout::Device& d = layout_->devices[device];
  RaisePeak(d.peak, d.used.load());
}

void Region::ForceReserve(int device, int proc, uint64_t bytes, bool context_overhead) {
  Layout::Device& d = layout_->devices[device];
  RaisePeak(d.peak, d.used.fetch_add(bytes) + bytes);
  layout_->processes[proc].used[device].fetch_add(bytes);
  if (context_overhead) layout_->processes[proc].context[device].fetch_add(bytes);
}

void Region::Release(int device, int proc, uint64_t bytes, bool context_overhead) {
  SubtractClamped(layout_->processes[proc].used[device], bytes);
  if (context_overhead) SubtractClamped(layout_->processes[proc].context[device], bytes);
  SubtractClamped(layout_->devices[device].used, bytes);
}

int Region::FreezeProcesses() {
  int frozen = 0;
  for (auto& p : layout_->processes) {
    uint32_t expected = kReady;
    if (p.state.compare_exchange_strong(expected, kFrozen)) ++frozen;
  }
  return frozen;
}

int Region::ThawProcesses(const std::vector<ProcessId>& restored) {
  int bound = 0;
  for (auto& p : layout_->processes) {
    if (p.state.load() != kFrozen) continue;
    for (const ProcessId& id : restored) {
      if (id.ns_pid != p.ns_pid) continue;
      // A process that named itself in its own namespace's /proc does so again after the
      // restore, in the namespace CRIU made for it.
      const bool own_view = p.view != 0 && id.pid_namespace != 0;
      p.pid = own_view ? id.ns_pid : id.pid;
      p.view = own_view ? id.pid_namespace : 0;
      p.start_time = id.start_time;
      p.state.store(kReady);
      ++bound;
      break;
    }
  }
  return bound;
}

int Region::ReleaseFrozen() {
  int released = 0;
  for (int i = 0; i < kMaxProcesses; ++i) {
    uint32_t expected = kFrozen;
    if (!layout_->processes[i].state.compare_exchange_strong(expected, kReady)) continue;
    DetachProcess(i);
    ++released;
  }
  return released;
}

bool Region::RenameDevice(const char from[16], const char to[16]) {
  for (auto& d : layout_->devices) {
    if (d.state.load() == kReady && memcmp(d.uuid, from, 16) == 0) {
      memcpy(d.uuid, to, 16);
      return true;
    }
  }
  return false;
}

int Region::SweepDead(int wait_for_dying_ms) {
  const uint64_t deadline = MonotonicMs() + static_cast<uint64_t>(std::max(wait_for_dying_ms, 0));
  int reclaimed = 0;
  for (int i = 0; i < kMaxProcesses; ++i) {
    Layout::Process& p = layout_->processes[i];
    if (p.state.load() != kReady) continue;
    const ProcessId id{p.pid, p.start_time, p.ns_pid, p.view};
    // Only a process that is gone is reclaimed: a dying one may still be releasing.
    while (MonotonicMs() < deadline && ProcessDying(id)) usleep(2000);
    if (ProcessAlive(id)) continue;
    DetachProcess(i);
    ++reclaimed;
  }
  return reclaimed;
}

void Region::NoteRefusal(uint64_t bytes) {
  layout_->refusals.fetch_add(1);
  layout_->last_refused_bytes.store(bytes);
}
uint64_t Region::refusals() const { return layout_->refusals.load(); }
uint64_t Region::context_estimate() const { return layout_->context_estimate.load(); }
void Region::set_context_estimate(uint64_t bytes) { layout_->context_estimate.store(bytes); }
uint64_t Region::grows() const { return layout_->grow_count.load(); }

bool Region::RequestGrowth(uint64_t shortfall) {
  if (layout_->listening.load() == 0) return false;
  uint64_t want = layout_->grow_want.load();
  while (want < shortfall && !layout_->grow_want.compare_exchange_weak(want, shortfall)) {
  }
  const uint32_t seq = layout_->grow_seq.fetch_add(1) + 1;
  WakeAll(&layout_->grow_seq);
  const uint64_t deadline = MonotonicMs() + layout_->grow_wait_ms;
  for (;;) {
    const uint32_t ack = layout_->grow_ack.load();
    if (static_cast<int32_t>(ack - seq) >= 0) return true;
    const uint64_t now = MonotonicMs();
    if (now >= deadline || layout_->listening.load() == 0) return false;
    WaitOn(&layout_->grow_ack, ack, static_cast<int>(deadline - now));
  }
}

void Region::SetListening(bool listening) {
  layout_->listening.store(listening ? 1 : 0);
  if (!listening) WakeAll(&layout_->grow_ack);
}

bool Region::WaitGrowthRequest(int timeout_ms, uint64_t* shortfall, uint32_t* ticket) {
  uint32_t seq = layout_->grow_seq.load();
  if (seq == layout_->grow_ack.load()) {
    WaitOn(&layout_->grow_seq, seq, timeout_ms);
    seq = layout_->grow_seq.load();
    if (seq == layout_->grow_ack.load()) return false;
  }
  *ticket = seq;
  *shortfall = layout_->grow_want.exchange(0);
  return true;
}

void Region::AnswerGrowth(uint32_t ticket, bool grown) {
  if (grown) layout_->grow_count.fetch_add(1);
  layout_->grow_ack.store(ticket);
  WakeAll(&layout_->grow_ack);
}

}  // namespace paladin::quota
