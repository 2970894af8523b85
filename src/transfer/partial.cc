#include "partial.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "wire.h"

namespace paladin::transfer {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifest = "manifest.json";
constexpr const char* kJournal = "journal";

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string JournalHeader(const std::string& manifest_sha, uint64_t chunk_bytes) {
  return "paladin-transfer-journal 2 " + manifest_sha + " " + std::to_string(chunk_bytes) + "\n";
}

std::string JournalLine(size_t i, const wire::ChunkDigest& d) {
  return std::to_string(i) + " " + wire::Hex(d.data(), d.size()) + "\n";
}

Status ReadAllAt(int fd, uint8_t* data, size_t len, uint64_t offset) {
  while (len > 0) {
    const ssize_t n = pread(fd, data, len, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return IoError(n == 0 ? std::string("short read") : Errno("read"));
    data += n;
    len -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) return IoError("cannot write " + path);
  return Status::Ok();
}

Status WriteAllAt(int fd, const uint8_t* data, size_t len, uint64_t offset) {
  while (len > 0) {
    const ssize_t n = pwrite(fd, data, len, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return IoError(Errno("write"));
    data += n;
    len -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

void SyncPath(const std::string& path, int flags) {
  const int fd = open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return;
  fsync(fd);
  close(fd);
}

// Paths the receiver keeps for itself in .partial may not be image files.
Status CheckPaths(const ckpt::Manifest& m) {
  std::set<std::string> seen;
  for (const ckpt::ImageFile& f : m.files) {
    if (f.path == kManifest || f.path == kJournal || f.path.rfind("./", 0) == 0) {
      return InvalidArgument("manifest: file path '" + f.path + "' is reserved");
    }
    if (!seen.insert(f.path).second) {
      return InvalidArgument("manifest: file path '" + f.path + "' is listed twice");
    }
  }
  return Status::Ok();
}

// Writes the manifest text into an empty .partial and parses it there.
StatusOr<ckpt::Manifest> StageManifest(const std::string& partial, const std::string& text) {
  std::error_code ec;
  fs::remove_all(partial, ec);
  fs::create_directories(partial, ec);
  if (ec) return IoError("cannot create " + partial + ": " + ec.message());
  PALADIN_RETURN_IF_ERROR(WriteText(partial + "/" + kManifest, text));
  StatusOr<ckpt::Manifest> m = ckpt::ReadManifest(partial);
  Status valid = m.ok() ? CheckPaths(*m) : m.status();
  if (!valid.ok()) {
    fs::remove_all(partial, ec);
    return InvalidArgument("the sender's " + valid.message());
  }
  return m;
}

}  // namespace

PartialImage::PartialImage(std::string dir, std::string manifest_json, ckpt::Manifest manifest,
                           uint64_t chunk_bytes)
    : dir_(std::move(dir)),
      partial_(dir_ + "/.partial"),
      manifest_json_(std::move(manifest_json)),
      manifest_digest_(wire::Sha256(reinterpret_cast<const uint8_t*>(manifest_json_.data()),
                                    manifest_json_.size())),
      manifest_sha_(wire::Hex(manifest_digest_.data(), manifest_digest_.size())),
      manifest_(std::move(manifest)),
      layout_(manifest_.files, chunk_bytes),
      expected_(ManifestChunkDigests(manifest_, layout_)),
      aligned_(manifest_.version >= 2 && manifest_.chunk_bytes == chunk_bytes),
      done_(layout_.size(), false),
      digests_(layout_.size()) {}

PartialImage::~PartialImage() {
  if (journal_fd_ >= 0) close(journal_fd_);
}

StatusOr<std::unique_ptr<PartialImage>> PartialImage::Open(const std::string& dir,
                                                           const std::string& manifest_json,
                                                           uint64_t chunk_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError("cannot create " + dir + ": " + ec.message());
  const std::string partial = dir + "/.partial";
  if (fs::exists(dir + "/" + kManifest)) {
    StatusOr<std::string> existing = ReadText(dir + "/" + kManifest);
    StatusOr<ckpt::Manifest> m = ckpt::ReadManifest(dir);
    if (!existing.ok() || *existing != manifest_json || !m.ok()) {
      return AlreadyExists(dir + " already holds another image");
    }
    std::unique_ptr<PartialImage> image(new PartialImage(dir, manifest_json, *m, chunk_bytes));
    image->finished_ = true;
    image->found_finished_ = true;
    image->done_.assign(image->done_.size(), true);
    image->done_count_ = static_cast<int>(image->done_.size());
    return image;
  }
  StatusOr<std::string> staged = ReadText(partial + "/" + kManifest);
  if (staged.ok() && *staged == manifest_json) {
    StatusOr<ckpt::Manifest> m = ckpt::ReadManifest(partial);
    if (m.ok()) {
      std::unique_ptr<PartialImage> image(new PartialImage(dir, manifest_json, *m, chunk_bytes));
      if (image->Resume()) return image;
    }
  }
  StatusOr<ckpt::Manifest> m = StageManifest(partial, manifest_json);
  if (!m.ok()) return m.status();
  std::unique_ptr<PartialImage> image(new PartialImage(dir, manifest_json, *m, chunk_bytes));
  PALADIN_RETURN_IF_ERROR(image->StartFresh());
  return image;
}

std::string PartialImage::PartialPath(const std::string& rel) const { return partial_ + "/" + rel; }

// Every file pre-sized (sparse), and an empty journal.
Status PartialImage::StartFresh() {
  for (const ckpt::ImageFile& f : manifest_.files) {
    const std::string path = PartialPath(f.path);
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return IoError(Errno("cannot create " + path));
    const bool sized = ftruncate(fd, static_cast<off_t>(f.size)) == 0;
    close(fd);
    if (!sized) return IoError(Errno("cannot size " + path));
  }
  return OpenJournal(true);
}

// Loads the journal when it is this image's and every file is there at its size. A chunk counts
// only when its bytes still have the digest recorded: the journal is not fsynced with the data,
// and this receiver did not see them arrive.
bool PartialImage::Resume() {
  StatusOr<std::string> journal = ReadText(PartialPath(kJournal));
  const std::string header = JournalHeader(manifest_sha_, layout_.chunk_bytes());
  if (!journal.ok() || journal->rfind(header, 0) != 0) return false;
  for (const ckpt::ImageFile& f : manifest_.files) {
    std::error_code ec;
    if (fs::file_size(PartialPath(f.path), ec) != f.size || ec) return false;
  }
  std::istringstream lines(journal->substr(header.size()));
  std::string line;
  std::vector<uint8_t> buf;
  while (std::getline(lines, line)) {
    if (lines.eof()) break;  // a last line without its newline was cut short: not recorded
    char* end = nullptr;
    const unsigned long long i = std::strtoull(line.c_str(), &end, 10);
    wire::ChunkDigest recorded{};
    if (line.empty() || *end != ' ' || i >= done_.size() || done_[i] ||
        !wire::ParseChunkDigest(std::string(end + 1), &recorded)) {
      continue;
    }
    const ChunkRef& c = layout_[i];
    buf.resize(c.length);
    const int fd = open(PartialPath(manifest_.files[c.file].path).c_str(), O_RDONLY | O_CLOEXEC);
    const bool read = fd >= 0 && ReadAllAt(fd, buf.data(), c.length, c.offset).ok();
    if (fd >= 0) close(fd);
    if (!read) continue;
    bytes_hashed_ += c.length;
    if (wire::Xxh3(buf.data(), c.length) != recorded) continue;
    done_[i] = true;
    digests_[i] = recorded;
    ++done_count_;
  }
  return OpenJournal(false).ok();
}

Status PartialImage::OpenJournal(bool truncate) {
  const std::string path = PartialPath(kJournal);
  const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0);
  journal_fd_ = open(path.c_str(), flags, 0644);
  if (journal_fd_ < 0) return IoError(Errno("cannot open " + path));
  if (truncate) {
    const std::string header = JournalHeader(manifest_sha_, layout_.chunk_bytes());
    if (write(journal_fd_, header.data(), header.size()) != static_cast<ssize_t>(header.size())) {
      return IoError(Errno("cannot write " + path));
    }
  }
  return Status::Ok();
}

std::vector<uint8_t> PartialImage::Have(int* count) const {
  std::lock_guard<std::mutex> lock(mu_);
  *count = done_count_;
  return wire::PackBits(done_);
}

Status PartialImage::WriteChunk(size_t i, const uint8_t* data, const wire::ChunkDigest& digest) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (committing_ || finished_) return Status::Ok();  // the image is complete already
  }
  const ChunkRef& c = layout_[i];
  const std::string path = PartialPath(manifest_.files[c.file].path);
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return IoError(Errno("cannot open " + path));
  Status written = WriteAllAt(fd, data, c.length, c.offset);
  close(fd);
  PALADIN_RETURN_IF_ERROR(written);
  std::lock_guard<std::mutex> lock(mu_);
  if (done_[i]) return Status::Ok();
  const std::string record = JournalLine(i, digest);
  if (write(journal_fd_, record.data(), record.size()) != static_cast<ssize_t>(record.size())) {
    return IoError(Errno("cannot write the journal in " + partial_));
  }
  done_[i] = true;
  digests_[i] = digest;
  ++done_count_;
  return Status::Ok();
}

Status PartialImage::RewriteJournalLocked() {
  std::string text = JournalHeader(manifest_sha_, layout_.chunk_bytes());
  for (size_t i = 0; i < done_.size(); ++i) {
    if (done_[i]) text += JournalLine(i, digests_[i]);
  }
  const std::string path = PartialPath(kJournal);
  PALADIN_RETURN_IF_ERROR(WriteText(path + ".tmp", text));
  std::error_code ec;
  fs::rename(path + ".tmp", path, ec);
  if (ec) return IoError("cannot replace " + path + ": " + ec.message());
  if (journal_fd_ >= 0) close(journal_fd_);
  return OpenJournal(false);
}

void PartialImage::ForgetBadFiles() {
  std::vector<bool> bad(manifest_.files.size(), false);
  for (size_t f = 0; f < manifest_.files.size(); ++f) {
    const int fd = open(PartialPath(manifest_.files[f].path).c_str(), O_RDONLY | O_CLOEXEC);
    uint64_t hashed = 0;
    bad[f] = fd < 0 || !ckpt::VerifyFileContents(fd, manifest_, manifest_.files[f], &hashed).ok();
    if (fd >= 0) close(fd);
    bytes_hashed_ += hashed;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < layout_.size(); ++i) {
    if (bad[layout_[i].file] && done_[i]) {
      done_[i] = false;
      --done_count_;
    }
  }
  (void)RewriteJournalLocked();  // at worst the old journal stays, and verify fails again
}

Status PartialImage::MoveIntoPlace() {
  for (const ckpt::ImageFile& f : manifest_.files) {
    const fs::path to = fs::path(dir_) / f.path;
    std::error_code ec;
    fs::create_directories(to.parent_path(), ec);
    fs::rename(PartialPath(f.path), to, ec);
    if (ec) return IoError("cannot move " + f.path + " into " + dir_ + ": " + ec.message());
  }
  std::error_code ec;
  fs::rename(PartialPath(kManifest), dir_ + "/" + kManifest, ec);
  if (ec) return IoError("cannot write " + dir_ + "/" + kManifest + ": " + ec.message());
  if (durable_) SyncPath(dir_, O_RDONLY | O_DIRECTORY);
  fs::remove_all(partial_, ec);
  return Status::Ok();
}

// Every chunk's record against the sender's (keyed) list, and, aligned, against the manifest:
// a chunk that differs is forgotten, to be sent again.
Status PartialImage::CheckSenderList(const std::vector<wire::ChunkDigest>& sender_list) {
  std::lock_guard<std::mutex> lock(mu_);
  if (sender_list.size() != done_.size()) {
    return InvalidArgument("the sender lists " + std::to_string(sender_list.size()) +
                           " chunks, the manifest has " + std::to_string(done_.size()));
  }
  int64_t first = -1;
  const char* why = "";
  int forgotten = 0;
  for (size_t i = 0; i < done_.size(); ++i) {
    const bool listed = digests_[i] == sender_list[i];
    if (listed && (!aligned_ || digests_[i] == expected_[i])) continue;
    if (first < 0) {
      first = static_cast<int64_t>(i);
      why = listed ? "does not match the manifest's digest"
                   : "does not match the sender's chunk list (altered in transit?)";
    }
    done_[i] = false;
    --done_count_;
    ++forgotten;
  }
  if (first < 0) return Status::Ok();
  (void)RewriteJournalLocked();  // at worst the old journal stays, and the check fails again
  const ChunkRef& c = layout_[static_cast<size_t>(first)];
  return FailedPrecondition(manifest_.files[c.file].path + " at offset " +
                            std::to_string(c.offset) + ": the chunk received " + why + "; " +
                            std::to_string(forgotten) +
                            " chunk(s) forgotten, a later send replaces them");
}

StatusOr<ckpt::VerifyReport> PartialImage::Commit(
    const std::string& local_criu_version, const std::vector<wire::ChunkDigest>& sender_list) {
  std::lock_guard<std::mutex> commit(commit_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) {
      StatusOr<ckpt::VerifyReport> again = ckpt::VerifyImage(dir_, local_criu_version);
      if (again.ok()) bytes_hashed_ += again->bytes_hashed;
      return again;
    }
    if (done_count_ != static_cast<int>(done_.size())) {
      return FailedPrecondition(std::to_string(done_.size() - done_count_) + " of " +
                                std::to_string(done_.size()) + " chunks are missing");
    }
    committing_ = true;
  }
  const Status listed = CheckSenderList(sender_list);
  if (!listed.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    committing_ = false;
    return listed;
  }
  if (durable_) {
    for (const ckpt::ImageFile& f : manifest_.files) SyncPath(PartialPath(f.path), O_RDONLY);
  }
  // Aligned, every byte was checked against the manifest's digests as it arrived (or, found in
  // an earlier receiver's journal, when this one opened it): only the structure is left.
  StatusOr<ckpt::VerifyReport> report =
      ckpt::VerifyImage(partial_, local_criu_version, {kJournal}, !aligned_);
  if (!report.ok()) {
    if (!aligned_) ForgetBadFiles();
    std::lock_guard<std::mutex> lock(mu_);
    committing_ = false;
    return report.status();
  }
  bytes_hashed_ += report->bytes_hashed;
  // Half moved files stay where they are; this object stays committing (writes nothing more),
  // and a fresh Open finds the files missing from .partial and starts over.
  PALADIN_RETURN_IF_ERROR(MoveIntoPlace());
  std::lock_guard<std::mutex> lock(mu_);
  finished_ = true;
  return report;
}

}  // namespace paladin::transfer
