// The page relay (page_relay.h): one thread per side moves CRIU's bytes between its loopback
// connection and the link to the other relay, keeps what it sent until it is acknowledged, and
// makes the link again when it is cut. The link's frames and handshake: docs/formats/migrate.md,
// "The page relay".
#include "page_relay.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "page_relay_link.h"

namespace paladin::migrate {

namespace {

using relay_link::After;
using relay_link::Clock;
using relay_link::Close;
using relay_link::Dial;
using relay_link::FrameSeal;
using relay_link::GetU32;
using relay_link::GetU64;
using relay_link::IsLowerHex;
using relay_link::kAbort;
using relay_link::kAck;
using relay_link::kControlMax;
using relay_link::kData;
using relay_link::kFin;
using relay_link::kFrameMax;
using relay_link::kHeader;
using relay_link::kTag;
using relay_link::LinkKey;
using relay_link::MillisUntil;
using relay_link::ParseProof;
using relay_link::PutHeader;
using relay_link::PutU32;
using relay_link::RawBytes;
using relay_link::ReceiveLine;
using relay_link::Reset;
using relay_link::Seconds;
using relay_link::SendAll;
using relay_link::SetNonBlocking;
using relay_link::WatchLink;

constexpr size_t kReadChunk = size_t{1} << 20;   // one read from a socket, at most
constexpr size_t kAckEvery = size_t{1} << 20;    // received, acknowledged at least this often
constexpr size_t kToLocalMax = size_t{8} << 20;  // received, not yet taken by CRIU, at most
constexpr const char* kGreeting = "PALADIN-PAGE-RELAY 1 ";
constexpr size_t kMaxGreeting = 8;  // links waiting to prove the secret, at most

}  // namespace

struct PageRelay::State {
  bool serving = false;
  PageRelayOptions options;
  std::function<void(const std::string&)> progress;
  std::string secret;
  std::string peer;  // the other relay, for messages
  // Serve: the links' listener and CRIU's page server.
  int link_listener = -1;
  // Reach: where this side's CRIU connects, and the other relay.
  std::string host;
  int port = 0;

  // Serve: the links greeted that have not yet proved the secret.
  struct Greeted {
    int fd = -1;
    std::string challenge;
    std::string line;
    Clock::time_point until;
  };
  std::vector<Greeted> greeting;

  int local = -1;  // this side's CRIU
  int link = -1;   // the other relay; -1 while cut
  bool ever_linked = false;
  Clock::time_point cut_since;

  // What this side's CRIU sent: bytes [AckedData(), read) are kept in `replay`, from
  // `replay_begin` to `replay_end` (allocated once, not zeroed); its end (FIN) is one more in
  // the numbering.
  std::unique_ptr<char[]> replay;
  size_t replay_cap = 0;
  size_t replay_begin = 0;
  size_t replay_end = 0;
  uint64_t read = 0;
  uint64_t acked = 0;  // what the other relay acknowledged, FIN included
  bool local_eof = false;
  uint64_t sent = 0;  // what the current link was given, in the same numbering
  std::string out;    // control frames queued for the link, written between data frames
  size_t out_head = 0;
  // A sealed link's two directions (none on a plain one).
  std::unique_ptr<FrameSeal> seal_out;
  std::unique_ptr<FrameSeal> seal_in;
  RawBytes wire;  // the frames being written to the link, each put there when its turn comes
  size_t wire_head = 0;

  // What the other side's CRIU sent: each frame is kept until it is whole (and opens, on a
  // sealed link), then taken.
  char head[kHeader] = {};
  size_t head_got = 0;
  bool in_frame = false;
  char frame_type = 0;
  size_t frame_left = 0;
  RawBytes frame_in;  // the frame under way's payload (and tag), as it arrives
  bool link_quiet = false;
  uint64_t received = 0;
  uint64_t ack_sent = 0;
  bool peer_fin = false;
  bool local_shut = false;
  std::string to_local;
  size_t to_local_head = 0;
  bool cut_done = false;
  bool closing = false;  // Done, and the link shut for writing: the other side's end awaited

