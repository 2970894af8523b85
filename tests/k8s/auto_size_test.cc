// `paladin.io/gpu-memory: auto` in the webhook (docs/kubernetes.md, design 7), no cluster: an auto
// pod sized by a fake Paladin server on loopback (the real client, its query and token), the
// default with the reason when the server is down, malformed and conflicting asks refused naming
// the field, Paladin's record of the sizing refused from users and kept on a move's replacement,
// and the class command a pod is counted under.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "paladin/k8s/scheduler.h"
#include "paladin/k8s/webhook.h"

namespace paladin::k8s {
namespace {

using Json = nlohmann::json;

// Paladin's server as far as the webhook asks it: GET /v1/sizing with the admin token.
class FakeServer {
 public:
  FakeServer() {
    server_.Get("/v1/sizing", [this](const httplib::Request& req, httplib::Response& res) {
      ++asked_;
      if (req.get_header_value("Authorization") != "Bearer secret") {
        res.status = 401;
        res.set_content(R"({"error": "unauthenticated"})", "application/json");
        return;
      }
      last_query_ = req.get_param_value("team") + "|" + req.get_param_value("command");
      res.set_content(
          Json{{"team", req.get_param_value("team")},
               {"class", req.get_param_value("team") + "/" + req.get_param_value("command")},
               {"bytes", 644245094},
               {"from", "history"},
               {"why",
                "highest peak of k8s-ml/train's 1 earlier pod 512 MiB x 1.2 = "
                "614.40 MiB"}}
              .dump(),
          "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // Bound, the socket already listens; answers start with the thread's loop.
    while (!server_.is_running()) std::this_thread::yield();
  }
  ~FakeServer() {
    server_.stop();
    thread_.join();
  }
  api::Endpoint endpoint() const { return {"127.0.0.1", port_, false}; }
  int asked() const { return asked_; }
  const std::string& last_query() const { return last_query_; }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> asked_{0};
  std::string last_query_;
};

InjectOptions Options() {
  InjectOptions o;
  o.lib_dir = "/var/lib/paladin/lib";
  o.emulated_gpus = "2x8GiB";
  o.emu_state_dir = "/var/lib/paladin/emu";
  o.paladin_users = {"system:serviceaccount:paladin:paladin"};
  return o;
}

Json AutoPod(const Json& extra_annotations = Json::object()) {
  Json annotations = {{"paladin.io/gpu-memory", "auto"}};
  for (const auto& [k, v] : extra_annotations.items()) annotations[k] = v;
  return {{"metadata", {{"name", "p"}, {"namespace", "ml"}, {"annotations", annotations}}},
          {"spec",
           {{"containers",
             {{{"name", "c"},
               {"image", "example.org/team/trainer:v2"},
               {"command", {"/opt/bin/train", "--epochs", "3"}},
               {"resources", {{"limits", {{"cpu", "1"}}}}}}}}}}};
}

Json Apply(Json pod, const std::string& patch) {
  for (const Json& op : Json::parse(patch)) {
    EXPECT_EQ(op["op"], "add");
    pod[Json::json_pointer(op["path"].get<std::string>())] = op["value"];
  }
  return pod;
}

std::string Env(const Json& container, const std::string& name) {
  for (const Json& e : container.value("env", Json::array())) {
    if (e.value("name", "") == name) return e.value("value", "");
  }
  return "";
}

TEST(AutoPod, SizedByPaladinsServer) {
  FakeServer server;
  InjectOptions o = Options();
  o.size_auto = ServerSizer(nullptr, server.endpoint(), "secret", 2);
  const Json pod = AutoPod();
  StatusOr<std::string> patch = PodPatch(pod.dump(), o);
  ASSERT_TRUE(patch.ok()) << patch.status().ToString();
  const Json out = Apply(pod, *patch);
  // The namespace without a kube client is its own team; the class is the command's basename.
  EXPECT_EQ(server.last_query(), "k8s-ml|train");
  const Json& c = out["spec"]["containers"][0];
  // 614.4 MiB rounded up to a whole MiB, as limit and request, the CPU limit kept.
  EXPECT_EQ(c["resources"]["limits"]["paladin.io/gpu-memory"], "615Mi");
  EXPECT_EQ(c["resources"]["requests"]["paladin.io/gpu-memory"], "615Mi");
  EXPECT_EQ(c["resources"]["limits"]["cpu"], "1");
  EXPECT_EQ(Env(c, "PALADIN_GPU_MEM"), std::to_string(615ull << 20));
  EXPECT_EQ(out["spec"]["schedulerName"], "paladin");
  EXPECT_EQ(out["metadata"]["annotations"]["paladin.io/gpu-memory-sized"],
            "615Mi, Paladin's server, class k8s-ml/train: highest peak of k8s-ml/train's 1 "
            "earlier pod 512 MiB x 1.2 = 614.40 MiB");
  // A wrong token is the server refusing: the default, saying why.
  o.size_auto = ServerSizer(nullptr, server.endpoint(), "wrong", 2);
  patch = PodPatch(pod.dump(), o);
  ASSERT_TRUE(patch.ok());
  const std::string said =
      Apply(pod, *patch)["metadata"]["annotations"]["paladin.io/gpu-memory-sized"];
  EXPECT_EQ(said.rfind("4096Mi, the webhook's default 4 GiB: Paladin's server not asked (", 0), 0u)
      << said;
}

TEST(AutoPod, TheDefaultWhenTheServerIsDown) {
  int port = 0;
  {
    FakeServer gone;  // a port nothing listens on once it stops
    port = gone.endpoint().port;
  }
  InjectOptions o = Options();
  o.auto_default_bytes = 2ull << 30;
  o.size_auto = ServerSizer(nullptr, {"127.0.0.1", port, false}, "secret", 1);
  const Json pod = AutoPod();
  StatusOr<std::string> patch = PodPatch(pod.dump(), o);
  ASSERT_TRUE(patch.ok()) << patch.status().ToString();
  const Json out = Apply(pod, *patch);
  EXPECT_EQ(out["spec"]["containers"][0]["resources"]["limits"]["paladin.io/gpu-memory"], "2048Mi");
  const std::string said = out["metadata"]["annotations"]["paladin.io/gpu-memory-sized"];
  EXPECT_EQ(said.rfind("2048Mi, the webhook's default 2 GiB: Paladin's server not asked (Paladin's "
                       "server http://127.0.0.1:",
                       0),
            0u)
      << said;
  // Without --paladin-server at all: the default, saying so.
  patch = PodPatch(pod.dump(), Options());
  ASSERT_TRUE(patch.ok());
  EXPECT_EQ(Apply(pod, *patch)["metadata"]["annotations"]["paladin.io/gpu-memory-sized"],
            "4096Mi, the webhook's default 4 GiB: Paladin's server not asked (the webhook has no "
            "--paladin-server)");
}

TEST(AutoPod, MalformedOrConflictingAsksAreRefusedNamingTheField) {
  FakeServer server;
  InjectOptions o = Options();
  o.size_auto = ServerSizer(nullptr, server.endpoint(), "secret", 2);
  Json both = AutoPod();
  both["spec"]["containers"][0]["resources"]["limits"]["paladin.io/gpu-memory"] = "1Gi";
  StatusOr<std::string> r = PodPatch(both.dump(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "metadata.annotations[paladin.io/gpu-memory] 'auto' and "
            "spec.containers[0].resources.limits[paladin.io/gpu-memory] both set: ask one or the "
            "other");
  Json sized = AutoPod();
  sized["metadata"]["annotations"]["paladin.io/gpu-memory"] = "8Gi";
  r = PodPatch(sized.dump(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("metadata.annotations[paladin.io/gpu-memory]: its only "
                                      "value is 'auto'"),
            std::string::npos)
      << r.status().message();
  Json empty = AutoPod();
  empty["spec"]["containers"] = Json::array();
  EXPECT_FALSE(PodPatch(empty.dump(), o).ok());
  EXPECT_EQ(server.asked(), 0);
}

Json Review(const std::string& user, const Json& pod) {
  return {{"apiVersion", "admission.k8s.io/v1"},
          {"kind", "AdmissionReview"},
          {"request",
           {{"uid", "u"},
            {"kind", {{"kind", "Pod"}}},
            {"operation", "CREATE"},
            {"namespace", "ml"},
            {"userInfo", {{"username", user}}},
            {"object", pod}}}};
}

TEST(AutoPod, OnlyPaladinWritesHowAPodWasSized) {
  FakeServer server;
  InjectOptions o = Options();
  o.size_auto = ServerSizer(nullptr, server.endpoint(), "secret", 2);
  auto answer = [&o](const std::string& user, const Json& pod) {
    return Json::parse(k8s::Review(Review(user, pod).dump(), o))["response"];
  };
  // A user's auto pod: allowed and patched.
  Json r = answer("alice", AutoPod());
  EXPECT_EQ(r["allowed"], true) << r.dump();
  EXPECT_EQ(r["patchType"], "JSONPatch");
  EXPECT_EQ(server.asked(), 1);
  // A user writing the record (to skip the sizing with a limit of their own): refused.
  Json forged = AutoPod({{"paladin.io/gpu-memory-sized", "1Mi, the server said so"}});
  r = answer("alice", forged);
  EXPECT_EQ(r["allowed"], false);
  EXPECT_NE(r["status"]["message"].get<std::string>().find(
                "metadata.annotations[paladin.io/gpu-memory-sized] set: only Paladin sets it"),
            std::string::npos)
      << r.dump();
  // A user's annotation with a size: refused, saying where a size is asked.
  r = answer("alice", AutoPod({{"paladin.io/gpu-memory", "4Gi"}}));
  EXPECT_EQ(r["allowed"], false);
  EXPECT_NE(r["status"]["message"].get<std::string>().find(
                "metadata.annotations[paladin.io/gpu-memory] set: GPU memory is asked in"),
            std::string::npos)
      << r.dump();
  // A move's replacement (Paladin's mover): its size and record kept, the server not asked.
  Json replacement = forged;
  replacement["spec"]["containers"][0]["resources"]["limits"].erase("cpu");
  replacement["spec"]["containers"][0]["resources"]["limits"]["paladin.io/gpu-memory"] = "615Mi";
  StatusOr<std::string> patch = PodPatch(replacement.dump(), o);
  ASSERT_TRUE(patch.ok()) << patch.status().ToString();
  const Json out = Apply(replacement, *patch);
  EXPECT_EQ(out["spec"]["containers"][0]["resources"]["limits"]["paladin.io/gpu-memory"], "615Mi");
  EXPECT_EQ(out["metadata"]["annotations"]["paladin.io/gpu-memory-sized"],
            "1Mi, the server said so");
  r = answer("system:serviceaccount:paladin:paladin", replacement);
  EXPECT_EQ(r["allowed"], true) << r.dump();
  EXPECT_EQ(server.asked(), 1);
}

TEST(PodClassCommand, TheCommandsBasenameElseTheImagesName) {
  const std::pair<Json, const char*> cases[] = {
      {{{"command", {"/opt/bin/train", "-x"}}, {"image", "a/b:c"}}, "train"},
      {{{"command", {"python3"}}}, "python3"},
      {{{"image", "example.org:5000/team/trainer:v2"}}, "trainer"},
      {{{"image", "trainer@sha256:abc"}}, "trainer"},
      {{{"image", "localhost/paladin-demo:latest"}, {"args", {"--mib", "8"}}}, "paladin-demo"},
      {{{"command", {"my tool"}}}, "my_tool"},
      {{{"name", "c"}}, ""},
  };
  for (const auto& [container, expected] : cases) {
    EXPECT_EQ(PodClassCommand(container.dump()), expected) << container.dump();
  }
  // A pod's class: its first container asking for GPU memory, else its first.
  const Json pod = {{"metadata", {{"name", "p"}, {"namespace", "ml"}}},
                    {"spec",
                     {{"containers",
                       {{{"name", "sidecar"}, {"image", "proxy:1"}},
                        {{"name", "main"},
                         {"image", "trainer:2"},
                         {"resources", {{"limits", {{"paladin.io/gpu-memory", "1Gi"}}}}}}}}}}};
  EXPECT_EQ(ReadPod(pod.dump()).command, "trainer");
}

}  // namespace
}  // namespace paladin::k8s
