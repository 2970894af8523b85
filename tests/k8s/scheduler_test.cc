// Paladin's scheduler and webhook for Kubernetes, their pure parts: quantities, the node's GPU
// annotation, what is read of a pod, the placement scenario case_placement.sh runs on the real
// cluster (decided here by the same packer, policy and shapes), and the webhook's patch.
#include "paladin/k8s/scheduler.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "paladin/core/packer.h"
#include "paladin/k8s/webhook.h"
#include "paladin/server/placement.h"

namespace paladin::k8s {
namespace {

using Json = nlohmann::json;
constexpr int64_t kGiB = int64_t{1} << 30;

TEST(ParseQuantity, ReadsKubernetesQuantities) {
  const std::pair<const char*, uint64_t> cases[] = {{"8Gi", 8ull << 30},
                                                    {"512Mi", 512ull << 20},
                                                    {"1.5Gi", 3ull << 29},
                                                    {"17179869184", 17179869184ull},
                                                    {"8G", 8000000000ull},
                                                    {"1e9", 1000000000ull},
                                                    {"64Ki", 65536},
                                                    {"1Ei", 1ull << 60},
                                                    {"2E", 2000000000000000000ull}};
  for (const auto& [text, bytes] : cases) {
    StatusOr<uint64_t> got = ParseQuantity(text);
    ASSERT_TRUE(got.ok()) << text << ": " << got.status().message();
    EXPECT_EQ(*got, bytes) << text;
  }
  for (const char* bad : {"", "Gi", "8GB", "1.2.3Gi", "-1Gi", "8 Gi", "1e99", "100Ei", "5E"}) {
    StatusOr<uint64_t> got = ParseQuantity(bad);
    EXPECT_FALSE(got.ok()) << bad;
    if (!got.ok()) {
      EXPECT_NE(got.status().message().find("quantity"), std::string::npos);
    }
  }
}

TEST(GpusAnnotation, RoundTripsAndRefusesMalformed) {
  std::vector<gpu::GpuInfo> gpus(2);
  gpus[0].index = 0;
  gpus[0].total_bytes = 8 * kGiB;
  gpus[0].name = "Emulated";
  gpus[1].index = 1;
  gpus[1].total_bytes = 16 * kGiB;
  StatusOr<std::vector<NodeGpu>> back = ParseGpusAnnotation(GpusAnnotationValue(gpus));
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].index, 1);
  EXPECT_EQ((*back)[1].memory_bytes, 16 * kGiB);
  EXPECT_EQ((*back)[0].model, "Emulated");
  for (const char* bad : {"{}", "[{\"index\":0}]", "[{\"index\":-1,\"memory\":1}]",
                          "[{\"index\":0,\"memory\":0}]", "not json"}) {
    EXPECT_FALSE(ParseGpusAnnotation(bad).ok()) << bad;
  }
}

TEST(NodeTakesPods, NeitherCordonedNorNotReadyNodes) {
  auto node = [](bool cordoned, const char* ready) {
    Json n = {{"metadata", {{"name", "gpu-1"}}}, {"spec", Json::object()}};
    if (cordoned) n["spec"]["unschedulable"] = true;
    if (ready != nullptr) {
      n["status"]["conditions"] = {{{"type", "MemoryPressure"}, {"status", "False"}},
                                   {{"type", "Ready"}, {"status", ready}, {"reason", "Lost"}}};
    }
    return n.dump();
  };
  EXPECT_TRUE(NodeTakesPods(node(false, "True")).ok());
  const Status cordoned = NodeTakesPods(node(true, "True"));
  EXPECT_FALSE(cordoned.ok());
  EXPECT_NE(cordoned.message().find("cordoned"), std::string::npos) << cordoned.message();
  // A lost node (its kubelet stopped posting): NotReady or Unknown.
  const Status unknown = NodeTakesPods(node(false, "Unknown"));
  EXPECT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("not Ready (Unknown: Lost)"), std::string::npos)
      << unknown.message();
  EXPECT_FALSE(NodeTakesPods(node(false, "False")).ok());
  EXPECT_FALSE(NodeTakesPods(node(false, nullptr)).ok());
  EXPECT_FALSE(NodeTakesPods("[]").ok());
}

