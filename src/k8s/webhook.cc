#include "paladin/k8s/webhook.h"

#include <httplib.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "json_fields.h"
#include "paladin/api/client.h"
#include "paladin/api/serving_cert.h"
#include "paladin/base/size.h"
#include "paladin/k8s/api.h"
#include "paladin/k8s/move.h"
#include "paladin/k8s/scheduler.h"
#include "paladin/k8s/usage.h"

namespace paladin::k8s {
namespace {

using Json = nlohmann::json;

std::string Base64(const std::string& in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint32_t{static_cast<uint8_t>(in[i])} << 16) |
                       (uint32_t{static_cast<uint8_t>(in[i + 1])} << 8) |
                       static_cast<uint8_t>(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (i < in.size()) {
    uint32_t v = uint32_t{static_cast<uint8_t>(in[i])} << 16;
    if (i + 1 < in.size()) v |= uint32_t{static_cast<uint8_t>(in[i + 1])} << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// The names Paladin sets: a user's own value of one of them would defeat the quota, so it is
// replaced rather than kept.
const std::set<std::string>& InjectedNames() {
  static const std::set<std::string> kNames = {
      "LD_PRELOAD",       "LD_LIBRARY_PATH",   "PALADIN_GPU_MEM",     "PALADIN_QUOTA_REGION",
      "PALADIN_EMU_GPUS", "PALADIN_EMU_STATE", "CUDA_VISIBLE_DEVICES"};
  return kNames;
}

// metadata.annotations of a pod, or {} when it has none (or they are not an object, which the
// API server would not send).
Json Annotations(const Json& pod) {
  if (!pod.is_object()) return Json::object();
  const auto meta = pod.find("metadata");
  if (meta == pod.end() || !meta->is_object()) return Json::object();
  const auto a = meta->find("annotations");
  return a != meta->end() && a->is_object() ? *a : Json::object();
}

// The pod annotations Paladin reads or writes; any other paladin.io/ key is a user's mistake (or
// one a later Paladin adds), refused as unknown.
const std::set<std::string, std::less<>>& KnownAnnotations() {
  static const std::set<std::string, std::less<>> kKnown = {
      kGpuAnnotation,      kGpuBytesAnnotation,    kPlacementAnnotation,
      kPriorityAnnotation, kRestoreFromAnnotation, kRestoreTokenAnnotation,
      kMoveToAnnotation,   kMovedFromAnnotation,   kGpuSizedAnnotation};
  return kKnown;
}

Json Refusal(int code, const std::string& message) {
  return {{"code", code}, {"message", "Paladin: " + message}};
}

// A JSON Pointer's token (RFC 6901): '~' and '/' escaped.
std::string PointerToken(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

// A size as a Kubernetes quantity, rounded up to a whole MiB: "615Mi".
std::string MiQuantity(uint64_t bytes) {
  constexpr uint64_t kMi = uint64_t{1} << 20;
  return std::to_string((bytes + kMi - 1) / kMi) + "Mi";
}

// An `auto` pod (annotation paladin.io/gpu-memory: auto): its first container's limit and
// request written in `pod` and as patch operations, with the annotation saying how it was sized.
// A pod that already carries Paladin's record of its sizing (a move's replacement, created by
// Paladin: a user cannot set it) keeps the size it has.
Status SizeAutoPod(const InjectOptions& options, Json* pod, Json* patch) {
  const Json annotations = Annotations(*pod);
  const auto value = annotations.find(kGpuMemoryResource);
  if (value == annotations.end()) return Status::Ok();
  const std::string field = std::string("metadata.annotations[") + kGpuMemoryResource + "]";
  if (!value->is_string() || *value != kAutoSize) {
    return InvalidArgument(field + ": its only value is '" + kAutoSize +
                           "' (a size is asked in a container's resources.limits[" +
                           kGpuMemoryResource + "])");
  }
  if (annotations.contains(kGpuSizedAnnotation)) return Status::Ok();
  Json& spec = (*pod)["spec"];
  if (!spec.is_object() || !spec.contains("containers") || !spec["containers"].is_array() ||
      spec["containers"].empty() || !spec["containers"][0].is_object()) {
    return InvalidArgument(field + " '" + kAutoSize + "': the pod has no container to size");
  }
  Json& containers = spec["containers"];
  for (size_t i = 0; i < containers.size(); ++i) {
    const Json limits =
        containers[i].value("resources", Json::object()).value("limits", Json::object());
    if (limits.is_object() && limits.contains(kGpuMemoryResource)) {
      return InvalidArgument(field + " '" + kAutoSize + "' and spec.containers[" +
                             std::to_string(i) + "].resources.limits[" + kGpuMemoryResource +
                             "] both set: ask one or the other");
    }
  }
  Json& first = containers[0];
  const std::string ns = Str((*pod)["metadata"], "namespace");
  const std::string command = PodClassCommand(first.dump());
  StatusOr<AutoSizing> sized =
      !options.size_auto
          ? StatusOr<AutoSizing>(FailedPrecondition("the webhook has no --paladin-server"))
      : command.empty()
          ? StatusOr<AutoSizing>(InvalidArgument("its first container names no command or image"))
          : options.size_auto(ns, command);
  uint64_t bytes = options.auto_default_bytes;
  std::string why;
  if (sized.ok() && sized->bytes > 0) {
    bytes = sized->bytes;
    why = sized->why;
  } else {
    why = "the webhook's default " + base::FormatSize(bytes) + ": Paladin's server not asked (" +
          (sized.ok() ? std::string("it answered no size") : sized.status().message()) + ")";
  }
  const std::string quantity = MiQuantity(bytes);
  Json resources = first.value("resources", Json::object());
  if (!resources.is_object()) resources = Json::object();
  for (const char* kind : {"limits", "requests"}) {
    if (!resources.contains(kind) || !resources[kind].is_object()) resources[kind] = Json::object();
    resources[kind][kGpuMemoryResource] = quantity;
  }
  first["resources"] = resources;
  patch->push_back({{"op", "add"}, {"path", "/spec/containers/0/resources"}, {"value", resources}});
  std::string said = quantity + ", " + why;
  for (char& c : said) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  patch->push_back({{"op", "add"},
                    {"path", "/metadata/annotations/" + PointerToken(kGpuSizedAnnotation)},
                    {"value", said.substr(0, 1024)}});
  return Status::Ok();
}

constexpr char kDefaultScheduler[] = "default-scheduler";
constexpr char kLibVolume[] = "paladin-lib";
constexpr char kEmuVolume[] = "paladin-emu";

}  // namespace

bool PaladinOnlyAnnotation(std::string_view key) {
  return key.starts_with("paladin.io/") && key != kPriorityAnnotation && key != kGpuMemoryResource;
}

Status CheckPaladinAnnotations(const std::string& old_pod_json, const std::string& pod_json,
                               const std::set<std::string>& may_change) {
  const Json old_pod =
      old_pod_json.empty() ? Json::object() : Json::parse(old_pod_json, nullptr, false);
  const Json pod = Json::parse(pod_json, nullptr, false);
  if (!pod.is_object() || !old_pod.is_object())
    return InvalidArgument("the object is not a JSON pod");
  const Json before = Annotations(old_pod);
  const Json after = Annotations(pod);
  std::set<std::string> keys;
  for (const auto& [k, v] : before.items()) keys.insert(k);
  for (const auto& [k, v] : after.items()) keys.insert(k);
  for (const std::string& k : keys) {
    if (!PaladinOnlyAnnotation(k) && k != kGpuMemoryResource) continue;
    const auto b = before.find(k);
    const auto a = after.find(k);
    const bool had = b != before.end(), has = a != after.end();
    if (had && has && *a == *b) continue;
    if (may_change.count(k) != 0) continue;
    // The one Paladin annotation besides the priority that a user writes: `auto`, or nothing.
    if (k == kGpuMemoryResource && (!has || *a == kAutoSize)) continue;
    std::string message = "metadata.annotations[" + k + "] ";
    message += !had ? "set" : !has ? "removed" : "changed";
    if (k == kGpuMemoryResource) {
      // The likeliest slip: the resource's name written as an annotation, which asks for nothing.
      message += std::string(": GPU memory is asked in a container's resources.limits[") +
                 kGpuMemoryResource + "] (e.g. 8Gi), not in an annotation (whose only value is '" +
                 kAutoSize + "': sized by Paladin)";
    } else if (KnownAnnotations().count(k) == 0) {
      message += std::string(": not an annotation Paladin knows (of its annotations a user sets ") +
                 "only " + kPriorityAnnotation + " and " + kGpuMemoryResource + ": " + kAutoSize +
                 ")";
    } else {
      message += std::string(": only Paladin sets it (of its annotations a user sets only ") +
                 kPriorityAnnotation + " and " + kGpuMemoryResource + ": " + kAutoSize + ")";
    }
    return PermissionDenied(message);
  }
  return Status::Ok();
}

StatusOr<std::string> PodPatch(const std::string& pod_json, const InjectOptions& options) {
  Json pod = Json::parse(pod_json, nullptr, /*allow_exceptions=*/false);
  if (!pod.is_object()) return InvalidArgument("the object is not a JSON pod");
  Json patch = Json::array();
  if (Status s = SizeAutoPod(options, &pod, &patch); !s.ok()) return s;
  const PodRequest request = ReadPod(pod.dump());
  if (!request.error.empty()) return InvalidArgument(request.error);
  if (request.gpu_memory == 0) return std::string();
  const Json spec = pod.value("spec", Json::object());
  if (!request.node.empty()) {
    return InvalidArgument("spec.nodeName '" + request.node + "': a pod asking for " +
                           kGpuMemoryResource +
                           " is placed by Paladin's scheduler, which chooses its node and GPU");
  }
  const bool emulated = !options.emulated_gpus.empty();

  // A GPU pod placed by another scheduler would escape the packer's books and the teams'
  // quotas: only the default (which the API server fills in) is replaced, anything else refused.
  const std::string scheduler = spec.value("schedulerName", "");
  if (!scheduler.empty() && scheduler != kDefaultScheduler && scheduler != options.scheduler_name) {
    return InvalidArgument("spec.schedulerName '" + scheduler.substr(0, 128) +
                           "': a pod asking for " + kGpuMemoryResource +
                           " is placed by Paladin's scheduler ('" + options.scheduler_name +
                           "'); leave schedulerName unset");
  }
  if (scheduler.empty() || scheduler == kDefaultScheduler) {
    patch.push_back(
        {{"op", "add"}, {"path", "/spec/schedulerName"}, {"value", options.scheduler_name}});
  }
  Json volumes = Json::array();
  for (const Json& v : spec.value("volumes", Json::array())) {
    const std::string name = v.value("name", "");
    if (name != kLibVolume && name != kEmuVolume) volumes.push_back(v);
  }
  volumes.push_back(
      {{"name", kLibVolume}, {"hostPath", {{"path", options.lib_dir}, {"type", "Directory"}}}});
  if (emulated) {
    volumes.push_back({{"name", kEmuVolume},
                       {"hostPath", {{"path", options.emu_state_dir}, {"type", "Directory"}}}});
  }
  patch.push_back({{"op", "add"}, {"path", "/spec/volumes"}, {"value", volumes}});

  const Json containers = spec.value("containers", Json::array());
  for (size_t i = 0; i < containers.size(); ++i) {
    const Json& c = containers[i];
    const Json limits = c.value("resources", Json::object()).value("limits", Json::object());
    const std::string q = limits.is_object() ? limits.value(kGpuMemoryResource, "") : "";
    if (q.empty()) continue;  // a sidecar that asks for no GPU memory gets no GPU
    StatusOr<uint64_t> bytes = ParseQuantity(q);
    if (!bytes.ok()) return bytes.status();
    const std::string at = "/spec/containers/" + std::to_string(i);
    Json env = Json::array();
    for (const Json& e : c.value("env", Json::array())) {
      if (InjectedNames().count(e.value("name", "")) == 0) env.push_back(e);
    }
    const std::string lib = options.lib_mount;
    env.push_back({{"name", "LD_PRELOAD"}, {"value", lib + "/libcuda.so.1"}});
    env.push_back({{"name", "LD_LIBRARY_PATH"}, {"value", lib}});
    env.push_back({{"name", "PALADIN_GPU_MEM"}, {"value", std::to_string(*bytes)}});
    env.push_back(
        {{"name", "CUDA_VISIBLE_DEVICES"},
         {"valueFrom",
          {{"fieldRef",
            {{"fieldPath", std::string("metadata.annotations['") + kGpuAnnotation + "']"}}}}}});
    if (emulated) {
      env.push_back({{"name", "PALADIN_EMU_GPUS"}, {"value", options.emulated_gpus}});
      env.push_back({{"name", "PALADIN_EMU_STATE"}, {"value", options.emu_state_mount + "/state"}});
    }
    patch.push_back({{"op", "add"}, {"path", at + "/env"}, {"value", env}});
    Json mounts = Json::array();
    for (const Json& m : c.value("volumeMounts", Json::array())) {
      const std::string name = m.value("name", "");
      if (name != kLibVolume && name != kEmuVolume) mounts.push_back(m);
    }
    mounts.push_back({{"name", kLibVolume}, {"mountPath", lib}, {"readOnly", true}});
    if (emulated) {
      mounts.push_back({{"name", kEmuVolume}, {"mountPath", options.emu_state_mount}});
    }
    patch.push_back({{"op", "add"}, {"path", at + "/volumeMounts"}, {"value", mounts}});
  }
  return patch.dump();
}

std::string Review(const std::string& review_json, const InjectOptions& options) {
  const Json review = Json::parse(review_json, nullptr, /*allow_exceptions=*/false);
  Json response = {{"allowed", true}};
  auto refuse = [&response](int code, const std::string& message) {
    response["allowed"] = false;
    response["status"] = Refusal(code, message);
  };
  if (!review.is_object() || !review.contains("request") || !review["request"].is_object()) {
    refuse(400, "not an AdmissionReview");
  } else {
    const Json& request = review["request"];
    response["uid"] = Str(request, "uid");
    const std::string operation = Str(request, "operation");
    const std::string user = Str(request.value("userInfo", Json::object()), "username");
    auto among = [&user](const std::vector<std::string>& users) {
      return !user.empty() && std::find(users.begin(), users.end(), user) != users.end();
    };
    const bool paladin = among(options.paladin_users);
    std::set<std::string> may_change;
    if (among(options.usage_users)) may_change.insert(kGpuUsedAnnotation);
    const bool pod = Str(request.value("kind", Json::object()), "kind") == "Pod" &&
                     request.contains("object") && request["object"].is_object();
    const Json old_pod =
        operation == "UPDATE" && request.contains("oldObject") && request["oldObject"].is_object()
            ? request["oldObject"]
            : Json::object();
    Status trusted = Status::Ok();
    if (pod && !paladin)
      trusted = CheckPaladinAnnotations(old_pod.dump(), request["object"].dump(), may_change);
    if (!trusted.ok()) {
      refuse(403, trusted.message() + " (request by '" + user.substr(0, 128) + "')");
    } else if (pod && operation != "UPDATE") {
      Json object = request["object"];
      // A created pod's object may leave its namespace to the request's.
      if (object.contains("metadata") && object["metadata"].is_object() &&
          Str(object["metadata"], "namespace").empty() && !Str(request, "namespace").empty()) {
        object["metadata"]["namespace"] = Str(request, "namespace");
      }
      StatusOr<std::string> patch = PodPatch(object.dump(), options);
      if (!patch.ok()) {
        refuse(400, patch.status().message());
      } else if (!patch->empty()) {
        response["patchType"] = "JSONPatch";
        response["patch"] = Base64(*patch);
      }
    }
  }
  return Json{
      {"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"}, {"response", response}}
      .dump();
}

Status ServeWebhook(const std::string& listen, const std::string& cert_file,
                    const std::string& key_file, const InjectOptions& options) {
  StatusOr<api::Endpoint> endpoint = api::ParseUrl("https://" + listen);
  if (!endpoint.ok()) return InvalidArgument("--listen '" + listen + "': expected HOST:PORT");
  // Checked (the reason named) and then served from the files as they are at each handshake:
  // a renewed Secret's certificate is served without a restart.
  StatusOr<std::shared_ptr<api::ServingCertificate>> cert =
      api::ServingCertificate::Load(cert_file, key_file, [](const std::string& line) {
        std::fprintf(stderr, "paladin k8s webhook: %s\n", line.c_str());
      });
  if (!cert.ok()) return cert.status();
  httplib::SSLServer server(cert_file.c_str(), key_file.c_str());
  if (!server.is_valid()) {
    return InvalidArgument("certificate '" + cert_file + "' or key '" + key_file +
                           "' cannot be loaded");
  }
  (*cert)->Install(server.ssl_context());
  server.set_payload_max_length(4 << 20);  // the API server sends whole pods; 4 MiB is plenty
  server.Post("/mutate", [&options](const httplib::Request& req, httplib::Response& res) {
    res.set_content(Review(req.body, options), "application/json");
  });
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  if (!server.bind_to_port(endpoint->host, endpoint->port)) {
    return Unavailable("cannot listen on " + listen);
  }
  std::fprintf(stderr, "paladin k8s webhook: serving https://%s/mutate\n", listen.c_str());
  if (!server.listen_after_bind()) return Unavailable("the webhook server stopped");
  return Status::Ok();
}

}  // namespace paladin::k8s
