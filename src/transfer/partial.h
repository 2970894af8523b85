// The receiver's state for one image on its way in: DIR/.partial/ holds the manifest as the
// sender sent it, the image's files at their paths (sized up front, chunks written in place) and
// a journal of the chunks written, so that a later connection, or a later receiver on the same
// DIR, resumes. Commit verifies the image there and only then moves it into DIR, manifest.json
// last. Layout: docs/formats/transfer.md.
#ifndef PALADIN_TRANSFER_PARTIAL_H_
#define PALADIN_TRANSFER_PARTIAL_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "layout.h"
#include "paladin/base/status.h"
#include "paladin/ckpt/image.h"

namespace paladin::transfer {

// Thread safety: every method may be called from several connection threads at once.
class PartialImage {
 public:
  // Resumes DIR/.partial when its journal belongs to this manifest text and chunk size, else
  // starts it afresh. If DIR already holds an image: the same manifest gives a finished()
  // PartialImage, another one an error.
  static StatusOr<std::unique_ptr<PartialImage>> Open(const std::string& dir,
                                                      const std::string& manifest_json,
                                                      uint64_t chunk_bytes);
  ~PartialImage();
  PartialImage(const PartialImage&) = delete;
  PartialImage& operator=(const PartialImage&) = delete;

  const std::string& manifest_sha() const { return manifest_sha_; }
  const ckpt::Manifest& manifest() const { return manifest_; }
  const ChunkLayout& layout() const { return layout_; }
  // Open found DIR already holding this image (nothing was received).
  bool found_finished() const { return found_finished_; }

  // The bitmap of chunks already here, and how many.
  std::vector<uint8_t> Have(int* count) const;
  // Writes chunk `i` (its hash already checked) in place and records it in the journal.
  Status WriteChunk(size_t i, const uint8_t* data);
  // Needs every chunk: verifies the image in .partial (ckpt::VerifyImage), moves the files into
  // DIR and writes DIR/manifest.json last. On a failed verification the chunks of the files
  // that differ are forgotten, so that a resend replaces them. After any failure the caller
  // should Open the image again rather than reuse this object.
  StatusOr<ckpt::VerifyReport> Commit(const std::string& local_criu_version);

 private:
  PartialImage(std::string dir, std::string manifest_json, ckpt::Manifest manifest,
               uint64_t chunk_bytes);
  std::string PartialPath(const std::string& rel) const;
  Status StartFresh();
  bool Resume();
  Status OpenJournal(bool truncate);
  Status RewriteJournalLocked();
  void ForgetBadFiles();
  Status MoveIntoPlace();

  const std::string dir_;
  const std::string partial_;
  const std::string manifest_json_;
  const std::string manifest_sha_;
  const ckpt::Manifest manifest_;
  const ChunkLayout layout_;

  mutable std::mutex mu_;  // guards everything below
  std::vector<bool> done_;
  int done_count_ = 0;
  int journal_fd_ = -1;
  bool committing_ = false;
  bool finished_ = false;
  bool found_finished_ = false;
  std::mutex commit_mu_;  // one commit at a time
};

}  // namespace paladin::transfer

#endif  // PALADIN_TRANSFER_PARTIAL_H_
