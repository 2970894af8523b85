// The sending end: `streams` connections pull chunks from one shared queue; a stream whose
// connection fails puts its unanswered chunks back, reconnects with exponential backoff, learns
// what the receiver already has, and carries on. Each chunk's XXH3-128 is the manifest's own when
// the image has digests at the transfer's chunk size (nothing is hashed here), else computed once
// as the chunk is sent; the COMMIT lists them all under the token's HMAC.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "layout.h"
#include "paladin/ckpt/image.h"
#include "paladin/transfer/transfer.h"
#include "wire.h"

namespace paladin::transfer {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

enum class ChunkState : uint8_t { kPending, kInFlight, kDone };

// Chunks answered per connection before the next is sent: one on the wire while the receiver
// hashes and writes the one before.
constexpr size_t kWindow = 2;
constexpr size_t kMaxAnswerPayload = 4096;

// Connection trouble is worth a reconnection; anything else (the receiver's refusal, a local
// read error, a protocol error) is not.
bool Retryable(const Status& s) { return s.code() == StatusCode::kIoError; }

Status ReceiverError(const wire::Frame& f, const char* expected) {
  if (f.type == wire::Type::kError) return FailedPrecondition("receiver: " + f.Text());
  return InvalidArgument(std::string("protocol error: ") + expected + " expected, got type " +
                         std::to_string(static_cast<int>(f.type)));
}

// What the streams share. Every member function locks.
class SendState {
 public:
  SendState(std::string image_dir, const ckpt::Manifest& m, std::string manifest_text,
            const SendOptions& o)
      : dir(std::move(image_dir)),
        manifest(m),
        manifest_json(std::move(manifest_text)),
        options(o),
        layout(m.files, o.chunk_bytes),
        manifest_sha(wire::Sha256(reinterpret_cast<const uint8_t*>(manifest_json.data()),
                                  manifest_json.size())),
        state_(layout.size(), ChunkState::kPending),
        rejections_(layout.size(), 0),
        digests_(layout.size()),
        have_digest_(layout.size(), false) {
    for (size_t i = 0; i < layout.size(); ++i) pending_.push_back(i);
    UseManifestDigests();
  }

  std::optional<size_t> Take();
  void Requeue(size_t i);
  void MarkDone(size_t i);
  // Takes the receiver's bitmap: chunks it has are done; with `reopen`, chunks it lacks are
  // pending again. Returns how many it has; *unsent counts those this call had not sent yet.
  int Merge(const std::vector<uint8_t>& bitmap, bool reopen, int* unsent);
  // Counts a rejection of chunk i; false once it was rejected more often than allowed.
  bool Reject(size_t i);
  // Counts a DATA frame; says which faults fire on it.
  void CountFrame(uint32_t length, bool* corrupt, bool* forge, bool* drop);
  void Register(int fd);
  void Unregister(int fd);
  void DropAll();
  void SetError(const Status& s);
  Status error();
  bool AllDone();
  void Backoff(int attempt);
  void StreamEnded();
  // Waits up to `wait` for the streams to end; true when they have.
  bool WaitStreams(std::chrono::milliseconds wait);
  SendProgress Progress(Clock::time_point start);
  void Note(bool reconnect, int have, int unsent);
  SendReport Report();
  // Chunk i's digest: the manifest's, one computed earlier, or now from `data` (may be null:
  // then the chunk is read from its file). Counts what it hashes.
  StatusOr<wire::ChunkDigest> Digest(size_t i, const uint8_t* data);
  // Every chunk's digest, for COMMIT (hashing those this call has not yet, when the manifest has
  // none at this chunk size).
  StatusOr<std::vector<wire::ChunkDigest>> ChunkList();
  // Whether the alter-list fault fires on this COMMIT.
  bool AlterListFires();

