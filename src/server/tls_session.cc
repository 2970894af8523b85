#include "tls_session.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cstdio>

namespace paladin::server {

using api::OpenSslError;

StatusOr<std::unique_ptr<TlsContext>> TlsContext::Load(const std::string& cert_file,
                                                       const std::string& key_file) {
  if (cert_file.empty() || key_file.empty()) {
    return InvalidArgument("TLS needs both a certificate (--tls-cert) and its key (--tls-key)");
  }
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return Internal("TLS: " + OpenSslError());
  std::unique_ptr<TlsContext> out(new TlsContext(ctx));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  // No tickets: nothing is written after the handshake but answers.
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  // The pair is read again when its files change (a renewed certificate served without a
  // restart); the checks of a bad pair are ServingCertificate's.
  StatusOr<std::shared_ptr<api::ServingCertificate>> cert = api::ServingCertificate::Load(
      cert_file, key_file,
      [](const std::string& line) { std::fprintf(stderr, "paladin server: %s\n", line.c_str()); });
  if (!cert.ok()) return cert.status();
  out->cert_ = std::move(*cert);
  out->cert_->Install(ctx);
  return out;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

TlsSession::TlsSession(const TlsContext& context) : ssl_(SSL_new(context.get())) {
  if (ssl_ == nullptr) return;
  // The session owns both memory buffers: bytes in from the socket, bytes out to it.
  SSL_set_bio(ssl_, BIO_new(BIO_s_mem()), BIO_new(BIO_s_mem()));
  SSL_set_accept_state(ssl_);
}

TlsSession::~TlsSession() { SSL_free(ssl_); }

bool TlsSession::established() const { return ssl_ != nullptr && SSL_is_init_finished(ssl_); }

void TlsSession::Drain(std::string* to_send) {
  BIO* out = SSL_get_wbio(ssl_);
  char buf[16384];
  int n = 0;
  while ((n = BIO_read(out, buf, sizeof buf)) > 0) to_send->append(buf, static_cast<size_t>(n));
}

Status TlsSession::Receive(const char* data, size_t n, std::string* plain, std::string* to_send) {
  if (ssl_ == nullptr) return Internal("TLS: no session");
  if (n > 0 && BIO_write(SSL_get_rbio(ssl_), data, static_cast<int>(n)) != static_cast<int>(n)) {
    return Internal("TLS: cannot buffer what was received");
  }
  ERR_clear_error();
  char buf[16384];
  while (!closed_) {
    const int got = SSL_read(ssl_, buf, sizeof buf);
    if (got > 0) {
      plain->append(buf, static_cast<size_t>(got));
      continue;
    }
    const int error = SSL_get_error(ssl_, got);
    if (error == SSL_ERROR_WANT_READ) break;  // needs more bytes from the peer
    if (error == SSL_ERROR_ZERO_RETURN) {
      closed_ = true;
      break;
    }
    Drain(to_send);  // an alert, if OpenSSL made one
    return Unavailable(
        "TLS: " + (error == SSL_ERROR_SSL ? OpenSslError() : "error " + std::to_string(error)));
  }
  Drain(to_send);
  return Status::Ok();
}

Status TlsSession::Seal(const std::string& plain, bool close, std::string* to_send) {
  if (ssl_ == nullptr) return Internal("TLS: no session");
  ERR_clear_error();
  size_t done = 0;
  while (done < plain.size()) {
    // Into memory, so never short of room: SSL_write takes it all or fails.
    const int wrote = SSL_write(ssl_, plain.data() + done, static_cast<int>(plain.size() - done));
    if (wrote <= 0) return Unavailable("TLS: cannot seal the answer: " + OpenSslError());
    done += static_cast<size_t>(wrote);
  }
  if (close) (void)SSL_shutdown(ssl_);
  Drain(to_send);
  return Status::Ok();
}

}  // namespace paladin::server
