// paladin k8s move, its pure parts: the restore token (the same HMAC scripts/paladin-runc.sh
// computes in the shell), the replacement's name, which pods it refuses to move, the targets it
// refuses, the replacement pod it creates, and a drain's plan.
#include "paladin/k8s/move.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "paladin/k8s/scheduler.h"
#include "paladin/k8s/server_moves.h"

namespace paladin::k8s {
namespace {

using Json = nlohmann::json;

// The key bytes 0x00..0x1f; the expected value is openssl's:
//   printf 'paladin-restore-v1\nmove-1\nteam-a\ndemo-m1\n' |
//     openssl dgst -sha256 -mac HMAC -macopt hexkey:000102...1f
TEST(RestoreToken, IsHmacSha256OverImageNamespaceAndPod) {
  std::string key;
  for (int i = 0; i < 32; ++i) key.push_back(static_cast<char>(i));
  EXPECT_EQ(RestoreToken(key, "move-1", "team-a", "demo-m1"),
            "f87b6ee5c6da1b3c639c19000394b32ff58cc5fae23817e05f7006454e921cc3");
  // Each field counts, and they cannot be shifted into one another.
  EXPECT_NE(RestoreToken(key, "move-1", "team-b", "demo-m1"),
            RestoreToken(key, "move-1", "team-a", "demo-m1"));
  EXPECT_NE(RestoreToken(key, "move-1", "team-a", "demo-m2"),
            RestoreToken(key, "move-1", "team-a", "demo-m1"));
  EXPECT_NE(RestoreToken(key, "move-1\nteam-a", "", "demo-m1"),
            RestoreToken(key, "move-1", "team-a", "demo-m1"));
}

TEST(NextPodName, CountsMoves) {
  EXPECT_EQ(NextPodName("demo"), "demo-m1");
  EXPECT_EQ(NextPodName("demo-m1"), "demo-m2");
  EXPECT_EQ(NextPodName("demo-m9"), "demo-m10");
  EXPECT_EQ(NextPodName("demo-mx"), "demo-mx-m1");
  EXPECT_EQ(NextPodName("demo-m"), "demo-m-m1");
}

Json RunningPod() {
  return Json::parse(R"({
    "metadata": {"name": "demo", "namespace": "team-a", "uid": "u-1",
                 "labels": {"app": "demo"},
                 "annotations": {"paladin.io/gpu": "0", "paladin.io/gpu-memory-bytes": "2147483648",
                                 "paladin.io/placement": "localhost/0 by ...", "keep": "me"}},
    "spec": {"nodeName": "localhost", "runtimeClassName": "paladin", "schedulerName": "paladin",
             "priority": 0, "containers": [{"name": "demo", "image": "x"}]},
    "status": {"phase": "Running",
               "containerStatuses": [{"name": "demo", "containerID": "containerd://abc",
                                      "state": {"running": {}}}]}})");
}

TEST(ReadMovablePod, ReadsARunningPodOfTheRuntimeClass) {
  StatusOr<MovablePod> p = ReadMovablePod(RunningPod().dump());
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->ns, "team-a");
  EXPECT_EQ(p->node, "localhost");
  EXPECT_EQ(p->container, "demo");
  EXPECT_EQ(p->container_id, "abc");
  EXPECT_EQ(p->gpu, 0);
}

