#include "paladin/api/client.h"

#include <httplib.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

#include "paladin/api/http.h"
#include "paladin/api/wire.h"

namespace paladin::api {

StatusOr<Endpoint> ParseUrl(const std::string& url) {
  Endpoint e;
  std::string rest = url;
  if (rest.rfind("https://", 0) == 0) {
    e.tls = true;
    rest = rest.substr(8);
  } else if (rest.rfind("http://", 0) == 0) {
    rest = rest.substr(7);
  } else if (rest.find("://") != std::string::npos) {
    return InvalidArgument("server URL '" + url + "': only http:// and https:// are supported");
  }
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos) {
    return InvalidArgument("server URL '" + url + "': expected scheme://host:port with no path");
  }
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) {
    e.host = rest;
    e.port = e.tls ? 443 : 7070;
  } else {
    e.host = rest.substr(0, colon);
    const std::string port = rest.substr(colon + 1);
    char* end = nullptr;
    const long p = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || p <= 0 || p > 65535) {
      return InvalidArgument("server URL '" + url + "': port '" + port + "' is not 1-65535");
    }
    e.port = static_cast<int>(p);
  }
  if (e.host.empty()) return InvalidArgument("server URL '" + url + "': no host");
  return e;
}

struct Client::Kept {
  std::mutex mu;
  std::unique_ptr<httplib::Client> connection;
  std::string ca;  // the CA file it checks the server against ("": the system's)
};

Client::Client(Endpoint endpoint, std::string token, double timeout_s)
    : endpoint_(std::move(endpoint)),
      token_(std::move(token)),
      timeout_s_(timeout_s),
      kept_(std::make_shared<Kept>()) {}

std::string Client::Url() const {
  return std::string(endpoint_.tls ? "https://" : "http://") + endpoint_.host + ":" +
         std::to_string(endpoint_.port);
}

namespace {

Status FromHttp(int status, const std::string& body, const std::string& what) {
  std::string message;
  try {
    Json j = Json::parse(body);
    if (j.is_object() && j.contains(key::kError) && j[key::kError].is_string())
      message = j[key::kError];
  } catch (const std::exception&) {
  }
  if (message.empty()) message = body.empty() ? "HTTP " + std::to_string(status) : body;
  return StatusForHttp(status, what, message);
}

}  // namespace

StatusOr<std::string> Client::Call(const std::string& method, const std::string& path,
                                   const std::string* body) const {
  // HTTPS: the server's certificate is checked against the system's CAs, or the one
  // PALADIN_CA_FILE names (a server's own CA, docs/server.md "TLS").
  const char* ca_env = std::getenv("PALADIN_CA_FILE");
  const bool own_ca = endpoint_.tls && ca_env != nullptr && *ca_env != '\0';
  const std::string ca = own_ca ? ca_env : "";
  if (own_ca && access(ca.c_str(), R_OK) != 0) {
    return InvalidArgument("PALADIN_CA_FILE '" + ca + "' cannot be read");
  }
  // The kept connection if it checks the server as this call must, else a new one.
  std::unique_ptr<httplib::Client> connection;
  {
    const std::lock_guard<std::mutex> lock(kept_->mu);
    if (kept_->connection != nullptr && kept_->ca == ca) connection = std::move(kept_->connection);
  }
  if (connection == nullptr) {
    connection = std::make_unique<httplib::Client>(Url());
    connection->set_keep_alive(true);
    if (own_ca) connection->set_ca_cert_path(ca);
  }
  httplib::Client& http = *connection;
  const auto seconds = static_cast<time_t>(timeout_s_);
  const auto micros = static_cast<time_t>((timeout_s_ - static_cast<double>(seconds)) * 1e6);
  http.set_connection_timeout(seconds, micros);
  http.set_read_timeout(seconds, micros);
  http.set_write_timeout(seconds, micros);
  httplib::Headers headers;
  if (!token_.empty()) headers.emplace("Authorization", "Bearer " + token_);
  const std::string type = "application/json";
  const std::string& payload = body != nullptr ? *body : std::string("{}");
  const SigpipeBlock no_sigpipe;
  httplib::Result result = method == "GET"    ? http.Get(path, headers)
                           : method == "POST" ? http.Post(path, headers, payload, type)
                           : method == "PUT"  ? http.Put(path, headers, payload, type)
                                              : http.Delete(path, headers);
  const std::string what = method + " " + path;
  if (result) {
    // Answered: the connection may serve the next call (one that failed is dropped).
    const std::lock_guard<std::mutex> lock(kept_->mu);
    if (kept_->connection == nullptr) {
      kept_->connection = std::move(connection);
      kept_->ca = ca;
    }
  }
  if (!result) {
    std::string why = httplib::to_string(result.error());
    if (result.error() == httplib::Error::SSLServerVerification) {
      why += own_ca ? " (its certificate is not signed by PALADIN_CA_FILE's CA, or names another "
                      "host)"
                    : " (a server with its own CA: set PALADIN_CA_FILE to the CA's certificate)";
    }
    return Unavailable("cannot reach the Paladin server at " + Url() + " (" + what + "): " + why);
  }
  if (result->status < 200 || result->status >= 300) {
    return FromHttp(result->status, result->body, what);
  }
  return result->body;
}

