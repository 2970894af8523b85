// The page stream's per-move keys (src/migrate/page_tls.h): kept where only root reads them and
// removed after; a peer's certificate, which comes from the network, taken only when it is one
// well-formed self-signed certificate. The handshake itself (CRIU's --tls refusing a client or a
// server without this move's key) is tested end to end by tests/ckpt/migrate_lazy_test.sh.
#include "migrate/page_tls.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace paladin::migrate {
namespace {

namespace fs = std::filesystem;

int tried = 0;
int refused = 0;

mode_t Mode(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(PageTls, KeysArePrivateAndRemoved) {
  std::string dir;
  {
    StatusOr<PageTls> tls = PageTls::Create("m1 source");
    ASSERT_TRUE(tls.ok()) << tls.status().message();
    dir = tls->dir();
    EXPECT_EQ(Mode(dir), 0700u);
    EXPECT_EQ(Mode(dir + "/key.pem"), 0600u);
    EXPECT_EQ(Mode(dir + "/cert.pem"), 0600u);
    EXPECT_FALSE(tls->certificate().empty());
    EXPECT_EQ(tls->certificate().find('\n'), std::string::npos);  // one line on the channel
    const std::vector<std::string> args = tls->CriuArgs();
    ASSERT_FALSE(args.empty());
    EXPECT_EQ(args[0], "--tls");
    EXPECT_NE(std::find(args.begin(), args.end(), dir + "/key.pem"), args.end());
    EXPECT_NE(std::find(args.begin(), args.end(), "--tls-no-cn-verify"), args.end());
    // Moved: the directory goes with the new owner, once.
    PageTls moved = std::move(*tls);
    EXPECT_TRUE(fs::exists(dir));
  }
  EXPECT_FALSE(fs::exists(dir));
}

TEST(PageTls, EachSideTrustsTheOthersCertificate) {
  // A move's id is long: the name must not make the certificate fail.
  StatusOr<PageTls> source = PageTls::Create(std::string(80, 'f') + " source");
  StatusOr<PageTls> destination = PageTls::Create("m2 destination");
  ASSERT_TRUE(source.ok() && destination.ok());
  EXPECT_NE(source->certificate(), destination->certificate());  // fresh keys each time
  ASSERT_TRUE(source->TrustPeer(destination->certificate()).ok());
  ASSERT_TRUE(destination->TrustPeer(source->certificate()).ok());
  EXPECT_TRUE(source->has_peer());
  EXPECT_EQ(Mode(source->dir() + "/peer.pem"), 0600u);
  // The trusted certificate is set once: a second PAGE-TLS cannot swap it.
  ++tried;
  StatusOr<PageTls> stranger = PageTls::Create("m2 stranger");
  ASSERT_TRUE(stranger.ok());
  if (!source->TrustPeer(stranger->certificate()).ok()) ++refused;
}

TEST(PageTls, HostileCertificatesAreRefused) {
  StatusOr<PageTls> peer = PageTls::Create("m3 peer");
  ASSERT_TRUE(peer.ok());
  const std::string good = peer->certificate();
  std::string bad_signature = good;
  // The DER ends with the signature: alter a character well inside its base64.
  const size_t at = bad_signature.size() - 12;
  bad_signature[at] = bad_signature[at] == 'A' ? 'B' : 'A';
  const std::vector<std::pair<std::string, std::string>> hostile = {
      {"empty", ""},
      {"not base64", "this is not a certificate!!"},
      {"bad length", good.substr(0, good.size() - 1)},
      {"too long", std::string(64 * 1024, 'A')},
      {"not DER", "AAAAAAAAAAAAAAAA"},
      {"truncated", good.substr(0, good.size() / 2 / 4 * 4)},
      {"trailing bytes", good + "AAAA"},
      {"bad signature", bad_signature},
      {"newline inside", good.substr(0, 8) + "\n" + good.substr(9)},
  };
  for (const auto& [what, text] : hostile) {
    StatusOr<PageTls> tls = PageTls::Create("m3 " + what);
    ASSERT_TRUE(tls.ok());
    ++tried;
    Status s = tls->TrustPeer(text);
    if (!s.ok()) {
      ++refused;
      EXPECT_FALSE(fs::exists(tls->dir() + "/peer.pem")) << what;
      EXPECT_FALSE(s.message().empty());
    } else {
      ADD_FAILURE() << what << " was taken as the peer's certificate";
    }
    EXPECT_FALSE(tls->has_peer()) << what;
  }
  // The good one, for contrast.
  StatusOr<PageTls> tls = PageTls::Create("m3 good");
  ASSERT_TRUE(tls.ok());
  EXPECT_TRUE(tls->TrustPeer(good).ok());
}

class Report : public ::testing::Environment {
 public:
  void TearDown() override {
    std::printf("security: page stream certificates: tried %d, refused %d\n", tried, refused);
  }
};
const auto* const kReport = ::testing::AddGlobalTestEnvironment(new Report);

}  // namespace
}  // namespace paladin::migrate
