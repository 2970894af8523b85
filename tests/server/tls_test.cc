// `paladin server --tls-cert F --tls-key K`: the API over HTTPS. A client that trusts the server's
// CA (PALADIN_CA_FILE) reads and writes through it, a large body included; one that does not is
// refused by its own check and told what to set; plain HTTP and bytes that are no TLS at the
// HTTPS port are closed without an answer, and the server serves on; a certificate with another
// key, an expired one, or one of the two files missing, keeps the server from starting, naming
// the file.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "harness.h"
#include "paladin/api/wire.h"
#include "testing/certificates.h"

namespace paladin::server {
namespace {

using testing::Json;

// A self-signed certificate for 127.0.0.1 (its own CA) with a fresh P-256 key, written as
// DIR/NAME.pem and DIR/NAME.key, valid from two hours ago until `valid_for_s` from now.
void MakeCertificate(const std::string& dir, const std::string& name, long valid_for_s = 3600) {
  testcert::WriteSelfSigned(dir + "/" + name + ".pem", dir + "/" + name + ".key",
                            {.san = "IP:127.0.0.1", .ca = true, .not_after_s = valid_for_s});
}

// Sends `bytes` to 127.0.0.1:PORT and returns what comes back before the server closes.
std::string Exchange(int port, const std::string& bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string got;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size())) {
    char buf[4096];
    ssize_t n = 0;
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return got;
}

class TlsTest : public ::testing::Test {
 protected:
  TlsTest() : dir_(testing::TempDir("tls")) {
    MakeCertificate(dir_, "server");
    MakeCertificate(dir_, "other");
    MakeCertificate(dir_, "expired", -60);
  }
  ~TlsTest() override { unsetenv("PALADIN_CA_FILE"); }

  ServerOptions Options(const std::string& cert, const std::string& key) const {
    ServerOptions o;
    o.data_dir = dir_ + "/data";
    o.listen = "127.0.0.1:0";
    o.tls_cert_file = cert;
    o.tls_key_file = key;
    return o;
  }
  static api::Client Https(const Server& s, const std::string& token) {
    StatusOr<api::Endpoint> e = api::ParseUrl(s.url());
    EXPECT_TRUE(e.ok());
    return api::Client(*e, token, 10);
  }

  std::string dir_;
};

TEST_F(TlsTest, TheApiOverHttpsForAClientThatTrustsItsCa) {
  StatusOr<std::unique_ptr<Server>> s =
      Server::Start(Options(dir_ + "/server.pem", dir_ + "/server.key"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Server& server = **s;
  EXPECT_EQ(server.url().rfind("https://127.0.0.1:", 0), 0u) << server.url();

  // Without the server's CA the client's own check refuses it, and says what to set.
  StatusOr<Json> refused = Https(server, server.admin_token()).Get("/v1/teams");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("PALADIN_CA_FILE"), std::string::npos)
      << refused.status().message();
  // Another CA is no better.
  setenv("PALADIN_CA_FILE", (dir_ + "/other.pem").c_str(), 1);
  EXPECT_FALSE(Https(server, server.admin_token()).Get("/v1/teams").ok());

  setenv("PALADIN_CA_FILE", (dir_ + "/server.pem").c_str(), 1);
  const api::Client admin = Https(server, server.admin_token());
  StatusOr<Json> teams = admin.Get("/v1/teams");
  ASSERT_TRUE(teams.ok()) << teams.status().ToString();
  // A body of many TLS records, through and back: 1500 pods reported, every one listed back.
  api::PodList pods;
  pods.cluster = "tls";
  for (int i = 0; i < 1500; ++i) {
    api::PodReport p;
    p.ns = "team-a";
    p.name = "pod-" + std::to_string(i);
    p.team = "k8s-team-a";
    p.phase = "Pending";
    p.reason = std::string(100, 'r');
    pods.pods.push_back(p);
  }
  const Json body = api::ToJson(pods);
  ASSERT_GT(body.dump().size(), size_t{200} << 10);
  StatusOr<Json> put = admin.Put("/v1/pods", body);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  StatusOr<std::string> listed = admin.GetText("/v1/pods");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_NE(listed->find("\"pod-1499\""), std::string::npos);
  EXPECT_GT(listed->size(), size_t{200} << 10);
  // A wrong token is refused by the API, through TLS.
  StatusOr<Json> wrong = Https(server, "pal_" + std::string(64, '0')).Get("/v1/teams");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().code(), StatusCode::kUnavailable) << wrong.status().ToString();

  // Plain HTTP and bytes that are no TLS: closed, nothing answered in clear, and the server
  // serves on.
  EXPECT_EQ(Exchange(server.port(), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").find("HTTP/1.1"),
            std::string::npos);
  EXPECT_EQ(Exchange(server.port(), std::string(64, '\x16')).find("HTTP/1.1"), std::string::npos);
  EXPECT_TRUE(admin.Get("/v1/teams").ok());
  // An unreadable CA file is named.
  setenv("PALADIN_CA_FILE", (dir_ + "/none.pem").c_str(), 1);
  StatusOr<Json> no_ca = admin.Get("/v1/teams");
  ASSERT_FALSE(no_ca.ok());
  EXPECT_NE(no_ca.status().message().find("none.pem' cannot be read"), std::string::npos);
}

TEST_F(TlsTest, AKeyOfAnotherCertificateAnExpiredOneOrAMissingFileKeepsTheServerDown) {
  StatusOr<std::unique_ptr<Server>> mismatched =
      Server::Start(Options(dir_ + "/server.pem", dir_ + "/other.key"));
  ASSERT_FALSE(mismatched.ok());
  EXPECT_NE(mismatched.status().message().find("other.key is not the key of certificate "),
            std::string::npos)
      << mismatched.status().message();
  EXPECT_NE(mismatched.status().message().find("mismatch"), std::string::npos);
  StatusOr<std::unique_ptr<Server>> no_key = Server::Start(Options(dir_ + "/server.pem", ""));
  ASSERT_FALSE(no_key.ok());
  EXPECT_NE(no_key.status().message().find("--tls-key"), std::string::npos);
  // Expired: refused at the start, saying when, rather than by every client's check.
  StatusOr<std::unique_ptr<Server>> expired =
      Server::Start(Options(dir_ + "/expired.pem", dir_ + "/expired.key"));
  ASSERT_FALSE(expired.ok());
  EXPECT_NE(expired.status().message().find("expired.pem expired on "), std::string::npos)
      << expired.status().message();
  StatusOr<std::unique_ptr<Server>> no_cert =
      Server::Start(Options(dir_ + "/absent.pem", dir_ + "/server.key"));
  ASSERT_FALSE(no_cert.ok());
  EXPECT_NE(no_cert.status().message().find("absent.pem"), std::string::npos);
}

}  // namespace
}  // namespace paladin::server