  Status broken = Status::Ok();  // a frame that could not be sealed
  std::string write_error;       // why a write to the link failed, until the link is cut
  bool link_done = false;        // the other relay ended the link with everything settled
  bool peer_gone = false;        // nothing listens where the other relay did: not coming back
  std::atomic<bool> stop{false};
  std::atomic<int> resumes{0};
  std::mutex mu;
  std::condition_variable cv;
  bool over = false;
  Status result = Unavailable("the page relay still runs");
  std::thread thread;

  void Say(const std::string& what) const {
    if (progress) progress("page relay: " + what);
  }
  uint64_t AckedData() const { return std::min(acked, read); }
  uint64_t Total() const { return read + (local_eof ? 1 : 0); }
  size_t Pending() const { return to_local.size() - to_local_head; }

  void Finish(Status s) {
    for (Greeted& g : greeting) Close(&g.fd);
    Close(&link_listener);
    if (s.ok()) {
      Close(&local);
    } else {
      Reset(&local);
    }
    Close(&link);
    std::lock_guard<std::mutex> lock(mu);
    result = std::move(s);
    over = true;
    cv.notify_all();
  }

  // Gives up: the other relay is told (best effort, after the frames already queued, so that a
  // frame cut short does not garble it) and this side's CRIU sees a reset.
  Status Fail(const std::string& why) {
    if (link >= 0) {
      const std::string text = why.substr(0, kControlMax);
      Queue(kAbort, text.data(), text.size());
      FrameQueued();
      (void)SendAll(link, std::string(wire.data() + wire_head, wire.size - wire_head), After(1));
      // Until the other relay has read it and closed (at most a second): closed at once with
      // what that relay sent still unread here, the link would be reset, which can drop the
      // abort on its way.
      shutdown(link, SHUT_WR);
      char unread[65536];
      pollfd p{link, POLLIN, 0};
      const Clock::time_point until = After(1);
      while (poll(&p, 1, MillisUntil(until)) > 0 && recv(link, unread, sizeof unread, 0) > 0) {
      }
    }
    return Unavailable(why);
  }

  // The reaching side's handshake on a new link (docs/formats/migrate.md), blocking: it has
  // nothing else to do while its link is down.
  Status Handshake(int fd, std::string* challenge_out) {
    const Clock::time_point until = After(options.handshake_timeout_s);
    StatusOr<std::string> line = ReceiveLine(fd, until);
    if (!line.ok()) return line.status();
    const std::string hello = kGreeting;
    if (line->rfind(hello, 0) != 0 || !IsLowerHex(line->substr(hello.size()), 32)) {
      return PermissionDenied("not a page relay's greeting");
    }
    const std::string challenge = line->substr(hello.size());
    PALADIN_RETURN_IF_ERROR(SendAll(
        fd, HmacSha256Hex(secret, "reach " + challenge) + " " + std::to_string(received) + "\n",
        until));
    StatusOr<std::string> answer = ReceiveLine(fd, until);
    if (!answer.ok()) return answer.status();
    std::string proof;
    uint64_t their_received = 0;
    if (!ParseProof(*answer, &proof, &their_received) ||
        !SameSecret(proof, HmacSha256Hex(secret, "serve " + challenge))) {
      return PermissionDenied("the other relay did not prove this move's relay secret");
    }
    *challenge_out = challenge;
    return GoOnFrom(their_received);
  }

  // The serving side's handshake is a step of its loop, one per new link, so that a stranger
  // who connects and says nothing holds up neither the stream nor the move's own relay: a
  // greeting with a challenge at once, then the answer whenever it comes (AnswerCame).
  void Greet(int fd) {
    StatusOr<std::string> challenge = RandomHex(16);
    if (!challenge.ok() ||
        !SendAll(fd, kGreeting + *challenge + "\n", After(options.handshake_timeout_s)).ok()) {
      close(fd);
      return;
    }
    if (greeting.size() >= kMaxGreeting) {  // the oldest goes
      Refuse(&greeting.front(), "too many links waiting to prove the secret");
      greeting.erase(greeting.begin());
    }
    greeting.push_back(Greeted{fd, *challenge, "", After(options.handshake_timeout_s)});
  }

