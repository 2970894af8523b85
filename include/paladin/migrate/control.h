// The migration's command channel: one TCP connection, one text line per command and per
// answer, authenticated by the shared token (ProveToken, CheckProof) before anything else. Every
// read has a time limit.
// Channel is also the line protocol of the node agent's local socket and of the SLURM shim and
// its root helper (a Channel adopts any connected stream socket).
#ifndef PALADIN_MIGRATE_CONTROL_H_
#define PALADIN_MIGRATE_CONTROL_H_

#include <string>

#include "paladin/base/status.h"

namespace paladin::migrate {

class Channel {
 public:
  Channel() = default;
  explicit Channel(int fd) : fd_(fd) {}
  ~Channel();
  Channel(Channel&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Channel& operator=(Channel&& other) noexcept;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  static StatusOr<Channel> Connect(const std::string& host, int port, double timeout_s);
  Status Send(const std::string& line);
  StatusOr<std::string> Receive(double timeout_s);
  // Sends `command` and returns the answer's text after "OK" ("" when bare), or its error.
  StatusOr<std::string> Call(const std::string& command, double timeout_s);
  int fd() const { return fd_; }  // still owned by the channel

 private:
  int fd_ = -1;
  std::string buffer_;
};

class Listener {
 public:
  ~Listener();
  Listener(Listener&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  // Takes over a listening socket (a keeper's, inherited from its side).
  explicit Listener(int fd) : fd_(fd) {}
  static StatusOr<Listener> Listen(const std::string& bind_address, int port);
  StatusOr<Channel> Accept(double timeout_s);
  int fd() const { return fd_; }  // still owned by the listener

 private:
  int fd_ = -1;
};

// True when a and b are equal, in time independent of where they differ.
bool SameSecret(const std::string& a, const std::string& b);

// A connection's authentication without the token on the network: the listening side sends
// `CHALLENGE <64 hex>` (random, this connection's own), the connecting side answers
// `PROOF <ChannelProof(token, challenge)>`, and hears `OK` or `ERR authentication failed`. One who
// records a connection learns nothing that opens another.
std::string ChannelProof(const std::string& token, const std::string& challenge);
// The connecting side. Unavailable when the peer asks for no proof within `timeout_s` (or the
// connection fails), PermissionDenied when it refuses the proof.
Status ProveToken(Channel* channel, const std::string& token, double timeout_s);
// The listening side: OK once the peer proved `token` (and was told so); PermissionDenied
// ("authentication failed", the peer told the same) when it did not; else the connection's error.
Status CheckProof(Channel* channel, const std::string& token, double timeout_s);

}  // namespace paladin::migrate

#endif  // PALADIN_MIGRATE_CONTROL_H_
