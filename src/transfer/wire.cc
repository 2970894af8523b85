#include "wire.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace paladin::transfer::wire {

namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string PeerName(const sockaddr* addr, socklen_t len) {
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (getnameinfo(addr, len, host, sizeof host, port, sizeof port,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return std::string(host) + ":" + port;
}

struct AddrInfoFree {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoFree>;

StatusOr<AddrInfoPtr> Resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(),
                             &hints, &result);
  if (rc != 0) return InvalidArgument("cannot resolve " + host + ": " + gai_strerror(rc));
  return AddrInfoPtr(result);
}

// Non-blocking connect to one address, waiting at most timeout_ms.
StatusOr<int> ConnectOne(const addrinfo* a, int timeout_ms) {
  const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return IoError(Errno("socket"));
  if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
    const Status s = IoError(Errno("connect"));
    close(fd);
    return s;
  }
  pollfd p{fd, POLLOUT, 0};
  const int ready = poll(&p, 1, timeout_ms);
  int err = 0;
  socklen_t len = sizeof err;
  if (ready == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (ready != 1 || err != 0) {
    const std::string why = ready == 0 ? "timed out" : std::strerror(ready == 1 ? err : errno);
    close(fd);
    return IoError("connect: " + why);
  }
  return fd;
}

void TuneSocket(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

struct Sealing {
  struct CipherFree {
    void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
  };
  std::unique_ptr<EVP_CIPHER_CTX, CipherFree> ctx;
  uint64_t frames = 0;  // the IV of the next frame: 4 zero bytes, then this, big-endian

  // Sets up the next frame's IV with the 4 length bytes as its associated data.
  bool Start(bool encrypt, const uint8_t* length) {
    uint8_t iv[12] = {};
    for (int i = 0; i < 8; ++i) iv[4 + i] = static_cast<uint8_t>(frames >> (56 - 8 * i));
    ++frames;
    int n = 0;
    return encrypt ? EVP_EncryptInit_ex(ctx.get(), nullptr, nullptr, nullptr, iv) == 1 &&
                         EVP_EncryptUpdate(ctx.get(), nullptr, &n, length, 4) == 1
                   : EVP_DecryptInit_ex(ctx.get(), nullptr, nullptr, nullptr, iv) == 1 &&
                         EVP_DecryptUpdate(ctx.get(), nullptr, &n, length, 4) == 1;
  }
  // `len` bytes from `in` to `out` (they may be the same).
  bool Encrypt(const uint8_t* in, size_t len, uint8_t* out) {
    int n = 0;
    return len == 0 || EVP_EncryptUpdate(ctx.get(), out, &n, in, static_cast<int>(len)) == 1;
  }
  bool Decrypt(const uint8_t* in, size_t len, uint8_t* out) {
    int n = 0;
    return len == 0 || EVP_DecryptUpdate(ctx.get(), out, &n, in, static_cast<int>(len)) == 1;
  }
};

namespace {

StatusOr<std::unique_ptr<Sealing>> NewSealing(const SealKey& key, bool encrypt) {
  auto s = std::make_unique<Sealing>();
  s->ctx.reset(EVP_CIPHER_CTX_new());
  const bool ready =
      s->ctx != nullptr &&
      (encrypt ? EVP_EncryptInit_ex(s->ctx.get(), EVP_aes_128_gcm(), nullptr, key.data(), nullptr)
               : EVP_DecryptInit_ex(s->ctx.get(), EVP_aes_128_gcm(), nullptr, key.data(),
                                    nullptr)) == 1;
  if (!ready) return Internal("cannot set up AES-128-GCM (OpenSSL)");
  return s;
}

}  // namespace

Socket::Socket() = default;

Socket::Socket(int fd, int timeout_ms) : fd_(fd), timeout_ms_(timeout_ms) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    peer_ = PeerName(reinterpret_cast<sockaddr*>(&addr), len);
  }
}

