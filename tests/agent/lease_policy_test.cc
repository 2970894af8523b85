// The agent's lease decisions (src/agent/lease_policy.h) with the time given: when the jobs
// freeze, when and to what the lease is renewed, and that after a run-out lease the renewal waits
// for the answer's commands. No agent, no file, no sleep. The process tests of the same rules
// (real agents, real inits) are agent_lease_test.cc.
#include "agent/lease_policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "paladin/base/clock.h"
#include "paladin/ckpt/fence.h"

namespace paladin::agent {
namespace {

constexpr uint64_t kSecond = 1000000000ULL;
constexpr double kLease = 6;

// The agent keeps steady seconds and CLOCK_BOOTTIME nanoseconds apart; here the boot clock runs
// 1000 s ahead of the steady one (a machine suspended for that long before the test).
uint64_t Boot(double steady_s) { return static_cast<uint64_t>((steady_s + 1000) * 1e9); }

// Between answers, silence for the whole lease freezes: at the lease itself, not a tick later.
TEST(LeasePolicy, SilenceForTheLeaseFreezes) {
  LeasePolicy lease;
  lease.Contacted(100);
  EXPECT_DOUBLE_EQ(lease.Silence(100), 0);
  EXPECT_DOUBLE_EQ(lease.Silence(103.5), 3.5);
  EXPECT_FALSE(lease.SilenceFreezes(100, kLease));
  EXPECT_FALSE(lease.SilenceFreezes(105.999, kLease));
  EXPECT_TRUE(lease.SilenceFreezes(106, kLease)) << "the lease's end itself freezes";
  EXPECT_TRUE(lease.SilenceFreezes(500, kLease));
  // A registration is a contact: silence counts again from it.
  lease.Contacted(200);
  EXPECT_FALSE(lease.SilenceFreezes(205, kLease));
  EXPECT_TRUE(lease.SilenceFreezes(206, kLease));
}

// A clock that reads earlier than the contact (never the real steady clock; a reading taken
// before another thread's) is no silence, and an answer to a beat sent before the last contact
// does not move the contact back.
TEST(LeasePolicy, AClockBehindTheContactIsNoSilence) {
  LeasePolicy lease(Boot(110));
  lease.Contacted(100);
  EXPECT_DOUBLE_EQ(lease.Silence(99), 0);
  EXPECT_FALSE(lease.SilenceFreezes(99, kLease));
  EXPECT_FALSE(lease.SilenceFreezes(-1e9, kLease));

  const AnswerPlan plan = lease.Answered(90, Boot(101));
  EXPECT_DOUBLE_EQ(plan.silent_s, 0);
  EXPECT_FALSE(plan.lease_was_out);
  EXPECT_TRUE(lease.SilenceFreezes(106, kLease)) << "silence still counts from 100, not 90";
  EXPECT_FALSE(lease.SilenceFreezes(105.5, kLease));
}

// While the lease holds, an answer renews it before its commands run, to the beat's sending
// time plus the lease: the deadline the inits read.
TEST(LeasePolicy, AnAnswerInTimeRenewsBeforeItsCommands) {
  LeasePolicy lease;
  lease.Contacted(0);
  // The agent's first answer comes while the previous lease still holds.
  lease.Renewed(Boot(5));
  const AnswerPlan plan = lease.Answered(1, Boot(1.2));
  EXPECT_FALSE(plan.lease_was_out);
  EXPECT_TRUE(plan.RenewBeforeCommands());
  const uint64_t deadline = LeasePolicy::DeadlineFor(Boot(1), kLease);
  EXPECT_EQ(deadline, Boot(7));
  lease.Renewed(deadline);
  EXPECT_EQ(lease.deadline_ns(), Boot(7));
  // The contact is the beat's sending: silence counts from 1, not from the answer at 1.2.
  EXPECT_FALSE(lease.SilenceFreezes(6.9, kLease));
  EXPECT_TRUE(lease.SilenceFreezes(7, kLease));
}

// Out exactly from the deadline on, by the init's own rule, so that what the agent reports
// frozen is what the inits stop.
TEST(LeasePolicy, TheLeaseIsOutFromItsDeadlineOnAsTheInitSees) {
  LeasePolicy lease(Boot(7));
  EXPECT_FALSE(lease.Out(Boot(7) - 1));
  EXPECT_TRUE(lease.Out(Boot(7)));
  EXPECT_TRUE(lease.Out(Boot(8)));
  for (const uint64_t now : {Boot(7) - 1, Boot(7), Boot(7) + 1}) {
    EXPECT_EQ(lease.Out(now), ckpt::fence::Expired(now, Boot(7))) << now;
  }
  // A clock read before the last renewal (behind it) sees the lease holding.
  EXPECT_FALSE(lease.Out(Boot(2)));
}

// Once the deadline has passed, the answer's commands run first (the server kills the copies it
// gave up) and the renewal, which lets the inits continue the rest, comes only after them.
TEST(LeasePolicy, AfterTheLeaseRanOutTheRenewalWaitsForTheCommands) {
  LeasePolicy lease;
  lease.Contacted(0);
  lease.Renewed(LeasePolicy::DeadlineFor(Boot(0), kLease));  // until 6
  // The server is out of reach from 1 on; the loop freezes at 6.
  EXPECT_FALSE(lease.SilenceFreezes(5, kLease));
  EXPECT_TRUE(lease.SilenceFreezes(6, kLease));
  EXPECT_TRUE(lease.Out(Boot(6)));
  // The beat sent at 9 is answered at 9.3.
  const AnswerPlan plan = lease.Answered(9, Boot(9.3));
  EXPECT_TRUE(plan.lease_was_out);
  EXPECT_FALSE(plan.RenewBeforeCommands());
  EXPECT_DOUBLE_EQ(plan.silent_s, 9) << "from the previous contact to this beat's sending";
  // Renewed after the commands: the lease holds again until 15.
  lease.Renewed(LeasePolicy::DeadlineFor(Boot(9), kLease));
  EXPECT_FALSE(lease.Out(Boot(9.4)));
  EXPECT_TRUE(lease.Out(Boot(15)));
  EXPECT_FALSE(lease.SilenceFreezes(14.9, kLease));
  // The next answer in time renews first again.
  EXPECT_TRUE(lease.Answered(10, Boot(10.1)).RenewBeforeCommands());
}

// An answer that comes at the deadline itself finds the lease out (the inits stop the jobs from
// that instant on).
TEST(LeasePolicy, AnAnswerAtTheDeadlineItselfFindsTheLeaseOut) {
  LeasePolicy lease(Boot(6));
  lease.Contacted(0);
  EXPECT_FALSE(lease.Answered(5, Boot(6) - 1).lease_was_out);
  EXPECT_TRUE(lease.Answered(5.5, Boot(6)).lease_was_out);
}

// A new lease file (deadline 0) starts out, whatever the boot clock reads: the first answer after
// the agent starts renews only once its commands ran, so a previous agent's jobs stay as its
// lease left them until the server has spoken.
TEST(LeasePolicy, ANewLeaseFileStartsOut) {
  LeasePolicy lease;
  EXPECT_TRUE(lease.Out(0));
  EXPECT_TRUE(lease.Out(Boot(0)));
  lease.Contacted(0);
  const AnswerPlan plan = lease.Answered(0.5, Boot(0.6));
  EXPECT_TRUE(plan.lease_was_out);
  EXPECT_FALSE(plan.RenewBeforeCommands());
}

// A beat answered more than a lease after it was sent renews to a deadline already past: the
// lease stays out, and the silence since that beat freezes at the next look.
TEST(LeasePolicy, ALateAnswerRenewsNothing) {
  LeasePolicy lease(Boot(6));
  lease.Contacted(0);
  const AnswerPlan plan = lease.Answered(1, Boot(8));
  EXPECT_TRUE(plan.lease_was_out);
  lease.Renewed(LeasePolicy::DeadlineFor(Boot(1), kLease));
  EXPECT_TRUE(lease.Out(Boot(8)));
  EXPECT_TRUE(lease.SilenceFreezes(8, kLease));
}

// The lease comes from the server's answers: whatever it says, the deadline is a number the
// inits can compare, and a lease that is not positive is due at once (the jobs freeze) rather
// than never.
TEST(LeasePolicy, DeadlinesOfOddLeases) {
  const uint64_t sent = Boot(10);
  constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(LeasePolicy::DeadlineFor(sent, 0.5), sent + kSecond / 2);
  EXPECT_EQ(LeasePolicy::DeadlineFor(sent, 0), sent);
  EXPECT_EQ(LeasePolicy::DeadlineFor(sent, -3), sent);
  EXPECT_EQ(LeasePolicy::DeadlineFor(sent, std::nan("")), sent);
  EXPECT_EQ(LeasePolicy::DeadlineFor(sent, std::numeric_limits<double>::infinity()), kNever);
  EXPECT_EQ(LeasePolicy::DeadlineFor(sent, 1e300), kNever);
  EXPECT_EQ(LeasePolicy::DeadlineFor(kNever - kSecond, 2), kNever) << "saturates, never wraps";
  EXPECT_EQ(LeasePolicy::DeadlineFor(kNever - 2 * kSecond, 2), kNever);
  EXPECT_EQ(LeasePolicy::DeadlineFor(kNever - 3 * kSecond, 2), kNever - kSecond);

  LeasePolicy lease;
  lease.Contacted(100);
  EXPECT_TRUE(lease.SilenceFreezes(100, 0)) << "a lease of zero freezes at once";
  EXPECT_TRUE(lease.SilenceFreezes(100, -1));
  EXPECT_TRUE(lease.SilenceFreezes(100, std::nan("")));
  EXPECT_FALSE(lease.SilenceFreezes(1e9, std::numeric_limits<double>::infinity()));
}

// The host's clocks, as the agent reads them by default: neither goes backwards.
TEST(RealClock, NeitherClockGoesBackwards) {
  const base::Clock& clock = base::RealClock();
  double steady = clock.SteadySeconds();
  uint64_t boot = clock.BootNs();
  for (int i = 0; i < 1000; ++i) {
    const double steady_next = clock.SteadySeconds();
    const uint64_t boot_next = clock.BootNs();
    ASSERT_GE(steady_next, steady);
    ASSERT_GE(boot_next, boot);
    steady = steady_next;
    boot = boot_next;
  }
}

}  // namespace
}  // namespace paladin::agent
