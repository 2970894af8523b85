#include "emucuda/shared_state.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "paladin/gpu/uuid.h"

namespace paladin::emucuda {

using AtomicU64 = std::atomic<uint64_t>;
using AtomicU32 = std::atomic<uint32_t>;
static_assert(AtomicU64::is_always_lock_free && AtomicU32::is_always_lock_free,
              "the device file's atomics must be lock-free to work across processes");
static_assert(sizeof(AtomicU64) == 8 && sizeof(AtomicU32) == 4);

namespace {

constexpr uint64_t kMagic = 0x5453554d45444c50ull;       // "PLDEMUST"
constexpr uint64_t kUsageMagic = 0x5355554d45444c50ull;  // "PLDEMUUS"
constexpr int kAttachWaitMs = 2000;
// How long a charge waits for the device file's lock before it is refused: a process holds it
// for microseconds, unless it is stopped or frozen in the middle (or hostile).
constexpr int kChargeLockWaitMs = 5000;
constexpr int kMaxUsageFiles = 4096;  // read per look; a folder with more is not all counted
constexpr int kTornReadRetries = 64;

enum ReadyState : uint32_t { kNotReady = 0, kReady = 1, kReinitialising = 2 };

}  // namespace

struct SharedDevice {
  unsigned char uuid[16];
  char name[64];
  uint64_t total_bytes;
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
  SharedEvents events[kMaxDevices];
};

// One process's usage file: written whole by its process (pwrite), read whole by others (pread),
// so the checksum tells a reader that it read the record while it was being rewritten.
struct UsageRecord {
  uint64_t magic;
  uint32_t version;
  uint32_t pid;  // as the process's /proc numbers it
  uint64_t start_time;
  uint32_t view;  // the PID namespace whose /proc numbered `pid`; 0 for the host's
  uint32_t pad;
  uint64_t used_bytes[kMaxDevices];  // contexts' overhead included
  uint32_t contexts[kMaxDevices];
  uint64_t checksum;  // FNV-1a of the bytes before it
};

static_assert(sizeof(StateLayout) == 4632 && sizeof(UsageRecord) == 232,
              "the files' layouts are in docs/emucuda.md; change the version with them");

struct SharedState::UsageFile {
  std::string name;
  uid_t owner;
  UsageRecord record;
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

uint64_t Checksum(const UsageRecord& record) {
  return Fnv1a(0xcbf29ce484222325ull, &record, offsetof(UsageRecord, checksum));
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

void FillDevices(StateLayout* layout, const std::string& path,
                 const std::vector<uint64_t>& device_bytes) {
  layout->device_count.store(static_cast<uint32_t>(device_bytes.size()));
  for (int i = 0; i < kMaxDevices; ++i) {
    SharedDevice& device = layout->devices[i];
    bool present = i < static_cast<int>(device_bytes.size());
    std::memset(device.uuid, 0, sizeof(device.uuid));
    std::memset(device.name, 0, sizeof(device.name));
    device.total_bytes = present ? device_bytes[i] : 0;
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

StateLayout* MapLayout(int fd, bool writable) {
  void* map = mmap(nullptr, sizeof(StateLayout), writable ? PROT_READ | PROT_WRITE : PROT_READ,
                   MAP_SHARED, fd, 0);
  return map == MAP_FAILED ? nullptr : static_cast<StateLayout*>(map);
}

void UnmapLayout(StateLayout* layout) { munmap(layout, sizeof(StateLayout)); }

// The usage folder belongs to the file the path resolves to: a restored process whose state path
// is a link to this node's file (supervise::LinkStateFile) counts where this node's processes do.
std::string UsageDirOf(const std::string& path) {
  char resolved[PATH_MAX];
  const char* real = realpath(path.c_str(), resolved);
  return std::string(real != nullptr ? real : path.c_str()) + ".usage";
}

// Sticky and open to every user, like /tmp, less the creator's umask: an agent whose jobs run as
// users of their own makes it 1777 (supervise::ShareUsageDir).
void MakeUsageDir(const std::string& dir) {
  if (mkdir(dir.c_str(), 01777) != 0 && errno != EEXIST) {
    LogLine("cannot create the usage folder %s: %s", dir.c_str(), std::strerror(errno));
  }
}

StateLayout* CreateLayout(int fd, const std::string& path,
                          const std::vector<uint64_t>& device_bytes) {
  StateLayout* layout = nullptr;
  if (ftruncate(fd, sizeof(StateLayout)) == 0) layout = MapLayout(fd, true);
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

void SayWrongVersion(int fd, const std::string& path) {
  struct {
    uint64_t magic;
    uint32_t version;
  } head{};
  if (pread(fd, &head, sizeof(head), 0) == static_cast<ssize_t>(sizeof(head)) &&
      head.magic == kMagic) {
    LogLine(
        "%s is a device-state file of version %u; this driver reads version %u: remove it "
        "when no process uses it (an agent's is DATA/emu.state)",
        path.c_str(), head.version, kStateVersion);
  } else {
    LogLine("%s is not a device-state file; remove it", path.c_str());
  }
}

// Waits (bounded) for the file to reach its full size, as its creator makes it.
bool WaitForSize(int fd, const std::string& path, uint64_t deadline_ms) {
  while (true) {
    struct stat info {};
    if (fstat(fd, &info) != 0) return false;
    if (info.st_size == static_cast<off_t>(sizeof(StateLayout))) return true;
    if (info.st_size != 0) {
      SayWrongVersion(fd, path);
      return false;
    }
    if (MonotonicMs() > deadline_ms) {
      LogLine("%s was never completed by the process creating it; remove it", path.c_str());
      return false;
    }
    SleepMs(1);
  }
}

bool WaitForReady(StateLayout* layout, int fd, const std::string& path, uint64_t deadline_ms) {
  while (layout->ready.load(std::memory_order_acquire) != kReady) {
    if (MonotonicMs() > deadline_ms) {
      LogLine("%s was never completed by the process creating it; remove it", path.c_str());
      return false;
    }
    SleepMs(1);
  }
  if (layout->magic != kMagic || layout->version != kStateVersion ||
      layout->layout_bytes != sizeof(StateLayout)) {
    SayWrongVersion(fd, path);
    return false;
  }
  return true;
}

StateLayout* AttachLayout(int fd, const std::string& path, bool writable) {
  uint64_t deadline = MonotonicMs() + kAttachWaitMs;
  StateLayout* layout = WaitForSize(fd, path, deadline) ? MapLayout(fd, writable) : nullptr;
  if (layout != nullptr && !WaitForReady(layout, fd, path, deadline)) {
    UnmapLayout(layout);
    layout = nullptr;
  }
  return layout;
}

// The device file's flock: every check-then-add of capacity holds it exclusively, so two
// processes never both take the last free bytes. Any process that can read the file can take it,
// so nobody can be locked out; one that holds it too long makes charges fail, not hang.
class DeviceLock {
 public:
  DeviceLock(int fd, int wait_ms) : fd_(fd) {
    const uint64_t deadline = MonotonicMs() + wait_ms;
    while (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EINTR) continue;
      if (errno != EWOULDBLOCK || MonotonicMs() > deadline) return;
      SleepMs(1);
    }
    held_ = true;
  }
  ~DeviceLock() {
    if (held_) flock(fd_, LOCK_UN);
  }
  DeviceLock(const DeviceLock&) = delete;
  DeviceLock& operator=(const DeviceLock&) = delete;
  bool held() const { return held_; }

 private:
  int fd_;
  bool held_ = false;
};

// A usage file's name: "<uid>.<16 hex digits>", the uid owning it and a random part no other
// process can guess (so none can take the name first).
bool ParseUsageName(const char* name, uid_t* uid) {
  char* end = nullptr;
  errno = 0;
  unsigned long value = std::strtoul(name, &end, 10);
  if (end == name || *end != '.' || errno != 0 || value > UINT32_MAX) return false;
  if (std::strlen(end + 1) != 16 || std::strspn(end + 1, "0123456789abcdef") != 16) return false;
  *uid = static_cast<uid_t>(value);
  return true;
}

// Reads one usage file; false when it is not one: not a regular file of the user its name names
// with one link, or not a whole record of this version.
bool ReadUsageFile(int dir_fd, const char* name, uid_t owner, UsageRecord* record) {
  int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat info {};
  bool ok = fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_uid == owner &&
            info.st_nlink == 1 && info.st_size == static_cast<off_t>(sizeof(UsageRecord));
  for (int attempt = 0; ok && attempt < kTornReadRetries; ++attempt) {
    ok = pread(fd, record, sizeof(*record), 0) == static_cast<ssize_t>(sizeof(*record)) &&
         record->magic == kUsageMagic && record->version == kStateVersion;
    if (ok && record->checksum == Checksum(*record)) break;
    if (attempt + 1 == kTornReadRetries) ok = false;
  }
  close(fd);
  return ok;
}

HostProcess IdentityOf(const UsageRecord& record) {
  return {record.pid, record.start_time, record.view};
}

// True when `pid`, as this process names it, runs as `owner`: a usage file can only speak for
// processes of its own user.
bool RunsAs(uint32_t pid, uid_t owner) {
  std::string status;
  if (!ReadSmallFile("/proc/" + std::to_string(pid) + "/status", &status)) return false;
  size_t at = status.find("\nUid:");
  if (at == std::string::npos) return false;
  const char* p = status.c_str() + at + 5;
  char* end = nullptr;
  std::strtoul(p, &end, 10);  // the real uid; the file is made with the effective one
  return std::strtoul(end, nullptr, 10) == owner;
}

std::string RandomHex16() {
  uint64_t value = 0;
  if (getrandom(&value, sizeof(value), 0) != static_cast<ssize_t>(sizeof(value))) {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    value = Fnv1a(static_cast<uint64_t>(ts.tv_nsec) ^ getpid(), &ts, sizeof(ts));
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016" PRIx64, value);
  return text;
}

}  // namespace

SharedState* SharedState::Attach(const std::string& path,
                                 const std::vector<uint64_t>& device_bytes) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      StateLayout* layout = CreateLayout(fd, path, device_bytes);
      if (layout == nullptr) {
        close(fd);
        return nullptr;
      }
      const std::string usage_dir = UsageDirOf(path);
      MakeUsageDir(usage_dir);
      return new SharedState(path, usage_dir, layout, fd, true);
    }
    if (errno != EEXIST) break;
    bool writable = true;
    fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0 && (errno == EACCES || errno == EPERM || errno == EROFS)) {
      writable = false;  // another user's devices: used, never changed
      fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0 && errno == ENOENT) continue;  // removed meanwhile: try to create it again
    if (fd < 0) break;
    StateLayout* layout = AttachLayout(fd, path, writable);
    if (layout == nullptr) {
      close(fd);
      return nullptr;
    }
    const std::string usage_dir = UsageDirOf(path);
    MakeUsageDir(usage_dir);
    auto* state = new SharedState(path, usage_dir, layout, fd, writable);
    state->MatchDevices(device_bytes);
    return state;
  }
  LogLine("cannot open the device-state file %s: %s", path.c_str(), std::strerror(errno));
  return nullptr;
}

SharedState::SharedState(std::string path, std::string usage_dir, StateLayout* layout, int fd,
                         bool writable)
    : path_(std::move(path)),
      usage_dir_(std::move(usage_dir)),
      layout_(layout),
      fd_(fd),
      writable_(writable) {}

SharedState::~SharedState() {
  UnmapLayout(layout_);
  close(fd_);
  if (own_fd_ >= 0) close(own_fd_);
  delete own_;
}

std::vector<uint64_t> SharedState::DeviceBytes() const {
  std::vector<uint64_t> bytes(device_count());
  for (int i = 0; i < device_count(); ++i) bytes[i] = total(i);
  return bytes;
}

void SharedState::MatchDevices(const std::vector<uint64_t>& device_bytes) {
  if (DeviceBytes() == device_bytes) return;
  if (!writable_) {
    LogLine(
        "PALADIN_EMU_GPUS asks for %s but %s, which this user may not change, has %s; using "
        "those",
        DescribeDevices(device_bytes).c_str(), path_.c_str(),
        DescribeDevices(DeviceBytes()).c_str());
    return;
  }
  DeviceLock lock(fd_, kAttachWaitMs);
  uint32_t expected = kReady;
  if (!lock.held() || !layout_->ready.compare_exchange_strong(expected, kReinitialising)) {
    WaitForReady(layout_, fd_, path_, MonotonicMs() + kAttachWaitMs);
    return;  // another process re-initialised it; use what it made
  }
  if (!ReadUsage(true).empty()) {
    LogLine("PALADIN_EMU_GPUS asks for %s but %s is in use with %s; using those",
            DescribeDevices(device_bytes).c_str(), path_.c_str(),
            DescribeDevices(DeviceBytes()).c_str());
  } else {
    FillDevices(layout_, path_, device_bytes);
  }
  layout_->ready.store(kReady, std::memory_order_release);
}

int SharedState::device_count() const {
  uint32_t count = layout_->device_count.load();
  return count > kMaxDevices ? kMaxDevices : static_cast<int>(count);
}

uint64_t SharedState::total(int device) const { return layout_->devices[device].total_bytes; }

std::vector<SharedState::UsageFile> SharedState::ReadUsage(bool live_only) const {
  std::vector<UsageFile> files;
  DIR* dir = opendir(usage_dir_.c_str());
  if (dir == nullptr) return files;
  while (dirent* entry = readdir(dir)) {
    UsageFile file{entry->d_name, 0, {}};
    if (!ParseUsageName(entry->d_name, &file.owner) ||
        !ReadUsageFile(dirfd(dir), entry->d_name, file.owner, &file.record)) {
      continue;
    }
    if (live_only && !HostProcessAlive(IdentityOf(file.record))) {
      // The driver frees a process's memory when it ends. Only its user (or root) may remove
      // the file; everyone else just leaves it out.
      unlinkat(dirfd(dir), entry->d_name, 0);
      continue;
    }
    files.push_back(file);
    if (files.size() == kMaxUsageFiles) break;
  }
  closedir(dir);
  return files;
}

uint64_t SharedState::Counted(const UsageRecord& record, int device) const {
  const uint64_t bytes = record.used_bytes[device];
  return bytes < total(device) ? bytes : total(device);
}

uint64_t SharedState::UsedBy(const std::vector<UsageFile>& files, int device) const {
  uint64_t sum = 0;
  for (const UsageFile& file : files) {
    const uint64_t bytes = Counted(file.record, device);
    sum = bytes > UINT64_MAX - sum ? UINT64_MAX : sum + bytes;
  }
  return sum;
}

uint64_t SharedState::used(int device) const { return UsedBy(ReadUsage(true), device); }

uint64_t SharedState::free(int device) const {
  const uint64_t total_bytes = total(device);
  const uint64_t used_bytes = used(device);
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

bool SharedState::WriteOwn() {
  own_->checksum = Checksum(*own_);
  return pwrite(own_fd_, own_, sizeof(*own_), 0) == static_cast<ssize_t>(sizeof(*own_));
}

SharedState::JoinResult SharedState::Join(const HostProcess& self, const uint64_t* bytes,
                                          const uint32_t* contexts) {
  std::lock_guard<std::mutex> own_lock(own_mu_);
  if (own_ != nullptr) return JoinResult::kJoined;
  std::optional<DeviceLock> lock;  // held until the file is in place: a check-then-add
  if (bytes != nullptr) {
    lock.emplace(fd_, kChargeLockWaitMs);
    if (!lock->held()) return JoinResult::kNoRoom;
    const std::vector<UsageFile> files = ReadUsage(true);
    for (int d = 0; d < device_count(); ++d) {
      if (bytes[d] > total(d) || UsedBy(files, d) > total(d) - bytes[d]) {
        return JoinResult::kNoRoom;
      }
    }
  }
  auto* record = new UsageRecord{};
  record->magic = kUsageMagic;
  record->version = kStateVersion;
  record->pid = self.pid;
  record->start_time = self.start_time;
  record->view = self.view;
  for (int d = 0; d < kMaxDevices; ++d) {
    record->used_bytes[d] = bytes != nullptr ? bytes[d] : 0;
    record->contexts[d] = contexts != nullptr ? contexts[d] : 0;
  }
  // Written whole under a name readers skip, then renamed: no reader sees a partial record.
  const std::string name = std::to_string(geteuid()) + "." + RandomHex16();
  const std::string temp = usage_dir_ + "/." + name;
  own_ = record;
  own_fd_ = open(temp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (own_fd_ >= 0 && fchmod(own_fd_, 0644) == 0 && WriteOwn() &&
      rename(temp.c_str(), (usage_dir_ + "/" + name).c_str()) == 0) {
    own_name_ = name;
    return JoinResult::kJoined;
  }
  LogLine(
      "cannot create a usage file in %s: %s (each user of the devices needs to create one "
      "there: an agent makes the folder 1777)",
      usage_dir_.c_str(), std::strerror(errno));
  if (own_fd_ >= 0) {
    close(own_fd_);
    unlink(temp.c_str());
  }
  own_fd_ = -1;
  own_ = nullptr;
  delete record;
  return JoinResult::kNoUsageFile;
}

bool SharedState::TryCharge(int device, uint64_t bytes) {
  std::lock_guard<std::mutex> own_lock(own_mu_);
  if (own_ == nullptr) return false;
  DeviceLock lock(fd_, kChargeLockWaitMs);
  if (!lock.held()) {
    LogLine("the lock of %s was held by another process for %d s: allocation refused",
            path_.c_str(), kChargeLockWaitMs / 1000);
    return false;
  }
  // Most charges fit without asking /proc whether every other process is still alive.
  for (bool live_only : {false, true}) {
    const uint64_t in_use = UsedBy(ReadUsage(live_only), device);
    if (bytes <= total(device) && in_use <= total(device) - bytes) {
      own_->used_bytes[device] += bytes;
      WriteOwn();  // in place, over a file of full size: nothing to run out of
      return true;
    }
  }
  return false;
}

void SharedState::Uncharge(int device, uint64_t bytes) {
  std::lock_guard<std::mutex> own_lock(own_mu_);
  if (own_ == nullptr) return;
  uint64_t& used_bytes = own_->used_bytes[device];
  used_bytes = used_bytes >= bytes ? used_bytes - bytes : 0;
  WriteOwn();
}

void SharedState::AddContexts(int device, int delta) {
  std::lock_guard<std::mutex> own_lock(own_mu_);
  if (own_ == nullptr) return;
  own_->contexts[device] += static_cast<uint32_t>(delta);
  WriteOwn();
}

void SharedState::Leave() {
  std::lock_guard<std::mutex> own_lock(own_mu_);
  if (own_ == nullptr) return;
  unlink((usage_dir_ + "/" + own_name_).c_str());
  close(own_fd_);
  own_fd_ = -1;
  delete own_;
  own_ = nullptr;
}

std::vector<SharedState::ProcessUsage> SharedState::ProcessesOn(int device) const {
  std::vector<ProcessUsage> usage;
  for (const UsageFile& file : ReadUsage(true)) {
    ProcessUsage entry{0, Counted(file.record, device), file.record.contexts[device]};
    if (entry.bytes == 0 && entry.contexts == 0) continue;
    // A process of another PID namespace's view is reported by the pid this caller can name.
    entry.pid = PidSeenHere(IdentityOf(file.record));
    if (entry.pid != 0 && RunsAs(entry.pid, file.owner)) usage.push_back(entry);
  }
  return usage;
}

uint64_t SharedState::PostEvent(int device, uint64_t type, uint64_t data) {
  if (!writable_) return 0;
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
