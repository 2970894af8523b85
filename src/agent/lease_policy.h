// The agent's lease decisions, with every time given: no clock, no file, no signal (lease.cc and
// agent.cc carry them out). docs/agent.md, "Fencing", says why each rule is what it is.
//
// Two clocks, as the agent has them: steady seconds (Clock::SteadySeconds) measure how long the
// agent has gone without an answer; CLOCK_BOOTTIME nanoseconds (Clock::BootNs) are the lease
// file's, which each job's paladin-workload-init compares with the same rule (fence::Expired).
//
// Not thread-safe: the agent's main loop owns it.
#ifndef PALADIN_AGENT_LEASE_POLICY_H_
#define PALADIN_AGENT_LEASE_POLICY_H_

#include <cstdint>

namespace paladin::agent {

// What to do with a heartbeat the server answered, in this order: freeze (when told), renew
// before or after running the answer's commands, then continue whatever is still frozen.
struct AnswerPlan {
  // The lease file's deadline had passed when the answer came: the server may have given this
  // node's jobs up, and their inits may have stopped them already. Every job is marked frozen
  // first, the answer's commands run (the server kills its stale copies), and only then is the
  // lease renewed, which is what lets the inits continue the rest. While the lease holds it is
  // renewed before the commands, so that the jobs the answer starts do not begin stopped.
  bool lease_was_out = false;
  // From the contact before this beat to the beat's sending: what the freeze's message says.
  double silent_s = 0;

  bool RenewBeforeCommands() const { return !lease_was_out; }
};

class LeasePolicy {
 public:
  // `deadline_ns`: what the lease file says when the agent starts (0: a new file, run out).
  explicit LeasePolicy(uint64_t deadline_ns = 0) : deadline_ns_(deadline_ns) {}

  // The server was heard at `now_s` (the agent's start counts, as does a registration):
  // silence counts from then.
  void Contacted(double now_s) { last_contact_s_ = now_s; }

  // Seconds without the server at `now_s`; none when the clock reads earlier than the contact.
  double Silence(double now_s) const;

  // Between answers: whether the jobs are to be frozen at `now_s`, silent for the whole
  // lease or longer.
  bool SilenceFreezes(double now_s, double lease_s) const;

  // A heartbeat sent at `sent_s` was answered, and CLOCK_BOOTTIME now reads `now_ns`. The
  // contact becomes the beat's sending (the server counts from its receipt, later), and the plan
  // says what the answer's handling does about the lease.
  AnswerPlan Answered(double sent_s, uint64_t now_ns);

  // The deadline to write after the answer to a beat sent at `sent_ns` (CLOCK_BOOTTIME):
  // fence::DeadlineAfter. A beat answered more than a lease after it was sent renews nothing.
  static uint64_t DeadlineFor(uint64_t sent_ns, double lease_s);

  // The lease file now holds `deadline_ns` (only once it was written).
  void Renewed(uint64_t deadline_ns) { deadline_ns_ = deadline_ns; }

  // Whether the file's deadline has passed at `now_ns`: the init's rule, so that what the agent
  // reports frozen is what the inits stop.
  bool Out(uint64_t now_ns) const;

  uint64_t deadline_ns() const { return deadline_ns_; }

 private:
  double last_contact_s_ = 0;
  uint64_t deadline_ns_;
};

}  // namespace paladin::agent

#endif  // PALADIN_AGENT_LEASE_POLICY_H_