TEST(ReadPod, SumsContainersAndNamesTheMalformedField) {
  const Json pod = {
      {"metadata",
       {{"namespace", "ns"},
        {"name", "p"},
        {"annotations", {{"paladin.io/gpu", "1"}, {"paladin.io/gpu-memory-bytes", "1024"}}}}},
      {"spec",
       {{"nodeName", "n1"},
        {"containers",
         {{{"name", "a"}, {"resources", {{"limits", {{"paladin.io/gpu-memory", "1Gi"}}}}}},
          {{"name", "b"}, {"resources", {{"limits", {{"paladin.io/gpu-memory", "512Mi"}}}}}},
          {{"name", "sidecar"}}}}}}};
  const PodRequest p = ReadPod(pod.dump());
  EXPECT_EQ(p.error, "");
  EXPECT_EQ(p.gpu_memory, (1ull << 30) + (512ull << 20));
  EXPECT_EQ(p.gpu, 1);
  EXPECT_EQ(p.node, "n1");
  // Booked at what it asked (1.5 GiB), not at the 1024 its gpu-memory-bytes annotation says.
  EXPECT_EQ(BookedBytes(p), (1ull << 30) + (512ull << 20));

  Json bad = pod;
  bad["metadata"]["annotations"]["paladin.io/priority"] = "high";
  EXPECT_NE(ReadPod(bad.dump()).error.find("metadata.annotations[paladin.io/priority]"),
            std::string::npos);
  bad = pod;
  bad["spec"]["containers"][1]["resources"]["limits"]["paladin.io/gpu-memory"] = "lots";
  EXPECT_NE(
      ReadPod(bad.dump()).error.find("spec.containers[1].resources.limits[paladin.io/gpu-memory]"),
      std::string::npos);
}

// case_placement.sh's scenario, decided by the packer the server and the scheduler share: one
// node of two 8 GiB GPUs, pods of 6, 4, 2 and 3 GiB in that order go to GPUs 0, 1, 0, 1 (the
// tightest that fits), and 2 GiB more fits nowhere.
TEST(Placement, TheScenarioOfCasePlacement) {
  StatusOr<core::Policy> policy = server::MakeServerPolicy("paladin");
  ASSERT_TRUE(policy.ok());
  core::Packer packer(std::move(*policy));
  core::Fleet fleet;
  StatusOr<core::ModelId> model = fleet.models().Intern("Emulated/8192");
  ASSERT_TRUE(model.ok());
  fleet.models().SetMemoryMib(*model, 8192);
  ASSERT_TRUE(fleet.AddNode("localhost", int64_t{1} << 40, int64_t{1} << 40, 2, *model).ok());
  core::Rng rng(1);
  const std::pair<int64_t, int> expected[] = {{6, 0}, {4, 1}, {2, 0}, {3, 1}};
  uint64_t id = 0;
  for (const auto& [gib, gpu] : expected) {
    const core::Workload w = server::GpuShape("p", "ns", 0, 1, gib * kGiB, 8 * kGiB);
    const core::Decision d = packer.Schedule(fleet, w, rng);
    ASSERT_TRUE(d.placed) << gib;
    ASSERT_EQ(d.placement.gpus.size(), 1u);
    EXPECT_EQ(d.placement.gpus[0], gpu) << gib << " GiB";
    ASSERT_TRUE(fleet.Reserve(++id, w, d.placement).ok());
  }
  EXPECT_FALSE(
      packer.Schedule(fleet, server::GpuShape("full", "ns", 0, 1, 2 * kGiB, 8 * kGiB), rng).placed);
}

InjectOptions Emulated() {
  InjectOptions o;
  o.lib_dir = "/var/lib/paladin/lib";
  o.emulated_gpus = "2x8GiB";
  o.emu_state_dir = "/var/lib/paladin/emu";
  return o;
}

Json ApplyAdds(Json pod, const std::string& patch) {
  for (const Json& op : Json::parse(patch)) {
    EXPECT_EQ(op["op"], "add");
    pod[Json::json_pointer(op["path"].get<std::string>())] = op["value"];
  }
  return pod;
}