TEST(ReadMovablePod, RefusesWhatCannotBeMovedNamingWhy) {
  struct Case {
    const char* what;
    void (*change)(Json*);
    const char* says;
  };
  const Case cases[] = {
      {"pending", [](Json* p) { (*p)["status"]["phase"] = "Pending"; }, "not Running"},
      {"deleting", [](Json* p) { (*p)["metadata"]["deletionTimestamp"] = "x"; }, "being deleted"},
      {"runc", [](Json* p) { (*p)["spec"].erase("runtimeClassName"); }, "RuntimeClass"},
      {"two containers",
       [](Json* p) {
         (*p)["spec"]["containers"].push_back({{"name", "b"}});
       },
       "one container"},
      {"exited",
       [](Json* p) {
         (*p)["status"]["containerStatuses"][0]["state"] = {{"terminated", Json::object()}};
       },
       "not running"},
      {"bad gpu", [](Json* p) { (*p)["metadata"]["annotations"]["paladin.io/gpu"] = "zero"; },
       "not a GPU index"},
      // Its ReplicaSet would start it afresh beside the moved copy.
      {"controlled",
       [](Json* p) {
         (*p)["metadata"]["ownerReferences"] =
             Json::array({{{"kind", "ReplicaSet"}, {"name", "train-7d9"}, {"controller", true}}});
       },
       "managed by ReplicaSet train-7d9"},
  };
  for (const Case& c : cases) {
    Json pod = RunningPod();
    c.change(&pod);
    StatusOr<MovablePod> p = ReadMovablePod(pod.dump());
    ASSERT_FALSE(p.ok()) << c.what;
    EXPECT_NE(p.status().message().find(c.says), std::string::npos)
        << c.what << ": " << p.status().message();
  }
}

TEST(ReplacementPod, CarriesTheRestoreAndLeavesBindingToTheScheduler) {
  Replacement r;
  r.name = "demo-m1";
  r.image = "move-1";
  r.token = "t";
  r.node = "localhost";
  r.gpu = 1;
  StatusOr<std::string> out = ReplacementPod(RunningPod().dump(), r);
  ASSERT_TRUE(out.ok());
  const Json pod = Json::parse(*out);
  const Json& a = pod["metadata"]["annotations"];
  EXPECT_EQ(pod["metadata"]["name"], "demo-m1");
  EXPECT_EQ(pod["metadata"]["namespace"], "team-a");
  EXPECT_EQ(pod["metadata"]["labels"]["app"], "demo");
  EXPECT_EQ(a[kRestoreFromAnnotation], "move-1");
  EXPECT_EQ(a[kRestoreTokenAnnotation], "t");
  EXPECT_EQ(a[kMoveToAnnotation], "localhost/1");
  EXPECT_EQ(a["keep"], "me");
  // The old binding is not copied: the scheduler binds the new pod afresh.
  EXPECT_FALSE(a.contains(kGpuAnnotation));
  EXPECT_FALSE(a.contains(kGpuBytesAnnotation));
  EXPECT_FALSE(a.contains(kPlacementAnnotation));
  EXPECT_FALSE(pod["spec"].contains("nodeName"));
  EXPECT_FALSE(pod["spec"].contains("priority"));
  EXPECT_FALSE(pod.contains("status"));
  EXPECT_FALSE(pod["metadata"].contains("uid"));
  // Without a Paladin GPU the new pod stays on the node, named directly.
  r.gpu = -1;
  const Json plain = Json::parse(*ReplacementPod(RunningPod().dump(), r));
  EXPECT_EQ(plain["spec"]["nodeName"], "localhost");
  EXPECT_FALSE(plain["metadata"]["annotations"].contains(kMoveToAnnotation));
}