  void Refuse(Greeted* g, const std::string& why) {
    Close(&g->fd);
    Say("refused a link: " + why);
  }

  // A greeted link's answer, whole: Ok and adopted, or refused (its fd closed); an error only
  // when the move's own relay says something impossible.
  Status AnswerCame(Greeted* g) {
    std::string line = g->line.substr(0, g->line.find('\n'));
    std::string proof;
    uint64_t their_received = 0;
    if (!ParseProof(line, &proof, &their_received)) {
      Refuse(g, "not a page relay's answer");
      return Status::Ok();
    }
    if (!SameSecret(proof, HmacSha256Hex(secret, "reach " + g->challenge))) {
      Refuse(g, "it does not hold this move's relay secret");
      return Status::Ok();
    }
    if (!SendAll(
             g->fd,
             HmacSha256Hex(secret, "serve " + g->challenge) + " " + std::to_string(received) + "\n",
             After(options.handshake_timeout_s))
             .ok()) {
      Refuse(g, "it went before the answer");
      return Status::Ok();
    }
    const int fd = g->fd;
    g->fd = -1;
    Status going = GoOnFrom(their_received);
    if (!going.ok()) {
      close(fd);
      return going;
    }
    Adopt(fd, g->challenge);
    return Status::Ok();
  }

  // Reads what a greeted link sent; answers, refuses or keeps waiting.
  Status Hear(Greeted* g) {
    char buffer[256];
    const ssize_t n = recv(g->fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      Refuse(g, "it closed before proving the secret");
      return Status::Ok();
    }
    if (n > 0) g->line.append(buffer, static_cast<size_t>(n));
    if (g->line.find('\n') != std::string::npos) return AnswerCame(g);
    if (g->line.size() > 200) Refuse(g, "not a page relay's answer");
    return Status::Ok();
  }

  // What the other relay says it received: the stream goes on from there.
  Status GoOnFrom(uint64_t their_received) {
    if (their_received < acked || their_received > Total()) {
      return InvalidArgument("the other relay says it received " + std::to_string(their_received) +
                             " bytes, but " + std::to_string(acked) + " were acknowledged and " +
                             std::to_string(Total()) + " sent");
    }
    Acknowledge(their_received);
    sent = their_received;
    ack_sent = received;
    return Status::Ok();
  }

  void Acknowledge(uint64_t upto) {
    const uint64_t before = AckedData();
    acked = upto;
    replay_begin += static_cast<size_t>(AckedData() - before);
  }

  // Room for `want` more bytes at replay_end: what is kept moves to the start once little is.
  void MakeRoom(size_t want) {
    if (!replay) {
      replay_cap = options.replay_limit + kReadChunk;
      replay = std::make_unique_for_overwrite<char[]>(replay_cap);
    }
    const size_t kept = replay_end - replay_begin;
    if (kept == 0 || (replay_begin > (size_t{8} << 20) && kept < replay_begin) ||
        replay_end + want > replay_cap) {
      std::memmove(replay.get(), replay.get() + replay_begin, kept);
      replay_begin = 0;
      replay_end = kept;
    }
  }

  const char* ReplayAt(uint64_t offset) const {
    return replay.get() + replay_begin + (offset - AckedData());
  }

  void ResetLink() {
    out.clear();
    out_head = 0;
    head_got = 0;
    in_frame = false;
    frame_in.size = 0;
    wire.size = 0;
    wire_head = 0;
    seal_out.reset();
    seal_in.reset();
  }

  // A new link replaces the old one (if any) and the stream goes on; `challenge`: its
  // handshake's, from which a sealed link's keys are derived.
  void Adopt(int fd, const std::string& challenge) {
    const bool again = ever_linked;
    closing = false;
    Close(&link);
    ResetLink();
    if (options.seal) {
      seal_out = std::make_unique<FrameSeal>(
          LinkKey(secret, serving ? "to-reach" : "to-serve", challenge), true);
      seal_in = std::make_unique<FrameSeal>(
          LinkKey(secret, serving ? "to-serve" : "to-reach", challenge), false);
    }
    link = fd;
    SetNonBlocking(link);
    if (again) {
      resumes.fetch_add(1);
      char took[32];
      snprintf(took, sizeof took, "%.2f", Seconds(Clock::now() - cut_since));
      Say("the link to " + peer + " was made again after " + took + " s; going on from byte " +
          std::to_string(sent) + " (" + std::to_string(Total() - sent) +
          " sent before and not acknowledged, sent again)");
    }
    ever_linked = true;
  }