TEST(PodPatch, InjectsTheInterposerIntoContainersAskingForGpuMemory) {
  const Json pod = {
      {"spec",
       {{"containers",
         {{{"name", "train"},
           {"env",
            {{{"name", "LD_PRELOAD"}, {"value", "/evil.so"}}, {{"name", "KEEP"}, {"value", "1"}}}},
           {"resources", {{"limits", {{"paladin.io/gpu-memory", "2Gi"}}}}}},
          {{"name", "sidecar"}}}}}}};
  StatusOr<std::string> patch = PodPatch(pod.dump(), Emulated());
  ASSERT_TRUE(patch.ok()) << patch.status().message();
  const Json out = ApplyAdds(pod, *patch);
  EXPECT_EQ(out["spec"]["schedulerName"], "paladin");
  std::map<std::string, Json> env;
  for (const Json& e : out["spec"]["containers"][0]["env"]) env[e["name"]] = e;
  EXPECT_EQ(env["KEEP"]["value"], "1");
  EXPECT_EQ(env["LD_PRELOAD"]["value"], "/run/paladin/lib/libcuda.so.1");  // the user's replaced
  EXPECT_EQ(env["PALADIN_GPU_MEM"]["value"], std::to_string(2 * kGiB));
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.annotations['paladin.io/gpu']");
  EXPECT_EQ(env["PALADIN_EMU_STATE"]["value"], "/run/paladin/emu/state");
  EXPECT_FALSE(out["spec"]["containers"][1].contains("env"));  // no GPU memory asked: untouched
  ASSERT_EQ(out["spec"]["volumes"].size(), 2u);
  EXPECT_EQ(out["spec"]["volumes"][0]["hostPath"]["path"], "/var/lib/paladin/lib");
  EXPECT_EQ(out["spec"]["containers"][0]["volumeMounts"][0]["readOnly"], true);

  const Json plain = {{"spec", {{"containers", {{{"name", "web"}}}}}}};
  StatusOr<std::string> none = PodPatch(plain.dump(), Emulated());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, "");
}

TEST(Review, AnswersAdmissionReviews) {
  const Json review = {
      {"apiVersion", "admission.k8s.io/v1"},
      {"kind", "AdmissionReview"},
      {"request",
       {{"uid", "u-1"},
        {"kind", {{"kind", "Pod"}}},
        {"object",
         {{"metadata", {{"annotations", {{"paladin.io/priority", "x"}}}}},
          {"spec",
           {{"containers",
             {{{"name", "c"},
               {"resources", {{"limits", {{"paladin.io/gpu-memory", "1Gi"}}}}}}}}}}}}}}};
  Json out = Json::parse(Review(review.dump(), Emulated()));
  EXPECT_EQ(out["response"]["uid"], "u-1");
  EXPECT_EQ(out["response"]["allowed"], false);
  EXPECT_NE(out["response"]["status"]["message"].get<std::string>().find("paladin.io/priority"),
            std::string::npos);

  Json good = review;
  good["request"]["object"]["metadata"]["annotations"]["paladin.io/priority"] = "5";
  out = Json::parse(Review(good.dump(), Emulated()));
  EXPECT_EQ(out["response"]["allowed"], true);
  EXPECT_EQ(out["response"]["patchType"], "JSONPatch");
  EXPECT_FALSE(out["response"]["patch"].get<std::string>().empty());

  out = Json::parse(Review("[]", Emulated()));
  EXPECT_EQ(out["response"]["allowed"], false);
}

