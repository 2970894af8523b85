// A client of Paladin's REST API (docs/formats/api.md), shared by the CLI and the node agent:
// a base URL, a bearer token, JSON in and out, and errors that say what the server said.
//
// Connections: a call takes the connection the last one left open (kept alive), else opens one;
// so a client polling the server (an agent's heartbeat) keeps one connection, and over HTTPS
// shakes hands once, not at every call. A connection the server has closed in between is
// noticed before it is used, and a new one opened.
//
// Thread safety: calls may run on several threads at once (each then on a connection of its
// own); copies of a Client share its kept connection.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "paladin/base/status.h"

namespace paladin::api {

using Json = nlohmann::json;

struct Endpoint {
  std::string host = "127.0.0.1";
  int port = 7070;
  bool tls = false;
};

// "http://host:port", "host:port" or "https://host:port"; an error says what is wrong.
StatusOr<Endpoint> ParseUrl(const std::string& url);

class Client {
 public:
  Client(Endpoint endpoint, std::string token, double timeout_s = 30);

  // Each returns the decoded JSON body of a 2xx answer (null for an empty body), or an error
  // carrying the server's {"error": ...} message and the HTTP status:
  // 401 Unauthenticated, 403 PermissionDenied, 404 NotFound, 409 FailedPrecondition,
  // other 4xx InvalidArgument, 5xx and connection failures Unavailable.
  StatusOr<Json> Get(const std::string& path) const;
  StatusOr<Json> Post(const std::string& path, const Json& body) const;
  StatusOr<Json> Put(const std::string& path, const Json& body) const;
  StatusOr<Json> Delete(const std::string& path) const;
  // The raw body of a 2xx GET (for /metrics).
  StatusOr<std::string> GetText(const std::string& path) const;

  const Endpoint& endpoint() const { return endpoint_; }
  std::string Url() const;

 private:
  StatusOr<std::string> Call(const std::string& method, const std::string& path,
                             const std::string* body) const;
  Endpoint endpoint_;
  std::string token_;
  double timeout_s_;
  struct Kept;  // the connection the last call left open
  std::shared_ptr<Kept> kept_;
};

// The server URL and token the CLI uses: the flags when given, else $PALADIN_SERVER /
// $PALADIN_TOKEN, else the file written by `paladin up` ($PALADIN_HOME/client.json, default
// ~/.paladin/client.json), else http://127.0.0.1:7070. The file's CA (an HTTPS server's own) is
// exported as PALADIN_CA_FILE for this process's clients unless that is set already.
struct ClientConfig {
  std::string url;
  std::string token;
  std::string ca_file;  // client.json's "ca_file"
};
ClientConfig ResolveClientConfig(const std::string& url_flag, const std::string& token_flag);
std::string PaladinHome();

}  // namespace paladin::api
