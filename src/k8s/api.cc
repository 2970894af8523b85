#include "paladin/k8s/api.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "paladin/api/client.h"
#include "paladin/api/http.h"

namespace paladin::k8s {
namespace {

using Json = nlohmann::json;

constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

bool ReadWhole(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream text;
  text << in.rdbuf();
  *out = text.str();
  return static_cast<bool>(in) || in.eof();
}

// The API server answers errors with a Status object; its message says what was wrong.
Status FromHttp(int status, const std::string& body, const std::string& what) {
  std::string message;
  const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("message") && j["message"].is_string()) {
    message = j["message"].get<std::string>();
  }
  if (message.empty()) message = body.empty() ? "HTTP " + std::to_string(status) : body;
  return api::StatusForHttp(status, what, message);
}

}  // namespace

Status SetServer(const std::string& url, ApiConfig* config) {
  if (url.rfind("https://", 0) != 0) {
    return InvalidArgument("API server '" + url + "': expected https://HOST[:PORT]");
  }
  StatusOr<api::Endpoint> endpoint = api::ParseUrl(url);
  if (!endpoint.ok()) return endpoint.status();
  config->host = endpoint->host;
  config->port = endpoint->port;
  return Status::Ok();
}

StatusOr<ApiConfig> InClusterConfig() {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return FailedPrecondition(
        "not in a pod (KUBERNETES_SERVICE_HOST/PORT unset): give the API server with --server");
  }
  ApiConfig config;
  // An IPv6 service address needs brackets in a URL.
  const std::string h = std::string(host).find(':') != std::string::npos
                            ? "[" + std::string(host) + "]"
                            : std::string(host);
  if (Status s = SetServer("https://" + h + ":" + port, &config); !s.ok()) return s;
  if (h != host) config.host = host;
  const std::string dir = kServiceAccountDir;
  if (!ReadWhole(dir + "/token", &config.token) || config.token.empty()) {
    return FailedPrecondition("no ServiceAccount token in " + dir + "/token");
  }
  while (!config.token.empty() && (config.token.back() == '\n' || config.token.back() == ' ')) {
    config.token.pop_back();
  }
  config.ca_cert_file = dir + "/ca.crt";
  return config;
}

Status CheckNodeName(const std::string& name) {
  if (name.empty() || name.size() > 253) {
    return InvalidArgument("node name '" + name + "': must be 1 to 253 characters");
  }
  for (const char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) {
      return InvalidArgument("node name '" + name +
                             "': only lowercase letters, digits, '-' and '.' are allowed");
    }
  }
  const auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) {
    return InvalidArgument("node name '" + name +
                           "': must start and end with a lowercase letter or digit");
  }
  return Status::Ok();
}

std::string ExtendedResourcePatch(const std::string& resource, uint64_t bytes) {
  Json amount;
  amount[resource] = std::to_string(bytes);  // a quantity: a string of whole bytes
  Json patch;
  patch["status"]["capacity"] = amount;
  patch["status"]["allocatable"] = amount;
  return patch.dump();
}

// The connection a client and its copies keep open, one request at a time on it.
struct ApiClient::Connection {
  std::mutex mutex;
  std::unique_ptr<httplib::SSLClient> http;  // null until the first call, after a failure or idle
  std::chrono::steady_clock::time_point last_used;
};

ApiClient::ApiClient(ApiConfig config)
    : config_(std::move(config)), connection_(std::make_shared<Connection>()) {}

namespace {

// A client with the configuration's trust, identity and timeouts, its connection kept between
// requests.
StatusOr<std::unique_ptr<httplib::SSLClient>> OpenClient(const ApiConfig& config) {
  auto http = std::make_unique<httplib::SSLClient>(config.host, config.port,
                                                   config.client_cert_file, config.client_key_file);
  if (!config.client_cert_file.empty() && !http->is_valid()) {
    return InvalidArgument("client certificate '" + config.client_cert_file + "' or key '" +
                           config.client_key_file + "' cannot be loaded");
  }
  if (!config.ca_cert_file.empty()) http->set_ca_cert_path(config.ca_cert_file.c_str());
  http->enable_server_certificate_verification(true);
  http->set_keep_alive(true);
  const auto seconds = static_cast<time_t>(config.timeout_s);
  const auto micros = static_cast<time_t>((config.timeout_s - static_cast<double>(seconds)) * 1e6);
  http->set_connection_timeout(seconds, micros);
  http->set_read_timeout(seconds, micros);
  http->set_write_timeout(seconds, micros);
  return http;
}

}  // namespace

