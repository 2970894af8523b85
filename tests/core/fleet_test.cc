// The fleet model: node validation, the placement check, and reserve/unreserve bookkeeping.
#include "paladin/core/fleet.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fleet_testing.h"

namespace paladin::core {
namespace {

using test::AddTestNode;
using test::StateOf;
using ::testing::AllOf;
using ::testing::HasSubstr;

// --- GpuModelTable ---

TEST(GpuModelTableTest, InternReturnsTheSameIdForTheSameName) {
  GpuModelTable models;
  auto t4 = models.Intern("T4");
  auto v100 = models.Intern("V100M32");
  auto t4_again = models.Intern("T4");
  PALADIN_ASSERT_OK(t4);
  PALADIN_ASSERT_OK(v100);
  PALADIN_ASSERT_OK(t4_again);
  EXPECT_EQ(*t4, 0);
  EXPECT_EQ(*v100, 1);
  EXPECT_EQ(*t4_again, 0);
  EXPECT_EQ(models.size(), 2u);
  EXPECT_EQ(models.Name(1), "V100M32");
}

TEST(GpuModelTableTest, InternRefusesEmptyNamesAndTooManyModels) {
  GpuModelTable models;
  EXPECT_EQ(models.Intern("").status().code(), StatusCode::kInvalidArgument);
  for (int i = 0; i < kMaxGpuModels; ++i) PALADIN_ASSERT_OK(models.Intern("M" + std::to_string(i)));
  EXPECT_EQ(models.Intern("one-too-many").status().code(), StatusCode::kResourceExhausted);
  PALADIN_EXPECT_OK(models.Intern("M0"));  // a known model is still found
}

TEST(GpuModelTableTest, FindUnknownModelIsNotFound) {
  GpuModelTable models;
  PALADIN_ASSERT_OK(models.Intern("T4"));
  EXPECT_EQ(models.Find("A100").status().code(), StatusCode::kNotFound);
}

TEST(GpuModelTableTest, ParseAllowedBuildsTheMask) {
  GpuModelTable models;
  PALADIN_ASSERT_OK(models.Intern("T4"));       // bit 0
  PALADIN_ASSERT_OK(models.Intern("V100M32"));  // bit 1
  struct Case {
    const char* list;
    ModelMask mask;
  };
  for (const Case& c : {Case{"T4", 0b01}, Case{"V100M32", 0b10}, Case{"T4|V100M32", 0b11},
                        Case{"V100M32|T4", 0b11}, Case{"", 0}, Case{"|T4|", 0b01}}) {
    auto mask = models.ParseAllowed(c.list);
    PALADIN_ASSERT_OK(mask);
    EXPECT_EQ(*mask, c.mask) << "list '" << c.list << "'";
  }
  EXPECT_EQ(models.MaskToString(0b11), "T4|V100M32");
  EXPECT_EQ(models.MaskToString(0), "any");
}

TEST(GpuModelTableTest, ParseAllowedNamesTheUnknownModelAndListsTheKnownOnes) {
  GpuModelTable models;
  PALADIN_ASSERT_OK(models.Intern("T4"));
  PALADIN_ASSERT_OK(models.Intern("V100M32"));
  auto mask = models.ParseAllowed("T4|A100");
  ASSERT_FALSE(mask.ok());
  EXPECT_EQ(mask.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(mask.status().message(), AllOf(HasSubstr("'A100'"), HasSubstr("T4, V100M32")));
}

// --- ValidateWorkload ---

TEST(ValidateWorkloadTest, AcceptsConsistentWorkloads) {
  for (const Workload& w : {
           Workload{.name = "cpu", .cpu_milli = 4000, .mem_mib = 1024},
           Workload{.name = "shared", .cpu_milli = 4000, .gpu_count = 1, .gpu_milli = 500},
           Workload{.name = "whole", .gpu_count = 1, .gpu_milli = 1000, .gpu_mem_mib = 8000},
           Workload{.name = "gang-of-8", .gpu_count = 8, .gpu_milli = 1000},
       }) {
    PALADIN_EXPECT_OK(ValidateWorkload(w));
  }
}

TEST(ValidateWorkloadTest, RejectsInconsistentWorkloads) {
  struct Case {
    Workload w;
    const char* message_part;
  };
  const Case cases[] = {
      {{.name = "a", .cpu_milli = -1}, "cpu_milli is negative"},
      {{.name = "a", .mem_mib = -1}, "memory is negative"},
      {{.name = "a", .gpu_count = 17, .gpu_milli = 1000}, "gpu count 17 outside 0..16"},
      {{.name = "a", .gpu_count = -1}, "gpu count -1 outside 0..16"},
      {{.name = "a", .gpu_count = 1, .gpu_milli = 0}, "gpu share 0 milli outside 1..1000"},
      {{.name = "a", .gpu_count = 1, .gpu_milli = 1001}, "gpu share 1001 milli outside 1..1000"},
      {{.name = "a", .gpu_count = 2, .gpu_milli = 500}, "must take whole GPUs"},
      {{.name = "a", .gpu_count = 0, .gpu_milli = 500}, "without a GPU count"},
      {{.name = "a", .gpu_count = 0, .gpu_mem_mib = 100}, "without a GPU count"},
      {{.name = "a", .gpu_count = 1, .gpu_milli = 500, .gpu_mem_mib = -1},
       "GPU memory is negative"},
  };
  for (const Case& c : cases) {
    const Status st = ValidateWorkload(c.w);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.message_part;
    EXPECT_THAT(st.message(), AllOf(HasSubstr("workload 'a'"), HasSubstr(c.message_part)));
  }
}

// --- AddNode ---

TEST(FleetAddNodeTest, RejectsInvalidNodesAndAddsNothing) {
  Fleet fleet;
  const ModelId t4 = *fleet.models().Intern("T4");
  struct Case {
    int64_t cpu, mem;
    int gpus;
    ModelId model;
    const char* message_part;
  };
  const Case cases[] = {
      {-1, 1024, 0, kNoModel, "negative CPU or memory"},
      {1000, -1, 0, kNoModel, "negative CPU or memory"},
      {1000, 1024, 17, t4, "17 GPUs; Paladin supports 0..16"},
      {1000, 1024, -1, t4, "-1 GPUs"},
      {1000, 1024, 2, kNoModel, "GPUs without a known model"},
      {1000, 1024, 2, 5, "GPUs without a known model"},  // only model 0 exists
  };
  for (const Case& c : cases) {
    auto added = fleet.AddNode("bad-node", c.cpu, c.mem, c.gpus, c.model);
    ASSERT_FALSE(added.ok()) << c.message_part;
    EXPECT_EQ(added.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(added.status().message(),
                AllOf(HasSubstr("node 'bad-node'"), HasSubstr(c.message_part)));
  }
  EXPECT_EQ(fleet.size(), 0u);
  EXPECT_EQ(fleet.GpuMilliCapacity(), 0);
}

TEST(FleetAddNodeTest, NewNodesStartEmptyWithTheModelsGpuMemory) {
  Fleet fleet;
  const ModelId t4 = *fleet.models().Intern("T4");
  fleet.models().SetMemoryMib(t4, 15109);

  auto gpu_node = fleet.AddNode("gpu-node", 32000, 65536, 4, t4);
  auto cpu_node = fleet.AddNode("cpu-node", 16000, 32768, 0, t4);  // no GPUs: no model
  auto big_node = fleet.AddNode("big-node", 0, 0, kMaxGpusPerNode, t4);
  PALADIN_ASSERT_OK(gpu_node);
  PALADIN_ASSERT_OK(cpu_node);
  PALADIN_ASSERT_OK(big_node);
  EXPECT_EQ(*gpu_node, 0);
  EXPECT_EQ(*cpu_node, 1);

  const Node& n = fleet.node(0);
  EXPECT_EQ(n.cpu_left, 32000);
  EXPECT_EQ(n.mem_left, 65536);
  EXPECT_EQ(n.model, t4);
  ASSERT_EQ(n.gpu_count(), 4);
  for (const Gpu& g : n.gpus) {
    EXPECT_EQ(g.milli_left, 1000);
    EXPECT_EQ(g.mem_total_mib, 15109);
    EXPECT_EQ(g.mem_left_mib, 15109);
  }
  EXPECT_EQ(fleet.node(1).model, kNoModel);
  EXPECT_EQ(fleet.GpuMilliCapacity(), (4 + 16) * 1000);
  EXPECT_EQ(fleet.GpuMilliUsed(), 0);
}

// --- Reserve, Unreserve and CheckPlacement on a small fleet ---

class FleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    t4_ = *fleet_.models().Intern("T4");
    v100_ = *fleet_.models().Intern("V100M32");
    fleet_.models().SetMemoryMib(t4_, 15109);
    fleet_.models().SetMemoryMib(v100_, 32510);
    AddTestNode(fleet_, "t4-node", 32000, 65536, 4, "T4");          // node 0
    AddTestNode(fleet_, "v100-node", 64000, 131072, 2, "V100M32");  // node 1
    AddTestNode(fleet_, "cpu-node", 16000, 32768);                  // node 2
    pristine_ = StateOf(fleet_);
  }

  Fleet fleet_;
  ModelId t4_ = kNoModel, v100_ = kNoModel;
  std::string pristine_;
};

TEST_F(FleetTest, ReserveTakesExactlyWhatIsAskedAndUnreserveGivesItAllBack) {
  const Workload shared{
      .cpu_milli = 4000, .mem_mib = 8192, .gpu_count = 1, .gpu_milli = 300, .gpu_mem_mib = 4000};
  const Workload pair{
      .cpu_milli = 8000, .mem_mib = 16384, .gpu_count = 2, .gpu_milli = 1000, .gpu_mem_mib = 10000};
  const Workload cpu_only{.cpu_milli = 2000, .mem_mib = 1024};
  PALADIN_ASSERT_OK(fleet_.Reserve(1, shared, Placement{0, {2}}));
  PALADIN_ASSERT_OK(fleet_.Reserve(2, pair, Placement{0, {0, 1}}));
  PALADIN_ASSERT_OK(fleet_.Reserve(3, cpu_only, Placement{0, {}}));

  const Node& n = fleet_.node(0);
  EXPECT_EQ(n.cpu_left, 32000 - 4000 - 8000 - 2000);
  EXPECT_EQ(n.mem_left, 65536 - 8192 - 16384 - 1024);
  EXPECT_EQ(n.gpus[0].milli_left, 0);
  EXPECT_EQ(n.gpus[0].mem_left_mib, 15109 - 10000);
  EXPECT_EQ(n.gpus[1].milli_left, 0);
  EXPECT_EQ(n.gpus[1].mem_left_mib, 15109 - 10000);
  EXPECT_EQ(n.gpus[2].milli_left, 700);
  EXPECT_EQ(n.gpus[2].mem_left_mib, 15109 - 4000);
  EXPECT_EQ(n.gpus[3].milli_left, 1000);
  EXPECT_EQ(n.gpus[3].mem_left_mib, 15109);
  EXPECT_EQ(fleet_.GpuMilliUsed(), 300 + 2000);
  EXPECT_EQ(n.affinity.count[0], 1);  // one shared-GPU workload
  EXPECT_EQ(n.affinity.count[2], 1);  // one 2-GPU workload; CPU-only work has no tag
  EXPECT_EQ(n.affinity.distinct, 2);
  EXPECT_EQ(fleet_.reservation_count(), 3u);

  fleet_.Unreserve(2);
  fleet_.Unreserve(1);
  fleet_.Unreserve(3);
  EXPECT_EQ(StateOf(fleet_), pristine_);

  // The ids are free again.
  PALADIN_EXPECT_OK(fleet_.Reserve(1, pair, Placement{1, {0, 1}}));
}

TEST_F(FleetTest, AffinityCountsFollowEachWorkloadOfAKind) {
  const Workload shared{.gpu_count = 1, .gpu_milli = 250};
  PALADIN_ASSERT_OK(fleet_.Reserve(1, shared, Placement{0, {0}}));
  PALADIN_ASSERT_OK(fleet_.Reserve(2, shared, Placement{0, {0}}));
  EXPECT_EQ(fleet_.node(0).affinity.count[0], 2);
  EXPECT_EQ(fleet_.node(0).affinity.distinct, 1);

  fleet_.Unreserve(1);
  EXPECT_EQ(fleet_.node(0).affinity.count[0], 1);
  EXPECT_EQ(fleet_.node(0).affinity.distinct, 1);
  fleet_.Unreserve(2);
  EXPECT_EQ(StateOf(fleet_), pristine_);
}

TEST_F(FleetTest, ReservingAnIdAgainWithTheSamePlacementIsANoOp) {
  const Workload w{.cpu_milli = 1000, .gpu_count = 1, .gpu_milli = 400};
  PALADIN_ASSERT_OK(fleet_.Reserve(7, w, Placement{0, {1}}));
  const std::string once = StateOf(fleet_);

  PALADIN_EXPECT_OK(fleet_.Reserve(7, w, Placement{0, {1}}));
  EXPECT_EQ(StateOf(fleet_), once);
}

TEST_F(FleetTest, ReservingAnIdAgainWithAnotherPlacementIsAlreadyExists) {
  const Workload w{.cpu_milli = 1000, .gpu_count = 1, .gpu_milli = 400};
  PALADIN_ASSERT_OK(fleet_.Reserve(7, w, Placement{0, {1}}));
  const std::string once = StateOf(fleet_);

  const Status other_gpu = fleet_.Reserve(7, w, Placement{0, {2}});
  EXPECT_EQ(other_gpu.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(other_gpu.message(), HasSubstr("reservation 7 already holds node t4-node"));
  EXPECT_EQ(fleet_.Reserve(7, w, Placement{1, {1}}).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(StateOf(fleet_), once);
}

TEST_F(FleetTest, UnreserveOfAnUnknownIdIsANoOp) {
  const Workload w{.cpu_milli = 1000, .mem_mib = 10};
  PALADIN_ASSERT_OK(fleet_.Reserve(1, w, Placement{2, {}}));
  const std::string reserved = StateOf(fleet_);

  fleet_.Unreserve(99);
  EXPECT_EQ(StateOf(fleet_), reserved);

  fleet_.Unreserve(1);
  fleet_.Unreserve(1);  // twice: the second is unknown by now
  EXPECT_EQ(StateOf(fleet_), pristine_);
}

TEST_F(FleetTest, AFailedReserveChangesNothing) {
  const Workload too_big{.cpu_milli = 32001};
  EXPECT_EQ(fleet_.Reserve(1, too_big, Placement{0, {}}).code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(fleet_.IsReserved(1));
  EXPECT_EQ(StateOf(fleet_), pristine_);
}

TEST_F(FleetTest, CheckPlacementRefusesAModelTheWorkloadDoesNotAllow) {
  const Workload v100_only{
      .gpu_count = 1, .gpu_milli = 1000, .allowed_models = ModelMask{1} << v100_};
  const Status st = fleet_.CheckPlacement(v100_only, Placement{0, {0}});
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(),
              AllOf(HasSubstr("t4-node"), HasSubstr("GPU model T4"), HasSubstr("allows V100M32")));
  PALADIN_EXPECT_OK(fleet_.CheckPlacement(v100_only, Placement{1, {0}}));
}

TEST_F(FleetTest, CheckPlacementRefusesOneMilliCpuTooMany) {
  // t4-node has 32000m CPU free.
  const Status short_by_one = fleet_.CheckPlacement(Workload{.cpu_milli = 32001}, Placement{0, {}});
  EXPECT_EQ(short_by_one.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(short_by_one.message(), HasSubstr("CPU 32000m free < 32001m requested"));
  PALADIN_EXPECT_OK(fleet_.CheckPlacement(Workload{.cpu_milli = 32000}, Placement{0, {}}));
}

TEST_F(FleetTest, CheckPlacementRefusesOneMibMemoryTooMany) {
  // t4-node has 65536 MiB free.
  const Status short_by_one = fleet_.CheckPlacement(Workload{.mem_mib = 65537}, Placement{0, {}});
  EXPECT_EQ(short_by_one.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(short_by_one.message(), HasSubstr("memory 65536 MiB free < 65537 MiB requested"));
  PALADIN_EXPECT_OK(fleet_.CheckPlacement(Workload{.mem_mib = 65536}, Placement{0, {}}));
}

TEST_F(FleetTest, CheckPlacementRefusesOneMilliGpuShareTooMany) {
  PALADIN_ASSERT_OK(
      fleet_.Reserve(1, Workload{.gpu_count = 1, .gpu_milli = 300}, Placement{0, {2}}));
  // GPU 2 now has 1000 - 300 = 700 milli free.
  const Workload wants_701{.gpu_count = 1, .gpu_milli = 701};
  const Status st = fleet_.CheckPlacement(wants_701, Placement{0, {2}});
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("GPU 2: 700 milli free < 701 requested"));
  PALADIN_EXPECT_OK(
      fleet_.CheckPlacement(Workload{.gpu_count = 1, .gpu_milli = 700}, Placement{0, {2}}));
}

TEST_F(FleetTest, CheckPlacementRefusesOneMibGpuMemoryTooMany) {
  // A T4 has 15109 MiB.
  const Workload wants_15110{.gpu_count = 1, .gpu_milli = 100, .gpu_mem_mib = 15110};
  const Status st = fleet_.CheckPlacement(wants_15110, Placement{0, {0}});
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("15109 MiB GPU memory free < 15110 requested"));
  PALADIN_EXPECT_OK(fleet_.CheckPlacement(
      Workload{.gpu_count = 1, .gpu_milli = 100, .gpu_mem_mib = 15109}, Placement{0, {0}}));
}

TEST_F(FleetTest, GpuMemoryOfAnUndisclosedModelIsNotChecked) {
  AddTestNode(fleet_, "g2-node", 8000, 8192, 1, "G2");  // node 3; G2's memory is unknown (0)
  const Workload w{.gpu_count = 1, .gpu_milli = 100, .gpu_mem_mib = 1 << 20};
  PALADIN_ASSERT_OK(fleet_.Reserve(1, w, Placement{3, {0}}));
  EXPECT_EQ(fleet_.node(3).gpus[0].mem_left_mib, 0);  // untracked stays untracked
}

TEST_F(FleetTest, CheckPlacementRefusesMalformedPlacements) {
  const Workload one_gpu{.gpu_count = 1, .gpu_milli = 1000};
  const Workload two_gpus{.gpu_count = 2, .gpu_milli = 1000};
  const Workload cpu_only{.cpu_milli = 1000};
  struct Case {
    const char* what;
    const Workload& w;
    Placement p;
    const char* message_part;
  };
  const Case cases[] = {
      {"repeated GPU index", two_gpus, {0, {1, 1}}, "repeated"},
      {"index past the last GPU", one_gpu, {0, {4}}, "out of range"},
      {"negative index", one_gpu, {0, {-1}}, "out of range"},
      {"too few GPUs", two_gpus, {0, {0}}, "gives 1 GPUs for a workload asking 2"},
      {"too many GPUs", one_gpu, {0, {0, 1}}, "gives 2 GPUs for a workload asking 1"},
      {"GPUs for CPU-only work", cpu_only, {0, {0}}, "gives 1 GPUs for a workload asking 0"},
      {"no GPUs for GPU work", one_gpu, {0, {}}, "gives 0 GPUs for a workload asking 1"},
      {"no such node", one_gpu, {3, {0}}, "names no node"},
      {"negative node", one_gpu, {-1, {0}}, "names no node"},
  };
  for (const Case& c : cases) {
    const Status st = fleet_.CheckPlacement(c.w, c.p);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(st.message(), HasSubstr(c.message_part)) << c.what;
  }
}

}  // namespace
}  // namespace paladin::core
