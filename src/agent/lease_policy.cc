// The agent's lease decisions (lease_policy.h): arithmetic on given times, nothing else.
#include "lease_policy.h"

#include "paladin/ckpt/fence.h"

namespace paladin::agent {

double LeasePolicy::Silence(double now_s) const {
  const double silent = now_s - last_contact_s_;
  return silent > 0 ? silent : 0;
}

bool LeasePolicy::SilenceFreezes(double now_s, double lease_s) const {
  // Written so that a lease that is not a number freezes, as its deadline is due at once
  // (fence::DeadlineAfter).
  return !(Silence(now_s) < lease_s);
}

AnswerPlan LeasePolicy::Answered(double sent_s, uint64_t now_ns) {
  AnswerPlan plan;
  plan.lease_was_out = Out(now_ns);
  plan.silent_s = Silence(sent_s);
  // A late answer to an older beat never moves the contact back.
  if (sent_s > last_contact_s_) last_contact_s_ = sent_s;
  return plan;
}

uint64_t LeasePolicy::DeadlineFor(uint64_t sent_ns, double lease_s) {
  return ckpt::fence::DeadlineAfter(sent_ns, lease_s);
}

bool LeasePolicy::Out(uint64_t now_ns) const { return ckpt::fence::Expired(now_ns, deadline_ns_); }

}  // namespace paladin::agent
