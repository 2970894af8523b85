// paladin k8s checkpoint and recover, their pure parts: the images' names and owner files, when a
// node counts as lost, which pods a recovery brings back and from which image, and the delete
// that removes the old pod at once.
#include "paladin/k8s/recover.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace paladin::k8s {
namespace {

using Json = nlohmann::json;

TEST(CheckpointImageName, IsPrefixUidAndTime) {
  EXPECT_EQ(CheckpointImageName("0b6e-41aa", 1700000000123), "recover-0b6e-41aa-1700000000123");
  // A uid is never a path or a shell word: anything else gives no name.
  EXPECT_EQ(CheckpointImageName("", 1), "");
  EXPECT_EQ(CheckpointImageName("../x", 1), "");
  EXPECT_EQ(CheckpointImageName("a b", 1), "");
  EXPECT_EQ(CheckpointImageName(std::string(65, 'a'), 1), "");
}

CheckpointInfo Info(const std::string& uid, int64_t ms) {
  CheckpointInfo c;
  c.image = CheckpointImageName(uid, ms);
  c.ns = "team-a";
  c.pod = "demo-m1";
  c.from_pod = "demo";
  c.from_uid = uid;
  c.node = "gpu-2";
  c.ms = ms;
  return c;
}

TEST(OwnerFile, RoundTripsAndIsWhatTheRuntimeReads) {
  CheckpointInfo c = Info("u-1", 42);
  c.gpu_uuid = "GPU-abc";
  const std::string text = OwnerFile(c);
  // scripts/paladin-runc.sh reads the namespace and the pod that may restore it.
  EXPECT_NE(text.find("namespace team-a\npod demo-m1\n"), std::string::npos);
  StatusOr<CheckpointInfo> back = ReadOwnerFile(c.image, text);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->ns, "team-a");
  EXPECT_EQ(back->pod, "demo-m1");
  EXPECT_EQ(back->from_pod, "demo");
  EXPECT_EQ(back->from_uid, "u-1");
  EXPECT_EQ(back->node, "gpu-2");
  EXPECT_EQ(back->gpu_uuid, "GPU-abc");
  EXPECT_EQ(back->ms, 42);
}

TEST(OwnerFile, RefusesAnIncompleteOrMisnamedImage) {
  const CheckpointInfo c = Info("u-1", 42);
  EXPECT_FALSE(ReadOwnerFile(c.image, "namespace team-a\npod demo-m1\n").ok());
  // The name must be this pod's periodic checkpoint: a move's image, another uid's, no time.
  EXPECT_FALSE(ReadOwnerFile("move-123-abcd", OwnerFile(c)).ok());
  EXPECT_FALSE(ReadOwnerFile("recover-u-2-42", OwnerFile(c)).ok());
  EXPECT_FALSE(ReadOwnerFile("recover-u-1-", OwnerFile(c)).ok());
  EXPECT_FALSE(ReadOwnerFile("recover-u-1-4x", OwnerFile(c)).ok());
}

std::string Node(const char* ready) {
  return Json{{"metadata", {{"name", "gpu-2"}}},
              {"status", {{"conditions", {{{"type", "Ready"}, {"status", ready}}}}}}}
      .dump();
}
std::string Lease(const char* renewed) { return Json{{"spec", {{"renewTime", renewed}}}}.dump(); }
// 2026-12-03T04:00:00Z
constexpr double kNow = 1796270400;

TEST(CheckNodeLost, ANodeNotReadyIsLost) {
  EXPECT_TRUE(CheckNodeLost(Node("False"), Lease("2026-12-03T04:00:00.000000Z"), kNow, 40).ok());
  EXPECT_TRUE(CheckNodeLost(Node("Unknown"), "", kNow, 40).ok());
}

