// The scheduler's pass and `paladin k8s explain`, without a cluster: the API server's answers
// (node list, pod list, namespaces, events) are written here as JSON, as the fake API the pass
// and the explainer read. What explain says of a pending pod is what the scheduler's pass gives
// as its reason; a placed pod is explained by its Binding's annotations.
#include "paladin/k8s/explain.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "paladin/core/packer.h"
#include "paladin/core/rng.h"
#include "paladin/k8s/placement_pass.h"
#include "paladin/server/placement.h"

namespace paladin::k8s {
namespace {

using Json = nlohmann::json;
constexpr uint64_t kGiB = uint64_t{1} << 30;

Json Node(const std::string& name, int gpus) {
  Json list = Json::array();
  for (int i = 0; i < gpus; ++i) {
    list.push_back({{"index", i}, {"memory", 8 * kGiB}, {"model", "Emulated"}});
  }
  return {{"metadata", {{"name", name}, {"annotations", {{kGpusAnnotation, list.dump()}}}}},
          {"spec", Json::object()},
          {"status", {{"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}};
}

// A pod of Paladin's asking for `gib` GiB, created at second `created`; bound to localhost/`gpu`
// when gpu >= 0 (with the annotations the scheduler's Binding writes).
Json Pod(const std::string& ns, const std::string& name, uint64_t gib, int created, int gpu = -1) {
  Json pod = {{"metadata",
               {{"namespace", ns},
                {"name", name},
                {"uid", "uid-" + name},
                {"creationTimestamp", "2026-12-03T07:00:" + std::string(created < 10 ? "0" : "") +
                                          std::to_string(created) + "Z"}}},
              {"spec",
               {{"schedulerName", "paladin"},
                {"containers",
                 {{{"name", "demo"},
                   {"resources",
                    {{"limits", {{"paladin.io/gpu-memory", std::to_string(gib) + "Gi"}}}}}}}}}},
              {"status", {{"phase", "Pending"}}}};
  if (gpu >= 0) {
    pod["spec"]["nodeName"] = "localhost";
    pod["status"]["phase"] = "Running";
    pod["metadata"]["annotations"] = {
        {kGpuAnnotation, std::to_string(gpu)},
        {kGpuBytesAnnotation, std::to_string(gib * kGiB)},
        {kPlacementAnnotation, "localhost/" + std::to_string(gpu) +
                                   " by Paladin's packer, policy paladin (score 50.0, 1 feasible "
                                   "node)"}};
  }
  return pod;
}

ClusterState State(const std::vector<Json>& pods, int gpus = 2) {
  ClusterState s;
  s.nodes = Json{{"items", {Node("localhost", gpus)}}}.dump();
  s.pods = Json{{"items", pods}}.dump();
  return s;
}

core::Policy DefaultPolicy() {
  StatusOr<core::Policy> policy = server::MakeServerPolicy("paladin");
  EXPECT_TRUE(policy.ok());
  return std::move(*policy);
}

// The scheduler's pass over `state` with its default policy, and the packer it uses.
struct TestPass {
  explicit TestPass(const ClusterState& state) : packer(DefaultPolicy()) {
    StatusOr<std::unique_ptr<PlacementPass>> made = PlacementPass::Create(state, &packer, &rng);
    EXPECT_TRUE(made.ok()) << made.status().message();
    if (made.ok()) pass = std::move(*made);
  }
  core::Packer packer;
  core::Rng rng{1};
  std::unique_ptr<PlacementPass> pass;
};

// What one pass of the scheduler decides for each pending pod, by name: where, or why not.
std::map<std::string, PodOutcome> SchedulerPass(const ClusterState& state) {
  TestPass t(state);
  std::map<std::string, PodOutcome> out;
  for (const PodRequest& p : t.pass->pending()) out[p.name] = t.pass->Place(p);
  return out;
}

std::string Row(const PodExplanation& e, const std::string& key) {
  std::string out;
  for (const auto& [k, v] : ExplanationRows(e)) {
    if (k == key) out += (out.empty() ? "" : "\n") + v;
  }
  return out;
}

// case_placement.sh's scenario through the pass: pods of 6, 4, 2 and 3 GiB pending in that
// order on two 8 GiB GPUs go to GPUs 0, 1, 0, 1, each told how; 2 GiB more fits nowhere, with the
// most free GPU named and the packer's own explanation.
TEST(PlacementPass, TheScenarioOfCasePlacement) {
  const ClusterState state =
      State({Pod("ns", "p3", 2, 3), Pod("ns", "p1", 6, 1), Pod("ns", "full", 2, 5),
             Pod("ns", "p4", 3, 4), Pod("ns", "p2", 4, 2)});
  std::map<std::string, PodOutcome> got = SchedulerPass(state);
  const std::pair<const char*, int> expected[] = {{"p1", 0}, {"p2", 1}, {"p3", 0}, {"p4", 1}};
  for (const auto& [name, gpu] : expected) {
    const PodOutcome& o = got[name];
    ASSERT_TRUE(o.placed) << name << ": " << o.reason;
    EXPECT_EQ(o.node, "localhost");
    EXPECT_EQ(o.gpu, gpu) << name;
    EXPECT_EQ(
        o.how.rfind(
            "localhost/" + std::to_string(gpu) + " by Paladin's packer, policy paladin (score ", 0),
        0u)
        << o.how;
  }
  EXPECT_FALSE(got["full"].placed);
  EXPECT_EQ(got["full"].reason.rfind("no GPU has 2 GiB free: the most free is 1 GiB on "
                                     "localhost/1 (no node fits: GpuFit rejected 1 node",
                                     0),
            0u)
      << got["full"].reason;
}

// Priority first, then age; a pod being deleted or ended is not pending, a pod asking for no
// GPU memory and a malformed one are told why.
TEST(PlacementPass, OrderAndReasonsBeforeThePacker) {
  Json high = Pod("ns", "high", 1, 9);
  high["metadata"]["annotations"] = {{kPriorityAnnotation, "5"}};
  Json gone = Pod("ns", "gone", 1, 1);
  gone["metadata"]["deletionTimestamp"] = "2026-12-03T07:01:00Z";
  Json none = Pod("ns", "none", 1, 2);
  none["spec"]["containers"][0].erase("resources");
  Json bad = Pod("ns", "bad", 1, 3);
  bad["metadata"]["annotations"] = {{kPriorityAnnotation, "high"}};
  const ClusterState state = State({Pod("ns", "old", 1, 0), gone, none, bad, high});
  TestPass t(state);
  ASSERT_NE(t.pass, nullptr);
  std::vector<std::string> order;
  for (const PodRequest& p : t.pass->pending()) order.push_back(p.name);
  EXPECT_EQ(order, (std::vector<std::string>{"high", "old", "none", "bad"}));
  std::map<std::string, PodOutcome> got = SchedulerPass(state);
  EXPECT_NE(got["none"].reason.find("asks for no paladin.io/gpu-memory"), std::string::npos);
  EXPECT_EQ(got["bad"].reason.rfind("malformed: metadata.annotations[paladin.io/priority]", 0), 0u);
  EXPECT_FALSE(got["none"].packer_ran);
}

// Two nodes of two 8 GiB GPUs each: "a" labelled zone=x and tainted dedicated=ml:NoSchedule,
// "b" labelled zone=y with a PreferNoSchedule taint (a preference: it rules nothing out).
ClusterState TwoZones(const std::vector<Json>& pods) {
  Json a = Node("a", 2), b = Node("b", 2);
  a["metadata"]["labels"] = {{"zone", "x"}};
  a["spec"]["taints"] = {{{"key", "dedicated"}, {"value", "ml"}, {"effect", "NoSchedule"}}};
  b["metadata"]["labels"] = {{"zone", "y"}};
  b["spec"]["taints"] = {{{"key", "soft"}, {"effect", "PreferNoSchedule"}}};
  ClusterState s;
  s.nodes = Json{{"items", {a, b}}}.dump();
  s.pods = Json{{"items", pods}}.dump();
  return s;
}

// A pod goes only where its own nodeSelector, required node affinity and tolerations let it,
// as under the stock scheduler; one that fits nowhere says which constraint rules out each node,
// and explain's verdicts say the same. A move's destination (Place with a node) is the
// operator's: the packer chooses among that node's GPUs, whatever the pod's constraints.
TEST(PlacementPass, APodsOwnConstraintsRuleNodesOut) {
  Json on_a = Pod("ns", "on-a", 1, 1);
  on_a["spec"]["nodeSelector"] = {{"zone", "x"}};
  on_a["spec"]["tolerations"] = {{{"key", "dedicated"}, {"operator", "Exists"}}};
  Json plain = Pod("ns", "plain", 1, 2);  // tolerates nothing: b only
  Json zone_y = Pod("ns", "zone-y", 1, 3);
  zone_y["spec"]["tolerations"] = {{{"operator", "Exists"}}};
  zone_y["spec"]["affinity"] = {
      {"nodeAffinity",
       {{"requiredDuringSchedulingIgnoredDuringExecution",
         {{"nodeSelectorTerms",
           {{{"matchExpressions",
              {{{"key", "zone"}, {"operator", "In"}, {"values", {"y"}}}}}}}}}}}}};
  Json nowhere = Pod("ns", "nowhere", 1, 4);
  nowhere["spec"]["nodeSelector"] = {{"zone", "z"}};
  Json big = Pod("ns", "big", 8, 5);  // fits an empty GPU of a, but may go to b only
  Json bad = Pod("ns", "bad", 1, 6);
  bad["spec"]["tolerations"] = {{{"key", "dedicated"}, {"operator", "Maybe"}}};
  const ClusterState state =
      TwoZones({on_a, plain, zone_y, nowhere, Pod("ns", "fill", 7, 0), big, bad});
  std::map<std::string, PodOutcome> got = SchedulerPass(state);
  for (const auto& [name, node] : std::vector<std::pair<std::string, std::string>>{
           {"fill", "b"}, {"on-a", "a"}, {"plain", "b"}, {"zone-y", "b"}}) {
    EXPECT_TRUE(got[name].placed) << name << ": " << got[name].reason;
    EXPECT_EQ(got[name].node, node) << name;
  }
  EXPECT_FALSE(got["nowhere"].placed);
  EXPECT_EQ(got["nowhere"].reason,
            "no node with GPUs may run it by its own constraints (a: nodeSelector zone=z: label "
            "zone is x; b: nodeSelector zone=z: label zone is y)");
  EXPECT_FALSE(got["big"].placed);
  EXPECT_NE(got["big"].reason.find("(its own constraints rule out a: taint "
                                   "dedicated=ml:NoSchedule not tolerated)"),
            std::string::npos)
      << got["big"].reason;
  EXPECT_EQ(got["bad"].reason.rfind("malformed: spec.tolerations[0].operator: 'Maybe'", 0), 0u)
      << got["bad"].reason;

  TestPass t(state);
  ASSERT_NE(t.pass, nullptr);
  const PodRequest plain_pod = ReadPod(plain.dump());
  const std::vector<std::pair<std::string, std::string>> verdicts = t.pass->NodeVerdicts(plain_pod);
  ASSERT_EQ(verdicts.size(), 2u);
  EXPECT_EQ(verdicts[0].second,
            "ruled out by the pod: taint dedicated=ml:NoSchedule not tolerated");
  EXPECT_EQ(verdicts[1].second.rfind("fits, GPU ", 0), 0u) << verdicts[1].second;
  // Named by a move: node a, taint or not; the packer picks its GPU.
  const PodOutcome moved = t.pass->Place(plain_pod, "a");
  EXPECT_TRUE(moved.placed) << moved.reason;
  EXPECT_EQ(moved.node, "a");
  EXPECT_FALSE(t.pass->Place(ReadPod(Pod("ns", "huge", 9, 7).dump()), "a").placed);
  EXPECT_EQ(t.pass->Place(plain_pod, "c").reason,
            "node c publishes no GPUs (annotation paladin.io/gpus) or takes no pods (cordoned or "
            "not Ready)");
}

// A placed pod: its Binding's record, the scheduler's latest event of it (not another pod's of
// the same name, nor another component's), and the GPU's books.
TEST(ExplainPod, APlacedPodByWhatItsBindingRecorded) {
  const Json p2 = Pod("ns", "p2", 4, 2, /*gpu=*/1);
  const ClusterState state = State({Pod("ns", "p1", 6, 1, 0), p2});
  auto event = [](const char* uid, const char* component, const char* reason, const char* when,
                  const char* message) {
    return Json{{"metadata", {{"name", std::string("p2.") + when}}},
                {"involvedObject", {{"kind", "Pod"}, {"name", "p2"}, {"uid", uid}}},
                {"source", {{"component", component}}},
                {"reason", reason},
                {"message", message},
                {"lastTimestamp", when}};
  };
  const Json events = {
      {"items",
       {event("uid-p2", "paladin", "FailedScheduling", "2026-12-03T07:00:03Z", "earlier"),
        event("uid-p2", "paladin", "Scheduled", "2026-12-03T07:00:04Z",
              "placed on localhost/1 by Paladin's packer: 4 GiB of GPU memory"),
        event("uid-old", "paladin", "Scheduled", "2026-12-03T07:00:09Z", "an older pod p2"),
        event("uid-p2", "kubelet", "Started", "2026-12-03T07:00:08Z", "Started container")}}};
  StatusOr<PodExplanation> e = ExplainPod(state, p2.dump(), events.dump(), SchedulerOptions());
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->state, "placed");
  EXPECT_EQ(e->node, "localhost");
  EXPECT_EQ(e->gpu, 1);
  EXPECT_EQ(Row(*e, "placement"),
            "localhost/1 by Paladin's packer, policy paladin (score 50.0, 1 feasible node)");
  EXPECT_EQ(Row(*e, "event"),
            "Scheduled: placed on localhost/1 by Paladin's packer: 4 GiB of GPU memory");
  EXPECT_EQ(Row(*e, "reason"), "");
  EXPECT_EQ(Row(*e, "asks"), "4 GiB of GPU memory, priority 0");
  EXPECT_EQ(Row(*e, "gpu"),
            "localhost/0: 8 GiB, 2 GiB free (ns/p1 6 GiB)\n"
            "localhost/1: 8 GiB, 4 GiB free (ns/p2 4 GiB)");
}

// A pending pod: the reason is what the scheduler's pass gives it (the same words its event
// has), each node's verdict names the plugin that rejects it, and the books show why.
TEST(ExplainPod, APendingPodSaysWhatTheSchedulersPassSays) {
  const Json full = Pod("ns", "full", 2, 5);
  const ClusterState state = State({Pod("ns", "p1", 6, 1, 0), Pod("ns", "p2", 4, 2, 1),
                                    Pod("ns", "p3", 2, 3, 0), Pod("ns", "p4", 3, 4, 1), full});
  StatusOr<PodExplanation> e = ExplainPod(state, full.dump(), "", SchedulerOptions());
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->state, "pending");
  EXPECT_EQ(e->reason, SchedulerPass(state)["full"].reason);
  EXPECT_EQ(e->reason.rfind("no GPU has 2 GiB free: the most free is 1 GiB on localhost/1", 0), 0u);
  EXPECT_EQ(Row(*e, "event"), "-");
  const std::string node = Row(*e, "node");
  EXPECT_EQ(node.rfind("localhost: GpuFit rejects it", 0), 0u) << node;
  EXPECT_EQ(Row(*e, "gpu"),
            "localhost/0: 8 GiB, 0 B free (ns/p1 6 GiB, ns/p3 2 GiB)\n"
            "localhost/1: 8 GiB, 1 GiB free (ns/p2 4 GiB, ns/p4 3 GiB)");

  // More than any GPU has: said before the packer runs, as the scheduler says it.
  const Json big = Pod("ns", "too-big", 17, 6);
  const ClusterState with_big = State({Pod("ns", "p1", 6, 1, 0), big});
  e = ExplainPod(with_big, big.dump(), "", SchedulerOptions());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->reason,
            "asks for 17 GiB of GPU memory, more than any GPU has (the largest: 8 GiB on "
            "localhost/0)");
  EXPECT_EQ(e->reason, SchedulerPass(with_big)["too-big"].reason);
}

// The pods a pass decides first take their places before it: an older 5 GiB pod takes the only
// GPU, so this one does not fit, and explain says which pod went ahead where.
TEST(ExplainPod, PodsAheadInThePassTakeTheirPlacesFirst) {
  const Json later = Pod("ns", "later", 5, 2);
  const ClusterState state = State({later, Pod("ns", "first", 5, 1)}, /*gpus=*/1);
  StatusOr<PodExplanation> e = ExplainPod(state, later.dump(), "", SchedulerOptions());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->reason, SchedulerPass(state)["later"].reason);
  EXPECT_EQ(e->reason.rfind("no GPU has 5 GiB free: the most free is 3 GiB on localhost/0", 0), 0u)
      << e->reason;
  ASSERT_EQ(e->ahead.size(), 1u);
  EXPECT_EQ(e->ahead[0].rfind("ns/first: localhost/0 by Paladin's packer", 0), 0u);

  // With a second GPU, the pass would place it: explain says where, and that it is not bound.
  const ClusterState two = State({later, Pod("ns", "first", 5, 1)}, /*gpus=*/2);
  e = ExplainPod(two, later.dump(), "", SchedulerOptions());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->reason.rfind("none now: a pass places it on localhost/1 by Paladin's packer", 0), 0u)
      << e->reason;
  EXPECT_EQ(Row(*e, "node"), "localhost: fits, GPU 1");
}

// Teams checked, namespaces a and b both labelled team research.
void ResearchNamespaces(ClusterState& state) {
  state.teams_checked = true;
  state.namespaces =
      Json{{"items",
            {{{"metadata", {{"name", "a"}, {"labels", {{kTeamLabel, "research"}}}}}},
             {{"metadata", {{"name", "b"}, {"labels", {{kTeamLabel, "research"}}}}}}}}}
          .dump();
}

// A move's or a recovery's replacement, placed before anything is stopped: to another node, the
// packer's choice of that node's GPUs (each booked for the next); to a GPU the operator named,
// only with room there; with teams checked, the team's quota counts the pod being replaced, so a
// second copy past it is refused with the team's reason.
TEST(ReplacementPlacer, PlacesOnTheNamedNodeWithRoomAndQuota) {
  Json moving = Pod("a", "moving", 3, 1, /*gpu=*/0);  // bound to localhost/0
  ClusterState state = State({moving, Pod("a", "other", 6, 2, 1)});
  Json second = Node("second", 2);
  state.nodes = Json{{"items", {Node("localhost", 2), second}}}.dump();
  StatusOr<std::unique_ptr<ReplacementPlacer>> placer =
      ReplacementPlacer::Create(state, SchedulerOptions());
  ASSERT_TRUE(placer.ok()) << placer.status().message();
  // Two recoveries of 3 GiB onto `second`: the packer fills one GPU before the other.
  const PodOutcome first = (*placer)->Place(moving.dump(), "second", -1);
  ASSERT_TRUE(first.placed) << first.reason;
  EXPECT_EQ(first.node, "second");
  EXPECT_EQ(first.how.rfind("second/" + std::to_string(first.gpu) + " by Paladin's packer", 0), 0u)
      << first.how;
  const PodOutcome next = (*placer)->Place(Pod("a", "b", 3, 3, 0).dump(), "second", -1);
  ASSERT_TRUE(next.placed) << next.reason;
  EXPECT_EQ(next.gpu, first.gpu);  // tightest fit: 6 GiB booked of 8 is still short of full
  // The operator's GPU: localhost/1 holds 6 GiB of 8, no room for 3.
  const PodOutcome full = (*placer)->Place(moving.dump(), "localhost", 1);
  EXPECT_FALSE(full.placed);
  EXPECT_EQ(full.reason, "the move's target localhost/1 has 2 GiB free, 3 GiB asked");
  EXPECT_FALSE((*placer)->Place(moving.dump(), "nowhere", -1).placed);

  // Within its node: its own 3 GiB left out of the books (it is leaving them), so the packer
  // sees GPU 0 empty and GPU 1 with 2 GiB free, and puts it back where it is (MovePod then
  // says there is nothing to move).
  ClusterState within = state;
  within.moving_uid = "uid-moving";
  placer = ReplacementPlacer::Create(within, SchedulerOptions());
  ASSERT_TRUE(placer.ok());
  const PodOutcome same = (*placer)->Place(moving.dump(), "localhost", -1);
  ASSERT_TRUE(same.placed) << same.reason;
  EXPECT_EQ(same.gpu, 0);
  // Booked as it stands, the pod would leave GPU 0 only 5 GiB: 4 GiB more would not fit there.
  placer = ReplacementPlacer::Create(state, SchedulerOptions());
  ASSERT_TRUE(placer.ok());
  EXPECT_FALSE((*placer)->Place(Pod("a", "four", 6, 4, 0).dump(), "localhost", -1).placed);
  placer = ReplacementPlacer::Create(within, SchedulerOptions());
  ASSERT_TRUE(placer.ok());
  EXPECT_TRUE((*placer)->Place(Pod("a", "four", 6, 4, 0).dump(), "localhost", -1).placed);

  // Teams checked: research may hold 4 GiB; `moving` holds 3 of them already.
  ResearchNamespaces(state);
  state.quotas = std::map<std::string, TeamQuota>{{"research", {4 * kGiB, 0}}};
  placer = ReplacementPlacer::Create(state, SchedulerOptions());
  ASSERT_TRUE(placer.ok());
  const PodOutcome over = (*placer)->Place(moving.dump(), "second", -1);
  EXPECT_FALSE(over.placed);
  EXPECT_EQ(over.reason.rfind("team research: ", 0), 0u) << over.reason;
}

// Teams checked: the quota's reason, as the scheduler gives it, and the team's line; a server
// that cannot be reached is said too.
TEST(ExplainPod, TheTeamsQuotaReason) {
  const Json wants = Pod("b", "wants", 2, 3);
  ClusterState state = State({Pod("a", "holds", 2, 1, 0), wants});
  ResearchNamespaces(state);
  state.quotas = std::map<std::string, TeamQuota>{{"research", {3 * kGiB, 0}}};
  StatusOr<PodExplanation> e = ExplainPod(state, wants.dump(), "", SchedulerOptions());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->reason,
            "team research: 2 GiB of its 3 GiB of GPU memory (max_gpu_mem) in use, "
            "this pod asks 2 GiB");
  EXPECT_EQ(e->reason, SchedulerPass(state)["wants"].reason);
  EXPECT_EQ(Row(*e, "team"), "research: 2 GiB of its 3 GiB of GPU memory (max_gpu_mem) in use");

