#include "paladin/migrate/control.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "paladin/ckpt/image.h"

namespace paladin::migrate {

namespace {
constexpr size_t kMaxLine = size_t{1} << 20;
constexpr size_t kLineMacHex = 32;

// A sealed line's MAC: the sending side, the line's number in its direction, the line.
std::string LineMac(const std::string& key, bool from_listener, uint64_t number,
                    const std::string& line) {
  return HmacSha256Hex(key, std::string(from_listener ? "listener" : "connector") + "\n" +
                                std::to_string(number) + "\n" + line)
      .substr(0, kLineMacHex);
}

// For poll(); a wait of days is as good as forever.
int Millis(double seconds) { return static_cast<int>(std::min(seconds * 1000, 2e9)); }
}  // namespace

Channel::~Channel() {
  if (fd_ >= 0) close(fd_);
}

Channel::Channel(Channel&& other) noexcept
    : fd_(other.fd_),
      buffer_(std::move(other.buffer_)),
      session_key_(std::move(other.session_key_)),
      listening_(other.listening_),
      sent_(other.sent_),
      received_(other.received_) {
  other.fd_ = -1;
}

Channel& Channel::operator=(Channel&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
    buffer_ = std::move(other.buffer_);
    session_key_ = std::move(other.session_key_);
    listening_ = other.listening_;
    sent_ = other.sent_;
    received_ = other.received_;
  }
  return *this;
}

void Channel::Seal(const std::string& session_key, bool listening) {
  session_key_ = session_key;
  listening_ = listening;
  sent_ = 0;
  received_ = 0;
}

std::string Channel::DerivedSecret(const std::string& label) const {
  // "-": a channel whose seal broke (Receive).
  if (session_key_.empty() || session_key_ == "-") return "";
  return HmacSha256Hex(session_key_, "paladin-derived-secret\n" + label);
}

StatusOr<Channel> Channel::Connect(const std::string& host, int port, double timeout_s) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return NotFound("cannot resolve " + host);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string last = "no address";
  // The destination may still be receiving the image: retry until the time is up.
  while (std::chrono::steady_clock::now() < deadline) {
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        freeaddrinfo(found);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return Channel(fd);
      }
      last = strerror(errno);
      close(fd);
    }
    usleep(200 * 1000);
  }
  freeaddrinfo(found);
  return IoError("cannot connect to " + host + ":" + std::to_string(port) + ": " + last);
}

Status Channel::Send(const std::string& line) {
  // One line whatever it holds: a message of several lines (a tool's error output) would
  // otherwise be read as several, the later ones as commands or answers of their own.
  std::string data = line;
  std::replace(data.begin(), data.end(), '\n', ' ');
  std::replace(data.begin(), data.end(), '\r', ' ');
  if (!session_key_.empty()) data += " " + LineMac(session_key_, listening_, sent_++, data);
  data += "\n";
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return IoError(std::string("the connection broke: ") + strerror(errno));
    sent += static_cast<size_t>(n);
  }
  return Status::Ok();
}

StatusOr<std::string> Channel::Receive(double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const size_t newline = buffer_.find('\n');
    if (newline != std::string::npos) {
      std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      if (session_key_.empty()) return line;
      // The other side's MAC over this line and its number: anything else ends the channel.
      const bool sized = line.size() > kLineMacHex && line[line.size() - kLineMacHex - 1] == ' ';
      const std::string text = sized ? line.substr(0, line.size() - kLineMacHex - 1) : "";
      if (!sized || !SameSecret(line.substr(line.size() - kLineMacHex),
                                LineMac(session_key_, !listening_, received_, text))) {
        // Nothing more is taken from this connection: no MAC is made under this key.
        session_key_ = "-";
        return IoError(
            "a line from the other side failed its check (altered on the way, "
            "replayed, or not from the token's holder): the connection is dropped");
      }
      ++received_;
      return text;
    }
    const double left =
        std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return IoError("no answer within " + std::to_string(Millis(timeout_s)) + " ms");
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, Millis(left)) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return IoError("the other side closed the connection");
    buffer_.append(buf, static_cast<size_t>(n));
    if (buffer_.size() > kMaxLine) return InvalidArgument("a line longer than 1 MiB");
  }
}

StatusOr<std::string> Channel::Call(const std::string& command, double timeout_s) {
  PALADIN_RETURN_IF_ERROR(Send(command));
  StatusOr<std::string> answer = Receive(timeout_s);
  if (!answer.ok()) return answer.status();
  if (answer->rfind("OK", 0) == 0) return answer->size() > 3 ? answer->substr(3) : "";
  if (answer->rfind("ERR ", 0) == 0) return Internal(answer->substr(4));
  return InvalidArgument("unexpected answer: " + *answer);
}

Listener::~Listener() {
  if (fd_ >= 0) close(fd_);
}