// The review's attacks (docs/kubernetes.md, "What a user may set"): a pod booked by the scheduler
// only at its own request, and Paladin's annotations refused from anyone but Paladin.
TEST(BookedBytes, TheRequestNotTheAnnotation) {
  // Bound with Paladin's GPU but asking for no GPU memory, claiming 1000 GiB: nothing booked.
  const Json squatter = {
      {"metadata",
       {{"annotations", {{"paladin.io/gpu", "0"}, {"paladin.io/gpu-memory-bytes", "1000Gi"}}}}},
      {"spec", {{"nodeName", "n1"}, {"containers", {{{"name", "c"}}}}}}};
  EXPECT_EQ(BookedBytes(ReadPod(squatter.dump())), 0u);
  // Asking 4 GiB, its annotation rewritten to 1 byte: booked at 4 GiB.
  const Json shrunk = {
      {"metadata",
       {{"annotations", {{"paladin.io/gpu", "1"}, {"paladin.io/gpu-memory-bytes", "1"}}}}},
      {"spec",
       {{"nodeName", "n1"},
        {"containers",
         {{{"name", "c"}, {"resources", {{"limits", {{"paladin.io/gpu-memory", "4Gi"}}}}}}}}}}};
  EXPECT_EQ(BookedBytes(ReadPod(shrunk.dump())), static_cast<uint64_t>(4 * kGiB));
  // Not bound (no node, or no GPU of Paladin's, or a GPU index that is no number): nothing.
  Json unbound = shrunk;
  unbound["spec"].erase("nodeName");
  EXPECT_EQ(BookedBytes(ReadPod(unbound.dump())), 0u);
  for (const char* gpu : {"", "x", "-1", "1x", "99999"}) {
    Json bad = shrunk;
    bad["metadata"]["annotations"]["paladin.io/gpu"] = gpu;
    EXPECT_EQ(BookedBytes(ReadPod(bad.dump())), 0u) << gpu;
  }
}

