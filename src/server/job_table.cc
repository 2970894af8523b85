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

std::vector<const JobRecord*> JobTable::Dirty() const {
  return writes_.Records<JobRecord>([this](int64_t seq) { return BySeq(seq); });
}

}  // namespace paladin::server