Socket::~Socket() { Close(); }

Socket::Socket(Socket&& other) noexcept
    : fd_(other.fd_),
      timeout_ms_(other.timeout_ms_),
      peer_(std::move(other.peer_)),
      write_seal_(std::move(other.write_seal_)),
      read_seal_(std::move(other.read_seal_)) {
  other.fd_ = -1;
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.fd_;
    timeout_ms_ = other.timeout_ms_;
    peer_ = std::move(other.peer_);
    write_seal_ = std::move(other.write_seal_);
    read_seal_ = std::move(other.read_seal_);
    other.fd_ = -1;
  }
  return *this;
}

Status Socket::Seal(const SealKey& write_key, const SealKey& read_key) {
  StatusOr<std::unique_ptr<Sealing>> w = NewSealing(write_key, true);
  if (!w.ok()) return w.status();
  StatusOr<std::unique_ptr<Sealing>> r = NewSealing(read_key, false);
  if (!r.ok()) return r.status();
  write_seal_ = std::move(*w);
  read_seal_ = std::move(*r);
  return Status::Ok();
}

void Socket::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void Socket::ShutdownFd(int fd) {
  if (fd >= 0) shutdown(fd, SHUT_RDWR);
}

Status Socket::Wait(short events) const {
  pollfd p{fd_, events, 0};
  for (;;) {
    const int rc = poll(&p, 1, timeout_ms_);
    if (rc > 0) return Status::Ok();
    if (rc == 0) {
      const std::string wait = timeout_ms_ % 1000 == 0 ? std::to_string(timeout_ms_ / 1000) + " s"
                                                       : std::to_string(timeout_ms_) + " ms";
      return IoError("no progress for " + wait + " (timed out)");
    }
    if (errno != EINTR) return IoError(Errno("poll"));
  }
}

Status Socket::Write(Type type, const std::vector<uint8_t>& head, const uint8_t* data, size_t len) {
  if (fd_ < 0) return IoError("not connected");
  if (write_seal_ != nullptr) return WriteSealed(type, head, data, len);
  const size_t body = 1 + head.size() + len;
  uint8_t header[5] = {static_cast<uint8_t>(body >> 24), static_cast<uint8_t>(body >> 16),
                       static_cast<uint8_t>(body >> 8), static_cast<uint8_t>(body),
                       static_cast<uint8_t>(type)};
  iovec iov[3] = {{header, sizeof header},
                  {const_cast<uint8_t*>(head.data()), head.size()},
                  {const_cast<uint8_t*>(data), len}};
  int first = 0;
  while (first < 3) {
    msghdr msg{};
    msg.msg_iov = iov + first;
    msg.msg_iovlen = 3 - first;
    const ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return IoError(Errno("send"));
      PALADIN_RETURN_IF_ERROR(Wait(POLLOUT));
      continue;
    }
    size_t done = static_cast<size_t>(n);
    while (first < 3 && done >= iov[first].iov_len) done -= iov[first++].iov_len;
    if (first < 3) {
      iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + done;
      iov[first].iov_len -= done;
    }
  }
  return Status::Ok();
}

Status Socket::WriteSealed(Type type, const std::vector<uint8_t>& head, const uint8_t* data,
                           size_t len) {
  const size_t body = 1 + head.size() + len + kSealTagBytes;
  sealed_.resize(4 + body);
  uint8_t* out = sealed_.data();
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(body >> (24 - 8 * i));
  const auto kind = static_cast<uint8_t>(type);
  Sealing& seal = *write_seal_;
  int n = 0;
  const bool sealed =
      seal.Start(true, out) && seal.Encrypt(&kind, 1, out + 4) &&
      seal.Encrypt(head.data(), head.size(), out + 5) &&
      seal.Encrypt(data, len, out + 5 + head.size()) &&
      // GCM's final step writes nothing; its place is the tag's, next.
      EVP_EncryptFinal_ex(seal.ctx.get(), out + 4 + body - kSealTagBytes, &n) == 1 &&
      EVP_CIPHER_CTX_ctrl(seal.ctx.get(), EVP_CTRL_GCM_GET_TAG, kSealTagBytes,
                          out + 4 + body - kSealTagBytes) == 1;
  if (!sealed) return Internal("cannot seal a frame (OpenSSL AES-128-GCM)");
  return SendAll(sealed_.data(), sealed_.size());
}