  const std::string dir;
  const ckpt::Manifest& manifest;
  const std::string manifest_json;
  const SendOptions& options;
  const ChunkLayout layout;
  const wire::Digest manifest_sha;
  std::string host;
  int port = 0;
  int running = 0;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> pending_;
  std::vector<ChunkState> state_;
  std::vector<int> rejections_;
  std::set<int> fds_;
  Status error_;
  uint64_t bytes_done_ = 0;
  int frames_ = 0;
  bool drop_fired_ = false;
  bool corrupt_fired_ = false;
  bool forge_fired_ = false;
  bool alter_fired_ = false;
  std::vector<wire::ChunkDigest> digests_;
  std::vector<bool> have_digest_;
  SendReport report_;

  void UseManifestDigests();
};

// Called from the constructor only.
void SendState::UseManifestDigests() {
  const std::vector<wire::ChunkDigest> listed = ManifestChunkDigests(manifest, layout);
  for (size_t i = 0; i < listed.size(); ++i) {
    digests_[i] = listed[i];
    have_digest_[i] = true;
  }
}

StatusOr<wire::ChunkDigest> SendState::Digest(size_t i, const uint8_t* data) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (have_digest_[i]) return digests_[i];
  }
  const ChunkRef& c = layout[i];
  std::vector<uint8_t> own;
  if (data == nullptr) {
    const std::string path = dir + "/" + manifest.files[c.file].path;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return FailedPrecondition("cannot read " + path + ": " + std::strerror(errno));
    own.resize(c.length);
    size_t got = 0;
    while (got < c.length) {
      const ssize_t n =
          pread(fd, own.data() + got, c.length - got, static_cast<off_t>(c.offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    close(fd);
    if (got != c.length) return FailedPrecondition("cannot read " + path + " (changed?)");
    data = own.data();
  }
  const wire::ChunkDigest d = wire::Xxh3(data, c.length);
  std::lock_guard<std::mutex> lock(mu_);
  report_.bytes_hashed += c.length;
  digests_[i] = d;
  have_digest_[i] = true;
  return d;
}

StatusOr<std::vector<wire::ChunkDigest>> SendState::ChunkList() {
  for (size_t i = 0; i < layout.size(); ++i) {
    StatusOr<wire::ChunkDigest> d = Digest(i, nullptr);
    if (!d.ok()) return d.status();
  }
  std::lock_guard<std::mutex> lock(mu_);
  return digests_;
}

bool SendState::AlterListFires() {
  std::lock_guard<std::mutex> lock(mu_);
  const bool fire = !alter_fired_ && options.fault.alter_list > 0 &&
                    static_cast<size_t>(options.fault.alter_list) <= layout.size();
  alter_fired_ = alter_fired_ || fire;
  return fire;
}

std::optional<size_t> SendState::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  while (error_.ok() && !pending_.empty()) {
    const size_t i = pending_.front();
    pending_.pop_front();
    if (state_[i] != ChunkState::kPending) continue;
    state_[i] = ChunkState::kInFlight;
    return i;
  }
  return std::nullopt;
}

void SendState::Requeue(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_[i] != ChunkState::kInFlight) return;
  state_[i] = ChunkState::kPending;
  pending_.push_front(i);
}

void SendState::MarkDone(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_[i] == ChunkState::kDone) return;
  state_[i] = ChunkState::kDone;
  bytes_done_ += layout[i].length;
}

int SendState::Merge(const std::vector<uint8_t>& bitmap, bool reopen, int* unsent) {
  std::lock_guard<std::mutex> lock(mu_);
  int have = 0;
  *unsent = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    if (wire::BitAt(bitmap, i)) {
      ++have;
      if (state_[i] != ChunkState::kDone) bytes_done_ += layout[i].length;
      if (state_[i] == ChunkState::kPending) ++*unsent;
      state_[i] = ChunkState::kDone;
    } else if (reopen && state_[i] == ChunkState::kDone) {
      state_[i] = ChunkState::kPending;
      bytes_done_ -= layout[i].length;
      pending_.push_back(i);
    }
  }
  return have;
}

bool SendState::Reject(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  ++report_.chunks_rejected;
  return ++rejections_[i] <= options.chunk_attempts;
}

