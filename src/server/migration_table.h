// The control plane's migrations: every MigrationRecord the server keeps (finished ones too: a
// job's last move and the failure counts are read from them), by id, with which changed since
// the last write to the store. Control's orchestrator (orchestrator.cc) moves a row through its
// steps (migration_steps.h decides which); this table only keeps the rows and answers questions
// about them.
//
// Thread safety: none; Control calls it under its lock. No I/O, no clock.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "model.h"
#include "write_set.h"

namespace paladin::server {

class MigrationTable {
 public:
  using Map = std::map<int64_t, MigrationRecord>;

  MigrationTable() = default;
  MigrationTable(const MigrationTable&) = delete;
  MigrationTable& operator=(const MigrationTable&) = delete;

  // The rows read back from the store at start-up (nothing marked dirty); new ids follow the
  // highest.
  void Load(std::vector<MigrationRecord> rows);

  // Stores ROW as a new migration with the next id, marked dirty. The reference stays valid
  // (rows are never erased).
  MigrationRecord& Add(MigrationRecord row);
  // How many migrations were ever made (a pass compares it to learn whether it started one).
  int64_t made() const { return next_id_ - 1; }

  MigrationRecord* Find(int64_t id);
  // The migration under way of id ID (a job's migration_id): null when 0, unknown or finished.
  MigrationRecord* Active(int64_t id);
  const MigrationRecord* Active(int64_t id) const;
  // Whether a migration under way goes to NODE (a node receives one at a time).
  bool HasIncoming(const std::string& node) const;
  bool AnyUnfinished() const;
  // The newest migration of job JOB whose source reported how it moved (mode_used), or null.
  const MigrationRecord* LastReported(const std::string& job) const;

  void MarkDirty(const MigrationRecord& m) { writes_.Mark(m.id); }
  // The rows the next Flush writes, by id.
  std::vector<const MigrationRecord*> Dirty() const;
  bool HasDirty() const { return writes_.Any(); }
  void ClearDirty() { writes_.Clear(); }

  Map::iterator begin() { return rows_.begin(); }
  Map::iterator end() { return rows_.end(); }
  Map::const_iterator begin() const { return rows_.begin(); }
  Map::const_iterator end() const { return rows_.end(); }

 private:
  Map rows_;  // by id, in the order they were made
  int64_t next_id_ = 1;
  WriteSet<int64_t> writes_;  // by id
};

}  // namespace paladin::server
