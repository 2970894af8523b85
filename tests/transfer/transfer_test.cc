// Image transfer over loopback: a Receiver in a thread of this process, SendImage in the test's
// thread, image-like directories written without CRIU.
#include "paladin/transfer/transfer.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "paladin/ckpt/image.h"

namespace paladin::transfer {
namespace {

namespace fs = std::filesystem;

constexpr const char* kToken = "s3cret-token";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string bytes(n, '\0');
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(&bytes[i], &v, 8);
  }
  return bytes;
}

// An image as a checkpoint would leave it, without CRIU: a large random pages file, small
// files, a subdirectory, an empty file, and the manifest (format `version`; version 2 digests
// per `chunk_bytes`).
void MakeImage(const std::string& dir, size_t big_bytes, uint64_t seed = 1,
               uint64_t chunk_bytes = ckpt::kManifestChunkBytes, int version = 2) {
  WriteBytes(dir + "/pages-1.img", RandomBytes(big_bytes, seed));
  WriteBytes(dir + "/core-1.img", RandomBytes(3000, seed + 1));
  WriteBytes(dir + "/logs/stdout.log", "step 1\nstep 2\n");
  WriteBytes(dir + "/empty.img", "");
  ckpt::Manifest m;
  m.name = "train";
  m.command = {"python3", "train.py"};
  m.arch = "x86_64";
  m.criu_version = "4.1.1";
  m.chunk_bytes = chunk_bytes;
  m.version = version;
  ASSERT_TRUE(ckpt::WriteManifest(dir, m).ok());
}

uint64_t ImageBytes(const std::string& dir) {
  uint64_t total = 0;
  const StatusOr<ckpt::Manifest> m = ckpt::ReadManifest(dir);
  for (const ckpt::ImageFile& f : m->files) total += f.size;
  return total;
}

// The received image verifies and every file, manifest included, is byte-identical.
void ExpectSameImage(const std::string& sent, const std::string& received) {
  StatusOr<ckpt::VerifyReport> verified = ckpt::VerifyImage(received, "");
  ASSERT_TRUE(verified.ok()) << verified.status().ToString();
  EXPECT_EQ(ReadAll(sent + "/manifest.json"), ReadAll(received + "/manifest.json"));
  StatusOr<ckpt::Manifest> m = ckpt::ReadManifest(sent);
  ASSERT_TRUE(m.ok());
  for (const ckpt::ImageFile& f : m->files) {
    EXPECT_TRUE(ReadAll(sent + "/" + f.path) == ReadAll(received + "/" + f.path)) << f.path;
  }
  EXPECT_FALSE(fs::exists(received + "/.partial"));
}

// A TCP socket listening on 127.0.0.1 at a port the system picks (*port); -1 on failure.
int ListenOnLoopback(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(fd, 16) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

// A Receiver serving one image in a thread.
class ReceiverThread {
 public:
  explicit ReceiverThread(const std::string& out, Fault fault = {}, bool durable = true) {
    ReceiverOptions options;
    options.out_dir = out;
    options.token = kToken;
    options.fault = fault;
    options.durable = durable;
    options.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      log_ += line + "\n";
    };
    StatusOr<std::unique_ptr<Receiver>> r = Receiver::Listen(std::move(options));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return;
    receiver_ = std::move(*r);
    thread_ = std::thread([this] { result_.emplace(receiver_->ReceiveOne()); });
  }
  ~ReceiverThread() { Wait(/*stop=*/true); }

  int port() const { return receiver_->port(); }
  // The receiver's outcome (stops it first when `stop`).
  const StatusOr<ReceiveReport>& Wait(bool stop = false) {
    if (stop && receiver_) receiver_->Stop();
    if (thread_.joinable()) thread_.join();
    if (!result_) result_.emplace(Internal("no receiver"));
    return *result_;
  }
  std::string log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }

 private:
  std::unique_ptr<Receiver> receiver_;
  std::thread thread_;
  std::optional<StatusOr<ReceiveReport>> result_;
  std::mutex mu_;
  std::string log_;
};

class TransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "paladin-transfer-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    src_ = root_ + "/src";
    out_ = root_ + "/out";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  static SendOptions Options() {
    SendOptions o;
    o.token = kToken;
    o.backoff_initial_s = 0.05;
    return o;
  }
  StatusOr<SendReport> Send(int port, const SendOptions& options) {
    return SendImage(src_, "127.0.0.1", port, options, {});
  }

  std::string root_;
  std::string src_;
  std::string out_;
};

