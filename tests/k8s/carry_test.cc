// A move's image carried to another node's mover over loopback (no cluster): the bytes arrive
// whole under the image's name, a second carry finds it there, the runtime's mark is reported; a
// wrong key, a name that is not a move's image, a manifest naming another image and a folder
// without room are refused, and nothing half-carried is left under the image's name. Periodic
// checkpoints sent the same way, and the older ones removed there (PRUNE).
#include "paladin/k8s/carry.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "paladin/ckpt/image.h"
#include "paladin/k8s/recover.h"
#include "paladin/migrate/control.h"
#include "paladin/transfer/transfer.h"

namespace paladin::k8s {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class CarryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("carry_test." + std::to_string(getpid()) + "." +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "src");
    fs::create_directories(root_ / "dst");
    key_ = std::string(64, 'a');
  }
  void TearDown() override { fs::remove_all(root_); }

  // An image as a move leaves it: CRIU's files, a /dev/shm copy in a subfolder, the owner file.
  std::string MakeImage(const std::string& name, size_t mib) {
    const fs::path dir = root_ / "src" / name;
    fs::create_directories(dir / "shm");
    std::mt19937_64 rng(42);
    std::string pages(mib << 20, '\0');
    for (size_t i = 0; i + 8 <= pages.size(); i += 8) {
      const uint64_t v = rng();
      std::memcpy(&pages[i], &v, 8);
    }
    std::ofstream(dir / "pages-1.img", std::ios::binary) << pages;
    std::ofstream(dir / "inventory.img") << "inventory";
    std::ofstream(dir / "shm" / "buffer") << "shared";
    std::ofstream(dir / "owner") << "namespace team-a\npod demo-m1\nfrom team-a/demo uid\n";
    return dir.string();
  }

  std::unique_ptr<CarryServer> Serve(std::vector<std::string>* log = nullptr,
                                     const std::string& bind_address = "127.0.0.1") {
    CarryServerOptions o;
    o.bind_address = bind_address;
    o.images = (root_ / "dst").string();
    o.key = key_;
    o.log = [log](const std::string& l) {
      if (log != nullptr) log->push_back(l);
    };
    StatusOr<std::unique_ptr<CarryServer>> s = CarryServer::Listen(o);
    EXPECT_TRUE(s.ok()) << s.status().message();
    return std::move(*s);
  }

  fs::path root_;
  std::string key_;
};

TEST_F(CarryTest, AnImageArrivesWholeUnderItsNameAndOnlyOnce) {
  std::vector<std::string> log;
  std::unique_ptr<CarryServer> server = Serve(&log);
  const std::string dir = MakeImage("move-1733-ab12", 12);
  StatusOr<CarryReport> r = CarryImageTo(dir, "127.0.0.1", server->port(), key_, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->present);
  const fs::path got = root_ / "dst" / "move-1733-ab12";
  EXPECT_EQ(Slurp(got / "pages-1.img"), Slurp(fs::path(dir) / "pages-1.img"));
  EXPECT_EQ(Slurp(got / "shm" / "buffer"), "shared");
  EXPECT_EQ(Slurp(got / "owner"), Slurp(fs::path(dir) / "owner"));
  EXPECT_EQ(r->bytes, fs::file_size(got / "pages-1.img") + 9 + 6 + Slurp(got / "owner").size());
  // Nothing of the transfer's own is left beside it.
  for (const fs::directory_entry& e : fs::directory_iterator(root_ / "dst")) {
    EXPECT_EQ(e.path().filename(), "move-1733-ab12");
  }
  // A second carry of the same image (a mover's next pass) finds it there and sends nothing.
  StatusOr<CarryReport> again = CarryImageTo(dir, "127.0.0.1", server->port(), key_, nullptr);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_TRUE(again->present);
  ASSERT_FALSE(log.empty());
  EXPECT_NE(log.front().find("move-1733-ab12 received into"), std::string::npos) << log.front();

  // The runtime's mark, asked for by name.
  std::ofstream(got / "demo.gpu-restored") << "";
  StatusOr<bool> has =
      CarriedImageHas("127.0.0.1", server->port(), key_, "move-1733-ab12", "demo.gpu-restored");
  ASSERT_TRUE(has.ok()) << has.status().message();
  EXPECT_TRUE(*has);
  has = CarriedImageHas("127.0.0.1", server->port(), key_, "move-1733-ab12", "other.gpu-restored");
  ASSERT_TRUE(has.ok());
  EXPECT_FALSE(*has);
  // A path is no file name.
  has = CarriedImageHas("127.0.0.1", server->port(), key_, "move-1733-ab12", "../../etc/passwd");
  EXPECT_FALSE(has.ok());
}

