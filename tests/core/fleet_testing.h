// Helpers shared by the core tests: status assertions, a node builder, and a printable picture
// of everything in a Fleet that Reserve/Unreserve may change, so a test can say "exactly as
// before" in one line and get a readable diff when it is not.
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <string_view>

#include "paladin/base/status.h"
#include "paladin/core/fleet.h"

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

}  // namespace paladin::test
