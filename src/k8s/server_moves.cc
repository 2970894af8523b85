#include "paladin/k8s/server_moves.h"

#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

namespace paladin::k8s {
namespace {

using Json = nlohmann::json;

constexpr char kMoverComponent[] = "paladin-mover";

std::string Place(const std::string& node, int gpu) {
  return gpu >= 0 ? node + "/" + std::to_string(gpu) : node;
}

// What the move asks for, in words: "GPU 1 of its node", "node b, the packer's GPU".
std::string Target(const api::PodMove& m) {
  if (m.to.node.empty() || m.to.node == m.from_node) {
    return m.to.gpu >= 0 ? "GPU " + std::to_string(m.to.gpu) + " of its node"
                         : "the GPU Paladin's packer chooses on its node";
  }
  return "node " + m.to.node + (m.to.gpu >= 0 ? ", GPU " + std::to_string(m.to.gpu) : "");
}

// The server takes printable text of up to 2048 bytes.
std::string ForTheServer(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  if (text.size() > 2048) text.resize(2048);
  return text;
}

// The uid of pod NS/NAME, or "" when it cannot be read (its events then go without it).
std::string PodUid(const ApiClient& kube, const std::string& ns, const std::string& name) {
  StatusOr<std::string> body = kube.Get("/api/v1/namespaces/" + ns + "/pods/" + name);
  if (!body.ok()) return "";
  const Json pod = Json::parse(*body, nullptr, /*allow_exceptions=*/false);
  if (!pod.is_object() || !pod.contains("metadata") || !pod["metadata"].is_object()) return "";
  const Json& uid = pod["metadata"].value("uid", Json());
  return uid.is_string() ? uid.get<std::string>() : "";
}

void Event(const ApiClient& kube, const std::string& ns, const std::string& name,
           const std::string& type, const std::string& reason, const std::string& message,
           const std::function<void(const std::string&)>& progress) {
  const std::string uid = PodUid(kube, ns, name);
  if (uid.empty()) return;  // the pod is gone: nothing to attach the event to
  Status s = PostPodEvent(kube, ns, name, uid, type, reason, message, kMoverComponent);
  if (!s.ok()) progress("event " + reason + " on pod " + ns + "/" + name + ": " + s.message());
}

// Carries out one taken move; how it ended.
api::PodMoveOutcome CarryOut(const ApiClient& kube, const api::PodMove& m,
                             const MoverOptions& options,
                             const std::function<void(const std::string&)>& progress) {
  api::PodMoveOutcome outcome;
  const std::string pod = m.ns + "/" + m.name;
  StatusOr<MoveOptions> move = ServerMoveOptions(m, options);
  if (!move.ok()) {
    outcome.message = move.status().message();
    return outcome;
  }
  StatusOr<MoveResult> r = MovePod(kube, *move, progress);
  if (!r.ok()) {
    outcome.message = r.status().message();
    return outcome;
  }
  outcome.ok = true;
  outcome.new_name = r->new_name;
  outcome.node = r->to_node;
  outcome.gpu = r->to_gpu;
  outcome.paused_ms = r->paused_ms;
  outcome.message = "moved " + pod + " -> " + m.ns + "/" + r->new_name + ", " +
                    Place(r->from_node, r->from_gpu) + " -> " + Place(r->to_node, r->to_gpu) +
                    ": checkpoint " + std::to_string(r->checkpoint_ms) + " ms, paused " +
                    std::to_string(r->paused_ms) + " ms";
  return outcome;
}

}  // namespace

StatusOr<MoveOptions> ServerMoveOptions(const api::PodMove& move, const MoverOptions& options) {
  MoveOptions out = options.move;
  out.ns = move.ns;
  out.pod = move.name;
  out.new_name.clear();
  out.node = move.to.node.empty() ? move.from_node : move.to.node;
  out.gpu = move.to.gpu;
  out.to_images.clear();
  if (out.node != move.from_node) {
    auto it = options.node_images.find(out.node);
    if (it == options.node_images.end()) {
      return FailedPrecondition(
          "the mover of node " + options.node + " knows no image folder of node " + out.node +
          " (paladin k8s mover --node-images " + out.node + "=DIR): nothing moved");
    }
    out.to_images = it->second;
  }
  return out;
}

StatusOr<int> RunServerMoves(const ApiClient& kube, const api::Client& server,
                             const MoverOptions& options,
                             const std::function<void(const std::string&)>& progress) {
  StatusOr<Json> list = server.Get("/v1/pod-moves?node=" + options.node + "&state=requested");
  if (!list.ok()) return list.status();
  const Json moves = list->value(api::key::kMoves, Json::array());
  if (!moves.is_array()) return InvalidArgument("the server's moves: expected a list");
  const std::string mover = options.mover.empty() ? options.node : options.mover;
  int taken = 0;
  // The server lists the newest first; the oldest is carried out first.
  for (auto j = moves.rbegin(); j != moves.rend(); ++j) {
    StatusOr<api::PodMove> m = api::DecodePodMove(*j);
    if (!m.ok()) {
      progress("a move the server listed is unreadable (" + m.status().message() + "): skipped");
      continue;
    }
    if (m->from_node != options.node || m->state != api::PodMoveState::kRequested) continue;
    const std::string id = std::to_string(m->id);
    const std::string pod = m->ns + "/" + m->name;
    StatusOr<Json> took = server.Post("/v1/pod-moves/" + id + "/take", {{api::key::kMover, mover}});
    if (!took.ok()) {
      progress("move " + id + " of pod " + pod + ": " + took.status().message() + " (skipped)");
      continue;
    }
    ++taken;
    progress("move " + id + ": pod " + pod + " to " + Target(*m) + ", asked by " + m->asked_by +
             ", taken by " + mover);
    Event(kube, m->ns, m->name, "Normal", "Moving",
          "Paladin moves this pod to " + Target(*m) + " (move " + id +
              ", asked through Paladin's server by " + m->asked_by + ")",
          progress);
    const api::PodMoveOutcome outcome = CarryOut(kube, *m, options, progress);
    if (outcome.ok) {
      Event(kube, m->ns, outcome.new_name, "Normal", "Moved",
            "restored from pod " + pod + " with its process state (move " + id + ", asked by " +
                m->asked_by + "): " + outcome.message,
            progress);
    } else {
      Event(kube, m->ns, m->name, "Warning", "MoveFailed",
            "move " + id + " asked by " + m->asked_by + ": " + outcome.message, progress);
    }
    progress("move " + id + ": " + (outcome.ok ? "done, " : "failed, ") + outcome.message);
    api::PodMoveOutcome said = outcome;
    said.message = ForTheServer(said.message);
    // The ledger must hear how it ended: a few tries, the server may be restarting.
    Status told = Status::Ok();
    for (int attempt = 0; attempt < 5; ++attempt) {
      if (attempt > 0) sleep(1);
      told = server.Post("/v1/pod-moves/" + id + "/finish", api::ToJson(said)).status();
      if (told.ok() || told.code() != StatusCode::kUnavailable) break;
    }
    if (!told.ok()) progress("move " + id + ": the server did not take its end: " + told.message());
  }
  return taken;
}

}  // namespace paladin::k8s
