// A serving certificate that follows its files: a handshake after the files were replaced (as
// the kubelet replaces a Secret's: a new folder and a symbolic link swapped) is served with the
// new certificate, without a restart; a replacement whose key is not the certificate's, or whose
// certificate has expired, is refused and the previous pair served on; a bad pair at the start is
// an error naming the file.
#include "paladin/api/serving_cert.h"

#include <gtest/gtest.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "testing/certificates.h"

namespace paladin::api {
namespace {

namespace fs = std::filesystem;

// A self-signed certificate for `cn`, valid from `from_days` to `to_days` from now, and its key,
// written as PEM into DIR/tls.crt and DIR/tls.key.
void WritePair(const fs::path& dir, const std::string& cn, long from_days = -1, long to_days = 30) {
  fs::create_directories(dir);
  testcert::WriteSelfSigned(
      dir / "tls.crt", dir / "tls.key",
      {.cn = cn, .not_before_s = from_days * 86400, .not_after_s = to_days * 86400});
}

// The common name of the certificate a server with `ctx` presents to a client, by a handshake
// in memory; "" when the handshake fails.
std::string Presented(SSL_CTX* server_ctx) {
  SSL_CTX* client_ctx = SSL_CTX_new(TLS_client_method());
  SSL* client = SSL_new(client_ctx);
  SSL* server = SSL_new(server_ctx);
  BIO* c_bio = nullptr;
  BIO* s_bio = nullptr;
  BIO_new_bio_pair(&c_bio, 0, &s_bio, 0);
  SSL_set_bio(client, c_bio, c_bio);
  SSL_set_bio(server, s_bio, s_bio);
  SSL_set_connect_state(client);
  SSL_set_accept_state(server);
  bool done = false;
  for (int i = 0; i < 20 && !done; ++i) {
    const int c = SSL_do_handshake(client);
    const int s = SSL_do_handshake(server);
    done = c == 1 && s == 1;
  }
  std::string cn;
  if (done) {
    X509* peer = SSL_get1_peer_certificate(client);
    char buf[256] = {};
    X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, buf, sizeof buf);
    cn = buf;
    X509_free(peer);
  }
  SSL_free(client);
  SSL_free(server);
  SSL_CTX_free(client_ctx);
  return cn;
}

class ServingCertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("serving_cert." + std::to_string(getpid()) + "." +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  // The kubelet's way: the files are links through "..data", a link swapped to a new folder.
  void Publish(const std::string& folder) {
    fs::create_symlink(folder, root_ / "..data.new");
    fs::rename(root_ / "..data.new", root_ / "..data");
    if (!fs::is_symlink(root_ / "tls.crt")) {
      fs::create_symlink("..data/tls.crt", root_ / "tls.crt");
      fs::create_symlink("..data/tls.key", root_ / "tls.key");
    }
  }
  fs::path root_;
};

TEST_F(ServingCertTest, ARenewedPairIsServedFromTheNextHandshake) {
  WritePair(root_ / "v1", "paladin-webhook-v1");
  Publish("v1");
  std::vector<std::string> log;
  StatusOr<std::shared_ptr<ServingCertificate>> cert =
      ServingCertificate::Load((root_ / "tls.crt").string(), (root_ / "tls.key").string(),
                               [&log](const std::string& l) { log.push_back(l); });
  ASSERT_TRUE(cert.ok()) << cert.status().ToString();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  (*cert)->Install(ctx);
  EXPECT_EQ(Presented(ctx), "paladin-webhook-v1");
  EXPECT_EQ(Presented(ctx), "paladin-webhook-v1");
  EXPECT_EQ((*cert)->reloads(), 0);

  WritePair(root_ / "v2", "paladin-webhook-v2");
  Publish("v2");
  EXPECT_EQ(Presented(ctx), "paladin-webhook-v2");
  EXPECT_EQ((*cert)->reloads(), 1);
  ASSERT_EQ(log.size(), 1U);
  EXPECT_NE(log[0].find("changed: serving the new one"), std::string::npos) << log[0];

  // A key that is not the certificate's (v3's certificate beside v2's key): refused, v2 served.
  WritePair(root_ / "v3", "paladin-webhook-v3");
  fs::copy_file(root_ / "v2" / "tls.key", root_ / "v3" / "tls.key",
                fs::copy_options::overwrite_existing);
  Publish("v3");
  EXPECT_EQ(Presented(ctx), "paladin-webhook-v2");
  EXPECT_EQ(Presented(ctx), "paladin-webhook-v2");
  ASSERT_EQ(log.size(), 2U);  // said once
  EXPECT_NE(log[1].find("is not the key of certificate"), std::string::npos) << log[1];
  EXPECT_NE(log[1].find("still serving the previous certificate"), std::string::npos);

  // An expired one: refused as well.
  WritePair(root_ / "v4", "paladin-webhook-v4", -30, -1);
  Publish("v4");
  EXPECT_EQ(Presented(ctx), "paladin-webhook-v2");
  ASSERT_EQ(log.size(), 3U);
  EXPECT_NE(log[2].find("expired on"), std::string::npos) << log[2];

  // Then a good one again.
  WritePair(root_ / "v5", "paladin-webhook-v5");
  Publish("v5");
  EXPECT_EQ(Presented(ctx), "paladin-webhook-v5");
  EXPECT_EQ((*cert)->reloads(), 2);
  SSL_CTX_free(ctx);
}

TEST_F(ServingCertTest, ABadPairAtTheStartIsAnErrorNamingTheFile) {
  WritePair(root_ / "old", "old", -30, -1);
  StatusOr<std::shared_ptr<ServingCertificate>> expired = ServingCertificate::Load(
      (root_ / "old" / "tls.crt").string(), (root_ / "old" / "tls.key").string());
  ASSERT_FALSE(expired.ok());
  EXPECT_NE(expired.status().message().find("old/tls.crt expired on"), std::string::npos)
      << expired.status().message();
  StatusOr<std::shared_ptr<ServingCertificate>> missing =
      ServingCertificate::Load((root_ / "none.crt").string(), (root_ / "old" / "tls.key").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("TLS certificate " + (root_ / "none.crt").string()),
            std::string::npos)
      << missing.status().message();
  std::FILE* f = std::fopen((root_ / "junk.key").c_str(), "w");
  std::fputs("not a key\n", f);
  std::fclose(f);
  WritePair(root_ / "ok", "ok");
  StatusOr<std::shared_ptr<ServingCertificate>> junk =
      ServingCertificate::Load((root_ / "ok" / "tls.crt").string(), (root_ / "junk.key").string());
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("TLS key " + (root_ / "junk.key").string()),
            std::string::npos)
      << junk.status().message();
}

}  // namespace
}  // namespace paladin::api
