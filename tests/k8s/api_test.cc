// The Kubernetes client's pure parts: what it refuses before reaching an API server, and the
// patch it sends.
#include "paladin/k8s/api.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace paladin::k8s {
namespace {

TEST(CheckNodeName, AcceptsDnsSubdomains) {
  for (const char* name : {"localhost", "gpu-node-7", "n1.rack2.example", "0"}) {
    EXPECT_TRUE(CheckNodeName(name).ok()) << name;
  }
}

TEST(CheckNodeName, RefusesWhatCouldEscapeThePathOrIsNotAName) {
  // A name lands in the request path: '/', '?', '%' and ".." segments must never get through.
  for (const std::string& name :
       std::vector<std::string>{"", "Bad_Node", "UPPER", "a/b", "../nodes", "a?b", "a%2f", "-lead",
                                "trail.", "a b", std::string(254, 'a')}) {
    const Status s = CheckNodeName(name);
    EXPECT_FALSE(s.ok()) << name;
    EXPECT_NE(s.message().find("node name"), std::string::npos) << s.message();
  }
}

TEST(ExtendedResourcePatch, SetsCapacityAndAllocatableInWholeBytes) {
  const nlohmann::json patch =
      nlohmann::json::parse(ExtendedResourcePatch(kGpuMemoryResource, 17179869184ull));
  // A quantity is a string; whole bytes, so a request of "1Gi" (1073741824) compares exactly.
  EXPECT_EQ(patch["status"]["capacity"]["paladin.io/gpu-memory"], "17179869184");
  EXPECT_EQ(patch["status"]["allocatable"]["paladin.io/gpu-memory"], "17179869184");
  EXPECT_EQ(patch["status"].size(), 2u);
}

TEST(SetServer, TakesHttpsHostAndPortOnly) {
  ApiConfig config;
  ASSERT_TRUE(SetServer("https://127.0.0.1:16445", &config).ok());
  EXPECT_EQ(config.host, "127.0.0.1");
  EXPECT_EQ(config.port, 16445);
  ASSERT_TRUE(SetServer("https://api.cluster", &config).ok());
  EXPECT_EQ(config.port, 443);
  for (const char* url : {"http://127.0.0.1:6443", "127.0.0.1:6443", "https://h:0", "https://h:x",
                          "https://h:6443/api"}) {
    EXPECT_FALSE(SetServer(url, &config).ok()) << url;
  }
}

TEST(InClusterConfig, OutsideAPodSaysSo) {
  unsetenv("KUBERNETES_SERVICE_HOST");
  const StatusOr<ApiConfig> config = InClusterConfig();
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("--server"), std::string::npos);
}

TEST(ApiClient, RefusesABadNodeNameWithoutConnecting) {
  ApiConfig config;
  config.host = "127.0.0.1";
  config.port = 1;  // nothing listens: a connection attempt would fail differently
  const StatusOr<std::string> r = ApiClient(config).PatchNodeStatus("../../namespaces", "{}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("node name"), std::string::npos);
}

}  // namespace
}  // namespace paladin::k8s
