// The page relay's link (page_relay_link.h).
#include "page_relay_link.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "paladin/migrate/control.h"

namespace paladin::migrate::relay_link {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

Clock::time_point After(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

int MillisUntil(Clock::time_point t) {
  const double left = Seconds(t - Clock::now());
  return left <= 0 ? 0 : static_cast<int>(std::min(left * 1000 + 1, 1e9));
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

void WatchLink(int fd) {
  int one = 1;
  int idle = 5;
  int interval = 2;
  int count = 3;
  unsigned int user_timeout_ms = 15000;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void Reset(int* fd) {
  if (*fd < 0) return;
  linger hard{1, 0};
  setsockopt(*fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  close(*fd);
  *fd = -1;
}

void Close(int* fd) {
  if (*fd < 0) return;
  close(*fd);
  *fd = -1;
}

namespace {

// One attempt at `address` until `until`: the connected descriptor, or -1 with errno set.
int ConnectBefore(const addrinfo& address, Clock::time_point until) {
  const int fd = socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                        address.ai_protocol);
  if (fd < 0) return -1;
  int error = 0;
  if (connect(fd, address.ai_addr, address.ai_addrlen) != 0) {
    error = errno;
    pollfd p{fd, POLLOUT, 0};
    int ready = 0;
    while (error == EINPROGRESS && (ready = poll(&p, 1, MillisUntil(until))) < 0 &&
           errno == EINTR) {
    }
    if (error == EINPROGRESS) {
      socklen_t size = sizeof error;
      if (ready <= 0) {
        error = ETIMEDOUT;
      } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) {
        error = errno;
      }
    }
  }
  if (error != 0) {
    close(fd);
    errno = error;
    return -1;
  }
  return fd;
}

}  // namespace

StatusOr<int> Dial(const std::string& host, int port, double timeout_s, bool retry_refused) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return NotFound("cannot resolve " + host);
  }
  const std::unique_ptr<addrinfo, void (*)(addrinfo*)> addresses(found, freeaddrinfo);
  const Clock::time_point until = After(timeout_s);
  const std::string where = host + ":" + std::to_string(port);
  for (;;) {
    bool refused = false;
    std::string last = "no address";
    for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
      const int fd = ConnectBefore(*a, until);
      if (fd >= 0) return fd;
      refused = refused || errno == ECONNREFUSED;
      last = strerror(errno);
    }
    if (refused && !retry_refused) {
      return FailedPrecondition("nothing listens at " + where + " (connection refused)");
    }
    if (Clock::now() >= until) {
      std::string why = "cannot connect to " + where;
      return Unavailable(why.append(": ").append(last));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(200, MillisUntil(until))));
  }
}

Status SendAll(int fd, const std::string& bytes, Clock::time_point until) {
  size_t done = 0;
  while (done < bytes.size()) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, MillisUntil(until)) <= 0) return Unavailable("timed out writing");
    const ssize_t n = send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return IoError(strerror(errno));
    if (n > 0) done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

StatusOr<std::string> ReceiveLine(int fd, Clock::time_point until) {
  std::string line;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, MillisUntil(until)) <= 0) return Unavailable("no answer in time");
    char c = 0;
    const ssize_t n = recv(fd, &c, 1, 0);
    if (n == 0) return Unavailable("the connection closed");
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return IoError(strerror(errno));
    }
    if (c == '\n') return line;
    if (line.size() >= 200) return InvalidArgument("a line over 200 bytes");
    line.push_back(c);
  }
}

bool ParseProof(const std::string& line, std::string* proof, uint64_t* received) {
  if (line.size() < 66 || line[64] != ' ') return false;
  *proof = line.substr(0, 64);
  const std::string count = line.substr(65);
  if (count.empty() || count.size() > 19 ||
      count.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *received = std::stoull(count);
  return true;
}

void PutU32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

bool IsLowerHex(const std::string& s, size_t size) {
  return s.size() == size && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

void PutHeader(char* header, char type, size_t len) {
  header[0] = type;
  for (int i = 0; i < 4; ++i) header[1 + i] = static_cast<char>(len >> (24 - 8 * i));
}

std::string LinkKey(const std::string& secret, const char* direction,
                    const std::string& challenge) {
  return HmacSha256Hex(secret, std::string("seal ") + direction + " " + challenge);
}

}  // namespace paladin::migrate::relay_link
