// A small client of the Kubernetes API server, for what Paladin's components do there (the node's
// GPU memory advertised, pods placed, moved, checkpointed and recovered: docs/kubernetes.md).
// Speaks HTTPS with the packaged HTTP library (built with OpenSSL), authenticated by a client
// certificate or a bearer token (a ServiceAccount's, in a pod).
//
// Thread safety: calls may run from any thread. An ApiClient and its copies keep one connection
// to the API server open between calls (one TLS handshake, not one per call: the scheduler asks
// several times a second) and take turns on it; a connection the server closed, or one idle
// longer than ApiConfig::idle_reconnect_s, is opened again on the next call. Every call blocks up
// to the configured timeout (longer while another call holds the connection).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "paladin/base/status.h"

namespace paladin::k8s {

// The node-level extended resource that counts a node's GPU memory in bytes. A pod asks for it
// in resources.limits (e.g. `paladin.io/gpu-memory: 8Gi`); the stock scheduler then admits it
// only where enough is left, and a ResourceQuota on `requests.paladin.io/gpu-memory` caps a
// namespace.
inline constexpr char kGpuMemoryResource[] = "paladin.io/gpu-memory";

// Where and as whom to reach an API server.
struct ApiConfig {
  std::string host;
  int port = 443;
  std::string ca_cert_file;      // PEM CA that signed the server's certificate
  std::string client_cert_file;  // PEM client certificate and key, or both empty
  std::string client_key_file;
  std::string token;  // a bearer token, or empty
  double timeout_s = 10;
  // A kept connection idle this long is not used again but opened afresh: a load balancer in
  // front of the API server may have dropped it without a word, and the next call would wait
  // out the timeout on it.
  double idle_reconnect_s = 30;
};

// "https://HOST[:PORT]" into config's host and port; an error says what is wrong.
Status SetServer(const std::string& url, ApiConfig* config);
// The configuration a pod has: KUBERNETES_SERVICE_HOST/PORT and its ServiceAccount's token and
// CA under /var/run/secrets/kubernetes.io/serviceaccount. An error names what is missing.
StatusOr<ApiConfig> InClusterConfig();

// Whether `name` can be a Node's name (a DNS subdomain: lowercase letters, digits, '-' and '.',
// at most 253 characters, starting and ending with a letter or digit); an error says why not.
Status CheckNodeName(const std::string& name);

// The JSON merge patch of a Node's status that sets `resource` to `bytes` in both its capacity
// and its allocatable (the kubelet would copy it into allocatable only at its next status update,
// up to 10 s later).
std::string ExtendedResourcePatch(const std::string& resource, uint64_t bytes);

class ApiClient {
 public:
  explicit ApiClient(ApiConfig config);

  // GET PATH; the response body, or an error with the server's message.
  StatusOr<std::string> Get(const std::string& path) const;
  // POST PATH with a JSON body; the response body.
  StatusOr<std::string> Post(const std::string& path, const std::string& json) const;
  // PATCH PATH with a body of `content_type` (a merge or strategic merge patch); the response.
  StatusOr<std::string> Patch(const std::string& path, const std::string& body,
                              const std::string& content_type) const;
  // DELETE PATH; the response body.
  StatusOr<std::string> Delete(const std::string& path) const;
  // DELETE PATH with a JSON body (DeleteOptions: grace period, preconditions); the response.
  StatusOr<std::string> Delete(const std::string& path, const std::string& json) const;
  // Applies a JSON merge patch to /api/v1/nodes/NODE/status; the Node as the server returns it.
  StatusOr<std::string> PatchNodeStatus(const std::string& node,
                                        const std::string& merge_patch) const;

 private:
  struct Connection;

  StatusOr<std::string> Call(const std::string& method, const std::string& path,
                             const std::string& body, const std::string& content_type) const;

  ApiConfig config_;
  std::shared_ptr<Connection> connection_;  // shared by the copies
};

// The API server's time format: RFC 3339 in UTC, whole seconds ("2026-12-05T22:40:00Z").
std::string ApiTimeNow();

// Posts an Event about pod NS/NAME (its `uid`, so that `kubectl describe pod` lists it): `type`
// Normal or Warning, `reason` one CamelCase word, `component` the Paladin part that reports it.
Status PostPodEvent(const ApiClient& client, const std::string& ns, const std::string& name,
                    const std::string& uid, const std::string& type, const std::string& reason,
                    const std::string& message, const std::string& component);

}  // namespace paladin::k8s
