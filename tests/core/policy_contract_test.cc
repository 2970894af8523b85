// The contract every packing policy keeps, checked against each name in PolicyNames():
//   - a placement it returns is legal: nothing goes negative, the GPU model is allowed;
//   - reserving everything it places and then unreserving all of it restores the fleet exactly;
//   - the same seed gives the same decisions;
//   - a GPU without enough free memory is never chosen;
//   - one packer can decide for several fleets;
//   - its score plugins stay within [0, 100].
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "fleet_testing.h"
#include "paladin/core/frag.h"
#include "paladin/core/packer.h"
#include "paladin/core/policies.h"
#include "paladin/core/rng.h"

namespace paladin::core {
namespace {

using test::AddTestNode;
using test::StateOf;

constexpr uint64_t kFleetSeed = 2024;
constexpr uint64_t kWorkloadSeed = 7;
constexpr uint64_t kDecisionSeed = 11;
constexpr int kWorkloads = 300;

Fleet RandomFleet(uint64_t seed) {
  return test::RandomMixedFleet(seed, {32000, 64000, 96000, 128000});
}
std::vector<Workload> RandomWorkloads(uint64_t seed, int count) {
  return test::RandomMixedWorkloads(seed, count, 500, /*two_models=*/true);
}

using test::Outcome;

class PolicyContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  PolicyContractTest()
      : pristine_(RandomFleet(kFleetSeed)),
        workloads_(RandomWorkloads(kWorkloadSeed, kWorkloads)) {}

  std::unique_ptr<Packer> NewPacker() const {
    auto typical =
        std::make_shared<const std::vector<TypicalWorkload>>(BuildTypicalWorkloads(workloads_));
    auto policy = MakePolicy(GetParam(), PolicyContext{typical});
    EXPECT_TRUE(policy.ok()) << policy.status().ToString();
    if (!policy.ok()) return nullptr;
    return std::make_unique<Packer>(std::move(policy).value());
  }

  // Places every workload it can into `fleet` (reserved under its index) and returns the outcomes.
  std::vector<Outcome> PlaceAll(Fleet& fleet, uint64_t seed) const {
    auto packer = NewPacker();
    if (!packer) return {};
    Rng rng(seed);
    std::vector<Outcome> out;
    for (size_t i = 0; i < workloads_.size(); ++i) {
      const Decision d = packer->Schedule(fleet, workloads_[i], rng);
      out.push_back({d.placed, d.placement.node, d.placement.gpus, d.score});
      if (d.placed) {
        const Status st = fleet.Reserve(i, workloads_[i], d.placement);
        EXPECT_TRUE(st.ok()) << GetParam() << " chose an illegal placement for "
                             << workloads_[i].name << ": " << st.ToString();
      }
    }
    return out;
  }

  const Fleet pristine_;
  const std::vector<Workload> workloads_;
};

TEST_P(PolicyContractTest, EveryPlacementIsLegalAndNothingGoesNegative) {
  Fleet fleet = pristine_;
  auto packer = NewPacker();
  ASSERT_NE(packer, nullptr);
  Rng rng(kDecisionSeed);
  int placed = 0;
  for (size_t i = 0; i < workloads_.size(); ++i) {
    const Workload& w = workloads_[i];
    const Decision d = packer->Schedule(fleet, w, rng);
    if (!d.placed) continue;
    ++placed;
    const Node& n = fleet.node(d.placement.node);
    ASSERT_TRUE(ModelAllowed(w, n)) << w.name << " on " << n.name << ": model "
                                    << (n.model == kNoModel ? "none" : fleet.models().Name(n.model))
                                    << " not in " << fleet.models().MaskToString(w.allowed_models);
    ASSERT_EQ(static_cast<int>(d.placement.gpus.size()), w.gpu_count) << w.name;
    const Status st = fleet.Reserve(i, w, d.placement);
    ASSERT_TRUE(st.ok()) << w.name << " placed on " << n.name << ": " << st.ToString();
    EXPECT_GE(d.score, 0) << w.name;
    EXPECT_LE(d.score, 100) << w.name;
    for (const Node& node : fleet.nodes()) {
      ASSERT_GE(node.cpu_left, 0) << node.name << " after " << w.name;
      ASSERT_GE(node.mem_left, 0) << node.name << " after " << w.name;
      for (const Gpu& g : node.gpus) {
        ASSERT_GE(g.milli_left, 0) << node.name << " after " << w.name;
        ASSERT_GE(g.mem_left_mib, 0) << node.name << " after " << w.name;
      }
    }
  }
  // The fleet is small enough to fill up: a good share is placed and some work is turned away.
  EXPECT_GT(placed, kWorkloads / 10);
  EXPECT_LT(placed, kWorkloads);
}

TEST_P(PolicyContractTest, UnreservingEverythingRestoresThePristineFleet) {
  Fleet fleet = pristine_;
  const std::vector<Outcome> outcomes = PlaceAll(fleet, kDecisionSeed);
  ASSERT_GT(fleet.reservation_count(), 0u);
  ASSERT_NE(StateOf(fleet), StateOf(pristine_));

  // Unreserve in an order unrelated to the reserve order.
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    if (outcomes[i].placed) ids.push_back(i);
  }
  Rng shuffle(3);
  shuffle.Shuffle(ids);
  for (uint64_t id : ids) fleet.Unreserve(id);
  EXPECT_EQ(StateOf(fleet), StateOf(pristine_));
}

