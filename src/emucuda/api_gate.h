// The process-wide gate every driver entry point passes through, so that a checkpoint can stop
// the process's CUDA activity: entry points enter it shared, cuCheckpointProcessLock (run by the
// control thread) holds it exclusively until unlock, and further API calls block meanwhile, as
// with the real driver. A waiting exclusive holder has priority over new shared entries.
//
// Built on futexes over process-private memory. The exclusive side may be released by any thread
// and gives up after a timeout, so a thread stuck inside the API can delay a lock but never
// deadlock it.
#ifndef PALADIN_EMUCUDA_API_GATE_H_
#define PALADIN_EMUCUDA_API_GATE_H_

#include <atomic>
#include <cstdint>

namespace paladin::emucuda {

class ApiGate {
 public:
  ApiGate() = default;
  ApiGate(const ApiGate&) = delete;
  ApiGate& operator=(const ApiGate&) = delete;

  void EnterShared();
  void ExitShared();
  // Waits until no thread is inside; false (and the gate left open) after `timeout_ms`.
  bool EnterExclusive(uint32_t timeout_ms);
  void ExitExclusive();
  bool held_exclusively() const { return closed_.load() != 0; }
  // In a child after fork(): the parent's other threads are gone, and so are their entries.
  void ResetAfterFork();

 private:
  std::atomic<uint32_t> closed_{0};
  std::atomic<uint32_t> inside_{0};
};

}  // namespace paladin::emucuda

#endif  // PALADIN_EMUCUDA_API_GATE_H_
