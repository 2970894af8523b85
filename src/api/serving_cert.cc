#include "paladin/api/serving_cert.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <chrono>
#include <mutex>
#include <tuple>
#include <utility>

namespace paladin::api {

namespace {

using Clock = std::chrono::steady_clock;

// A refused change is tried again at most this often while the files stay as they are.
constexpr auto kRetryEvery = std::chrono::seconds(1);

// A certificate's time as OpenSSL prints it ("Dec  5 07:00:00 2026 GMT").
std::string TimeText(const ASN1_TIME* when) {
  std::string out;
  BIO* text = BIO_new(BIO_s_mem());
  if (text != nullptr && ASN1_TIME_print(text, when) == 1) {
    char buf[64];
    const int n = BIO_read(text, buf, sizeof buf);
    if (n > 0) out.assign(buf, static_cast<size_t>(n));
  }
  BIO_free(text);
  return out;
}

}  // namespace

std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "unknown error";
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

// Named, not anonymous: ServingCertificate::Impl holds them (a unity build includes this file
// in a batch).
namespace cert_files {

// What identifies a file's content for the purpose of noticing a change.
struct Stamp {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = -1;
  int64_t mtime_ns = 0;
  bool operator==(const Stamp& o) const {
    return std::tie(dev, ino, size, mtime_ns) == std::tie(o.dev, o.ino, o.size, o.mtime_ns);
  }
};

Stamp StampOf(const std::string& path) {
  struct stat st {};
  Stamp s;
  if (stat(path.c_str(), &st) != 0) return s;
  s.dev = st.st_dev;
  s.ino = st.st_ino;
  s.size = st.st_size;
  s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return s;
}

struct Pair {
  X509* leaf = nullptr;
  STACK_OF(X509) * chain = nullptr;
  EVP_PKEY* key = nullptr;
  ~Pair() {
    X509_free(leaf);
    sk_X509_pop_free(chain, X509_free);
    EVP_PKEY_free(key);
  }
};

StatusOr<std::shared_ptr<const Pair>> ReadPair(const std::string& cert_file,
                                               const std::string& key_file) {
  ERR_clear_error();
  auto pair = std::make_shared<Pair>();
  BIO* in = BIO_new_file(cert_file.c_str(), "r");
  if (in == nullptr) return InvalidArgument("TLS certificate " + cert_file + ": " + OpenSslError());
  pair->leaf = PEM_read_bio_X509(in, nullptr, nullptr, nullptr);
  if (pair->leaf == nullptr) {
    BIO_free(in);
    return InvalidArgument("TLS certificate " + cert_file + ": " + OpenSslError());
  }
  pair->chain = sk_X509_new_null();
  while (X509* more = PEM_read_bio_X509(in, nullptr, nullptr, nullptr)) {
    sk_X509_push(pair->chain, more);
  }
  ERR_clear_error();  // the end of the file reads as an error
  BIO_free(in);
  in = BIO_new_file(key_file.c_str(), "r");
  if (in == nullptr) {
    return InvalidArgument("TLS key " + key_file + " (of certificate " + cert_file +
                           "): " + OpenSslError());
  }
  pair->key = PEM_read_bio_PrivateKey(in, nullptr, nullptr, nullptr);
  BIO_free(in);
  if (pair->key == nullptr) {
    return InvalidArgument("TLS key " + key_file + " (of certificate " + cert_file +
                           "): " + OpenSslError());
  }
  // An expired certificate (or one not valid yet) would fail every client's check: said here,
  // once, rather than as each client's handshake failure.
  if (X509_cmp_current_time(X509_get0_notAfter(pair->leaf)) < 0) {
    return InvalidArgument("TLS certificate " + cert_file + " expired on " +
                           TimeText(X509_get0_notAfter(pair->leaf)));
  }
  if (X509_cmp_current_time(X509_get0_notBefore(pair->leaf)) > 0) {
    return InvalidArgument("TLS certificate " + cert_file + " is not valid before " +
                           TimeText(X509_get0_notBefore(pair->leaf)));
  }
  if (X509_check_private_key(pair->leaf, pair->key) != 1) {
    return InvalidArgument("TLS key " + key_file + " is not the key of certificate " + cert_file +
                           ": " + OpenSslError());
  }
  return std::shared_ptr<const Pair>(std::move(pair));
}

}  // namespace cert_files

using cert_files::Pair;
using cert_files::ReadPair;
using cert_files::Stamp;
using cert_files::StampOf;

struct ServingCertificate::Impl {
  std::string cert_file, key_file;
  std::function<void(const std::string&)> log;
  std::mutex mu;
  std::shared_ptr<const Pair> pair;  // in use
  Stamp cert_stamp, key_stamp;       // of the files `pair` was read from
  Stamp refused_cert, refused_key;   // of the last change refused (logged once)
  Clock::time_point refused_at{};
  int reloads = 0;

  void Log(const std::string& line) const {
    if (log) log(line);
  }

  // The pair to serve now, read again when the files changed.
  std::shared_ptr<const Pair> Current() {
    std::lock_guard<std::mutex> lock(mu);
    const Stamp c = StampOf(cert_file);
    const Stamp k = StampOf(key_file);
    if (c == cert_stamp && k == key_stamp) return pair;
    const bool seen = c == refused_cert && k == refused_key;
    if (seen && Clock::now() - refused_at < kRetryEvery) return pair;
    StatusOr<std::shared_ptr<const Pair>> read = ReadPair(cert_file, key_file);
    // Files replaced while they were read: their stamps moved; the next handshake reads again.
    const bool steady = StampOf(cert_file) == c && StampOf(key_file) == k;
    if (read.ok() && steady) {
      pair = *read;
      cert_stamp = c;
      key_stamp = k;
      ++reloads;
      Log("TLS certificate " + cert_file + " changed: serving the new one");
      return pair;
    }
    refused_at = Clock::now();
    if (!seen && !read.ok()) {
      Log(read.status().message() + ": still serving the previous certificate");
    }
    refused_cert = c;
    refused_key = k;
    return pair;
  }

  static int Callback(SSL* ssl, void* arg) {
    std::shared_ptr<const Pair> p = static_cast<Impl*>(arg)->Current();
    // The chain is copied into the connection (override 1: this pair, whatever the context had).
    return SSL_use_cert_and_key(ssl, p->leaf, p->key, p->chain, 1) == 1 ? 1 : 0;
  }
};

StatusOr<std::shared_ptr<ServingCertificate>> ServingCertificate::Load(
    const std::string& cert_file, const std::string& key_file,
    std::function<void(const std::string&)> log) {
  if (cert_file.empty() || key_file.empty()) {
    return InvalidArgument("TLS needs both a certificate and its key");
  }
  auto impl = std::make_unique<Impl>();
  impl->cert_file = cert_file;
  impl->key_file = key_file;
  impl->log = std::move(log);
  impl->cert_stamp = StampOf(cert_file);
  impl->key_stamp = StampOf(key_file);
  StatusOr<std::shared_ptr<const Pair>> read = ReadPair(cert_file, key_file);
  if (!read.ok()) return read.status();
  impl->pair = *read;
  return std::shared_ptr<ServingCertificate>(new ServingCertificate(std::move(impl)));
}

ServingCertificate::ServingCertificate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ServingCertificate::~ServingCertificate() = default;

void ServingCertificate::Install(SSL_CTX* ctx) {
  SSL_CTX_set_cert_cb(ctx, &Impl::Callback, impl_.get());
}

int ServingCertificate::reloads() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->reloads;
}

}  // namespace paladin::api