StatusOr<std::string> ApiClient::Call(const std::string& method, const std::string& path,
                                      const std::string& body,
                                      const std::string& content_type) const {
  const std::lock_guard<std::mutex> lock(connection_->mutex);
  std::unique_ptr<httplib::SSLClient>& http = connection_->http;
  httplib::Headers headers{{"Accept", "application/json"}};
  if (!config_.token.empty()) headers.emplace("Authorization", "Bearer " + config_.token);
  const api::SigpipeBlock no_sigpipe;
  const std::string what = method + " " + path;
  const auto now = std::chrono::steady_clock::now();
  if (http != nullptr && std::chrono::duration<double>(now - connection_->last_used).count() >
                             config_.idle_reconnect_s) {
    http.reset();
  }
  connection_->last_used = now;
  for (int attempt = 0;; ++attempt) {
    const bool reused = http != nullptr;
    if (!reused) {
      StatusOr<std::unique_ptr<httplib::SSLClient>> opened = OpenClient(config_);
      if (!opened.ok()) return opened.status();
      http = std::move(*opened);
    }
    httplib::Result result = method == "PATCH"  ? http->Patch(path, headers, body, content_type)
                             : method == "POST" ? http->Post(path, headers, body, content_type)
                             : method == "DELETE" && !body.empty()
                                 ? http->Delete(path, headers, body, content_type)
                             : method == "DELETE" ? http->Delete(path, headers)
                                                  : http->Get(path, headers);
    if (result) {
      if (result->status < 200 || result->status >= 300) {
        return FromHttp(result->status, result->body, what);
      }
      return result->body;
    }
    http.reset();  // the next request connects afresh
    // A kept connection that the server closed since the last request fails the next one on it:
    // a GET is asked again, once, on a new connection (a write is not: it may have been done).
    if (reused && method == "GET" && attempt == 0) continue;
    std::string message = "cannot reach the API server at " + config_.host + ":";
    message += std::to_string(config_.port) + " (" + what + "): ";
    message += httplib::to_string(result.error());
    if (result.error() == httplib::Error::SSLServerVerification) {
      message += " (the server's certificate is not signed by '" + config_.ca_cert_file + "')";
    }
    return Unavailable(message);
  }
}

StatusOr<std::string> ApiClient::Get(const std::string& path) const {
  return Call("GET", path, "", "");
}

StatusOr<std::string> ApiClient::Post(const std::string& path, const std::string& json) const {
  return Call("POST", path, json, "application/json");
}

StatusOr<std::string> ApiClient::Delete(const std::string& path) const {
  return Call("DELETE", path, "", "");
}

StatusOr<std::string> ApiClient::Delete(const std::string& path, const std::string& json) const {
  return Call("DELETE", path, json, "application/json");
}

StatusOr<std::string> ApiClient::Patch(const std::string& path, const std::string& body,
                                       const std::string& content_type) const {
  return Call("PATCH", path, body, content_type);
}

StatusOr<std::string> ApiClient::PatchNodeStatus(const std::string& node,
                                                 const std::string& merge_patch) const {
  if (Status s = CheckNodeName(node); !s.ok()) return s;
  return Call("PATCH", "/api/v1/nodes/" + node + "/status", merge_patch,
              "application/merge-patch+json");
}

std::string ApiTimeNow() {
  char out[32];
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(out, sizeof out, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return out;
}

Status PostPodEvent(const ApiClient& client, const std::string& ns, const std::string& name,
                    const std::string& uid, const std::string& type, const std::string& reason,
                    const std::string& message, const std::string& component) {
  static std::atomic<uint64_t> seq{0};
  char suffix[96];
  std::snprintf(
      suffix, sizeof suffix, ".paladin.%llx.%llu",
      static_cast<unsigned long long>(std::chrono::system_clock::now().time_since_epoch().count()),
      static_cast<unsigned long long>(++seq));
  const std::string now = ApiTimeNow();
  const nlohmann::json event = {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata", {{"name", name + suffix}, {"namespace", ns}}},
      {"involvedObject",
       {{"apiVersion", "v1"}, {"kind", "Pod"}, {"namespace", ns}, {"name", name}, {"uid", uid}}},
      {"type", type},
      {"reason", reason},
      {"message", message},
      {"source", {{"component", component}}},
      {"reportingComponent", component},
      {"firstTimestamp", now},
      {"lastTimestamp", now},
      {"count", 1}};
  return client.Post("/api/v1/namespaces/" + ns + "/events", event.dump()).status();
}

}  // namespace paladin::k8s