TEST(CheckNodeLost, AReadyNodeIsLostOnlyOnceItsLeaseIsOld) {
  // Renewed 3.5 s ago: alive, and the refusal says so.
  const Status fresh = CheckNodeLost(Node("True"), Lease("2026-12-03T03:59:56.500000Z"), kNow, 40);
  ASSERT_FALSE(fresh.ok());
  EXPECT_NE(fresh.message().find("not lost"), std::string::npos) << fresh.message();
  EXPECT_NE(fresh.message().find("3.5 s ago"), std::string::npos) << fresh.message();
  // 41 s ago with 40 allowed: lost; with 60 allowed: not.
  EXPECT_TRUE(CheckNodeLost(Node("True"), Lease("2026-12-03T03:59:19.000000Z"), kNow, 40).ok());
  EXPECT_FALSE(CheckNodeLost(Node("True"), Lease("2026-12-03T03:59:19.000000Z"), kNow, 60).ok());
  // Never before the lease's own duration: renewed 7.7 s ago, renewed every 10 s (40 s leases),
  // is alive even with 4 s asked.
  const std::string lease40 =
      Json{{"spec", {{"renewTime", "2026-12-03T03:59:52.300000Z"}, {"leaseDurationSeconds", 40}}}}
          .dump();
  EXPECT_FALSE(CheckNodeLost(Node("True"), lease40, kNow, 4).ok());
  const std::string lease8 =
      Json{{"spec", {{"renewTime", "2026-12-03T03:59:52.300000Z"}, {"leaseDurationSeconds", 8}}}}
          .dump();
  EXPECT_FALSE(CheckNodeLost(Node("True"), lease8, kNow, 4).ok());
  const std::string lease5 =
      Json{{"spec", {{"renewTime", "2026-12-03T03:59:52.300000Z"}, {"leaseDurationSeconds", 5}}}}
          .dump();
  EXPECT_TRUE(CheckNodeLost(Node("True"), lease5, kNow, 4).ok());
  // No lease to tell: never lost on missing evidence (Ready says alive).
  EXPECT_FALSE(CheckNodeLost(Node("True"), "", kNow, 40).ok());
  EXPECT_FALSE(CheckNodeLost(Node("True"), Lease("yesterday"), kNow, 40).ok());
  std::string why;
  EXPECT_TRUE(
      CheckNodeLost(Node("True"), Lease("2026-12-03T03:59:19.000000Z"), kNow, 40, &why).ok());
  EXPECT_NE(why.find("41.0 s ago"), std::string::npos) << why;
  EXPECT_FALSE(CheckNodeLost("not json", "", kNow, 40).ok());
}

TEST(LostNodes, TheLostOnesLessTheRecoveringNode) {
  auto node = [](const char* name, const char* ready) {
    return Json{{"metadata", {{"name", name}}},
                {"status", {{"conditions", {{{"type", "Ready"}, {"status", ready}}}}}}};
  };
  auto lease = [](const char* name, const char* renewed) {
    return Json{{"metadata", {{"name", name}}}, {"spec", {{"renewTime", renewed}}}};
  };
  const std::string nodes =
      Json{{"items",
            {node("alive", "True"), node("silent", "True"), node("notready", "False"),
             node("here", "False"), node("nolease", "True")}}}
          .dump();
  const std::string leases = Json{{"items",
                                   {lease("alive", "2026-12-03T03:59:58.000000Z"),
                                    lease("silent", "2026-12-03T03:58:00.000000Z"),
                                    lease("notready", "2026-12-03T03:59:59.000000Z")}}}
                                 .dump();
  StatusOr<std::vector<std::string>> lost = LostNodes(nodes, leases, kNow, 40, "here");
  ASSERT_TRUE(lost.ok()) << lost.status().message();
  EXPECT_EQ(*lost, (std::vector<std::string>{"silent", "notready"}));
  EXPECT_FALSE(LostNodes("[]", leases, kNow, 40, "").ok());
}

Json Pod(const std::string& name, const std::string& uid, const std::string& node,
         const char* runtime = "paladin", const char* phase = "Running") {
  Json p = {{"metadata", {{"name", name}, {"namespace", "team-a"}, {"uid", uid}}},
            {"spec", {{"nodeName", node}, {"containers", {{{"name", "demo"}}}}}},
            {"status", {{"phase", phase}}}};
  if (runtime != nullptr) p["spec"]["runtimeClassName"] = runtime;
  return p;
}
std::string List(const std::vector<Json>& pods) { return Json{{"items", pods}}.dump(); }