Status Socket::SendAll(const uint8_t* p, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w = send(fd_, p + done, n - done, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return IoError(Errno("send"));
      PALADIN_RETURN_IF_ERROR(Wait(POLLOUT));
      continue;
    }
    done += static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status Socket::Write(Type type, const std::string& text) {
  return Write(type, std::vector<uint8_t>(text.begin(), text.end()));
}

Status Socket::ReadAll(uint8_t* p, size_t n, size_t* got) const {
  *got = 0;
  while (*got < n) {
    const ssize_t r = recv(fd_, p + *got, n - *got, 0);
    if (r > 0) {
      *got += static_cast<size_t>(r);
    } else if (r == 0) {
      return IoError("connection closed by the peer");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      PALADIN_RETURN_IF_ERROR(Wait(POLLIN));
    } else if (errno != EINTR) {
      return IoError(Errno("recv"));
    }
  }
  return Status::Ok();
}

Status Socket::Read(size_t max_payload, Frame* frame) {
  if (fd_ < 0) return IoError("not connected");
  uint8_t header[5];
  size_t got = 0;
  const Status head = ReadAll(header, sizeof header, &got);
  closed_between_frames_ = !head.ok() && got == 0;
  PALADIN_RETURN_IF_ERROR(head);
  const uint32_t body = BigEndian32(header);
  if (read_seal_ != nullptr) return ReadSealed(body, header[4], max_payload, frame);
  if (body == 0 || body - 1 > max_payload) {
    return InvalidArgument("protocol error: a frame of " + std::to_string(body) +
                           " bytes (at most " + std::to_string(max_payload + 1) + " expected)");
  }
  frame->type = static_cast<Type>(header[4]);
  frame->payload.resize(body - 1);
  return ReadAll(frame->payload.data(), frame->payload.size(), &got);
}

// The rest of a sealed frame whose length `body` and first encrypted byte `first` were read.
Status Socket::ReadSealed(uint32_t body, uint8_t first, size_t max_payload, Frame* frame) {
  if (body < 1 + kSealTagBytes || body - 1 - kSealTagBytes > max_payload) {
    return InvalidArgument("protocol error: a sealed frame of " + std::to_string(body) +
                           " bytes (at most " + std::to_string(max_payload + 1 + kSealTagBytes) +
                           " expected)");
  }
  frame->payload.resize(body - 1 - kSealTagBytes);
  uint8_t tag[kSealTagBytes];
  size_t got = 0;
  PALADIN_RETURN_IF_ERROR(ReadAll(frame->payload.data(), frame->payload.size(), &got));
  PALADIN_RETURN_IF_ERROR(ReadAll(tag, sizeof tag, &got));
  uint8_t length[4];
  for (int i = 0; i < 4; ++i) length[i] = static_cast<uint8_t>(body >> (24 - 8 * i));
  Sealing& seal = *read_seal_;
  uint8_t kind = 0;
  int n = 0;
  const bool opened =
      seal.Start(false, length) && seal.Decrypt(&first, 1, &kind) &&
      seal.Decrypt(frame->payload.data(), frame->payload.size(), frame->payload.data()) &&
      EVP_CIPHER_CTX_ctrl(seal.ctx.get(), EVP_CTRL_GCM_SET_TAG, kSealTagBytes, tag) == 1 &&
      EVP_DecryptFinal_ex(seal.ctx.get(), tag, &n) == 1;  // writes nothing for GCM
  if (!opened) {
    // Nothing of it is used; the connection cannot go on (its IVs are out of step). A dropped
    // connection's error: the sender resumes on a new one.
    frame->payload.clear();
    return IoError("a frame from " + peer_ +
                   " did not open under this connection's key (altered on the way, or not from "
                   "the token's holder)");
  }
  frame->type = static_cast<Type>(kind);
  return Status::Ok();
}

StatusOr<Socket> Connect(const std::string& host, int port, int timeout_ms) {
  StatusOr<AddrInfoPtr> addrs = Resolve(host, port, false);
  if (!addrs.ok()) return addrs.status();
  Status last = IoError("no address for " + host);
  for (const addrinfo* a = addrs->get(); a != nullptr; a = a->ai_next) {
    StatusOr<int> fd = ConnectOne(a, timeout_ms);
    if (fd.ok()) {
      TuneSocket(*fd);
      return Socket(*fd, timeout_ms);
    }
    last = fd.status();
  }
  return IoError(host + ":" + std::to_string(port) + ": " + last.message());
}

StatusOr<Listener> Listener::Bind(const std::string& address, int port) {
  StatusOr<AddrInfoPtr> addrs = Resolve(address, port, true);
  if (!addrs.ok()) return addrs.status();
  const addrinfo* a = addrs->get();
  Listener l;
  l.fd_ = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (l.fd_ < 0) return IoError(Errno("socket"));
  const int one = 1;
  setsockopt(l.fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const std::string where = address + ":" + std::to_string(port);
  if (bind(l.fd_, a->ai_addr, a->ai_addrlen) != 0) return IoError(Errno("bind " + where));
  if (listen(l.fd_, 128) != 0) return IoError(Errno("listen " + where));
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(l.fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  l.port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return l;
}

Listener::~Listener() {
  if (fd_ >= 0) close(fd_);
}

Listener::Listener(Listener&& other) noexcept : fd_(other.fd_), port_(other.port_) {
  other.fd_ = -1;
}

Listener& Listener::operator=(Listener&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    port_ = other.port_;
    other.fd_ = -1;
  }
  return *this;
}

StatusOr<Socket> Listener::Accept(int wait_ms, int io_timeout_ms) const {
  pollfd p{fd_, POLLIN, 0};
  const int ready = poll(&p, 1, wait_ms);
  if (ready < 0 && errno != EINTR) return IoError(Errno("poll"));
  if (ready <= 0) return Socket();
  const int fd = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) return Socket();
    return IoError(Errno("accept"));
  }
  TuneSocket(fd);
  return Socket(fd, io_timeout_ms);
}

