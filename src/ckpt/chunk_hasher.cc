#include "chunk_hasher.h"

#include <xxhash.h>

#include <algorithm>

namespace paladin::ckpt {

ChunkDigest Xxh3Chunk(const uint8_t* data, size_t size) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits(data, size));
  ChunkDigest d{};
  std::copy(canonical.digest, canonical.digest + sizeof canonical.digest, d.begin());
  return d;
}

std::string DigestHex(const uint8_t* data, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(size * 2);
  for (size_t i = 0; i < size; ++i) {
    hex += kDigits[data[i] >> 4];
    hex += kDigits[data[i] & 15];
  }
  return hex;
}

ChunkHasher::ChunkHasher(uint64_t chunk_bytes)
    : chunk_bytes_(chunk_bytes), state_(XXH3_createState()) {
  XXH3_128bits_reset(state_);
}

ChunkHasher::~ChunkHasher() { XXH3_freeState(state_); }

void ChunkHasher::EndChunk() {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(state_));
  digests_.push_back(DigestHex(canonical.digest, sizeof canonical.digest));
  XXH3_128bits_reset(state_);
  in_chunk_ = 0;
}

void ChunkHasher::Update(const uint8_t* data, size_t size) {
  while (size > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(size, chunk_bytes_ - in_chunk_));
    XXH3_128bits_update(state_, data, n);
    in_chunk_ += n;
    data += n;
    size -= n;
    if (in_chunk_ == chunk_bytes_) EndChunk();
  }
}

std::vector<std::string> ChunkHasher::Finish() {
  if (in_chunk_ > 0) EndChunk();
  return std::move(digests_);
}

}  // namespace paladin::ckpt