TEST_F(TransferTest, PlainTransferArrivesVerifiedAndByteIdentical) {
  MakeImage(src_, 50u << 20);
  ReceiverThread receiver(out_);
  std::vector<SendProgress> progress;
  StatusOr<SendReport> sent = SendImage(src_, "127.0.0.1", receiver.port(), Options(),
                                        [&](const SendProgress& p) { progress.push_back(p); });
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  const StatusOr<ReceiveReport>& received = receiver.Wait();
  ASSERT_TRUE(received.ok()) << received.status().ToString();
  ExpectSameImage(src_, out_);
  // 50 MiB in 8 MiB chunks, plus one chunk for each small file (the empty one has none).
  EXPECT_EQ(sent->chunks_total, 7 + 2);
  EXPECT_EQ(sent->chunks_sent, sent->chunks_total);
  EXPECT_EQ(sent->reconnects, 0);
  EXPECT_EQ(sent->files, 4);
  EXPECT_EQ(received->chunks_received, sent->chunks_total);
  EXPECT_EQ(received->files, 4);
  EXPECT_NE(sent->receiver_message.find("verified 4 files"), std::string::npos);
  // Hashed once, at the receiver as it arrived: the sender took the manifest's digests, and
  // the commit read nothing again.
  EXPECT_EQ(sent->bytes_hashed, 0u);
  EXPECT_EQ(received->bytes_received, ImageBytes(src_));
  EXPECT_EQ(received->bytes_hashed, received->bytes_received);
  ASSERT_FALSE(progress.empty());
  EXPECT_TRUE(progress.back().final);
  EXPECT_EQ(progress.back().bytes_done, progress.back().bytes_total);
}

// A move's receiver (ReceiverOptions::durable off) commits without fsync; every check of the
// commit still holds: a corrupted chunk is refused on arrival and resent, and the image lands
// byte-identical and verified.
TEST_F(TransferTest, ANonDurableReceiverStillRefusesCorruptionAndCommitsAVerifiedImage) {
  MakeImage(src_, 20u << 20);
  ReceiverThread receiver(out_, {}, /*durable=*/false);
  SendOptions options = Options();
  options.fault.corrupt_chunk = 1;
  StatusOr<SendReport> sent = Send(receiver.port(), options);
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  const StatusOr<ReceiveReport>& received = receiver.Wait();
  ASSERT_TRUE(received.ok()) << received.status().ToString();
  EXPECT_EQ(received->chunks_rejected, 1);
  EXPECT_NE(sent->receiver_message.find("verified 4 files"), std::string::npos);
  ExpectSameImage(src_, out_);
}

TEST_F(TransferTest, DroppedConnectionsResumeWithOnlyTheMissingChunks) {
  MakeImage(src_, 50u << 20, 1, /*chunk_bytes=*/1u << 20);
  ReceiverThread receiver(out_);
  SendOptions options = Options();
  options.chunk_bytes = 1u << 20;
  options.streams = 2;
  options.fault.drop_after_chunks = 20;
  StatusOr<SendReport> sent = Send(receiver.port(), options);
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  const StatusOr<ReceiveReport>& received = receiver.Wait();
  ASSERT_TRUE(received.ok()) << received.status().ToString();
  ExpectSameImage(src_, out_);
  EXPECT_GE(sent->reconnects, 1);
  // The reconnections found what had arrived and sent only the rest: at most the chunks in
  // flight when the connections dropped (2 per stream) were sent twice.
  EXPECT_GE(sent->chunks_present_at_reconnect, 20 - 2 * options.streams);
  EXPECT_LE(sent->chunks_sent, sent->chunks_total + 2 * options.streams);
  EXPECT_GE(received->resumes, 1);
  EXPECT_GE(received->chunks_present_at_resume, 20 - 2 * options.streams);
  EXPECT_NE(receiver.log().find("(resume, attempt 1)"), std::string::npos) << receiver.log();
  // The completed chunks were not hashed again: not on resuming, not at the commit. Every byte
  // hashed at the receiver is a byte that arrived (the few sent twice included).
  EXPECT_EQ(received->bytes_hashed, received->bytes_received);
  EXPECT_LE(received->bytes_received, ImageBytes(src_) + 2 * options.streams * (1u << 20));
  EXPECT_EQ(sent->bytes_hashed, 0u);
}

