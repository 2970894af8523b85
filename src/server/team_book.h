// The control plane's teams: every TeamRecord the server keeps (quotas, priority, usage) by name,
// which changed since the last write to the store, and the one rule of the team quotas. Control
// owns one and is its only user.
//
// - Lookup: Find by name; FindOrAdd makes the record of a team first named (marked dirty);
//   iteration in name order. Teams are never removed.
// - Use: InUse is what a team holds, what its quotas count: its jobs that hold GPUs (GPUs, and
//   GPU memory as quota x GPUs, AskOf) and its Kubernetes pods by cluster (the PodsOf given at
//   construction: PodBook::TeamHeld in the server).
// - Refusal: the one rule of max_gpus and max_gpu_mem, for a job and for a gang's ranks together:
//   refused when what is in use plus what is asked is more than the quota (GPUs first, then
//   bytes); exactly at the quota fits. A team with no record, or no quota, refuses nothing.
// - Ever: NeverFits, a gang's ranks together against the quotas alone (nothing in use) at
//   submission, so that a gang that can never run is refused then.
// - Usage: what the team's jobs did (submitted, queued, held GPUs), added to its record, which
//   the next Flush writes; AddHeld is the one rule of held usage, also for views that add the
//   time since the last pass.
// - Writes: MarkDirty says a team's record must reach the store with the next Flush; Dirty lists
//   what the Flush writes, ClearDirty forgets it once written.
//
// Thread safety: none; Control calls it under its lock. PodsOf takes the pod book's own lock. No
// I/O, no clock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "job_table.h"
#include "model.h"
#include "pods.h"
#include "write_set.h"

namespace paladin::server {

// What a job asks of its team's quotas (or a gang's ranks together): GPUs, and GPU memory as
// quota x GPUs.
struct TeamAsk {
  int64_t gpus = 0;
  int64_t bytes = 0;
};
TeamAsk AskOf(const JobRecord& j);

// What a team holds, what its quotas count.
struct TeamUse {
  int64_t job_gpus = 0;
  int64_t job_bytes = 0;
  std::map<std::string, PodsHeld> pods;  // by cluster
  int64_t pod_gpus = 0;                  // over every cluster
  int64_t pod_bytes = 0;
};

class TeamBook {
 public:
  using Map = std::map<std::string, TeamRecord>;
  // What the team's Kubernetes pods hold, by cluster; empty: none.
  using PodsOf = std::function<std::map<std::string, PodsHeld>(const std::string& team)>;

  explicit TeamBook(PodsOf pods) : pods_(std::move(pods)) {}
  TeamBook(const TeamBook&) = delete;
  TeamBook& operator=(const TeamBook&) = delete;

  // The records read back from the store at start-up (nothing marked dirty).
  void Load(std::vector<TeamRecord> teams);

  const TeamRecord* Find(const std::string& name) const;
  // The team of that name, made (no quota, priority 0) and marked dirty when there is none. The
  // reference stays valid (teams are never erased).
  TeamRecord& FindOrAdd(const std::string& name);

  // What `team` holds now: its jobs in JOBS that hold a GPU, and its pods.
  TeamUse InUse(const std::string& team, const JobTable& jobs) const;
  // The team's quota refusal for asking `ask` more ("" when it fits, or when the team has no
  // record or no quota), its reason ending in ", " + `asker` + " needs ...".
  std::string Refusal(const std::string& team, const TeamAsk& ask, const std::string& asker,
                      const JobTable& jobs) const;
  // The rule itself, over a use already counted.
  static std::string Refusal(const TeamRecord& t, const TeamUse& use, const TeamAsk& ask,
                             const std::string& asker);

  // Why `ask` could never fit the team's quotas, whatever it held ("" when it could, or the
  // team has no record): "<asker> needs N GPUs, more than team T's quota of M", or "... N bytes
  // of GPU memory, more than team T's quota" (an ask of 0 bytes is not checked: sized later).
  std::string NeverFits(const std::string& team, const TeamAsk& ask,
                        const std::string& asker) const;

  // A job submitted (each rank of a gang counts).
  void NoteSubmitted(const std::string& team);
  // A job placed after waiting `seconds` (none when negative).
  void NoteQueued(const std::string& team, double seconds);
  // `dt` more seconds of J holding its GPUs.
  void NoteHeld(const JobRecord& j, double dt);
  // What `dt` seconds of J holding its GPUs add to a usage: GPU-seconds, allocated bytes x GPUs
  // and used bytes, each x seconds.
  static void AddHeld(TeamUsage* usage, const JobRecord& j, double dt);

  void MarkDirty(const std::string& name) { writes_.Mark(name); }
  // The records the next Flush writes, by name.
  std::vector<const TeamRecord*> Dirty() const;
  bool HasDirty() const { return writes_.Any(); }
  void ClearDirty() { writes_.Clear(); }

  Map::iterator begin() { return teams_.begin(); }
  Map::iterator end() { return teams_.end(); }
  Map::const_iterator begin() const { return teams_.begin(); }
  Map::const_iterator end() const { return teams_.end(); }

 private:
  PodsOf pods_;
  Map teams_;
  WriteSet<std::string> writes_;  // by team name
};

}  // namespace paladin::server
