// The agent's local socket (DATA/agent.sock, or --local-socket): how processes on the node reach
// their agent: the SLURM step shim (`paladin slurm task`) and `paladin slurm checkpoint|requeue`.
// One JSON object per line each way, one request per connection; the agent learns the caller's
// uid from the socket (SO_PEERCRED) and bounds the calls in progress per uid and in all, refusing
// a connection past a bound at once (docs/agent.md, "The local socket"). Requests and answers:
// docs/slurm.md.
#ifndef PALADIN_AGENT_LOCAL_H_
#define PALADIN_AGENT_LOCAL_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "paladin/base/status.h"

namespace paladin::agent {

// How `checkpoint` leaves a SLURM job's steps (the request's "leave": "running", "stopped").
enum class SlurmLeave { kRunning, kStopped };
const char* SlurmLeaveName(SlurmLeave leave);
std::optional<SlurmLeave> SlurmLeaveNamed(const std::string& name);

// What a SLURM step is doing, as `steps` reports it ("state"): its shim registered it and its
// workload has not started yet, it runs, a checkpoint of it is under way, or a checkpoint left
// it stopped.
enum class SlurmStepState { kStarting, kRunning, kCheckpointing, kStopped };
// "starting", "running", "checkpointing", "stopped".
const char* SlurmStepStateName(SlurmStepState state);

// $PALADIN_AGENT_SOCKET, else /var/lib/paladin/agent/agent.sock.
std::string DefaultLocalSocket();

// Sends `request` and returns the answer. kUnavailable when no agent listens at `socket`; the
// agent's refusals come back as {"ok": false, "error": ...}, not as an error status.
StatusOr<nlohmann::json> CallLocal(const std::string& socket, const nlohmann::json& request,
                                   double timeout_s);

}  // namespace paladin::agent

#endif  // PALADIN_AGENT_LOCAL_H_
