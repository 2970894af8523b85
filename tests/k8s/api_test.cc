// The Kubernetes client: what it refuses before reaching an API server, the patch it sends, and
// its connection to a (stand-in) API server over TLS: one handshake for many calls, from copies
// and threads too, and a connection the server closed opened again without a failed call.
#include "paladin/k8s/api.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testing/certificates.h"

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

// An HTTPS server on 127.0.0.1 answering GET /api/v1/nodes with {"kind":"NodeList"}; it records
// the client port of each request (one per connection the client opened).
class StandInApiServer {
 public:
  explicit StandInApiServer(int keep_alive_timeout_s = 5) {
    dir_ = std::filesystem::temp_directory_path() /
           ("paladin-api-test-" + std::to_string(getpid()) + "-" + std::to_string(next_++));
    std::filesystem::create_directories(dir_);
    testcert::WriteSelfSigned(cert(), (dir_ / "server.key").string(),
                              {.san = "IP:127.0.0.1", .ca = true});
    server_ = std::make_unique<httplib::SSLServer>(cert().c_str(), (dir_ / "server.key").c_str());
    server_->set_keep_alive_timeout(keep_alive_timeout_s);
    server_->set_keep_alive_max_count(1000);  // as the API server: no limit
    server_->Get("/api/v1/nodes", [this](const httplib::Request& req, httplib::Response& res) {
      {
        const std::lock_guard<std::mutex> lock(mutex_);
        ports_.insert(req.remote_port);
        ++requests_;
      }
      res.set_content(R"({"kind":"NodeList"})", "application/json");
    });
    port_ = server_->bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_->listen_after_bind(); });
  }
  ~StandInApiServer() {
    server_->stop();
    thread_.join();
    std::filesystem::remove_all(dir_);
  }
  std::string cert() const { return (dir_ / "server.pem").string(); }
  ApiConfig Config() const {
    ApiConfig config;
    config.host = "127.0.0.1";
    config.port = port_;
    config.ca_cert_file = cert();
    config.timeout_s = 5;
    return config;
  }
  size_t connections() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return ports_.size();
  }
  int requests() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }

 private:
  static inline int next_ = 0;
  std::filesystem::path dir_;
  std::unique_ptr<httplib::SSLServer> server_;
  std::thread thread_;
  int port_ = 0;
  mutable std::mutex mutex_;
  std::set<int> ports_;
  int requests_ = 0;
};

TEST(ApiClient, KeepsOneConnectionForManyCalls) {
  const StandInApiServer server;
  const ApiClient client(server.Config());
  for (int i = 0; i < 10; ++i) {
    const StatusOr<std::string> r = client.Get("/api/v1/nodes");
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(*r, R"({"kind":"NodeList"})");
  }
  EXPECT_EQ(server.requests(), 10);
  EXPECT_EQ(server.connections(), 1u);
}

TEST(ApiClient, CopiesAndThreadsShareTheConnection) {
  const StandInApiServer server;
  const ApiClient client(server.Config());
  std::vector<std::thread> threads;
  std::mutex mutex;
  int failed = 0;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, copy = client] {
      for (int i = 0; i < 10; ++i) {
        if (!copy.Get("/api/v1/nodes").ok()) {
          const std::lock_guard<std::mutex> lock(mutex);
          ++failed;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(server.requests(), 40);
  EXPECT_EQ(server.connections(), 1u);
}

TEST(ApiClient, AConnectionTheServerClosedIsOpenedAgain) {
  const StandInApiServer server(/*keep_alive_timeout_s=*/1);  // it closes an idle one after 1 s
  const ApiClient client(server.Config());
  ASSERT_TRUE(client.Get("/api/v1/nodes").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  const StatusOr<std::string> r = client.Get("/api/v1/nodes");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(server.requests(), 2);
  EXPECT_EQ(server.connections(), 2u);
}

TEST(ApiClient, AConnectionIdleTooLongIsNotUsedAgain) {
  const StandInApiServer server;  // it would keep an idle connection 5 s
  ApiConfig config = server.Config();
  config.idle_reconnect_s = 0.5;
  const ApiClient client(config);
  ASSERT_TRUE(client.Get("/api/v1/nodes").ok());
  ASSERT_TRUE(client.Get("/api/v1/nodes").ok());
  EXPECT_EQ(server.connections(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  ASSERT_TRUE(client.Get("/api/v1/nodes").ok());
  EXPECT_EQ(server.requests(), 3);
  EXPECT_EQ(server.connections(), 2u);
}

TEST(ApiClient, AServerItDoesNotTrustIsRefusedOnEveryCall) {
  const StandInApiServer server;
  const StandInApiServer other;
  ApiConfig config = server.Config();
  config.ca_cert_file = other.cert();  // another CA
  const ApiClient client(config);
  for (int i = 0; i < 2; ++i) {
    const StatusOr<std::string> r = client.Get("/api/v1/nodes");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("is not signed by"), std::string::npos)
        << r.status().message();
  }
  EXPECT_EQ(server.requests(), 0);
}

}  // namespace
}  // namespace paladin::k8s
