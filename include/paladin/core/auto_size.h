// The size of an `auto` workload's GPU memory, chosen once when it is admitted, from the history
// of its class: the server's jobs with `gpu_mem: "auto"` (Control::SizeAutoJob) and Kubernetes
// pods annotated `paladin.io/gpu-memory: auto` (the server's GET /v1/sizing, asked by the
// webhook) share this one rule (docs/server.md, docs/kubernetes.md design 7):
//
//   the highest peak measured of the class's earlier workloads x 1.2, else 4 GiB (no history);
//   capped by the workload's own maximum and by the largest GPU; at least 64 MiB.
//
// A class is a team and a command (the basename of command[0], or for a pod that names no
// command its image's name): "research/python". Once running, a server job's quota is forecast
// by the `paladin` predictor (predict.h); a pod's size cannot change after its creation.
#pragma once

#include <cstdint>
#include <string>

namespace paladin::core {

inline constexpr int64_t kAutoDefaultBytes = int64_t{4} << 30;
inline constexpr double kAutoMargin = 1.2;
inline constexpr int64_t kAutoFloorBytes = int64_t{64} << 20;

// What is known of a class's earlier workloads.
struct ClassHistory {
  std::string name;        // "TEAM/COMMAND", named in the why
  int64_t peak_bytes = 0;  // the highest GPU memory measured of any of them; 0: none measured
  int64_t jobs = 0;        // how many server jobs ...
  int64_t pods = 0;        // ... and Kubernetes pods that peak is the highest of
};

struct AutoSizeLimits {
  int64_t max_bytes = 0;    // the workload's own ceiling (a job's gpu_mem_max); 0: none
  int64_t largest_gpu = 0;  // the largest GPU known; 0: unknown (no cap)
};

struct AutoSize {
  int64_t bytes = 0;
  bool from_history = false;  // false: the default
  // "highest peak of research/python's 2 earlier jobs and 1 pod 512 MiB x 1.2 = 614.40 MiB",
  // "no history for research/python: the default 4 GiB", with the caps that applied.
  std::string why;
};

AutoSize SizeAuto(const ClassHistory& history, const AutoSizeLimits& limits);

}  // namespace paladin::core
