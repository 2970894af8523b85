#include "command_queue.h"

#include <algorithm>
#include <utility>

namespace paladin::server {

namespace key = api::key;

void CommandQueue::Load(std::vector<CommandRecord> unacked, int64_t max_id) {
  next_id_ = std::max(next_id_, max_id + 1);
  for (CommandRecord& c : unacked) {
    const int64_t id = c.id;
    commands_[id] = std::move(c);
  }
}

int64_t CommandQueue::Send(const std::string& node, api::Command command, const std::string& job,
                           double now) {
  CommandRecord c;
  c.id = next_id_++;
  c.node = node;
  c.created_at = now;
  command.id = c.id;
  if (!job.empty()) {
    c.job = job;
    command.job = job;
  }
  c.command = std::move(command);
  const int64_t id = c.id;
  writes_.Mark(id);
  commands_[id] = std::move(c);
  return id;
}

const CommandRecord* CommandQueue::Pending(int64_t id) const {
  auto it = commands_.find(id);
  return it == commands_.end() || it->second.acked ? nullptr : &it->second;
}

bool CommandQueue::HasQueued(const std::string& node, api::CommandKind kind, const std::string& job,
                             int64_t epoch) const {
  return std::any_of(commands_.begin(), commands_.end(), [&](const auto& kv) {
    const CommandRecord& c = kv.second;
    return c.node == node && c.command.kind == kind && c.job == job && c.command.epoch == epoch;
  });
}

std::vector<const CommandRecord*> CommandQueue::TakeDue(const std::string& node, double now,
                                                        double resend) {
  std::vector<const CommandRecord*> due;
  for (auto& [id, c] : commands_) {
    if (c.node != node || c.acked) continue;
    if (c.sent_at > 0 && now - c.sent_at < resend) continue;
    c.sent_at = now;
    writes_.Mark(id);
    due.push_back(&c);
  }
  return due;
}

const CommandRecord* CommandQueue::Acknowledge(int64_t id, const std::string& node, bool ok,
                                               Json result) {
  auto it = commands_.find(id);
  if (it == commands_.end() || it->second.node != node || it->second.acked) return nullptr;
  CommandRecord& c = it->second;
  c.acked = true;
  c.ok = ok;
  c.result = std::move(result);
  writes_.Mark(id);
  return &c;
}

bool CommandQueue::Withdraw(int64_t id, const std::string& why) {
  auto it = commands_.find(id);
  if (it == commands_.end() || it->second.acked) return false;
  CommandRecord& c = it->second;
  c.acked = true;
  c.ok = false;
  c.result = Json{{key::kError, why}};
  writes_.Mark(id);
  return true;
}

std::vector<const CommandRecord*> CommandQueue::Dirty() const {
  return writes_.Records<CommandRecord>([this](int64_t id) -> const CommandRecord* {
    auto it = commands_.find(id);
    return it == commands_.end() ? nullptr : &it->second;
  });
}

void CommandQueue::Flushed() {
  writes_.Clear();
  for (auto it = commands_.begin(); it != commands_.end();) {
    it = it->second.acked ? commands_.erase(it) : std::next(it);
  }
}

}  // namespace paladin::server