namespace {

StatusOr<Json> Decode(StatusOr<std::string> body, const std::string& what) {
  if (!body.ok()) return body.status();
  if (body->empty()) return Json();
  try {
    return Json::parse(*body);
  } catch (const std::exception& e) {
    return Unavailable(what + ": the server's answer is not JSON: " + e.what());
  }
}

}  // namespace

StatusOr<Json> Client::Get(const std::string& path) const {
  return Decode(Call("GET", path, nullptr), "GET " + path);
}
StatusOr<Json> Client::Post(const std::string& path, const Json& body) const {
  const std::string text = body.dump();
  return Decode(Call("POST", path, &text), "POST " + path);
}
StatusOr<Json> Client::Put(const std::string& path, const Json& body) const {
  const std::string text = body.dump();
  return Decode(Call("PUT", path, &text), "PUT " + path);
}
StatusOr<Json> Client::Delete(const std::string& path) const {
  return Decode(Call("DELETE", path, nullptr), "DELETE " + path);
}
StatusOr<std::string> Client::GetText(const std::string& path) const {
  return Call("GET", path, nullptr);
}

std::string PaladinHome() {
  if (const char* home = std::getenv("PALADIN_HOME"); home != nullptr && *home != '\0') {
    return home;
  }
  const char* user_home = std::getenv("HOME");
  return std::string(user_home != nullptr ? user_home : "/tmp") + "/.paladin";
}

ClientConfig ResolveClientConfig(const std::string& url_flag, const std::string& token_flag) {
  ClientConfig config;
  std::ifstream in(PaladinHome() + "/client.json");
  if (in) {
    try {
      Json j = Json::parse(in);
      config.url = j.value(key::kUrl, "");
      config.token = j.value(key::kToken, "");
      config.ca_file = j.value(key::kCaFile, "");
    } catch (const std::exception&) {
    }
  }
  if (const char* url = std::getenv("PALADIN_SERVER"); url != nullptr && *url != '\0') {
    config.url = url;
  }
  if (const char* token = std::getenv("PALADIN_TOKEN"); token != nullptr && *token != '\0') {
    config.token = token;
  }
  if (!config.ca_file.empty()) setenv("PALADIN_CA_FILE", config.ca_file.c_str(), /*overwrite=*/0);
  if (!url_flag.empty()) config.url = url_flag;
  if (!token_flag.empty()) config.token = token_flag;
  if (config.url.empty()) config.url = "http://127.0.0.1:7070";
  return config;
}

}  // namespace paladin::api
