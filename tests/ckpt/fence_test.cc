// The node's fence (include/paladin/ckpt/fence.h): the lease record and the init's decisions, with
// the time injected; then paladin-workload-init itself enforcing a real lease (root only).
#include "paladin/ckpt/fence.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "paladin/ckpt/workload.h"

namespace paladin::ckpt::fence {
namespace {

constexpr uint64_t kSecond = 1000000000ULL;

Action Look(Watch* w, uint64_t now, Read read, uint64_t deadline, bool* changed) {
  return Step(w, now, read, deadline, changed);
}

TEST(FenceRecord, RoundTripsAndRefusesTornOrForeignRecords) {
  unsigned char record[kRecordBytes];
  Encode(123456789012345ULL, record);
  uint64_t deadline = 0;
  EXPECT_EQ(Decode(record, kRecordBytes, &deadline), Read::kDeadline);
  EXPECT_EQ(deadline, 123456789012345ULL);

  // A write seen half-way: the new deadline with the old check.
  unsigned char torn[kRecordBytes];
  Encode(5 * kSecond, torn);
  Encode(9 * kSecond, record);
  std::memcpy(torn + 8, record + 8, 8);
  deadline = 42;
  EXPECT_EQ(Decode(torn, kRecordBytes, &deadline), Read::kInvalid);
  EXPECT_EQ(deadline, 42U) << "an invalid record leaves the deadline alone";

  unsigned char foreign[kRecordBytes] = {'n', 'o', 't', ' ', 'a', ' ', 'l', 'e'};
  EXPECT_EQ(Decode(foreign, kRecordBytes, &deadline), Read::kInvalid);
  EXPECT_EQ(Decode(record, kRecordBytes - 1, &deadline), Read::kInvalid) << "short read";
  EXPECT_EQ(Decode(record, -1, &deadline), Read::kInvalid) << "read error";
  EXPECT_EQ(Decode(record, 0, &deadline), Read::kUnfenced) << "/dev/null: no agent";
}

// The life of one job's fence, step by step with the clock injected.
TEST(FenceStep, StopsPastTheDeadlineAndContinuesOnlyWhenRenewed) {
  Watch w;
  bool changed = false;
  // Nothing read yet: nothing enforced.
  EXPECT_EQ(Look(&w, 100 * kSecond, Read::kInvalid, 0, &changed), Action::kNone);
  // The agent renews every beat: deadline ahead.
  EXPECT_EQ(Look(&w, 100 * kSecond, Read::kDeadline, 103 * kSecond, &changed), Action::kNone);
  EXPECT_EQ(Look(&w, 102 * kSecond, Read::kDeadline, 105 * kSecond, &changed), Action::kNone);
  EXPECT_FALSE(changed);
  // The agent stops renewing (killed, stopped, cut off): at the deadline, not a tick later.
  EXPECT_EQ(Look(&w, 105 * kSecond - 1, Read::kDeadline, 105 * kSecond, &changed), Action::kNone);
  EXPECT_EQ(Look(&w, 105 * kSecond, Read::kDeadline, 105 * kSecond, &changed), Action::kFreeze);
  EXPECT_TRUE(changed);
  EXPECT_TRUE(w.fenced);
  // Held: every look stops again (whoever continued a process meanwhile), said once.
  EXPECT_EQ(Look(&w, 106 * kSecond, Read::kDeadline, 105 * kSecond, &changed), Action::kFreeze);
  EXPECT_FALSE(changed);
  // A torn read while fenced keeps the old (run out) deadline: still stopped.
  EXPECT_EQ(Look(&w, 107 * kSecond, Read::kInvalid, 999 * kSecond, &changed), Action::kFreeze);
  // The agent is back, has run the server's kills, and renews: the job continues, once.
  EXPECT_EQ(Look(&w, 108 * kSecond, Read::kDeadline, 110 * kSecond, &changed), Action::kThaw);
  EXPECT_TRUE(changed);
  EXPECT_FALSE(w.fenced);
  EXPECT_EQ(Look(&w, 109 * kSecond, Read::kDeadline, 110 * kSecond, &changed), Action::kNone);
}

// A renewal with a deadline already past (a heartbeat answered after more than a lease) renews
// nothing.
TEST(FenceStep, ALateRenewalDoesNotThaw) {
  Watch w;
  bool changed = false;
  EXPECT_EQ(Look(&w, 10 * kSecond, Read::kDeadline, 9 * kSecond, &changed), Action::kFreeze);
  EXPECT_EQ(Look(&w, 20 * kSecond, Read::kDeadline, 19 * kSecond, &changed), Action::kFreeze);
  EXPECT_EQ(Look(&w, 20 * kSecond, Read::kDeadline, 23 * kSecond, &changed), Action::kThaw);
}

// Restored on another node: the init's memory holds the old node's deadline (another clock), the
// descriptor now reads the restoring agent's lease; the first look goes by the new one alone.
TEST(FenceStep, ARestoredInitFollowsItsNewNodesLease) {
  Watch w;
  bool changed = false;
  // Dumped while fenced on a node whose clock was far ahead.
  EXPECT_EQ(Look(&w, 900000 * kSecond, Read::kDeadline, 800000 * kSecond, &changed),
            Action::kFreeze);
  // The new node: clock at 50 s, its agent's lease good until 53 s.
  EXPECT_EQ(Look(&w, 50 * kSecond, Read::kDeadline, 53 * kSecond, &changed), Action::kThaw);
  // Dumped running where the deadline was far ahead, restored where the lease is out: stopped.
  Watch v;
  EXPECT_EQ(Look(&v, 1 * kSecond, Read::kDeadline, 1000 * kSecond, &changed), Action::kNone);
  EXPECT_EQ(Look(&v, 60 * kSecond, Read::kDeadline, 53 * kSecond, &changed), Action::kFreeze);
  // Restored where no agent leads it (/dev/null): not fenced, and continued if it was.
  EXPECT_EQ(Look(&v, 61 * kSecond, Read::kUnfenced, 0, &changed), Action::kThaw);
  EXPECT_EQ(Look(&v, 9999 * kSecond, Read::kUnfenced, 0, &changed), Action::kNone);
}

// The one comparison of the clock with the deadline: expired from the deadline itself on.
TEST(FenceExpired, FromTheDeadlineItselfOn) {
  EXPECT_FALSE(Expired(0, 1));
  EXPECT_TRUE(Expired(1, 1));
  EXPECT_TRUE(Expired(2, 1));
  EXPECT_TRUE(Expired(0, 0)) << "a new lease file (deadline 0) is out whatever the clock reads";
  EXPECT_FALSE(Expired(UINT64_MAX - 1, UINT64_MAX));
  EXPECT_TRUE(Expired(UINT64_MAX, UINT64_MAX));
}

// The init's clock reading less than at its last look (a restore on a node booted later; never
// CLOCK_BOOTTIME on one host): the same deadline is judged by the reading alone, either way.
TEST(FenceStep, AClockReadingBehindTheLastLookGoesByTheReading) {
  Watch w;
  bool changed = false;
  EXPECT_EQ(Look(&w, 110 * kSecond, Read::kDeadline, 105 * kSecond, &changed), Action::kFreeze);
  EXPECT_EQ(Look(&w, 104 * kSecond, Read::kDeadline, 105 * kSecond, &changed), Action::kThaw);
  EXPECT_TRUE(changed);
  // Torn reads keep the deadline last read, whatever the clock does.
  EXPECT_EQ(Look(&w, 103 * kSecond, Read::kInvalid, 0, &changed), Action::kNone);
  EXPECT_EQ(Look(&w, 105 * kSecond, Read::kInvalid, 0, &changed), Action::kFreeze);
  EXPECT_EQ(Look(&w, 105 * kSecond, Read::kInvalid, 0, &changed), Action::kFreeze);
  EXPECT_FALSE(changed) << "held at the same reading: said once";
}

// The deadline the agent writes, whatever lease the server's answer gave: a lease that is not
// positive is due at once (the job stops) and a huge one saturates instead of wrapping around to
// a deadline in the past.
TEST(FenceDeadline, OddLeasesGiveDeadlinesTheInitCanCompare) {
  const uint64_t sent = 50 * kSecond;
  EXPECT_EQ(DeadlineAfter(sent, 3), 53 * kSecond);
  EXPECT_EQ(DeadlineAfter(sent, 0), sent);
  EXPECT_EQ(DeadlineAfter(sent, -1), sent);
  EXPECT_EQ(DeadlineAfter(sent, std::nan("")), sent);
  EXPECT_EQ(DeadlineAfter(sent, 1e30), UINT64_MAX);
  EXPECT_EQ(DeadlineAfter(UINT64_MAX - kSecond, 5), UINT64_MAX);
  Watch w;
  bool changed = false;
  EXPECT_EQ(Look(&w, sent, Read::kDeadline, DeadlineAfter(sent, 0), &changed), Action::kFreeze);
  EXPECT_EQ(Look(&w, sent, Read::kDeadline, DeadlineAfter(sent, 1e30), &changed), Action::kThaw);
}

// The margins of docs/agent.md: the beat is sent at `sent`, the server sees it `delay` later,
// declares the node dead one lease after that and gives its jobs up one lease later still. The
// fence (the deadline plus one poll) comes before the node is even declared dead, for every
// lease the server accepts that is longer than a poll.
TEST(FenceMargin, TheNodeStopsItsJobsBeforeTheServerMayRestoreThem) {
  for (double lease_s : {0.5, 1.0, 3.0, 6.0, 60.0}) {
    for (uint64_t delay_ms : {0ULL, 1ULL, 500ULL, 10000ULL}) {
      const uint64_t sent = 1000 * kSecond;
      const uint64_t seen = sent + delay_ms * 1000000ULL;
      const auto lease = static_cast<uint64_t>(lease_s * 1e9);
      const uint64_t fenced_by = DeadlineAfter(sent, lease_s) + kPollMs * 1000000ULL;
      const uint64_t dead_at = seen + lease;
      const uint64_t restorable_at = dead_at + lease;
      EXPECT_LE(fenced_by, dead_at + kPollMs * 1000000ULL) << lease_s;
      EXPECT_LT(fenced_by, restorable_at) << lease_s;
      // The documented margin: at least a lease less a poll.
      EXPECT_GE(restorable_at - fenced_by, lease - kPollMs * 1000000ULL) << lease_s;
    }
  }
}

// --- paladin-workload-init itself, on a real lease (needs root for the PID namespace) ---

uint64_t BootNs() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * kSecond + static_cast<uint64_t>(ts.tv_nsec);
}

void WriteLease(int fd, uint64_t deadline) {
  unsigned char record[kRecordBytes];
  Encode(deadline, record);
  ASSERT_EQ(pwrite(fd, record, sizeof record, 0), static_cast<ssize_t>(sizeof record));
}

char StateOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return '\0';
  const size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? '\0' : line[close + 2];
}

