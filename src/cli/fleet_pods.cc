// `paladin pods`, `pods move` and `pods moves`: the Kubernetes pods Paladin's scheduler places,
// as the server shows them to each team, and their moves asked through the server
// (docs/kubernetes.md, "Pods in Paladin's server" and "Moves through Paladin's server").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fleet.h"
#include "fleet_format.h"
#include "paladin/api/wire.h"

namespace paladin::cli {

namespace key = api::key;

namespace {

using api::Json;
using fleet::Array;
using fleet::BytesCell;
using fleet::Int;
using fleet::Num;
using fleet::Str;

// --- pods ---

struct PodsArgs {
  FleetFlags flags;
  std::string team;
};

// The Kubernetes pods Paladin's scheduler places, as it last reported them to the server.
int RunPods(const PodsArgs& a) {
  FleetApi api("pods", a.flags);
  StatusOr<Json> answer = api.Get("/v1/pods" + fleet::Query({{"team", a.team}}));
  if (!answer.ok()) return api.Fail(answer.status());
  if (api.json()) {
    FleetApi::PrintJson(*answer);
    return 0;
  }
  fleet::Table table(
      {"NAMESPACE", "NAME", "TEAM", "PHASE", "NODE/GPU", "GPU MEMORY", "USED", "WHY"});
  for (const Json& pod : Array(*answer, key::kPods)) {
    table.AddRow({Str(pod, key::kNamespace), Str(pod, key::kName), Str(pod, key::kTeam),
                  Str(pod, key::kPhase), fleet::PlacementCell(pod),
                  BytesCell(pod, key::kGpuMemBytes), BytesCell(pod, key::kUsedBytes),
                  Str(pod, key::kReason).empty() ? "-" : Str(pod, key::kReason)});
  }
  for (const Json& c : Array(*answer, key::kClusters)) {
    std::printf("cluster %s: reported %s ago by Paladin's scheduler\n", Str(c, key::kName).c_str(),
                fleet::FormatDuration(Num(c, key::kReportedSAgo).value_or(0)).c_str());
  }
  if (table.rows() == 0) {
    std::printf("no pods\n");
    return 0;
  }
  std::fputs(table.Render().c_str(), stdout);
  return 0;
}

// --- pods move, pods moves ---

struct PodMoveArgs {
  FleetFlags flags;
  std::string pod;  // NAMESPACE/NAME
  std::string to;   // NODE, NODE/GPU or "" (the packer's GPU on the pod's node)
  int gpu = -1;     // a GPU of the pod's node
  bool no_wait = false;
  double timeout_s = 300;
};

std::string MoveTarget(const Json& m) {
  const Json to = m.value(key::kTo, Json::object());
  const std::string node = Str(to, key::kNode);
  const std::optional<int64_t> gpu = Int(to, key::kGpu);
  if (node.empty()) return gpu ? "GPU " + std::to_string(*gpu) : "packer's GPU";
  return gpu ? node + "/" + std::to_string(*gpu) : node;
}

// "done: moved ml/a -> ml/a-m1, ..." and the like, one line.
void PrintMoveLine(const Json& m) {
  std::printf(
      "pod move %lld of %s/%s: %s%s%s\n", static_cast<long long>(Int(m, key::kId).value_or(0)),
      Str(m, key::kNamespace).c_str(), Str(m, key::kName).c_str(), Str(m, key::kState).c_str(),
      Str(m, key::kMessage).empty() ? "" : ": ", fleet::Printable(Str(m, key::kMessage)).c_str());
}

// A move not ended by the deadline.
Status StillWaiting(const std::string& id, const std::string& state, double timeout_s) {
  return Unavailable("pod move " + id + " still " + state + " after " +
                     fleet::FormatDuration(timeout_s) +
                     " (paladin pods moves shows it; is the node's mover, paladin k8s mover, "
                     "running?)");
}

int RunPodMove(const PodMoveArgs& a) {
  FleetApi api("pods move", a.flags);
  const size_t slash = a.pod.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == a.pod.size() ||
      a.pod.find('/', slash + 1) != std::string::npos) {
    return api.Fail(InvalidArgument("pod '" + a.pod + "': expected NAMESPACE/NAME"));
  }
  Json body = Json::object();
  std::string node = a.to;
  int gpu = a.gpu;
  if (const size_t s = a.to.find('/'); s != std::string::npos) {
    node = a.to.substr(0, s);
    const std::string index = a.to.substr(s + 1);
    if (index.empty() || index.size() > 4 || gpu >= 0 ||
        index.find_first_not_of("0123456789") != std::string::npos) {
      return api.Fail(
          InvalidArgument("--to '" + a.to + "': expected NODE or NODE/GPU (and no --gpu)"));
    }
    gpu = std::stoi(index);
  }
  if (!node.empty()) body[key::kNode] = node;
  if (gpu >= 0) body[key::kGpu] = gpu;
  StatusOr<Json> asked = api.Post("/v1/pods/" + a.pod + "/move", body);
  if (!asked.ok()) return api.Fail(asked.status());
  const std::string id = std::to_string(Int(*asked, key::kId).value_or(0));
  if (a.no_wait) {
    if (api.json()) {
      FleetApi::PrintJson(*asked);
    } else {
      std::printf("pod move %s of %s to %s: requested (its node's mover carries it out)\n",
                  id.c_str(), a.pod.c_str(), MoveTarget(*asked).c_str());
    }
    return 0;
  }
  if (!api.json()) {
    std::printf("pod move %s of %s to %s: requested, waiting for its node's mover\n", id.c_str(),
                a.pod.c_str(), MoveTarget(*asked).c_str());
    std::fflush(stdout);
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(a.timeout_s);
  std::string said = "requested";
  for (;;) {
    StatusOr<Json> m = api.Get("/v1/pod-moves/" + id);
    if (!m.ok()) return api.Fail(m.status());
    const std::string state = Str(*m, key::kState);
    const std::optional<api::PodMoveState> named = api::PodMoveStateNamed(state);
    if (named && api::PodMoveEnded(*named)) {
      if (api.json()) {
        FleetApi::PrintJson(*m);
      } else {
        PrintMoveLine(*m);
      }
      return *named == api::PodMoveState::kDone ? 0 : 1;
    }
    if (state != said && !api.json()) {
      said = state;
      std::printf("pod move %s: %s by %s\n", id.c_str(), state.c_str(),
                  Str(*m, key::kMover).c_str());
      std::fflush(stdout);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return api.Fail(StillWaiting(id, state, a.timeout_s));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
}

// --- pods drain ---

struct PodDrainArgs {
  FleetFlags flags;
  std::string node, to;
  bool no_wait = false;
  double timeout_s = 900;
};

int RunPodDrain(const PodDrainArgs& a) {
  FleetApi api("pods drain", a.flags);
  StatusOr<Json> asked =
      api.Post("/v1/pods/drain", api::ToJson(api::PodDrainAsk{.node = a.node, .to = a.to}));
  if (!asked.ok()) return api.Fail(asked.status());
  std::vector<std::string> ids;
  for (const Json& m : Array(*asked, key::kMoves)) {
    ids.push_back(std::to_string(Int(m, key::kId).value_or(0)));
  }
  const Json& left = Array(*asked, key::kLeft);
  if (!api.json()) {
    std::printf("drain of %s: %zu pod move(s) to %s requested, %zu pod(s) left\n", a.node.c_str(),
                ids.size(), a.to.c_str(), left.size());
    for (const Json& m : Array(*asked, key::kMoves)) {
      std::printf("  pod move %lld of %s/%s (its node's mover cordons the node, then moves it)\n",
                  static_cast<long long>(Int(m, key::kId).value_or(0)),
                  Str(m, key::kNamespace).c_str(), Str(m, key::kName).c_str());
    }
    for (const Json& l : left) {
      std::printf("  left: %s/%s %s\n", Str(l, key::kNamespace).c_str(), Str(l, key::kName).c_str(),
                  fleet::Printable(Str(l, key::kWhy)).c_str());
    }
    std::fflush(stdout);
  }
  if (a.no_wait || ids.empty()) {
    if (api.json()) FleetApi::PrintJson(*asked);
    return left.empty() ? 0 : 1;
  }
  // Each move to its end, as `pods move` waits for one.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(a.timeout_s);
  std::map<std::string, std::string> said;
  Json ended = Json::array();
  size_t done = 0;
  for (;;) {
    for (const std::string& id : ids) {
      const std::optional<api::PodMoveState> before = api::PodMoveStateNamed(said[id]);
      if (before && api::PodMoveEnded(*before)) continue;
      StatusOr<Json> m = api.Get("/v1/pod-moves/" + id);
      if (!m.ok()) return api.Fail(m.status());
      const std::string state = Str(*m, key::kState);
      if (state == said[id]) continue;
      said[id] = state;
      const std::optional<api::PodMoveState> named = api::PodMoveStateNamed(state);
      if (named && api::PodMoveEnded(*named)) {
        ended.push_back(*m);
        if (*named == api::PodMoveState::kDone) ++done;
        if (!api.json()) PrintMoveLine(*m);
      } else if (!api.json() && named != api::PodMoveState::kRequested) {
        std::printf("pod move %s: %s by %s\n", id.c_str(), state.c_str(),
                    Str(*m, key::kMover).c_str());
      }
      std::fflush(stdout);
    }
    if (ended.size() == ids.size()) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (const std::string& id : ids) {
        const std::optional<api::PodMoveState> n = api::PodMoveStateNamed(said[id]);
        if (!n || !api::PodMoveEnded(*n)) return api.Fail(StillWaiting(id, said[id], a.timeout_s));
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  if (api.json()) {
    Json out = *asked;
    out[key::kMoves] = ended;
    FleetApi::PrintJson(out);
  } else {
    std::printf("drained %s: %zu of %zu pod(s) moved to %s, %zu failed, %zu left\n", a.node.c_str(),
                done, ids.size(), a.to.c_str(), ids.size() - done, left.size());
  }
  return done == ids.size() && left.empty() ? 0 : 1;
}

struct PodMovesArgs {
  FleetFlags flags;
  std::string state;
};

int RunPodMoves(const PodMovesArgs& a) {
  FleetApi api("pods moves", a.flags);
  StatusOr<Json> answer = api.Get("/v1/pod-moves" + fleet::Query({{"state", a.state}}));
  if (!answer.ok()) return api.Fail(answer.status());
  if (api.json()) {
    FleetApi::PrintJson(*answer);
    return 0;
  }
  const double now = FleetNow();
  fleet::Table table({"ID", "POD", "TEAM", "FROM", "TO", "STATE", "ASKED BY", "AGE", "OUTCOME"});
  for (const Json& m : Array(*answer, key::kMoves)) {
    std::string from = Str(m, key::kFromNode);
    if (const std::optional<int64_t> g = Int(m, key::kFromGpu)) from += "/" + std::to_string(*g);
    table.AddRow({std::to_string(Int(m, key::kId).value_or(0)),
                  Str(m, key::kNamespace) + "/" + Str(m, key::kName), Str(m, key::kTeam), from,
                  MoveTarget(m), Str(m, key::kState), Str(m, key::kAskedBy),
                  fleet::FormatDuration(now - Num(m, key::kRequestedAt).value_or(now)),
                  Str(m, key::kMessage).empty() ? "-" : Str(m, key::kMessage)});
  }
  if (table.rows() == 0) {
    std::printf("no pod moves\n");
    return 0;
  }
  std::fputs(table.Render().c_str(), stdout);
  return 0;
}

}  // namespace

void RegisterFleetPods(CLI::App& app, int* exit_code) {
  auto pods = std::make_shared<PodsArgs>();
  CLI::App* pods_cmd = app.add_subcommand(
      "pods",
      "List the Kubernetes pods Paladin's scheduler places, as it reports them to the server: "
      "NAMESPACE NAME TEAM PHASE NODE/GPU GPU MEMORY USED WHY (a team token: its own pods)");
  pods_cmd->add_option("--team", pods->team, "Only this team's pods (admin tokens)");
  AddFleetFlags(pods_cmd, &pods->flags);
  pods_cmd->callback([pods_cmd, pods, exit_code] {
    if (!pods_cmd->get_subcommands().empty()) return;  // pods move, pods moves
    *exit_code = Guarded("pods", [&] { return RunPods(*pods); });
  });

  auto move = std::make_shared<PodMoveArgs>();
  CLI::App* move_cmd = pods_cmd->add_subcommand(
      "move",
      "Move one of your pods, with its process state, to another GPU or node: the server checks "
      "your team owns it, the mover of its node (paladin k8s mover) carries it out");
  move_cmd->add_option("pod", move->pod, "NAMESPACE/NAME")->required();
  move_cmd->add_option("--to", move->to,
                       "NODE or NODE/GPU (default: its own node, the GPU Paladin's packer "
                       "chooses)");
  move_cmd->add_option("--gpu", move->gpu, "A GPU of its own node")->check(CLI::Range(0, 1023));
  move_cmd->add_flag("--no-wait", move->no_wait, "Return once the server has the move");
  move_cmd->add_option("--timeout", move->timeout_s, "Seconds to wait for the move's end")
      ->check(CLI::NonNegativeNumber);
  AddFleetFlags(move_cmd, &move->flags);
  move_cmd->callback(
      [move, exit_code] { *exit_code = Guarded("pods move", [&] { return RunPodMove(*move); }); });

  auto drain = std::make_shared<PodDrainArgs>();
  CLI::App* drain_cmd = pods_cmd->add_subcommand(
      "drain",
      "Move every running pod Paladin placed on a node, with its process state, to another node "
      "(admin tokens): the node's mover (paladin k8s mover) cordons the node and carries out "
      "each move");
  drain_cmd->add_option("node", drain->node, "The node to drain")->required();
  drain_cmd->add_option("--to", drain->to, "The node its pods move to")->required();
  drain_cmd->add_flag("--no-wait", drain->no_wait, "Return once the server has the moves");
  drain_cmd->add_option("--timeout", drain->timeout_s, "Seconds to wait for every move's end")
      ->check(CLI::NonNegativeNumber);
  AddFleetFlags(drain_cmd, &drain->flags);
  drain_cmd->callback([drain, exit_code] {
    *exit_code = Guarded("pods drain", [&] { return RunPodDrain(*drain); });
  });

  auto moves = std::make_shared<PodMovesArgs>();
  CLI::App* moves_cmd = pods_cmd->add_subcommand(
      "moves", "The pod moves you may see: ID POD TEAM FROM TO STATE ASKED BY AGE OUTCOME");
  moves_cmd->add_option("--state", moves->state, "Only requested, taken, done or failed moves");
  AddFleetFlags(moves_cmd, &moves->flags);
  moves_cmd->callback([moves, exit_code] {
    *exit_code = Guarded("pods moves", [&] { return RunPodMoves(*moves); });
  });
}

}  // namespace paladin::cli
