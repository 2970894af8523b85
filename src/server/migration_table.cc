#include "migration_table.h"

#include <algorithm>
#include <utility>

namespace paladin::server {

void MigrationTable::Load(std::vector<MigrationRecord> rows) {
  for (MigrationRecord& m : rows) {
    next_id_ = std::max(next_id_, m.id + 1);
    const int64_t id = m.id;
    rows_[id] = std::move(m);
  }
}

MigrationRecord& MigrationTable::Add(MigrationRecord row) {
  row.id = next_id_++;
  const int64_t id = row.id;
  MigrationRecord& m = rows_[id] = std::move(row);
  MarkDirty(m);
  return m;
}

MigrationRecord* MigrationTable::Find(int64_t id) {
  auto it = rows_.find(id);
  return it == rows_.end() ? nullptr : &it->second;
}

MigrationRecord* MigrationTable::Active(int64_t id) {
  return const_cast<MigrationRecord*>(std::as_const(*this).Active(id));
}

const MigrationRecord* MigrationTable::Active(int64_t id) const {
  if (id == 0) return nullptr;
  auto it = rows_.find(id);
  if (it == rows_.end() || it->second.Finished()) return nullptr;
  return &it->second;
}

bool MigrationTable::HasIncoming(const std::string& node) const {
  return std::any_of(rows_.begin(), rows_.end(), [&](const auto& kv) {
    return !kv.second.Finished() && kv.second.to_node == node;
  });
}

bool MigrationTable::AnyUnfinished() const {
  return std::any_of(rows_.begin(), rows_.end(),
                     [](const auto& kv) { return !kv.second.Finished(); });
}

const MigrationRecord* MigrationTable::LastReported(const std::string& job) const {
  for (auto it = rows_.rbegin(); it != rows_.rend(); ++it) {
    if (it->second.job == job && !it->second.mode_used.empty()) return &it->second;
  }
  return nullptr;
}

std::vector<const MigrationRecord*> MigrationTable::Dirty() const {
  return writes_.Records<MigrationRecord>([this](int64_t id) -> const MigrationRecord* {
    auto it = rows_.find(id);
    return it == rows_.end() ? nullptr : &it->second;
  });
}

}  // namespace paladin::server
