// The page relay (src/migrate/page_relay.h) between two stand-ins for CRIU, each on a socket pair
// with its relay as a CRIU is (CriuSocketPair): a "page server" and a "puller" (or a dump) that
// each send a known stream and read the other's to its end. Between the relays a proxy forwards
// the link and cuts it, or alters a byte, so what is checked is what a move needs: every byte of
// both streams arrives once, in order, through any number of cuts; a stranger is refused without
// reaching the page server; a link that stays away ends both streams early, and the relays say
// why; a sealed link carries nothing in clear and delivers nothing altered.
#include "page_relay.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
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
      bool ended[2] = {false, false};  // that side closed its writing half: passed on
      while (open && !stop_.load() && carried < limit && !(ended[0] && ended[1])) {
        pollfd p[2] = {{ended[0] ? -1 : fds[0], POLLIN, 0}, {ended[1] ? -1 : fds[1], POLLIN, 0}};
        if (poll(p, 2, 100) <= 0) continue;
        for (int i = 0; i < 2 && open; ++i) {
          if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
          const size_t want = std::min(sizeof buffer, limit - carried);
          const ssize_t n = recv(fds[i], buffer, want, 0);
          if (n == 0) {  // as a TCP proxy does: the end goes on, the other way stays open
            ended[i] = true;
            shutdown(fds[1 - i], SHUT_WR);
            continue;
          }
          if (n < 0) {
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

// The listening relay, on a loopback port of its own (*port), for its CRIU on `criu`.
StatusOr<PageRelay> ServeOnLoopback(SocketEnd criu, const PageRelayOptions& options, int* port,
                                    std::function<void(const std::string&)> progress) {
  StatusOr<Listener> links = Listener::Listen("127.0.0.1", 0);
  if (!links.ok()) return links.status();
  *port = links->port();
  return PageRelay::Serve(std::move(*links), std::move(criu), kSecret, options,
                          std::move(progress));
}

// A socket pair as a move makes it: `criu` for the stand-in, `relay` for its relay.
struct Pair {
  SocketEnd criu;
  SocketEnd relay;
};

Pair MakePair() {
  StatusOr<std::pair<SocketEnd, SocketEnd>> ends = CriuSocketPair();
  EXPECT_TRUE(ends.ok());
  return Pair{std::move(ends->first), std::move(ends->second)};
}

// Two relays linked straight over loopback, as a move makes them: `serving.criu` and
// `reaching.criu` are their CRIUs' ends.
struct Linked {
  Pair serving;
  Pair reaching;
  StatusOr<PageRelay> serve;
  StatusOr<PageRelay> reach;
};

Linked LinkOnLoopback(const PageRelayOptions& options) {
  Linked linked{MakePair(), MakePair(), Unavailable("not served"), Unavailable("not reached")};
  int port = 0;
  linked.serve = ServeOnLoopback(std::move(linked.serving.relay), options, &port, nullptr);
  if (linked.serve.ok()) {
    linked.reach = PageRelay::Reach("127.0.0.1", port, std::move(linked.reaching.relay), kSecret,
                                    options, nullptr);
  }
  return linked;
}

// A stand-in CRIU on its own thread: an exchange on its end of a pair.
class StandIn {
 public:
  StandIn(int fd, std::string send, bool hold_open = false)
      : send_(std::move(send)),
        thread_([this, fd, hold_open] { heard_ = Exchange(fd, send_, hold_open); }) {}
  Heard Join() {
    thread_.join();
    return heard_;
  }

 private:
  std::string send_;
  Heard heard_;
  std::thread thread_;
};

// A --lazy-plain move's relays (frames not sealed): the pages one way, the requests the other.
TEST(PageRelayTest, BothStreamsArriveWholeAndInOrderThroughRepeatedCuts) {
  const std::string down = Bytes(24 << 20, 1);  // the pages
  const std::string up = Bytes(3 << 20, 2);     // the requests
  Pair server = MakePair();
  Pair puller = MakePair();
  int link_port = 0;
  PageRelayOptions options;
  options.replay_limit = size_t{2} << 20;  // the sender waits for acknowledgements, too
  StatusOr<PageRelay> serve =
      ServeOnLoopback(std::move(server.relay), options, &link_port, nullptr);
  ASSERT_TRUE(serve.ok()) << serve.status().message();
  CuttingProxy proxy(link_port, size_t{3} << 20, /*stay_away=*/false);
  StatusOr<PageRelay> reach = PageRelay::Reach("127.0.0.1", proxy.port(), std::move(puller.relay),
                                               kSecret, options, nullptr);
  ASSERT_TRUE(reach.ok()) << reach.status().message();
  StandIn page_server(server.criu.fd(), down);
  const Heard pulled = Exchange(puller.criu.fd(), up);
  const Heard served = page_server.Join();
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
  Pair server = MakePair();
  int link_port = 0;
  std::vector<std::string> said;
  std::mutex said_mu;
  PageRelayOptions options;
  options.seal = true;
  StatusOr<PageRelay> serve =
      ServeOnLoopback(std::move(server.relay), options, &link_port, [&](const std::string& line) {
        std::lock_guard<std::mutex> lock(said_mu);
        said.push_back(line);
      });
  ASSERT_TRUE(serve.ok());
  StandIn page_server(server.criu.fd(), down);
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
  Pair other = MakePair();
  StatusOr<PageRelay> wrong =
      PageRelay::Reach("127.0.0.1", link_port, std::move(other.relay),
                       "ffffffffffffffffffffffffffffffff", options, nullptr);
  EXPECT_FALSE(wrong.ok());
  // The move's own relay still gets the page server, untouched.
  Pair puller = MakePair();
  StatusOr<PageRelay> reach =
      PageRelay::Reach("127.0.0.1", link_port, std::move(puller.relay), kSecret, options, nullptr);
  ASSERT_TRUE(reach.ok()) << reach.status().message();
  const Heard pulled = Exchange(puller.criu.fd(), "request");
  const Heard served = page_server.Join();
  EXPECT_TRUE(pulled.bytes == down);
  EXPECT_EQ(served.bytes, "request");
  EXPECT_TRUE(serve->Wait(20).ok());
  std::lock_guard<std::mutex> lock(said_mu);
  int refused = 0;
  for (const std::string& line : said) refused += line.find("refused a link") != std::string::npos;
  EXPECT_EQ(refused, 2);
}

// A link that stays away: both stand-ins' streams end early (on a socket pair an early end or a
// reset; CRIU's page protocol says when it is done, so an early end fails it), and both relays
// say why.
TEST(PageRelayTest, ALinkThatStaysAwayEndsBothStreamsEarly) {
  const std::string down = Bytes(16 << 20, 4);
  Pair server = MakePair();
  Pair puller = MakePair();
  int link_port = 0;
  PageRelayOptions options;
  options.resume_timeout_s = 2;
  StatusOr<PageRelay> serve =
      ServeOnLoopback(std::move(server.relay), options, &link_port, nullptr);
  ASSERT_TRUE(serve.ok());
  CuttingProxy proxy(link_port, size_t{2} << 20, /*stay_away=*/true);
  StatusOr<PageRelay> reach = PageRelay::Reach("127.0.0.1", proxy.port(), std::move(puller.relay),
                                               kSecret, options, nullptr);
  ASSERT_TRUE(reach.ok());
  StandIn page_server(server.criu.fd(), down, /*hold_open=*/true);
  const Heard pulled = Exchange(puller.criu.fd(), "request", /*hold_open=*/true);
  const Heard served = page_server.Join();
  EXPECT_LT(pulled.bytes.size(), down.size());
  EXPECT_TRUE(pulled.bytes == down.substr(0, pulled.bytes.size()));
  EXPECT_EQ(std::string("request").rfind(served.bytes, 0), 0u);
  const Status reached = reach->Wait(20);
  EXPECT_NE(reached.message().find("not made again within 2 s"), std::string::npos)
      << reached.message();
  const Status served_end = serve->Wait(20);
  EXPECT_NE(served_end.message().find("not made again within 2 s"), std::string::npos)
      << served_end.message();
  EXPECT_EQ(proxy.cuts(), 1);
}

// A CRIU whose connection fails (here the page server's: it dies with the request unread, which
// resets its socket) makes the other side's stream end too: its relay hears why (an abort
// frame) and lets its CRIU go, rather than wait for pages that will not come.
TEST(PageRelayTest, ACriuThatFailsFailsTheOtherSide) {
  PageRelayOptions options;
  options.seal = true;
  Linked linked = LinkOnLoopback(options);
  ASSERT_TRUE(linked.serve.ok() && linked.reach.ok());
  Pair& server = linked.serving;
  Pair& puller = linked.reaching;
  std::thread page_server([fd = server.criu.fd()] {
    const std::string some = Bytes(1 << 20, 5);
    size_t done = 0;
    while (done < some.size()) {
      const ssize_t n = send(fd, some.data() + done, some.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  });
  const std::string request = "request";
  ASSERT_EQ(send(puller.criu.fd(), request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  page_server.join();
  server.criu.Close();  // dies, the request unread
  const Heard pulled = Exchange(puller.criu.fd(), "", /*hold_open=*/true);
  EXPECT_EQ(pulled.bytes.size(), size_t{1} << 20) << "what came before the failure arrives";
  const Status reached = linked.reach->Wait(20);
  EXPECT_NE(reached.message().find("the other relay gave up: its CRIU's connection failed"),
            std::string::npos)
      << reached.message();
  EXPECT_FALSE(linked.serve->Wait(20).ok());
}

// A relay whose owner calls the move off (a destination told to drop it) tells the other relay:
// that one fails its CRIU's stream now instead of waiting the resume timeout (here far longer
// than the test waits) for a link that will not come back.
TEST(PageRelayTest, ARelayStoppedByItsOwnerFailsTheOtherSide) {
  PageRelayOptions options;
  options.seal = true;
  options.resume_timeout_s = 600;
  Linked linked = LinkOnLoopback(options);
  ASSERT_TRUE(linked.serve.ok() && linked.reach.ok());
  Pair& dump = linked.reaching;
  const std::string some = Bytes(1 << 20, 8);
  ASSERT_EQ(send(dump.criu.fd(), some.data(), some.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(some.size()));
  linked.serve->Stop();
  const Status reached = linked.reach->Wait(20);
  EXPECT_NE(reached.message().find("the other relay gave up: the page relay was stopped"),
            std::string::npos)
      << reached.message();
  // The dump's stream ends (early, nothing answered): its CRIU does not wait either.
  const Heard dumped = Exchange(dump.criu.fd(), "", /*hold_open=*/true);
  EXPECT_TRUE(dumped.bytes.empty());
}

// The other relay gone for good (its process died: the link closed, and nothing listens on its
// port any more): the reaching relay gives up at once, not after the resume timeout (here far
// longer than the test waits), and its CRIU's stream ends.
TEST(PageRelayTest, ARelayWhoseOtherSideNoLongerListensGivesUpAtOnce) {
  Pair server = MakePair();
  Pair dump = MakePair();
  int link_port = 0;
  PageRelayOptions options;
  options.seal = true;
  options.resume_timeout_s = 600;
  StatusOr<PageRelay> serve =
      ServeOnLoopback(std::move(server.relay), options, &link_port, nullptr);
  ASSERT_TRUE(serve.ok());
  // The other relay as the reaching one sees it: its listener and its link, both gone at once.
  auto proxy = std::make_unique<CuttingProxy>(link_port, size_t{1} << 30, /*stay_away=*/false);
  StatusOr<PageRelay> reach = PageRelay::Reach("127.0.0.1", proxy->port(), std::move(dump.relay),
                                               kSecret, options, nullptr);
  ASSERT_TRUE(reach.ok());
  StandIn page_server(server.criu.fd(), "", /*hold_open=*/true);
  const std::string some = Bytes(1 << 20, 9);
  ASSERT_EQ(send(dump.criu.fd(), some.data(), some.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(some.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  proxy.reset();
  const Status reached = reach->Wait(20);
  EXPECT_NE(reached.message().find("is gone: nothing listens at 127.0.0.1:"), std::string::npos)
      << reached.message();
  const Heard dumped = Exchange(dump.criu.fd(), "", /*hold_open=*/true);
  EXPECT_TRUE(dumped.bytes.empty());
  serve->Stop();
  (void)page_server.Join();
}

// Sealed relays (every move's but a --lazy-plain one's), as streaming pre-copy uses them: the
// dump's stream (24 MiB) and the page server's answers arrive whole and in order through
// repeated cuts, and the link never carries the stream in clear.
TEST(PageRelayTest, SealedStreamsArriveWholeThroughRepeatedCuts) {
  const std::string up = Bytes(24 << 20, 6);    // the dump's pages
  const std::string down = Bytes(64 << 10, 7);  // the page server's answers
  Pair server = MakePair();
  Pair dump = MakePair();
  int link_port = 0;
  PageRelayOptions options;
  options.seal = true;
  options.replay_limit = size_t{2} << 20;
  StatusOr<PageRelay> serve =
      ServeOnLoopback(std::move(server.relay), options, &link_port, nullptr);
  ASSERT_TRUE(serve.ok()) << serve.status().message();
  CuttingProxy proxy(link_port, size_t{3} << 20, /*stay_away=*/false);
  StatusOr<PageRelay> reach =
      PageRelay::Reach("127.0.0.1", proxy.port(), std::move(dump.relay), kSecret, options, nullptr);
  ASSERT_TRUE(reach.ok()) << reach.status().message();
  StandIn page_server(server.criu.fd(), down);
  const Heard dumped = Exchange(dump.criu.fd(), up);
  const Heard served = page_server.Join();
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
// reads only what came before it, and both relays say why.
TEST(PageRelayTest, ASealedFrameAlteredOnTheWayFailsBothEnds) {
  const std::string up = Bytes(8 << 20, 8);
  Pair server = MakePair();
  Pair dump = MakePair();
  int link_port = 0;
  PageRelayOptions options;
  options.seal = true;
  options.resume_timeout_s = 3;
  StatusOr<PageRelay> serve =
      ServeOnLoopback(std::move(server.relay), options, &link_port, nullptr);
  ASSERT_TRUE(serve.ok());
  // 3 MiB into the link: inside a data frame's sealed payload.
  CuttingProxy proxy(link_port, size_t{1} << 30, /*stay_away=*/false, size_t{3} << 20);
  StatusOr<PageRelay> reach =
      PageRelay::Reach("127.0.0.1", proxy.port(), std::move(dump.relay), kSecret, options, nullptr);
  ASSERT_TRUE(reach.ok());
  StandIn page_server(server.criu.fd(), "", /*hold_open=*/true);
  const Heard dumped = Exchange(dump.criu.fd(), up, /*hold_open=*/true);
  const Heard served = page_server.Join();
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
