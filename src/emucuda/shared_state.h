// The emulated devices' state, in two kinds of files so that no process can write what belongs
// to another user's processes or to the devices (docs/emucuda.md, "Processes and the state"):
//   - the device file (PALADIN_EMU_STATE): the devices (UUID, name, capacity) and their event
//     rings, written only by its owner (the node agent, root) and mapped read-only by everyone
//     else; its flock serialises every check-then-add of capacity across processes;
//   - one usage file per process in the folder next to it (STATE.usage, sticky): that process's
//     identity, bytes and contexts per device, written only by the process (the file is its
//     user's, mode 0644) and read by everyone with pread, never mapped.
// A device's used bytes are the sum over the usage files of live processes, each file counting
// at most the device's capacity.
//
// Thread safety: every method may be called from any thread of any process.
#ifndef PALADIN_EMUCUDA_SHARED_STATE_H_
#define PALADIN_EMUCUDA_SHARED_STATE_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "emucuda/config.h"
#include "emucuda/host_process.h"

namespace paladin::emucuda {

inline constexpr int kEventRing = 8;  // events kept per device for readers to catch up
inline constexpr uint32_t kStateVersion = 4;

struct StateLayout;  // shared_state.cc
struct UsageRecord;  // shared_state.cc

class SharedState {
 public:
  struct ProcessUsage {
    uint32_t pid;
    uint64_t bytes;  // including its contexts' overhead
    uint32_t contexts;
  };
  enum class JoinResult { kJoined, kNoRoom, kNoUsageFile };

  // Maps the device file at `path`, creating it with `device_bytes` (mode 0644, and its usage
  // folder) when it does not exist; read-only when this process may not write it. Waits up to
  // about 2 s for another process that is creating it. Returns null, after one line on stderr,
  // when the file cannot be used.
  static SharedState* Attach(const std::string& path, const std::vector<uint64_t>& device_bytes);
  ~SharedState();  // unmaps the file and closes this process's usage file (see Leave)
  SharedState(const SharedState&) = delete;
  SharedState& operator=(const SharedState&) = delete;

  const std::string& path() const { return path_; }
  const std::string& usage_dir() const { return usage_dir_; }
  // True when this process may write the device file (post events, re-initialise it).
  bool writable() const { return writable_; }
  int device_count() const;
  uint64_t total(int device) const;
  // What the live processes count on `device`. The usage files of processes known to be gone are
  // left out, and removed where this process may (its own user's files; root: all), as the driver
  // frees a process's memory when it ends.
  uint64_t used(int device) const;
  uint64_t free(int device) const;              // total - used, never negative
  const unsigned char* uuid(int device) const;  // 16 bytes
  const char* name(int device) const;
  // The device with this UUID; -1 when there is none.
  int FindDevice(const unsigned char* uuid) const;

  // Creates this process's usage file counting `bytes` and `contexts` per device (kMaxDevices
  // entries each; null: nothing), when every device has room for them: all or nothing.
  JoinResult Join(const HostProcess& self, const uint64_t* bytes, const uint32_t* contexts);
  // Counts `bytes` on `device` for this process when they fit; false (nothing counted) otherwise.
  bool TryCharge(int device, uint64_t bytes);
  void Uncharge(int device, uint64_t bytes);
  void AddContexts(int device, int delta);
  // Removes this process's usage file: gives back everything it counts.
  void Leave();
  // The live processes that hold bytes or contexts on `device`, each listed only when the
  // process it names belongs to the user who owns its usage file.
  std::vector<ProcessUsage> ProcessesOn(int device) const;

  // Device events (NVML's Xid and ECC events), numbered from 1 per device. Every process mapping
  // the file sees them; each reader keeps the number of the last one it has read.
  struct Event {
    uint64_t seq;
    uint64_t type;  // NVML event type bit
    uint64_t data;  // the Xid, for an Xid event
  };
  struct EventRead {
    std::vector<Event> events;  // in order
    uint64_t next = 0;          // pass as `after` next time
    uint64_t lost = 0;          // overwritten before they were read
  };
  // Posts an event on `device`; returns its number, 0 when this process may not write the file.
  uint64_t PostEvent(int device, uint64_t type, uint64_t data);
  // The number of the newest event on `device` (0: none yet).
  uint64_t LastEvent(int device) const;
  // The events on `device` numbered after `after`.
  EventRead EventsAfter(int device, uint64_t after) const;

 private:
  struct UsageFile;  // one usage file as read: its name, owner and record
  SharedState(std::string path, std::string usage_dir, StateLayout* layout, int fd, bool writable);
  std::vector<uint64_t> DeviceBytes() const;
  // Re-initialises the devices to `device_bytes` when they differ, this process may write the
  // file and no live process uses it.
  void MatchDevices(const std::vector<uint64_t>& device_bytes);
  // The usage files as they read now; `live_only`: without those of processes known to be gone
  // (removed where this process may).
  std::vector<UsageFile> ReadUsage(bool live_only) const;
  uint64_t Counted(const UsageRecord& record, int device) const;
  uint64_t UsedBy(const std::vector<UsageFile>& files, int device) const;
  bool WriteOwn();  // under own_mu_

  std::string path_;
  std::string usage_dir_;
  StateLayout* layout_;
  int fd_;  // the device file, held for its flock
  bool writable_;

  std::mutex own_mu_;  // this process's usage record and file; held with the device file's flock
  UsageRecord* own_ = nullptr;
  int own_fd_ = -1;
  std::string own_name_;
};

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", lowercase hex.
std::string UuidString(const unsigned char* uuid);

}  // namespace paladin::emucuda

#endif  // PALADIN_EMUCUDA_SHARED_STATE_H_