  void Cut(const std::string& why) {
    Close(&link);
    closing = false;
    ResetLink();
    cut_since = Clock::now();
    Say("the link to " + peer + " was cut (" + why + "); " +
        (serving ? "waiting " : "connecting again for ") +
        std::to_string(static_cast<int>(options.resume_timeout_s)) + " s");
  }

  void Queue(char type, const char* data, size_t len) {
    out.push_back(type);
    PutU32(&out, static_cast<uint32_t>(len));
    out.append(data, len);
  }

  // Queues an acknowledgement when enough arrived, when the link has fallen quiet, or at the
  // stream's end; and the end of this side's stream once all its data is framed.
  void Fill() {
    if (link < 0) return;
    if (received > ack_sent && (received - ack_sent >= kAckEvery || link_quiet || peer_fin)) {
      char v[8];
      for (int i = 0; i < 8; ++i) v[i] = static_cast<char>(received >> (56 - 8 * i));
      Queue(kAck, v, 8);
      ack_sent = received;
    }
    if (local_eof && sent == read) {
      Queue(kFin, nullptr, 0);
      sent = read + 1;
    }
  }

  bool HasToWrite() const { return out.size() > out_head || sent < read || wire_head < wire.size; }

  // One frame into `wire`: sealed on a sealed link, else as it is.
  void PutFrame(const char* header, const char* payload, size_t len) {
    if (seal_out) {
      if (!seal_out->Seal(header, payload, len, &wire)) {
        broken = Internal("cannot seal a frame (OpenSSL)");
      }
      return;
    }
    char* at = wire.Grow(kHeader + len);
    std::memcpy(at, header, kHeader);
    if (len > 0) std::memcpy(at + kHeader, payload, len);
  }

  // The control frames queued go into `wire`, in order.
  void FrameQueued() {
    while (out_head < out.size()) {
      const size_t len = GetU32(out.data() + out_head + 1);
      PutFrame(out.data() + out_head, out.data() + out_head + kHeader, len);
      out_head += kHeader + len;
    }
    out.clear();
    out_head = 0;
  }

  // Writes to the link until it would block: each frame is put into `wire` when its turn comes
  // (the control frames queued, then the next data frame), then written. A failed write is
  // kept in write_error (the loop cuts the link).
  void Flush() {
    while (link >= 0) {
      if (wire_head == wire.size) {
        wire.size = 0;
        wire_head = 0;
        if (out.size() > out_head) {
          FrameQueued();
        } else if (sent < read) {
          const size_t len = static_cast<size_t>(std::min<uint64_t>(kFrameMax, read - sent));
          char header[kHeader];
          PutHeader(header, kData, len);
          PutFrame(header, ReplayAt(sent), len);
          sent += len;
        } else {
          return;
        }
      }
      const ssize_t put = send(link, wire.data() + wire_head, wire.size - wire_head, MSG_NOSIGNAL);
      if (put > 0) {
        wire_head += static_cast<size_t>(put);
        continue;
      }
      if (put < 0 && errno != EAGAIN && errno != EINTR) write_error = strerror(errno);
      return;
    }
  }

  // One whole control frame.
  Status Frame(char type, const char* payload, size_t len) {
    if (type == kAck) {
      if (len != 8)
        return InvalidArgument("an acknowledgement of " + std::to_string(len) + " bytes");
      const uint64_t upto = GetU64(payload);
      if (upto < acked || upto > Total()) {
        return InvalidArgument("an acknowledgement of byte " + std::to_string(upto) + " of " +
                               std::to_string(Total()));
      }
      Acknowledge(upto);
    } else if (type == kFin) {
      if (len != 0) return InvalidArgument("an end of the stream with a payload");
      if (peer_fin) return InvalidArgument("a second end of the stream");
      peer_fin = true;
      received += 1;
    } else if (type == kAbort) {
      return Unavailable("the other relay gave up: " + std::string(payload, len));
    } else {
      return InvalidArgument("an unknown frame");
    }
    return Status::Ok();
  }