void PutU32(std::vector<uint8_t>* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<uint8_t>(v >> shift));
}

void PutU64(std::vector<uint8_t>* out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<uint8_t>(v >> shift));
}

bool Reader::U32(uint32_t* v) {
  if (left_ < 4) return false;
  *v = 0;
  for (int i = 0; i < 4; ++i) *v = (*v << 8) | p_[i];
  p_ += 4;
  left_ -= 4;
  return true;
}

bool Reader::U64(uint64_t* v) {
  if (left_ < 8) return false;
  *v = 0;
  for (int i = 0; i < 8; ++i) *v = (*v << 8) | p_[i];
  p_ += 8;
  left_ -= 8;
  return true;
}

bool Reader::Bytes(size_t n, const uint8_t** p) {
  if (left_ < n) return false;
  *p = p_;
  p_ += n;
  left_ -= n;
  return true;
}

Digest Sha256(const uint8_t* data, size_t size) {
  Digest d{};
  unsigned int len = 0;
  EVP_Digest(data, size, d.data(), &len, EVP_sha256(), nullptr);
  return d;
}

Digest HmacSha256(const std::string& key, const uint8_t* data, size_t size) {
  Digest d{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data, size, d.data(), &len);
  return d;
}

namespace {

// HMAC-SHA256 under `token` over `label`, the protocol version and both nonces.
Digest NonceMac(const std::string& token, const char* label, const Nonce& receiver_nonce,
                const Nonce& sender_nonce) {
  std::vector<uint8_t> text(label, label + std::strlen(label));
  PutU32(&text, kProtocolVersion);
  text.insert(text.end(), receiver_nonce.begin(), receiver_nonce.end());
  text.insert(text.end(), sender_nonce.begin(), sender_nonce.end());
  return HmacSha256(token, text.data(), text.size());
}

}  // namespace

