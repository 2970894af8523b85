// The receiving end: one thread per connection, all feeding the same PartialImage.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "paladin/base/size.h"
#include "paladin/transfer/transfer.h"
#include "partial.h"
#include "wire.h"

namespace paladin::transfer {

struct Receiver::Impl {
  explicit Impl(ReceiverOptions o)
      : options(std::move(o)), io_timeout_ms(static_cast<int>(options.io_timeout_s * 1000)) {}

  void Log(const std::string& line) {
    if (!options.log) return;
    std::lock_guard<std::mutex> lock(log_mu);
    options.log(line);
  }
  // The image this manifest names, shared by its connections; Release gives it back.
  StatusOr<std::shared_ptr<PartialImage>> Acquire(const std::string& manifest_json,
                                                  uint64_t chunk_bytes);
  void Release(std::shared_ptr<PartialImage>* held) {
    std::lock_guard<std::mutex> lock(mu);
    held->reset();
  }
  // A COMMIT was answered: ReceiveOne returns `outcome`.
  void Finish(const Status& outcome, PartialImage& image);

  const ReceiverOptions options;
  const int io_timeout_ms;
  wire::Listener listener;
  std::atomic<bool> stop{false};

  std::mutex mu;  // guards everything below
  std::shared_ptr<PartialImage> image;
  std::set<int> open_fds;
  std::optional<Status> outcome;
  ReceiveReport stats;
  bool refuse_fired = false;

  std::mutex log_mu;
};

namespace {

// One connection: authentication, HELLO, then DATA frames until COMMIT or the peer leaves.
class Connection {
 public:
  Connection(Receiver::Impl* r, wire::Socket socket) : r_(r), s_(std::move(socket)) {}
  void Run();

 private:
  Status Fail(const Status& status) {
    (void)s_.Write(wire::Type::kError, status.message().substr(0, wire::kMaxErrorText));
    return status;
  }
  bool Authenticate();
  Status Hello();
  Status Serve();
  Status OnData(const wire::Frame& frame);
  Status OnCommit(const wire::Frame& frame);
  StatusOr<ckpt::VerifyReport> CommitWithKeepalive(const std::vector<wire::ChunkDigest>& list);
  // The COMMIT's chunk list, its HMAC checked.
  StatusOr<std::vector<wire::ChunkDigest>> SenderList(const wire::Frame& frame);
  void Count(int ReceiveReport::*field) {
    std::lock_guard<std::mutex> lock(r_->mu);
    ++(r_->stats.*field);
  }