  // A frame header's bytes from the front of `data`: true once it is whole and its length
  // checked (the frame then begins).
  StatusOr<bool> TakeHeader(const char** data, size_t* size) {
    const size_t n = std::min(kHeader - head_got, *size);
    std::memcpy(head + head_got, *data, n);
    head_got += n;
    *data += n;
    *size -= n;
    if (head_got < kHeader) return false;
    head_got = 0;
    frame_type = head[0];
    frame_left = GetU32(head + 1);
    if (frame_type == kData) {
      if (frame_left == 0 || frame_left > kFrameMax) {
        return InvalidArgument("a data frame of " + std::to_string(frame_left) + " bytes");
      }
      if (peer_fin) return InvalidArgument("data after the end of the stream");
    } else if (frame_left > kControlMax) {
      return InvalidArgument("a control frame of " + std::to_string(frame_left) + " bytes");
    }
    in_frame = true;
    if (seal_in) frame_left += kTag;
    frame_in.size = 0;
    frame_in.Reserve(frame_left);
    return true;
  }

  // The link's bytes as they come (any cut of them): each frame is kept until it is whole.
  Status Take(const char* data, size_t size) {
    while (size > 0) {
      if (!in_frame) {
        StatusOr<bool> whole = TakeHeader(&data, &size);
        if (!whole.ok()) return whole.status();
        if (!*whole) break;
      }
      const size_t n = std::min(frame_left, size);
      std::memcpy(frame_in.data() + frame_in.size, data, n);
      data += n;
      size -= n;
      PALADIN_RETURN_IF_ERROR(FrameArrived(n));
    }
    return Status::Ok();
  }

  // `n` more bytes of the frame under way are in `frame_in` past its size (read there straight
  // from the link, or copied by Take); a whole frame is opened (on a sealed link) and taken.
  Status FrameArrived(size_t n) {
    frame_in.size += n;
    frame_left -= n;
    if (frame_left > 0) return Status::Ok();
    in_frame = false;
    const size_t len = frame_in.size - (seal_in ? kTag : 0);
    if (seal_in && !seal_in->Open(head, frame_in.data(), len)) {
      return InvalidArgument(
          "a frame that does not open under this link's key (altered on the way, or not from "
          "this move's relay)");
    }
    if (frame_type == kData) {
      PALADIN_RETURN_IF_ERROR(Deliver(frame_in.data(), len));
      received += len;
    } else {
      PALADIN_RETURN_IF_ERROR(Frame(frame_type, frame_in.data(), len));
    }
    return Status::Ok();
  }

  // The other side's bytes to this side's CRIU: straight to its socket when nothing waits
  // before them (no copy), the rest kept in order.
  Status Deliver(const char* bytes, size_t len) {
    size_t put = 0;
    if (Pending() == 0 && local >= 0) {
      const ssize_t n = send(local, bytes, len, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        put = static_cast<size_t>(n);
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        return Fail("its CRIU's connection failed: " + std::string(strerror(errno)));
      }
    }
    to_local.append(bytes + put, len - put);
    return Status::Ok();
  }