// An IPv6 pod network: the mover listens on an IPv6 address (`--carry-listen [::]:7446`) and the
// image arrives the same way.
TEST_F(CarryTest, AnImageArrivesOverIpv6) {
  std::unique_ptr<CarryServer> server = Serve(nullptr, "::1");
  const std::string dir = MakeImage("move-6-eeee", 2);
  StatusOr<CarryReport> r = CarryImageTo(dir, "::1", server->port(), key_, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(Slurp(root_ / "dst" / "move-6-eeee" / "pages-1.img"),
            Slurp(fs::path(dir) / "pages-1.img"));
}

TEST_F(CarryTest, AnotherKeyIsRefusedAndNothingArrives) {
  std::vector<std::string> log;
  std::unique_ptr<CarryServer> server = Serve(&log);
  const std::string dir = MakeImage("move-1-aaaa", 1);
  StatusOr<CarryReport> r =
      CarryImageTo(dir, "127.0.0.1", server->port(), std::string(64, 'b'), nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("refused this node: authentication failed"),
            std::string::npos)
      << r.status().message();
  EXPECT_TRUE(fs::is_empty(root_ / "dst"));
  StatusOr<bool> has =
      CarriedImageHas("127.0.0.1", server->port(), "wrong", "move-1-aaaa", "owner");
  EXPECT_FALSE(has.ok());
}

// What a peer holding the key but sending the wrong things gets, line by line.
TEST_F(CarryTest, NamesThatAreNoMoveImagesAndBadCountsAreRefused) {
  std::unique_ptr<CarryServer> server = Serve();
  auto call = [&](const std::string& line) {
    StatusOr<migrate::Channel> ch = migrate::Channel::Connect("127.0.0.1", server->port(), 5);
    EXPECT_TRUE(ch.ok());
    EXPECT_TRUE(migrate::ProveToken(&*ch, CarryToken(key_), 5).ok());
    StatusOr<std::string> a = ch->Call(line, 5);
    return a.ok() ? "OK " + *a : a.status().message();
  };
  for (const char* name :
       {"../escape", "move-../x", "checkpoint-1", ".carry-move-1", "move-", "move-A"}) {
    const std::string a = call(std::string("CARRY ") + name + " 10");
    EXPECT_NE(a.find("is not a move's or a checkpoint's image name"), std::string::npos)
        << name << ": " << a;
  }
  EXPECT_NE(call("CARRY move-1 -5").find("is not a byte count"), std::string::npos);
  EXPECT_NE(call("CARRY move-1 12x").find("is not a byte count"), std::string::npos);
  EXPECT_NE(call("DELETE move-1").find("expected CARRY"), std::string::npos);
  // More than the folder has room for: refused before anything is sent.
  const std::string a = call("CARRY move-1 " + std::to_string(uint64_t{1} << 60));
  EXPECT_NE(a.find("bytes free, the image needs"), std::string::npos) << a;
  EXPECT_TRUE(fs::is_empty(root_ / "dst"));
  EXPECT_FALSE(CarriableImageName("move-1/../../x"));
  EXPECT_TRUE(CarriableImageName("move-1733000000000-0a1f"));
}

// What one who records a connection has is of no use: the proof answers that connection's
// challenge only, and the channel's secret itself is never sent (nor accepted as a proof).
TEST_F(CarryTest, ARecordedProofOpensNoOtherConnection) {
  std::vector<std::string> log;
  std::unique_ptr<CarryServer> server = Serve(&log);
  StatusOr<migrate::Channel> first = migrate::Channel::Connect("127.0.0.1", server->port(), 5);
  ASSERT_TRUE(first.ok());
  StatusOr<std::string> c1 = first->Receive(5);
  ASSERT_TRUE(c1.ok());
  ASSERT_EQ(c1->size(), 10U + 64U) << *c1;
  const std::string nonce(64, '7');
  const std::string recorded =
      "PROOF " + nonce + " " + migrate::ChannelProof(CarryToken(key_), c1->substr(10), nonce);
  ASSERT_TRUE(first->Call(recorded, 5).ok());
  for (const std::string& line :
       {recorded, "PROOF " + nonce + " " + CarryToken(key_), "TOKEN " + CarryToken(key_)}) {
    StatusOr<migrate::Channel> again = migrate::Channel::Connect("127.0.0.1", server->port(), 5);
    ASSERT_TRUE(again.ok());
    StatusOr<std::string> c2 = again->Receive(5);
    ASSERT_TRUE(c2.ok());
    EXPECT_NE(*c2, *c1);
    StatusOr<std::string> a = again->Call(line, 5);
    ASSERT_FALSE(a.ok()) << line;
    EXPECT_EQ(a.status().message(), "authentication failed");
  }
  server->Stop();  // its connections' threads joined: their log lines are in
  EXPECT_EQ(
      std::count_if(log.begin(), log.end(),
                    [](const std::string& l) { return l.find("refused") != std::string::npos; }),
      3);
}

// What the line says of a carry's transfer (its port and a salt) is no token: one who read it
// cannot send an image with it, and the image's own bytes travel sealed (transfer_test).
TEST_F(CarryTest, TheLineCarriesNoTransferToken) {
  std::vector<std::string> log;
  std::unique_ptr<CarryServer> server = Serve(&log);
  const std::string dir = MakeImage("move-4-dddd", 1);
  ckpt::Manifest m;
  m.name = "move-4-dddd";
  m.arch = "x86_64";
  ASSERT_TRUE(ckpt::WriteManifest(dir, m).ok());
  StatusOr<migrate::Channel> ch = migrate::Channel::Connect("127.0.0.1", server->port(), 5);
  ASSERT_TRUE(ch.ok());
  ASSERT_TRUE(migrate::ProveToken(&*ch, CarryToken(key_), 5).ok());
  StatusOr<std::string> where = ch->Call("CARRY move-4-dddd 1049000", 5);
  ASSERT_TRUE(where.ok()) << where.status().message();
  const size_t space = where->find(' ');
  ASSERT_NE(space, std::string::npos) << *where;
  const int port = std::stoi(where->substr(0, space));
  transfer::SendOptions so;
  so.token = where->substr(space + 1);
  so.retries = 0;
  so.streams = 1;
  StatusOr<transfer::SendReport> sent = transfer::SendImage(dir, "127.0.0.1", port, so, {});
  ASSERT_FALSE(sent.ok());
  EXPECT_NE(sent.status().message().find("authentication failed"), std::string::npos)
      << sent.status().message();
  server->Stop();
  EXPECT_FALSE(fs::exists(root_ / "dst" / "move-4-dddd"));
}

// A sender with the key whose manifest names another image than the one it asked to carry: the
// destination refuses it and removes what arrived.
TEST_F(CarryTest, AManifestNamingAnotherImageIsRefused) {
  std::unique_ptr<CarryServer> server = Serve();
  const std::string dir = MakeImage("move-2-bbbb", 1);
  ckpt::Manifest m;
  m.name = "move-3-cccc";
  m.arch = "x86_64";
  ASSERT_TRUE(ckpt::WriteManifest(dir, m).ok());
  StatusOr<CarryReport> r = CarryImageTo(dir, "127.0.0.1", server->port(), key_, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("manifest names 'move-3-cccc', not move-2-bbbb"),
            std::string::npos)
      << r.status().message();
  EXPECT_TRUE(fs::is_empty(root_ / "dst"));
}

// A periodic checkpoint sent to the recovery node's mover, and the older ones it removes there
// when the checkpointer asks (PRUNE): of a pod still on the node all but the newest, of a pod
// gone all; another node's and a claimed one untouched.
TEST_F(CarryTest, CheckpointsArriveAndTheOlderOnesArePrunedThere) {
  std::unique_ptr<CarryServer> server = Serve();
  auto checkpoint = [&](const std::string& node, const std::string& uid, int64_t ms) {
    CheckpointInfo info;
    info.image = CheckpointImageName(uid, ms);
    info.ns = "team-a";
    info.pod = "demo-m1";
    info.from_pod = "demo";
    info.from_uid = uid;
    info.node = node;
    const fs::path dir = root_ / "src" / info.image;
    fs::create_directories(dir / "demo");
    std::ofstream(dir / "owner") << OwnerFile(info);
    std::ofstream(dir / "pod.json") << "{}";
    std::ofstream(dir / "demo" / "pages-1.img") << std::string(4096, 'x');
    StatusOr<CarryReport> r =
        CarryImageTo(dir.string(), "127.0.0.1", server->port(), key_, nullptr);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return info.image;
  };
  const std::string a1 = checkpoint("node-2", "uid-a", 1000);
  const std::string a2 = checkpoint("node-2", "uid-a", 2000);
  const std::string b1 = checkpoint("node-2", "uid-b", 1000);
  const std::string c1 = checkpoint("node-3", "uid-c", 1000);  // another node's
  const std::string d1 = checkpoint("node-2", "uid-d", 1000);
  std::ofstream(root_ / "dst" / d1 / "claimed") << "";  // a recovery's
  // Pod b is gone from node-2; a is still there.
  StatusOr<int> removed = PruneCarried("127.0.0.1", server->port(), key_, "node-2", {"uid-a"});
  ASSERT_TRUE(removed.ok()) << removed.status().message();
  EXPECT_EQ(*removed, 2);
  std::set<std::string> left;
  for (const fs::directory_entry& e : fs::directory_iterator(root_ / "dst")) {
    left.insert(e.path().filename().string());
  }
  EXPECT_EQ(left, (std::set<std::string>{a2, c1, d1}));
  EXPECT_FALSE(fs::exists(root_ / "dst" / a1));
  EXPECT_FALSE(fs::exists(root_ / "dst" / b1));
  // Refused: a node name or a uid that is none.
  EXPECT_FALSE(PruneCarried("127.0.0.1", server->port(), key_, "../x", {}).ok());
  StatusOr<int> bad = PruneCarried("127.0.0.1", server->port(), key_, "node-2", {"a b"});
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(left.size(), 3U);
  EXPECT_TRUE(CarriableImageName(CheckpointImageName("0b5c1f3e-aa", 1733)));
  EXPECT_FALSE(CarriableImageName("recover-../x"));
}

}  // namespace
}  // namespace paladin::k8s