Json PodReview(const std::string& operation, const std::string& user, const Json& annotations,
               const Json& old_annotations, const std::string& node = "") {
  Json pod = {
      {"metadata", {{"name", "p"}, {"namespace", "ns"}, {"annotations", annotations}}},
      {"spec",
       {{"containers",
         {{{"name", "c"}, {"resources", {{"limits", {{"paladin.io/gpu-memory", "1Gi"}}}}}}}}}}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  Json request = {{"uid", "u"},
                  {"kind", {{"kind", "Pod"}}},
                  {"operation", operation},
                  {"userInfo", {{"username", user}}},
                  {"object", pod}};
  if (operation == "UPDATE") {
    Json old = pod;
    old["metadata"]["annotations"] = old_annotations;
    request["oldObject"] = old;
  }
  return {{"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"}, {"request", request}};
}

TEST(Review, RefusesPaladinsAnnotationsFromUsers) {
  InjectOptions o = Emulated();
  o.paladin_users = {"system:serviceaccount:paladin:paladin"};
  const Json none = Json::object();
  const Json bound = {{"paladin.io/gpu", "0"},
                      {"paladin.io/gpu-memory-bytes", "1073741824"},
                      {"paladin.io/placement", "n1/0 by Paladin's packer"}};
  struct Attack {
    const char* what;
    Json review;
    const char* expected;
  };
  const std::vector<Attack> attacks = {
      {"create with gpu-memory-bytes 1000Gi",
       PodReview("CREATE", "alice", {{"paladin.io/gpu-memory-bytes", "1000Gi"}}, none),
       "metadata.annotations[paladin.io/gpu-memory-bytes] set"},
      {"create choosing its GPU", PodReview("CREATE", "alice", {{"paladin.io/gpu", "1"}}, none),
       "metadata.annotations[paladin.io/gpu] set"},
      {"create naming an image to restore",
       PodReview("CREATE", "alice",
                 {{"paladin.io/restore-from", "move-1-x"}, {"paladin.io/restore-token", "00"}},
                 none),
       "paladin.io/restore-from] set"},
      {"create with move-to", PodReview("CREATE", "alice", {{"paladin.io/move-to", "n1/1"}}, none),
       "paladin.io/move-to] set"},
      {"create with an annotation Paladin may add later",
       PodReview("CREATE", "alice", {{"paladin.io/anything", "1"}}, none),
       "paladin.io/anything] set"},
      {"create naming its node", PodReview("CREATE", "alice", none, none, "n1"),
       "spec.nodeName 'n1'"},
      {"Paladin's own identity naming a node",
       PodReview("CREATE", "system:serviceaccount:paladin:paladin", none, none, "n1"),
       "spec.nodeName 'n1'"},
      {"annotate --overwrite gpu-memory-bytes=1",
       PodReview("UPDATE", "alice",
                 {{"paladin.io/gpu", "0"},
                  {"paladin.io/gpu-memory-bytes", "1"},
                  {"paladin.io/placement", "n1/0 by Paladin's packer"}},
                 bound),
       "paladin.io/gpu-memory-bytes] changed"},
      {"annotate --overwrite gpu=1",
       PodReview("UPDATE", "alice",
                 {{"paladin.io/gpu", "1"},
                  {"paladin.io/gpu-memory-bytes", "1073741824"},
                  {"paladin.io/placement", "n1/0 by Paladin's packer"}},
                 bound),
       "paladin.io/gpu] changed"},
      {"annotate gpu- (removed)",
       PodReview("UPDATE", "alice",
                 {{"paladin.io/gpu-memory-bytes", "1073741824"},
                  {"paladin.io/placement", "n1/0 by Paladin's packer"}},
                 bound),
       "paladin.io/gpu] removed"},
      {"an anonymous request", PodReview("CREATE", "", {{"paladin.io/gpu", "0"}}, none),
       "paladin.io/gpu] set"},
  };
  int refused = 0;
  for (const Attack& a : attacks) {
    const Json out = Json::parse(Review(a.review.dump(), o));
    const std::string message =
        out["response"].value("status", Json::object()).value("message", "");
    if (out["response"]["allowed"] == false && message.find(a.expected) != std::string::npos) {
      ++refused;
    } else {
      ADD_FAILURE() << a.what << ": " << out.dump();
    }
  }
  // What stays allowed: a user's priority, an update leaving Paladin's annotations as they are,
  // and Paladin's own identity writing them (the mover's replacement pod).
  const auto allowed = [&o](const Json& review) {
    return Json::parse(Review(review.dump(), o))["response"]["allowed"] == true;
  };
  EXPECT_TRUE(allowed(PodReview("CREATE", "alice", {{"paladin.io/priority", "5"}}, none)));
  Json relabel = bound;
  relabel["paladin.io/priority"] = "7";
  relabel["team.example/owner"] = "alice";
  EXPECT_TRUE(allowed(PodReview("UPDATE", "alice", relabel, bound)));
  EXPECT_TRUE(allowed(PodReview("CREATE", "system:serviceaccount:paladin:paladin",
                                {{"paladin.io/restore-from", "move-1-x"},
                                 {"paladin.io/restore-token", "00"},
                                 {"paladin.io/move-to", "n1/1"}},
                                none)));
  // An update gets no patch (a pod's spec is fixed once created).
  const Json update = Json::parse(Review(PodReview("UPDATE", "alice", bound, bound).dump(), o));
  EXPECT_EQ(update["response"]["allowed"], true);
  EXPECT_FALSE(update["response"].contains("patch"));
  std::printf("security: paladin annotations (webhook): tried %zu, refused %d\n", attacks.size(),
              refused);
  EXPECT_EQ(refused, static_cast<int>(attacks.size()));
}

// The nodes' measuring identity (--usage-user) writes a pod's measured GPU memory and nothing
// else of Paladin's; a user may not write the measurement.
TEST(Review, TheMeasuringIdentityWritesTheMeasurementOnly) {
  InjectOptions o = Emulated();
  o.paladin_users = {"system:serviceaccount:paladin:paladin"};
  o.usage_users = {"system:serviceaccount:paladin:paladin-node"};
  const std::string node = "system:serviceaccount:paladin:paladin-node";
  const Json bound = {{"paladin.io/gpu", "0"}, {"paladin.io/gpu-memory-bytes", "1073741824"}};
  const auto answer = [&o](const Json& review) {
    return Json::parse(Review(review.dump(), o))["response"];
  };
  Json measured = bound;
  measured["paladin.io/gpu-memory-used"] = "536870912";
  EXPECT_EQ(answer(PodReview("UPDATE", node, measured, bound))["allowed"], true);
  Json remeasured = measured;
  remeasured["paladin.io/gpu-memory-used"] = "600000000";
  EXPECT_EQ(answer(PodReview("UPDATE", node, remeasured, measured))["allowed"], true);

  Json regpu = measured;
  regpu["paladin.io/gpu"] = "1";
  const Json refused = answer(PodReview("UPDATE", node, regpu, measured));
  EXPECT_EQ(refused["allowed"], false);
  EXPECT_NE(refused["status"].value("message", "").find("paladin.io/gpu] changed"),
            std::string::npos)
      << refused.dump();
  EXPECT_EQ(answer(PodReview("CREATE", node, {{"paladin.io/restore-from", "m"}},
                             Json::object()))["allowed"],
            false);
  const Json user = answer(PodReview("UPDATE", "alice", measured, bound));
  EXPECT_EQ(user["allowed"], false);
  EXPECT_NE(user["status"].value("message", "").find("paladin.io/gpu-memory-used] set"),
            std::string::npos)
      << user.dump();
}

// Bad input (issue 18, must-show 6): each refusal names the field a user got wrong, and says
// what to write instead where Paladin can tell.
TEST(Review, NamesTheMalformedOrUnknownField) {
  InjectOptions o = Emulated();
  o.paladin_users = {"system:serviceaccount:paladin:paladin"};
  const Json none = Json::object();
  const auto message = [&o](const Json& review) {
    const Json out = Json::parse(Review(review.dump(), o));
    EXPECT_EQ(out["response"]["allowed"], false) << out.dump();
    return out["response"].value("status", Json::object()).value("message", "");
  };
  // The resource's name written as an annotation: refused, and told where it belongs.
  EXPECT_NE(message(PodReview("CREATE", "alice", {{"paladin.io/gpu-memory", "lots"}}, none))
                .find("metadata.annotations[paladin.io/gpu-memory] set: GPU memory is asked in a "
                      "container's resources.limits[paladin.io/gpu-memory]"),
            std::string::npos);
  // A paladin.io/ key Paladin does not know.
  EXPECT_NE(message(PodReview("CREATE", "alice", {{"paladin.io/colour", "blue"}}, none))
                .find("metadata.annotations[paladin.io/colour] set: not an annotation Paladin "
                      "knows"),
            std::string::npos);
  // A known one a user may not set keeps its own reason.
  EXPECT_NE(message(PodReview("CREATE", "alice", {{"paladin.io/placement", "x"}}, none))
                .find("paladin.io/placement] set: only Paladin sets it"),
            std::string::npos);
  // Priorities: past the range (also past a long), and not a number.
  for (const char* bad : {"99999999999999999999", "1000001", "-1000001", "1e3", " 5", "high"}) {
    EXPECT_NE(message(PodReview("CREATE", "alice", {{"paladin.io/priority", bad}}, none))
                  .find("metadata.annotations[paladin.io/priority]: '" + std::string(bad) +
                        "' is not an integer in [-1000000, 1000000]"),
              std::string::npos)
        << bad;
  }
  EXPECT_EQ(
      Json::parse(Review(PodReview("CREATE", "alice", {{"paladin.io/priority", "-5"}}, none).dump(),
                         o))["response"]["allowed"],
      true);
  // A negative quantity: the API server's own validation comes after the mutating webhook's.
  Json negative = PodReview("CREATE", "alice", none, none);
  negative["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]
          ["paladin.io/gpu-memory"] = "-1Gi";
  EXPECT_NE(message(negative).find("spec.containers[0].resources.limits[paladin.io/gpu-memory]: "
                                   "quantity '-1Gi': negative"),
            std::string::npos);
  // A quantity the API server accepts but no GPU could be asked for (past 2^62 bytes), in the
  // second container: the container is named.
  Json huge = PodReview("CREATE", "alice", none, none);
  huge["request"]["object"]["spec"]["containers"].push_back(
      {{"name", "d"}, {"resources", {{"limits", {{"paladin.io/gpu-memory", "100Ei"}}}}}});
  EXPECT_NE(message(huge).find("spec.containers[1].resources.limits[paladin.io/gpu-memory]: "
                               "quantity '100Ei': out of range"),
            std::string::npos);
}

// A GPU pod naming another scheduler would escape the packer's books and the teams' quotas.
TEST(PodPatch, RefusesAGpuPodOfAnotherScheduler) {
  const auto pod = [](const std::string& scheduler, bool gpu) {
    Json p = {{"spec", {{"containers", {{{"name", "c"}}}}}}};
    if (gpu) p["spec"]["containers"][0]["resources"]["limits"]["paladin.io/gpu-memory"] = "1Gi";
    if (!scheduler.empty()) p["spec"]["schedulerName"] = scheduler;
    return p;
  };
  StatusOr<std::string> other = PodPatch(pod("my-scheduler", true).dump(), Emulated());
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().message(),
            "spec.schedulerName 'my-scheduler': a pod asking for paladin.io/gpu-memory is placed "
            "by Paladin's scheduler ('paladin'); leave schedulerName unset");
  // The default one (which the API server fills in) and none are replaced by Paladin's.
  for (const char* s : {"", "default-scheduler"}) {
    StatusOr<std::string> patch = PodPatch(pod(s, true).dump(), Emulated());
    ASSERT_TRUE(patch.ok()) << s;
    EXPECT_EQ(ApplyAdds(pod(s, true), *patch)["spec"]["schedulerName"], "paladin") << s;
  }
  // Paladin's own name is kept as it is (a move's replacement names it).
  StatusOr<std::string> own = PodPatch(pod("paladin", true).dump(), Emulated());
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own->find("/spec/schedulerName"), std::string::npos);
  // A pod asking for no GPU memory may name any scheduler: Paladin leaves it alone.
  StatusOr<std::string> plain = PodPatch(pod("my-scheduler", false).dump(), Emulated());
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain, "");
  // Through Review, the refusal reaches the user prefixed with Paladin's name.
  Json review = PodReview("CREATE", "alice", Json::object(), Json::object());
  review["request"]["object"]["spec"]["schedulerName"] = "my-scheduler";
  const Json out = Json::parse(Review(review.dump(), Emulated()));
  EXPECT_EQ(out["response"]["allowed"], false);
  EXPECT_EQ(out["response"]["status"]["message"].get<std::string>().rfind(
                "Paladin: spec.schedulerName 'my-scheduler'", 0),
            0u);
}