void SendState::CountFrame(uint32_t length, bool* corrupt, bool* forge, bool* drop) {
  std::lock_guard<std::mutex> lock(mu_);
  ++frames_;
  ++report_.chunks_sent;
  report_.bytes_sent += length;
  *corrupt = !corrupt_fired_ && frames_ == options.fault.corrupt_chunk;
  *forge = !forge_fired_ && frames_ == options.fault.forge_chunk;
  *drop = !drop_fired_ && frames_ == options.fault.drop_after_chunks;
  corrupt_fired_ = corrupt_fired_ || *corrupt;
  forge_fired_ = forge_fired_ || *forge;
  drop_fired_ = drop_fired_ || *drop;
}

void SendState::Register(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  fds_.insert(fd);
}

void SendState::Unregister(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  fds_.erase(fd);
}

void SendState::DropAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (int fd : fds_) wire::Socket::ShutdownFd(fd);
}

void SendState::SetError(const Status& s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.ok()) error_ = s;
  for (int fd : fds_) wire::Socket::ShutdownFd(fd);
  cv_.notify_all();
}

Status SendState::error() {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

bool SendState::AllDone() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::all_of(state_.begin(), state_.end(),
                     [](ChunkState s) { return s == ChunkState::kDone; });
}

void SendState::Backoff(int attempt) {
  const double seconds = std::min(options.backoff_max_s,
                                  options.backoff_initial_s * std::pow(2.0, std::min(attempt, 30)));
  std::unique_lock<std::mutex> lock(mu_);
  ++report_.reconnects;
  cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return !error_.ok(); });
}

void SendState::StreamEnded() {
  std::lock_guard<std::mutex> lock(mu_);
  --running;
  cv_.notify_all();
}

bool SendState::WaitStreams(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, wait, [this] { return running == 0; });
}

SendProgress SendState::Progress(Clock::time_point start) {
  std::lock_guard<std::mutex> lock(mu_);
  SendProgress p;
  p.bytes_total = layout.total_bytes();
  p.bytes_done = bytes_done_;
  p.bytes_sent = report_.bytes_sent;
  p.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  return p;
}

void SendState::Note(bool reconnect, int have, int unsent) {
  std::lock_guard<std::mutex> lock(mu_);
  if (reconnect) {
    report_.chunks_present_at_reconnect = std::max(report_.chunks_present_at_reconnect, have);
  } else if (frames_ == 0) {
    report_.chunks_present_at_start += unsent;
  }
}

SendReport SendState::Report() {
  std::lock_guard<std::mutex> lock(mu_);
  return report_;
}

