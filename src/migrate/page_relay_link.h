// What a page relay (page_relay.h) puts on its link to the other relay: the frames and their
// seal, the handshake's lines, and the link's socket helpers. The formats:
// docs/formats/migrate.md, "The page relay". Internal to src/migrate.
#ifndef PALADIN_MIGRATE_PAGE_RELAY_LINK_H_
#define PALADIN_MIGRATE_PAGE_RELAY_LINK_H_

#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "paladin/base/status.h"

namespace paladin::migrate::relay_link {

using Clock = std::chrono::steady_clock;

inline constexpr size_t kFrameMax = size_t{256} << 10;  // a data frame's payload, at most
inline constexpr size_t kHeader = 5;                    // type, then the payload's length (4 bytes)
inline constexpr size_t kControlMax = 512;              // an acknowledgement's or abort's payload
inline constexpr size_t kTag = 16;                      // GCM's tag after a sealed frame's payload
inline constexpr char kData = 'D';
inline constexpr char kAck = 'A';
inline constexpr char kFin = 'F';
inline constexpr char kAbort = 'X';

double Seconds(Clock::duration d);
Clock::time_point After(double seconds);
// Milliseconds from now until `t`, for poll (0 once it has passed).
int MillisUntil(Clock::time_point t);

void SetNonBlocking(int fd);
// A link that goes silent without closing is found within about 15 s, not TCP's hours.
void WatchLink(int fd);
// Closes `fd` so that its peer sees a reset where the socket allows one (TCP), not an orderly
// end: a CRIU whose stream was given up must fail, not take a short stream for a whole one.
void Reset(int* fd);
void Close(int* fd);
// A new connection to host:port, made within `timeout_s` (an attempt into a network that drops
// everything is cut at the limit, not left to TCP's two minutes). A refusal (nothing listens
// there) is tried again until the time is up when `retry_refused` (a relay that may still be
// starting), else it is final: kFailedPrecondition. Every other failure: kUnavailable.
StatusOr<int> Dial(const std::string& host, int port, double timeout_s, bool retry_refused);
Status SendAll(int fd, const std::string& bytes, Clock::time_point until);
// One line of at most 200 bytes, without its newline.
StatusOr<std::string> ReceiveLine(int fd, Clock::time_point until);
// "<64 hex digits> <decimal count>": a proof and what its sender received.
bool ParseProof(const std::string& line, std::string* proof, uint64_t* received);
bool IsLowerHex(const std::string& s, size_t size);

// Big-endian numbers in frames.
void PutU32(std::string* out, uint32_t v);
uint32_t GetU32(const char* p);
uint64_t GetU64(const char* p);
// A frame's header: its type and its payload's length.
void PutHeader(char* header, char type, size_t len);

// Bytes each written once: grown without zeroing (a sealed frame is up to 256 KiB, written
// at memory speed).
struct RawBytes {
  std::unique_ptr<char[]> bytes;
  size_t size = 0;
  size_t capacity = 0;

  char* data() const { return bytes.get(); }
  // Room for `more` bytes after `size`, which then counts them.
  char* Grow(size_t more) {
    Reserve(more);
    char* at = bytes.get() + size;
    size += more;
    return at;
  }
  void Reserve(size_t more) {
    if (size + more <= capacity) return;
    const size_t grown = std::max(size + more, 2 * capacity);
    auto larger = std::make_unique_for_overwrite<char[]>(grown);
    if (size > 0) std::memcpy(larger.get(), bytes.get(), size);
    bytes = std::move(larger);
    capacity = grown;
  }
};

// One direction of a sealed link (PageRelayOptions::seal): AES-128-GCM under that direction's key
// of the link, the frame's number on the link as its IV, its header as associated data. A key
// serves one link only (LinkKey), so an IV is never used twice under one key, however often the
// same bytes are sent again on later links.
class FrameSeal {
 public:
  // `hex_key`: at least 32 hex digits, the first 32 taken.
  FrameSeal(const std::string& hex_key, bool encrypt) : encrypt_(encrypt) {
    unsigned char key[16];
    for (size_t i = 0; i < sizeof key; ++i) {
      key[i] = static_cast<unsigned char>(std::stoi(hex_key.substr(2 * i, 2), nullptr, 16));
    }
    ok_ = ctx_ != nullptr &&
          (encrypt ? EVP_EncryptInit_ex(ctx_, EVP_aes_128_gcm(), nullptr, key, nullptr)
                   : EVP_DecryptInit_ex(ctx_, EVP_aes_128_gcm(), nullptr, key, nullptr)) == 1;
  }
  ~FrameSeal() { EVP_CIPHER_CTX_free(ctx_); }
  FrameSeal(const FrameSeal&) = delete;
  FrameSeal& operator=(const FrameSeal&) = delete;

  // Appends the frame to `out`: `header` in clear, `len` bytes of `in` sealed, the tag.
  bool Seal(const char* header, const char* in, size_t len, RawBytes* out) {
    auto* p = reinterpret_cast<unsigned char*>(out->Grow(kHeader + len + kTag));
    std::memcpy(p, header, kHeader);
    int n = 0;
    return Start(p) &&
           (len == 0 ||
            EVP_EncryptUpdate(ctx_, p + kHeader, &n, reinterpret_cast<const unsigned char*>(in),
                              static_cast<int>(len)) == 1) &&
           EVP_EncryptFinal_ex(ctx_, p + kHeader + len, &n) == 1 &&
           EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, kTag, p + kHeader + len) == 1;
  }
  // Opens `len` bytes at `data` in place, the tag after them: false when they were not sealed
  // under this key as this link's next frame with this header.
  bool Open(const char* header, char* data, size_t len) {
    auto* p = reinterpret_cast<unsigned char*>(data);
    int n = 0;
    return Start(reinterpret_cast<const unsigned char*>(header)) &&
           (len == 0 || EVP_DecryptUpdate(ctx_, p, &n, p, static_cast<int>(len)) == 1) &&
           EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG, kTag, p + len) == 1 &&
           EVP_DecryptFinal_ex(ctx_, p + len, &n) == 1;
  }

 private:
  bool Start(const unsigned char* header) {
    unsigned char iv[12] = {};
    for (int i = 0; i < 8; ++i) iv[4 + i] = static_cast<unsigned char>(frames_ >> (56 - 8 * i));
    ++frames_;
    int n = 0;
    return ok_ && (encrypt_ ? EVP_EncryptInit_ex(ctx_, nullptr, nullptr, nullptr, iv) == 1 &&
                                  EVP_EncryptUpdate(ctx_, nullptr, &n, header, kHeader) == 1
                            : EVP_DecryptInit_ex(ctx_, nullptr, nullptr, nullptr, iv) == 1 &&
                                  EVP_DecryptUpdate(ctx_, nullptr, &n, header, kHeader) == 1);
  }

  EVP_CIPHER_CTX* ctx_ = EVP_CIPHER_CTX_new();
  bool encrypt_;
  bool ok_ = false;
  uint64_t frames_ = 0;
};

// A link's key for one direction ("to-serve": written by the relay that connected; "to-reach":
// by the one that listens), from the move's secret and the challenge of that link's handshake.
std::string LinkKey(const std::string& secret, const char* direction, const std::string& challenge);

}  // namespace paladin::migrate::relay_link

#endif  // PALADIN_MIGRATE_PAGE_RELAY_LINK_H_
