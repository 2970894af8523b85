// The page stream's per-move keys (src/migrate/page_tls.h): kept where only root reads them and
// removed after; a peer's certificate, which comes from the network, taken only when it is one
// well-formed self-signed certificate. The handshake itself (CRIU's --tls refusing a client or a
// server without this move's key) is tested end to end by tests/ckpt/migrate_lazy_test.sh.
#include "migrate/page_tls.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "paladin/migrate/owned_dir.h"

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

// A scratch folder of this test's own under the temporary directory.
std::string Scratch() {
  std::string templ = fs::temp_directory_path().string() + "/page-tls-test.XXXXXX";
  EXPECT_NE(mkdtemp(templ.data()), nullptr);
  return templ;
}

// What `make` returns, made in a child process that then dies without cleaning up (as a
// receiver SIGKILLed mid-move does).
std::string MadeByADeadProcess(const std::function<std::string()>& make) {
  int out[2];
  EXPECT_EQ(pipe(out), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(out[0]);
    const std::string path = make();
    (void)!write(out[1], path.data(), path.size());
    _exit(0);  // no destructors: the folder stays, its lock dies with the process
  }
  close(out[1]);
  std::string path;
  char buf[512];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof buf)) > 0) path.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  EXPECT_EQ(waitpid(child, &status, 0), child);
  return path;
}

TEST(OwnedDir, OnlyFoldersWhoseOwnerDiedAreRemoved) {
  const std::string parent = Scratch();
  const std::string elsewhere = Scratch();
  const std::string dead = MadeByADeadProcess([&] {
    StatusOr<OwnedDir> d = OwnedDir::MakeUnique(parent, "paladin-page-tls");
    if (!d.ok()) return std::string();
    std::ofstream(d->path() + "/key.pem") << "secret";
    return d->path();
  });
  ASSERT_FALSE(dead.empty());
  ASSERT_TRUE(fs::exists(dead + "/key.pem"));
  EXPECT_EQ(Mode(dead), 0700u);
  const std::string dead_other_kind = MadeByADeadProcess([&] {
    StatusOr<OwnedDir> d = OwnedDir::MakeUnique(parent, "paladin-pages");
    return d.ok() ? d->path() : std::string();
  });
  const std::string dead_elsewhere = MadeByADeadProcess([&] {
    StatusOr<OwnedDir> d = OwnedDir::MakeUnique(elsewhere, "paladin-page-tls");
    return d.ok() ? d->path() : std::string();
  });
  const std::string link = parent + "/paladin-page-tls.link";
  fs::create_directory_symlink(dead_elsewhere, link);
  const std::string unowned = parent + "/paladin-page-tls.older";  // no .owner: left alone
  fs::create_directory(unowned);
  std::optional<OwnedDir> live;
  {
    StatusOr<OwnedDir> d = OwnedDir::MakeUnique(parent, "paladin-page-tls");
    ASSERT_TRUE(d.ok()) << d.status().message();
    live = std::move(*d);
  }
  const std::string live_path = live->path();

  EXPECT_EQ(RemoveOrphanedDirs(parent, "paladin-page-tls."), std::vector<std::string>{dead});
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live_path + "/.owner"));
  EXPECT_TRUE(fs::exists(dead_other_kind));
  EXPECT_TRUE(fs::exists(dead_elsewhere));
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(fs::exists(unowned));
  // Its owner lets go: the next sweep takes it.
  live.reset();
  EXPECT_EQ(RemoveOrphanedDirs(parent, "paladin-page-tls."), std::vector<std::string>{live_path});
  // A folder claimed by name (a fleet destination's incoming folder) likewise.
  const std::string incoming = parent + "/in/job-1-7";
  EXPECT_EQ(MadeByADeadProcess([&] {
              StatusOr<OwnedDir> d = OwnedDir::Claim(incoming);
              return d.ok() ? d->path() : std::string();
            }),
            incoming);
  // A claimer that died between its lock and its rename leaves `.owner-new`: the next claim of
  // that folder is not refused for it.
  fs::create_directories(parent + "/in/job-2-8");
  std::ofstream(parent + "/in/job-2-8/.owner-new") << "";
  {
    StatusOr<OwnedDir> claimed = OwnedDir::Claim(parent + "/in/job-2-8");
    ASSERT_TRUE(claimed.ok()) << claimed.status().message();
    EXPECT_EQ(RemoveOrphanedDirs(parent + "/in", ""), std::vector<std::string>{incoming});
    EXPECT_TRUE(fs::exists(parent + "/in/job-2-8"));
  }
  fs::remove_all(parent);
  fs::remove_all(elsewhere);
}

TEST(PageTls, KeysOfAMoveWhoseProcessDiedAreRemovedByTheNext) {
  const std::string parent = Scratch();
  StatusOr<PageTls> live = PageTls::Create("m4 live", parent);
  ASSERT_TRUE(live.ok());
  const std::string dead = MadeByADeadProcess([&] {
    StatusOr<PageTls> tls = PageTls::Create("m4 killed", parent);
    if (!tls.ok()) return std::string();
    std::string dir = tls->dir();
    new PageTls(std::move(*tls));  // never destroyed: the process dies mid-move
    return dir;
  });
  ASSERT_FALSE(dead.empty());
  EXPECT_TRUE(fs::exists(dead + "/key.pem"));
  StatusOr<PageTls> next = PageTls::Create("m5", parent);
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live->dir() + "/key.pem"));
  EXPECT_TRUE(fs::exists(next->dir() + "/key.pem"));
  fs::remove_all(parent);
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
