// The receiver's state for one image on its way in: DIR/.partial/ holds the manifest as the
// sender sent it, the image's files at their paths (sized up front, chunks written in place) and
// a journal of the chunks written with the XXH3-128 each was verified against on arrival, so that
// a later connection, or a later receiver on the same DIR, resumes. Commit checks the sender's
// chunk list against those records, the image's structure (and its contents only when the
// manifest's digests do not line up with the chunks), and only then moves it into DIR,
// manifest.json last. Layout: docs/formats/transfer.md.
#ifndef PALADIN_TRANSFER_PARTIAL_H_
#define PALADIN_TRANSFER_PARTIAL_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "layout.h"
#include "paladin/base/status.h"
#include "paladin/ckpt/image.h"
#include "wire.h"

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
  // Whether Commit fsyncs the files and the folder (ReceiverOptions::durable); on by default.
  void set_durable(bool durable) { durable_ = durable; }
  PartialImage& operator=(const PartialImage&) = delete;

  const std::string& manifest_sha() const { return manifest_sha_; }
  const wire::Digest& manifest_digest() const { return manifest_digest_; }
  const ckpt::Manifest& manifest() const { return manifest_; }
  const ChunkLayout& layout() const { return layout_; }
  // Open found DIR already holding this image (nothing was received).
  bool found_finished() const { return found_finished_; }

  // The manifest's digests line up with the chunks (format version 2 at this chunk size): each
  // chunk is checked against the manifest itself on arrival, and the commit reads nothing again.
  bool aligned() const { return aligned_; }
  // The manifest's digest of chunk i (aligned() only).
  const wire::ChunkDigest& expected(size_t i) const { return expected_[i]; }

  // The bitmap of chunks already here, and how many.
  std::vector<uint8_t> Have(int* count) const;
  // Writes chunk `i` in place, its bytes' XXH3-128 `digest` already checked, and records both
  // in the journal.
  Status WriteChunk(size_t i, const uint8_t* data, const wire::ChunkDigest& digest);
  // Needs every chunk and the sender's chunk list (its HMAC already checked): a chunk whose
  // record differs from the list is forgotten and named in the error. Then checks the records
  // against the manifest (aligned) or every file's contents (not aligned), the image's structure
  // (ckpt::VerifyImage), moves the files into DIR and writes DIR/manifest.json last. On a failed
  // verification the chunks of the files that differ are forgotten, so that a resend replaces
  // them. After any failure the caller should Open the image again rather than reuse this
  // object.
  StatusOr<ckpt::VerifyReport> Commit(const std::string& local_criu_version,
                                      const std::vector<wire::ChunkDigest>& sender_list);
  // Bytes this object hashed (journal checks on resume, contents at a commit) since the last
  // call; resets the count.
  uint64_t TakeBytesHashed() { return bytes_hashed_.exchange(0); }

 private:
  PartialImage(std::string dir, std::string manifest_json, ckpt::Manifest manifest,
               uint64_t chunk_bytes);
  std::string PartialPath(const std::string& rel) const;
  Status StartFresh();
  bool Resume();
  Status OpenJournal(bool truncate);
  Status RewriteJournalLocked();
  void ForgetBadFiles();
  Status CheckSenderList(const std::vector<wire::ChunkDigest>& sender_list);
  Status MoveIntoPlace();

  const std::string dir_;
  const std::string partial_;
  const std::string manifest_json_;
  const wire::Digest manifest_digest_;
  const std::string manifest_sha_;
  const ckpt::Manifest manifest_;
  const ChunkLayout layout_;
  const std::vector<wire::ChunkDigest> expected_;  // aligned_ only
  const bool aligned_;
  std::atomic<uint64_t> bytes_hashed_{0};

  mutable std::mutex mu_;  // guards everything below
  std::vector<bool> done_;
  std::vector<wire::ChunkDigest> digests_;  // what each done chunk was verified against
  int done_count_ = 0;
  int journal_fd_ = -1;
  bool committing_ = false;
  bool durable_ = true;
  bool finished_ = false;
  bool found_finished_ = false;
  std::mutex commit_mu_;  // one commit at a time
};

}  // namespace paladin::transfer

#endif  // PALADIN_TRANSFER_PARTIAL_H_
