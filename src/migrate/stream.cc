#include "stream.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <vector>

#include "migrate_internal.h"
#include "paladin/base/process.h"
#include "paladin/ckpt/subprocess.h"
#include "paladin/quota/region.h"

namespace paladin::migrate {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
// An announced size beyond this is not a job's memory but a malformed or hostile request.
constexpr uint64_t kMaxAnnouncedBytes = uint64_t{1} << 50;
constexpr const char* kTmpfs = "/dev/shm";

// A "Key:   N kB" line of a /proc file, in bytes; 0 when absent.
uint64_t ProcKiloBytes(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      return std::strtoull(line.c_str() + key.size() + 1, nullptr, 10) * 1024;
    }
  }
  return 0;
}

// Whether the pages fit on tmpfs: the tmpfs has room for them, and the host's available memory
// for them twice over (the tmpfs copy and the restored job hold them at once until the restore
// ends), with a margin.
bool RoomInMemory(uint64_t bytes) {
  struct statvfs shm {};
  if (statvfs(kTmpfs, &shm) != 0) return false;
  const uint64_t free_shm = static_cast<uint64_t>(shm.f_bavail) * shm.f_frsize;
  const uint64_t available = ProcKiloBytes("/proc/meminfo", "MemAvailable");
  return free_shm >= bytes + bytes / 8 + 64 * kMiB && available >= 2 * bytes + 512 * kMiB;
}

// Mode 0700, owned by this process (owned_dir.h): the page folders of receivers killed mid-move
// go first, since they cannot remove their own.
StatusOr<OwnedDir> PrivateDir(const std::string& parent) {
  (void)RemoveOrphanedDirs(parent, "paladin-pages.");
  StatusOr<OwnedDir> dir = OwnedDir::MakeUnique(parent, "paladin-pages");
  if (!dir.ok()) {
    return IoError("cannot make a directory for the pages under " + parent + ": " +
                   dir.status().message());
  }
  return dir;
}

// FEATURES' answer: the moves this side can take. Every receiver takes a streaming source; a
// post-copy one needs the patched CRIU here (`known`: DestinationOptions::lazy_criu).
std::string MoveModesHere(const ckpt::Criu& criu,
                          const std::optional<StatusOr<ckpt::Criu>>& known) {
  const bool lazy = known ? known->ok() : ckpt::LazyCriu(criu).ok();
  return lazy ? "stream post-copy" : "stream";
}

uint64_t PageBytes(const std::string& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().rfind("pages-", 0) == 0) bytes += e.file_size(ec);
  }
  return bytes;
}

}  // namespace

void PageStream::Apply(ckpt::CheckpointOptions* checkpoint) const {
  checkpoint->page_server_socket = criu.fd();
}

Status PageStream::Finish(double timeout_s) {
  criu.Close();
  Status ended = relay.Wait(timeout_s);
  relay.Stop();
  return ended;
}

uint64_t JobMemoryBytes(const ckpt::JobRecord& job) {
  uint64_t bytes = 0;
  for (uint32_t pid : base::ProcessTree(static_cast<uint32_t>(job.pid))) {
    bytes += ProcKiloBytes("/proc/" + std::to_string(pid) + "/status", "VmRSS");
  }
  return bytes + JobDeviceBytes(job);
}

uint64_t JobDeviceBytes(const ckpt::JobRecord& job) {
  if (job.region.empty()) return 0;
  std::string error;
  std::unique_ptr<quota::Region> region = quota::Region::Open(job.region, &error);
  if (region == nullptr) return 0;
  // The job's processes write this file: a count beyond any GPU's is taken as that bound.
  constexpr uint64_t kMostPerGpu = uint64_t{1} << 40;
  uint64_t bytes = 0;
  for (int slot = 0; slot < region->device_count(); ++slot) {
    bytes += std::min(region->used(slot), kMostPerGpu);
  }
  return bytes;
}