TEST(CheckTarget, ANodeNeedsItsImageFolderOrMoverAndAGpuPodAGpu) {
  MovablePod gpu_pod;
  gpu_pod.ns = "team-a";
  gpu_pod.name = "demo";
  gpu_pod.node = "n1";
  gpu_pod.gpu = 0;
  MovablePod plain = gpu_pod;
  plain.gpu = -1;

  // No node given: the pod's own; a GPU pod given no GPU gets the packer's (MovePod asks it),
  // one given its own GPU is refused.
  MoveOptions o;
  EXPECT_TRUE(CheckTarget(gpu_pod, o).ok());
  EXPECT_EQ(o.node, "n1");
  EXPECT_EQ(o.gpu, -1);
  o.gpu = 0;
  EXPECT_EQ(CheckTarget(gpu_pod, o).code(), StatusCode::kInvalidArgument);  // already there
  o.gpu = 1;
  EXPECT_TRUE(CheckTarget(gpu_pod, o).ok());

  // Another node: refused without the folder the image is carried to, naming the flag.
  o = MoveOptions();
  o.node = "n2";
  const Status no_folder = CheckTarget(plain, o);
  EXPECT_EQ(no_folder.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_folder.message().find("--to-images"), std::string::npos) << no_folder.message();
  EXPECT_NE(no_folder.message().find("--to-mover"), std::string::npos) << no_folder.message();
  // Or its mover's address (between machines); both at once, or an address without a port, are
  // refused.
  MoveOptions remote = o;
  remote.to_mover = "10.0.0.2:7446";
  EXPECT_TRUE(CheckTarget(plain, remote).ok());
  remote.to_mover = "10.0.0.2";
  EXPECT_EQ(CheckTarget(plain, remote).code(), StatusCode::kInvalidArgument);
  remote.to_mover = "10.0.0.2:7446";
  remote.to_images = "/n2/images";
  const Status both = CheckTarget(plain, remote);
  EXPECT_NE(both.message().find("give one"), std::string::npos) << both.message();
  o.to_images = "/n2/images";
  EXPECT_TRUE(CheckTarget(plain, o).ok());
  EXPECT_EQ(o.gpu, -1);
  // A GPU pod goes where the packer chooses there unless told (MovePod asks it); the same index
  // is no longer "there".
  MoveOptions g = o;
  EXPECT_TRUE(CheckTarget(gpu_pod, g).ok());
  EXPECT_EQ(g.gpu, -1);
  g.gpu = 0;
  EXPECT_TRUE(CheckTarget(gpu_pod, g).ok());
  // --gpu is for pods Paladin placed on a GPU.
  o.gpu = 1;
  EXPECT_EQ(CheckTarget(plain, o).code(), StatusCode::kFailedPrecondition);
}

TEST(CheckDestinationNode, ReadyAndNotCordoned) {
  Json node = Json::parse(R"({"metadata": {"name": "n2"}, "spec": {},
    "status": {"conditions": [{"type": "Ready", "status": "True"}]}})");
  EXPECT_TRUE(CheckDestinationNode(node.dump()).ok());
  node["spec"]["unschedulable"] = true;
  EXPECT_NE(CheckDestinationNode(node.dump()).message().find("cordoned"), std::string::npos);
  node["spec"].erase("unschedulable");
  node["status"]["conditions"][0]["status"] = "Unknown";
  node["status"]["conditions"][0]["reason"] = "NodeStatusUnknown";
  EXPECT_NE(CheckDestinationNode(node.dump()).message().find("not Ready (NodeStatusUnknown)"),
            std::string::npos);
  node["status"].erase("conditions");
  EXPECT_FALSE(CheckDestinationNode(node.dump()).ok());
}

