// The TCP connections a job holds, and Paladin's policy for them at a checkpoint (docs/ckpt.md,
// "Sockets"): a connection between two processes of the job is kept (CRIU dumps both ends in
// repair mode and restores them), a connection to a peer outside the job is closed before the
// dump, with a reset to the peer, since nothing outside the job is dumped with it.
#ifndef PALADIN_CKPT_SOCKETS_H_
#define PALADIN_CKPT_SOCKETS_H_

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "paladin/base/status.h"

namespace paladin::ckpt {

struct TcpEndpoint {
  std::array<uint8_t, 16> addr{};  // IPv6, or IPv4 mapped into it (::ffff:a.b.c.d)
  uint16_t port = 0;               // host byte order
  bool operator==(const TcpEndpoint&) const = default;
  std::string Describe() const;  // "127.0.0.1:8080", "[::1]:8080"
};

// One connected (not listening, not closed) TCP socket of the job, as the kernel lists it in the
// job's network namespace (/proc/PID/net/tcp and tcp6).
struct TcpConnection {
  bool ipv6 = false;  // which table it is in (an IPv6 socket may carry a mapped IPv4 address)
  TcpEndpoint local;
  TcpEndpoint remote;
  int state = 0;                 // the kernel's TCP state number (1 established, 2 SYN sent, ...)
  uint64_t inode = 0;            // of the job's socket
  bool internal = false;         // the other end is a socket of the job too
  std::string Describe() const;  // "127.0.0.1:5000 -> 10.0.0.2:443"
};

// The connected TCP sockets that the processes `pids` hold open, each marked internal when its
// peer socket is held by one of `pids` too. Reads /proc/PID/fd of each process and the socket
// tables of the first one's network namespace (a vanished process is skipped).
StatusOr<std::vector<TcpConnection>> JobConnections(const std::vector<pid_t>& pids);

// Aborts each connection that is not internal (the kernel's SOCK_DESTROY through sock_diag: the
// peer gets a reset, the job's socket is left closed with ECONNABORTED). Needs CAP_NET_ADMIN
// and a kernel built with CONFIG_INET_DIAG_DESTROY; a connection already gone is no error. The
// error names the connection that could not be closed.
Status CloseOutsideConnections(const std::vector<TcpConnection>& connections);

// Parses one socket table (/proc/net/tcp or tcp6) into its connected sockets, internal unset.
// For tests.
std::vector<TcpConnection> ParseTcpTableForTest(const std::string& text, bool ipv6);

}  // namespace paladin::ckpt

#endif  // PALADIN_CKPT_SOCKETS_H_