pid_t ChildOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  pid_t child = 0;
  in >> child;
  return child;
}

template <typename F>
bool WaitFor(double seconds, F done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

TEST(FenceInit, StopsTheJobWhenTheLeaseRunsOutAndContinuesItOnRenewal) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (a PID namespace)";
  setenv("PALADIN_WORKLOAD_INIT", PALADIN_WORKLOAD_INIT_BIN, 1);
  const std::string dir = testing::TempDir() + "/fence-init-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const int lease = open((dir + "/lease").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(lease, 0);
  WriteLease(lease, BootNs() + 30 * kSecond);

  WorkloadSpec spec;
  spec.command = {"sleep", "600"};
  spec.stdout_log = dir + "/stdout.log";
  spec.stderr_log = dir + "/stderr.log";
  spec.lease_fd = lease;  // root workload (uid -1): under the init because of the lease
  StatusOr<StartedWorkload> started = StartWorkload(spec);
  ASSERT_TRUE(started.ok()) << started.status().message();
  ASSERT_TRUE(started->fenced);
  const pid_t init = started->pid;
  pid_t command = 0;
  ASSERT_TRUE(WaitFor(5, [&] { return (command = ChildOf(init)) > 0; }));
  EXPECT_NE(StateOf(command), 'T');

  // The lease runs out: the command stops within a poll or two; the init itself stays awake.
  WriteLease(lease, BootNs() + 200000000ULL);
  EXPECT_TRUE(WaitFor(2, [&] { return StateOf(command) == 'T'; }));
  EXPECT_NE(StateOf(init), 'T');
  // A SIGCONT from outside does not free it for long, nor one sent through the init.
  kill(command, SIGCONT);
  kill(init, SIGCONT);
  std::this_thread::sleep_for(std::chrono::milliseconds(3 * kPollMs));
  EXPECT_EQ(StateOf(command), 'T');

  // Renewed: it continues.
  WriteLease(lease, BootNs() + 30 * kSecond);
  EXPECT_TRUE(WaitFor(2, [&] { return StateOf(command) != 'T'; }));
  std::ifstream log(spec.stderr_log);
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("lease ran out"), std::string::npos) << text;
  EXPECT_NE(text.find("renewed"), std::string::npos) << text;

  // The command never saw the lease.
  std::error_code ec;
  EXPECT_FALSE(std::filesystem::exists("/proc/" + std::to_string(command) + "/fd/10", ec));

  kill(init, SIGKILL);
  waitpid(init, nullptr, 0);
  close(lease);
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace paladin::ckpt::fence