Digest AuthMac(const std::string& token, const Nonce& receiver_nonce, const Nonce& sender_nonce) {
  return NonceMac(token, "paladin-transfer-auth\n", receiver_nonce, sender_nonce);
}

Digest ReadyMac(const std::string& token, const Nonce& receiver_nonce, const Nonce& sender_nonce) {
  return NonceMac(token, "paladin-transfer-ready\n", receiver_nonce, sender_nonce);
}

SealKeys DeriveSealKeys(const std::string& token, const Nonce& receiver_nonce,
                        const Nonce& sender_nonce) {
  const Digest to_receiver =
      NonceMac(token, "paladin-transfer-seal sender->receiver\n", receiver_nonce, sender_nonce);
  const Digest to_sender =
      NonceMac(token, "paladin-transfer-seal receiver->sender\n", receiver_nonce, sender_nonce);
  SealKeys keys{};
  std::copy_n(to_receiver.begin(), kSealKeyBytes, keys.to_receiver.begin());
  std::copy_n(to_sender.begin(), kSealKeyBytes, keys.to_sender.begin());
  return keys;
}

Digest CommitMac(const std::string& token, const Nonce& nonce, const Digest& manifest_sha,
                 uint64_t chunk_bytes, const std::vector<ChunkDigest>& chunks) {
  static constexpr char kLabel[] = "paladin-transfer-commit\n";
  std::vector<uint8_t> text(kLabel, kLabel + sizeof kLabel - 1);
  PutU32(&text, kProtocolVersion);
  text.insert(text.end(), nonce.begin(), nonce.end());
  text.insert(text.end(), manifest_sha.begin(), manifest_sha.end());
  PutU64(&text, chunk_bytes);
  PutU32(&text, static_cast<uint32_t>(chunks.size()));
  for (const ChunkDigest& c : chunks) text.insert(text.end(), c.begin(), c.end());
  return HmacSha256(token, text.data(), text.size());
}

bool SameDigest(const uint8_t* a, const uint8_t* b) {
  return CRYPTO_memcmp(a, b, kDigestBytes) == 0;
}

Status RandomBytes(uint8_t* out, size_t n) {
  if (RAND_bytes(out, static_cast<int>(n)) != 1) return Internal("no random bytes (RAND_bytes)");
  return Status::Ok();
}

std::string Hex(const uint8_t* data, size_t size) { return ckpt::DigestHex(data, size); }

bool ParseChunkDigest(const std::string& hex, ChunkDigest* out) {
  if (hex.size() != 2 * out->size()) return false;
  auto nibble = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  for (size_t i = 0; i < out->size(); ++i) {
    const int high = nibble(hex[2 * i]);
    const int low = nibble(hex[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    (*out)[i] = static_cast<uint8_t>(high * 16 + low);
  }
  return true;
}

std::vector<uint8_t> PackBits(const std::vector<bool>& bits) {
  std::vector<uint8_t> out((bits.size() + 7) / 8, 0);
  for (size_t i = 0; i < bits.size(); ++i) {
    if (bits[i]) out[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
  }
  return out;
}

bool BitAt(const std::vector<uint8_t>& bitmap, size_t i) {
  return i / 8 < bitmap.size() && (bitmap[i / 8] >> (i % 8) & 1) != 0;
}

}  // namespace paladin::transfer::wire