StatusOr<PageStream> OpenPageStream(const std::string& host, int command_port,
                                    const std::string& token, const std::string& id, uint64_t bytes,
                                    const ckpt::Progress& progress) {
  PageStream stream;
  stream.host = host;
  StatusOr<Channel> channel = Channel::Connect(host, command_port, 60);
  if (!channel.ok()) return channel.status();
  stream.channel = std::move(*channel);
  PALADIN_RETURN_IF_ERROR(ProveToken(&stream.channel, token, 30));
  StatusOr<std::string> nonce = RandomHex(32);
  if (!nonce.ok()) return nonce.status();
  StatusOr<std::string> secret = PageRelaySecret(stream.channel, *nonce);
  if (!secret.ok()) return secret.status();
  StatusOr<std::string> said =
      stream.channel.Call(kPageServerCommand + id + " " + std::to_string(bytes) + " " + *nonce, 60);
  if (!said.ok()) {
    // An ERR answer (Channel::Call's kInternal) is a refusal: the destination waits for another
    // connection, so the move may go by image.
    return Status(said.status().code() == StatusCode::kInternal ? StatusCode::kFailedPrecondition
                                                                : said.status().code(),
                  "the destination started no page server: " + said.status().message());
  }
  std::istringstream answer(*said);
  std::string extra;
  if (!(answer >> stream.port >> stream.kept_in) || (answer >> extra) || stream.port <= 0 ||
      stream.port > 65535 || (stream.kept_in != "memory" && stream.kept_in != "disk")) {
    return InvalidArgument("PAGE-SERVER answer: expected '<port> <memory|disk>'");
  }
  StatusOr<std::pair<SocketEnd, SocketEnd>> ends = CriuSocketPair();
  if (!ends.ok()) return ends.status();
  PageRelayOptions relay_options;
  relay_options.seal = true;
  StatusOr<PageRelay> relay = PageRelay::Reach(host, stream.port, std::move(ends->second), *secret,
                                               relay_options, progress);
  if (!relay.ok()) {
    return Status(relay.status().code(),
                  "the destination's page relay: " + relay.status().message());
  }
  stream.relay = std::move(*relay);
  stream.criu = std::move(ends->first);
  progress(
      "streaming the job's memory to the destination's page server through the page relay "
      "on " +
      host + ":" + std::to_string(stream.port) + ", sealed (kept in " + stream.kept_in + " there)");
  return stream;
}

StatusOr<std::vector<std::string>> PeerMoveModes(const std::string& host, int port,
                                                 const std::string& token) {
  StatusOr<Channel> channel = Channel::Connect(host, port + 1, 60);
  if (!channel.ok()) return channel.status();
  const Status proved = ProveToken(&*channel, token, 30);
  StatusOr<std::string> said =
      proved.ok() ? channel->Call(kFeaturesCommand, 30) : StatusOr<std::string>(proved);
  if (!said.ok()) {
    return Status(said.status().code(),
                  "the destination did not say which moves it takes: " + said.status().message());
  }
  std::vector<std::string> modes;
  std::istringstream words(*said);
  for (std::string mode; words >> mode && modes.size() < 16;) modes.push_back(mode);
  return modes;
}