TEST_F(TransferTest, CorruptedChunkIsRejectedAndResent) {
  MakeImage(src_, 50u << 20);
  ReceiverThread receiver(out_);
  SendOptions options = Options();
  options.chunk_bytes = 1u << 20;  // the manifest's digests are per 8 MiB: the declared one counts
  options.fault.corrupt_chunk = 3;
  StatusOr<SendReport> sent = Send(receiver.port(), options);
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  const StatusOr<ReceiveReport>& received = receiver.Wait();
  ASSERT_TRUE(received.ok()) << received.status().ToString();
  ExpectSameImage(src_, out_);
  EXPECT_EQ(sent->chunks_rejected, 1);
  EXPECT_EQ(sent->chunks_sent, sent->chunks_total + 1);
  EXPECT_EQ(received->chunks_rejected, 1);
  EXPECT_NE(receiver.log().find("rejected: XXH3-128 mismatch"), std::string::npos)
      << receiver.log();
}

// One who rewrites the stream flips a byte and declares the digest of what it sends: the
// manifest's own digest of that chunk refuses it on arrival.
TEST_F(TransferTest, ForgedChunkIsRefusedAgainstTheManifestOnArrival) {
  MakeImage(src_, 20u << 20);
  ReceiverThread receiver(out_);
  SendOptions options = Options();
  options.fault.forge_chunk = 2;
  StatusOr<SendReport> sent = Send(receiver.port(), options);
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  const StatusOr<ReceiveReport>& received = receiver.Wait();
  ASSERT_TRUE(received.ok()) << received.status().ToString();
  ExpectSameImage(src_, out_);
  EXPECT_EQ(received->chunks_rejected, 1);
  EXPECT_NE(receiver.log().find("rejected: XXH3-128 differs from the manifest's digest"),
            std::string::npos)
      << receiver.log();
}

// Without manifest digests at the transfer's chunk size the forged chunk passes its arrival
// check; the COMMIT's keyed chunk list (the sender's true digests) refuses it, naming the file
// and offset, commits nothing, and a resend replaces just that chunk.
TEST_F(TransferTest, ForgedChunkIsRefusedAtCommitByTheKeyedChunkList) {
  MakeImage(src_, 20u << 20);
  SendOptions options = Options();
  options.chunk_bytes = 1u << 20;  // the manifest's digests are per 8 MiB
  options.streams = 1;
  {
    ReceiverThread receiver(out_);
    SendOptions forged = options;
    forged.fault.forge_chunk = 3;  // one stream, in order: core-1.img, logs/stdout.log, pages
    StatusOr<SendReport> sent = Send(receiver.port(), forged);
    ASSERT_FALSE(sent.ok());
    EXPECT_NE(sent.status().message().find("does not match the sender's chunk list"),
              std::string::npos)
        << sent.status().ToString();
    EXPECT_NE(sent.status().message().find(" at offset "), std::string::npos);
    EXPECT_FALSE(receiver.Wait().ok());
    EXPECT_FALSE(fs::exists(out_ + "/manifest.json"));
  }
  ReceiverThread receiver(out_);
  StatusOr<SendReport> sent = Send(receiver.port(), options);
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  ASSERT_TRUE(receiver.Wait().ok());
  EXPECT_EQ(sent->chunks_sent, 1);
  ExpectSameImage(src_, out_);
}

// The chunk list changed after its HMAC, as by one without the token: refused, nothing
// committed; the chunks stay, and a resend commits without sending any again.
TEST_F(TransferTest, ChunkListAlteredWithoutTheKeyIsRefused) {
  MakeImage(src_, 20u << 20);
  {
    ReceiverThread receiver(out_);
    SendOptions options = Options();
    options.fault.alter_list = 2;
    StatusOr<SendReport> sent = Send(receiver.port(), options);
    ASSERT_FALSE(sent.ok());
    EXPECT_NE(sent.status().message().find("keyed digest (HMAC-SHA256) does not match"),
              std::string::npos)
        << sent.status().ToString();
    EXPECT_FALSE(receiver.Wait().ok());
    EXPECT_FALSE(fs::exists(out_ + "/manifest.json"));
    EXPECT_FALSE(fs::exists(out_ + "/pages-1.img"));
  }
  ReceiverThread receiver(out_);
  StatusOr<SendReport> sent = Send(receiver.port(), Options());
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  ASSERT_TRUE(receiver.Wait().ok());
  EXPECT_EQ(sent->chunks_sent, 0);
  ExpectSameImage(src_, out_);
}