  Receiver::Impl* r_;
  wire::Socket s_;
  std::shared_ptr<PartialImage> image_;
  wire::Nonce nonce_{};
  int chunks_ = 0;
};

void Connection::Run() {
  const std::string peer = s_.peer();
  if (!Authenticate()) {
    Count(&ReceiveReport::refused);
    r_->Log("connection from " + peer + " refused: authentication failed");
  } else {
    Count(&ReceiveReport::connections);
    Status st = Hello();
    if (st.ok()) st = Serve();
    r_->Release(&image_);
    r_->Log("connection from " + peer + " ended after " + std::to_string(chunks_) + " chunks" +
            (st.ok() || s_.closed_between_frames() ? "" : ": " + st.message()));
  }
  std::lock_guard<std::mutex> lock(r_->mu);
  r_->open_fds.erase(s_.fd());
}

bool Connection::Authenticate() {
  std::vector<uint8_t> hello;
  wire::PutU32(&hello, wire::kProtocolVersion);
  if (!wire::RandomBytes(nonce_.data(), nonce_.size()).ok()) return false;
  hello.insert(hello.end(), nonce_.begin(), nonce_.end());
  if (!s_.Write(wire::Type::kNonce, hello).ok()) return false;
  wire::Frame f;
  const Status read = s_.Read(wire::kMaxPreAuthPayload, &f);
  if (!read.ok() && s_.closed_between_frames()) {
    // A sender of another protocol version reads NONCE's version and leaves here, saying why
    // on its side.
    r_->Log("connection from " + s_.peer() +
            " closed before authenticating (a sender of another protocol version leaves here; " +
            "this receiver speaks version " + std::to_string(wire::kProtocolVersion) + ")");
  }
  // AUTH: the sender's nonce, then its proof of the token over both nonces.
  wire::Nonce theirs{};
  bool good = read.ok() && f.type == wire::Type::kAuth &&
              f.payload.size() == wire::kNonceBytes + wire::kDigestBytes;
  if (good) {
    std::copy_n(f.payload.begin(), wire::kNonceBytes, theirs.begin());
    const wire::Digest expected = wire::AuthMac(r_->options.token, nonce_, theirs);
    good = wire::SameDigest(f.payload.data() + wire::kNonceBytes, expected.data());
  }
  if (!good) {
    (void)Fail(FailedPrecondition("authentication failed"));
    return false;
  }
  const wire::Digest ready = wire::ReadyMac(r_->options.token, nonce_, theirs);
  if (!s_.Write(wire::Type::kReady, std::vector<uint8_t>(ready.begin(), ready.end())).ok()) {
    return false;
  }
  const wire::SealKeys keys = wire::DeriveSealKeys(r_->options.token, nonce_, theirs);
  return s_.Seal(keys.to_sender, keys.to_receiver).ok();
}

Status Connection::Hello() {
  wire::Frame f;
  PALADIN_RETURN_IF_ERROR(s_.Read(wire::kMaxHelloPayload + 12, &f));
  wire::Reader rd(f.payload);
  uint64_t chunk_bytes = 0;
  uint32_t attempt = 0;
  if (f.type != wire::Type::kHello || !rd.U64(&chunk_bytes) || !rd.U32(&attempt)) {
    return Fail(InvalidArgument("protocol error: HELLO expected"));
  }
  if (chunk_bytes < wire::kMinChunkBytes || chunk_bytes > wire::kMaxChunkBytes) {
    return Fail(InvalidArgument("chunk size " + std::to_string(chunk_bytes) + " out of range"));
  }
  StatusOr<std::shared_ptr<PartialImage>> image =
      r_->Acquire(std::string(rd.rest(), rd.rest() + rd.left()), chunk_bytes);
  if (!image.ok()) return Fail(image.status());
  image_ = *image;
  int have = 0;
  std::vector<uint8_t> reply;
  wire::PutU32(&reply, static_cast<uint32_t>(image_->layout().size()));
  const std::vector<uint8_t> bitmap = image_->Have(&have);
  reply.insert(reply.end(), bitmap.begin(), bitmap.end());
  if (attempt > 0 && have > 0) {
    std::lock_guard<std::mutex> lock(r_->mu);
    ++r_->stats.resumes;
    r_->stats.chunks_present_at_resume = std::max(r_->stats.chunks_present_at_resume, have);
  }
  r_->Log("connection from " + s_.peer() + ": image " + image_->manifest().name + ", " +
          std::to_string(have) + " of " + std::to_string(image_->layout().size()) + " chunks here" +
          (attempt > 0 ? " (resume, attempt " + std::to_string(attempt) + ")" : ""));
  return s_.Write(wire::Type::kHave, reply);
}

Status Connection::Serve() {
  const size_t commit_payload =
      4 + image_->layout().size() * wire::kChunkDigestBytes + wire::kDigestBytes;
  const size_t max_payload =
      std::max<size_t>(image_->layout().chunk_bytes() + wire::kDataHeaderBytes, commit_payload);
  wire::Frame f;
  for (;;) {
    PALADIN_RETURN_IF_ERROR(s_.Read(max_payload, &f));
    if (f.type == wire::Type::kData) {
      PALADIN_RETURN_IF_ERROR(OnData(f));
    } else if (f.type == wire::Type::kCommit) {
      return OnCommit(f);
    } else {
      return Fail(InvalidArgument("protocol error: unexpected frame type " +
                                  std::to_string(static_cast<int>(f.type))));
    }
  }
}

Status Connection::OnData(const wire::Frame& frame) {
  wire::Reader rd(frame.payload);
  uint32_t file = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
  const uint8_t* declared = nullptr;
  if (!rd.U32(&file) || !rd.U64(&offset) || !rd.U32(&length) ||
      !rd.Bytes(wire::kChunkDigestBytes, &declared)) {
    return Fail(InvalidArgument("protocol error: short DATA frame"));
  }
  const ChunkLayout& layout = image_->layout();
  const int64_t i = layout.Find(file, offset);
  if (i < 0 || layout[i].length != length || rd.left() != length) {
    return Fail(InvalidArgument("protocol error: no chunk of " + std::to_string(length) +
                                " bytes at file " + std::to_string(file) + " offset " +
                                std::to_string(offset)));
  }
  std::vector<uint8_t> answer;
  wire::PutU32(&answer, file);
  wire::PutU64(&answer, offset);
  // The one hash of these bytes at this end: against what the sender declared and, when the
  // manifest has them, the manifest's own digest of this chunk.
  const wire::ChunkDigest actual = wire::Xxh3(rd.rest(), length);
  {
    std::lock_guard<std::mutex> lock(r_->mu);
    r_->stats.bytes_received += length;
    r_->stats.bytes_hashed += length;
  }
  const char* why = nullptr;
  if (image_->aligned() && actual != image_->expected(static_cast<size_t>(i))) {
    why = "XXH3-128 differs from the manifest's digest of this chunk";
  } else if (!std::equal(actual.begin(), actual.end(), declared)) {
    why = "XXH3-128 mismatch";
  }
  if (why != nullptr) {
    Count(&ReceiveReport::chunks_rejected);
    r_->Log("chunk " + std::to_string(i) + " (" + image_->manifest().files[file].path + " at " +
            std::to_string(offset) + ") rejected: " + why);
    answer.insert(answer.end(), why, why + std::strlen(why));
    return s_.Write(wire::Type::kNack, answer);
  }
  Status written = image_->WriteChunk(static_cast<size_t>(i), rd.rest(), actual);
  if (!written.ok()) return Fail(written);
  Count(&ReceiveReport::chunks_received);
  ++chunks_;
  return s_.Write(wire::Type::kAck, answer);
}

StatusOr<std::vector<wire::ChunkDigest>> Connection::SenderList(const wire::Frame& frame) {
  wire::Reader rd(frame.payload);
  uint32_t count = 0;
  const uint8_t* list = nullptr;
  const uint8_t* mac = nullptr;
  if (!rd.U32(&count) || count != image_->layout().size() ||
      !rd.Bytes(size_t{count} * wire::kChunkDigestBytes, &list) ||
      !rd.Bytes(wire::kDigestBytes, &mac) || rd.left() != 0) {
    return InvalidArgument("protocol error: a COMMIT without the list of " +
                           std::to_string(image_->layout().size()) + " chunk digests");
  }
  std::vector<wire::ChunkDigest> chunks(count);
  for (size_t i = 0; i < count; ++i) {
    std::copy_n(list + i * wire::kChunkDigestBytes, wire::kChunkDigestBytes, chunks[i].begin());
  }
  const wire::Digest expected = wire::CommitMac(
      r_->options.token, nonce_, image_->manifest_digest(), image_->layout().chunk_bytes(), chunks);
  if (!wire::SameDigest(mac, expected.data())) {
    return FailedPrecondition(
        "the chunk list's keyed digest (HMAC-SHA256) does not match: the manifest or the list "
        "was altered on the way, or the sender has another token; nothing was committed");
  }
  return chunks;
}

StatusOr<ckpt::VerifyReport> Connection::CommitWithKeepalive(
    const std::vector<wire::ChunkDigest>& list) {
  PartialImage* image = image_.get();
  const std::string criu = r_->options.local_criu_version;
  std::future<StatusOr<ckpt::VerifyReport>> commit =
      std::async(std::launch::async, [image, criu, &list] { return image->Commit(criu, list); });
  // Verifying a large image takes a while: keep the sender's connection alive meanwhile.
  const auto keepalive = std::chrono::milliseconds(std::clamp(r_->io_timeout_ms / 4, 100, 5000));
  while (commit.wait_for(keepalive) != std::future_status::ready) {
    (void)s_.Write(wire::Type::kWait, std::vector<uint8_t>());
  }
  return commit.get();
}

Status Connection::OnCommit(const wire::Frame& frame) {
  StatusOr<std::vector<wire::ChunkDigest>> list = SenderList(frame);
  if (!list.ok()) {
    r_->Log("COMMIT from " + s_.peer() + " refused: " + list.status().message());
    (void)Fail(list.status());
    r_->Finish(list.status(), *image_);
    return list.status();
  }
  bool refuse = false;
  {
    std::lock_guard<std::mutex> lock(r_->mu);
    refuse = r_->options.fault.refuse_commit && !r_->refuse_fired;
    r_->refuse_fired = r_->refuse_fired || refuse;
  }
  if (refuse) {
    Status refused = FailedPrecondition("destination refused");
    (void)Fail(refused);
    r_->Finish(refused, *image_);
    return refused;
  }
  StatusOr<ckpt::VerifyReport> report = CommitWithKeepalive(*list);
  if (!report.ok()) {
    (void)Fail(report.status());
    r_->Finish(report.status(), *image_);
    return report.status();
  }
  const std::string summary = "verified " + std::to_string(report->files_checked) + " files, " +
                              base::FormatSize(report->bytes_checked) + ", in " +
                              r_->options.out_dir;
  (void)s_.Write(wire::Type::kOk, summary);
  r_->Finish(Status::Ok(), *image_);
  return Status::Ok();
}

}  // namespace

StatusOr<std::shared_ptr<PartialImage>> Receiver::Impl::Acquire(const std::string& manifest_json,
                                                                uint64_t chunk_bytes) {
  const wire::Digest d =
      wire::Sha256(reinterpret_cast<const uint8_t*>(manifest_json.data()), manifest_json.size());
  std::lock_guard<std::mutex> lock(mu);
  if (image && image->manifest_sha() == wire::Hex(d.data(), d.size()) &&
      image->layout().chunk_bytes() == chunk_bytes) {
    return image;
  }
  if (image && image.use_count() > 1) {
    return FailedPrecondition("the receiver is busy with another image");
  }
  image.reset();
  StatusOr<std::unique_ptr<PartialImage>> opened =
      PartialImage::Open(options.out_dir, manifest_json, chunk_bytes);
  if (!opened.ok()) return opened.status();
  image = std::move(*opened);
  image->set_durable(options.durable);
  stats.bytes_hashed += image->TakeBytesHashed();
  return image;
}

void Receiver::Impl::Finish(const Status& result, PartialImage& finished) {
  {
    std::lock_guard<std::mutex> lock(mu);
    stats.bytes_hashed += finished.TakeBytesHashed();
    stats.files = static_cast<int>(finished.manifest().files.size());
    stats.bytes = finished.layout().total_bytes();
    stats.chunks_total = static_cast<int>(finished.layout().size());
    stats.already_present = finished.found_finished();
    outcome = result;
    // A failed commit may leave the object unusable: the next HELLO opens the image afresh
    // from disk (the journal keeps what is good).
    if (!result.ok() && image.get() == &finished) image.reset();
  }
  Log(result.ok() ? "commit: " + finished.manifest().name + " verified into " + options.out_dir
                  : "commit failed: " + result.message());
}

Receiver::Receiver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Receiver::~Receiver() = default;

StatusOr<std::unique_ptr<Receiver>> Receiver::Listen(ReceiverOptions options) {
  if (options.token.empty()) return InvalidArgument("the receiver needs a token");
  if (options.out_dir.empty()) return InvalidArgument("the receiver needs an output directory");
  std::error_code ec;
  std::filesystem::create_directories(options.out_dir, ec);
  if (ec) return IoError("cannot create " + options.out_dir + ": " + ec.message());
  auto impl = std::make_unique<Impl>(std::move(options));
  StatusOr<wire::Listener> listener =
      wire::Listener::Bind(impl->options.bind_address, impl->options.port);
  if (!listener.ok()) return listener.status();
  impl->listener = std::move(*listener);
  return std::unique_ptr<Receiver>(new Receiver(std::move(impl)));
}

int Receiver::port() const { return impl_->listener.port(); }

void Receiver::Stop() {
  impl_->stop = true;
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (int fd : impl_->open_fds) wire::Socket::ShutdownFd(fd);
}

namespace {

struct ConnThread {
  std::thread thread;
  std::shared_ptr<std::atomic<bool>> done;
};

// Joins the threads that have finished.
void Reap(std::list<ConnThread>* threads) {
  for (auto it = threads->begin(); it != threads->end();) {
    if (it->done->load()) {
      it->thread.join();
      it = threads->erase(it);
    } else {
      ++it;
    }
  }
}

// Accepts connections, one thread each, until a COMMIT is answered, Stop(), or the idle limit.
Status AcceptUntilAnswered(Receiver::Impl& r, std::list<ConnThread>* threads) {
  auto last_open = std::chrono::steady_clock::now();
  while (!r.stop) {
    {
      std::lock_guard<std::mutex> lock(r.mu);
      if (r.outcome) break;
    }
    Reap(threads);
    const auto now = std::chrono::steady_clock::now();
    if (!threads->empty()) last_open = now;
    if (r.options.idle_timeout_s > 0 &&
        now - last_open > std::chrono::duration<double>(r.options.idle_timeout_s)) {
      char text[64];
      std::snprintf(text, sizeof text, "no sender for %g s", r.options.idle_timeout_s);
      return IoError(text);
    }
    StatusOr<wire::Socket> socket = r.listener.Accept(100, r.io_timeout_ms);
    if (!socket.ok()) return socket.status();
    if (socket->fd() < 0) continue;
    if (static_cast<int>(threads->size()) >= r.options.max_connections) {
      r.Log("connection from " + socket->peer() + " dropped: too many connections");
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(r.mu);
      r.open_fds.insert(socket->fd());
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    threads->push_back({std::thread([&r, s = std::move(*socket), done]() mutable {
                          Connection(&r, std::move(s)).Run();
                          *done = true;
                        }),
                        done});
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ReceiveReport> Receiver::ReceiveOne() {
  Impl& r = *impl_;
  const auto start = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.stats = ReceiveReport();
    r.stats.dir = r.options.out_dir;
    r.outcome.reset();
  }
  std::list<ConnThread> threads;
  const Status accepted = AcceptUntilAnswered(r, &threads);
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (int fd : r.open_fds) wire::Socket::ShutdownFd(fd);
  }
  for (ConnThread& t : threads) t.thread.join();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.outcome && !r.outcome->ok()) return *r.outcome;
  if (!r.outcome) return accepted.ok() ? FailedPrecondition("the receiver was stopped") : accepted;
  r.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r.stats;
}

}  // namespace paladin::transfer
