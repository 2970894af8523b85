// The server's HTTP/1.1 front. One event thread accepts connections and reads every request's
// head and body, each within a byte limit and a total time limit; a pool of workers runs the
// routes. A route is asked about a request as soon as its head is read (HttpAdmit), before any
// of its body: a refusal (no token, wrong scope, no such endpoint) is answered without reading
// the body. A client that sends slowly, or not at all, holds a connection, never a worker, and
// is dropped at its deadline. docs/server.md ("The HTTP front") says why it is not cpp-httplib's
// server.
//
// Thread safety: Start and Stop may be called from any thread; Stop is idempotent and is called
// by the destructor. HttpAdmit and the handlers it returns run on the worker threads,
// concurrently.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "http_wire.h"
#include "paladin/base/status.h"

namespace paladin::server {

// What a route decides from a request's head (method, path, query, headers).
struct HttpAdmission {
  std::optional<HttpResponse> refusal;  // answered at once; the body is not read
  // Otherwise: called once the whole body has arrived.
  std::function<HttpResponse(const HttpRequest&)> handle;
};

using HttpAdmit = std::function<HttpAdmission(HttpRequest& head)>;

struct HttpFrontOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int workers = 16;
  size_t max_head_bytes = 64 << 10;   // request line and headers (431 past it)
  size_t max_target_bytes = 8 << 10;  // the request target (414 past it)
  size_t max_body_bytes = 1 << 20;    // 413 past it, while reading, chunked or not
  double idle_timeout_s = 5;          // for the first byte of a request (keep-alive)
  double header_timeout_s = 10;       // from the first byte to the end of the head
  double body_timeout_s = 30;         // from the end of the head to the end of the body
  double write_timeout_s = 30;        // for the whole answer to be taken by the client
  int max_connections = 4096;         // more are closed as soon as they are accepted
  // From one peer address, so that one client cannot take every slot (each is cut anyway once
  // idle for idle_timeout_s); more from it are closed as soon as they are accepted.
  int max_connections_per_peer = 256;
  int max_requests_per_connection = 1000;
  // HTTPS: the certificate chain and key (PEM files); both empty: plain HTTP.
  std::string tls_cert_file;
  std::string tls_key_file;
};

// Counters since Start, for tests and /metrics.
struct HttpFrontStats {
  int64_t connections = 0;      // accepted
  int64_t timed_out = 0;        // dropped at a deadline
  int64_t refused_early = 0;    // answered before their body was read
  int64_t too_large = 0;        // 413
  int64_t over_peer_limit = 0;  // closed at accept: their peer held max_connections_per_peer
  int64_t tls_refused = 0;      // closed: their TLS handshake or record was broken or refused
};

class HttpFront {
 public:
  // Binds HOST:PORT and starts the event thread and the workers.
  static StatusOr<std::unique_ptr<HttpFront>> Start(const HttpFrontOptions& options,
                                                    HttpAdmit admit);
  ~HttpFront();
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  // Stops accepting, closes every connection, waits for the handlers in progress.
  void Stop();
  int port() const;
  HttpFrontStats stats() const;

  class Impl;

 private:
  explicit HttpFront(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace paladin::server
