// The node-local lease that fences a job without its agent (docs/agent.md, "Fencing").
//
// The agent keeps one lease file per agent; after every heartbeat that the server answered (and
// after running the answer's commands) it writes there a deadline on CLOCK_BOOTTIME: the time it
// sent that heartbeat plus the lease. Every job it leads under paladin-workload-init holds a
// read-only descriptor on that file (kLeaseFd, inherited at start, passed to CRIU with
// --inherit-fd at a restore) and checks it every kPollMs: once the clock passes the deadline it
// stops every other process of its PID namespace, and keeps them stopped until the file holds a
// deadline in the future again. The agent therefore decides what continues (it kills what the
// server says before it renews), and a dead, stopped or cut-off agent freezes its jobs by simply
// not renewing.
//
// Header-only and plain C++ (no Paladin library, no allocation): paladin-workload-init, which
// CRIU dumps with every job, includes it, as do the agent and the tests.
#ifndef PALADIN_CKPT_FENCE_H_
#define PALADIN_CKPT_FENCE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace paladin::ckpt::fence {

// The descriptor number the lease has in paladin-workload-init.
inline constexpr int kLeaseFd = 10;
// The value Paladin's own resume sends with SIGCONT (sigqueue, ckpt::ContinueTree): the init
// is continued by it but does not forward it to the command, which may be a process the job had
// stopped itself. Any other SIGCONT to the init is forwarded, as every signal it can catch.
inline constexpr int kResumeValue = 0x504c4443;  // "PLDC"
// How often the init looks at the lease (it also looks after every signal it gets).
inline constexpr int kPollMs = 100;

// The deadline the agent writes after a heartbeat it sent at `sent_ns` was answered. The server
// counts its own lease from when it received that beat (later), declares the node dead one lease
// after that and gives its jobs up one lease later still; the init stops the job at most
// kPollMs after this deadline: a margin of a whole lease, less kPollMs (docs/agent.md).
// A lease that is not positive (or not a number) gives `sent_ns`, a deadline already due; one
// that would pass the clock's range gives the last representable time.
inline uint64_t DeadlineAfter(uint64_t sent_ns, double lease_s) {
  constexpr uint64_t kNever = ~uint64_t{0};
  if (!(lease_s > 0)) return sent_ns;
  if (lease_s >= 18e9) return kNever;  // about 570 years: beyond 2^64 ns
  const auto lease_ns = static_cast<uint64_t>(lease_s * 1e9);
  return lease_ns > kNever - sent_ns ? kNever : sent_ns + lease_ns;
}

// Whether the lease has run out at `now_ns` (CLOCK_BOOTTIME): from the deadline itself on. The
// one comparison of a clock with a deadline, shared by the init (Step) and the agent.
inline bool Expired(uint64_t now_ns, uint64_t deadline_ns) { return now_ns >= deadline_ns; }

// The file holds one record, written in place (never renamed: inits hold its inode):
//   bytes 0-7   "PLDLEASE"
//   bytes 8-15  the deadline, CLOCK_BOOTTIME nanoseconds, little-endian
//   bytes 16-23 the deadline XOR kCheck, so that a read torn by a concurrent write is noticed
inline constexpr size_t kRecordBytes = 24;
inline constexpr char kMagic[8] = {'P', 'L', 'D', 'L', 'E', 'A', 'S', 'E'};
inline constexpr uint64_t kCheck = 0xa5c3e1f00f1e3c5aULL;

inline void PutU64(unsigned char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

inline uint64_t GetU64(const unsigned char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return v;
}

inline void Encode(uint64_t deadline_ns, unsigned char out[kRecordBytes]) {
  std::memcpy(out, kMagic, sizeof kMagic);
  PutU64(out + 8, deadline_ns);
  PutU64(out + 16, deadline_ns ^ kCheck);
}

enum class Read {
  kDeadline,  // a whole record
  kUnfenced,  // an empty file (/dev/null: restored where no agent leads the job)
  kInvalid,   // torn, foreign or unreadable: the last deadline read stands
};

// `n` is what read() returned (negative on error).
inline Read Decode(const unsigned char* bytes, long n, uint64_t* deadline_ns) {
  if (n == 0) return Read::kUnfenced;
  if (n != static_cast<long>(kRecordBytes) || std::memcmp(bytes, kMagic, sizeof kMagic) != 0) {
    return Read::kInvalid;
  }
  const uint64_t deadline = GetU64(bytes + 8);
  if ((deadline ^ kCheck) != GetU64(bytes + 16)) return Read::kInvalid;
  *deadline_ns = deadline;
  return Read::kDeadline;
}

// The init's view of the lease.
struct Watch {
  bool known = false;  // a deadline has been read (else nothing is enforced)
  uint64_t deadline_ns = 0;
  bool fenced = false;  // the job is held stopped
};

enum class Action {
  kNone,
  kFreeze,  // stop every process of the job but the init (again: someone may have continued it)
  kThaw,    // continue them: the lease was renewed
};

// One look at the lease. The caller reads the clock before the file, so that a renewal landing
// between the two is never taken for expired. `changed` tells it when to say so in the job's log.
inline Action Step(Watch* w, uint64_t now_ns, Read read, uint64_t deadline_ns, bool* changed) {
  if (read == Read::kDeadline) {
    w->known = true;
    w->deadline_ns = deadline_ns;
  } else if (read == Read::kUnfenced) {
    w->known = false;
  }
  const bool expired = w->known && Expired(now_ns, w->deadline_ns);
  const bool was = w->fenced;
  w->fenced = expired;
  *changed = was != w->fenced;
  if (expired) return Action::kFreeze;
  return was ? Action::kThaw : Action::kNone;
}

}  // namespace paladin::ckpt::fence

#endif  // PALADIN_CKPT_FENCE_H_