// Connects, authenticates and says which image this is; merges the receiver's answer.
// `connection` counts this stream's earlier connections (0: its first); `commit`: the
// connection that will COMMIT (chunks the receiver lacks become pending again).
StatusOr<wire::Socket> OpenSession(SendState* st, int connection, bool commit,
                                   wire::Nonce* session_nonce = nullptr) {
  const int timeout_ms = static_cast<int>(st->options.io_timeout_s * 1000);
  StatusOr<wire::Socket> s = wire::Connect(st->host, st->port, timeout_ms);
  if (!s.ok()) return s.status();
  wire::Frame f;
  PALADIN_RETURN_IF_ERROR(s->Read(wire::kMaxPreAuthPayload, &f));
  wire::Reader rd(f.payload);
  uint32_t version = 0;
  const uint8_t* nonce = nullptr;
  if (f.type != wire::Type::kNonce) return ReceiverError(f, "NONCE");
  if (!rd.U32(&version) || version != wire::kProtocolVersion ||
      !rd.Bytes(wire::kNonceBytes, &nonce)) {
    return FailedPrecondition("the receiver speaks protocol version " + std::to_string(version) +
                              ", this sender " + std::to_string(wire::kProtocolVersion) +
                              " (both ends need the same transfer protocol)");
  }
  wire::Nonce theirs{};
  std::copy_n(nonce, wire::kNonceBytes, theirs.begin());
  if (session_nonce != nullptr) *session_nonce = theirs;
  // AUTH: this end's nonce and the proof of the token over both (a sender without a token sends
  // only its nonce and is refused).
  wire::Nonce ours{};
  PALADIN_RETURN_IF_ERROR(wire::RandomBytes(ours.data(), ours.size()));
  std::vector<uint8_t> auth(ours.begin(), ours.end());
  if (!st->options.token.empty()) {
    const wire::Digest mac = wire::AuthMac(st->options.token, theirs, ours);
    auth.insert(auth.end(), mac.begin(), mac.end());
  }
  PALADIN_RETURN_IF_ERROR(s->Write(wire::Type::kAuth, auth));
  PALADIN_RETURN_IF_ERROR(s->Read(kMaxAnswerPayload, &f));
  if (f.type != wire::Type::kReady) return ReceiverError(f, "READY");
  // READY proves the receiver holds the token too: nothing of the image (not even the
  // manifest's file names) goes to one that does not.
  const wire::Digest ready = wire::ReadyMac(st->options.token, theirs, ours);
  if (f.payload.size() != wire::kDigestBytes || !wire::SameDigest(f.payload.data(), ready.data())) {
    return FailedPrecondition("the receiver at " + s->peer() +
                              " did not prove it holds the token (READY); nothing was sent");
  }
  const wire::SealKeys keys = wire::DeriveSealKeys(st->options.token, theirs, ours);
  PALADIN_RETURN_IF_ERROR(s->Seal(keys.to_receiver, keys.to_sender));
  std::vector<uint8_t> hello;
  wire::PutU64(&hello, st->layout.chunk_bytes());
  wire::PutU32(&hello, static_cast<uint32_t>(connection));
  hello.insert(hello.end(), st->manifest_json.begin(), st->manifest_json.end());
  PALADIN_RETURN_IF_ERROR(s->Write(wire::Type::kHello, hello));
  PALADIN_RETURN_IF_ERROR(s->Read(kMaxAnswerPayload + st->layout.size() / 8, &f));
  wire::Reader have(f.payload);
  uint32_t count = 0;
  if (f.type != wire::Type::kHave) return ReceiverError(f, "HAVE");
  if (!have.U32(&count) || count != st->layout.size()) {
    return InvalidArgument("protocol error: the receiver counts " + std::to_string(count) +
                           " chunks, this sender " + std::to_string(st->layout.size()));
  }
  int unsent = 0;
  const int present =
      st->Merge(std::vector<uint8_t>(have.rest(), have.rest() + have.left()), commit, &unsent);
  if (!commit) st->Note(connection > 0, present, unsent);
  return s;
}

// One stream: its connection, reconnected as needed, and the chunks it has unanswered.
class Stream {
 public:
  explicit Stream(SendState* st) : st_(st), buf_(st->layout.chunk_bytes()) {}
  void Run();

 private:
  Status Pump(wire::Socket* s, int* attempt);
  Status SendChunk(wire::Socket* s, size_t i);
  Status AwaitAnswer(wire::Socket* s);
  Status ReadChunk(size_t i);

  SendState* st_;
  std::vector<uint8_t> buf_;
  std::deque<size_t> outstanding_;
};

void Stream::Run() {
  int attempt = 0;  // reconnections since the last answered chunk
  for (int connection = 0;; ++connection) {
    if (!st_->error().ok()) break;
    StatusOr<wire::Socket> s = OpenSession(st_, connection, false);
    Status result = s.status();
    if (s.ok()) {
      st_->Register(s->fd());
      result = Pump(&*s, &attempt);
      st_->Unregister(s->fd());
    }
    for (size_t i : outstanding_) st_->Requeue(i);
    outstanding_.clear();
    if (result.ok()) break;
    if (!Retryable(result) || attempt >= st_->options.retries) {
      st_->SetError(result);
      break;
    }
    st_->Backoff(attempt++);
  }
  st_->StreamEnded();
}

Status Stream::Pump(wire::Socket* s, int* attempt) {
  for (;;) {
    const std::optional<size_t> next = st_->Take();
    if (!next) {
      if (outstanding_.empty()) return st_->error();
      PALADIN_RETURN_IF_ERROR(AwaitAnswer(s));
      *attempt = 0;
      continue;
    }
    PALADIN_RETURN_IF_ERROR(SendChunk(s, *next));
    if (outstanding_.size() >= kWindow) {
      PALADIN_RETURN_IF_ERROR(AwaitAnswer(s));
      *attempt = 0;
    }
  }
}

