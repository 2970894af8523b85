// The transfer protocol's frames and the sockets that carry them (docs/formats/transfer.md).
// Every socket is non-blocking underneath; each read or write waits at most the socket's
// timeout for progress, so nothing blocks forever.
#ifndef PALADIN_TRANSFER_WIRE_H_
#define PALADIN_TRANSFER_WIRE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/ckpt/image.h"

namespace paladin::transfer::wire {

// 3: both ends prove the token (AUTH, READY) and every frame after READY is sealed
// (AES-128-GCM); 2: XXH3-128 chunk digests, COMMIT carries the keyed chunk list, nothing
// encrypted; 1: SHA-256 per chunk.
inline constexpr uint32_t kProtocolVersion = 3;
inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kDigestBytes = 32;                            // SHA-256, HMAC-SHA256
inline constexpr size_t kChunkDigestBytes = ckpt::kChunkDigestBytes;  // XXH3-128
// file index (u32), offset (u64), length (u32), XXH3-128 of the chunk.
inline constexpr size_t kDataHeaderBytes = 4 + 8 + 4 + kChunkDigestBytes;
inline constexpr size_t kSealKeyBytes = 16;  // AES-128
inline constexpr size_t kSealTagBytes = 16;  // GCM's tag after each sealed frame
inline constexpr size_t kMaxPreAuthPayload = 64;
inline constexpr size_t kMaxErrorText = 2048;  // ERROR and NACK reasons are cut there
inline constexpr size_t kMaxHelloPayload = size_t{16} << 20;
inline constexpr uint64_t kMinChunkBytes = uint64_t{4} << 10;
inline constexpr uint64_t kMaxChunkBytes = uint64_t{64} << 20;

enum class Type : uint8_t {
  kNonce = 1,   // S->C: u32 protocol version, 16-byte nonce
  kAuth = 2,    // C->S: the sender's 16-byte nonce, AuthMac
  kReady = 3,   // S->C: ReadyMac; from here on every frame both ways is sealed
  kHello = 4,   // C->S: u64 chunk bytes, u32 attempt, manifest.json
  kHave = 5,    // S->C: u32 chunk count, bitmap of chunks already here
  kData = 6,    // C->S: data header, chunk bytes
  kAck = 7,     // S->C: u32 file, u64 offset
  kNack = 8,    // S->C: u32 file, u64 offset, reason
  kCommit = 9,  // C->S: u32 chunk count, each chunk's XXH3-128, HMAC-SHA256 over them (CommitMac)
  kOk = 10,     // S->C: summary
  kWait = 11,   // S->C: still verifying (keeps the connection alive)
  kError = 12,  // S->C: reason; the server closes the connection
};

struct Frame {
  Type type = Type::kError;
  std::vector<uint8_t> payload;
  std::string Text() const { return {payload.begin(), payload.end()}; }
};

using Digest = std::array<uint8_t, kDigestBytes>;
using ChunkDigest = ckpt::ChunkDigest;
using Nonce = std::array<uint8_t, kNonceBytes>;
using SealKey = std::array<uint8_t, kSealKeyBytes>;

// A connection's two keys, each end's nonce mixed with the token (SealKeys).
struct SealKeys {
  SealKey to_receiver;
  SealKey to_sender;
};

// One direction's sealing: AES-128-GCM under one key, a frame counter as the IV (defined in
// wire.cc).
struct Sealing;

// A connected TCP socket. Owns its descriptor; movable, not copyable; used by one thread (see
// ShutdownFd for the one exception).
class Socket {
 public:
  Socket();
  Socket(int fd, int timeout_ms);
  ~Socket();
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }
  // The peer closed the connection between two frames (an orderly end, not a cut).
  bool closed_between_frames() const { return closed_between_frames_; }
  void set_timeout_ms(int ms) { timeout_ms_ = ms; }
  // From now on every frame this socket writes is sealed under `write_key` and every frame it
  // reads must open under `read_key`: 4 bytes of length in the clear (also authenticated), then
  // the type and payload encrypted, then GCM's 16-byte tag. A frame that does not open (altered
  // on the way, or not from the token's holder) fails its Read as a dropped connection would.
  Status Seal(const SealKey& write_key, const SealKey& read_key);

