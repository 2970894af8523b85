// Per-job users: every workload runs as a uid of its own, taken from a range this host gives to
// Paladin, in the manner of systemd's dynamic users. The allocations are files in a host-wide
// folder (one per uid, naming the job that owns it and who holds it), so that a restarted agent,
// or a second agent of the same host, never hands out a uid that a live job still runs as.
//
// A uid belongs to a job, not to one copy of it: a checkpoint restores the job's processes with
// the uid they had (CRIU restores credentials from the image), so a restore or a received
// migration reserves that same uid here, and two copies of one job on one host (the source and
// destination of a move) share it. Another job can never hold it at the same time.
//
// Thread safety: every method may be called from any thread and any process; each takes an
// exclusive lock on the folder's lock file for its whole read-modify-write.
#ifndef PALADIN_AGENT_UIDS_H_
#define PALADIN_AGENT_UIDS_H_

#include <sys/types.h>

#include <cstdint>
#include <set>
#include <string>

#include "paladin/base/status.h"

namespace paladin::agent {

struct UidRange {
  uint32_t first = 0;
  uint32_t last = 0;  // inclusive
};

// Paladin's default: 0x70000000 + 64Ki. Above the ranges systemd hands to users, dynamic users
// (61184-65519) and containers (524288-1879048191), below 2^31 (tools that keep ids signed), and
// clear of subordinate-id ranges, which start at 100000 and grow by 65536 per user.
inline constexpr UidRange kDefaultUidRange = {1879048192u, 1879113727u};
inline constexpr const char* kDefaultUidDir = "/run/paladin/uids";

// "FIRST-LAST" (inclusive). Refuses root, nobody (65534), 16- and 32-bit -1 and a reversed range.
StatusOr<UidRange> ParseUidRange(const std::string& text);
std::string FormatUidRange(const UidRange& range);

class UidPool {
 public:
  UidPool(UidRange range, std::string dir) : range_(range), dir_(std::move(dir)) {}
  UidPool(const UidPool&) = delete;
  UidPool& operator=(const UidPool&) = delete;

  // Creates the folder (root's, 0700).
  Status Open();
  const UidRange& range() const { return range_; }

  // A free uid for `job`, held by `holder` (unique per copy, e.g. "node/job/epoch"). It starts
  // from a hash of the job's id, so a job tends to get the same uid everywhere, and skips uids
  // that are another job's (unless stale: Stale), that a user or group of this host has, or that
  // a process runs as.
  // An exhausted range is an error that says so.
  StatusOr<uint32_t> Allocate(const std::string& job, const std::string& holder);
  // Holds `uid` for `job` (a restored copy keeps its uid): refused when it is outside the range,
  // another job's, a user or group of this host, or a process's that is not of this job.
  Status Reserve(uint32_t uid, const std::string& job, const std::string& holder);
  // Drops `holder`'s hold; the uid is free once no holder is left.
  void Free(uint32_t uid, const std::string& holder);
  // Drops the holds of holders that start with `prefix` and are not in `live` (what a previous
  // agent held for jobs that have gone meanwhile). Returns how many it dropped.
  int Recover(const std::string& prefix, const std::set<std::string>& live);
  // The job that holds `uid` ("" when it is free).
  std::string Owner(uint32_t uid);

 private:
  struct Entry {
    std::string job;
    std::set<std::string> holders;
  };
  int Lock() const;  // the lock file's descriptor, locked; -1 on failure
  bool Read(uint32_t uid, Entry* entry) const;
  Status Write(uint32_t uid, const Entry& entry) const;
  // No process runs as `uid` and no holder's agent still has a record of its job: a holder that
  // died with its data, or was killed between forgetting a job and freeing its uid.
  bool Stale(uint32_t uid, const Entry& entry, const std::set<uint32_t>& running) const;

  UidRange range_;
  std::string dir_;
};

// The uids processes run as: the real, effective, saved or filesystem uid of any of them.
std::set<uint32_t> UidsInUse();
// The real uid of `pid` (-1 when it is gone).
int64_t UidOf(pid_t pid);

}  // namespace paladin::agent

#endif  // PALADIN_AGENT_UIDS_H_
