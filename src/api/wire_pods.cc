// The Kubernetes pods' part of the wire (include/paladin/api/wire.h): the scheduler's report of
// a cluster's pods, and the moves asked through Paladin's server, with their JSON.
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "paladin/api/wire.h"
#include "wire_fields.h"

namespace paladin::api {

using Json = nlohmann::json;
using wire_fields::Bool;
using wire_fields::Int;
using wire_fields::kMaxCount;
using wire_fields::List;
using wire_fields::Required;
using wire_fields::Seconds;
using wire_fields::SmallInt;
using wire_fields::Str;
using wire_fields::Where;
using wire_fields::Wrong;

namespace {

// A Kubernetes object name: a DNS subdomain (lower-case letters, digits, '-' and '.'), 1 to 253
// characters.
bool KubeName(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) return false;
  }
  return true;
}

// Printable text of at most `max` bytes (a phase, a reason): no control characters.
bool Printable(const std::string& s, size_t max) {
  if (s.size() > max) return false;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

}  // namespace

nlohmann::json ToJson(const PodList& list) {
  Json pods = Json::array();
  for (const PodReport& p : list.pods) {
    pods.push_back({{key::kNamespace, p.ns},
                    {key::kName, p.name},
                    {key::kTeam, p.team},
                    {key::kPhase, p.phase},
                    {key::kNode, p.node},
                    {key::kGpu, p.gpu},
                    {key::kGpuMemBytes, p.gpu_mem_bytes},
                    {key::kUsedBytes, p.used_bytes >= 0 ? Json(p.used_bytes) : Json(nullptr)},
                    {key::kReason, p.reason},
                    {key::kPlacement, p.placement},
                    {key::kCommand, p.command}});
  }
  return {{key::kCluster, list.cluster}, {key::kPods, pods}};
}

StatusOr<PodList> DecodePodList(const nlohmann::json& body) {
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  PodList list;
  PALADIN_RETURN_IF_ERROR(Str(body, key::kCluster, "", &list.cluster));
  if (!KubeName(list.cluster))
    return Wrong("", key::kCluster, "expected a name ([a-z0-9.-], 1-253)");
  StatusOr<const Json*> pods = List(body, key::kPods);
  if (!pods.ok()) return pods.status();
  if (*pods != nullptr && (*pods)->size() > kMaxPods) {
    return InvalidArgument("pods: more than " + std::to_string(kMaxPods));
  }
  for (size_t i = 0; *pods != nullptr && i < (*pods)->size(); ++i) {
    const Json& o = (**pods)[i];
    const std::string where = Where(key::kPods, i);
    if (!o.is_object()) return InvalidArgument(where + "expected an object");
    PodReport p;
    PALADIN_RETURN_IF_ERROR(Str(o, key::kNamespace, where, &p.ns));
    if (!KubeName(p.ns) || p.ns.size() > 63) {
      return Wrong(where, key::kNamespace, "expected a Kubernetes namespace name");
    }
    PALADIN_RETURN_IF_ERROR(Str(o, key::kName, where, &p.name));
    if (!KubeName(p.name)) return Wrong(where, key::kName, "expected a Kubernetes pod name");
    PALADIN_RETURN_IF_ERROR(Str(o, key::kTeam, where, &p.team));
    if (p.team.empty() || !Printable(p.team, 63)) {
      return Wrong(where, key::kTeam, "expected a team name");  // the server checks it as one
    }
    PALADIN_RETURN_IF_ERROR(Str(o, key::kPhase, where, &p.phase));
    if (p.phase.empty() || !Printable(p.phase, 32)) {
      return Wrong(where, key::kPhase, "expected a pod phase (printable, up to 32 bytes)");
    }
    PALADIN_RETURN_IF_ERROR(Str(o, key::kNode, where, &p.node));
    if (!p.node.empty() && !KubeName(p.node))
      return Wrong(where, key::kNode, "expected a node name");
    int64_t gpu = -1;
    PALADIN_RETURN_IF_ERROR(Int(o, key::kGpu, -1, 1023, where, &gpu));
    p.gpu = static_cast<int>(gpu);
    PALADIN_RETURN_IF_ERROR(Int(o, key::kGpuMemBytes, 0, kMaxCount, where, &p.gpu_mem_bytes));
    PALADIN_RETURN_IF_ERROR(Int(o, key::kUsedBytes, 0, kMaxCount, where, &p.used_bytes));
    PALADIN_RETURN_IF_ERROR(Str(o, key::kReason, where, &p.reason));
    if (!Printable(p.reason, 1024)) {
      return Wrong(where, key::kReason, "expected printable text of up to 1024 bytes");
    }
    PALADIN_RETURN_IF_ERROR(Str(o, key::kPlacement, where, &p.placement));
    if (!Printable(p.placement, 1024)) {
      return Wrong(where, key::kPlacement, "expected printable text of up to 1024 bytes");
    }
    PALADIN_RETURN_IF_ERROR(Str(o, key::kCommand, where, &p.command));
    if (!Printable(p.command, 255) || p.command.find_first_of(" /") != std::string::npos) {
      return Wrong(where, key::kCommand, "expected a command's or image's name (no blanks or '/')");
    }
    list.pods.push_back(std::move(p));
  }
  return list;
}