// Namespaces are teams: the administrator's label, else the namespace's own team.
TEST(TeamOfNamespace, LabelElseOwnTeam) {
  std::string note;
  EXPECT_EQ(TeamOfNamespace("ml-prod", R"({"paladin.io/team":"research"})"), "research");
  EXPECT_EQ(TeamOfNamespace("ml-dev", R"({"paladin.io/team":"research","x":"y"})"), "research");
  EXPECT_EQ(TeamOfNamespace("web", "{}"), "k8s-web");
  EXPECT_EQ(TeamOfNamespace("web", ""), "k8s-web");
  // A namespace of 63 characters is its own team by its own name (a team name has at most 63).
  const std::string long_ns(63, 'a');
  EXPECT_EQ(TeamOfNamespace(long_ns, "{}"), long_ns);
  // A label that is no team name is ignored, and said.
  EXPECT_EQ(TeamOfNamespace("web", R"({"paladin.io/team":"../admin"})", &note), "k8s-web");
  EXPECT_NE(note.find("not a team name"), std::string::npos) << note;
  // Another label (a pod's claim never reaches here: only the namespace's labels are read).
  EXPECT_EQ(TeamOfNamespace("web", R"({"team":"research"})"), "k8s-web");
}

// 6 GiB of an 8 GiB quota in use: 2 GiB more fits exactly, 3 GiB does not; no quota, no limit.
TEST(TeamQuotaReason, RefusesPastMaxGpuMem) {
  EXPECT_EQ(TeamQuotaReason("research", 8 * kGiB, 6 * kGiB, 2 * kGiB), "");
  EXPECT_EQ(TeamQuotaReason("research", 0, 600 * kGiB, 80 * kGiB), "");
  const std::string why = TeamQuotaReason("research", 8 * kGiB, 6 * kGiB, 3 * kGiB);
  EXPECT_EQ(why,
            "team research: 6 GiB of its 8 GiB of GPU memory (max_gpu_mem) in use, this pod asks "
            "3 GiB");
}

