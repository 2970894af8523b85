// Image transfer over loopback: a Receiver in a thread of this process, SendImage in the test's
// thread, image-like directories written without CRIU.
#include "paladin/transfer/transfer.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <sys/socket.h>
#include <unistd.h>

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
// files, a subdirectory, an empty file, and the manifest.
void MakeImage(const std::string& dir, size_t big_bytes, uint64_t seed = 1) {
  WriteBytes(dir + "/pages-1.img", RandomBytes(big_bytes, seed));
  WriteBytes(dir + "/core-1.img", RandomBytes(3000, seed + 1));
  WriteBytes(dir + "/logs/stdout.log", "step 1\nstep 2\n");
  WriteBytes(dir + "/empty.img", "");
  ckpt::Manifest m;
  m.name = "train";
  m.command = {"python3", "train.py"};
  m.arch = "x86_64";
  m.criu_version = "4.1.1";
  ASSERT_TRUE(ckpt::WriteManifest(dir, m).ok());
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

// A Receiver serving one image in a thread.
class ReceiverThread {
 public:
  explicit ReceiverThread(const std::string& out, Fault fault = {}) {
    ReceiverOptions options;
    options.out_dir = out;
    options.token = kToken;
    options.fault = fault;
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
  ASSERT_FALSE(progress.empty());
  EXPECT_TRUE(progress.back().final);
  EXPECT_EQ(progress.back().bytes_done, progress.back().bytes_total);
}

TEST_F(TransferTest, DroppedConnectionsResumeWithOnlyTheMissingChunks) {
  MakeImage(src_, 50u << 20);
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
}

TEST_F(TransferTest, CorruptedChunkIsRejectedAndResent) {
  MakeImage(src_, 50u << 20);
  ReceiverThread receiver(out_);
  SendOptions options = Options();
  options.fault.corrupt_chunk = 3;
  StatusOr<SendReport> sent = Send(receiver.port(), options);
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  const StatusOr<ReceiveReport>& received = receiver.Wait();
  ASSERT_TRUE(received.ok()) << received.status().ToString();
  ExpectSameImage(src_, out_);
  EXPECT_EQ(sent->chunks_rejected, 1);
  EXPECT_EQ(sent->chunks_sent, sent->chunks_total + 1);
  EXPECT_EQ(received->chunks_rejected, 1);
  EXPECT_NE(receiver.log().find("rejected: SHA-256 mismatch"), std::string::npos);
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

TEST_F(TransferTest, ImageAlteredAfterItsManifestFailsVerificationAndLeavesNoManifest) {
  MakeImage(src_, 20u << 20);
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

TEST_F(TransferTest, UnreachableOrSilentReceiverFailsInBoundedTime) {
  MakeImage(src_, 4096);
  // A listening socket that never answers.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 8), 0);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  SendOptions options = Options();
  options.io_timeout_s = 0.5;
  options.retries = 1;
  const auto start = std::chrono::steady_clock::now();
  StatusOr<SendReport> sent = Send(ntohs(addr.sin_port), options);
  ASSERT_FALSE(sent.ok());
  EXPECT_NE(sent.status().message().find("timed out"), std::string::npos)
      << sent.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  close(fd);
  // Nothing listens there any more: connection refused, retried, then an error.
  sent = Send(ntohs(addr.sin_port), options);
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

}  // namespace
}  // namespace paladin::transfer
