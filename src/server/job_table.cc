#include "job_table.h"

#include <algorithm>
#include <utility>

#include "paladin/server/validate.h"

namespace paladin::server {

void JobTable::Load(std::vector<JobRecord> jobs) {
  for (JobRecord& j : jobs) {
    next_seq_ = std::max(next_seq_, j.seq + 1);
    const int64_t seq = j.seq;
    jobs_[seq] = std::move(j);
  }
}

std::string JobTable::NextId() const { return FormatJobId(next_seq_); }

JobRecord& JobTable::Add(JobRecord draft) {
  draft.seq = next_seq_++;
  draft.id = FormatJobId(draft.seq);
  JobRecord& j = jobs_[draft.seq] = std::move(draft);
  MarkDirty(j);
  return j;
}

JobRecord* JobTable::BySeq(int64_t seq) {
  return const_cast<JobRecord*>(std::as_const(*this).BySeq(seq));
}

const JobRecord* JobTable::BySeq(int64_t seq) const {
  auto it = jobs_.find(seq);
  return it == jobs_.end() ? nullptr : &it->second;
}

JobRecord* JobTable::ById(std::string_view id) {
  return const_cast<JobRecord*>(std::as_const(*this).ById(id));
}

const JobRecord* JobTable::ById(std::string_view id) const {
  StatusOr<int64_t> seq = ParseJobId(id);
  if (!seq.ok()) return nullptr;
  return BySeq(*seq);
}

bool JobTable::SetState(JobRecord& j, JobState to) {
  const bool moved = j.MoveTo(to);
  MarkDirty(j);
  return moved;
}

void JobTable::MarkDirty(const JobRecord& j) {
  dirty_.insert(j.seq);
  ++changes_;
}

void JobTable::PromoteLazy() {
  dirty_.insert(lazy_.begin(), lazy_.end());
  lazy_.clear();
}

std::vector<const JobRecord*> JobTable::Dirty() const {
  std::vector<const JobRecord*> out;
  out.reserve(dirty_.size());
  for (int64_t seq : dirty_) {
    if (const JobRecord* j = BySeq(seq)) out.push_back(j);
  }
  return out;
}

}  // namespace paladin::server