// max_gpus: with 1 of 2 GPUs held one more pod fits, with 2 it does not; no quota, no limit.
TEST(TeamGpuQuotaReason, RefusesPastMaxGpus) {
  EXPECT_EQ(TeamGpuQuotaReason("research", 2, 1), "");
  EXPECT_EQ(TeamGpuQuotaReason("research", 0, 600), "");
  EXPECT_EQ(TeamGpuQuotaReason("research", 2, 2),
            "team research: 2 of its 2 GPUs (max_gpus) in use, this pod needs 1");
}

// The server's /v1/teams seen from cluster "east": the team's jobs and its pods in the other
// clusters are held elsewhere, its pods in "east" are this cluster's own (counted from the pods
// themselves); malformed figures leave the team out; a malformed answer is an error.
TEST(TeamQuotasOf, CountsJobsAndOtherClustersPods) {
  const Json teams = Json::parse(R"({"teams": [
    {"name": "research", "max_gpu_mem_bytes": 8589934592,
     "gpu_mem_in_use": {"jobs_bytes": 1073741824,
                        "pods_bytes": {"east": 2147483648, "west": 536870912}}},
    {"name": "infra", "max_gpu_mem_bytes": 0},
    {"name": "bad-jobs", "max_gpu_mem_bytes": 1, "gpu_mem_in_use": {"jobs_bytes": -5}},
    {"name": "bad-pods", "max_gpu_mem_bytes": 1,
     "gpu_mem_in_use": {"jobs_bytes": 0, "pods_bytes": {"west": "lots"}}},
    {"name": "bad-max", "max_gpu_mem_bytes": 1.5},
    {"max_gpu_mem_bytes": 1}]})");
  StatusOr<std::map<std::string, TeamQuota>> q = TeamQuotasOf(teams, "east");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  ASSERT_EQ(q->size(), 2U);
  EXPECT_EQ(q->at("research").max_bytes, 8 * kGiB);
  EXPECT_EQ(q->at("research").elsewhere_bytes, kGiB + kGiB / 2);
  EXPECT_EQ(q->at("infra").max_bytes, 0U);
  EXPECT_EQ(q->at("infra").elsewhere_bytes, 0U);
  // From "west", east's pods are elsewhere and west's are its own.
  EXPECT_EQ(TeamQuotasOf(teams, "west")->at("research").elsewhere_bytes, 3 * kGiB);
  EXPECT_FALSE(TeamQuotasOf(Json::array(), "east").ok());
  EXPECT_FALSE(TeamQuotasOf(Json{{"teams", 3}}, "east").ok());
}

