// The heartbeat's types and their JSON (include/paladin/api/wire.h).
#include "paladin/api/wire.h"

namespace paladin::api {
namespace {

using Json = nlohmann::json;

inline constexpr int64_t kMaxCount = int64_t{1} << 60;

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

StatusOr<JobReport> DecodeJob(const Json& r, const std::string& where) {
  if (!r.is_object()) return InvalidArgument(where + "expected an object");
  JobReport j;
  if (!r.contains("id") || !r["id"].is_string()) return Wrong(where, "id", "expected a string");
  j.id = r["id"].get<std::string>();
  PALADIN_RETURN_IF_ERROR(Int(r, "epoch", 0, kMaxCount, where, &j.epoch));
  PALADIN_RETURN_IF_ERROR(Str(r, "state", where, &j.state));
  PALADIN_RETURN_IF_ERROR(Int(r, "pid", -1, kMaxCount, where, &j.pid));
  if (r.contains("used_bytes") && !r["used_bytes"].is_null()) {
    int64_t used = 0;
    PALADIN_RETURN_IF_ERROR(Int(r, "used_bytes", 0, kMaxCount, where, &used));
    j.used_bytes = used;
  }
  PALADIN_RETURN_IF_ERROR(Int(r, "quota_bytes", 0, kMaxCount, where, &j.quota_bytes));
  PALADIN_RETURN_IF_ERROR(Int(r, "quota_grows", 0, kMaxCount, where, &j.quota_grows));
  PALADIN_RETURN_IF_ERROR(Int(r, "refusals", 0, kMaxCount, where, &j.refusals));
  if (r.contains("exit_code") && !r["exit_code"].is_null()) {
    int64_t code = 0;
    PALADIN_RETURN_IF_ERROR(Int(r, "exit_code", -1000, 1000, where, &code));
    j.exit_code = static_cast<int>(code);
  }
  PALADIN_RETURN_IF_ERROR(Str(r, "stdout", where, &j.stdout_text));
  PALADIN_RETURN_IF_ERROR(Str(r, "stderr", where, &j.stderr_text));
  return j;
}

}  // namespace

Json ToJson(const JobReport& r) {
  return Json{{"id", r.id},
              {"epoch", r.epoch},
              {"state", r.state},
              {"pid", r.pid},
              {"used_bytes", r.used_bytes ? Json(*r.used_bytes) : Json(nullptr)},
              {"quota_bytes", r.quota_bytes},
              {"quota_grows", r.quota_grows},
              {"refusals", r.refusals},
              {"exit_code", r.exit_code ? Json(*r.exit_code) : Json(nullptr)},
              {"stdout", r.stdout_text},
              {"stderr", r.stderr_text}};
}

Json ToJson(const GpuReport& g) {
  Json out = {{"index", g.index}, {"used_bytes", g.used_bytes}, {"healthy", g.healthy}};
  if (!g.fault.empty()) out["fault"] = g.fault;
  return out;
}

Json ToJson(const CommandResult& c) {
  return Json{{"command", c.command}, {"ok", c.ok}, {"error", c.error}, {"detail", c.detail}};
}

StatusOr<std::vector<JobReport>> DecodeJobReports(const Json& list) {
  std::vector<JobReport> out;
  if (list.is_null()) return out;
  if (!list.is_array()) return InvalidArgument("jobs: expected a list");
  for (size_t i = 0; i < list.size(); ++i) {
    StatusOr<JobReport> r = DecodeJob(list[i], Where("jobs", i));
    if (!r.ok()) return r.status();
    out.push_back(std::move(*r));
  }
  return out;
}

StatusOr<Heartbeat> DecodeHeartbeat(const Json& body) {
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  Heartbeat beat;
  StatusOr<const Json*> gpus = List(body, "gpus");
  if (!gpus.ok()) return gpus.status();
  for (size_t i = 0; *gpus != nullptr && i < (*gpus)->size(); ++i) {
    const Json& g = (**gpus)[i];
    const std::string where = Where("gpus", i);
    if (!g.is_object()) return InvalidArgument(where + "expected an object");
    GpuReport r;
    int64_t index = 0;
    PALADIN_RETURN_IF_ERROR(Int(g, "index", 0, 1023, where, &index));
    r.index = static_cast<int>(index);
    PALADIN_RETURN_IF_ERROR(Int(g, "used_bytes", 0, kMaxCount, where, &r.used_bytes));
    PALADIN_RETURN_IF_ERROR(Bool(g, "healthy", where, &r.healthy));
    PALADIN_RETURN_IF_ERROR(Str(g, "fault", where, &r.fault));
    beat.gpus.push_back(std::move(r));
  }
  if (body.contains("jobs")) {
    StatusOr<std::vector<JobReport>> jobs = DecodeJobReports(body["jobs"]);
    if (!jobs.ok()) return jobs.status();
    beat.jobs = std::move(*jobs);
  }
  StatusOr<const Json*> results = List(body, "results");
  if (!results.ok()) return results.status();
  for (size_t i = 0; *results != nullptr && i < (*results)->size(); ++i) {
    const Json& r = (**results)[i];
    const std::string where = Where("results", i);
    if (!r.is_object()) return InvalidArgument(where + "expected an object");
    CommandResult c;
    PALADIN_RETURN_IF_ERROR(Int(r, "command", 0, kMaxCount, where, &c.command));
    PALADIN_RETURN_IF_ERROR(Bool(r, "ok", where, &c.ok));
    PALADIN_RETURN_IF_ERROR(Str(r, "error", where, &c.error));
    if (r.contains("detail") && !r["detail"].is_null()) {
      if (!r["detail"].is_object()) return Wrong(where, "detail", "expected an object");
      c.detail = r["detail"];
    }
    beat.results.push_back(std::move(c));
  }
  return beat;
}

}  // namespace paladin::api