// An image of format version 1 (SHA-256 per file) still goes: each chunk hashed once at both
// ends, and the commit verifies the files against the manifest's SHA-256.
TEST_F(TransferTest, VersionOneImageTransfersAndIsVerifiedAtCommit) {
  MakeImage(src_, 20u << 20, 1, ckpt::kManifestChunkBytes, /*version=*/1);
  ReceiverThread receiver(out_);
  StatusOr<SendReport> sent = Send(receiver.port(), Options());
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  const StatusOr<ReceiveReport>& received = receiver.Wait();
  ASSERT_TRUE(received.ok()) << received.status().ToString();
  ExpectSameImage(src_, out_);
  EXPECT_EQ(ckpt::ReadManifest(out_)->version, 1);
  EXPECT_EQ(sent->bytes_hashed, ImageBytes(src_));
  EXPECT_EQ(received->bytes_hashed, received->bytes_received + ImageBytes(src_));
}

// A receiver of protocol version 1 (SHA-256 chunks, an empty COMMIT): refused by name.
TEST_F(TransferTest, ReceiverOfAnotherProtocolVersionIsRefusedNamingBoth) {
  MakeImage(src_, 4096);
  int port = 0;
  const int fd = ListenOnLoopback(&port);
  ASSERT_GE(fd, 0);
  std::thread old_receiver([fd] {
    const int conn = accept(fd, nullptr, nullptr);
    // NONCE: length 1 + 4 + 16, type 1, version 1, a nonce.
    unsigned char frame[4 + 1 + 4 + 16] = {0, 0, 0, 21, 1, 0, 0, 0, 1};
    (void)!write(conn, frame, sizeof frame);
    char sink[64];
    while (read(conn, sink, sizeof sink) > 0) {
    }
    close(conn);
  });
  SendOptions options = Options();
  options.retries = 0;
  options.streams = 1;
  StatusOr<SendReport> sent = Send(port, options);
  old_receiver.join();
  close(fd);
  ASSERT_FALSE(sent.ok());
  EXPECT_NE(sent.status().message().find("the receiver speaks protocol version 1, this sender 3"),
            std::string::npos)
      << sent.status().ToString();
}

TEST_F(TransferTest, WrongOrMissingTokenIsRefused) {
  MakeImage(src_, 1u << 20);
  ReceiverThread receiver(out_);
  for (const std::string token : {"wrong-token", ""}) {
    SendOptions options = Options();
    options.token = token;
    const auto start = std::chrono::steady_clock::now();
    StatusOr<SendReport> sent = Send(receiver.port(), options);
    ASSERT_FALSE(sent.ok());
    EXPECT_NE(sent.status().message().find("authentication failed"), std::string::npos)
        << sent.status().ToString();
    // Refused at once, not retried.
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  }
  EXPECT_FALSE(receiver.Wait(/*stop=*/true).ok());
  EXPECT_NE(receiver.log().find("refused: authentication failed"), std::string::npos);
  EXPECT_FALSE(fs::exists(out_ + "/manifest.json"));
  EXPECT_FALSE(fs::exists(out_ + "/.partial"));
}

TEST_F(TransferTest, RefusingDestinationFailsTheSendThenAResendCompletesFromTheJournal) {
  MakeImage(src_, 20u << 20);
  {
    ReceiverThread receiver(out_, Fault{.refuse_commit = true});
    StatusOr<SendReport> sent = Send(receiver.port(), Options());
    ASSERT_FALSE(sent.ok());
    EXPECT_NE(sent.status().message().find("destination refused"), std::string::npos)
        << sent.status().ToString();
    EXPECT_FALSE(receiver.Wait().ok());
    EXPECT_FALSE(fs::exists(out_ + "/manifest.json"));
    EXPECT_TRUE(fs::exists(out_ + "/.partial/journal"));
  }
  // Another receiver on the same directory has every chunk already.
  ReceiverThread receiver(out_);
  StatusOr<SendReport> sent = Send(receiver.port(), Options());
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  ASSERT_TRUE(receiver.Wait().ok());
  EXPECT_EQ(sent->chunks_sent, 0);
  EXPECT_EQ(sent->chunks_present_at_start, sent->chunks_total);
  ExpectSameImage(src_, out_);
}

