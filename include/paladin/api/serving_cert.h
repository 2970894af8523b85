// A TLS server's certificate and key that follow their files: each handshake is served with the
// pair the files hold now, read again when either file changed (its device, inode, size or
// modification time) since the pair in use was read. A Kubernetes Secret mounted in a pod is
// replaced so (the kubelet swaps a symbolic link), and a certificate renewed into it is served
// from the next connection on, without a restart. A pair that does not load (a key that is not
// the certificate's, a half-written file, an expired certificate) is not taken: the last good
// pair stays in use and the reason is logged once per change of the files. Used by Paladin's
// server (docs/server.md, "TLS") and the Kubernetes webhook (docs/kubernetes.md).
#ifndef PALADIN_API_SERVING_CERT_H_
#define PALADIN_API_SERVING_CERT_H_

#include <functional>
#include <memory>
#include <string>

#include "paladin/base/status.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace paladin::api {

// OpenSSL's first queued error as text ("unknown error" when none), and the queue emptied.
std::string OpenSslError();

class ServingCertificate {
 public:
  // Loads the pair once: an error names the file and what is wrong (unreadable, not PEM, a key
  // that is not the certificate's, expired or not yet valid). `log` (may be empty) gets a line
  // per reload and per refused change.
  static StatusOr<std::shared_ptr<ServingCertificate>> Load(
      const std::string& cert_file, const std::string& key_file,
      std::function<void(const std::string&)> log = nullptr);
  ~ServingCertificate();
  ServingCertificate(const ServingCertificate&) = delete;
  ServingCertificate& operator=(const ServingCertificate&) = delete;

  // Serves `ctx`'s handshakes with the current pair (a certificate callback). This object must
  // outlive every handshake on ctx.
  void Install(SSL_CTX* ctx);
  // How many times a changed pair was taken since Load.
  int reloads() const;

  struct Impl;

 private:
  explicit ServingCertificate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace paladin::api

#endif  // PALADIN_API_SERVING_CERT_H_