TEST(PlanDrain, MovesThePodsOfTheRuntimeClassAndSaysWhyOthersStay) {
  Json plain = RunningPod();
  plain["metadata"]["name"] = "web";
  plain["spec"].erase("runtimeClassName");
  Json done = RunningPod();
  done["metadata"]["name"] = "job";
  done["status"]["phase"] = "Succeeded";
  Json second = RunningPod();
  second["metadata"]["name"] = "demo-2";
  Json owned = RunningPod();
  owned["metadata"]["name"] = "train-7d9-x2";
  owned["metadata"]["ownerReferences"] =
      Json::array({{{"kind", "ReplicaSet"}, {"name", "train-7d9"}, {"controller", true}}});
  const Json list = {{"kind", "PodList"}, {"items", {RunningPod(), plain, done, second, owned}}};
  StatusOr<DrainPlan> plan = PlanDrain(list.dump());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->move.size(), 2u);
  EXPECT_EQ(plan->move[0].name, "demo");
  EXPECT_EQ(plan->move[1].name, "demo-2");
  // A finished pod runs nothing: neither moved nor reported. A controller's pod is left: its
  // controller would start it afresh beside the moved copy.
  ASSERT_EQ(plan->left.size(), 2u);
  EXPECT_EQ(plan->left[0].rfind("team-a/web: ", 0), 0u) << plan->left[0];
  EXPECT_NE(plan->left[0].find("RuntimeClass"), std::string::npos) << plan->left[0];
  EXPECT_EQ(plan->left[1].rfind("team-a/train-7d9-x2: ", 0), 0u) << plan->left[1];
  EXPECT_NE(plan->left[1].find("managed by ReplicaSet train-7d9"), std::string::npos)
      << plan->left[1];
  EXPECT_FALSE(PlanDrain("[]").ok());
  EXPECT_FALSE(PlanDrain(R"({"items": 3})").ok());
}

TEST(ServerMoveOptions, AMoveFromTheServerBecomesTheMoversOwnOptions) {
  MoverOptions o;
  o.node = "node-1";
  o.move.runc = "/opt/runc";
  o.move.images = "/var/lib/paladin/k8s/images";
  o.move.ns = "left-over";
  o.move.new_name = "left-over";
  o.move.to_images = "/left/over";
  o.node_images["node-2"] = "/mnt/node-2/images";
  api::PodMove m;
  m.id = 7;
  m.ns = "ml";
  m.name = "train";
  m.from_node = "node-1";
  m.from_gpu = 0;

  // Within the node: to the GPU asked, or the packer's; nothing carried between nodes.
  m.to.gpu = 1;
  StatusOr<MoveOptions> within = ServerMoveOptions(m, o);
  ASSERT_TRUE(within.ok()) << within.status().ToString();
  EXPECT_EQ(within->ns, "ml");
  EXPECT_EQ(within->pod, "train");
  EXPECT_EQ(within->new_name, "");  // train-m1
  EXPECT_EQ(within->node, "node-1");
  EXPECT_EQ(within->gpu, 1);
  EXPECT_EQ(within->to_images, "");
  EXPECT_EQ(within->runc, "/opt/runc");
  EXPECT_EQ(within->images, "/var/lib/paladin/k8s/images");

  // To a node whose image folder the mover knows: carried there.
  m.to = {"node-2", -1};
  StatusOr<MoveOptions> there = ServerMoveOptions(m, o);
  ASSERT_TRUE(there.ok()) << there.status().ToString();
  EXPECT_EQ(there->node, "node-2");
  EXPECT_EQ(there->gpu, -1);
  EXPECT_EQ(there->to_images, "/mnt/node-2/images");

  EXPECT_EQ(there->to_mover, "");

  // To a node on another machine whose mover it knows: sent there over the network.
  o.node_movers["node-4"] = "10.0.0.4:7446";
  m.to = {"node-4", 1};
  StatusOr<MoveOptions> remote = ServerMoveOptions(m, o);
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  EXPECT_EQ(remote->to_images, "");
  EXPECT_EQ(remote->to_mover, "10.0.0.4:7446");

  // To one it does not: the move fails naming the flags, before anything is touched.
  m.to = {"node-3", 0};
  StatusOr<MoveOptions> unknown = ServerMoveOptions(m, o);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find(
                "knows neither the image folder nor the mover of node node-3 (paladin k8s mover "
                "--node-images node-3=DIR, or --node-movers node-3=HOST:PORT)"),
            std::string::npos)
      << unknown.status().message();
}

