// `paladin server`: the control plane. REST API (docs/formats/api.md), SQLite store, scheduling
// loop over the core packer, migration orchestrator, failure detector, accounting, /metrics and
// the dashboard page. docs/server.md describes how it works.
//
// Thread safety: Start, Stop and the accessors may be called from any thread; Stop is idempotent
// and is also called by the destructor.
#pragma once

#include <memory>
#include <string>

#include "paladin/base/status.h"

namespace paladin::server {

struct ServerOptions {
  std::string listen = "127.0.0.1:7070";  // HOST:PORT; port 0 picks a free one
  std::string data_dir;                   // paladin.db, admin.token, agent.token, server.url
  double lease_s = 6;                     // an agent silent this long is dead
  double heartbeat_s = 1;                 // told to agents
  double checkpoint_every_s = 0;          // periodic checkpoints of running jobs; 0 = off
  int keep_checkpoints = 3;               // images kept per job
  std::string checkpoint_store;           // default DATA/checkpoints
  std::string policy = "paladin";         // a core::PolicyNames() entry
  // How fleet moves carry a job's memory: "auto" (post-copy where both agents can and the job
  // holds no GPU state, else pre-copy), "post-copy" (the same, but a move between nodes that
  // cannot is refused), "pre-copy" (never post-copy), "image" (pre-copy by image). A pre-copy
  // move streams the memory into the destination's page server where both agents can (their
  // registration's "stream"), except with "image". docs/lazy_migration.md, "Fleet moves".
  std::string move_mode = "auto";
  // Where gang ranks take their stable addresses from (docs/server.md, "Gangs"): A.B.C.D/P,
  // P from 8 to 30. Every agent routes these addresses to the nodes their ranks run on.
  std::string rank_subnet = "10.231.0.0/16";
  std::string fault;  // "crash-at:<step>" (PALADIN_SERVER_FAULT), tests only
  double schedule_interval_s = 0.5;
  // HTTP worker threads: they run the routes. Reading requests holds none (docs/server.md,
  // "The HTTP front"), so an open connection, idle or slow, costs no worker.
  int http_threads = 16;
  // Total time a client has to send a request's head (from its first byte), and its body (from
  // the end of the head); past either it gets a 408 and the connection is closed.
  double http_header_timeout_s = 10;
  double http_body_timeout_s = 30;
  // Refuse the fleet-wide `agent` token, which speaks for every node: each agent then needs a
  // token of its own node (scope agent:NODE), and no DATA/agent.token is created.
  bool node_tokens_only = false;
  // An admin token made elsewhere (a Kubernetes Secret: deploy/k8s/server-token.sh), used
  // instead of DATA/admin.token, which is then neither made nor read: one line `pal_` and 64
  // lowercase hex digits, in a regular file (a link to one is followed) that only its owner
  // may write and others may not read. A different token in the file at a later start replaces
  // the one it held before (that one stops working).
  std::string admin_token_file;
  // HTTPS (docs/server.md, "TLS"): the server's certificate chain and key, PEM files; both empty:
  // plain HTTP. Its URL (DATA/server.url) is then https://.
  std::string tls_cert_file;
  std::string tls_key_file;
};

class Server {
 public:
  // Opens (or creates) the data directory and its database, creates the admin and agent tokens
  // on first start (DATA/admin.token and DATA/agent.token, mode 0600; no agent token under
  // node_tokens_only; the admin token is admin_token_file's when given, refused naming what is
  // wrong with the file), binds the listening socket, writes DATA/server.url, and starts serving
  // and scheduling. Blocks only on the disk.
  static StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Stops serving, finishes the request in flight, stops the scheduling loop.
  void Stop();

  int port() const;
  std::string url() const;  // http://HOST:PORT
  // Paths of the token files, and the tokens they hold.
  std::string admin_token_path() const;
  std::string agent_token_path() const;
  std::string admin_token() const;
  std::string agent_token() const;  // "" under node_tokens_only
  // Whether the tokens were created by this start (first start of a data directory).
  bool created_tokens() const;

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The dashboard page compiled into the server (src/server/dashboard.html).
const char* DashboardHtml();

}  // namespace paladin::server