StatusOr<std::unique_ptr<PageSink>> PageSink::Start(const ckpt::Criu& criu, const Channel& channel,
                                                    const std::string& args,
                                                    const std::string& bind_address, int port,
                                                    const std::string& disk_parent,
                                                    const ckpt::Progress& progress) {
  std::istringstream in(args);
  std::string id;
  std::string bytes_text;
  std::string nonce;
  std::string extra;
  if (!(in >> id >> bytes_text >> nonce) || (in >> extra) || id.size() > 200 ||
      bytes_text.empty() || bytes_text.size() > 16 ||
      bytes_text.find_first_not_of("0123456789") != std::string::npos || nonce.size() != 64 ||
      nonce.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return InvalidArgument("PAGE-SERVER needs '<migration id> <bytes> <nonce: 64 hex digits>'");
  }
  std::unique_ptr<PageSink> sink(new PageSink());
  sink->bytes_ = std::strtoull(bytes_text.c_str(), nullptr, 10);
  if (sink->bytes_ > kMaxAnnouncedBytes) return InvalidArgument("PAGE-SERVER: too many bytes");
  StatusOr<std::string> secret = PageRelaySecret(channel, nonce);
  if (!secret.ok()) return secret.status();
  StatusOr<Listener> links = Listener::Listen(bind_address, port);
  if (!links.ok()) {
    return Status(links.status().code(), "the page relay: " + links.status().message());
  }
  StatusOr<std::pair<SocketEnd, SocketEnd>> ends = CriuSocketPair();
  if (!ends.ok()) return ends.status();
  const bool memory = RoomInMemory(sink->bytes_);
  StatusOr<OwnedDir> dir = PrivateDir(memory ? std::string(kTmpfs) : disk_parent);
  if (!dir.ok()) return dir.status();
  sink->dir_ = dir->path();
  sink->owner_ = std::move(*dir);
  sink->kept_in_ = memory ? "memory" : "disk";
  sink->port_ = port;
  sink->log_ = disk_parent + "/page-server.log";
  const std::vector<std::string> argv = {criu.path,  "page-server", "-D",
                                         sink->dir_, "--ps-socket", std::to_string(ckpt::kPassedFd),
                                         "-o",       sink->log_,    "-v2"};
  StatusOr<pid_t> server = ckpt::StartServing(criu, argv, sink->log_, 30, ends->first.fd());
  ends->first.Close();  // the page server's now
  if (!server.ok()) {
    return Status(server.status().code(), "criu page-server: " + server.status().message());
  }
  sink->server_ = *server;
  PageRelayOptions relay_options;
  relay_options.seal = true;
  // For the tests: the link is cut once, a few MiB into the pages (docs/lazy_migration.md).
  if (FaultSet("cut:page-relay")) relay_options.cut_after = uint64_t{24} << 20;
  StatusOr<PageRelay> relay = PageRelay::Serve(std::move(*links), std::move(ends->second), *secret,
                                               relay_options, progress);
  if (!relay.ok()) return relay.status();
  sink->relay_ = std::move(*relay);
  progress("page server for migration " + id + ", its relay on " + bind_address + ":" +
           std::to_string(port) + " (sealed), " + std::to_string(sink->bytes_ / kMiB) +
           " MiB announced, kept in " + sink->kept_in_ + " (" + sink->dir_ + ")");
  if (FaultSet("drop:page-stream") || FaultSet("crash:dst-during-stream")) {
    // For the tests, once half the memory has arrived: the page stream cut, or this process
    // killed (a fleet agent dying while the dump streams).
    PageSink* self = sink.get();
    const pid_t serving = sink->server_;
    const std::string pages = sink->dir_;
    sink->fault_ = std::thread([self, serving, pages, progress] {
      const uint64_t at = std::max<uint64_t>(self->bytes_ / 2, 16 * kMiB);
      while (!self->over_.load()) {
        if (PageBytes(pages) >= at) {
          progress("fault injected: half the memory has arrived");
          CrashPoint("dst-during-stream");
          kill(-serving, SIGKILL);  // not yet waited for: Finish and Stop end this thread first
          progress("fault injected: the page server killed mid-stream");
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  return sink;
}

PageSink::~PageSink() { Remove(); }

std::string PageSink::Answer() const { return std::to_string(port_) + " " + kept_in_; }

void PageSink::Stop() {
  over_.store(true);
  if (fault_.joinable()) fault_.join();
  if (server_ > 0) {
    kill(-server_, SIGKILL);
    (void)ckpt::ServingResult(server_, "criu page-server", log_, 5);
    server_ = 0;
  }
  relay_.Stop();
}

void PageSink::Remove(const std::string& keep_logs_in) {
  Stop();
  if (dir_.empty()) return;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    if (!keep_logs_in.empty() && e.path().extension() == ".log") {
      fs::copy_file(e.path(), fs::path(keep_logs_in) / e.path().filename(),
                    fs::copy_options::overwrite_existing, ec);
    }
  }
  fs::remove_all(dir_, ec);
  dir_.clear();
  owner_ = OwnedDir();
}

StatusOr<std::string> PageSink::Finish(const std::string& image, double timeout_s) {
  if (server_ <= 0) return FailedPrecondition("the page server is gone");
  over_.store(true);
  if (fault_.joinable()) fault_.join();
  Status served = ckpt::ServingResult(server_, "criu page-server", log_, timeout_s);
  server_ = 0;
  if (!served.ok()) return served;
  // The image's files beside the pages: regular files and folders only, none replacing a page
  // file (the transfer verified them against the manifest; links are not followed).
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(image, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::path rel = fs::relative(it->path(), image, ec);
    const fs::file_status s = it->symlink_status(ec);
    if (fs::is_directory(s)) {
      fs::create_directories(fs::path(dir_) / rel, ec);
    } else if (fs::is_regular_file(s)) {
      fs::copy_file(it->path(), fs::path(dir_) / rel, fs::copy_options::none, ec);
    }
    if (ec) return IoError("cannot put " + rel.string() + " beside the pages: " + ec.message());
  }
  if (ec) return IoError("cannot read the image " + image + ": " + ec.message());
  return dir_;
}

StatusOr<Arrival> AwaitSource(const ckpt::Criu& criu, const DestinationOptions& options,
                              Listener* commands, transfer::Receiver* receiver,
                              const ckpt::Progress& progress) {
  const auto cancelled = [&] { return options.cancel != nullptr && options.cancel->load(); };
  std::atomic<bool> image_over{false};
  StatusOr<transfer::ReceiveReport> received = Unavailable("no image yet");
  std::thread receiving([&] {
    received = receiver->ReceiveOne();
    image_over.store(true);
  });
  struct Joiner {
    transfer::Receiver* receiver;
    std::thread* thread;
    std::atomic<bool>* over;
    ~Joiner() {
      if (!over->load()) receiver->Stop();
      thread->join();
    }
  } joiner{receiver, &receiving, &image_over};
  bool image_seen = false;
  std::chrono::steady_clock::time_point image_at;
  auto image_arrived = [&]() -> Status {
    if (image_seen) return Status::Ok();
    image_seen = true;
    image_at = std::chrono::steady_clock::now();
    if (!received.ok()) return received.status();
    progress("received and verified " + std::to_string(received->files) + " files");
    CrashPoint("dst-after-image");
    return Status::Ok();
  };

  Arrival arrival;
  StatusOr<Channel> channel = IoError("no command connection from the source within 120 s");
  StatusOr<std::string> begin = Unavailable("no command yet");
  const std::string page_server = kPageServerCommand;
  // Until a connection goes on to its move: one that asked FEATURES, or whose PAGE-SERVER was
  // refused (the source may move by image instead), is followed by another.
  for (;;) {
    if (cancelled()) {
      return FailedPrecondition(image_over.load()
                                    ? "the move was called off before the source connected"
                                    : "the move was called off before its image arrived");
    }
    if (image_over.load()) PALADIN_RETURN_IF_ERROR(image_arrived());
    if (image_seen && Since(image_at) > 120) {
      return IoError("no command connection from the source within 120 s of its image");
    }
    channel = commands->Accept(0.2);
    if (!channel.ok()) continue;
    const Status proved = CheckProof(&*channel, options.token, 30);
    if (proved.code() == StatusCode::kPermissionDenied) {
      return FailedPrecondition("a command connection failed authentication");
    }
    PALADIN_RETURN_IF_ERROR(proved);
    begin = channel->Receive(30);
    if (!begin.ok()) return begin.status();
    if (*begin == kFeaturesCommand) {
      (void)channel->Send("OK " + MoveModesHere(criu, options.lazy_criu));
      continue;
    }
    if (begin->rfind(page_server, 0) != 0) break;
    StatusOr<std::unique_ptr<PageSink>> sink =
        // The same CRIU as the source's dump where it is installed (ckpt::StreamCriu).
        PageSink::Start(ckpt::StreamCriu(criu, options.lazy_criu), *channel,
                        begin->substr(page_server.size()), options.bind_address, options.port + 2,
                        options.dir, progress);
    if (!sink.ok()) {
      progress("no page server for the source (" + sink.status().message() +
               "); waiting for it to move by image");
      (void)channel->Send("ERR " + sink.status().message());
      continue;
    }
    arrival.sink = std::move(*sink);
    PALADIN_RETURN_IF_ERROR(channel->Send("OK " + arrival.sink->Answer()));
    // The source dumps into the page server and sends the rest of the image; BEGIN follows.
    begin = ReceiveUnlessCancelled(&*channel, options.cancel, options.command_timeout_s,
                                   "the move was called off while the source streamed its memory");
    if (!begin.ok()) {
      return Status(begin.status().code(), "the source did not go on after streaming its memory (" +
                                               begin.status().message() + ")");
    }
    break;
  }
  if (begin->rfind("BEGIN ", 0) != 0 || begin->size() <= 6 || begin->size() > 200) {
    (void)channel->Send("ERR expected BEGIN <migration id>");
    return InvalidArgument("the source did not name its migration");
  }
  // The source names its migration once its image is committed here.
  const auto named = std::chrono::steady_clock::now();
  while (!image_over.load() && !cancelled() && Since(named) < 120) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!image_over.load()) {
    (void)channel->Send("ERR no image arrived");
    return FailedPrecondition("the source named its migration but its image did not arrive");
  }
  PALADIN_RETURN_IF_ERROR(image_arrived());
  arrival.channel = std::move(*channel);
  arrival.id = begin->substr(6);
  arrival.received = *received;
  return arrival;
}

}  // namespace paladin::migrate