// A move to a node that no flag names: its image goes to the mover pod found on that node.
TEST(ServerMoveOptions, ANodeNamedByNoFlagHasItsMoverFoundByItsPod) {
  MoverOptions o;
  o.node = "node-1";
  api::PodMove m;
  m.ns = "ml";
  m.name = "train";
  m.from_node = "node-1";
  m.to = {"node-5", -1};
  int asked = 0;
  auto find = [&](const std::string& node) -> StatusOr<std::string> {
    ++asked;
    EXPECT_EQ(node, "node-5");
    return std::string("10.0.0.5:7446");
  };
  // Without --carry-port, no lookup: the move fails naming the flags.
  EXPECT_FALSE(ServerMoveOptions(m, o, find).ok());
  EXPECT_EQ(asked, 0);
  o.carry_port = 7446;
  StatusOr<MoveOptions> found = ServerMoveOptions(m, o, find);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->to_mover, "10.0.0.5:7446");
  EXPECT_EQ(asked, 1);
  // A lookup that fails fails the move with its reason.
  StatusOr<MoveOptions> none = ServerMoveOptions(
      m, o, [](const std::string&) -> StatusOr<std::string> { return Unavailable("no mover"); });
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), "no mover: nothing moved");
}

TEST(MoverAddress, TheRunningMoverPodOnTheNodeAtItsIp) {
  auto pod = [](const std::string& name, const std::string& node, const std::string& phase,
                const std::string& ip) {
    Json p = {{"metadata", {{"name", name}}},
              {"spec", {{"nodeName", node}}},
              {"status", {{"phase", phase}}}};
    if (!ip.empty()) p["status"]["podIP"] = ip;
    return p;
  };
  Json list = {
      {"items",
       {pod("mover-a", "node-1", "Running", "10.0.0.1"),
        pod("mover-old", "node-2", "Failed", "10.0.0.9"),
        pod("mover-b", "node-2", "Running", "10.0.0.2"), pod("mover-c", "node-3", "Pending", ""),
        pod("mover-d", "node-6", "Running", "fd00::6")}}};
  StatusOr<std::string> at = MoverAddress(list.dump(), "node-2", 7446);
  ASSERT_TRUE(at.ok()) << at.status().ToString();
  EXPECT_EQ(*at, "10.0.0.2:7446");
  at = MoverAddress(list.dump(), "node-6", 7446);
  ASSERT_TRUE(at.ok());
  EXPECT_EQ(*at, "[fd00::6]:7446");
  at = MoverAddress(list.dump(), "node-3", 7446);
  ASSERT_FALSE(at.ok());
  EXPECT_EQ(at.status().message(),
            "node node-3 has no running mover to send the image to (its mover pod mover-c is "
            "Pending)");
  at = MoverAddress(list.dump(), "node-4", 7446);
  ASSERT_FALSE(at.ok());
  EXPECT_EQ(at.status().message(), "node node-4 has no running mover to send the image to");
  EXPECT_FALSE(MoverAddress("[]", "node-1", 7446).ok());
  EXPECT_FALSE(MoverAddress(R"({"items": [1, "x", {"spec": 3}]})", "node-1", 7446).ok());
}

// A move's leftover copies of its image on the source node: those whose owner file names the
// replacement and the pod, and nothing else.
TEST(RemoveMoveImages, OnlyThoseOfTheMove) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("move_images." + std::to_string(getpid()));
  fs::remove_all(dir);
  auto image = [&](const std::string& name, const std::string& owner) {
    fs::create_directories(dir / name / "demo");
    std::ofstream(dir / name / "owner") << owner;
  };
  image("move-1-aaaa", "namespace ml\npod train-m1\nfrom ml/train uid-1\n");
  image("move-2-bbbb", "namespace ml\npod train-m1\nfrom ml/train uid-1\n");  // a second try
  image("move-3-cccc", "namespace ml\npod train-m2\nfrom ml/train-m1 uid-2\n");
  image("move-4-dddd", "namespace other\npod train-m1\nfrom other/train uid-3\n");
  image("recover-uid-1-5", "namespace ml\npod train-m1\nfrom ml/train uid-1\n");
  EXPECT_EQ(RemoveMoveImages(dir.string(), "ml", "train", "train-m1"), 2);
  EXPECT_FALSE(fs::exists(dir / "move-1-aaaa"));
  EXPECT_FALSE(fs::exists(dir / "move-2-bbbb"));
  EXPECT_TRUE(fs::exists(dir / "move-3-cccc"));
  EXPECT_TRUE(fs::exists(dir / "move-4-dddd"));
  EXPECT_TRUE(fs::exists(dir / "recover-uid-1-5"));
  EXPECT_EQ(RemoveMoveImages((dir / "none").string(), "ml", "train", "train-m1"), 0);
  fs::remove_all(dir);
}

