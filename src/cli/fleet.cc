// The fleet client commands: what they share (the server, the token, --json, errors and exit
// codes) and their registration. The commands themselves live in fleet_jobs.cc (submit, ps,
// show, logs, cancel, explain, events), fleet_moves.cc (job migrate|checkpoint|resume, drain),
// fleet_admin.cc (nodes, teams, quota, tokens) and fleet_top.cc (top).
#include "fleet.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <utility>

#include "commands.h"
#include "fleet_format.h"

namespace paladin::cli {

namespace {

api::Endpoint ResolveEndpoint(const api::ClientConfig& config, Status* error) {
  StatusOr<api::Endpoint> endpoint = api::ParseUrl(config.url);
  if (endpoint.ok()) return *endpoint;
  *error = InvalidArgument(endpoint.status().message());
  return {};
}

bool EnvSet(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0';
}

}  // namespace

FleetApi::FleetApi(std::string command, const FleetFlags& flags)
    : command_(std::move(command)),
      json_(flags.json),
      has_token_(!api::ResolveClientConfig(flags.server, flags.token).token.empty()),
      configured_(FleetServerConfigured(flags)),
      client_([&] {
        const api::ClientConfig config = api::ResolveClientConfig(flags.server, flags.token);
        return api::Client(ResolveEndpoint(config, &setup_error_), config.token);
      }()) {}

StatusOr<api::Json> FleetApi::Clean(StatusOr<api::Json> answer, const std::string& what) const {
  if (answer.ok()) return answer;
  const Status& s = answer.status();
  std::string message = s.message();
  const std::string prefix = what + ": ";
  if (message.rfind(prefix, 0) == 0) message = message.substr(prefix.size());
  if (s.code() == StatusCode::kUnauthenticated && !has_token_) {
    message += " (no token: pass --token, set PALADIN_TOKEN, or run paladin up)";
  }
  return Status(s.code(), message);
}

StatusOr<api::Json> FleetApi::Get(const std::string& path) const {
  if (!setup_error_.ok()) return setup_error_;
  return Clean(client_.Get(path), "GET " + path);
}

StatusOr<api::Json> FleetApi::Post(const std::string& path, const api::Json& body) const {
  if (!setup_error_.ok()) return setup_error_;
  return Clean(client_.Post(path, body), "POST " + path);
}

StatusOr<api::Json> FleetApi::Put(const std::string& path, const api::Json& body) const {
  if (!setup_error_.ok()) return setup_error_;
  return Clean(client_.Put(path, body), "PUT " + path);
}

StatusOr<api::Json> FleetApi::Delete(const std::string& path) const {
  if (!setup_error_.ok()) return setup_error_;
  return Clean(client_.Delete(path), "DELETE " + path);
}

int FleetApi::Fail(const Status& status) const {
  Say(fleet::Printable(status.message()));
  return ExitCodeFor(status);
}

void FleetApi::Say(const std::string& line) const {
  std::fprintf(stderr, "paladin %s: %s\n", command_.c_str(), line.c_str());
}

void FleetApi::PrintJson(const api::Json& j) {
  // Strings from the server may hold invalid UTF-8; replace it rather than throw.
  std::cout << j.dump(2, ' ', false, api::Json::error_handler_t::replace) << "\n";
  std::cout.flush();
}

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kUnauthenticated:
    case StatusCode::kPermissionDenied:
      return 3;
    case StatusCode::kInvalidArgument:
      return 2;
    default:
      return 1;
  }
}

void AddFleetFlags(CLI::App* cmd, FleetFlags* flags) {
  cmd->add_option("--server", flags->server,
                  "Paladin server URL, http://HOST:PORT (default: $PALADIN_SERVER, then "
                  "$PALADIN_HOME/client.json, then http://127.0.0.1:7070)");
  cmd->add_option("--token", flags->token,
                  "API token, pal_... (default: $PALADIN_TOKEN, then $PALADIN_HOME/client.json)");
  cmd->add_flag("--json", flags->json, "Print the API's JSON answer (pretty) instead of tables");
}

bool FleetServerConfigured(const FleetFlags& flags) {
  if (!flags.server.empty() || EnvSet("PALADIN_SERVER")) return true;
  std::error_code ec;
  return std::filesystem::exists(api::PaladinHome() + "/client.json", ec);
}

bool LooksLikeFleetJob(const std::string& job) {
  if (job.size() < 3 || job.rfind("j-", 0) != 0) return false;
  for (size_t i = 2; i < job.size(); ++i) {
    if (job[i] < '0' || job[i] > '9') return false;
  }
  return true;
}

double FleetNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool HasSubcommand(CLI::App& app, const std::string& name) {
  return !app.get_subcommands([&name](CLI::App* sub) { return sub->check_name(name); }).empty();
}

int Guarded(const std::string& command, const std::function<int()>& body) {
  try {
    return body();
  } catch (const api::Json::exception& e) {
    // The accessors in fleet_format.h do not throw; this is the boundary for anything else.
    std::fprintf(stderr, "paladin %s: unexpected answer from the server: %s\n", command.c_str(),
                 e.what());
    return 1;
  }
}

void RegisterFleet(CLI::App& app, int* exit_code) {
  RegisterFleetJobs(app, exit_code);
  RegisterFleetMoves(app, exit_code);
  RegisterFleetPods(app, exit_code);
  RegisterFleetAdmin(app, exit_code);
  RegisterFleetTop(app, exit_code);
}

}  // namespace paladin::cli
