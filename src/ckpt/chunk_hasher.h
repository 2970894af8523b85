// XXH3-128 of a byte stream cut into pieces of a fixed size: what an image manifest of format
// version 2 lists per file (docs/formats/image.md). Fed in blocks of any size. Not copyable; one
// thread.
#ifndef PALADIN_CKPT_CHUNK_HASHER_H_
#define PALADIN_CKPT_CHUNK_HASHER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "paladin/ckpt/image.h"

struct XXH3_state_s;

namespace paladin::ckpt {

class ChunkHasher {
 public:
  explicit ChunkHasher(uint64_t chunk_bytes);
  ~ChunkHasher();
  ChunkHasher(const ChunkHasher&) = delete;
  ChunkHasher& operator=(const ChunkHasher&) = delete;

  void Update(const uint8_t* data, size_t size);
  // The digests of every chunk, the last (shorter) one included; lowercase hex. Call once.
  std::vector<std::string> Finish();

 private:
  void EndChunk();

  const uint64_t chunk_bytes_;
  XXH3_state_s* state_;
  uint64_t in_chunk_ = 0;
  std::vector<std::string> digests_;
};

}  // namespace paladin::ckpt

#endif  // PALADIN_CKPT_CHUNK_HASHER_H_
