// The fleet client commands (`paladin submit`, `ps`, `job migrate`, `top`, ...): the CLI side of
// the REST API in docs/formats/api.md. Each command resolves the server and token (flags >
// $PALADIN_SERVER/$PALADIN_TOKEN > $PALADIN_HOME/client.json), calls the API, and prints either
// tables for people or the API's JSON (--json) for scripts.
//
// Exit codes: 0 done, 1 failed (an unreachable server, an unknown job, a refused state), 2 bad
// input (a flag, or a request the server calls malformed), 3 authentication or permission.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "paladin/api/client.h"
#include "paladin/base/status.h"

namespace paladin::cli {

// The flags every fleet command takes.
struct FleetFlags {
  std::string server;  // --server URL (empty: $PALADIN_SERVER, client.json, 127.0.0.1:7070)
  std::string token;   // --token TOKEN (empty: $PALADIN_TOKEN, client.json)
  bool json = false;   // --json: print the API's JSON, pretty
};

// A Client for one command, with errors printed as "paladin COMMAND: MESSAGE". Calls return the
// decoded body or the error with the "METHOD /path: " prefix removed when the server answered
// (the server's own message names the object and the field).
class FleetApi {
 public:
  FleetApi(std::string command, const FleetFlags& flags);

  StatusOr<api::Json> Get(const std::string& path) const;
  StatusOr<api::Json> Post(const std::string& path, const api::Json& body) const;
  StatusOr<api::Json> Put(const std::string& path, const api::Json& body) const;
  StatusOr<api::Json> Delete(const std::string& path) const;

  // Prints the error on stderr and returns the exit code for it (ExitCodeFor).
  int Fail(const Status& status) const;
  // "paladin COMMAND: LINE" on stderr.
  void Say(const std::string& line) const;
  // Prints `j` pretty on stdout (the --json form of every command).
  static void PrintJson(const api::Json& j);

  const std::string& command() const { return command_; }
  std::string url() const { return client_.Url(); }
  bool json() const { return json_; }
  // Whether a URL or a token came from a flag, the environment or client.json.
  bool configured() const { return configured_; }

 private:
  StatusOr<api::Json> Clean(StatusOr<api::Json> answer, const std::string& what) const;

  std::string command_;
  bool json_;
  bool has_token_;
  bool configured_;
  Status setup_error_;  // a bad --server URL: every call returns it
  api::Client client_;
};

// 3 for Unauthenticated/PermissionDenied, 2 for InvalidArgument, 1 otherwise (0 for OK).
int ExitCodeFor(const Status& status);

// Adds --server, --token and --json to `cmd`.
void AddFleetFlags(CLI::App* cmd, FleetFlags* flags);

// True when a server is configured for this process: a flag, $PALADIN_SERVER or client.json.
// `paladin checkpoint` uses this with LooksLikeFleetJob to hand a server's job over to the
// functions below (`paladin migrate` says which it is: --to NODE[/GPU] or --peer HOST:PORT).
bool FleetServerConfigured(const FleetFlags& flags);
// "j-000001": the form of the server's job ids (local jobs are names or pids).
bool LooksLikeFleetJob(const std::string& job);

// `paladin job migrate JOB --to NODE[/GPU]`: asks the server to move the job, then (unless
// `wait` is false) follows each step until it is done or failed. Returns the exit code.
int FleetMigrate(const std::string& job, const std::string& to, const FleetFlags& flags,
                 bool wait = true, double timeout_s = 0);
// `paladin job checkpoint JOB`: checkpoints and stops the job (it ends `checkpointed`).
int FleetCheckpoint(const std::string& job, const FleetFlags& flags, bool wait = true,
                    double timeout_s = 0);
// `paladin job resume JOB`: restores a checkpointed job on the best node.
int FleetResume(const std::string& job, const FleetFlags& flags, bool wait = true,
                double timeout_s = 0);

// The command groups (src/cli/fleet_*.cc), added by RegisterFleet.
void RegisterFleetJobs(CLI::App& app, int* exit_code);  // submit ps show logs cancel explain events
void RegisterFleetMoves(CLI::App& app, int* exit_code);  // job migrate|checkpoint|resume, drain
void RegisterFleetPods(CLI::App& app, int* exit_code);   // pods, pods move, pods moves
void RegisterFleetAdmin(CLI::App& app, int* exit_code);  // nodes teams quota tokens
void RegisterFleetTop(CLI::App& app, int* exit_code);    // top

// Runs a command's body: a JSON exception that escapes it (a server answering an unexpected
// shape) becomes "paladin COMMAND: unexpected answer ..." and exit code 1.
int Guarded(const std::string& command, const std::function<int()>& body);

// The wall clock as Unix seconds (the API's times are Unix seconds).
double FleetNow();

// Whether `app` already has a subcommand called `name` (another file may own it).
bool HasSubcommand(CLI::App& app, const std::string& name);

}  // namespace paladin::cli
