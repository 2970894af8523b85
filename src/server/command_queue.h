// The commands the server has for its agents (docs/formats/api.md, "Commands"): queued for a
// node, handed out in its heartbeat answers (and again when unanswered for a while), then
// acknowledged by the node's result or withdrawn by the server. Only those not yet acknowledged
// are kept in memory; each change is written with the next Flush (Dirty), after which the
// acknowledged ones are dropped.
//
// Ids are never reused: after a restart they continue from the highest the store ever gave.
//
// Thread safety: none; Control calls it under its lock. No I/O; times are passed in.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "model.h"
#include "paladin/api/wire.h"
#include "write_set.h"

namespace paladin::server {

class CommandQueue {
 public:
  CommandQueue() = default;
  CommandQueue(const CommandQueue&) = delete;
  CommandQueue& operator=(const CommandQueue&) = delete;

  // At start-up: the commands not yet acknowledged, and the highest id ever given.
  void Load(std::vector<CommandRecord> unacked, int64_t max_id);

  // Queues COMMAND for NODE, about job JOB ("" for none: then command.job is left as it is),
  // made at NOW. Its id is assigned (and set as command.id); returns it.
  int64_t Send(const std::string& node, api::Command command, const std::string& job, double now);

  // The command of that id not yet acknowledged, or null.
  const CommandRecord* Pending(int64_t id) const;
  // Whether a command of KIND for job JOB at EPOCH is queued for NODE (one answered counts until
  // the Flush that drops it).
  bool HasQueued(const std::string& node, api::CommandKind kind, const std::string& job,
                 int64_t epoch) const;

  // The commands NODE is to be handed now, in id order: not acknowledged, and not handed out
  // within the last RESEND seconds. Each is marked handed out at NOW.
  std::vector<const CommandRecord*> TakeDue(const std::string& node, double now, double resend);

  // NODE's result for command ID: the command is acknowledged with OK and RESULT, and returned.
  // Null (nothing changed) when there is no such command waiting, or it is another node's.
  const CommandRecord* Acknowledge(int64_t id, const std::string& node, bool ok, Json result);
  // The server takes back command ID before it is answered: acknowledged as failed, its result
  // {"error": WHY}; a result that still comes for it is ignored. False when it was not waiting.
  bool Withdraw(int64_t id, const std::string& why);

  // The records the next Flush writes (acknowledged ones included), by id.
  std::vector<const CommandRecord*> Dirty() const;
  bool HasDirty() const { return writes_.Any(); }
  // After a Flush: forgets what it wrote and drops the acknowledged commands.
  void Flushed();

  size_t size() const { return commands_.size(); }

 private:
  std::map<int64_t, CommandRecord> commands_;  // not yet dropped, by id
  int64_t next_id_ = 1;
  WriteSet<int64_t> writes_;  // by id
};

}  // namespace paladin::server