// max_gpus and gpus_in_use the same way: the team's jobs and its other clusters' pods are held
// elsewhere; an older server's answer without them means no GPU quota; malformed figures leave
// the team out.
TEST(TeamQuotasOf, CountsGpusOfJobsAndOtherClustersPods) {
  const Json teams = Json::parse(R"({"teams": [
    {"name": "research", "max_gpu_mem_bytes": 0, "max_gpus": 4,
     "gpus_in_use": {"jobs": 1, "pods": {"east": 2, "west": 1}}},
    {"name": "older", "max_gpu_mem_bytes": 0},
    {"name": "bad-max", "max_gpu_mem_bytes": 0, "max_gpus": -1},
    {"name": "bad-pods", "max_gpu_mem_bytes": 0, "max_gpus": 4,
     "gpus_in_use": {"jobs": 0, "pods": {"west": 1.5}}},
    {"name": "bad-jobs", "max_gpu_mem_bytes": 0, "max_gpus": 4, "gpus_in_use": {"jobs": "x"}}]})");
  StatusOr<std::map<std::string, TeamQuota>> q = TeamQuotasOf(teams, "east");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  ASSERT_EQ(q->size(), 2U);
  EXPECT_EQ(q->at("research").max_gpus, 4U);
  EXPECT_EQ(q->at("research").elsewhere_gpus, 2U);
  EXPECT_EQ(TeamQuotasOf(teams, "west")->at("research").elsewhere_gpus, 3U);
  EXPECT_EQ(q->at("older").max_gpus, 0U);
  EXPECT_EQ(q->at("older").elsewhere_gpus, 0U);
}

}  // namespace
}  // namespace paladin::k8s
