#include "emucuda/api_gate.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace paladin::emucuda {
namespace {

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

void Wait(std::atomic<uint32_t>* word, uint32_t expected, const timespec* timeout) {
  Futex(word, FUTEX_WAIT_PRIVATE, expected, timeout);
}

void WakeAll(std::atomic<uint32_t>* word) { Futex(word, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr); }

int64_t MonotonicMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace

void ApiGate::EnterShared() {
  while (true) {
    uint32_t closed = closed_.load();
    if (closed != 0) {
      Wait(&closed_, closed, nullptr);
      continue;
    }
    inside_.fetch_add(1);
    if (closed_.load() == 0) return;
    ExitShared();  // an exclusive holder came first: step back out and wait for it
  }
}

void ApiGate::ExitShared() {
  if (inside_.fetch_sub(1) == 1 && closed_.load() != 0) WakeAll(&inside_);
}

bool ApiGate::EnterExclusive(uint32_t timeout_ms) {
  uint32_t open = 0;
  if (!closed_.compare_exchange_strong(open, 1)) return false;
  int64_t deadline = MonotonicMs() + timeout_ms;
  while (true) {
    uint32_t inside = inside_.load();
    if (inside == 0) return true;
    int64_t left = deadline - MonotonicMs();
    if (left <= 0) {
      ExitExclusive();
      return false;
    }
    timespec wait{static_cast<time_t>(left / 1000), static_cast<long>(left % 1000) * 1000000L};
    Wait(&inside_, inside, &wait);
  }
}

void ApiGate::ExitExclusive() {
  closed_.store(0);
  WakeAll(&closed_);
}

void ApiGate::ResetAfterFork() {
  closed_.store(0);
  inside_.store(0);
}

}  // namespace paladin::emucuda
