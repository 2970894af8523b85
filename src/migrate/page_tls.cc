#include "page_tls.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

namespace paladin::migrate {
namespace {

namespace fs = std::filesystem;

constexpr const char* kKeyFile = "key.pem";
constexpr const char* kCertFile = "cert.pem";
constexpr const char* kPeerFile = "peer.pem";
// A certificate of ours is about 500 bytes; anything far larger is not one.
constexpr size_t kMaxCertificateB64 = size_t{16} * 1024;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertFree {
  void operator()(X509* x) const { X509_free(x); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Cert = std::unique_ptr<X509, CertFree>;

// Written once, readable by root alone; never through a link another user placed.
Status WritePrivate(const std::string& path, const std::string& data) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return IoError("cannot create " + path);
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n <= 0) {
      close(fd);
      return IoError("cannot write " + path);
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) return IoError("cannot write " + path);
  return Status::Ok();
}

std::string BioText(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

Status AddExtension(X509* cert, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return Internal(std::string("cannot make the extension ") + value);
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return added == 1 ? Status::Ok() : Internal(std::string("cannot add the extension ") + value);
}

// A self-signed certificate for `key`. It is its own CA (the other side trusts it as the only
// anchor, and GnuTLS accepts a trusted anchor only if it may sign); valid from a day back, for
// clocks that differ between the two machines, to a week ahead (a move that takes longer fails).
StatusOr<Cert> SelfSigned(EVP_PKEY* key, const std::string& name) {
  Cert cert(X509_new());
  if (!cert) return Internal("cannot allocate a certificate");
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) return Internal("no random serial number");
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  const bool serial_set =
      bn != nullptr && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_NAME* subject = X509_get_subject_name(cert.get());
  // A common name holds at most 64 characters; it only helps a reader of CRIU's logs.
  const std::string cn = ("paladin " + name).substr(0, 64);
  if (!serial_set || X509_set_version(cert.get(), 2) != 1 ||
      X509_gmtime_adj(X509_getm_notBefore(cert.get()), -24L * 3600) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), 7L * 24 * 3600) == nullptr ||
      X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                 0) != 1 ||
      X509_set_issuer_name(cert.get(), subject) != 1 || X509_set_pubkey(cert.get(), key) != 1) {
    return Internal("cannot fill in the page stream's certificate");
  }
  PALADIN_RETURN_IF_ERROR(AddExtension(cert.get(), NID_basic_constraints, "critical,CA:TRUE"));
  PALADIN_RETURN_IF_ERROR(
      AddExtension(cert.get(), NID_key_usage, "critical,digitalSignature,keyCertSign"));
  PALADIN_RETURN_IF_ERROR(AddExtension(cert.get(), NID_subject_key_identifier, "hash"));
  if (X509_sign(cert.get(), key, EVP_sha256()) <= 0) return Internal("cannot sign the certificate");
  return cert;
}

