// The command channel's authentication and sealing (include/paladin/migrate/control.h): both
// sides prove the token without sending it, and after that every line is checked: one altered,
// replayed, reflected or sent without its MAC ends the channel. Over loopback and socket pairs,
// no migration.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "paladin/migrate/control.h"

namespace paladin::migrate {
namespace {

constexpr char kToken[] = "channel-test-token";

// A listener on loopback serving one connection with `serve` in a thread.
class OneConnection {
 public:
  template <typename Serve>
  explicit OneConnection(Serve serve, const std::string& address = "127.0.0.1") {
    StatusOr<Listener> l = Listener::Listen(address, 0);
    EXPECT_TRUE(l.ok()) << l.status().message();
    port_ = l->port();
    thread_ = std::thread([listener = std::move(*l), serve]() mutable {
      StatusOr<Channel> c = listener.Accept(5);
      if (c.ok()) serve(&*c);
    });
  }
  ~OneConnection() { thread_.join(); }
  int port() const { return port_; }

 private:
  int port_ = 0;
  std::thread thread_;
};

TEST(ChannelTest, BothSidesProveTheTokenThenEveryLineIsChecked) {
  std::string heard;
  Status proved_there;
  {
    OneConnection server([&](Channel* c) {
      proved_there = CheckProof(c, kToken, 5);
      StatusOr<std::string> line = c->Receive(5);
      if (line.ok()) heard = *line;
      (void)c->Send("OK committed");
    });
    StatusOr<Channel> c = Channel::Connect("127.0.0.1", server.port(), 5);
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(ProveToken(&*c, kToken, 5).ok());
    StatusOr<std::string> answer = c->Call("RESUME m-1", 5);
    ASSERT_TRUE(answer.ok()) << answer.status().message();
    EXPECT_EQ(*answer, "committed");
  }
  EXPECT_TRUE(proved_there.ok()) << proved_there.message();
  EXPECT_EQ(heard, "RESUME m-1");
}

// Both ends of a proved channel derive the same secret from a label without sending it (the
// page relays' secret); another label, another connection or an unsealed channel gives another.
TEST(ChannelTest, BothEndsDeriveTheSameSecretAndNoOneElseDoes) {
  std::string there;
  std::string there_other;
  std::string here;
  {
    OneConnection server([&](Channel* c) {
      if (!CheckProof(c, kToken, 5).ok()) return;
      there = c->DerivedSecret("page-relay 01");
      there_other = c->DerivedSecret("page-relay 02");
      (void)c->Receive(5);
    });
    StatusOr<Channel> c = Channel::Connect("127.0.0.1", server.port(), 5);
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(ProveToken(&*c, kToken, 5).ok());
    here = c->DerivedSecret("page-relay 01");
    ASSERT_TRUE(c->Send("BYE").ok());
  }
  EXPECT_EQ(here.size(), 64u);
  EXPECT_EQ(here, there);
  EXPECT_NE(there, there_other);
  std::string second;
  {
    OneConnection server([&](Channel* c) { (void)CheckProof(c, kToken, 5); });
    StatusOr<Channel> c = Channel::Connect("127.0.0.1", server.port(), 5);
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(ProveToken(&*c, kToken, 5).ok());
    second = c->DerivedSecret("page-relay 01");
  }
  EXPECT_NE(second, here) << "each connection's session key is its own";
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  Channel unsealed(fds[0]);
  close(fds[1]);
  EXPECT_EQ(unsealed.DerivedSecret("page-relay 01"), "");
}

// The same over IPv6 (a cluster's pod network may be IPv6 only); an address that is none is
// refused naming it.
TEST(ChannelTest, ListensAndProvesOverIpv6) {
  Status proved_there;
  {
    OneConnection server([&](Channel* c) { proved_there = CheckProof(c, kToken, 5); }, "::1");
    StatusOr<Channel> c = Channel::Connect("::1", server.port(), 5);
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_TRUE(ProveToken(&*c, kToken, 5).ok());
  }
  EXPECT_TRUE(proved_there.ok()) << proved_there.message();
  StatusOr<Listener> bad = Listener::Listen("node-7", 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--bind 'node-7': not an IPv4 or IPv6 address"),
            std::string::npos)
      << bad.status().message();
}

TEST(ChannelTest, AnotherTokenIsRefusedAtTheListener) {
  Status proved_there;
  {
    OneConnection server([&](Channel* c) { proved_there = CheckProof(c, kToken, 5); });
    StatusOr<Channel> c = Channel::Connect("127.0.0.1", server.port(), 5);
    ASSERT_TRUE(c.ok());
    const Status proved = ProveToken(&*c, "another-token", 5);
    EXPECT_EQ(proved.code(), StatusCode::kPermissionDenied);
    EXPECT_EQ(proved.message(), "authentication failed");
  }
  EXPECT_EQ(proved_there.code(), StatusCode::kPermissionDenied);
}

// One listening in the destination's place, without the token: it cannot answer the proof, so
// the connecting side says nothing more to it (and believes none of its answers, e.g. a commit).
TEST(ChannelTest, AListenerWithoutTheTokenIsNotBelieved) {
  OneConnection impostor([](Channel* c) {
    (void)c->Send("CHALLENGE " + std::string(64, 'a'));
    (void)c->Receive(5);
    (void)c->Send("OK " + std::string(64, 'b'));
    (void)c->Receive(2);
  });
  StatusOr<Channel> c = Channel::Connect("127.0.0.1", impostor.port(), 5);
  ASSERT_TRUE(c.ok());
  const Status proved = ProveToken(&*c, kToken, 5);
  EXPECT_EQ(proved.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(proved.message(), "the peer did not prove it holds the token");
}

// Two sealed ends of a socket pair; `raw` reads what one sent as bytes, to be written again.
class SealedPairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    connector_ = Channel(fds[0]);
    listener_ = Channel(fds[1]);
    connector_.Seal(std::string(64, 'k'), /*listening=*/false);
    listener_.Seal(std::string(64, 'k'), /*listening=*/true);
  }
  static std::string Raw(const Channel& at) {
    char buf[512];
    const ssize_t n = recv(at.fd(), buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }
  static void Inject(const Channel& from, const std::string& bytes) {
    ASSERT_EQ(write(from.fd(), bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }
  Channel connector_;
  Channel listener_;
};

TEST_F(SealedPairTest, AReplayedLineIsRefused) {
  ASSERT_TRUE(connector_.Send("ABORT m-1").ok());
  const std::string sealed = Raw(listener_);
  ASSERT_EQ(sealed.rfind("ABORT m-1 ", 0), 0u) << sealed;
  Inject(connector_, sealed + sealed);
  StatusOr<std::string> first = listener_.Receive(1);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(*first, "ABORT m-1");
  StatusOr<std::string> again = listener_.Receive(1);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kIoError);
  EXPECT_NE(again.status().message().find("failed its check"), std::string::npos);
}

TEST_F(SealedPairTest, AnAlteredLineIsRefusedAndNothingMoreIsTaken) {
  ASSERT_TRUE(connector_.Send("PAGES-FAILED m-1").ok());
  std::string sealed = Raw(listener_);
  sealed.replace(0, 12, "PAGES-DONE  ");  // another command, the MAC kept
  Inject(connector_, sealed);
  EXPECT_FALSE(listener_.Receive(1).ok());
  ASSERT_TRUE(connector_.Send("OUTCOME m-1").ok());  // a good line after it: not taken either
  EXPECT_FALSE(listener_.Receive(1).ok());
}

TEST_F(SealedPairTest, ALineWithoutItsMacOrFromTheOtherDirectionIsRefused) {
  Inject(connector_, "RESUME\n");
  EXPECT_FALSE(listener_.Receive(1).ok());
  // The listener's own line sent back to it: made for the other direction.
  ASSERT_TRUE(connector_.Send("FEATURES").ok());  // the connector's side works
  ASSERT_TRUE(listener_.Send("OK committed").ok());
  const std::string reflected = Raw(connector_);
  Inject(connector_, reflected);
  EXPECT_FALSE(listener_.Receive(1).ok());
}

TEST_F(SealedPairTest, LinesGoBothWaysInOrder) {
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(connector_.Send("OUTCOME m-" + std::to_string(i)).ok());
    StatusOr<std::string> got = listener_.Receive(1);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(*got, "OUTCOME m-" + std::to_string(i));
    ASSERT_TRUE(listener_.Send("OK unknown").ok());
    StatusOr<std::string> back = connector_.Receive(1);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(*back, "OK unknown");
  }
  // A message of several lines goes as one (its later lines are no commands of their own).
  ASSERT_TRUE(listener_.Send("ERR page server failed\nOK committed").ok());
  StatusOr<std::string> one = connector_.Receive(1);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(*one, "ERR page server failed OK committed");
  EXPECT_FALSE(connector_.Receive(0.2).ok());  // nothing more
  ASSERT_TRUE(connector_.Send("").ok());       // an empty line too
  StatusOr<std::string> empty = listener_.Receive(1);
  ASSERT_TRUE(empty.ok()) << empty.status().message();
  EXPECT_EQ(*empty, "");
}

}  // namespace
}  // namespace paladin::migrate
