// Streaming pre-copy (`paladin migrate --mode stream`): the dump sends the job's memory straight
// to the destination's `criu page-server`, which keeps it on tmpfs when the destination has room
// (else on its disk); the memory is never written to a file at the source. Each CRIU speaks to a
// page relay of Paladin's over a socket pair (--ps-socket); the relays carry the stream between
// the hosts, every frame sealed (AES-128-GCM) under keys of the link derived from a secret both
// sides take from the command channel, and make a cut link again (page_relay.h). The page server
// is asked for on the command channel before the dump (PAGE-SERVER, docs/formats/migrate.md);
// the rest of the image, a few MiB, goes through the transfer as a plain move's whole image does.
// The seal authenticates every byte of the page stream as it arrives; nothing hashes it again.
// docs/lazy_migration.md, "Streaming pre-copy".
#ifndef PALADIN_MIGRATE_STREAM_H_
#define PALADIN_MIGRATE_STREAM_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "page_relay.h"
#include "paladin/base/status.h"
#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/criu.h"
#include "paladin/ckpt/workload.h"
#include "paladin/migrate/control.h"
#include "paladin/migrate/migrate.h"
#include "paladin/migrate/owned_dir.h"
#include "paladin/transfer/transfer.h"

namespace paladin::migrate {

// The command line that asks the destination for a page server.
inline constexpr const char* kPageServerCommand = "PAGE-SERVER ";
// The command line that asks the destination which moves it takes (PeerMoveModes).
inline constexpr const char* kFeaturesCommand = "FEATURES";

// The source's side: the command channel, authenticated (the token proved, BEGIN not yet), the
// page server the destination started for this move, and this side's relay, linked to the
// destination's.
struct PageStream {
  Channel channel;
  std::string host;
  int port = 0;
  std::string kept_in;  // where the destination keeps the pages: "memory" or "disk"
  PageRelay relay;
  SocketEnd criu;  // the dump's end of the socket pair to the relay

  // The dump's options for this stream.
  void Apply(ckpt::CheckpointOptions* checkpoint) const;
  // Once the dump has ended: its end of the socket pair goes, and the relay ends (at most
  // timeout_s): Ok once both relays settled the stream.
  Status Finish(double timeout_s);
};

// What the job's memory takes: the resident set of its processes, and the device memory its
// quota region counts (JobDeviceBytes), which the driver's checkpoint puts in host memory before
// the dump. What the destination must have room for.
uint64_t JobMemoryBytes(const ckpt::JobRecord& job);

// The GPU memory the job holds by its quota region's count (0 without a region), each GPU's
// count taken as at most 1 TiB (the job's processes write that file).
uint64_t JobDeviceBytes(const ckpt::JobRecord& job);

// Connects to the destination's command port host:command_port, authenticates with `token`,
// asks for a page server for migration `id`, announcing `bytes` of memory, and links this side's
// relay to the destination's. Blocks for at most a minute. FailedPrecondition: the destination
// refused (ERR) and waits for another connection.
StatusOr<PageStream> OpenPageStream(const std::string& host, int command_port,
                                    const std::string& token, const std::string& id, uint64_t bytes,
                                    const ckpt::Progress& progress);

// The destination's side: `criu page-server` (this process's child, in a process group of its
// own) writing the pages into a private directory, on tmpfs (/dev/shm) when it and the host's
// available memory have room for the announced bytes twice over (the tmpfs copy and the restored
// job), else under `disk_parent`; its relay listens for the source's. Not copyable; the
// destructor stops the server and the relay and removes the directory.
class PageSink {
 public:
  // Handles PAGE-SERVER's arguments ("<id> <bytes> <nonce>", untrusted) on `channel`: starts
  // `criu`'s page server (ckpt::StreamCriu's choice) on a socket pair with this side's relay,
  // which listens on bind_address:port for the source's relay proving the secret both sides
  // derive from `channel` and the nonce.
  static StatusOr<std::unique_ptr<PageSink>> Start(const ckpt::Criu& criu, const Channel& channel,
                                                   const std::string& args,
                                                   const std::string& bind_address, int port,
                                                   const std::string& disk_parent,
                                                   const ckpt::Progress& progress);
  ~PageSink();
  PageSink(const PageSink&) = delete;
  PageSink& operator=(const PageSink&) = delete;

  // PAGE-SERVER's answer: "<port> <memory|disk>".
  std::string Answer() const;
  // How many times the page stream's link was made again.
  int resumes() const { return relay_.resumes(); }

  // Once the source has sent the image: waits (at most timeout_s) for the page server, which
  // ends when the dump closes its connection, and fails unless it ended well; then copies the
  // image's files (a few MiB, verified by the transfer) beside the pages. Returns the directory
  // to restore from.
  StatusOr<std::string> Finish(const std::string& image, double timeout_s);

  // The pages are in the restored processes (or will never be): the directory goes, its CRIU
  // logs copied into `keep_logs_in` first when that is given.
  void Remove(const std::string& keep_logs_in = "");

 private:
  PageSink() = default;
  void Stop();

  PageRelay relay_;
  OwnedDir owner_;  // dir_'s lock
  std::string dir_;
  std::string log_;
  std::string kept_in_;
  int port_ = 0;
  pid_t server_ = 0;
  uint64_t bytes_ = 0;
  std::thread fault_;  // PALADIN_MIGRATE_FAULT=drop:page-stream
  std::atomic<bool> over_{false};
};

// The destination's opening of a move: the source, authenticated, has named its migration
// (BEGIN) and its image has arrived, verified.
struct Arrival {
  Channel channel;
  std::string id;
  std::unique_ptr<PageSink> sink;  // a streaming pre-copy's pages; null for other moves
  transfer::ReceiveReport received;
};

// Waits for a source: receives the image on its own thread while the command port takes the
// source's connection, so that a streaming source can ask for its page server (PAGE-SERVER,
// after the token's proof) before it dumps and sends the image; other sources connect once the
// image is here. Honours options.cancel until the image is here and BEGIN said; stops the receiver
// and its thread on every way out.
StatusOr<Arrival> AwaitSource(const ckpt::Criu& criu, const DestinationOptions& options,
                              Listener* commands, transfer::Receiver* receiver,
                              const ckpt::Progress& progress);

}  // namespace paladin::migrate

#endif  // PALADIN_MIGRATE_STREAM_H_