bool PodPhaseEnded(std::string_view phase) { return phase == "Succeeded" || phase == "Failed"; }

bool PodPhaseRunning(std::string_view phase) { return phase == "Running"; }

constexpr std::pair<PodMoveState, const char*> kPodMoveStates[] = {
    {PodMoveState::kRequested, "requested"},
    {PodMoveState::kTaken, "taken"},
    {PodMoveState::kDone, "done"},
    {PodMoveState::kFailed, "failed"},
};

const char* PodMoveStateName(PodMoveState state) {
  for (const auto& [s, name] : kPodMoveStates) {
    if (s == state) return name;
  }
  return "unknown";
}

std::optional<PodMoveState> PodMoveStateNamed(const std::string& name) {
  for (const auto& [s, n] : kPodMoveStates) {
    if (name == n) return s;
  }
  return std::nullopt;
}

nlohmann::json ToJson(const PodMoveAsk& ask) {
  return {{key::kNode, ask.node.empty() ? Json(nullptr) : Json(ask.node)},
          {key::kGpu, ask.gpu >= 0 ? Json(ask.gpu) : Json(nullptr)}};
}

StatusOr<PodMoveAsk> DecodePodMoveAsk(const nlohmann::json& body) {
  if (body.is_null()) return PodMoveAsk{};
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  PodMoveAsk ask;
  PALADIN_RETURN_IF_ERROR(Str(body, key::kNode, "", &ask.node));
  if (!ask.node.empty() && !KubeName(ask.node)) {
    return Wrong("", key::kNode, "expected a Kubernetes node name");
  }
  PALADIN_RETURN_IF_ERROR(SmallInt(body, key::kGpu, -1, 1023, "", &ask.gpu));
  return ask;
}

nlohmann::json ToJson(const PodMoveOutcome& o) {
  return {{key::kOk, o.ok},
          {key::kMessage, o.message},
          {key::kNewName, o.new_name.empty() ? Json(nullptr) : Json(o.new_name)},
          {key::kToNode, o.node.empty() ? Json(nullptr) : Json(o.node)},
          {key::kToGpu, o.gpu >= 0 ? Json(o.gpu) : Json(nullptr)},
          {key::kPausedMs, o.paused_ms >= 0 ? Json(o.paused_ms) : Json(nullptr)}};
}

namespace {

// The outcome's fields of `o` (a finish's body, or a move's view), `where` naming its place.
Status DecodeOutcomeFields(const Json& o, const std::string& where, PodMoveOutcome* out) {
  PALADIN_RETURN_IF_ERROR(Bool(o, key::kOk, where, &out->ok));
  PALADIN_RETURN_IF_ERROR(Str(o, key::kMessage, where, &out->message));
  if (!Printable(out->message, 2048)) {
    return Wrong(where, key::kMessage, "expected printable text of up to 2048 bytes");
  }
  PALADIN_RETURN_IF_ERROR(Str(o, key::kNewName, where, &out->new_name));
  if (!out->new_name.empty() && !KubeName(out->new_name)) {
    return Wrong(where, key::kNewName, "expected a Kubernetes pod name");
  }
  PALADIN_RETURN_IF_ERROR(Str(o, key::kToNode, where, &out->node));
  if (!out->node.empty() && !KubeName(out->node)) {
    return Wrong(where, key::kToNode, "expected a Kubernetes node name");
  }
  PALADIN_RETURN_IF_ERROR(SmallInt(o, key::kToGpu, -1, 1023, where, &out->gpu));
  return Int(o, key::kPausedMs, -1, kMaxCount, where, &out->paused_ms);
}

}  // namespace

StatusOr<PodMoveOutcome> DecodePodMoveOutcome(const nlohmann::json& body) {
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  PALADIN_RETURN_IF_ERROR(Required(body, key::kOk, ""));
  PodMoveOutcome out;
  PALADIN_RETURN_IF_ERROR(DecodeOutcomeFields(body, "", &out));
  return out;
}

