// The page relay (src/migrate/page_relay.h) between two stand-ins for CRIU over loopback: a
// "page server" and a "puller" that each send a known stream and read the other's to its end.
// Between the relays a proxy forwards the link and cuts it, so what is checked is what a
// post-copy move needs: every byte of both streams arrives once, in order, through any number of
// cuts; a stranger is refused without taking the page server; a link that stays away fails both
// ends loudly (a reset, not a short stream that looks whole).
#include "page_relay.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "paladin/migrate/control.h"

namespace paladin::migrate {
namespace {

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";

std::string Bytes(size_t size, unsigned seed) {
  std::mt19937 random(seed);
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(random());
  return out;
}

// What one end read, and whether its stream ended cleanly (EOF) or with an error.
struct Heard {
  std::string bytes;
  bool clean_end = false;
};

// Sends `send` (then closes its writing half, unless `hold_open`: as a puller that asks for
// pages until it has them all) while reading the other way to its end.
Heard Exchange(int fd, const std::string& send, bool hold_open = false) {
  std::thread writer([fd, &send, hold_open] {
    size_t done = 0;
    while (done < send.size()) {
      const ssize_t n = ::send(fd, send.data() + done, std::min<size_t>(send.size() - done, 100000),
                               MSG_NOSIGNAL);
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
    if (!hold_open) shutdown(fd, SHUT_WR);
  });
  Heard heard;
  char buffer[65536];
  for (;;) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      heard.bytes.append(buffer, static_cast<size_t>(n));
      continue;
    }
    heard.clean_end = n == 0;
    break;
  }
  writer.join();
  return heard;
}

// A forwarder on loopback towards `target`: each connection is cut (both sockets reset) once
// it has carried `cut_every` bytes, a different count for each (so cuts fall inside frames).
// With `stay_away`, after the first cut it takes no more connections. With `flip_at`, the byte
// at that offset of what goes towards `target` is altered on the way (the first connection's).
// It keeps the first MiB that went towards `target` (seen()).
class CuttingProxy {
 public:
  CuttingProxy(int target, size_t cut_every, bool stay_away, size_t flip_at = 0)
      : target_(target), cut_every_(cut_every), stay_away_(stay_away), flip_at_(flip_at) {
    StatusOr<Listener> l = Listener::Listen("127.0.0.1", 0);
    EXPECT_TRUE(l.ok());
    port_ = l->port();
    thread_ = std::thread([this, listener = std::move(*l)]() mutable { Run(&listener); });
  }
  ~CuttingProxy() {
    stop_.store(true);
    thread_.join();
  }
  int port() const { return port_; }
  int cuts() const { return cuts_.load(); }
  std::string seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  void Run(Listener* listener) {
    unsigned round = 0;
    while (!stop_.load()) {
      if (stay_away_ && cuts_.load() > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      StatusOr<Channel> in = listener->Accept(0.1);
      if (!in.ok()) continue;
      StatusOr<Channel> out = Channel::Connect("127.0.0.1", target_, 2);
      if (!out.ok()) continue;
      const size_t limit = cut_every_ + (round++ * 7919) % (cut_every_ / 2 + 1);
      size_t carried = 0;
      const int fds[2] = {in->fd(), out->fd()};
      char buffer[16384];
      bool open = true;
      while (open && !stop_.load() && carried < limit) {
        pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
        if (poll(p, 2, 100) <= 0) continue;
        for (int i = 0; i < 2 && open; ++i) {
          if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
          const size_t want = std::min(sizeof buffer, limit - carried);
          const ssize_t n = recv(fds[i], buffer, want, 0);
          if (n <= 0) {
            open = false;
            break;
          }
          if (i == 0) {
            std::lock_guard<std::mutex> lock(mu_);
            if (flip_at_ > toward_ && flip_at_ - toward_ < static_cast<size_t>(n)) {
              buffer[flip_at_ - toward_] ^= 0x20;
            }
            toward_ += static_cast<size_t>(n);
            seen_.append(buffer, std::min<size_t>(n, (size_t{1} << 20) -
                                                         std::min(seen_.size(), size_t{1} << 20)));
          }
          size_t done = 0;
          while (done < static_cast<size_t>(n)) {
            const ssize_t w = send(fds[1 - i], buffer + done, n - done, MSG_NOSIGNAL);
            if (w <= 0) break;
            done += static_cast<size_t>(w);
          }
          carried += static_cast<size_t>(n);
        }
      }
      if (carried >= limit) {
        cuts_.fetch_add(1);
        linger hard{1, 0};
        setsockopt(fds[0], SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
        setsockopt(fds[1], SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
      }
    }
  }

  int target_;
  size_t cut_every_;
  bool stay_away_;
  size_t flip_at_;
  std::mutex mu_;
  size_t toward_ = 0;  // bytes that went towards `target`, all connections
  std::string seen_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> cuts_{0};
  std::thread thread_;
};

// The stand-in page server: one connection, an exchange.
class FakeServer {
 public:
  explicit FakeServer(std::string send) : send_(std::move(send)) {
    StatusOr<Listener> l = Listener::Listen("127.0.0.1", 0);
    EXPECT_TRUE(l.ok());
    port_ = l->port();
    thread_ = std::thread([this, listener = std::move(*l)]() mutable {
      StatusOr<Channel> c = listener.Accept(60);
      if (c.ok()) heard_ = Exchange(c->fd(), send_);
    });
  }
  Heard Join() {
    thread_.join();
    return heard_;
  }
  int port() const { return port_; }

 private:
  std::string send_;
  int port_ = 0;
  Heard heard_;
  std::thread thread_;
};

TEST(PageRelayTest, BothStreamsArriveWholeAndInOrderThroughRepeatedCuts) {
  const std::string down = Bytes(24 << 20, 1);  // the pages
  const std::string up = Bytes(3 << 20, 2);     // the requests
  FakeServer server(down);
  StatusOr<Listener> links = Listener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(links.ok());
  const int link_port = links->port();
  PageRelayOptions options;
  options.replay_limit = size_t{2} << 20;  // the sender waits for acknowledgements, too
  StatusOr<PageRelay> serve =
      PageRelay::Serve(std::move(*links), "127.0.0.1", server.port(), kSecret, options, nullptr);
  ASSERT_TRUE(serve.ok()) << serve.status().message();
  CuttingProxy proxy(link_port, size_t{3} << 20, /*stay_away=*/false);
  StatusOr<PageRelay> reach =
      PageRelay::Reach("127.0.0.1", proxy.port(), kSecret, options, nullptr);
  ASSERT_TRUE(reach.ok()) << reach.status().message();
  StatusOr<Channel> puller = Channel::Connect("127.0.0.1", reach->local_port(), 5);
  ASSERT_TRUE(puller.ok());
  const Heard pulled = Exchange(puller->fd(), up);
  const Heard served = server.Join();
  EXPECT_TRUE(pulled.clean_end);
  EXPECT_TRUE(served.clean_end);
  EXPECT_TRUE(pulled.bytes == down)
      << "the puller read " << pulled.bytes.size() << " of " << down.size() << " bytes, or others";
  EXPECT_TRUE(served.bytes == up) << "the server read " << served.bytes.size() << " of "
                                  << up.size() << " bytes, or others";
  EXPECT_TRUE(reach->Wait(20).ok()) << reach->Wait(0).message();
  EXPECT_TRUE(serve->Wait(20).ok()) << serve->Wait(0).message();
  // About 27 MiB of pages and requests, cut every 3 to 4.5 MiB.
  EXPECT_GE(proxy.cuts(), 4);
  EXPECT_EQ(reach->resumes(), proxy.cuts());
  EXPECT_EQ(serve->resumes(), proxy.cuts());
}

TEST(PageRelayTest, AStrangerIsRefusedAndDoesNotTakeThePageServer) {
  const std::string down = Bytes(1 << 20, 3);
  FakeServer server(down);
  StatusOr<Listener> links = Listener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(links.ok());
  const int link_port = links->port();
  std::vector<std::string> said;
  std::mutex said_mu;
  StatusOr<PageRelay> serve =
      PageRelay::Serve(std::move(*links), "127.0.0.1", server.port(), kSecret, PageRelayOptions{},
                       [&](const std::string& line) {
                         std::lock_guard<std::mutex> lock(said_mu);
                         said.push_back(line);
                       });
  ASSERT_TRUE(serve.ok());
  // A stranger who connects first and answers the greeting with a made-up proof.
  {
    StatusOr<Channel> stranger = Channel::Connect("127.0.0.1", link_port, 5);
    ASSERT_TRUE(stranger.ok());
    char greeting[128] = {};
    ASSERT_GT(recv(stranger->fd(), greeting, sizeof greeting - 1, 0), 0);
    EXPECT_EQ(std::string(greeting).rfind("PALADIN-PAGE-RELAY 1 ", 0), 0u);
    const std::string forged = std::string(64, 'a') + " 0\n";
    ASSERT_EQ(send(stranger->fd(), forged.data(), forged.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(forged.size()));
    char answer[8];
    EXPECT_LE(recv(stranger->fd(), answer, sizeof answer, 0), 0) << "the stranger was answered";
  }
  // A relay with another secret is refused too, and told so.
  StatusOr<PageRelay> wrong = PageRelay::Reach(
      "127.0.0.1", link_port, "ffffffffffffffffffffffffffffffff", PageRelayOptions{}, nullptr);
  EXPECT_FALSE(wrong.ok());
  // The move's own relay still gets the page server, untouched.
  StatusOr<PageRelay> reach =
      PageRelay::Reach("127.0.0.1", link_port, kSecret, PageRelayOptions{}, nullptr);
  ASSERT_TRUE(reach.ok()) << reach.status().message();
  StatusOr<Channel> puller = Channel::Connect("127.0.0.1", reach->local_port(), 5);
  ASSERT_TRUE(puller.ok());
  const Heard pulled = Exchange(puller->fd(), "request");
  const Heard served = server.Join();
  EXPECT_TRUE(pulled.bytes == down);
  EXPECT_EQ(served.bytes, "request");
  EXPECT_TRUE(serve->Wait(20).ok());
  std::lock_guard<std::mutex> lock(said_mu);
  int refused = 0;
  for (const std::string& line : said) refused += line.find("refused a link") != std::string::npos;
  EXPECT_EQ(refused, 2);
}

TEST(PageRelayTest, ALinkThatStaysAwayResetsBothEnds) {
  const std::string down = Bytes(16 << 20, 4);
  FakeServer server(down);
  StatusOr<Listener> links = Listener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(links.ok());
  const int link_port = links->port();
  PageRelayOptions options;
  options.resume_timeout_s = 2;
  StatusOr<PageRelay> serve =
      PageRelay::Serve(std::move(*links), "127.0.0.1", server.port(), kSecret, options, nullptr);
  ASSERT_TRUE(serve.ok());
  CuttingProxy proxy(link_port, size_t{2} << 20, /*stay_away=*/true);
  StatusOr<PageRelay> reach =
      PageRelay::Reach("127.0.0.1", proxy.port(), kSecret, options, nullptr);
  ASSERT_TRUE(reach.ok());
  StatusOr<Channel> puller = Channel::Connect("127.0.0.1", reach->local_port(), 5);
  ASSERT_TRUE(puller.ok());
  const Heard pulled = Exchange(puller->fd(), "request", /*hold_open=*/true);
  const Heard served = server.Join();
  EXPECT_FALSE(pulled.clean_end) << "a given-up stream must not end like a whole one";
  EXPECT_LT(pulled.bytes.size(), down.size());
  EXPECT_FALSE(served.clean_end);
  const Status reached = reach->Wait(20);
  EXPECT_NE(reached.message().find("not made again within 2 s"), std::string::npos)
      << reached.message();
  EXPECT_FALSE(serve->Wait(20).ok());
  EXPECT_EQ(proxy.cuts(), 1);
}

// A CRIU whose connection fails (here the page server's, reset mid-stream) makes the other
// side's CRIU fail too: its relay hears why and resets its connection, rather than let the
// puller take a short stream for a whole one.
TEST(PageRelayTest, ACriuThatFailsFailsTheOtherSide) {
  StatusOr<Listener> pages = Listener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(pages.ok());
  const int server_port = pages->port();
  std::thread server([listener = std::move(*pages)]() mutable {
    StatusOr<Channel> c = listener.Accept(30);
    if (!c.ok()) return;
    const std::string some = Bytes(1 << 20, 5);
    (void)send(c->fd(), some.data(), some.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    linger hard{1, 0};
    setsockopt(c->fd(), SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  });
  StatusOr<Listener> links = Listener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(links.ok());
  const int link_port = links->port();
  StatusOr<PageRelay> serve = PageRelay::Serve(std::move(*links), "127.0.0.1", server_port, kSecret,
                                               PageRelayOptions{}, nullptr);
  ASSERT_TRUE(serve.ok());
  StatusOr<PageRelay> reach =
      PageRelay::Reach("127.0.0.1", link_port, kSecret, PageRelayOptions{}, nullptr);
  ASSERT_TRUE(reach.ok());
  StatusOr<Channel> puller = Channel::Connect("127.0.0.1", reach->local_port(), 5);
  ASSERT_TRUE(puller.ok());
  const Heard pulled = Exchange(puller->fd(), "request", /*hold_open=*/true);
  server.join();
  EXPECT_FALSE(pulled.clean_end);
  EXPECT_EQ(pulled.bytes.size(), size_t{1} << 20) << "what came before the failure arrives";
  const Status reached = reach->Wait(20);
  EXPECT_NE(reached.message().find("the other relay gave up: its CRIU's connection failed"),
            std::string::npos)
      << reached.message();
  EXPECT_FALSE(serve->Wait(20).ok());
}

// Streaming pre-copy's relays: each CRIU on a socket pair, every frame sealed. The dump's
// stream (24 MiB) and the page server's answers arrive whole and in order through repeated
// cuts, and the link never carries the stream in clear.
TEST(PageRelayTest, SealedStreamsOverSocketPairsArriveWholeThroughRepeatedCuts) {
  const std::string up = Bytes(24 << 20, 6);    // the dump's pages
  const std::string down = Bytes(64 << 10, 7);  // the page server's answers
  int server_pair[2];
  int dump_pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, server_pair), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, dump_pair), 0);
  StatusOr<Listener> links = Listener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(links.ok());
  const int link_port = links->port();
  PageRelayOptions options;
  options.seal = true;
  options.replay_limit = size_t{2} << 20;
  options.criu_socket = server_pair[1];
  StatusOr<PageRelay> serve = PageRelay::Serve(std::move(*links), "", 0, kSecret, options, nullptr);
  ASSERT_TRUE(serve.ok()) << serve.status().message();
  CuttingProxy proxy(link_port, size_t{3} << 20, /*stay_away=*/false);
  options.criu_socket = dump_pair[1];
  StatusOr<PageRelay> reach =
      PageRelay::Reach("127.0.0.1", proxy.port(), kSecret, options, nullptr);
  ASSERT_TRUE(reach.ok()) << reach.status().message();
  Heard served;
  std::thread server([&] { served = Exchange(server_pair[0], down); });
  const Heard dumped = Exchange(dump_pair[0], up);
  server.join();
  close(server_pair[0]);
  close(dump_pair[0]);
  EXPECT_TRUE(served.clean_end);
  EXPECT_TRUE(dumped.clean_end);
  EXPECT_TRUE(served.bytes == up) << "the page server read " << served.bytes.size() << " of "
                                  << up.size() << " bytes, or others";
  EXPECT_TRUE(dumped.bytes == down);
  EXPECT_TRUE(reach->Wait(20).ok()) << reach->Wait(0).message();
  EXPECT_TRUE(serve->Wait(20).ok()) << serve->Wait(0).message();
  EXPECT_GE(proxy.cuts(), 4);
  EXPECT_EQ(reach->resumes(), proxy.cuts());
  // Sealed: no 64 bytes of the stream show on the link.
  const std::string seen = proxy.seen();
  ASSERT_GT(seen.size(), size_t{512} << 10);
  for (size_t at = 0; at + 64 <= size_t{1} << 20; at += size_t{128} << 10) {
    EXPECT_EQ(seen.find(up.substr(at, 64)), std::string::npos) << "the stream at " << at;
  }
}

// A sealed frame altered on the way does not open: nothing of it reaches the page server, which
// reads only what came before it and then a failed end, and both relays say why.
TEST(PageRelayTest, ASealedFrameAlteredOnTheWayFailsBothEnds) {
  const std::string up = Bytes(8 << 20, 8);
  int server_pair[2];
  int dump_pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, server_pair), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, dump_pair), 0);
  StatusOr<Listener> links = Listener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(links.ok());
  const int link_port = links->port();
  PageRelayOptions options;
  options.seal = true;
  options.criu_socket = server_pair[1];
  StatusOr<PageRelay> serve = PageRelay::Serve(std::move(*links), "", 0, kSecret, options, nullptr);
  ASSERT_TRUE(serve.ok());
  // 3 MiB into the link: inside a data frame's sealed payload.
  CuttingProxy proxy(link_port, size_t{1} << 30, /*stay_away=*/false, size_t{3} << 20);
  options.criu_socket = dump_pair[1];
  StatusOr<PageRelay> reach =
      PageRelay::Reach("127.0.0.1", proxy.port(), kSecret, options, nullptr);
  ASSERT_TRUE(reach.ok());
  Heard served;
  std::thread server([&] { served = Exchange(server_pair[0], "", /*hold_open=*/true); });
  const Heard dumped = Exchange(dump_pair[0], up, /*hold_open=*/true);
  server.join();
  close(server_pair[0]);
  close(dump_pair[0]);
  EXPECT_LT(served.bytes.size(), size_t{3} << 20);
  EXPECT_TRUE(served.bytes == up.substr(0, served.bytes.size())) << "altered bytes were delivered";
  const Status served_end = serve->Wait(20);
  EXPECT_NE(served_end.message().find("does not open"), std::string::npos) << served_end.message();
  const Status reached = reach->Wait(20);
  EXPECT_NE(reached.message().find("the other relay gave up"), std::string::npos)
      << reached.message();
}

}  // namespace
}  // namespace paladin::migrate
