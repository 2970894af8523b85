#include "layout.h"

#include <algorithm>

#include "wire.h"

namespace paladin::transfer {

ChunkLayout::ChunkLayout(const std::vector<ckpt::ImageFile>& files, uint64_t chunk_bytes)
    : chunk_bytes_(chunk_bytes) {
  for (size_t f = 0; f < files.size(); ++f) {
    first_chunk_.push_back(chunks_.size());
    total_bytes_ += files[f].size;
    for (uint64_t offset = 0; offset < files[f].size; offset += chunk_bytes) {
      const uint64_t length = std::min(chunk_bytes, files[f].size - offset);
      chunks_.push_back({static_cast<uint32_t>(f), offset, static_cast<uint32_t>(length)});
    }
  }
  first_chunk_.push_back(chunks_.size());
}

int64_t ChunkLayout::Find(uint32_t file, uint64_t offset) const {
  if (file + size_t{1} >= first_chunk_.size() || offset % chunk_bytes_ != 0) return -1;
  const size_t i = first_chunk_[file] + offset / chunk_bytes_;
  if (i >= first_chunk_[file + 1]) return -1;
  return static_cast<int64_t>(i);
}

std::vector<ckpt::ChunkDigest> ManifestChunkDigests(const ckpt::Manifest& m,
                                                    const ChunkLayout& layout) {
  std::vector<ckpt::ChunkDigest> out;
  if (m.version < 2 || m.chunk_bytes != layout.chunk_bytes()) return out;
  out.resize(layout.size());
  for (size_t i = 0; i < layout.size(); ++i) {
    const ckpt::ImageFile& f = m.files[layout[i].file];
    const size_t k = static_cast<size_t>(layout[i].offset / layout.chunk_bytes());
    if (k >= f.xxh3.size() || !wire::ParseChunkDigest(f.xxh3[k], &out[i])) out[i].fill(0);
  }
  return out;
}

}  // namespace paladin::transfer
