// TLS for the server's HTTP front, over memory buffers: the front's event thread reads and
// writes its sockets as for plain HTTP, and a session turns the bytes received into the
// request's plaintext and an answer's plaintext into the bytes to send (OpenSSL with memory
// BIOs), so that a slow or silent TLS client holds a connection, never a thread, exactly as a
// plain one does. docs/server.md ("TLS").
//
// Thread safety: a TlsContext is shared read-only by the sessions once loaded; a session belongs
// to the event thread.
#pragma once

#include <memory>
#include <string>

#include "paladin/api/serving_cert.h"
#include "paladin/base/status.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace paladin::server {

class TlsContext {
 public:
  // The server's certificate chain and key (PEM files), read again when the files change
  // (api::ServingCertificate); TLS 1.2 and later, no renegotiation, no session tickets. An error
  // names the file and OpenSSL's reason.
  static StatusOr<std::unique_ptr<TlsContext>> Load(const std::string& cert_file,
                                                    const std::string& key_file);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;
  SSL_CTX* get() const { return ctx_; }

 private:
  explicit TlsContext(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* ctx_;
  std::shared_ptr<api::ServingCertificate> cert_;  // serves ctx_'s handshakes
};

class TlsSession {
 public:
  explicit TlsSession(const TlsContext& context);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // Takes `n` bytes received from the peer: the plaintext they complete is appended to *plain,
  // what the session must send back (its handshake) to *to_send. An error is a peer whose TLS
  // is broken or refused (the connection is then closed); a close_notify sets closed().
  Status Receive(const char* data, size_t n, std::string* plain, std::string* to_send);
  // Seals `plain` (and, with `close`, a close_notify after it) into bytes appended to *to_send.
  Status Seal(const std::string& plain, bool close, std::string* to_send);
  bool closed() const { return closed_; }
  bool established() const;

 private:
  void Drain(std::string* to_send);
  SSL* ssl_ = nullptr;
  bool closed_ = false;
};

}  // namespace paladin::server
