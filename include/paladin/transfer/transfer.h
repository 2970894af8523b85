// Image transfer: moves a finished checkpoint image directory to another machine over TCP, in
// several parallel streams of 8 MiB chunks, each chunk's XXH3-128 checked once as it arrives
// (against the manifest's own digest when the image has them at the transfer's chunk size),
// resumable after a dropped connection, authenticated with a shared token. Before the image
// appears (manifest.json is the last thing written) the receiver checks the sender's chunk list
// under an HMAC keyed by the token against what it verified on arrival, and the image's
// structure (ckpt::VerifyImage); it re-reads the files only for images whose manifest digests do
// not line up with the chunks (format version 1, or another chunk size).
// Wire format and on-disk state: docs/formats/transfer.md.
#ifndef PALADIN_TRANSFER_TRANSFER_H_
#define PALADIN_TRANSFER_TRANSFER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "paladin/base/status.h"

namespace paladin::transfer {

inline constexpr uint64_t kDefaultChunkBytes = uint64_t{8} << 20;

// Failures injected on purpose, for tests (PALADIN_TRANSFER_FAULT). Each fires at most once per
// SendImage call or per Receiver.
struct Fault {
  int drop_after_chunks = 0;  // sender: after this many DATA frames, close every connection
  int corrupt_chunk = 0;      // sender: flip one byte of the N-th DATA frame (not its hash)
  // sender: flip one byte of the N-th DATA frame and declare the digest of the flipped bytes, as
  // one who rewrites the stream would (its own chunk list keeps the true digest)
  int forge_chunk = 0;
  int alter_list = 0;          // sender: change the N-th digest of COMMIT's list after its HMAC
  bool refuse_commit = false;  // receiver: answer COMMIT with "destination refused"
};

// "" (no fault), "drop-after:N", "corrupt-chunk:N", "forge-chunk:N", "alter-list:N" or "refuse".
StatusOr<Fault> ParseFault(const std::string& spec);
// ParseFault of $PALADIN_TRANSFER_FAULT (unset: no fault).
StatusOr<Fault> FaultFromEnv();

// The shared secret: --token-file's content (trailing whitespace dropped), else $PALADIN_TOKEN.
// An empty or missing token is an error naming both sources.
StatusOr<std::string> LoadToken(const std::string& token_file);

// "host:port" or "[v6-address]:port".
StatusOr<std::pair<std::string, int>> ParseHostPort(const std::string& text);

struct SendOptions {
  std::string token;  // empty: the receiver refuses the connection
  int streams = 4;    // parallel connections sharing the chunk queue
  int retries = 5;    // reconnections allowed per stream without progress in between
  uint64_t chunk_bytes = kDefaultChunkBytes;
  int chunk_attempts = 3;           // resends of a chunk the receiver rejects, then the send fails
  double io_timeout_s = 30;         // any socket operation without progress this long fails
  double backoff_initial_s = 0.25;  // reconnection delay, doubling up to backoff_max_s
  double backoff_max_s = 8;
  Fault fault;
};

struct SendProgress {
  uint64_t bytes_total = 0;
  uint64_t bytes_done = 0;  // acknowledged by the receiver, or already there
  uint64_t bytes_sent = 0;  // chunk bytes put on the wire (resends included)
  double elapsed_s = 0;
  bool final = false;
};

struct SendReport {
  int files = 0;
  uint64_t bytes_total = 0;
  uint64_t bytes_sent = 0;
  int chunks_total = 0;
  int chunks_sent = 0;              // DATA frames written, resends included
  int chunks_rejected = 0;          // answered with a bad-hash error and resent
  int chunks_present_at_start = 0;  // the receiver had them before this call (an earlier send)
  int reconnects = 0;
  int chunks_present_at_reconnect = 0;  // most chunks a reconnection found already there
  // Bytes this call hashed: 0 when the manifest's digests serve as the chunks' (format version
  // 2 at the transfer's chunk size), else each chunk's bytes once.
  uint64_t bytes_hashed = 0;
  double seconds = 0;
  std::string receiver_message;  // the receiver's answer to COMMIT
};

// Sends the image in `dir` (it must have a valid manifest.json and files of the sizes it lists)
// to a receiver. Blocks until the receiver has verified the image, or fails. `progress` (may be
// empty) is called about once a second from the calling thread, and once at the end.
StatusOr<SendReport> SendImage(const std::string& dir, const std::string& host, int port,
                               const SendOptions& options,
                               const std::function<void(const SendProgress&)>& progress);

struct ReceiverOptions {
  std::string out_dir;  // created; the image lands here, partial data in out_dir/.partial
  std::string token;    // required
  std::string bind_address = "127.0.0.1";
  int port = 0;  // 0: an ephemeral port, see Receiver::port()
  double io_timeout_s = 30;
  int max_connections = 64;  // at once; more are closed at accept
  // ReceiveOne fails when no connection has been open for this long (0: it waits forever).
  double idle_timeout_s = 0;
  std::string local_criu_version;  // given to ckpt::VerifyImage ("" skips the CRIU check)
  // Commit fsyncs every file and the folder, so that an image kept for later survives a crash
  // of this machine. A move's receiver, whose image is restored at once while the source still
  // holds the job, turns it off: the disk's write rate would be the move's (the kernel writes
  // the files back within its own time).
  bool durable = true;
  Fault fault;
  // Events (connections, refusals, resumes, commits), one line each; called from connection
  // threads, one at a time. May be empty.
  std::function<void(const std::string&)> log;
};

struct ReceiveReport {
  std::string dir;
  int files = 0;
  uint64_t bytes = 0;
  int chunks_total = 0;
  int chunks_received = 0;           // accepted and written during this call
  int chunks_rejected = 0;           // bad hash, answered with an error
  int connections = 0;               // authenticated
  int refused = 0;                   // failed authentication
  int resumes = 0;                   // reconnections that found chunks already here
  int chunks_present_at_resume = 0;  // most chunks such a reconnection found here
  bool already_present = false;      // the same image was already finished in out_dir
  uint64_t bytes_received = 0;       // chunk bytes that arrived in DATA frames, rejected included
  // Bytes hashed during this call: each arriving chunk once; plus, at a commit, the whole image
  // when its manifest's digests do not line up with the chunks, and chunks found in a journal
  // left by an earlier receiver (checked again before they count).
  uint64_t bytes_hashed = 0;
  double seconds = 0;
};

// Accepts images into one directory. Not copyable. Thread safety: Stop() may be called from any
// thread; everything else from one thread.
class Receiver {
 public:
  // Binds and listens; fails if the address is taken or out_dir cannot be created.
  static StatusOr<std::unique_ptr<Receiver>> Listen(ReceiverOptions options);
  ~Receiver();
  Receiver(const Receiver&) = delete;
  Receiver& operator=(const Receiver&) = delete;

  int port() const;  // the port actually bound

  // Serves connections (several at once) until a sender's COMMIT has been answered: the image
  // verified and in out_dir, or the error the sender was told (the partial data stays for a
  // later resume). Connections that fail authentication do not end it. Blocks until then, until
  // Stop(), or until idle_timeout_s without a connection (both errors). Partial progress
  // survives across calls and across Receivers on the same out_dir (the journal).
  StatusOr<ReceiveReport> ReceiveOne();

  // Makes a running or later ReceiveOne return; closes open connections.
  void Stop();

  struct Impl;

 private:
  explicit Receiver(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace paladin::transfer

#endif  // PALADIN_TRANSFER_TRANSFER_H_
