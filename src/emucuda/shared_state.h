// The shared device-state file: the emulated devices (UUID, name, capacity, bytes in use) and a
// table of the processes using them, mapped MAP_SHARED by every process that uses the same path.
// All fields that change are lock-free atomics, so a process that dies at any instant leaves no
// lock held; what it counted is given back by SweepDead(). Layout: docs/emucuda.md.
//
// Thread safety: every method may be called from any thread of any process mapping the file.
#ifndef PALADIN_EMUCUDA_SHARED_STATE_H_
#define PALADIN_EMUCUDA_SHARED_STATE_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "emucuda/config.h"
#include "emucuda/host_process.h"

namespace paladin::emucuda {

inline constexpr int kMaxProcesses = 256;
inline constexpr int kEventRing = 8;  // events kept per device for readers to catch up
inline constexpr uint32_t kStateVersion = 3;

struct StateLayout;  // shared_state.cc

class SharedState {
 public:
  struct ProcessUsage {
    uint32_t pid;
    uint64_t bytes;  // including its contexts' overhead
    uint32_t contexts;
  };

  // Maps the file at `path`, creating it with `device_bytes` when it does not exist. Waits up to
  // about 2 s for another process that is creating it. Returns null, after one line on stderr,
  // when the file cannot be used.
  static SharedState* Attach(const std::string& path, const std::vector<uint64_t>& device_bytes);
  ~SharedState();  // unmaps the file
  SharedState(const SharedState&) = delete;
  SharedState& operator=(const SharedState&) = delete;

  const std::string& path() const { return path_; }
  int device_count() const;
  uint64_t total(int device) const;
  uint64_t used(int device) const;
  uint64_t free(int device) const;              // total - used, never negative
  const unsigned char* uuid(int device) const;  // 16 bytes
  const char* name(int device) const;
  // The device with this UUID; -1 when there is none.
  int FindDevice(const unsigned char* uuid) const;

  // Counts `bytes` on `device` when they fit; false (nothing counted) otherwise.
  bool TryReserve(int device, uint64_t bytes);
  void Release(int device, uint64_t bytes);

  // Claims a free process slot for `self`; -1 when the table is full.
  int ClaimSlot(const HostProcess& self);
  void AddToSlot(int slot, int device, uint64_t bytes);
  void SubtractFromSlot(int slot, int device, uint64_t bytes);
  void AddContexts(int slot, int device, int delta);
  // Gives back everything the slot counts and frees it.
  void ReleaseSlot(int slot);
  // Frees the slots of processes that no longer exist, giving their bytes back to the devices.
  void SweepDead();
  // The live processes that hold bytes or contexts on `device`.
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
  // Posts an event on `device`; returns its number.
  uint64_t PostEvent(int device, uint64_t type, uint64_t data);
  // The number of the newest event on `device` (0: none yet).
  uint64_t LastEvent(int device) const;
  // The events on `device` numbered after `after`.
  EventRead EventsAfter(int device, uint64_t after) const;

 private:
  SharedState(std::string path, StateLayout* layout) : path_(std::move(path)), layout_(layout) {}
  std::vector<uint64_t> DeviceBytes() const;
  bool HasLiveProcess() const;
  // Re-initialises the devices to `device_bytes` when they differ and no process uses them.
  void MatchDevices(const std::vector<uint64_t>& device_bytes);

  std::string path_;
  StateLayout* layout_;
};

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", lowercase hex.
std::string UuidString(const unsigned char* uuid);

}  // namespace paladin::emucuda

#endif  // PALADIN_EMUCUDA_SHARED_STATE_H_
