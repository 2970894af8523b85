// What of a control-plane table must reach the store: the keys of the records changed since the
// last write, which the next Flush writes, and of those that may wait for the periodic write
// (lazy: usage, accrual, heartbeats), with a count of the changes for memos keyed on them. Each
// table keeps one (JobTable, NodeTable, MigrationTable, TeamBook, CommandQueue).
//
// Thread safety: none; the tables are used under Control's lock. No I/O.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

namespace paladin::server {

template <typename Key>
class WriteSet {
 public:
  // The record of `key` must reach the store with the next Flush.
  void Mark(const Key& key) {
    dirty_.insert(key);
    ++changes_;
  }
  // It may wait for the periodic write, which PromoteLazy brings forward.
  void MarkLazy(const Key& key) { lazy_.insert(key); }
  void PromoteLazy() {
    dirty_.insert(lazy_.begin(), lazy_.end());
    lazy_.clear();
  }
  bool Any() const { return !dirty_.empty(); }
  // Forgets the marked keys once their records are written.
  void Clear() { dirty_.clear(); }
  uint64_t changes() const { return changes_; }

  // The records of the marked keys, in key order, as `find(key)` gives them (a key whose record
  // is gone is skipped).
  template <typename Record, typename Find>
  std::vector<const Record*> Records(Find find) const {
    std::vector<const Record*> out;
    out.reserve(dirty_.size());
    for (const Key& key : dirty_) {
      if (const Record* r = find(key)) out.push_back(r);
    }
    return out;
  }

 private:
  std::set<Key> dirty_;
  std::set<Key> lazy_;
  uint64_t changes_ = 0;
};

}  // namespace paladin::server