  // One new link on the listener: greeted, then adopted once it proves the secret.
  void AcceptLink() {
    const int fd = accept4(link_listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    WatchLink(fd);
    Greet(fd);
  }

  Status Reconnect() {
    StatusOr<int> fd = Dial(host, port, 0.5, /*retry_refused=*/false);
    if (!fd.ok()) {
      // The other relay's listener lives as long as it does: a refusal means it is gone (its
      // process died), and no waiting brings it back. Anything else may be the cut itself.
      if (fd.status().code() == StatusCode::kFailedPrecondition) {
        peer_gone = true;
        // After the end of both streams only its acknowledgement was missing (Loop).
        if (!Ended()) return Fail(peer + " is gone: " + fd.status().message());
      }
      return Status::Ok();
    }
    WatchLink(*fd);
    std::string challenge;
    Status shook = Handshake(*fd, &challenge);
    if (!shook.ok()) {
      close(*fd);
      if (shook.code() == StatusCode::kInvalidArgument ||
          shook.code() == StatusCode::kPermissionDenied) {
        return shook;
      }
      return Status::Ok();
    }
    Adopt(*fd, challenge);
    return Status::Ok();
  }

  // Both CRIUs closed their sides and this side's CRIU has everything the other sent: only
  // the acknowledgement of this side's end may be missing.
  bool Ended() const { return local_eof && peer_fin && local_shut; }

  bool Done() const {
    return local_eof && acked == read + 1 && peer_fin && local_shut && link >= 0 &&
           ack_sent == received && out.size() == out_head && wire_head == wire.size;
  }

  Status Loop() {
    std::vector<char> buffer(kReadChunk);
    std::vector<pollfd> fds;  // what each turn of the loop waits on
    for (;;) {
      // Its owner gave the move up: the other relay is told, or it would take the closed link
      // for a cut and wait for it to come back.
      if (stop.load()) return Fail("the page relay was stopped (the move was called off)");
      if (!broken.ok()) return broken;
      // Nothing more to send or to hear: a link gone now is not made again (what the other side
      // sent still goes on to this side's CRIU).
      const bool settled = local_eof && acked == read + 1 && peer_fin;
      if (link < 0 && ever_linked && ((settled && !serving) || link_done) && local_shut) {
        return Status::Ok();
      }
      if (link < 0 && ever_linked && !link_done && !(settled && !serving)) {
        if (!serving) PALADIN_RETURN_IF_ERROR(Reconnect());
        if (link < 0 &&
            (peer_gone || Seconds(Clock::now() - cut_since) > options.resume_timeout_s)) {
          if (Ended()) {
            Say("the stream had ended; " + peer + " did not come back to acknowledge its end");
            return Status::Ok();
          }
          return Unavailable("the link to " + peer + " was cut and not made again within " +
                             std::to_string(static_cast<int>(options.resume_timeout_s)) + " s");
        }
      }
      if (peer_fin && Pending() == 0 && !local_shut && local >= 0) {
        shutdown(local, SHUT_WR);
        local_shut = true;
      }
      Fill();
      if (Done() && !closing) {
        shutdown(link, SHUT_WR);
        closing = true;
        if (!serving) {
          // Everything this side sent was acknowledged and everything the other sent arrived:
          // its own last acknowledgement, if a cut loses it, the source's relay does without
          // (Ended).
          pollfd p{link, POLLIN, 0};
          const Clock::time_point until = After(2);
          while (poll(&p, 1, MillisUntil(until)) > 0 &&
                 recv(link, buffer.data(), buffer.size(), 0) > 0) {
          }
          return Status::Ok();
        }
      }
      fds.clear();
      auto watch = [&fds](int fd, short events) {
        if (fd < 0 || events == 0) return -1;
        fds.push_back(pollfd{fd, events, 0});
        return static_cast<int>(fds.size()) - 1;
      };
      const bool room = read - AckedData() < options.replay_limit;
      const int l = watch(local, static_cast<short>((!local_eof && room ? POLLIN : 0) |
                                                    (Pending() > 0 ? POLLOUT : 0)));
      const int n = watch(link, static_cast<short>((Pending() < kToLocalMax ? POLLIN : 0) |
                                                   (HasToWrite() ? POLLOUT : 0)));
      const int ll = watch(link_listener, POLLIN);
      const size_t first_greeted = fds.size();
      for (const Greeted& g : greeting) watch(g.fd, POLLIN);
      if (poll(fds.data(), fds.size(), 200) < 0 && errno != EINTR) {
        return IoError(std::string("poll: ") + strerror(errno));
      }
      auto has = [&fds](int i, short what) {
        return i >= 0 && (fds[static_cast<size_t>(i)].revents & (what | POLLERR | POLLHUP)) != 0;
      };
      if (has(l, POLLIN) && !local_eof && room) {
        const size_t want =
            std::min<size_t>(kReadChunk, options.replay_limit - (read - AckedData()));
        MakeRoom(want);
        const ssize_t got = recv(local, replay.get() + replay_end, want, 0);
        if (got > 0) {
          replay_end += static_cast<size_t>(got);
          read += static_cast<uint64_t>(got);
        } else if (got == 0) {
          local_eof = true;
        } else if (errno != EAGAIN && errno != EINTR) {
          return Fail("its CRIU's connection failed: " + std::string(strerror(errno)));
        }
      }
      if (has(l, POLLOUT) && Pending() > 0) {
        const ssize_t put = send(local, to_local.data() + to_local_head, Pending(), MSG_NOSIGNAL);
        if (put > 0) {
          to_local_head += static_cast<size_t>(put);
          if (to_local_head == to_local.size() || to_local_head > (size_t{4} << 20)) {
            to_local.erase(0, to_local_head);
            to_local_head = 0;
          }
        } else if (put < 0 && errno != EAGAIN && errno != EINTR) {
          return Fail("its CRIU's connection failed: " + std::string(strerror(errno)));
        }
      }
      // What the other relay sent is read before this side writes: an abort it sent before it
      // closed is heard, not lost to the write error its close causes here.
      link_quiet = !has(n, POLLIN);
      if (has(n, POLLIN) && link >= 0) {
        // A frame's payload goes straight where it is opened and taken.
        const bool straight = in_frame;
        const ssize_t got = straight ? recv(link, frame_in.data() + frame_in.size, frame_left, 0)
                                     : recv(link, buffer.data(), buffer.size(), 0);
        if (got > 0) {
          Status taken = straight ? FrameArrived(static_cast<size_t>(got))
                                  : Take(buffer.data(), static_cast<size_t>(got));
          if (!taken.ok()) {
            return taken.code() == StatusCode::kInvalidArgument ? Fail(taken.message()) : taken;
          }
        } else if (got == 0 && (closing || (local_eof && acked == read + 1 && peer_fin))) {
          // The other relay's end, after this one's or once each had all the other sent: what
          // it sent still goes on to this side's CRIU.
          if (local_shut) return Status::Ok();
          Close(&link);
          link_done = true;
        } else if (got == 0) {
          Cut("closed by the other end");
        } else if (errno != EAGAIN && errno != EINTR) {
          Cut(strerror(errno));
        }
      }
      if (has(n, POLLOUT) && link >= 0) Flush();
      if (!write_error.empty()) {
        // What the other relay sent before its end made this write fail (an abort above all)
        // is taken before the link is cut.
        for (ssize_t got;
             link >= 0 && (got = recv(link, buffer.data(), buffer.size(), MSG_DONTWAIT)) > 0;) {
          Status taken = Take(buffer.data(), static_cast<size_t>(got));
          if (!taken.ok()) {
            return taken.code() == StatusCode::kInvalidArgument ? Fail(taken.message()) : taken;
          }
        }
        Cut(write_error);
        write_error.clear();
      }
      if (options.cut_after > 0 && !cut_done && link >= 0 && received >= options.cut_after) {
        cut_done = true;
        Say("fault for the tests: cutting the link after " + std::to_string(received) +
            " bytes received");
        shutdown(link, SHUT_RDWR);
      }
      for (size_t i = 0; i < greeting.size(); ++i) {
        Greeted& g = greeting[i];
        if (has(static_cast<int>(first_greeted + i), POLLIN)) {
          PALADIN_RETURN_IF_ERROR(Hear(&g));
        } else if (Clock::now() > g.until) {
          Refuse(&g, "it did not prove the secret within " +
                         std::to_string(static_cast<int>(options.handshake_timeout_s)) + " s");
        }
      }
      greeting.erase(std::remove_if(greeting.begin(), greeting.end(),
                                    [](const Greeted& g) { return g.fd < 0; }),
                     greeting.end());
      if (has(ll, POLLIN)) AcceptLink();
    }
  }

  void Run() {
    // Named, so that what it costs shows by itself (top -H, bench/thread_cpu.py).
    pthread_setname_np(pthread_self(), serving ? "relay-serve" : "relay-reach");
    Finish(Loop());
  }
};

SocketEnd& SocketEnd::operator=(SocketEnd&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void SocketEnd::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

StatusOr<std::pair<SocketEnd, SocketEnd>> CriuSocketPair() {
  int ends[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) {
    return IoError(std::string("socketpair: ") + strerror(errno));
  }
  // Pages go through in runs of megabytes, not the default's few hundred KiB per wake-up (the
  // forced size needs root, which a move has; else the kernel's limit stands).
  for (const int end : ends) {
    const int bytes = 4 << 20;
    if (setsockopt(end, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) != 0) {
      (void)setsockopt(end, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    }
  }
  return std::make_pair(SocketEnd(ends[0]), SocketEnd(ends[1]));
}

StatusOr<std::string> PageRelaySecret(const Channel& channel, const std::string& nonce) {
  std::string secret = channel.DerivedSecret("page-relay " + nonce);
  if (secret.empty()) {
    return FailedPrecondition("the command channel is not sealed (no token): no page relay secret");
  }
  return secret;
}

PageRelay::PageRelay() = default;
PageRelay::~PageRelay() { Stop(); }
PageRelay::PageRelay(PageRelay&& other) noexcept = default;
PageRelay& PageRelay::operator=(PageRelay&& other) noexcept {
  if (this != &other) {
    Stop();
    state_ = std::move(other.state_);
  }
  return *this;
}

StatusOr<PageRelay> PageRelay::Serve(Listener listener, SocketEnd criu, const std::string& secret,
                                     const PageRelayOptions& options,
                                     std::function<void(const std::string&)> progress) {
  if (secret.size() < 32) return InvalidArgument("a page relay's secret needs 32 characters");
  if (criu.fd() < 0) return InvalidArgument("a page relay needs its CRIU's socket");
  auto state = std::make_unique<State>();
  state->serving = true;
  state->options = options;
  state->progress = std::move(progress);
  state->secret = secret;
  state->peer = "the other relay";
  state->link_listener = fcntl(listener.fd(), F_DUPFD_CLOEXEC, 0);
  if (state->link_listener < 0) return IoError(std::string("dup: ") + strerror(errno));
  SetNonBlocking(state->link_listener);
  state->local = criu.Release();
  SetNonBlocking(state->local);
  PageRelay relay;
  relay.state_ = std::move(state);
  State* s = relay.state_.get();
  s->thread = std::thread([s] { s->Run(); });
  return relay;
}

StatusOr<PageRelay> PageRelay::Reach(const std::string& host, int port, SocketEnd criu,
                                     const std::string& secret, const PageRelayOptions& options,
                                     std::function<void(const std::string&)> progress) {
  if (secret.size() < 32) return InvalidArgument("a page relay's secret needs 32 characters");
  if (criu.fd() < 0) return InvalidArgument("a page relay needs its CRIU's socket");
  auto state = std::make_unique<State>();
  state->options = options;
  state->progress = std::move(progress);
  state->secret = secret;
  state->peer = "the relay at " + host + ":" + std::to_string(port);
  state->host = host;
  state->port = port;
  StatusOr<int> first = Dial(host, port, 10, /*retry_refused=*/true);
  if (!first.ok()) {
    return Unavailable("cannot reach " + state->peer + ": " + first.status().message());
  }
  WatchLink(*first);
  std::string challenge;
  Status shook = state->Handshake(*first, &challenge);
  if (!shook.ok()) {
    close(*first);
    return Status(shook.code(), state->peer + " refused: " + shook.message());
  }
  state->Adopt(*first, challenge);
  state->local = criu.Release();
  SetNonBlocking(state->local);
  PageRelay relay;
  relay.state_ = std::move(state);
  State* s = relay.state_.get();
  s->thread = std::thread([s] { s->Run(); });
  return relay;
}

int PageRelay::resumes() const { return state_ ? state_->resumes.load() : 0; }

Status PageRelay::Wait(double timeout_s) {
  if (!state_) return FailedPrecondition("no page relay");
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait_for(lock, std::chrono::duration<double>(timeout_s),
                      [this] { return state_->over; });
  return state_->result;
}

void PageRelay::Stop() {
  if (!state_) return;
  state_->stop.store(true);
  if (state_->thread.joinable()) state_->thread.join();
}

}  // namespace paladin::migrate