std::string LeftoverPod(const std::string& name, const std::string& phase,
                        const std::string& moved_from) {
  nlohmann::json pod = {{"metadata", {{"name", name}, {"namespace", "ml"}}},
                        {"status", {{"phase", phase}}}};
  if (!moved_from.empty()) pod["metadata"]["annotations"][kMovedFromAnnotation] = moved_from;
  return pod.dump();
}

TEST(SettleLeftover, FinishesWhatRanWaitsForWhatStartsResumesOnTheNodeAndFailsTheRest) {
  api::PodMove m;
  m.id = 3;
  m.ns = "ml";
  m.name = "train";
  const std::string mine = "ml/train (8d2f0c1e)";
  const std::string running_old = LeftoverPod("train", "Running", "");

  // The replacement runs: done, the old pod deleted first when it is still there.
  Leftover l = SettleLeftover(m, running_old, LeftoverPod("train-m1", "Running", mine));
  EXPECT_EQ(l.action, Leftover::Action::kDeleteOldThenDone);
  EXPECT_EQ(l.new_name, "train-m1");
  l = SettleLeftover(m, "", LeftoverPod("train-m1", "Running", mine));
  EXPECT_EQ(l.action, Leftover::Action::kDone);
  EXPECT_EQ(l.message, "finished by the next pass of its mover: the replacement ml/train-m1 runs");
  // Still starting: wait; ended: failed.
  EXPECT_EQ(SettleLeftover(m, "", LeftoverPod("train-m1", "Pending", mine)).action,
            Leftover::Action::kWait);
  l = SettleLeftover(m, "", LeftoverPod("train-m1", "Failed", mine));
  EXPECT_EQ(l.action, Leftover::Action::kFail);
  EXPECT_NE(l.message.find("ended (Failed)"), std::string::npos) << l.message;

  // A pod of that name that is not this pod's replacement is none: the pod, still there
  // (Running, whether its container runs or has exited after the checkpoint), is settled on the
  // node (ResumeMove).
  l = SettleLeftover(m, running_old, LeftoverPod("train-m1", "Running", "ml/other (1)"));
  EXPECT_EQ(l.action, Leftover::Action::kResume);
  l = SettleLeftover(m, running_old, LeftoverPod("train-m1", "Running", "ml/train-x (1)"));
  EXPECT_EQ(l.action, Leftover::Action::kResume);
  EXPECT_EQ(SettleLeftover(m, running_old, "").action, Leftover::Action::kResume);

  // No replacement and the pod shown ended (its container exited at the checkpoint): settled on
  // the node too, which finishes the move when the image is whole.
  EXPECT_EQ(SettleLeftover(m, LeftoverPod("train", "Failed", ""), "").action,
            Leftover::Action::kResume);
  EXPECT_EQ(SettleLeftover(m, LeftoverPod("train", "Succeeded", ""), "").action,
            Leftover::Action::kResume);
  // No replacement and the pod gone: nothing to finish the move with.
  l = SettleLeftover(m, "", "");
  EXPECT_EQ(l.action, Leftover::Action::kFail);
  EXPECT_NE(l.message.find("pod ml/train is gone"), std::string::npos) << l.message;
}

}  // namespace
}  // namespace paladin::k8s