std::string Base64Der(X509* cert) {
  const int len = i2d_X509(cert, nullptr);
  if (len <= 0) return "";
  std::string der(static_cast<size_t>(len), '\0');
  auto* p = reinterpret_cast<unsigned char*>(der.data());
  if (i2d_X509(cert, &p) != len) return "";
  std::string out(4 * ((der.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(der.data()),
                                static_cast<int>(der.size()));
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return out;
}

}  // namespace

PageTls::~PageTls() {
  if (dir_.empty()) return;
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

PageTls::PageTls(PageTls&& other) noexcept
    : owner_(std::move(other.owner_)),
      dir_(std::move(other.dir_)),
      certificate_(std::move(other.certificate_)),
      has_peer_(other.has_peer_) {
  other.dir_.clear();
}

PageTls& PageTls::operator=(PageTls&& other) noexcept {
  if (this != &other) {
    if (!dir_.empty()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
    owner_ = std::move(other.owner_);
    dir_ = std::move(other.dir_);
    certificate_ = std::move(other.certificate_);
    has_peer_ = other.has_peer_;
    other.dir_.clear();
  }
  return *this;
}

StatusOr<PageTls> PageTls::Create(const std::string& name, const std::string& parent) {
  std::error_code ec;
  const std::string base = parent.empty() ? fs::temp_directory_path(ec).string() : parent;
  (void)RemoveOrphanedDirs(base, "paladin-page-tls.");
  StatusOr<OwnedDir> owned = OwnedDir::MakeUnique(base, "paladin-page-tls");
  if (!owned.ok()) {
    return IoError("cannot make a private directory for the page stream's keys in " + base + " (" +
                   owned.status().message() + ")");
  }
  PageTls tls;
  tls.dir_ = owned->path();  // 0700; removed with `tls` on any error below
  tls.owner_ = std::move(*owned);
  Key key(EVP_EC_gen("P-256"));
  if (!key) return Internal("cannot make a key pair for the page stream");
  StatusOr<Cert> cert = SelfSigned(key.get(), name);
  if (!cert.ok()) return cert.status();
  Bio key_pem(BIO_new(BIO_s_mem()));
  Bio cert_pem(BIO_new(BIO_s_mem()));
  if (!key_pem || !cert_pem ||
      PEM_write_bio_PrivateKey(key_pem.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) !=
          1 ||
      PEM_write_bio_X509(cert_pem.get(), cert->get()) != 1) {
    return Internal("cannot encode the page stream's key and certificate");
  }
  PALADIN_RETURN_IF_ERROR(WritePrivate(tls.dir_ + "/" + kKeyFile, BioText(key_pem.get())));
  PALADIN_RETURN_IF_ERROR(WritePrivate(tls.dir_ + "/" + kCertFile, BioText(cert_pem.get())));
  tls.certificate_ = Base64Der(cert->get());
  if (tls.certificate_.empty()) return Internal("cannot encode the page stream's certificate");
  return tls;
}

Status PageTls::TrustPeer(const std::string& certificate_b64) {
  if (has_peer_) return FailedPrecondition("the page stream's peer certificate is already set");
  if (certificate_b64.empty() || certificate_b64.size() > kMaxCertificateB64 ||
      certificate_b64.size() % 4 != 0) {
    return InvalidArgument("the peer's page-stream certificate is not base64 of at most " +
                           std::to_string(kMaxCertificateB64) + " characters");
  }
  std::string der(certificate_b64.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(der.data()),
                                reinterpret_cast<const unsigned char*>(certificate_b64.data()),
                                static_cast<int>(certificate_b64.size()));
  if (n < 0) return InvalidArgument("the peer's page-stream certificate is not base64");
  size_t padding = 0;
  for (size_t i = certificate_b64.size(); i > 0 && certificate_b64[i - 1] == '='; --i) ++padding;
  if (padding > 2) return InvalidArgument("the peer's page-stream certificate is not base64");
  der.resize(static_cast<size_t>(n) - padding);
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  Cert cert(d2i_X509(nullptr, &p, static_cast<long>(der.size())));
  if (!cert || p != reinterpret_cast<const unsigned char*>(der.data()) + der.size()) {
    return InvalidArgument("the peer's page-stream certificate is not one DER certificate");
  }
  EVP_PKEY* key = X509_get0_pubkey(cert.get());
  if (key == nullptr || X509_verify(cert.get(), key) != 1) {
    return InvalidArgument("the peer's page-stream certificate is not signed by its own key");
  }
  Bio pem(BIO_new(BIO_s_mem()));
  if (!pem || PEM_write_bio_X509(pem.get(), cert.get()) != 1) {
    return Internal("cannot encode the peer's page-stream certificate");
  }
  PALADIN_RETURN_IF_ERROR(WritePrivate(dir_ + "/" + kPeerFile, BioText(pem.get())));
  has_peer_ = true;
  return Status::Ok();
}

std::vector<std::string> PageTls::CriuArgs() const {
  // Names are not checked (--tls-no-cn-verify): the one trusted certificate is the other side's
  // own, which identifies it better than an address would.
  return {"--tls",
          "--tls-cacert",
          dir_ + "/" + kPeerFile,
          "--tls-cert",
          dir_ + "/" + kCertFile,
          "--tls-key",
          dir_ + "/" + kKeyFile,
          "--tls-no-cn-verify"};
}

}  // namespace paladin::migrate