  // The team's jobs in Paladin's server and its pods in other clusters count too: 5 GiB takes
  // this pod beside the 2 GiB of its pods here, not with 2 GiB more held outside this cluster.
  state.quotas = std::map<std::string, TeamQuota>{{"research", {5 * kGiB, 0}}};
  EXPECT_TRUE(SchedulerPass(state)["wants"].placed);
  state.quotas = std::map<std::string, TeamQuota>{{"research", {5 * kGiB, 2 * kGiB}}};
  e = ExplainPod(state, wants.dump(), "", SchedulerOptions());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->reason,
            "team research: 4 GiB of its 5 GiB of GPU memory (max_gpu_mem) in use, "
            "this pod asks 2 GiB");
  EXPECT_EQ(Row(*e, "team"),
            "research: 4 GiB of its 5 GiB of GPU memory (max_gpu_mem) in use (2 GiB of it "
            "outside this cluster)");

  state.quotas = Unavailable("connection refused");
  e = ExplainPod(state, wants.dump(), "", SchedulerOptions());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->reason, "team research: its quota cannot be checked (connection refused)");
}

// max_gpus over pods: each bound pod holds one GPU (its share of it), and the team's jobs and
// its pods in other clusters count too. With 1 GPU held here and max_gpus 2 the pod is placed;
// with one more held outside this cluster it waits, saying so, and the team's line counts both.
TEST(ExplainPod, TheTeamsGpuQuotaReason) {
  const Json wants = Pod("b", "wants", 2, 3);
  ClusterState state = State({Pod("a", "holds", 2, 1, 0), wants});
  ResearchNamespaces(state);
  TeamQuota quota;
  quota.max_gpus = 2;
  state.quotas = std::map<std::string, TeamQuota>{{"research", quota}};
  EXPECT_TRUE(SchedulerPass(state)["wants"].placed);

  quota.elsewhere_gpus = 1;
  state.quotas = std::map<std::string, TeamQuota>{{"research", quota}};
  StatusOr<PodExplanation> e = ExplainPod(state, wants.dump(), "", SchedulerOptions());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->reason, "team research: 2 of its 2 GPUs (max_gpus) in use, this pod needs 1");
  EXPECT_EQ(e->reason, SchedulerPass(state)["wants"].reason);
  EXPECT_EQ(Row(*e, "team"),
            "research: no max_gpu_mem quota; its pods hold 2 GiB; 2 of its 2 GPUs (max_gpus) in "
            "use");
}

// Pods Paladin does not place, and bad input.
TEST(ExplainPod, WhatPaladinDoesNotPlace) {
  Json other = Pod("ns", "other", 1, 1);
  other["spec"]["schedulerName"] = "default-scheduler";
  const ClusterState state = State({});
  StatusOr<PodExplanation> e = ExplainPod(state, other.dump(), "", SchedulerOptions());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->state, "not Paladin's");
  EXPECT_NE(e->reason.find("spec.schedulerName is 'default-scheduler'"), std::string::npos);

  Json ended = Pod("ns", "done", 1, 1, 0);
  ended["status"]["phase"] = "Succeeded";
  e = ExplainPod(state, ended.dump(), "", SchedulerOptions());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->state, "ended (Succeeded)");

  EXPECT_FALSE(ExplainPod(state, "[]", "", SchedulerOptions()).ok());
  SchedulerOptions unknown;
  unknown.policy = "no-such-policy";
  EXPECT_FALSE(ExplainPod(state, other.dump(), "", unknown).ok());
  ClusterState broken = state;
  broken.nodes = "not json";
  EXPECT_FALSE(ExplainPod(broken, other.dump(), "", SchedulerOptions()).ok());
}

}  // namespace
}  // namespace paladin::k8s