  // One frame: its type, `head`, then `len` bytes at `data`.
  Status Write(Type type, const std::vector<uint8_t>& head, const uint8_t* data = nullptr,
               size_t len = 0);
  Status Write(Type type, const std::string& text);
  // The next frame; a payload over `max_payload` is a protocol error. Reuses frame->payload.
  Status Read(size_t max_payload, Frame* frame);
  // Wakes whoever reads or writes `fd` (a Socket's, in another thread) with an error.
  static void ShutdownFd(int fd);

 private:
  Status Wait(short events) const;
  // `got`: how many bytes arrived (some may have before an error).
  Status ReadAll(uint8_t* p, size_t n, size_t* got) const;
  Status SendAll(const uint8_t* p, size_t n);
  Status WriteSealed(Type type, const std::vector<uint8_t>& head, const uint8_t* data, size_t len);
  Status ReadSealed(uint32_t body, uint8_t first, size_t max_payload, Frame* frame);
  void Close();

  int fd_ = -1;
  int timeout_ms_ = 30000;
  std::string peer_;
  bool closed_between_frames_ = false;
  std::unique_ptr<Sealing> write_seal_;
  std::unique_ptr<Sealing> read_seal_;
  std::vector<uint8_t> sealed_;  // a sealed frame being written
};

StatusOr<Socket> Connect(const std::string& host, int port, int timeout_ms);

// A listening socket. Accept waits at most `wait_ms`; an empty Socket (fd -1) means none came.
class Listener {
 public:
  static StatusOr<Listener> Bind(const std::string& address, int port);
  Listener() = default;
  ~Listener();
  Listener(Listener&& other) noexcept;
  Listener& operator=(Listener&& other) noexcept;
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  int port() const { return port_; }
  StatusOr<Socket> Accept(int wait_ms, int io_timeout_ms) const;

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Big-endian packing.
void PutU32(std::vector<uint8_t>* out, uint32_t v);
void PutU64(std::vector<uint8_t>* out, uint64_t v);

// Reads big-endian fields off a payload; each call fails once the payload is exhausted.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  explicit Reader(const std::vector<uint8_t>& v) : Reader(v.data(), v.size()) {}
  bool U32(uint32_t* v);
  bool U64(uint64_t* v);
  bool Bytes(size_t n, const uint8_t** p);
  const uint8_t* rest() const { return p_; }
  size_t left() const { return left_; }

 private:
  const uint8_t* p_;
  size_t left_;
};

Digest Sha256(const uint8_t* data, size_t size);
inline ChunkDigest Xxh3(const uint8_t* data, size_t size) { return ckpt::Xxh3Chunk(data, size); }
Digest HmacSha256(const std::string& key, const uint8_t* data, size_t size);
// AUTH's proof that the sender holds the token, and READY's that the receiver does: HMAC-SHA256
// under the token over a label naming the direction, the protocol version and both nonces.
Digest AuthMac(const std::string& token, const Nonce& receiver_nonce, const Nonce& sender_nonce);
Digest ReadyMac(const std::string& token, const Nonce& receiver_nonce, const Nonce& sender_nonce);
// The connection's sealing keys: HMAC-SHA256 under the token over a label naming the direction
// and both nonces, cut to 16 bytes. Both nonces are random per connection, so no key is used on
// two connections (the IVs restart at 0 on each).
SealKeys DeriveSealKeys(const std::string& token, const Nonce& receiver_nonce,
                        const Nonce& sender_nonce);
// The COMMIT's keyed digest: HMAC-SHA256 under the token over the protocol version, the commit
// connection's nonce, the SHA-256 of the manifest text, the chunk size and every chunk's
// XXH3-128 in order. It binds the chunk list and the manifest to the token and this connection.
Digest CommitMac(const std::string& token, const Nonce& nonce, const Digest& manifest_sha,
                 uint64_t chunk_bytes, const std::vector<ChunkDigest>& chunks);
// Constant-time comparison of two digests.
bool SameDigest(const uint8_t* a, const uint8_t* b);
Status RandomBytes(uint8_t* out, size_t n);
std::string Hex(const uint8_t* data, size_t size);
// A chunk digest from 32 lowercase hex digits (the manifest's form); false when malformed.
bool ParseChunkDigest(const std::string& hex, ChunkDigest* out);

// Bitmaps of chunk indices: bit i is bit (i % 8) of byte i / 8.
std::vector<uint8_t> PackBits(const std::vector<bool>& bits);
bool BitAt(const std::vector<uint8_t>& bitmap, size_t i);

}  // namespace paladin::transfer::wire

#endif  // PALADIN_TRANSFER_WIRE_H_