nlohmann::json ToJson(const PodMove& m) {
  Json v = ToJson(m.outcome);
  const auto time = [](double t) { return t > 0 ? Json(t) : Json(nullptr); };
  v.update({{key::kId, m.id},
            {key::kCluster, m.cluster},
            {key::kNamespace, m.ns},
            {key::kName, m.name},
            {key::kTeam, m.team},
            {key::kFromNode, m.from_node},
            {key::kFromGpu, m.from_gpu >= 0 ? Json(m.from_gpu) : Json(nullptr)},
            {key::kTo, ToJson(m.to)},
            {key::kState, PodMoveStateName(m.state)},
            {key::kAskedBy, m.asked_by},
            {key::kMover, m.mover.empty() ? Json(nullptr) : Json(m.mover)},
            {key::kRequestedAt, time(m.requested_at)},
            {key::kTakenAt, time(m.taken_at)},
            {key::kEndedAt, time(m.ended_at)},
            {key::kDrain, m.drain}});
  if (!PodMoveEnded(m.state)) v[key::kOk] = nullptr;
  return v;
}

StatusOr<PodMove> DecodePodMove(const nlohmann::json& body) {
  if (!body.is_object()) return InvalidArgument("move: expected a JSON object");
  PodMove m;
  PALADIN_RETURN_IF_ERROR(Required(body, key::kId, ""));
  PALADIN_RETURN_IF_ERROR(Int(body, key::kId, 1, kMaxCount, "", &m.id));
  PALADIN_RETURN_IF_ERROR(Str(body, key::kCluster, "", &m.cluster));
  PALADIN_RETURN_IF_ERROR(Str(body, key::kNamespace, "", &m.ns));
  if (!KubeName(m.ns) || m.ns.size() > 63) {
    return Wrong("", key::kNamespace, "expected a Kubernetes namespace name");
  }
  PALADIN_RETURN_IF_ERROR(Str(body, key::kName, "", &m.name));
  if (!KubeName(m.name)) return Wrong("", key::kName, "expected a Kubernetes pod name");
  PALADIN_RETURN_IF_ERROR(Str(body, key::kTeam, "", &m.team));
  PALADIN_RETURN_IF_ERROR(Str(body, key::kFromNode, "", &m.from_node));
  if (!KubeName(m.from_node)) return Wrong("", key::kFromNode, "expected a Kubernetes node name");
  PALADIN_RETURN_IF_ERROR(SmallInt(body, key::kFromGpu, -1, 1023, "", &m.from_gpu));
  if (body.contains(key::kTo) && !body[key::kTo].is_null()) {
    StatusOr<PodMoveAsk> to = DecodePodMoveAsk(body[key::kTo]);
    if (!to.ok()) return InvalidArgument(std::string(key::kTo) + ": " + to.status().message());
    m.to = *to;
  }
  std::string state;
  PALADIN_RETURN_IF_ERROR(Str(body, key::kState, "", &state));
  const std::optional<PodMoveState> named = PodMoveStateNamed(state);
  if (!named) return Wrong("", key::kState, "expected requested, taken, done or failed");
  m.state = *named;
  PALADIN_RETURN_IF_ERROR(Str(body, key::kAskedBy, "", &m.asked_by));
  PALADIN_RETURN_IF_ERROR(Str(body, key::kMover, "", &m.mover));
  PALADIN_RETURN_IF_ERROR(Bool(body, key::kDrain, "", &m.drain));
  if (PodMoveEnded(m.state)) PALADIN_RETURN_IF_ERROR(DecodeOutcomeFields(body, "", &m.outcome));
  for (const auto& [name, out] :
       {std::pair{key::kRequestedAt, &m.requested_at}, std::pair{key::kTakenAt, &m.taken_at},
        std::pair{key::kEndedAt, &m.ended_at}}) {
    StatusOr<std::optional<double>> at = Seconds(body, name);
    if (!at.ok()) return at.status();
    if (!*at) continue;
    if (!std::isfinite(**at) || **at < 0) {
      return Wrong("", name, "expected seconds since the epoch");
    }
    *out = **at;
  }
  return m;
}

nlohmann::json ToJson(const PodDrainAsk& ask) {
  return {{key::kNode, ask.node}, {key::kTo, ask.to}};
}

StatusOr<PodDrainAsk> DecodePodDrainAsk(const nlohmann::json& body) {
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  PodDrainAsk ask;
  for (const auto& [name, out] : {std::pair{key::kNode, &ask.node}, std::pair{key::kTo, &ask.to}}) {
    PALADIN_RETURN_IF_ERROR(Required(body, name, ""));
    PALADIN_RETURN_IF_ERROR(Str(body, name, "", out));
    if (!KubeName(*out)) return Wrong("", name, "expected a Kubernetes node name");
  }
  if (ask.to == ask.node) {
    return Wrong("", key::kTo, "expected another node than the one drained");
  }
  return ask;
}

}  // namespace paladin::api
