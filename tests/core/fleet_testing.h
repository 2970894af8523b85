// Helpers shared by the core tests: status assertions, a node builder, and a printable picture
// of everything in a Fleet that Reserve/Unreserve may change, so a test can say "exactly as
// before" in one line and get a readable diff when it is not.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/core/fleet.h"
#include "paladin/core/rng.h"

namespace paladin::test {

using core::Fleet;
using core::Gpu;
using core::ModelId;
using core::Node;

inline const Status& StatusOf(const Status& s) { return s; }
template <typename T>
const Status& StatusOf(const StatusOr<T>& s) {
  return s.status();
}

#define PALADIN_EXPECT_OK(expr)                                            \
  do {                                                                     \
    const ::paladin::Status _paladin_st = ::paladin::test::StatusOf(expr); \
    EXPECT_TRUE(_paladin_st.ok()) << _paladin_st.ToString();               \
  } while (0)

#define PALADIN_ASSERT_OK(expr)                                            \
  do {                                                                     \
    const ::paladin::Status _paladin_st = ::paladin::test::StatusOf(expr); \
    ASSERT_TRUE(_paladin_st.ok()) << _paladin_st.ToString();               \
  } while (0)

// Adds a node with `gpus` GPUs of `model` (interned on first use; "" for a CPU-only node).
// Fails the current test and returns -1 on error.
inline int32_t AddTestNode(Fleet& fleet, const std::string& name, int64_t cpu_milli,
                           int64_t mem_mib, int gpus = 0, std::string_view model = "") {
  ModelId id = core::kNoModel;
  if (!model.empty()) {
    auto interned = fleet.models().Intern(model);
    if (!interned.ok()) {
      ADD_FAILURE() << interned.status().ToString();
      return -1;
    }
    id = *interned;
  }
  auto added = fleet.AddNode(name, cpu_milli, mem_mib, gpus, id);
  if (!added.ok()) {
    ADD_FAILURE() << added.status().ToString();
    return -1;
  }
  return *added;
}

// Everything Reserve/Unreserve may change, one node per line. Node versions are left out: they
// only ever grow, by design.
inline std::string StateOf(const Fleet& fleet) {
  std::ostringstream out;
  out << "gpu_milli_used=" << fleet.GpuMilliUsed() << " reservations=" << fleet.reservation_count()
      << "\n";
  for (const Node& n : fleet.nodes()) {
    out << n.name << ": cpu_left=" << n.cpu_left << " mem_left=" << n.mem_left << " gpus=[";
    for (const Gpu& g : n.gpus) out << " " << g.milli_left << "m/" << g.mem_left_mib << "MiB";
    out << " ] affinity=[";
    for (size_t tag = 0; tag < n.affinity.count.size(); ++tag) {
      if (n.affinity.count[tag] != 0) out << " " << tag << ":" << n.affinity.count[tag];
    }
    out << " ] distinct=" << n.affinity.distinct << "\n";
  }
  return out.str();
}

// One packer decision, as much of it as a replay must reproduce.
struct Outcome {
  bool placed;
  int32_t node;
  std::vector<int16_t> gpus;
  double score;
  bool operator==(const Outcome&) const = default;
};

// Models of the random fleets below; G2's GPU memory stays unknown, the others' is known, so
// GPU-memory requests are checked on some nodes and not on others.
inline const char* const kRandomFleetModels[] = {"T4", "V100M32", "A10", "G2"};

// A small mixed fleet: a CPU-only node first, then 7 nodes of 1, 2, 4 or 8 GPUs of random models,
// with CPU drawn from `cpu_choices`. No node exceeds the FGD artifact's spec (128 cores, 8 GPUs).
inline Fleet RandomMixedFleet(uint64_t seed, const std::array<int64_t, 4>& cpu_choices) {
  Fleet fleet;
  const int64_t model_mib[] = {15109, 32510, 22731, 0};
  for (size_t m = 0; m < std::size(kRandomFleetModels); ++m) {
    fleet.models().SetMemoryMib(*fleet.models().Intern(kRandomFleetModels[m]), model_mib[m]);
  }
  core::Rng rng(seed);
  AddTestNode(fleet, "cpu-only", 64000, 262144);
  const int gpu_counts[] = {1, 2, 4, 8};
  for (int i = 1; i < 8; ++i) {
    AddTestNode(fleet, "node-" + std::to_string(i), cpu_choices[rng.Uniform(4)],
                65536 * static_cast<int64_t>(1 + rng.Uniform(4)), gpu_counts[rng.Uniform(4)],
                kRandomFleetModels[rng.Uniform(std::size(kRandomFleetModels))]);
  }
  return fleet;
}

// CPU-only, shared and whole-GPU work (CPU in steps of `cpu_step`); a third pinned to one model
// (or, with `two_models`, sometimes two), half asking GPU memory. Every workload is valid.
inline std::vector<core::Workload> RandomMixedWorkloads(uint64_t seed, int count, int64_t cpu_step,
                                                        bool two_models) {
  core::Rng rng(seed);
  std::vector<core::Workload> out;
  const auto models = std::size(kRandomFleetModels);
  for (int i = 0; i < count; ++i) {
    core::Workload w;
    w.name = "w" + std::to_string(i);
    w.cpu_milli = cpu_step * static_cast<int64_t>(1 + rng.Uniform(16));
    w.mem_mib = 1024 * static_cast<int64_t>(1 + rng.Uniform(32));
    const uint64_t kind = rng.Uniform(10);
    if (kind < 2) {
      // CPU-only
    } else if (kind < 7) {
      w.gpu_count = 1;
      w.gpu_milli = static_cast<int32_t>(50 * (1 + rng.Uniform(19)));  // 50..950
    } else {
      const int32_t counts[] = {1, 2, 4, 8};
      w.gpu_count = counts[rng.Uniform(4)];
      w.gpu_milli = 1000;
    }
    if (w.gpu_count > 0) {
      if (rng.Uniform(3) == 0) {
        w.allowed_models = core::ModelMask{1} << rng.Uniform(models);
        if (two_models && rng.Uniform(2) == 0) {
          w.allowed_models |= core::ModelMask{1} << rng.Uniform(models);
        }
      }
      if (rng.Uniform(2) == 0) w.gpu_mem_mib = 2048 * static_cast<int64_t>(1 + rng.Uniform(8));
    }
    EXPECT_TRUE(core::ValidateWorkload(w).ok()) << core::ValidateWorkload(w).ToString();
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace paladin::test
