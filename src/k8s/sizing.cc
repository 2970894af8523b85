// The webhook's question to Paladin's server for an `auto` pod (docs/kubernetes.md, design 7):
// the namespace's team from its labels, then GET /v1/sizing for the class, both within the
// webhook's short deadline (the API server waits on the webhook for every pod it creates).
#include <cctype>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "paladin/api/wire.h"
#include "paladin/k8s/scheduler.h"
#include "paladin/k8s/webhook.h"

namespace paladin::k8s {

namespace key = api::key;

namespace {

using Json = nlohmann::json;

// A query value: unreserved characters kept, every other byte %XX.
std::string QueryValue(const std::string& v) {
  std::string out;
  for (unsigned char c : v) {
    if (std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

StatusOr<std::string> TeamOf(const ApiClient* kube, const std::string& ns) {
  if (kube == nullptr) return TeamOfNamespace(ns, "");
  StatusOr<std::string> body = kube->Get("/api/v1/namespaces/" + ns);
  if (!body.ok()) {
    return Unavailable("namespace " + ns + " unreadable: " + body.status().message());
  }
  const Json n = Json::parse(*body, nullptr, false);
  const Json meta = n.is_object() ? n.value("metadata", Json::object()) : Json::object();
  const Json labels = meta.is_object() ? meta.value("labels", Json::object()) : Json::object();
  return TeamOfNamespace(ns, labels.is_object() ? labels.dump() : "");
}

}  // namespace

AutoSizer ServerSizer(std::shared_ptr<const ApiClient> kube, const api::Endpoint& server,
                      const std::string& token, double timeout_s) {
  auto client = std::make_shared<const api::Client>(server, token, timeout_s);
  return [kube = std::move(kube), client](const std::string& ns,
                                          const std::string& command) -> StatusOr<AutoSizing> {
    StatusOr<std::string> team = TeamOf(kube.get(), ns);
    if (!team.ok()) return team.status();
    StatusOr<Json> answer =
        client->Get("/v1/sizing?team=" + QueryValue(*team) + "&command=" + QueryValue(command));
    if (!answer.ok()) {
      return Unavailable("Paladin's server " + client->Url() + ": " + answer.status().message());
    }
    const Json& a = *answer;
    if (!a.is_object() || !a.contains(key::kBytes) || !a[key::kBytes].is_number_integer() ||
        a[key::kBytes].get<int64_t>() <= 0) {
      return Unavailable("Paladin's server " + client->Url() + ": no size in its answer");
    }
    AutoSizing s;
    s.bytes = a[key::kBytes].get<uint64_t>();
    auto text = [&a](const char* key, const std::string& otherwise) {
      return a.contains(key) && a[key].is_string() ? a[key].get<std::string>() : otherwise;
    };
    s.why = "Paladin's server, class " + text(key::kClass, *team + "/" + command) + ": " +
            text(key::kWhy, "(no reason given)");
    return s;
  };
}

}  // namespace paladin::k8s