// The source file changed after its manifest was written: each try of that chunk is refused
// against the manifest's digest, and the send fails naming the file and offset.
TEST_F(TransferTest, ImageAlteredAfterItsManifestIsRefusedOnArrivalAndLeavesNoManifest) {
  MakeImage(src_, 20u << 20);
  {
    std::fstream f(src_ + "/pages-1.img", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((8u << 20) + 12345);
    f.put('\x42');
  }
  ReceiverThread receiver(out_);
  StatusOr<SendReport> sent = Send(receiver.port(), Options());
  ASSERT_FALSE(sent.ok());
  EXPECT_NE(sent.status().message().find("rejected pages-1.img at offset 8388608 4 times: "
                                         "XXH3-128 differs from the manifest's digest"),
            std::string::npos)
      << sent.status().ToString();
  EXPECT_FALSE(receiver.Wait(/*stop=*/true).ok());
  EXPECT_FALSE(fs::exists(out_ + "/manifest.json"));
  EXPECT_FALSE(fs::exists(out_ + "/pages-1.img"));
}

// The same with an image of format version 1: caught by the commit's SHA-256 of each file.
TEST_F(TransferTest, VersionOneImageAlteredAfterItsManifestFailsVerificationAtCommit) {
  MakeImage(src_, 20u << 20, 1, ckpt::kManifestChunkBytes, /*version=*/1);
  {
    std::fstream f(src_ + "/pages-1.img", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12345);
    f.put('\x42');
  }
  ReceiverThread receiver(out_);
  StatusOr<SendReport> sent = Send(receiver.port(), Options());
  ASSERT_FALSE(sent.ok());
  EXPECT_NE(sent.status().message().find("pages-1.img: SHA-256"), std::string::npos)
      << sent.status().ToString();
  const StatusOr<ReceiveReport>& received = receiver.Wait();
  ASSERT_FALSE(received.ok());
  EXPECT_NE(received.status().message().find("does not match"), std::string::npos);
  EXPECT_FALSE(fs::exists(out_ + "/manifest.json"));
  EXPECT_FALSE(fs::exists(out_ + "/pages-1.img"));
}

TEST_F(TransferTest, ReceiverRestartedOnTheSameDirectoryResumesFromItsJournal) {
  MakeImage(src_, 20u << 20);
  {
    ReceiverThread receiver(out_);
    SendOptions options = Options();
    options.chunk_bytes = 1u << 20;
    options.streams = 1;
    options.retries = 0;
    options.fault.drop_after_chunks = 8;
    ASSERT_FALSE(Send(receiver.port(), options).ok());
    receiver.Wait(/*stop=*/true);
  }
  ReceiverThread receiver(out_);
  SendOptions options = Options();
  options.chunk_bytes = 1u << 20;
  StatusOr<SendReport> sent = Send(receiver.port(), options);
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  ASSERT_TRUE(receiver.Wait().ok());
  ExpectSameImage(src_, out_);
  EXPECT_GE(sent->chunks_present_at_start, 8 - 2);
  EXPECT_EQ(sent->chunks_sent, sent->chunks_total - sent->chunks_present_at_start);
}

TEST_F(TransferTest, SameImageAgainIsAlreadyThereAndAnotherImageIsRefused) {
  MakeImage(src_, 1u << 20);
  {
    ReceiverThread receiver(out_);
    ASSERT_TRUE(Send(receiver.port(), Options()).ok());
  }
  {
    ReceiverThread receiver(out_);
    StatusOr<SendReport> again = Send(receiver.port(), Options());
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->chunks_sent, 0);
    ASSERT_TRUE(receiver.Wait().ok());
    EXPECT_TRUE(receiver.Wait()->already_present);
  }
  fs::remove_all(src_);
  MakeImage(src_, 1u << 20, /*seed=*/7);
  ReceiverThread receiver(out_);
  StatusOr<SendReport> other = Send(receiver.port(), Options());
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("already holds another image"), std::string::npos)
      << other.status().ToString();
  receiver.Wait(/*stop=*/true);
}

TEST_F(TransferTest, SenderRefusesUnfinishedOrInconsistentImages) {
  WriteBytes(src_ + "/pages-1.img", "abc");
  StatusOr<SendReport> sent = Send(1, Options());
  ASSERT_FALSE(sent.ok());
  EXPECT_NE(sent.status().message().find("not a finished image"), std::string::npos);
  MakeImage(src_, 4096);
  fs::resize_file(src_ + "/pages-1.img", 100);
  sent = Send(1, Options());
  ASSERT_FALSE(sent.ok());
  EXPECT_NE(sent.status().message().find("pages-1.img is 100 bytes"), std::string::npos)
      << sent.status().ToString();
}

