// paladin k8s move, its pure parts: the restore token (the same HMAC scripts/paladin-runc.sh
// computes in the shell), the replacement's name, which pods it refuses to move, and the
// replacement pod it creates.
#include "paladin/k8s/move.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "paladin/k8s/scheduler.h"

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

}  // namespace
}  // namespace paladin::k8s
