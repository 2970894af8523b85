// Wiring: the data directory, the store, the first-start tokens, the HTTP server and the
// scheduling loop.
#include "paladin/server/server.h"

#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "api.h"
#include "control.h"
#include "paladin/api/wire.h"
#include "paladin/server/validate.h"
#include "pods.h"

namespace paladin::server {

namespace key = api::key;

struct Server::Impl {
  ServerOptions options;
  // The pods first: the control plane asks them for each team's pods (its quota).
  std::unique_ptr<PodBook> pods;
  std::unique_ptr<Control> control;
  std::unique_ptr<HttpFront> http;
  std::thread loop_thread;
  std::atomic<bool> stopping{false};
  int port = 0;
  std::string host;
  std::string admin_token;
  std::string agent_token;
  bool created_tokens = false;
};

namespace {

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' ')) {
    line.pop_back();
  }
  return line;
}

Status WritePrivate(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return IoError("cannot write " + tmp);
    out << text << "\n";
    if (!out.flush()) return IoError("cannot write " + tmp);
  }
  if (chmod(tmp.c_str(), 0600) != 0) return IoError("cannot chmod " + tmp);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return IoError("cannot rename " + tmp + ": " + ec.message());
  return Status::Ok();
}

// The token in `path` when it is still valid, else a new token of `scope` written there.
StatusOr<std::string> EnsureToken(Control& control, const std::string& path,
                                  const std::string& scope, const std::string& name,
                                  bool* created) {
  const std::string existing = ReadFirstLine(path);
  if (!existing.empty()) {
    StatusOr<Principal> p = control.Authenticate(existing);
    if (p.ok() && p->Scope() == scope) return existing;
  }
  StatusOr<Json> token = control.CreateToken(scope, name);
  if (!token.ok()) return token.status();
  const std::string secret = (*token)[key::kToken].get<std::string>();
  PALADIN_RETURN_IF_ERROR(WritePrivate(path, secret));
  *created = true;
  return secret;
}

// The admin token in `path` (--admin-token-file): a secret, so the file must be one that only
// its owner may change and others may not read, holding one line `pal_` + 64 lowercase hex
// digits (NewToken's form), with or without a final newline.
StatusOr<std::string> ReadGivenToken(const std::string& path) {
  const std::string what = "--admin-token-file '" + path + "'";
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return InvalidArgument(what + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return InvalidArgument(what + ": not a regular file");
  if ((st.st_mode & (S_IWGRP | S_IROTH | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return InvalidArgument(what + ": mode " + mode +
                           ": a token file must not be writable by its group nor readable or "
                           "writable by others (0600 or 0400; a Secret's defaultMode 0400)");
  }
  constexpr size_t kTokenChars = 4 + 64;
  if (st.st_size > static_cast<off_t>(kTokenChars + 2)) {
    return InvalidArgument(what + ": " + std::to_string(st.st_size) +
                           " bytes: expected one token, pal_ and 64 hex digits");
  }
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return InvalidArgument(what + ": unreadable");
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty() && text.back() == '\r') text.pop_back();
  const bool hex = text.size() == kTokenChars && text.rfind("pal_", 0) == 0 &&
                   text.find_first_not_of("0123456789abcdef", 4) == std::string::npos;
  if (!hex) {
    return InvalidArgument(what + ": expected one line, pal_ and 64 lowercase hex digits (" +
                           std::to_string(text.size()) +
                           " characters read; deploy/k8s/server-token.sh makes one)");
  }
  return text;
}

StatusOr<std::pair<std::string, int>> SplitListen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgument("--listen '" + listen + "': expected HOST:PORT");
  }
  const std::string port = listen.substr(colon + 1);
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 0 || p > 65535) {
    return InvalidArgument("--listen '" + listen + "': port must be 0-65535");
  }
  return std::make_pair(listen.substr(0, colon), static_cast<int>(p));
}

}  // namespace

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { Stop(); }

StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  if (options.data_dir.empty()) return InvalidArgument("--data: a directory is required");
  if (options.lease_s <= 0 || options.heartbeat_s <= 0 || options.heartbeat_s >= options.lease_s) {
    return InvalidArgument("--heartbeat must be positive and shorter than --lease");
  }
  if (options.checkpoint_every_s < 0) return InvalidArgument("--checkpoint-every: negative");
  if (options.keep_checkpoints < 1) return InvalidArgument("--keep-checkpoints: at least 1");
  if (options.move_mode != "auto" && options.move_mode != "post-copy" &&
      options.move_mode != "pre-copy" && options.move_mode != "image") {
    return InvalidArgument("--move-mode: expected auto, post-copy, pre-copy or image");
  }
  if (options.http_threads < 2 || options.http_threads > 4096) {
    return InvalidArgument("--http-threads: expected 2 to 4096");
  }
  if (!(options.http_header_timeout_s > 0) || !(options.http_body_timeout_s > 0)) {
    return InvalidArgument("--http-header-timeout and --http-body-timeout: must be positive");
  }
  if (StatusOr<RankSubnet> subnet = ParseRankSubnet(options.rank_subnet); !subnet.ok()) {
    return InvalidArgument("--rank-subnet: " + subnet.status().message());
  }
  StatusOr<std::pair<std::string, int>> listen = SplitListen(options.listen);
  if (!listen.ok()) return listen.status();
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  std::error_code ec;
  std::filesystem::create_directories(options.data_dir, ec);
  if (ec) return IoError("cannot create " + options.data_dir + ": " + ec.message());
  const std::string data = std::filesystem::absolute(options.data_dir).string();
  ControlOptions control_options;
  control_options.lease_s = options.lease_s;
  control_options.heartbeat_s = options.heartbeat_s;
  control_options.checkpoint_every_s = options.checkpoint_every_s;
  control_options.keep_checkpoints = options.keep_checkpoints;
  control_options.checkpoint_store =
      options.checkpoint_store.empty()
          ? data + "/checkpoints"
          : std::filesystem::absolute(options.checkpoint_store).string();
  control_options.policy = options.policy;
  control_options.move_mode = options.move_mode;
  control_options.rank_subnet = options.rank_subnet;
  control_options.node_tokens_only = options.node_tokens_only;
  if (options.fault.rfind("crash-at:", 0) == 0) control_options.crash_at = options.fault.substr(9);
  impl->pods = std::make_unique<PodBook>([] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  });
  PodBook* pods = impl->pods.get();
  control_options.team_pods = [pods](const std::string& team) { return pods->TeamHeld(team); };
  control_options.class_pods = [pods](const std::string& key) { return pods->ClassPods(key); };
  std::filesystem::create_directories(control_options.checkpoint_store, ec);
  if (ec) {
    return IoError("cannot create " + control_options.checkpoint_store + ": " + ec.message());
  }
  StatusOr<std::unique_ptr<Store>> store = Store::Open(data + "/paladin.db");
  if (!store.ok()) return store.status();
  StatusOr<std::unique_ptr<Control>> control =
      Control::Create(std::move(*store), std::move(control_options));
  if (!control.ok()) return control.status();
  impl->control = std::move(*control);
  // The pods' ledger of moves writes to the same database through a connection of its own.
  StatusOr<std::unique_ptr<Store>> ledger = Store::Open(data + "/paladin.db");
  if (!ledger.ok()) return ledger.status();
  PALADIN_RETURN_IF_ERROR(pods->KeepMovesIn(std::move(*ledger)));
  if (options.admin_token_file.empty()) {
    StatusOr<std::string> admin = EnsureToken(*impl->control, data + "/admin.token", "admin",
                                              "admin (first start)", &impl->created_tokens);
    if (!admin.ok()) return admin.status();
    impl->admin_token = *admin;
  } else {
    StatusOr<std::string> given = ReadGivenToken(options.admin_token_file);
    if (!given.ok()) return given.status();
    PALADIN_RETURN_IF_ERROR(
        impl->control->AdoptToken(*given, "admin", "admin (--admin-token-file)"));
    impl->admin_token = *given;
  }
  if (!options.node_tokens_only) {
    StatusOr<std::string> agent = EnsureToken(*impl->control, data + "/agent.token", "agent",
                                              "agents (first start)", &impl->created_tokens);
    if (!agent.ok()) return agent.status();
    impl->agent_token = *agent;
  }

  impl->host = listen->first;
  HttpFrontOptions http;
  http.host = listen->first;
  http.port = listen->second;
  http.workers = options.http_threads;
  http.max_body_bytes = kMaxBodyBytes;
  http.header_timeout_s = options.http_header_timeout_s;
  http.body_timeout_s = options.http_body_timeout_s;
  http.tls_cert_file = options.tls_cert_file;
  http.tls_key_file = options.tls_key_file;
  StatusOr<std::unique_ptr<HttpFront>> front =
      HttpFront::Start(http, MakeRoutes(*impl->control, *impl->pods));
  if (!front.ok()) {
    if (front.status().code() == StatusCode::kInvalidArgument) return front.status();  // TLS files
    return Unavailable("cannot listen on " + options.listen + ": " + front.status().message());
  }
  impl->http = std::move(*front);
  impl->port = impl->http->port();
  std::unique_ptr<Server> server(new Server(std::move(impl)));
  Impl* s = server->impl_.get();
  PALADIN_RETURN_IF_ERROR(WritePrivate(data + "/server.url", server->url()));
  s->loop_thread = std::thread([s] {
    while (!s->stopping.load()) {
      s->control->WaitForWork(s->options.schedule_interval_s);
      if (s->stopping.load()) break;
      s->control->Tick();
    }
  });
  return server;
}

void Server::Stop() {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  impl_->control->Wake();
  impl_->http->Stop();
  if (impl_->loop_thread.joinable()) impl_->loop_thread.join();
}

int Server::port() const { return impl_->port; }

std::string Server::url() const {
  return std::string(impl_->options.tls_cert_file.empty() ? "http://" : "https://") + impl_->host +
         ":" + std::to_string(impl_->port);
}

std::string Server::admin_token_path() const {
  if (!impl_->options.admin_token_file.empty()) {
    return std::filesystem::absolute(impl_->options.admin_token_file).string();
  }
  return std::filesystem::absolute(impl_->options.data_dir).string() + "/admin.token";
}
std::string Server::agent_token_path() const {
  return std::filesystem::absolute(impl_->options.data_dir).string() + "/agent.token";
}
std::string Server::admin_token() const { return impl_->admin_token; }
std::string Server::agent_token() const { return impl_->agent_token; }
bool Server::created_tokens() const { return impl_->created_tokens; }

}  // namespace paladin::server