// A TCP relay between the sender and the receiver that records every byte both ways, as one on
// the network would, and can flip one byte the sender sent (`flip_at`: its offset in all that
// the sender sent through the relay, counted over connections).
class Relay {
 public:
  Relay(int to_port, uint64_t flip_at = UINT64_MAX) : to_port_(to_port), flip_at_(flip_at) {
    listen_fd_ = ListenOnLoopback(&port_);
    EXPECT_GE(listen_fd_, 0);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~Relay() {
    stop_ = true;
    acceptor_.join();
    for (std::thread& t : pumps_) t.join();
    close(listen_fd_);
  }
  int port() const { return port_; }
  // Everything that crossed the relay, both ways.
  std::string seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  bool flipped() {
    std::lock_guard<std::mutex> lock(mu_);
    return flipped_;
  }

 private:
  void Accept() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 50) != 1) continue;
      const int from = accept(listen_fd_, nullptr, nullptr);
      if (from < 0) continue;
      const int to = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(to_port_));
      if (connect(to, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        close(from);
        close(to);
        continue;
      }
      pumps_.emplace_back([this, from, to] { Pump(from, to); });
    }
  }
  // Copies both ways until either side closes.
  void Pump(int sender, int receiver) {
    std::vector<char> buf(1 << 16);
    pollfd p[2] = {{sender, POLLIN, 0}, {receiver, POLLIN, 0}};
    while (!stop_) {
      if (poll(p, 2, 50) <= 0) continue;
      bool done = false;
      for (int i = 0; i < 2; ++i) {
        if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const ssize_t n = read(p[i].fd, buf.data(), buf.size());
        if (n <= 0) {
          done = true;
          break;
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (i == 0) {
            if (!flipped_ && flip_at_ >= from_sender_ && flip_at_ < from_sender_ + n) {
              buf[flip_at_ - from_sender_] ^= 0x01;
              flipped_ = true;
            }
            from_sender_ += static_cast<uint64_t>(n);
          }
          seen_.append(buf.data(), static_cast<size_t>(n));
        }
        const int out = i == 0 ? receiver : sender;
        for (ssize_t off = 0; off < n;) {
          const ssize_t w = write(out, buf.data() + off, static_cast<size_t>(n - off));
          if (w <= 0) {
            done = true;
            break;
          }
          off += w;
        }
      }
      if (done) break;
    }
    close(sender);
    close(receiver);
  }

  int to_port_;
  uint64_t flip_at_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> pumps_;
  std::mutex mu_;
  std::string seen_;
  uint64_t from_sender_ = 0;
  bool flipped_ = false;
};

// Nothing of the image crosses the network readable: not a file's bytes, not the manifest's
// text (its file names, the job's command), not the token; and the image arrives whole.
TEST_F(TransferTest, OneOnTheNetworkReadsNothingOfTheImage) {
  MakeImage(src_, 4u << 20);
  std::string text;
  for (int i = 0; text.size() < (1u << 20); ++i) {
    text += "api_key=paladin-secret-" + std::to_string(i) + "\n";
  }
  WriteBytes(src_ + "/pages-2.img", text);
  ckpt::Manifest m;
  m.name = "train";
  m.command = {"python3", "train-with-secret-args.py"};
  m.arch = "x86_64";
  m.criu_version = "4.1.1";
  ASSERT_TRUE(ckpt::WriteManifest(src_, m).ok());
  ReceiverThread receiver(out_);
  Relay relay(receiver.port());
  StatusOr<SendReport> sent = Send(relay.port(), Options());
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  ASSERT_TRUE(receiver.Wait().ok());
  ExpectSameImage(src_, out_);
  const std::string seen = relay.seen();
  EXPECT_GT(seen.size(), size_t{5} << 20);
  for (const std::string plain :
       {"paladin-secret-", "train-with-secret-args", "pages-2.img", "manifest", kToken}) {
    EXPECT_EQ(seen.find(plain), std::string::npos) << plain << " crossed the network readable";
  }
  // The random pages file's bytes do not appear either (a 64-byte run of them).
  EXPECT_EQ(seen.find(ReadAll(src_ + "/pages-1.img").substr(1 << 20, 64)), std::string::npos);
}

