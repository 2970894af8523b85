// The migration's command channel: one TCP connection, one text line per command and per
// answer, authenticated both ways by the shared token (ProveToken, CheckProof) before anything
// else, and every line after that carrying a MAC that the other side checks. Every read has a
// time limit.
// Channel is also the line protocol of the node agent's local socket and of the SLURM shim and
// its root helper (a Channel adopts any connected stream socket).
#ifndef PALADIN_MIGRATE_CONTROL_H_
#define PALADIN_MIGRATE_CONTROL_H_

#include <cstdint>
#include <string>

#include "paladin/base/status.h"

namespace paladin::migrate {

class Channel {
 public:
  Channel() = default;
  explicit Channel(int fd) : fd_(fd) {}
  ~Channel();
  Channel(Channel&& other) noexcept;
  Channel& operator=(Channel&& other) noexcept;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  static StatusOr<Channel> Connect(const std::string& host, int port, double timeout_s);
  // `line` as one line: a newline or carriage return in it is sent as a space.
  Status Send(const std::string& line);
  StatusOr<std::string> Receive(double timeout_s);
  // Sends `command` and returns the answer's text after "OK" ("" when bare), or its error.
  StatusOr<std::string> Call(const std::string& command, double timeout_s);
  int fd() const { return fd_; }  // still owned by the channel
  // From now on each line this side sends ends in " <MAC>" (32 hex digits: HMAC-SHA256 under
  // `session_key` of the side, the line's number in its direction and the line, cut to 128 bits),
  // and each line received must end in the other side's, which Receive checks and takes off. A
  // line without it, altered, replayed, dropped or out of order is refused as a broken connection
  // (IoError). `listening`: this is the side that accepted the connection.
  void Seal(const std::string& session_key, bool listening);
  // A secret that both ends of this sealed channel can compute and nobody else can, never sent:
  // HMAC-SHA256 of `label` under the session key, in hex ("" when the channel is not sealed).
  // The page relays' (docs/formats/migrate.md).
  std::string DerivedSecret(const std::string& label) const;

 private:
  int fd_ = -1;
  std::string buffer_;
  std::string session_key_;  // empty: lines as they are (local sockets)
  bool listening_ = false;
  uint64_t sent_ = 0;
  uint64_t received_ = 0;
};

class Listener {
 public:
  ~Listener();
  Listener(Listener&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  // Takes over a listening socket (a keeper's, inherited from its side).
  explicit Listener(int fd) : fd_(fd) {}
  // On `bind_address`, an IPv4 or IPv6 address ("::" takes both where the host allows), `port`
  // (0: one the system picks, port()).
  static StatusOr<Listener> Listen(const std::string& bind_address, int port);
  int port() const;  // the port it listens on
  StatusOr<Channel> Accept(double timeout_s);
  int fd() const { return fd_; }  // still owned by the listener

 private:
  int fd_ = -1;
};

// True when a and b are equal, in time independent of where they differ.
bool SameSecret(const std::string& a, const std::string& b);
// HMAC-SHA256 of `message` under `key`, lowercase hex (channel proofs, restore tokens, the
// carry's secrets).
std::string HmacSha256Hex(const std::string& key, const std::string& message);
// `bytes` random bytes (RAND_bytes) in lowercase hex.
StatusOr<std::string> RandomHex(size_t bytes);

// A connection's authentication, both ways, without the token on the network: the listening side
// sends `CHALLENGE <c>` (32 random bytes in hex, this connection's own), the connecting side
// answers `PROOF <n> <ChannelProof(token, c, n)>` (n: 32 random bytes of its own, in hex) and
// hears `OK <r>` (r: the listening side's proof over both, which it checks) or `ERR
// authentication failed`. Both sides then Seal the channel under a key made from the token and
// both randoms. One who records a connection learns nothing that opens another or speaks in it.
std::string ChannelProof(const std::string& token, const std::string& challenge,
                         const std::string& nonce);
// The connecting side. Unavailable when the peer asks for no proof within `timeout_s` (or the
// connection fails), PermissionDenied when it refuses the proof or does not prove the token itself.
Status ProveToken(Channel* channel, const std::string& token, double timeout_s);
// The listening side: OK once the peer proved `token` (and was told so); PermissionDenied
// ("authentication failed", the peer told the same) when it did not; else the connection's error.
Status CheckProof(Channel* channel, const std::string& token, double timeout_s);

}  // namespace paladin::migrate

#endif  // PALADIN_MIGRATE_CONTROL_H_
