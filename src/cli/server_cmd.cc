// `paladin server`: the control plane (include/paladin/server/server.h, docs/server.md).
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "paladin/server/server.h"

namespace paladin::cli {
namespace {

int RunServer(const server::ServerOptions& options) {
  // Block the stop signals before any thread starts, so only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  StatusOr<std::unique_ptr<server::Server>> srv = server::Server::Start(options);
  if (!srv.ok()) {
    Say("server", srv.status().message());
    return srv.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  const std::string agents =
      options.node_tokens_only
          ? "agents: a token per node only (paladin tokens create --scope agent:NODE)"
          : "agents (fleet-wide) in " + (*srv)->agent_token_path();
  if (!options.admin_token_file.empty()) {
    Say("server", "tokens: admin from " + (*srv)->admin_token_path() + " (--admin-token-file), " +
                      agents + ((*srv)->created_tokens() ? " (created, mode 0600)" : ""));
  } else if ((*srv)->created_tokens()) {
    Say("server",
        "created tokens (mode 0600): admin in " + (*srv)->admin_token_path() + ", " + agents);
  } else {
    Say("server", "tokens: admin in " + (*srv)->admin_token_path() + ", " + agents);
  }
  Say("server", "listening on " + (*srv)->url());
  int signal = 0;
  sigwait(&stop_signals, &signal);
  Say("server", std::string("stopping (") + (signal == SIGINT ? "SIGINT" : "SIGTERM") + ")");
  (*srv)->Stop();
  return 0;
}

}  // namespace

void RegisterServer(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<server::ServerOptions>();
  CLI::App* cmd = app.add_subcommand(
      "server", "Run the control plane: REST API, scheduler, migrations, dashboard");
  cmd->add_option("--listen", options->listen, "HOST:PORT to serve on (port 0: any free port)")
      ->capture_default_str();
  cmd->add_option("--data", options->data_dir,
                  "Data directory (paladin.db, admin.token, agent.token, server.url)")
      ->required();
  cmd->add_option("--admin-token-file", options->admin_token_file,
                  "Take the admin token from FILE (one line: pal_ and 64 hex digits; mode 0600 "
                  "or 0400, e.g. a Kubernetes Secret) instead of making DATA/admin.token; a "
                  "different token there at a later start replaces the old one");
  cmd->add_option("--tls-cert", options->tls_cert_file,
                  "Serve HTTPS with this certificate chain (PEM; with --tls-key). Clients trust "
                  "it through the system's CAs or PALADIN_CA_FILE");
  cmd->add_option("--tls-key", options->tls_key_file, "The certificate's private key (PEM)");
  cmd->add_option("--lease", options->lease_s, "Seconds without a heartbeat before a node is dead")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--heartbeat", options->heartbeat_s, "Agents' heartbeat period, seconds")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--checkpoint-every", options->checkpoint_every_s,
                  "Checkpoint running jobs every SECONDS (0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--keep-checkpoints", options->keep_checkpoints, "Checkpoints kept per job")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--checkpoint-store", options->checkpoint_store,
                  "Where checkpoint images go (default DATA/checkpoints; shared by the agents)");
  cmd->add_option("--http-threads", options->http_threads,
                  "HTTP worker threads (they run requests; open connections hold none)")
      ->capture_default_str();
  cmd->add_option("--http-header-timeout", options->http_header_timeout_s,
                  "Seconds a client has to send a request's head, from its first byte")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--http-body-timeout", options->http_body_timeout_s,
                  "Seconds a client has to send a request's body, from the end of its head")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--node-tokens-only", options->node_tokens_only,
                "Refuse the fleet-wide agent token: each agent uses a token of its own node "
                "(paladin tokens create --scope agent:NODE); no DATA/agent.token is made");
  cmd->add_option("--policy", options->policy, "Placement policy (paladin, FGD, BestFit, ...)")
      ->capture_default_str();
  cmd->add_option("--rank-subnet", options->rank_subnet,
                  "Where gang ranks take their stable addresses from (A.B.C.D/P, P 8 to 30)")
      ->capture_default_str();
  cmd->add_option("--move-mode", options->move_mode,
                  "How moves carry a job's memory: auto (post-copy where both agents have the "
                  "patched CRIU and the job holds no GPU state, else pre-copy), post-copy (only "
                  "so), pre-copy (streamed into the destination's page server where both agents "
                  "can, else by image), image (pre-copy by image). docs/server.md")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "post-copy", "pre-copy", "image"}));
  cmd->callback([options, exit_code] {
    if (const char* fault = std::getenv("PALADIN_SERVER_FAULT"); fault != nullptr) {
      options->fault = fault;
    }
    *exit_code = RunServer(*options);
  });
}

}  // namespace paladin::cli
