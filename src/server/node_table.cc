#include "node_table.h"

#include <cassert>
#include <utility>

namespace paladin::server {

void NodeTable::Load(std::vector<NodeRecord> nodes) {
  for (NodeRecord& n : nodes) {
    const std::string name = n.name;
    nodes_[name] = std::move(n);
  }
}

NodeRecord* NodeTable::Find(std::string_view name) {
  return const_cast<NodeRecord*>(std::as_const(*this).Find(name));
}

const NodeRecord* NodeTable::Find(std::string_view name) const {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : &it->second;
}

const NodeRecord& NodeTable::At(std::string_view name) const {
  const NodeRecord* n = Find(name);
  assert(n != nullptr && "a node the control plane named is not in the table");
  return *n;
}

NodeRecord& NodeTable::FindOrAdd(const std::string& name, bool* fresh) {
  auto [it, added] = nodes_.try_emplace(name);
  *fresh = added;
  it->second.name = name;
  return it->second;
}

bool NodeTable::Heard(NodeRecord& n, double now) {
  const bool was_dead = n.state == NodeState::kDead;
  if (was_dead) {
    n.state = n.draining ? NodeState::kDraining : NodeState::kAlive;
    MarkDirty(n);
  }
  n.last_heartbeat = now;
  n.dead_since = 0;
  return was_dead;
}

bool NodeTable::LeaseExpired(const NodeRecord& n, double now) const {
  return n.state != NodeState::kDead && now - n.last_heartbeat > lease_s_;
}

void NodeTable::MarkDead(NodeRecord& n, double now) {
  n.state = NodeState::kDead;
  n.dead_since = now;
  n.recovered = false;
  MarkDirty(n);
}

bool NodeTable::FenceElapsed(const NodeRecord& n, double now) const {
  return n.state == NodeState::kDead && !n.recovered && now - n.dead_since > lease_s_;
}

void NodeTable::MarkRecovered(NodeRecord& n) {
  n.recovered = true;
  MarkDirty(n);
}

void NodeTable::RenewAll(double now) {
  for (auto& [name, n] : nodes_) {
    if (n.state != NodeState::kDead) n.last_heartbeat = now;
  }
}

std::vector<const NodeRecord*> NodeTable::Dirty() const {
  return writes_.Records<NodeRecord>([this](const std::string& name) { return Find(name); });
}

}  // namespace paladin::server
