// The control plane's jobs: every JobRecord the server keeps, by sequence number, with what has
// changed since the last write to the store. Control owns one and is its only user.
//
// - Lookup: by sequence number (BySeq) or by id ("j-000042", ById); iteration in submission
//   order (begin/end, rbegin/rend).
// - New jobs: Add gives the next sequence number and its id (NextId says which, beforehand).
// - State: SetState is the only way the control plane changes a job's state: along the graph of
//   job_state.h (JobRecord::MoveTo checks it), and the job is marked dirty.
// - Writes: MarkDirty says a job's record must reach the store with the next Flush; MarkLazy
//   that it may wait for the next periodic write (usage, accrual), which PromoteLazy brings
//   forward. Dirty lists what the Flush writes, ClearDirty forgets it once written.
// - changes() counts MarkDirty calls (and so every SetState and Add): a memo keyed on it (a
//   preemption found futile) holds until a job changes.
//
// Thread safety: none; Control calls it under its lock. No I/O, no clock.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "job_state.h"
#include "model.h"
#include "write_set.h"

namespace paladin::server {

class JobTable {
 public:
  using Map = std::map<int64_t, JobRecord>;

  JobTable() = default;
  JobTable(const JobTable&) = delete;
  JobTable& operator=(const JobTable&) = delete;

  // The records read back from the store at start-up (their seq and id kept, nothing marked
  // dirty); the next job's number follows the highest seen.
  void Load(std::vector<JobRecord> jobs);

  // The id the next Add will give ("j-000043").
  std::string NextId() const;
  // Stores DRAFT as a new job: its seq and id assigned, the rest as given (its state is the
  // draft's, pending for a fresh record), marked dirty. The reference stays valid (jobs are
  // never erased).
  JobRecord& Add(JobRecord draft);

  JobRecord* BySeq(int64_t seq);
  const JobRecord* BySeq(int64_t seq) const;
  // The job of id `id`, or null when the id does not parse or names no job.
  JobRecord* ById(std::string_view id);
  const JobRecord* ById(std::string_view id) const;

  // Moves the job to `to` (JobRecord::MoveTo: an illegal transition is refused, returns false)
  // and marks it dirty. J must be one of this table's records.
  bool SetState(JobRecord& j, JobState to);

  void MarkDirty(const JobRecord& j) { writes_.Mark(j.seq); }
  void MarkLazy(const JobRecord& j) { writes_.MarkLazy(j.seq); }
  // The lazy records become dirty (the periodic write is due).
  void PromoteLazy() { writes_.PromoteLazy(); }
  // The records the next Flush writes, by seq.
  std::vector<const JobRecord*> Dirty() const;
  bool HasDirty() const { return writes_.Any(); }
  void ClearDirty() { writes_.Clear(); }
  uint64_t changes() const { return writes_.changes(); }

  size_t size() const { return jobs_.size(); }
  Map::iterator begin() { return jobs_.begin(); }
  Map::iterator end() { return jobs_.end(); }
  Map::const_iterator begin() const { return jobs_.begin(); }
  Map::const_iterator end() const { return jobs_.end(); }
  Map::const_reverse_iterator rbegin() const { return jobs_.rbegin(); }
  Map::const_reverse_iterator rend() const { return jobs_.rend(); }

 private:
  Map jobs_;  // by sequence number
  int64_t next_seq_ = 1;
  WriteSet<int64_t> writes_;  // by seq
};

}  // namespace paladin::server
