// How an image is cut into chunks: the files in manifest order, each into pieces of
// `chunk_bytes` (the last one shorter; an empty file has none), numbered across the image. Sender
// and receiver derive the same numbering from the manifest and the chunk size.
#ifndef PALADIN_TRANSFER_LAYOUT_H_
#define PALADIN_TRANSFER_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "paladin/ckpt/image.h"

namespace paladin::transfer {

struct ChunkRef {
  uint32_t file = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
};

class ChunkLayout {
 public:
  ChunkLayout(const std::vector<ckpt::ImageFile>& files, uint64_t chunk_bytes);

  size_t size() const { return chunks_.size(); }
  const ChunkRef& operator[](size_t i) const { return chunks_[i]; }
  uint64_t chunk_bytes() const { return chunk_bytes_; }
  uint64_t total_bytes() const { return total_bytes_; }
  // The chunk at (file, offset), or -1 when no chunk starts there.
  int64_t Find(uint32_t file, uint64_t offset) const;

 private:
  uint64_t chunk_bytes_;
  uint64_t total_bytes_ = 0;
  std::vector<ChunkRef> chunks_;
  std::vector<size_t> first_chunk_;  // per file, and one past the last
};

// The manifest's own XXH3-128 of each chunk when its digests line up with the chunks (format
// version 2 with `chunk_bytes` the layout's), else empty: then nothing in the manifest covers a
// chunk, and the transfer hashes the chunks itself. ReadManifest checked the digests' form.
std::vector<ckpt::ChunkDigest> ManifestChunkDigests(const ckpt::Manifest& m,
                                                    const ChunkLayout& layout);

}  // namespace paladin::transfer

#endif  // PALADIN_TRANSFER_LAYOUT_H_
