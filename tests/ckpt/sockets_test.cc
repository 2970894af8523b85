// The job's TCP connections (include/paladin/ckpt/sockets.h): the kernel's socket tables parsed,
// a live job's connections told apart (inside the job or to an outside peer), and the outside
// one closed with a reset to the peer (root only).
#include "paladin/ckpt/sockets.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace paladin::ckpt {
namespace {

TEST(TcpTable, KeepsConnectedSocketsAndDecodesAddresses) {
  // As the kernel prints them: a listener, an established IPv4 connection, a TIME_WAIT entry
  // (no inode), a torn line; then IPv6 with a mapped IPv4 address and ::1.
  const std::string v4 =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
      "timeout inode\n"
      "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        "
      "0 1001 1 0000000000000000 100 0 0 10 0\n"
      "   1: 0100007F:1F90 0200000A:C350 01 00000000:00000000 00:00000000 00000000     0        "
      "0 1002 1 0000000000000000 20 4 30 10 -1\n"
      "   2: 0100007F:1F90 0100007F:C351 06 00000000:00000000 03:00000A2B 00000000     0        "
      "0 0 3 0000000000000000\n"
      "   3: 0100007F:1F90\n";
  std::vector<TcpConnection> c = ParseTcpTableForTest(v4, false);
  ASSERT_EQ(c.size(), 1U);
  EXPECT_EQ(c[0].inode, 1002U);
  EXPECT_EQ(c[0].state, 1);
  EXPECT_EQ(c[0].Describe(), "127.0.0.1:8080 -> 10.0.0.2:50000");

  const std::string v6 =
      "  sl  local_address                         remote_address                        st "
      "tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
      "   0: 0000000000000000FFFF00000100007F:1F90 0000000000000000FFFF00000100007F:C350 01 "
      "00000000:00000000 00:00000000 00000000     0        0 2001 1 0000000000000000\n"
      "   1: 00000000000000000000000001000000:0050 00000000000000000000000001000000:D431 08 "
      "00000000:00000000 00:00000000 00000000     0        0 2002 1 0000000000000000\n";
  c = ParseTcpTableForTest(v6, true);
  ASSERT_EQ(c.size(), 2U);
  EXPECT_EQ(c[0].Describe(), "127.0.0.1:8080 -> 127.0.0.1:50000");
  EXPECT_EQ(c[1].Describe(), "[::1]:80 -> [::1]:54321");
  EXPECT_EQ(c[1].state, 8);  // CLOSE_WAIT: still connected, as far as a dump goes
}

int Listener(uint16_t* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 4) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

int Connect(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  return connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 ? fd : -1;
}

// A child process plays the job: a connection between two of its own sockets, and one to a
// listener of this process (the outside peer).
TEST(JobConnections, TellsInsideFromOutsideAndResetsTheOutsidePeer) {
  uint16_t outside_port = 0;
  const int outside = Listener(&outside_port);
  ASSERT_GE(outside, 0);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t job = fork();
  if (job == 0) {
    uint16_t port = 0;
    const int inner = Listener(&port);
    const int a = Connect(port);
    const int b = accept(inner, nullptr, nullptr);
    const int out = Connect(outside_port);
    const char ok = (a >= 0 && b >= 0 && out >= 0) ? 'y' : 'n';
    (void)write(ready[1], &ok, 1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, 'y');
  const int peer = accept(outside, nullptr, nullptr);
  ASSERT_GE(peer, 0);

  StatusOr<std::vector<TcpConnection>> connections = JobConnections({job});
  ASSERT_TRUE(connections.ok()) << connections.status().message();
  int inside = 0;
  int to_outside = 0;
  for (const TcpConnection& c : *connections) {
    if (c.internal) {
      ++inside;
    } else {
      ++to_outside;
      EXPECT_EQ(c.remote.port, outside_port) << c.Describe();
    }
  }
  EXPECT_EQ(inside, 2);  // both ends of the job's own connection
  EXPECT_EQ(to_outside, 1);

  if (geteuid() == 0) {
    Status closed = CloseOutsideConnections(*connections);
    ASSERT_TRUE(closed.ok()) << closed.message();
    char byte;
    EXPECT_EQ(recv(peer, &byte, 1, 0), -1);
    EXPECT_EQ(errno, ECONNRESET);
    // The job's own connection is untouched.
    StatusOr<std::vector<TcpConnection>> after = JobConnections({job});
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->size(), 2U);
  }
  kill(job, SIGKILL);
  waitpid(job, nullptr, 0);
  close(peer);
  close(outside);
  close(ready[0]);
}

}  // namespace
}  // namespace paladin::ckpt