StatusOr<Listener> Listener::Listen(const std::string& bind_address, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(bind_address.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return InvalidArgument("--bind '" + bind_address + "': not an IPv4 or IPv6 address (" +
                           gai_strerror(rc) + ")");
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(found);
    return IoError(std::string("socket: ") + strerror(errno));
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool bound = bind(fd, found->ai_addr, found->ai_addrlen) == 0 && listen(fd, 4) == 0;
  freeaddrinfo(found);
  if (!bound) {
    const std::string why = strerror(errno);
    close(fd);
    return IoError("cannot listen on " + bind_address + ":" + std::to_string(port) + ": " + why);
  }
  return Listener(fd);
}

int Listener::port() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  return ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

StatusOr<Channel> Listener::Accept(double timeout_s) {
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, Millis(timeout_s)) <= 0) {
    return IoError("no connection within " + std::to_string(static_cast<int>(timeout_s)) + " s");
  }
  const int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return IoError(std::string("accept: ") + strerror(errno));
  return Channel(fd);
}

std::string HmacSha256Hex(const std::string& key, const std::string& message) {
  unsigned char mac[32];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  return ckpt::DigestHex(mac, len);
}

StatusOr<std::string> RandomHex(size_t bytes) {
  std::vector<unsigned char> random(bytes);
  if (RAND_bytes(random.data(), static_cast<int>(bytes)) != 1) {
    return Internal("no random bytes (RAND_bytes)");
  }
  return ckpt::DigestHex(random.data(), bytes);
}

bool SameSecret(const std::string& a, const std::string& b) {
  if (b.empty()) return false;
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i % b.size()];
  return diff == 0;
}

namespace {

constexpr size_t kRandomHex = 64;

bool IsHex(const std::string& s, size_t size) {
  return s.size() == size && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// The listening side's answer to a proof, and the key both sides then seal the channel with.
std::string ReadyProof(const std::string& token, const std::string& challenge,
                       const std::string& nonce) {
  return HmacSha256Hex(token, "paladin-channel-ready\n" + challenge + "\n" + nonce);
}
std::string SessionKey(const std::string& token, const std::string& challenge,
                       const std::string& nonce) {
  return HmacSha256Hex(token, "paladin-channel-session\n" + challenge + "\n" + nonce);
}

}  // namespace

std::string ChannelProof(const std::string& token, const std::string& challenge,
                         const std::string& nonce) {
  return HmacSha256Hex(token, "paladin-channel-auth\n" + challenge + "\n" + nonce);
}

Status ProveToken(Channel* channel, const std::string& token, double timeout_s) {
  StatusOr<std::string> first = channel->Receive(timeout_s);
  if (!first.ok()) {
    return Unavailable("the peer asked for no proof of the token (" + first.status().message() +
                       ")");
  }
  if (first->rfind("CHALLENGE ", 0) != 0 || !IsHex(first->substr(10), kRandomHex)) {
    return Unavailable("the peer did not ask for proof of the token (it said '" +
                       first->substr(0, 64) + "': another version of Paladin?)");
  }
  const std::string challenge = first->substr(10);
  StatusOr<std::string> nonce_made = RandomHex(kRandomHex / 2);
  if (!nonce_made.ok()) return nonce_made.status();
  const std::string& nonce = *nonce_made;
  StatusOr<std::string> ok =
      channel->Call("PROOF " + nonce + " " + ChannelProof(token, challenge, nonce), timeout_s);
  if (!ok.ok()) {
    // ERR (Call's kInternal) is a refusal; anything else the connection's failure.
    if (ok.status().code() != StatusCode::kInternal) return ok.status();
    return PermissionDenied(ok.status().message());
  }
  if (!SameSecret(*ok, ReadyProof(token, challenge, nonce))) {
    return PermissionDenied("the peer did not prove it holds the token");
  }
  channel->Seal(SessionKey(token, challenge, nonce), /*listening=*/false);
  return Status::Ok();
}

Status CheckProof(Channel* channel, const std::string& token, double timeout_s) {
  StatusOr<std::string> made = RandomHex(kRandomHex / 2);
  if (!made.ok()) return made.status();
  const std::string& challenge = *made;
  PALADIN_RETURN_IF_ERROR(channel->Send("CHALLENGE " + challenge));
  StatusOr<std::string> proof = channel->Receive(timeout_s);
  if (!proof.ok()) return proof.status();
  const std::string nonce = proof->size() > 6 ? proof->substr(6, kRandomHex) : "";
  if (proof->rfind("PROOF ", 0) != 0 || !IsHex(nonce, kRandomHex) ||
      proof->size() != 6 + kRandomHex + 1 + kRandomHex || (*proof)[6 + kRandomHex] != ' ' ||
      !SameSecret(proof->substr(6 + kRandomHex + 1), ChannelProof(token, challenge, nonce))) {
    (void)channel->Send("ERR authentication failed");
    return PermissionDenied("authentication failed");
  }
  PALADIN_RETURN_IF_ERROR(channel->Send("OK " + ReadyProof(token, challenge, nonce)));
  channel->Seal(SessionKey(token, challenge, nonce), /*listening=*/true);
  return Status::Ok();
}

}  // namespace paladin::migrate
