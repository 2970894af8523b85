// The page relay: a move's page stream crosses the network between two relays of Paladin's, one
// beside each CRIU, so that a cut connection is made again and the stream goes on where it
// stopped instead of failing the move (docs/lazy_migration.md, "A cut page stream"). Post-copy:
// the dump's page server at the source, `criu lazy-pages` at the destination. Streaming
// pre-copy: the dump at the source, `criu page-server` at the destination. Each CRIU speaks in
// clear to its relay on a socket pair (CriuSocketPair, CRIU's --ps-socket; no CRIU listens on
// any port); the relays seal every frame between them (PageRelayOptions::seal).
//
// The relays carry CRIU's bytes in frames of their own, number what each direction carried, and
// keep what they sent until the other relay acknowledges it. When the link is cut the relay that
// connected (Reach) connects again (until `resume_timeout_s`), each side says how much it
// received, and each sends again what the other lacks; neither CRIU sees the cut. A link that
// does not come back within the timeout is given up: both relays reset their CRIU's connection,
// which fails the move as a cut stream did before (the job resumes at the source). Each link, the
// first and every later one, is authenticated both ways by HMAC-SHA256 under a secret of the
// move's, which both sides derive from their command channel's session key and a nonce
// (PageRelaySecret) and never send: a stranger who connects is refused and does not take the page
// server (docs/formats/migrate.md, "The page relay").
#ifndef PALADIN_MIGRATE_PAGE_RELAY_H_
#define PALADIN_MIGRATE_PAGE_RELAY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "paladin/base/status.h"
#include "paladin/migrate/control.h"

namespace paladin::migrate {

// One end of a socket pair, closed with its owner.
class SocketEnd {
 public:
  SocketEnd() = default;
  explicit SocketEnd(int fd) : fd_(fd) {}
  ~SocketEnd() { Close(); }
  SocketEnd(SocketEnd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  SocketEnd& operator=(SocketEnd&& other) noexcept;
  SocketEnd(const SocketEnd&) = delete;
  SocketEnd& operator=(const SocketEnd&) = delete;
  int fd() const { return fd_; }
  // Gives the descriptor up to the caller.
  int Release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Close();

 private:
  int fd_ = -1;
};

// A connected socket pair (close-on-exec both, 4 MiB buffers where root may set them): [0] for
// CRIU (its --ps-socket), [1] for its relay (PageRelay::Serve, PageRelay::Reach).
StatusOr<std::pair<SocketEnd, SocketEnd>> CriuSocketPair();

// The relay secret of a move, as both sides derive it from their command channel and RESTORE
// LAZY's nonce (Channel::DerivedSecret); refused on a channel that is not sealed.
StatusOr<std::string> PageRelaySecret(const Channel& channel, const std::string& nonce);

struct PageRelayOptions {
  // How long a cut link is waited for (at the source) and tried again (at the destination).
  double resume_timeout_s = 30;
  // What one side keeps of what it sent and the other has not acknowledged: at most this much;
  // reading from its CRIU waits while it is full.
  size_t replay_limit = size_t{64} << 20;
  // For the tests: the link is cut once (shut down both ways) after this side has received this
  // many bytes; 0 never.
  uint64_t cut_after = 0;
  // How long one new link may take to authenticate before it is dropped.
  double handshake_timeout_s = 5;
  // Every frame on the link sealed (AES-128-GCM under keys of that link, derived from the
  // secret and the link's challenge). Without it the frames go as they are (a post-copy move's
  // --lazy-plain). Both sides must agree.
  bool seal = false;
};

class PageRelay {
 public:
  PageRelay();
  ~PageRelay();  // Stop()
  PageRelay(PageRelay&& other) noexcept;
  PageRelay& operator=(PageRelay&& other) noexcept;
  PageRelay(const PageRelay&) = delete;
  PageRelay& operator=(const PageRelay&) = delete;

  // The side that listens: takes the other relay's links on `listener` (the first and any later
  // one that proves `secret`) and carries the stream to and from its CRIU on `criu`, its end of
  // CriuSocketPair.
  static StatusOr<PageRelay> Serve(Listener listener, SocketEnd criu, const std::string& secret,
                                   const PageRelayOptions& options,
                                   std::function<void(const std::string&)> progress);
  // The side that connects: to the other relay at `host`:`port`, proving `secret` (again after a
  // cut), and carries the stream to and from its CRIU on `criu`.
  static StatusOr<PageRelay> Reach(const std::string& host, int port, SocketEnd criu,
                                   const std::string& secret, const PageRelayOptions& options,
                                   std::function<void(const std::string&)> progress);

  // Waits up to `timeout_s` for the relay to end: Ok once both directions were closed by their
  // CRIU and everything was acknowledged; the reason otherwise. Unavailable while it still runs.
  Status Wait(double timeout_s);
  // How many times the link was made again.
  int resumes() const;
  // Ends it now: if it was not over, its CRIU's connection is reset and the other relay is told
  // (an abort frame), so that it does not wait for the link to come back.
  void Stop();

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace paladin::migrate

#endif  // PALADIN_MIGRATE_PAGE_RELAY_H_