TEST(PlanRecovery, EachPodFromItsLatestImage) {
  const std::vector<CheckpointInfo> images = {Info("u-1", 10), Info("u-1", 30), Info("u-1", 20),
                                              Info("u-9", 50)};
  StatusOr<RecoverPlan> plan = PlanRecovery("gpu-2", List({Pod("demo", "u-1", "gpu-2")}), images);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->recover.size(), 1u);
  const RecoverItem& r = plan->recover[0];
  EXPECT_EQ(r.ns, "team-a");
  EXPECT_EQ(r.name, "demo");
  EXPECT_EQ(r.uid, "u-1");
  EXPECT_EQ(r.image.image, "recover-u-1-30");
  EXPECT_EQ(r.new_name, "demo-m1");
  EXPECT_TRUE(r.old_pod_exists);
  EXPECT_TRUE(plan->left.empty());
}

TEST(PlanRecovery, LeavesWhatItCannotBringBackSayingWhy) {
  const std::vector<Json> pods = {
      Pod("plain", "u-2", "gpu-2", nullptr),                // another runtime: Kubernetes' job
      Pod("never", "u-3", "gpu-2"),                         // no image of it
      Pod("done", "u-4", "gpu-2", "paladin", "Succeeded"),  // finished: nothing to bring back
      Pod("elsewhere", "u-5", "gpu-1")};                    // not on the lost node
  StatusOr<RecoverPlan> plan = PlanRecovery("gpu-2", List(pods), {Info("u-4", 1), Info("u-5", 1)});
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->recover.empty());
  ASSERT_EQ(plan->left.size(), 2u);
  EXPECT_NE(plan->left[0].find("team-a/plain: not of the RuntimeClass"), std::string::npos);
  EXPECT_NE(plan->left[1].find("team-a/never: no checkpoint"), std::string::npos);
  EXPECT_FALSE(PlanRecovery("gpu-2", "{}", {}).ok());
}

TEST(PlanRecovery, NeverFromAnImageRestoredAlready) {
  // A recovery that restored its pod from recover-u-1-30 and stopped before removing the image:
  // the pod is not brought back twice, from that image or an older one.
  CheckpointInfo spent = Info("u-1", 30);
  spent.restored = true;
  spent.claimed = true;
  StatusOr<RecoverPlan> plan = PlanRecovery("gpu-2", List({}), {spent});
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->recover.empty());
}

TEST(PlanRecovery, FinishesARecoveryInterruptedAfterTheDelete) {
  // The pod is gone from the API server, its image claimed and not restored: recovered from the
  // pod recorded with the image. An unclaimed image of a gone pod (moved, deleted) is not.
  CheckpointInfo claimed = Info("u-1", 30);
  claimed.claimed = true;
  claimed.pod_json = Pod("demo", "u-1", "gpu-2").dump();
  CheckpointInfo unclaimed = Info("u-7", 30);
  unclaimed.pod_json = Pod("other", "u-7", "gpu-2").dump();
  CheckpointInfo other_node = Info("u-8", 30);
  other_node.claimed = true;
  other_node.node = "gpu-3";
  other_node.pod_json = Pod("third", "u-8", "gpu-3").dump();
  StatusOr<RecoverPlan> plan = PlanRecovery("gpu-2", List({}), {claimed, unclaimed, other_node});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->recover.size(), 1u);
  EXPECT_EQ(plan->recover[0].name, "demo");
  EXPECT_FALSE(plan->recover[0].old_pod_exists);
  EXPECT_EQ(plan->recover[0].image.image, "recover-u-1-30");
}

TEST(ForceDeleteBody, GraceZeroOnlyForThatUid) {
  const Json body = Json::parse(ForceDeleteBody("u-1"));
  EXPECT_EQ(body["kind"], "DeleteOptions");
  EXPECT_EQ(body["gracePeriodSeconds"], 0);
  EXPECT_EQ(body["preconditions"]["uid"], "u-1");
}

}  // namespace
}  // namespace paladin::k8s
