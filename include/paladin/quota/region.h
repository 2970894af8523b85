// The accounting region: one small shared-memory file per workload, created by whatever launches
// the workload (`paladin run`, the node agent) and mapped by every process of the workload through
// the interposer. It holds the workload's GPU-memory quota (per GPU), an optional ceiling up to
// which the launcher may grow the quota on demand, and what each process has allocated on each
// GPU. All updates are lock-free atomics on the shared mapping, so a process that dies in the
// middle of an update never leaves a lock held; its bytes are reclaimed by SweepDead().
//
// The layout is versioned and documented in docs/formats/quota-region.md. This code is compiled
// into the interposer as well as into Paladin's own programs: it uses no exceptions, no
// sanitizer-only facilities and nothing beyond libc and the C++ standard library.
//
// Thread safety: every method may be called from any thread of any process mapping the region.
#ifndef PALADIN_QUOTA_REGION_H_
#define PALADIN_QUOTA_REGION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "paladin/base/process.h"

namespace paladin::quota {

inline constexpr int kMaxDevices = 16;
inline constexpr int kMaxProcesses = 256;
inline constexpr uint32_t kRegionVersion = 1;
inline constexpr uint64_t kDefaultGranularity = 2ull << 20;  // 2 MiB, the driver's large page

struct RegionSettings {
  uint64_t quota_bytes = 0;    // per GPU the workload uses
  uint64_t ceiling_bytes = 0;  // 0: the quota never grows on demand
  uint64_t granularity = kDefaultGranularity;
  // How long a refused allocation waits for the launcher's answer. It answers in milliseconds;
  // a loaded machine can hold its thread back for seconds (2 s was seen to fall short), and a
  // wait of a few seconds costs less than an allocation refused for want of an answer.
  uint32_t grow_wait_ms = 10000;
};

// A process's identity (paladin/base/process.h), which the region records per process.
using base::HostPidOf;
using base::OwnProcView;
using base::ProcessAlive;
using base::ProcessDying;
using base::ProcessId;
using base::ProcessIdOf;
using base::SelfProcessId;

class Region {
 public:
  struct Layout;  // the shared layout (region.cc, docs/formats/quota-region.md)

  // Creates the file (which must not exist) and maps it. Returns null and sets *error on failure.
  static std::unique_ptr<Region> Create(const std::string& path, const RegionSettings& settings,
                                        std::string* error);
  // Maps an existing region. Refuses a file that is not a region of this version.
  static std::unique_ptr<Region> Open(const std::string& path, std::string* error);
  // A region in this process's memory only (used when no launcher created one).
  static std::unique_ptr<Region> CreatePrivate(const RegionSettings& settings);

  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  const std::string& path() const { return path_; }

  uint64_t quota() const;
  uint64_t ceiling() const;
  uint64_t granularity() const;
  uint32_t grow_wait_ms() const;
  // Sets the quota. Lowering it below current use refuses new allocations; nothing is freed.
  void SetQuota(uint64_t bytes);
  void SetCeiling(uint64_t bytes);
  // Rounds up to the granularity (what an allocation of `bytes` is counted as).
  uint64_t Rounded(uint64_t bytes) const;

  // The slot for the GPU with this 16-byte UUID, claimed on first use; -1 when all are taken.
  int DeviceSlot(const char uuid[16]);
  // The slot of a GPU already in the region, or -1.
  int FindDevice(const char uuid[16]) const;
  int device_count() const;  // slots claimed so far
  void DeviceUuid(int slot, char uuid[16]) const;
  uint64_t used(int device) const;
  uint64_t peak(int device) const;

  // Registers a process of the workload; -1 when the table is full (after sweeping the dead).
  int AttachProcess(const ProcessId& id);
  // Gives back everything the process still has counted (its driver frees it all at exit).
  void DetachProcess(int proc);
  ProcessId process(int proc) const;
  uint64_t process_used(int proc, int device) const;
  uint64_t process_context_bytes(int proc, int device) const;

  // Counts `bytes` for `proc` on `device` if the device's total stays within the quota.
  bool TryReserve(int device, int proc, uint64_t bytes);
  // Raises the device's peak to its current use (call once reserved bytes are really kept).
  void NotePeak(int device);
  // Counts `bytes` whatever the quota (a context's overhead, once the context exists).
  void ForceReserve(int device, int proc, uint64_t bytes, bool context_overhead);
  void Release(int device, int proc, uint64_t bytes, bool context_overhead);
  // Reclaims the bytes of processes that have exited; returns how many were reclaimed. With
  // `wait_for_dying_ms` > 0 it first waits, up to that long, for the processes that are killed
  // but still exiting (a SIGKILL pending, or in exit) to be gone: a killed process that frees a
  // large address space keeps its bytes counted until its exit ends.
  int SweepDead(int wait_for_dying_ms = 0);

  // --- checkpoint and restore ---
  // Marks every live process as in a checkpoint: its bytes stay counted, no sweep reclaims them.
  int FreezeProcesses();
  // Binds frozen slots to the restored processes (matched by namespace pid); returns how many.
  int ThawProcesses(const std::vector<ProcessId>& restored);
  // Gives back the bytes of processes still frozen (a checkpoint that will not be restored here).
  int ReleaseFrozen();
  // A restore onto another GPU: the device's counters follow it.
  bool RenameDevice(const char from[16], const char to[16]);

  // Refusal and growth statistics.
  void NoteRefusal(uint64_t bytes);
  uint64_t refusals() const;
  uint64_t grows() const;
  // What a context of this workload costs, as measured by the first one (0: not yet measured).
  uint64_t context_estimate() const;
  void set_context_estimate(uint64_t bytes);

  // --- on-demand growth: the workload side ---
  // Asks the launcher for `shortfall` more bytes and waits up to grow_wait_ms for its answer.
  // Returns false at once when no launcher is listening (a region created with a ceiling above
  // its quota listens from its creation: its launcher answers once its grower runs).
  bool RequestGrowth(uint64_t shortfall);
  // --- the launcher side ---
  void SetListening(bool listening);
  // Waits up to timeout_ms for requests; returns true with the largest shortfall asked for and a
  // ticket that AnswerGrowth acknowledges (every request made up to then).
  bool WaitGrowthRequest(int timeout_ms, uint64_t* shortfall, uint32_t* ticket);
  // Answers the requests covered by `ticket`, after raising the quota (grown) or not.
  void AnswerGrowth(uint32_t ticket, bool grown);

 private:
  Region(std::string path, Layout* layout, size_t size, bool owns_memory);
  std::string path_;
  Layout* layout_;
  size_t size_;
  bool private_memory_;
};

}  // namespace paladin::quota

#endif  // PALADIN_QUOTA_REGION_H_
