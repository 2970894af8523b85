// The heartbeat's and the commands' types and their JSON (include/paladin/api/wire.h).
#include "paladin/api/wire.h"

#include <algorithm>
#include <cmath>

#include "paladin/core/fleet.h"
#include "wire_fields.h"

namespace paladin::api {

using Json = nlohmann::json;

namespace wire_fields {

// "jobs[3]: used_bytes: expected an integer from 0 to ..." and the like.
Status Wrong(const std::string& where, const std::string& key, const std::string& what) {
  return InvalidArgument(where + key + ": " + what);
}

Status Int(const Json& o, const char* key, int64_t lo, int64_t hi, const std::string& where,
           int64_t* out) {
  if (!o.contains(key) || o[key].is_null()) return Status::Ok();
  const Json& v = o[key];
  if (!v.is_number_integer()) return Wrong(where, key, "expected an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return Wrong(where, key, "too large");
  }
  const int64_t n = v.get<int64_t>();
  if (n < lo || n > hi) {
    return Wrong(where, key,
                 "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  }
  *out = n;
  return Status::Ok();
}

Status Str(const Json& o, const char* key, const std::string& where, std::string* out) {
  if (!o.contains(key) || o[key].is_null()) return Status::Ok();
  if (!o[key].is_string()) return Wrong(where, key, "expected a string");
  *out = o[key].get<std::string>();
  return Status::Ok();
}

Status Bool(const Json& o, const char* key, const std::string& where, bool* out) {
  if (!o.contains(key) || o[key].is_null()) return Status::Ok();
  if (!o[key].is_boolean()) return Wrong(where, key, "expected true or false");
  *out = o[key].get<bool>();
  return Status::Ok();
}

// The list `key` of `body`: null or absent is empty.
StatusOr<const Json*> List(const Json& body, const char* key) {
  if (!body.contains(key) || body[key].is_null()) return static_cast<const Json*>(nullptr);
  if (!body[key].is_array()) return InvalidArgument(std::string(key) + ": expected a list");
  return &body[key];
}

std::string Where(const char* list, size_t i) {
  return std::string(list) + "[" + std::to_string(i) + "]: ";
}

// A field that must be there: absent or null is an error naming it.
Status Required(const Json& o, const char* key, const std::string& where) {
  if (!o.contains(key) || o[key].is_null()) return Wrong(where, key, "missing");
  return Status::Ok();
}

Status SmallInt(const Json& o, const char* key, int lo, int hi, const std::string& where,
                int* out) {
  int64_t n = *out;
  PALADIN_RETURN_IF_ERROR(Int(o, key, lo, hi, where, &n));
  *out = static_cast<int>(n);
  return Status::Ok();
}

StatusOr<std::optional<double>> Seconds(const Json& o, const char* key) {
  if (!o.contains(key) || o[key].is_null()) return std::optional<double>();
  if (!o[key].is_number()) return Wrong("", key, "expected a number");
  return std::optional<double>(o[key].get<double>());
}

}  // namespace wire_fields

namespace {

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

StatusOr<JobReport> DecodeJob(const Json& r, const std::string& where) {
  if (!r.is_object()) return InvalidArgument(where + "expected an object");
  JobReport j;
  if (!r.contains(key::kId) || !r[key::kId].is_string())
    return Wrong(where, key::kId, "expected a string");
  j.id = r[key::kId].get<std::string>();
  PALADIN_RETURN_IF_ERROR(Int(r, key::kEpoch, 0, kMaxCount, where, &j.epoch));
  if (r.contains(key::kState) && !r[key::kState].is_null()) {
    const std::optional<CopyState> state = r[key::kState].is_string()
                                               ? CopyStateNamed(r[key::kState].get<std::string>())
                                               : std::nullopt;
    if (!state) return Wrong(where, key::kState, "expected running, stopped, frozen or exited");
    j.state = *state;
  }
  PALADIN_RETURN_IF_ERROR(Int(r, key::kPid, -1, kMaxCount, where, &j.pid));
  if (r.contains(key::kUsedBytes) && !r[key::kUsedBytes].is_null()) {
    int64_t used = 0;
    PALADIN_RETURN_IF_ERROR(Int(r, key::kUsedBytes, 0, kMaxCount, where, &used));
    j.used_bytes = used;
  }
  PALADIN_RETURN_IF_ERROR(Int(r, key::kQuotaBytes, 0, kMaxCount, where, &j.quota_bytes));
  PALADIN_RETURN_IF_ERROR(Int(r, key::kQuotaGrows, 0, kMaxCount, where, &j.quota_grows));
  PALADIN_RETURN_IF_ERROR(Int(r, key::kRefusals, 0, kMaxCount, where, &j.refusals));
  if (r.contains(key::kExitCode) && !r[key::kExitCode].is_null()) {
    int64_t code = 0;
    PALADIN_RETURN_IF_ERROR(Int(r, key::kExitCode, -1000, 1000, where, &code));
    j.exit_code = static_cast<int>(code);
  }
  PALADIN_RETURN_IF_ERROR(Str(r, key::kStdout, where, &j.stdout_text));
  PALADIN_RETURN_IF_ERROR(Str(r, key::kStderr, where, &j.stderr_text));
  PALADIN_RETURN_IF_ERROR(Int(r, key::kStdoutFrom, -1, kMaxCount, where, &j.stdout_from));
  PALADIN_RETURN_IF_ERROR(Int(r, key::kStdoutTo, -1, kMaxCount, where, &j.stdout_to));
  PALADIN_RETURN_IF_ERROR(Int(r, key::kStderrFrom, -1, kMaxCount, where, &j.stderr_from));
  PALADIN_RETURN_IF_ERROR(Int(r, key::kStderrTo, -1, kMaxCount, where, &j.stderr_to));
  return j;
}

constexpr std::pair<CommandKind, const char*> kCommandKinds[] = {
    {CommandKind::kStart, "start"},           {CommandKind::kRestore, "restore"},
    {CommandKind::kCheckpoint, "checkpoint"}, {CommandKind::kKill, "kill"},
    {CommandKind::kResize, "resize"},         {CommandKind::kFault, "fault"},
    {CommandKind::kMigrateIn, "migrate_in"},  {CommandKind::kMigrateOut, "migrate_out"},
    {CommandKind::kFreeze, "freeze"},         {CommandKind::kThaw, "thaw"},
};

bool Launches(CommandKind k) {
  return k == CommandKind::kStart || k == CommandKind::kRestore || k == CommandKind::kMigrateIn;
}

Status OptionalInt(const Json& o, const char* key, int64_t lo, int64_t hi, const std::string& where,
                   std::optional<int64_t>* out) {
  if (!o.contains(key) || o[key].is_null()) return Status::Ok();
  int64_t n = 0;
  PALADIN_RETURN_IF_ERROR(Int(o, key, lo, hi, where, &n));
  *out = n;
  return Status::Ok();
}

Status Strings(const Json& o, const char* key, const std::string& where,
               std::vector<std::string>* out) {
  if (!o.contains(key) || o[key].is_null()) return Status::Ok();
  const Json& v = o[key];
  if (!v.is_array()) return Wrong(where, key, "expected a list of strings");
  for (const Json& e : v) {
    if (!e.is_string()) return Wrong(where, key, "expected a list of strings");
    out->push_back(e.get<std::string>());
  }
  return Status::Ok();
}

// An object of strings: the env, or the GPU map.
Status StringMap(const Json& o, const char* key, const std::string& where,
                 std::vector<std::pair<std::string, std::string>>* out) {
  if (!o.contains(key) || o[key].is_null()) return Status::Ok();
  const Json& v = o[key];
  if (!v.is_object()) return Wrong(where, key, "expected an object");
  for (const auto& [k, value] : v.items()) {
    if (!value.is_string()) return Wrong(where, key, k.substr(0, 64) + ": expected a string");
    out->emplace_back(k, value.get<std::string>());
  }
  return Status::Ok();
}

Json MapJson(const std::vector<std::pair<std::string, std::string>>& pairs) {
  Json out = Json::object();
  for (const auto& [k, v] : pairs) out[k] = v;
  return out;
}

constexpr std::pair<MoveMode, const char*> kMoveModes[] = {
    {MoveMode::kPreCopy, "pre-copy"},
    {MoveMode::kPostCopy, "post-copy"},
};

// migrate_in, migrate_out: "move_mode", absent for pre-copy (a server that predates post-copy).
Status DecodeMoveMode(const Json& o, const std::string& where, MoveMode* out) {
  std::string name = "pre-copy";
  PALADIN_RETURN_IF_ERROR(Str(o, key::kMoveMode, where, &name));
  if (name.empty()) name = "pre-copy";
  const std::optional<MoveMode> mode = MoveModeNamed(name);
  if (!mode) {
    return Wrong(where, key::kMoveMode,
                 "expected pre-copy or post-copy, not '" + name.substr(0, 64) + "'");
  }
  *out = *mode;
  return Status::Ok();
}

// A launch's "rank_net": absent or null is none.
Status DecodeRankNet(const Json& o, const std::string& where, std::optional<RankNet>* out) {
  if (!o.contains(key::kRankNet) || o[key::kRankNet].is_null()) return Status::Ok();
  const Json& v = o[key::kRankNet];
  if (!v.is_object()) return Wrong(where, key::kRankNet, "expected an object");
  RankNet net;
  const std::string inner = where + "rank_net: ";
  PALADIN_RETURN_IF_ERROR(Required(v, key::kAddress, inner));
  PALADIN_RETURN_IF_ERROR(Str(v, key::kAddress, inner, &net.address));
  if (!IsDottedIpv4(net.address))
    return Wrong(inner, key::kAddress, "expected a dotted IPv4 address");
  PALADIN_RETURN_IF_ERROR(Str(v, key::kInterface, inner, &net.interface));
  const bool name_ok =
      !net.interface.empty() && net.interface.size() <= 15 &&
      std::all_of(net.interface.begin(), net.interface.end(), [](char ch) {
        return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_';
      });
  if (!name_ok) {
    return Wrong(inner, key::kInterface, "expected 1-15 characters of a-z, 0-9, '-', '_'");
  }
  *out = std::move(net);
  return Status::Ok();
}

}  // namespace

bool IsDottedIpv4(const std::string& text) {
  int parts = 0;
  size_t i = 0;
  while (parts < 4) {
    size_t digits = 0;
    int v = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && digits < 4) {
      v = v * 10 + (text[i] - '0');
      ++i;
      ++digits;
    }
    if (digits == 0 || digits > 3 || v > 255 || (digits > 1 && text[i - digits] == '0')) {
      return false;
    }
    ++parts;
    if (parts < 4) {
      if (i >= text.size() || text[i] != '.') return false;
      ++i;
    }
  }
  return i == text.size();
}

Json ToJson(const std::vector<RankRoute>& routes) {
  Json out = Json::array();
  for (const RankRoute& r : routes) out.push_back({{key::kAddress, r.address}, {key::kVia, r.via}});
  return out;
}

StatusOr<std::vector<RankRoute>> DecodeRankRoutes(const Json& list) {
  std::vector<RankRoute> out;
  if (list.is_null()) return out;
  if (!list.is_array()) return InvalidArgument("rank_routes: expected a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = Where(key::kRankRoutes, i);
    if (!list[i].is_object()) return InvalidArgument(where + "expected an object");
    RankRoute r;
    for (auto [key, field] : {std::pair{key::kAddress, &r.address}, std::pair{key::kVia, &r.via}}) {
      PALADIN_RETURN_IF_ERROR(Required(list[i], key, where));
      PALADIN_RETURN_IF_ERROR(Str(list[i], key, where, field));
      if (!IsDottedIpv4(*field)) return Wrong(where, key, "expected a dotted IPv4 address");
    }
    out.push_back(std::move(r));
  }
  return out;
}

const char* MoveModeName(MoveMode mode) {
  for (const auto& [m, name] : kMoveModes) {
    if (m == mode) return name;
  }
  return "pre-copy";
}

std::optional<MoveMode> MoveModeNamed(const std::string& name) {
  for (const auto& [m, n] : kMoveModes) {
    if (name == n) return m;
  }
  return std::nullopt;
}

constexpr std::pair<CopyState, const char*> kCopyStates[] = {
    {CopyState::kRunning, "running"},
    {CopyState::kStopped, "stopped"},
    {CopyState::kFrozen, "frozen"},
    {CopyState::kExited, "exited"},
};

const char* CopyStateName(CopyState state) {
  for (const auto& [s, name] : kCopyStates) {
    if (s == state) return name;
  }
  return "unknown";
}

std::optional<CopyState> CopyStateNamed(const std::string& name) {
  for (const auto& [s, n] : kCopyStates) {
    if (name == n) return s;
  }
  return std::nullopt;
}

const char* CommandKindName(CommandKind kind) {
  for (const auto& [k, name] : kCommandKinds) {
    if (k == kind) return name;
  }
  return "unknown";
}

std::optional<CommandKind> CommandKindNamed(const std::string& name) {
  for (const auto& [k, n] : kCommandKinds) {
    if (name == n) return k;
  }
  return std::nullopt;
}

Command KillCommand(std::optional<int64_t> epoch) {
  Command c;
  c.kind = CommandKind::kKill;
  c.epoch = epoch;
  return c;
}

Command CheckpointCommand(const std::string& mode, const std::string& dir) {
  Command c;
  c.kind = CommandKind::kCheckpoint;
  c.mode = mode;
  c.dir = dir;
  return c;
}

Command FaultCommand(int gpu_index, const std::string& fault_kind, int64_t code) {
  Command c;
  c.kind = CommandKind::kFault;
  c.gpu_index = gpu_index;
  c.fault_kind = fault_kind;
  c.code = code;
  return c;
}

Json ToJson(const Command& c) {
  Json out = {{key::kId, c.id}, {key::kKind, CommandKindName(c.kind)}};
  if (!c.job.empty()) out[key::kJob] = c.job;
  if (c.epoch) out[key::kEpoch] = *c.epoch;
  if (Launches(c.kind)) {
    out[key::kName] = c.name;
    out[key::kCommand] = c.command;
    out[key::kEnv] = c.env;
    out[key::kGpuIndex] = c.gpu_index;
    out[key::kGpuUuid] = c.gpu_uuid;
    if (c.kind != CommandKind::kMigrateIn) out[key::kGpuIndices] = c.gpu_indices;
    if (c.compute_share != 0) out[key::kComputeShare] = c.compute_share;
    if (!c.gpu_map.empty()) out[key::kGpuMap] = MapJson(c.gpu_map);
    if (c.rank_net) {
      out[key::kRankNet] = {{key::kAddress, c.rank_net->address},
                            {key::kInterface, c.rank_net->interface}};
    }
  }
  if (Launches(c.kind) || c.kind == CommandKind::kResize) {
    if (c.quota_bytes) out[key::kQuotaBytes] = *c.quota_bytes;
    if (c.ceiling_bytes) out[key::kCeilingBytes] = *c.ceiling_bytes;
  }
  switch (c.kind) {
    case CommandKind::kRestore:
      out[key::kImage] = c.image;
      break;
    case CommandKind::kCheckpoint:
      out[key::kMode] = c.mode;
      out[key::kDir] = c.dir;
      break;
    case CommandKind::kFault:
      out[key::kGpuIndex] = c.gpu_index;
      out[key::kFaultKind] = c.fault_kind;
      out[key::kCode] = c.code;
      break;
    case CommandKind::kMigrateIn:
      out[key::kMigration] = c.migration;
      out[key::kPort] = c.port;
      out[key::kToken] = c.token;
      out[key::kFrom] = c.from_node;
      out[key::kFromGpuUuid] = c.from_gpu_uuid;
      out[key::kAddress] = c.address;
      out[key::kMoveMode] = MoveModeName(c.move_mode);
      break;
    case CommandKind::kMigrateOut:
      out[key::kMigration] = c.migration;
      out[key::kToPort] = c.port;
      out[key::kToken] = c.token;
      out[key::kToAddress] = c.to_address;
      out[key::kTo] = c.to_node;
      out[key::kToGpu] = c.to_gpu;
      out[key::kToGpuUuid] = c.to_gpu_uuid;
      out[key::kMoveMode] = MoveModeName(c.move_mode);
      out[key::kStream] = c.stream;
      break;
    case CommandKind::kStart:
    case CommandKind::kKill:
    case CommandKind::kResize:
    case CommandKind::kFreeze:
    case CommandKind::kThaw:
      break;
  }
  return out;
}

int64_t CommandIdOf(const Json& body) {
  return body.is_object() && body.contains(key::kId) && body[key::kId].is_number_integer()
             ? body[key::kId].get<int64_t>()
             : 0;
}

StatusOr<Command> DecodeCommand(const Json& body) {
  if (!body.is_object()) return InvalidArgument("command: expected a JSON object");
  Command c;
  PALADIN_RETURN_IF_ERROR(Int(body, key::kId, 1, kMaxCount, "", &c.id));
  if (c.id == 0) return InvalidArgument("command: id: missing");
  std::string kind;
  PALADIN_RETURN_IF_ERROR(Str(body, key::kKind, "command " + std::to_string(c.id) + ": ", &kind));
  const std::optional<CommandKind> named = CommandKindNamed(kind);
  if (!named) {
    return InvalidArgument("command " + std::to_string(c.id) + ": unknown command kind '" +
                           kind.substr(0, 64) + "'");
  }
  c.kind = *named;
  const std::string where = "command " + std::to_string(c.id) + " (" + kind + "): ";
  PALADIN_RETURN_IF_ERROR(Str(body, key::kJob, where, &c.job));
  if (c.kind != CommandKind::kFault && c.job.empty()) return Wrong(where, key::kJob, "missing");
  PALADIN_RETURN_IF_ERROR(OptionalInt(body, key::kEpoch, 0, kMaxCount, where, &c.epoch));
  if (Launches(c.kind)) {
    PALADIN_RETURN_IF_ERROR(Str(body, key::kName, where, &c.name));
    PALADIN_RETURN_IF_ERROR(Strings(body, key::kCommand, where, &c.command));
    std::vector<std::pair<std::string, std::string>> env;
    PALADIN_RETURN_IF_ERROR(StringMap(body, key::kEnv, where, &env));
    c.env.insert(env.begin(), env.end());
    PALADIN_RETURN_IF_ERROR(SmallInt(body, key::kGpuIndex, -1, 1023, where, &c.gpu_index));
    PALADIN_RETURN_IF_ERROR(Str(body, key::kGpuUuid, where, &c.gpu_uuid));
    if (body.contains(key::kGpuIndices) && body[key::kGpuIndices].is_array()) {
      for (const Json& g : body[key::kGpuIndices]) {
        if (!g.is_number_integer() || g.get<int64_t>() < 0 || g.get<int64_t>() > 1023) {
          return Wrong(where, key::kGpuIndices, "expected a list of GPU indices");
        }
        c.gpu_indices.push_back(g.get<int>());
      }
    }
    PALADIN_RETURN_IF_ERROR(SmallInt(body, key::kComputeShare, 0, 100, where, &c.compute_share));
    PALADIN_RETURN_IF_ERROR(StringMap(body, key::kGpuMap, where, &c.gpu_map));
    PALADIN_RETURN_IF_ERROR(DecodeRankNet(body, where, &c.rank_net));
  }
  if (Launches(c.kind) || c.kind == CommandKind::kResize) {
    PALADIN_RETURN_IF_ERROR(
        OptionalInt(body, key::kQuotaBytes, 0, kMaxCount, where, &c.quota_bytes));
    PALADIN_RETURN_IF_ERROR(
        OptionalInt(body, key::kCeilingBytes, 0, kMaxCount, where, &c.ceiling_bytes));
  }
  switch (c.kind) {
    case CommandKind::kStart:
      PALADIN_RETURN_IF_ERROR(Required(body, key::kCommand, where));
      break;
    case CommandKind::kRestore:
      PALADIN_RETURN_IF_ERROR(Required(body, key::kImage, where));
      PALADIN_RETURN_IF_ERROR(Str(body, key::kImage, where, &c.image));
      break;
    case CommandKind::kCheckpoint:
      PALADIN_RETURN_IF_ERROR(Str(body, key::kMode, where, &c.mode));
      if (c.mode != "keep" && c.mode != "stop" && c.mode != "frozen") {
        return Wrong(where, key::kMode,
                     "expected keep, stop or frozen, not '" + c.mode.substr(0, 64) + "'");
      }
      PALADIN_RETURN_IF_ERROR(Required(body, key::kDir, where));
      PALADIN_RETURN_IF_ERROR(Str(body, key::kDir, where, &c.dir));
      break;
    case CommandKind::kFault:
      PALADIN_RETURN_IF_ERROR(Required(body, key::kGpuIndex, where));
      PALADIN_RETURN_IF_ERROR(SmallInt(body, key::kGpuIndex, 0, 1023, where, &c.gpu_index));
      PALADIN_RETURN_IF_ERROR(Str(body, key::kFaultKind, where, &c.fault_kind));
      if (c.fault_kind != "xid" && c.fault_kind != "ecc" && c.fault_kind != "ecc-corrected") {
        return Wrong(
            where, key::kFaultKind,
            "expected xid, ecc or ecc-corrected, not '" + c.fault_kind.substr(0, 64) + "'");
      }
      PALADIN_RETURN_IF_ERROR(Int(body, key::kCode, 0, kMaxCount, where, &c.code));
      break;
    case CommandKind::kMigrateIn:
      PALADIN_RETURN_IF_ERROR(Required(body, key::kPort, where));
      PALADIN_RETURN_IF_ERROR(SmallInt(body, key::kPort, 1, 65534, where, &c.port));
      PALADIN_RETURN_IF_ERROR(Required(body, key::kToken, where));
      PALADIN_RETURN_IF_ERROR(Str(body, key::kToken, where, &c.token));
      PALADIN_RETURN_IF_ERROR(Int(body, key::kMigration, 0, kMaxCount, where, &c.migration));
      PALADIN_RETURN_IF_ERROR(Str(body, key::kFrom, where, &c.from_node));
      PALADIN_RETURN_IF_ERROR(Str(body, key::kFromGpuUuid, where, &c.from_gpu_uuid));
      PALADIN_RETURN_IF_ERROR(Str(body, key::kAddress, where, &c.address));
      PALADIN_RETURN_IF_ERROR(DecodeMoveMode(body, where, &c.move_mode));
      break;
    case CommandKind::kMigrateOut:
      for (const char* key : {key::kToAddress, key::kToPort, key::kToken, key::kMigration}) {
        PALADIN_RETURN_IF_ERROR(Required(body, key, where));
      }
      PALADIN_RETURN_IF_ERROR(Str(body, key::kToAddress, where, &c.to_address));
      PALADIN_RETURN_IF_ERROR(SmallInt(body, key::kToPort, 1, 65534, where, &c.port));
      PALADIN_RETURN_IF_ERROR(Str(body, key::kToken, where, &c.token));
      PALADIN_RETURN_IF_ERROR(Int(body, key::kMigration, 0, kMaxCount, where, &c.migration));
      PALADIN_RETURN_IF_ERROR(Str(body, key::kTo, where, &c.to_node));
      PALADIN_RETURN_IF_ERROR(SmallInt(body, key::kToGpu, 0, 1023, where, &c.to_gpu));
      PALADIN_RETURN_IF_ERROR(Str(body, key::kToGpuUuid, where, &c.to_gpu_uuid));
      PALADIN_RETURN_IF_ERROR(DecodeMoveMode(body, where, &c.move_mode));
      PALADIN_RETURN_IF_ERROR(Bool(body, key::kStream, where, &c.stream));
      break;
    case CommandKind::kKill:
    case CommandKind::kResize:
    case CommandKind::kFreeze:
    case CommandKind::kThaw:
      break;
  }
  return c;
}

Json ToJson(const JobReport& r) {
  return Json{{key::kId, r.id},
              {key::kEpoch, r.epoch},
              {key::kState, CopyStateName(r.state)},
              {key::kPid, r.pid},
              {key::kUsedBytes, r.used_bytes ? Json(*r.used_bytes) : Json(nullptr)},
              {key::kQuotaBytes, r.quota_bytes},
              {key::kQuotaGrows, r.quota_grows},
              {key::kRefusals, r.refusals},
              {key::kExitCode, r.exit_code ? Json(*r.exit_code) : Json(nullptr)},
              {key::kStdout, r.stdout_text},
              {key::kStderr, r.stderr_text},
              {key::kStdoutFrom, r.stdout_from},
              {key::kStdoutTo, r.stdout_to},
              {key::kStderrFrom, r.stderr_from},
              {key::kStderrTo, r.stderr_to}};
}

Json ToJson(const GpuReport& g) {
  Json out = {{key::kIndex, g.index}, {key::kUsedBytes, g.used_bytes}, {key::kHealthy, g.healthy}};
  if (!g.fault.empty()) out[key::kFault] = g.fault;
  return out;
}

Json ToJson(const CommandResult& c) {
  return Json{{key::kCommand, c.command},
              {key::kOk, c.ok},
              {key::kError, c.error},
              {key::kDetail, c.detail}};
}

StatusOr<std::vector<JobReport>> DecodeJobReports(const Json& list) {
  std::vector<JobReport> out;
  if (list.is_null()) return out;
  if (!list.is_array()) return InvalidArgument("jobs: expected a list");
  for (size_t i = 0; i < list.size(); ++i) {
    StatusOr<JobReport> r = DecodeJob(list[i], Where(key::kJobs, i));
    if (!r.ok()) return r.status();
    out.push_back(std::move(*r));
  }
  return out;
}

StatusOr<Heartbeat> DecodeHeartbeat(const Json& body) {
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  Heartbeat beat;
  StatusOr<const Json*> gpus = List(body, key::kGpus);
  if (!gpus.ok()) return gpus.status();
  for (size_t i = 0; *gpus != nullptr && i < (*gpus)->size(); ++i) {
    const Json& g = (**gpus)[i];
    const std::string where = Where(key::kGpus, i);
    if (!g.is_object()) return InvalidArgument(where + "expected an object");
    GpuReport r;
    int64_t index = 0;
    PALADIN_RETURN_IF_ERROR(Int(g, key::kIndex, 0, 1023, where, &index));
    r.index = static_cast<int>(index);
    PALADIN_RETURN_IF_ERROR(Int(g, key::kUsedBytes, 0, kMaxCount, where, &r.used_bytes));
    PALADIN_RETURN_IF_ERROR(Bool(g, key::kHealthy, where, &r.healthy));
    PALADIN_RETURN_IF_ERROR(Str(g, key::kFault, where, &r.fault));
    beat.gpus.push_back(std::move(r));
  }
  if (body.contains(key::kJobs)) {
    StatusOr<std::vector<JobReport>> jobs = DecodeJobReports(body[key::kJobs]);
    if (!jobs.ok()) return jobs.status();
    beat.jobs = std::move(*jobs);
  }
  StatusOr<const Json*> results = List(body, key::kResults);
  if (!results.ok()) return results.status();
  for (size_t i = 0; *results != nullptr && i < (*results)->size(); ++i) {
    const Json& r = (**results)[i];
    const std::string where = Where(key::kResults, i);
    if (!r.is_object()) return InvalidArgument(where + "expected an object");
    CommandResult c;
    PALADIN_RETURN_IF_ERROR(Int(r, key::kCommand, 0, kMaxCount, where, &c.command));
    PALADIN_RETURN_IF_ERROR(Bool(r, key::kOk, where, &c.ok));
    PALADIN_RETURN_IF_ERROR(Str(r, key::kError, where, &c.error));
    if (r.contains(key::kDetail) && !r[key::kDetail].is_null()) {
      if (!r[key::kDetail].is_object()) return Wrong(where, key::kDetail, "expected an object");
      c.detail = r[key::kDetail];
    }
    beat.results.push_back(std::move(c));
  }
  return beat;
}

Json ToJson(const Heartbeat& beat) {
  Json gpus = Json::array();
  for (const GpuReport& g : beat.gpus) gpus.push_back(ToJson(g));
  Json jobs = Json::array();
  for (const JobReport& r : beat.jobs) jobs.push_back(ToJson(r));
  Json results = Json::array();
  for (const CommandResult& c : beat.results) results.push_back(ToJson(c));
  return Json{{key::kGpus, std::move(gpus)},
              {key::kJobs, std::move(jobs)},
              {key::kResults, std::move(results)}};
}

Json ToJson(const Registration& r) {
  Json gpus = Json::array();
  for (const RegisteredGpu& g : r.gpus) {
    gpus.push_back({{key::kIndex, g.index},
                    {key::kUuid, g.uuid},
                    {key::kModel, g.model},
                    {key::kMemoryBytes, g.memory_bytes},
                    {key::kEmulated, g.emulated},
                    {key::kHealthy, g.healthy}});
  }
  Json jobs = Json::array();
  for (const JobReport& j : r.jobs) jobs.push_back(ToJson(j));
  return Json{{key::kName, r.name},
              {key::kAddress, r.address},
              {key::kMigratePort, r.migrate_port},
              {key::kCheckpointable, r.checkpointable},
              {key::kPostCopy, r.post_copy},
              {key::kStream, r.stream},
              {key::kGpus, std::move(gpus)},
              {key::kJobs, std::move(jobs)}};
}

Json ToJson(const RegisterAnswer& a) {
  return Json{{key::kLeaseS, a.lease_s},
              {key::kHeartbeatS, a.heartbeat_s},
              {key::kCheckpointStore, a.checkpoint_store}};
}

Json ToJson(const HeartbeatAnswer& a) {
  return Json{{key::kLeaseS, a.lease_s},
              {key::kHeartbeatS, a.heartbeat_s},
              {key::kCommands, a.commands},
              {key::kRankRoutes, ToJson(a.rank_routes)}};
}

namespace {

// A registration's fields: absent or null is FALLBACK. Its errors say "out of range" without the
// bounds (docs/formats/api.md, "Agents").
StatusOr<int64_t> RegisteredInt(const Json& o, const char* key, int64_t lo, int64_t hi,
                                int64_t fallback, const std::string& where) {
  if (!o.contains(key) || o[key].is_null()) return fallback;
  if (!o[key].is_number_integer()) return Wrong(where, key, "expected an integer");
  if (o[key].is_number_unsigned() && o[key].get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return Wrong(where, key, "out of range");
  }
  const int64_t n = o[key].get<int64_t>();
  if (n < lo || n > hi) return Wrong(where, key, "out of range");
  return n;
}

StatusOr<std::string> RegisteredString(const Json& o, const char* key, const std::string& where) {
  std::string out;
  PALADIN_RETURN_IF_ERROR(Str(o, key, where, &out));
  return out;
}

StatusOr<bool> RegisteredBool(const Json& o, const char* key, bool fallback,
                              const std::string& where) {
  if (!o.contains(key) || o[key].is_null()) return fallback;
  if (!o[key].is_boolean()) return Wrong(where, key, "expected a boolean");
  return o[key].get<bool>();
}

StatusOr<RegisteredGpu> DecodeRegisteredGpu(const Json& g) {
  const std::string where = "gpus[]: ";
  if (!g.is_object()) return InvalidArgument("gpus[]: expected objects");
  RegisteredGpu r;
  StatusOr<int64_t> index = RegisteredInt(g, key::kIndex, 0, core::kMaxGpusPerNode - 1, -1, where);
  if (!index.ok()) return index.status();
  if (*index < 0) return InvalidArgument("gpus[]: index: required");
  StatusOr<int64_t> memory = RegisteredInt(g, key::kMemoryBytes, 0, kMaxCount, 0, where);
  if (!memory.ok()) return memory.status();
  StatusOr<std::string> uuid = RegisteredString(g, key::kUuid, where);
  if (!uuid.ok()) return uuid.status();
  StatusOr<std::string> model = RegisteredString(g, key::kModel, where);
  if (!model.ok()) return model.status();
  StatusOr<bool> emulated = RegisteredBool(g, key::kEmulated, false, where);
  if (!emulated.ok()) return emulated.status();
  StatusOr<bool> healthy = RegisteredBool(g, key::kHealthy, true, where);
  if (!healthy.ok()) return healthy.status();
  r.index = static_cast<int>(*index);
  r.memory_bytes = *memory;
  r.uuid = *uuid;
  r.model = *model;
  r.emulated = *emulated;
  r.healthy = *healthy;
  return r;
}

}  // namespace

StatusOr<std::string> RegistrationName(const Json& body) {
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  return RegisteredString(body, key::kName, "");
}

StatusOr<Registration> DecodeRegistration(const Json& body) {
  Registration r;
  StatusOr<std::string> name = RegistrationName(body);
  if (!name.ok()) return name.status();
  r.name = *name;
  StatusOr<std::string> address = RegisteredString(body, key::kAddress, "");
  if (!address.ok()) return address.status();
  r.address = *address;
  StatusOr<int64_t> port = RegisteredInt(body, key::kMigratePort, 0, 65535, 0, "");
  if (!port.ok()) return port.status();
  r.migrate_port = static_cast<int>(*port);
  if (body.contains(key::kCheckpointable) && !body[key::kCheckpointable].is_boolean()) {
    return InvalidArgument("checkpointable: expected true or false");
  }
  r.checkpointable = body.value(key::kCheckpointable, true);
  StatusOr<bool> post_copy = RegisteredBool(body, key::kPostCopy, false, "");
  if (!post_copy.ok()) return post_copy.status();
  r.post_copy = *post_copy;
  StatusOr<bool> stream = RegisteredBool(body, key::kStream, false, "");
  if (!stream.ok()) return stream.status();
  r.stream = *stream;
  if (body.contains(key::kGpus) && !body[key::kGpus].is_null()) {
    if (!body[key::kGpus].is_array()) return InvalidArgument("gpus: expected a list");
    for (const Json& g : body[key::kGpus]) {
      StatusOr<RegisteredGpu> gpu = DecodeRegisteredGpu(g);
      if (!gpu.ok()) return gpu.status();
      if (std::any_of(r.gpus.begin(), r.gpus.end(),
                      [&](const RegisteredGpu& o) { return o.index == gpu->index; })) {
        return InvalidArgument("gpus[]: index " + std::to_string(gpu->index) + " appears twice");
      }
      r.gpus.push_back(std::move(*gpu));
    }
  }
  if (body.contains(key::kJobs)) {
    StatusOr<std::vector<JobReport>> jobs = DecodeJobReports(body[key::kJobs]);
    if (!jobs.ok()) return jobs.status();
    r.jobs = std::move(*jobs);
  }
  return r;
}

StatusOr<AgentAnswer> ReadAgentAnswer(const Json& answer) {
  AgentAnswer out;
  if (!answer.is_object()) return out;
  StatusOr<std::optional<double>> lease = Seconds(answer, key::kLeaseS);
  if (!lease.ok()) return lease.status();
  out.lease_s = *lease;
  StatusOr<std::optional<double>> beat = Seconds(answer, key::kHeartbeatS);
  if (!beat.ok()) return beat.status();
  out.heartbeat_s = *beat;
  StatusOr<const Json*> commands = List(answer, key::kCommands);
  if (!commands.ok()) return commands.status();
  out.commands = *commands;
  if (answer.contains(key::kRankRoutes)) out.rank_routes = &answer[key::kRankRoutes];
  return out;
}

}  // namespace paladin::api
