// The control plane's nodes: every NodeRecord the server keeps, by name, what has changed since
// the last write to the store, and the lease that decides when a silent node is dead and when
// its jobs may run elsewhere. Control owns one and is its only user.
//
// - Lookup: Find by name; iteration in name order. FindOrAdd makes the record a registering
//   agent fills in. Nodes are never removed.
// - The lease, on the times the caller passes (Control's injected clock), so it is tested without
//   sleeps (docs/server.md, "Agents"; the agent's side: docs/agent.md, "Fencing"):
//     Heard         a registration or heartbeat: the lease starts over; a dead node is back.
//     LeaseExpired  silent for longer than lease_s: MarkDead declares it dead.
//     FenceElapsed  dead for longer than another lease_s and not yet recovered: its agent's own
//                   fence has stopped its jobs by now, so they may be placed elsewhere;
//                   MarkRecovered says that was done.
//     RenewAll      a restarted server gives every live node a fresh lease (the server was
//                   away, not the agents).
// - Writes: MarkDirty says a node's record must reach the store with the next Flush; MarkLazy
//   that it may wait for the next periodic write (heartbeat times, GPU use), which PromoteLazy
//   brings forward. Dirty lists what the Flush writes, ClearDirty forgets it once written.
// - changes() counts MarkDirty calls (every MarkDead, MarkRecovered, and Heard of a dead node
//   too): with JobTable::changes() it keys the memo of a futile preemption.
//
// Thread safety: none; Control calls it under its lock. No I/O, no clock of its own.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "model.h"
#include "write_set.h"

namespace paladin::server {

class NodeTable {
 public:
  using Map = std::map<std::string, NodeRecord, std::less<>>;

  // LEASE_S: how long a node may be silent before it is dead (ControlOptions::lease_s); the same
  // span again passes before its jobs are placed elsewhere.
  explicit NodeTable(double lease_s) : lease_s_(lease_s) {}
  NodeTable(const NodeTable&) = delete;
  NodeTable& operator=(const NodeTable&) = delete;

  // The records read back from the store at start-up (nothing marked dirty).
  void Load(std::vector<NodeRecord> nodes);

  NodeRecord* Find(std::string_view name);
  const NodeRecord* Find(std::string_view name) const;
  // The node of that name, made (with only its name set) when there is none; *fresh says which.
  // The reference stays valid (nodes are never erased).
  NodeRecord& FindOrAdd(const std::string& name, bool* fresh);
  // The node of that name, which must exist (a name from the fleet view or from a migration the
  // orchestrator checked).
  const NodeRecord& At(std::string_view name) const;

  // --- the lease ---
  // A registration or heartbeat at `now`: the lease counts from now. Returns whether the node was
  // dead (it is alive again, or draining when a drain was asked; marked dirty).
  bool Heard(NodeRecord& n, double now);
  bool LeaseExpired(const NodeRecord& n, double now) const;
  // Dead since `now`, its jobs not recovered yet; marked dirty.
  void MarkDead(NodeRecord& n, double now);
  bool FenceElapsed(const NodeRecord& n, double now) const;
  void MarkRecovered(NodeRecord& n);
  // Every node not dead heard from at `now` (not marked dirty: the next beats write it).
  void RenewAll(double now);
  double lease_s() const { return lease_s_; }

  // --- writes ---
  void MarkDirty(const NodeRecord& n) { writes_.Mark(n.name); }
  void MarkLazy(const NodeRecord& n) { writes_.MarkLazy(n.name); }
  // The lazy records become dirty (the periodic write is due).
  void PromoteLazy() { writes_.PromoteLazy(); }
  // The records the next Flush writes, by name.
  std::vector<const NodeRecord*> Dirty() const;
  bool HasDirty() const { return writes_.Any(); }
  void ClearDirty() { writes_.Clear(); }
  uint64_t changes() const { return writes_.changes(); }

  size_t size() const { return nodes_.size(); }
  Map::iterator begin() { return nodes_.begin(); }
  Map::iterator end() { return nodes_.end(); }
  Map::const_iterator begin() const { return nodes_.begin(); }
  Map::const_iterator end() const { return nodes_.end(); }

 private:
  double lease_s_;
  Map nodes_;                     // by name
  WriteSet<std::string> writes_;  // by name
};

}  // namespace paladin::server
