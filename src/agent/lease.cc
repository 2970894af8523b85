// The lease: an agent that has not reached the server for lease_s seconds stops its workloads
// (SIGSTOP to every process of each tree) before the server may restore them elsewhere, so a job
// never runs in two places. When the server answers again, its commands run first (it may kill
// some), then what is still frozen continues.
#include <signal.h>

#include <cstdio>

#include "agent_impl.h"
#include "paladin/quota/usage.h"

namespace paladin::agent {

void Agent::SignalTree(pid_t root, int signal) {
  // The root first: a SIGSTOPped root cannot start new children meanwhile.
  if (root > 0) kill(root, signal);
  for (uint32_t pid : quota::ProcessTree(static_cast<uint32_t>(root))) {
    kill(static_cast<pid_t>(pid), signal);
  }
}

void Agent::CheckLease() {
  const double silent =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - last_contact_).count();
  if (silent < lease_s_.load()) return;
  int frozen = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, w] : jobs_) {
      // A busy job is stopped or moving under its worker; it is frozen once the worker is done.
      if (w->busy || w->frozen || w->state == "exited") continue;
      SignalTree(static_cast<pid_t>(w->record.pid), SIGSTOP);
      w->frozen = true;
      ++frozen;
    }
  }
  if (frozen > 0 || !frozen_) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "no contact with the server for %.1f s (lease %.2g s): froze %d workload(s) "
                  "until the server answers",
                  silent, lease_s_.load(), frozen);
    Say(line);
  }
  frozen_ = true;
}

void Agent::Thaw() {
  int thawed = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, w] : jobs_) {
      if (!w->frozen) continue;
      SignalTree(static_cast<pid_t>(w->record.pid), SIGCONT);
      w->frozen = false;
      ++thawed;
    }
  }
  frozen_ = false;
  Say("the server answers again: " + std::to_string(thawed) + " workload(s) continue");
}

}  // namespace paladin::agent