Status Stream::ReadChunk(size_t i) {
  const ChunkRef& c = st_->layout[i];
  const std::string path = st_->dir + "/" + st_->manifest.files[c.file].path;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return FailedPrecondition("cannot read " + path + ": " + std::strerror(errno));
  size_t got = 0;
  while (got < c.length) {
    const ssize_t n =
        pread(fd, buf_.data() + got, c.length - got, static_cast<off_t>(c.offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  if (got != c.length) return FailedPrecondition("cannot read " + path + " (changed while sent?)");
  return Status::Ok();
}

Status Stream::SendChunk(wire::Socket* s, size_t i) {
  PALADIN_RETURN_IF_ERROR(ReadChunk(i));
  const ChunkRef& c = st_->layout[i];
  StatusOr<wire::ChunkDigest> digest = st_->Digest(i, buf_.data());
  if (!digest.ok()) return digest.status();
  bool corrupt = false;
  bool forge = false;
  bool drop = false;
  st_->CountFrame(c.length, &corrupt, &forge, &drop);
  if (corrupt || forge) buf_[c.length / 2] ^= 0x5a;  // corrupt: the declared hash stays good
  const wire::ChunkDigest declared = forge ? wire::Xxh3(buf_.data(), c.length) : *digest;
  std::vector<uint8_t> head;
  wire::PutU32(&head, c.file);
  wire::PutU64(&head, c.offset);
  wire::PutU32(&head, c.length);
  head.insert(head.end(), declared.begin(), declared.end());
  outstanding_.push_back(i);
  PALADIN_RETURN_IF_ERROR(s->Write(wire::Type::kData, head, buf_.data(), c.length));
  if (drop) st_->DropAll();
  return Status::Ok();
}

Status Stream::AwaitAnswer(wire::Socket* s) {
  wire::Frame f;
  PALADIN_RETURN_IF_ERROR(s->Read(kMaxAnswerPayload, &f));
  if (f.type != wire::Type::kAck && f.type != wire::Type::kNack) return ReceiverError(f, "ACK");
  const size_t i = outstanding_.front();
  const ChunkRef& c = st_->layout[i];
  wire::Reader rd(f.payload);
  uint32_t file = 0;
  uint64_t offset = 0;
  if (!rd.U32(&file) || !rd.U64(&offset) || file != c.file || offset != c.offset) {
    return InvalidArgument("protocol error: an answer for another chunk");
  }
  outstanding_.pop_front();
  if (f.type == wire::Type::kAck) {
    st_->MarkDone(i);
    return Status::Ok();
  }
  st_->Requeue(i);
  if (!st_->Reject(i)) {
    return FailedPrecondition("the receiver rejected " + st_->manifest.files[c.file].path +
                              " at offset " + std::to_string(c.offset) + " " +
                              std::to_string(st_->options.chunk_attempts + 1) +
                              " times: " + std::string(rd.rest(), rd.rest() + rd.left()));
  }
  return Status::Ok();
}

// Runs the streams to the end, reporting progress about once a second.
Status RunStreams(SendState* st, Clock::time_point start,
                  const std::function<void(const SendProgress&)>& progress) {
  std::vector<std::thread> threads;
  st->running = st->options.streams;
  threads.reserve(st->options.streams);
  for (int i = 0; i < st->options.streams; ++i) {
    threads.emplace_back([st] { Stream(st).Run(); });
  }
  while (!st->WaitStreams(std::chrono::milliseconds(1000))) {
    if (progress) progress(st->Progress(start));
  }
  for (std::thread& t : threads) t.join();
  PALADIN_RETURN_IF_ERROR(st->error());
  if (!st->AllDone()) return Internal("the streams ended with chunks unsent");
  return Status::Ok();
}

// One COMMIT on a fresh connection. NotFound when the receiver lacks chunks (they are pending
// again).
StatusOr<std::string> CommitOnce(SendState* st) {
  wire::Nonce nonce{};
  StatusOr<wire::Socket> s = OpenSession(st, 0, true, &nonce);
  if (!s.ok()) return s.status();
  if (!st->AllDone()) return NotFound("the receiver lost chunks; sending them again");
  StatusOr<std::vector<wire::ChunkDigest>> list = st->ChunkList();
  if (!list.ok()) return list.status();
  const wire::Digest mac =
      wire::CommitMac(st->options.token, nonce, st->manifest_sha, st->layout.chunk_bytes(), *list);
  if (st->AlterListFires()) (*list)[st->options.fault.alter_list - 1][0] ^= 1;
  std::vector<uint8_t> commit;
  commit.reserve(4 + list->size() * wire::kChunkDigestBytes + mac.size());
  wire::PutU32(&commit, static_cast<uint32_t>(list->size()));
  for (const wire::ChunkDigest& d : *list) commit.insert(commit.end(), d.begin(), d.end());
  commit.insert(commit.end(), mac.begin(), mac.end());
  PALADIN_RETURN_IF_ERROR(s->Write(wire::Type::kCommit, commit));
  wire::Frame f;
  for (;;) {
    PALADIN_RETURN_IF_ERROR(s->Read(kMaxAnswerPayload, &f));
    if (f.type == wire::Type::kOk) return f.Text();
    if (f.type != wire::Type::kWait) return ReceiverError(f, "OK");
  }
}

StatusOr<std::string> Commit(SendState* st) {
  for (int attempt = 0;; ++attempt) {
    StatusOr<std::string> answer = CommitOnce(st);
    if (answer.ok() || !Retryable(answer.status()) || attempt >= st->options.retries) {
      return answer;
    }
    st->Backoff(attempt);
  }
}

StatusOr<std::string> ReadManifestText(const std::string& dir, const ckpt::Manifest& m) {
  for (const ckpt::ImageFile& f : m.files) {
    std::error_code ec;
    const uint64_t size = fs::file_size(dir + "/" + f.path, ec);
    if (ec) return FailedPrecondition(dir + ": " + f.path + " is missing");
    if (size != f.size) {
      return FailedPrecondition(dir + ": " + f.path + " is " + std::to_string(size) +
                                " bytes, the manifest says " + std::to_string(f.size));
    }
  }
  std::ifstream in(dir + "/manifest.json", std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) return IoError("cannot read " + dir + "/manifest.json");
  if (text.str().size() > wire::kMaxHelloPayload) {
    return FailedPrecondition(dir + ": manifest.json is too large to send");
  }
  return text.str();
}

Status CheckOptions(const SendOptions& o) {
  if (o.streams < 1 || o.streams > 64) return InvalidArgument("--streams must be 1 to 64");
  if (o.retries < 0) return InvalidArgument("--retries must be 0 or more");
  if (o.chunk_bytes < wire::kMinChunkBytes || o.chunk_bytes > wire::kMaxChunkBytes) {
    return InvalidArgument("chunk size out of range");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<SendReport> SendImage(const std::string& dir, const std::string& host, int port,
                               const SendOptions& options,
                               const std::function<void(const SendProgress&)>& progress) {
  const Clock::time_point start = Clock::now();
  PALADIN_RETURN_IF_ERROR(CheckOptions(options));
  StatusOr<ckpt::Manifest> manifest = ckpt::ReadManifest(dir);
  if (!manifest.ok())
    return FailedPrecondition("not a finished image: " + manifest.status().message());
  StatusOr<std::string> text = ReadManifestText(dir, *manifest);
  if (!text.ok()) return text.status();
  SendState st(dir, *manifest, *text, options);
  st.host = host;
  st.port = port;
  StatusOr<std::string> answer = NotFound("");
  for (int round = 0; round < 3 && answer.status().code() == StatusCode::kNotFound; ++round) {
    PALADIN_RETURN_IF_ERROR(RunStreams(&st, start, progress));
    answer = Commit(&st);
  }
  if (!answer.ok()) return answer.status();
  SendReport report = st.Report();
  report.files = static_cast<int>(manifest->files.size());
  report.bytes_total = st.layout.total_bytes();
  report.chunks_total = static_cast<int>(st.layout.size());
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  report.receiver_message = *answer;
  if (progress) {
    SendProgress last = st.Progress(start);
    last.final = true;
    progress(last);
  }
  return report;
}

}  // namespace paladin::transfer