TEST_P(PolicyContractTest, TheSameSeedGivesTheSameDecisions) {
  Fleet first = pristine_;
  Fleet second = pristine_;
  const std::vector<Outcome> a = PlaceAll(first, kDecisionSeed);
  const std::vector<Outcome> b = PlaceAll(second, kDecisionSeed);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i] == b[i]) << "decision " << i << " differs";
  }
  EXPECT_EQ(StateOf(first), StateOf(second));
}

// A GPU with enough free share but too little free memory must not be chosen when another GPU
// of the node holds the request.
TEST_P(PolicyContractTest, AGpuWithoutEnoughFreeMemoryIsNotChosen) {
  Fleet fleet;
  fleet.models().SetMemoryMib(*fleet.models().Intern("T4"), 15109);
  AddTestNode(fleet, "t4", 64000, 262144, 2, "T4");
  const Workload memory_hungry{.gpu_count = 1, .gpu_milli = 600, .gpu_mem_mib = 14000};
  const Workload light{.gpu_count = 1, .gpu_milli = 300, .gpu_mem_mib = 1000};
  PALADIN_ASSERT_OK(fleet.Reserve(1, memory_hungry, Placement{0, {0}}));
  PALADIN_ASSERT_OK(fleet.Reserve(2, light, Placement{0, {1}}));
  // GPU 0: 400 milli and 1109 MiB free; GPU 1: 700 milli and 14109 MiB free.
  const Workload w{.name = "needs-4000-mib",
                   .cpu_milli = 1000,
                   .gpu_count = 1,
                   .gpu_milli = 300,
                   .gpu_mem_mib = 4000};

  auto packer = NewPacker();
  ASSERT_NE(packer, nullptr);
  Rng rng(kDecisionSeed);
  const Decision d = packer->Schedule(fleet, w, rng);
  ASSERT_TRUE(d.placed) << d.Explain();
  EXPECT_THAT(d.placement.gpus, ::testing::ElementsAre(1));
  PALADIN_EXPECT_OK(fleet.Reserve(3, w, d.placement));
}

// Packer::Schedule takes the fleet as an argument, so one packer may decide for several fleets
// (a copy per run, a snapshot per cycle). Two fleets whose node has the same version but a
// different state must each get a placement that is legal in that fleet.
TEST_P(PolicyContractTest, APackerReusedOnAnotherFleetDecidesFromThatFleet) {
  auto one_node_fleet = [](int16_t busy_gpu) {
    Fleet fleet;
    AddTestNode(fleet, "n", 64000, 262144, 2, "T4");
    EXPECT_TRUE(
        fleet.Reserve(1, Workload{.gpu_count = 1, .gpu_milli = 800}, Placement{0, {busy_gpu}})
            .ok());
    return fleet;
  };
  const Fleet gpu1_busy = one_node_fleet(1);  // free milli: 1000, 200
  const Fleet gpu0_busy = one_node_fleet(0);  // free milli: 200, 1000
  ASSERT_EQ(gpu1_busy.node(0).version, gpu0_busy.node(0).version);
  const Workload w{.name = "half", .cpu_milli = 1000, .gpu_count = 1, .gpu_milli = 500};

  auto packer = NewPacker();
  ASSERT_NE(packer, nullptr);
  Rng rng(kDecisionSeed);
  const Decision first = packer->Schedule(gpu1_busy, w, rng);
  ASSERT_TRUE(first.placed) << first.Explain();
  EXPECT_THAT(first.placement.gpus, ::testing::ElementsAre(0));
  const Decision second = packer->Schedule(gpu0_busy, w, rng);
  ASSERT_TRUE(second.placed) << second.Explain();
  EXPECT_THAT(second.placement.gpus, ::testing::ElementsAre(1))
      << "GPU 0 of the second fleet has 200 milli free";
}

// packer.h: "every score plugin returns a value in [0, 100]". The fleet model takes nodes of up
// to kMaxGpusPerNode (16) GPUs and any CPU count, beyond the artifact's normalisation spec.
TEST_P(PolicyContractTest, ScoresStayWithinZeroToHundredOnNodesBeyondTheArtifactSpec) {
  Fleet fleet;
  AddTestNode(fleet, "big", 256000, 1 << 22, kMaxGpusPerNode, "A100");
  AddTestNode(fleet, "small", 8000, 65536, 1, "A100");
  auto policy =
      MakePolicy(GetParam(), PolicyContext{std::make_shared<const std::vector<TypicalWorkload>>(
                                 BuildTypicalWorkloads(workloads_))});
  PALADIN_ASSERT_OK(policy);
  const Workload asks[] = {
      Workload{.name = "cpu", .cpu_milli = 1000},
      Workload{.name = "shared", .cpu_milli = 1000, .gpu_count = 1, .gpu_milli = 500},
      Workload{.name = "eight", .cpu_milli = 128000, .gpu_count = 8, .gpu_milli = 1000},
  };
  Rng rng(1);
  for (auto& [plugin, weight] : policy->scores) {
    for (const Workload& w : asks) {
      std::vector<int32_t> feasible = {0};
      plugin->PreScore(fleet, w, feasible, rng);
      const double s = plugin->Score(fleet, w, 0);
      EXPECT_GE(s, 0) << plugin->name() << " for " << w.name << " on a 16-GPU, 256-core node";
      EXPECT_LE(s, 100) << plugin->name() << " for " << w.name << " on a 16-GPU, 256-core node";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, PolicyContractTest, ::testing::ValuesIn(PolicyNames()),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return param_info.param;
                         });

}  // namespace
}  // namespace paladin::core