// One byte altered on the way, inside a chunk: the frame does not open, nothing of it is
// written, the connection ends and the sender resumes on another; the image arrives whole.
TEST_F(TransferTest, AFrameAlteredOnTheWayIsDroppedAndItsChunkResent) {
  MakeImage(src_, 20u << 20);
  ReceiverThread receiver(out_);
  Relay relay(receiver.port(), /*flip_at=*/(3u << 20) + 77);
  SendOptions options = Options();
  options.streams = 1;
  StatusOr<SendReport> sent = Send(relay.port(), options);
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  ASSERT_TRUE(receiver.Wait().ok());
  EXPECT_TRUE(relay.flipped());
  EXPECT_GE(sent->reconnects, 1);
  EXPECT_NE(receiver.log().find("did not open under this connection's key"), std::string::npos)
      << receiver.log();
  ExpectSameImage(src_, out_);
}

// A receiver that does not hold the token (one listening in the receiver's place) cannot answer
// READY: the sender stops there, having sent nothing but its proof, and does not try again.
TEST_F(TransferTest, AReceiverWithoutTheTokenGetsNothingOfTheImage) {
  MakeImage(src_, 1u << 20);
  int port = 0;
  const int fd = ListenOnLoopback(&port);
  ASSERT_GE(fd, 0);
  std::string got;
  int connections = 0;
  std::thread impostor([fd, &got, &connections] {
    pollfd p{fd, POLLIN, 0};
    while (poll(&p, 1, 1500) == 1) {
      const int conn = accept(fd, nullptr, nullptr);
      ++connections;
      // NONCE of this protocol version, then READY with a made-up proof.
      unsigned char nonce[4 + 1 + 4 + 16] = {0, 0, 0, 21, 1, 0, 0, 0, 3};
      (void)!write(conn, nonce, sizeof nonce);
      unsigned char ready[4 + 1 + 32] = {0, 0, 0, 33, 3};
      (void)!write(conn, ready, sizeof ready);
      char buf[4096];
      ssize_t n = 0;
      while ((n = read(conn, buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
      close(conn);
    }
  });
  SendOptions options = Options();
  options.streams = 1;
  StatusOr<SendReport> sent = Send(port, options);
  impostor.join();
  close(fd);
  ASSERT_FALSE(sent.ok());
  EXPECT_NE(sent.status().message().find("did not prove it holds the token"), std::string::npos)
      << sent.status().ToString();
  EXPECT_EQ(connections, 1);
  // AUTH only: its header, the sender's nonce and its proof.
  EXPECT_EQ(got.size(), 4u + 1 + 16 + 32);
}

TEST_F(TransferTest, UnreachableOrSilentReceiverFailsInBoundedTime) {
  MakeImage(src_, 4096);
  // A listening socket that never answers.
  int port = 0;
  const int fd = ListenOnLoopback(&port);
  ASSERT_GE(fd, 0);
  SendOptions options = Options();
  options.io_timeout_s = 0.5;
  options.retries = 1;
  const auto start = std::chrono::steady_clock::now();
  StatusOr<SendReport> sent = Send(port, options);
  ASSERT_FALSE(sent.ok());
  EXPECT_NE(sent.status().message().find("timed out"), std::string::npos)
      << sent.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  close(fd);
  // Nothing listens there any more: connection refused, retried, then an error.
  sent = Send(port, options);
  ASSERT_FALSE(sent.ok());
  EXPECT_EQ(sent.status().code(), StatusCode::kIoError);
}

TEST_F(TransferTest, IdleReceiverGivesUp) {
  ReceiverOptions options;
  options.out_dir = out_;
  options.token = kToken;
  options.idle_timeout_s = 0.3;
  StatusOr<std::unique_ptr<Receiver>> receiver = Receiver::Listen(options);
  ASSERT_TRUE(receiver.ok()) << receiver.status().ToString();
  StatusOr<ReceiveReport> received = (*receiver)->ReceiveOne();
  ASSERT_FALSE(received.ok());
  EXPECT_NE(received.status().message().find("no sender for 0.3 s"), std::string::npos)
      << received.status().ToString();
}

TEST(TransferOptions, ParsesFaultsAndAddresses) {
  EXPECT_EQ(ParseFault("drop-after:3")->drop_after_chunks, 3);
  EXPECT_EQ(ParseFault("corrupt-chunk:2")->corrupt_chunk, 2);
  EXPECT_EQ(ParseFault("forge-chunk:4")->forge_chunk, 4);
  EXPECT_EQ(ParseFault("alter-list:5")->alter_list, 5);
  EXPECT_TRUE(ParseFault("refuse")->refuse_commit);
  EXPECT_TRUE(ParseFault("").ok());
  for (const char* bad : {"drop-after", "drop-after:0", "corrupt-chunk:x", "explode"}) {
    EXPECT_FALSE(ParseFault(bad).ok()) << bad;
  }
  EXPECT_EQ(*ParseHostPort("node7:9400"), std::make_pair(std::string("node7"), 9400));
  EXPECT_EQ(*ParseHostPort("[::1]:9400"), std::make_pair(std::string("::1"), 9400));
  for (const char* bad : {"node7", "node7:", ":9400", "node7:70000", "::1:9400"}) {
    EXPECT_FALSE(ParseHostPort(bad).ok()) << bad;
  }
}

// Sha256File hashes small files in one pass and large ones (more than 16 MiB) with a reader
// thread: both give the digest of the whole content, whatever the size's remainder.
TEST(Sha256FileTest, EverySizeHashesItsWholeContent) {
  const fs::path dir = fs::temp_directory_path() / ("paladin-sha-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::mt19937_64 rng(7);
  for (size_t size : {size_t{0}, size_t{1}, size_t{1} << 20, (size_t{16} << 20) + 1,
                      (size_t{24} << 20), (size_t{40} << 20) + 3}) {
    std::string content(size, '\0');
    for (char& c : content) c = static_cast<char>(rng());
    const std::string path = (dir / ("f" + std::to_string(size))).string();
    std::ofstream(path, std::ios::binary).write(content.data(), static_cast<std::streamsize>(size));
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_Digest(content.data(), content.size(), digest, &len, EVP_sha256(), nullptr);
    std::string expected;
    char byte[3];
    for (unsigned int i = 0; i < len; ++i) {
      std::snprintf(byte, sizeof byte, "%02x", digest[i]);
      expected += byte;
    }
    StatusOr<std::string> hash = ckpt::Sha256File(path);
    ASSERT_TRUE(hash.ok()) << hash.status().ToString();
    EXPECT_EQ(*hash, expected) << size << " bytes";
  }
  EXPECT_FALSE(ckpt::Sha256File((dir / "missing").string()).ok());
  fs::remove_all(dir);
}

// Version 2 digests: a chunk's streamed digest (the manifest's) equals the one-shot one (the
// transfer's), whatever the block sizes; a flipped byte is named by file and offset; version 1
// manifests still verify.
TEST(ImageDigestsTest, ChunkDigestsMatchTheTransfersAndNameTheOffsetOfADifference) {
  const fs::path dir = fs::temp_directory_path() / ("paladin-xxh-" + std::to_string(getpid()));
  fs::remove_all(dir);
  const std::string bytes = RandomBytes((size_t{20} << 20) + 77, 3);
  WriteBytes((dir / "pages-1.img").string(), bytes);
  ckpt::Manifest m;
  m.arch = "x86_64";
  m.chunk_bytes = 1u << 20;
  ASSERT_TRUE(ckpt::WriteManifest(dir.string(), m).ok());
  StatusOr<ckpt::Manifest> read = ckpt::ReadManifest(dir.string());
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(read->version, 2);
  ASSERT_EQ(read->files[0].xxh3.size(), 21u);
  for (size_t i = 0; i < 21; ++i) {
    const size_t n = std::min<size_t>(1u << 20, bytes.size() - (i << 20));
    const ckpt::ChunkDigest d =
        ckpt::Xxh3Chunk(reinterpret_cast<const uint8_t*>(bytes.data()) + (i << 20), n);
    EXPECT_EQ(read->files[0].xxh3[i], ckpt::DigestHex(d.data(), d.size())) << i;
  }
  StatusOr<ckpt::VerifyReport> ok = ckpt::VerifyImage(dir.string(), "");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->bytes_hashed, bytes.size());
  {
    std::fstream f(dir / "pages-1.img", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((5u << 20) + 9);
    f.put(static_cast<char>(bytes[(5u << 20) + 9] ^ 1));
  }
  StatusOr<ckpt::VerifyReport> bad = ckpt::VerifyImage(dir.string(), "");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("pages-1.img at offset 5242880: XXH3-128"),
            std::string::npos)
      << bad.status().ToString();
  // Structure only: the contents are the caller's to have checked.
  EXPECT_TRUE(ckpt::VerifyImage(dir.string(), "", {}, /*check_contents=*/false).ok());
  m.version = 1;
  ASSERT_TRUE(ckpt::WriteManifest(dir.string(), m).ok());
  read = ckpt::ReadManifest(dir.string());
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->version, 1);
  EXPECT_EQ(read->files[0].sha256.size(), 64u);
  EXPECT_TRUE(ckpt::VerifyImage(dir.string(), "").ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace paladin::transfer
