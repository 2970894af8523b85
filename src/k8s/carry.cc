#include "paladin/k8s/carry.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "node_ops.h"
#include "paladin/ckpt/image.h"
#include "paladin/k8s/api.h"
#include "paladin/k8s/recover.h"
#include "paladin/migrate/control.h"
#include "paladin/transfer/transfer.h"

namespace paladin::k8s {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kIncomingPrefix[] = ".carry-";
// How long an image's transfer may take to start once its port is given.
constexpr double kSenderStartS = 60;
// The sender's wait for the destination's answer to CARRY (another image may be arriving) and
// for its verdict on the image.
constexpr double kCarryAnswerS = 900;
constexpr size_t kMaxConnections = 16;
constexpr double kProofWithinS = 5;
// How long a sender tries to connect: a mover that is not listening is asked again by the next
// pass of the sender's own mover (MoverOptions::finish_within_s), not waited for here.
constexpr double kConnectS = 0.5;
// What a pod's uid is made of (and a periodic checkpoint's name after "recover-").
constexpr char kUidChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-";
// Room kept free in the destination's folder beyond the image.
constexpr uint64_t kSpareBytes = uint64_t{64} << 20;

// A file name inside an image's folder: the runtime's marks are "CONTAINER.gpu-restored".
bool PlainFileName(const std::string& name) {
  if (name.empty() || name.size() > 200 || name[0] == '.') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

std::vector<std::string> Words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

uint64_t FolderBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (fs::is_regular_file(it->symlink_status(ec))) total += it->file_size(ec);
  }
  return total;
}

}  // namespace

namespace {

// A carry's transfer token, from the channel's secret and the salt the server sends in the clear
// (random, one per carry): who records the line learns the salt only.
std::string TransferTokenUnder(const std::string& token, const std::string& salt) {
  return migrate::HmacSha256Hex(token, "paladin-k8s-carry-transfer\n" + salt);
}

}  // namespace

std::string CarryToken(const std::string& key) {
  return migrate::HmacSha256Hex(key, "paladin-k8s-image-carry-v1");
}

StatusOr<std::string> ReadMoveKey(const std::string& path) { return detail::ReadKey(path); }

bool CarriableImageName(const std::string& name) {
  if (name.size() > 120) return false;
  if (name.rfind("move-", 0) == 0 && name.size() > 5) {
    return name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-", 5) == std::string::npos;
  }
  // A periodic checkpoint's: recover-UID-MS (CheckpointImageName).
  if (name.rfind("recover-", 0) == 0 && name.size() > 8) {
    return name.find_first_not_of(kUidChars, 8) == std::string::npos;
  }
  return false;
}

struct CarryServer::Impl {
  CarryServerOptions options;
  std::string token;
  migrate::Listener listener;
  std::atomic<bool> stop{false};
  std::mutex log_mu;
  std::mutex carry_mu;  // one image at a time
  // Connection threads, each with its socket (shut down by Stop) and whether it has ended.
  struct Connection {
    std::thread thread;
    int fd = -1;
    std::shared_ptr<std::atomic<bool>> ended;
  };
  std::mutex threads_mu;
  std::list<Connection> connections;
  transfer::Receiver* receiving = nullptr;  // the transfer in flight, under threads_mu
  std::thread acceptor;
  int port = 0;

  explicit Impl(migrate::Listener l) : listener(std::move(l)) {}

  void Log(const std::string& line) {
    if (!options.log) return;
    std::lock_guard<std::mutex> lock(log_mu);
    options.log(line);
  }

  void Accept() {
    while (!stop.load()) {
      StatusOr<migrate::Channel> c = listener.Accept(0.2);
      if (!c.ok()) continue;
      std::lock_guard<std::mutex> lock(threads_mu);
      for (auto it = connections.begin(); it != connections.end();) {
        if (!it->ended->load()) {
          ++it;
          continue;
        }
        it->thread.join();
        it = connections.erase(it);
      }
      if (connections.size() >= kMaxConnections) continue;  // closed: a peer flooding the port
      auto ended = std::make_shared<std::atomic<bool>>(false);
      const int fd = c->fd();
      connections.push_back({std::thread([this, ended, ch = std::move(*c)]() mutable {
                               Serve(ch);
                               // Closed under the lock: Stop never shuts down a closed fd.
                               std::lock_guard<std::mutex> done(threads_mu);
                               ch = migrate::Channel();
                               ended->store(true);
                             }),
                             fd, ended});
    }
  }

  void Serve(migrate::Channel& ch) {
    // A challenge of this connection's own: what crosses the network proves the key without
    // being of use to one who records it. A sender answers at once; one that does not holds
    // one of the few connections served.
    const Status proved = migrate::CheckProof(&ch, token, kProofWithinS);
    if (proved.code() == StatusCode::kPermissionDenied) {
      Log("carry: a connection refused: authentication failed");
    }
    if (!proved.ok()) return;
    StatusOr<std::string> line = ch.Receive(options.io_timeout_s);
    if (!line.ok()) return;
    const std::vector<std::string> w = Words(*line);
    if (w.size() == 3 && w[0] == "MARK") {
      if (!CarriableImageName(w[1]) || !PlainFileName(w[2])) {
        (void)ch.Send("ERR MARK: expected a move's image and a file name");
        return;
      }
      std::error_code ec;
      const fs::file_status st = fs::symlink_status(fs::path(options.images) / w[1] / w[2], ec);
      (void)ch.Send(fs::is_regular_file(st) ? "OK yes" : "OK no");
      return;
    }
    if (w.size() == 3 && w[0] == "CARRY") {
      Carry(ch, w[1], w[2]);
      return;
    }
    if ((w.size() == 2 || w.size() == 3) && w[0] == "PRUNE") {
      Prune(ch, w[1], w.size() == 3 ? w[2] : "");
      return;
    }
    (void)ch.Send("ERR expected CARRY IMAGE BYTES, MARK IMAGE FILE or PRUNE NODE UIDS");
  }

  // The periodic checkpoints of `node` that are no longer of use here: of pods not in `uids`
  // (comma-separated), all; of the others, all but the newest (PruneCheckpoints).
  void Prune(migrate::Channel& ch, const std::string& node, const std::string& uids) {
    if (!CheckNodeName(node).ok()) {
      (void)ch.Send("ERR PRUNE: '" + node.substr(0, 64) + "' is not a node name");
      return;
    }
    std::set<std::string> present;
    std::istringstream in(uids);
    for (std::string uid; std::getline(in, uid, ',');) {
      if (uid.empty() || uid.size() > 64 || uid.find_first_not_of(kUidChars) != std::string::npos) {
        (void)ch.Send("ERR PRUNE: '" + uid.substr(0, 64) + "' is not a pod uid");
        return;
      }
      present.insert(uid);
    }
    std::lock_guard<std::mutex> one(carry_mu);
    const int removed = PruneCheckpoints(options.images, node, present);
    (void)ch.Send("OK " + std::to_string(removed));
    if (removed > 0) {
      Log("carry: " + std::to_string(removed) + " older checkpoint image(s) of node " + node +
          " removed");
    }
  }

  void Carry(migrate::Channel& ch, const std::string& name, const std::string& bytes_text) {
    if (!CarriableImageName(name)) {
      (void)ch.Send("ERR CARRY: '" + name.substr(0, 64) +
                    "' is not a move's or a checkpoint's image name");
      Log("carry: refused the image name '" + name.substr(0, 64) + "'");
      return;
    }
    uint64_t bytes = 0;
    const bool digits = !bytes_text.empty() && bytes_text.size() <= 19 &&
                        bytes_text.find_first_not_of("0123456789") == std::string::npos;
    if (!digits) {
      (void)ch.Send("ERR CARRY: '" + bytes_text.substr(0, 32) + "' is not a byte count");
      return;
    }
    bytes = std::stoull(bytes_text);
    struct statvfs vfs {};
    if (statvfs(options.images.c_str(), &vfs) == 0) {
      const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
      if (free_bytes < bytes + kSpareBytes) {
        (void)ch.Send("ERR node's image folder " + options.images + " has " +
                      std::to_string(free_bytes) + " bytes free, the image needs " +
                      std::to_string(bytes) + " (and 64 MiB to spare)");
        Log("carry: " + name + " refused: no room");
        return;
      }
    }
    std::unique_lock<std::mutex> one(carry_mu);
    const std::string final_dir = options.images + "/" + name;
    std::error_code ec;
    if (fs::is_regular_file(fs::symlink_status(final_dir + "/manifest.json", ec))) {
      (void)ch.Send("OK present");
      Log("carry: " + name + " is here already");
      return;
    }
    if (fs::exists(fs::symlink_status(final_dir, ec))) {
      (void)ch.Send("ERR " + final_dir + " exists and is no carried image");
      return;
    }
    transfer::ReceiverOptions ro;
    ro.out_dir = options.images + "/" + kIncomingPrefix + name;
    // This image's token only (of no use once it has arrived), never on the line: the sender
    // makes the same one from the salt.
    StatusOr<std::string> salt = migrate::RandomHex(32);
    if (!salt.ok()) {
      (void)ch.Send("ERR " + salt.status().message());
      return;
    }
    ro.token = TransferTokenUnder(token, *salt);
    ro.bind_address = options.bind_address;
    ro.port = options.port == 0 ? 0 : options.port + 1;  // 0: ephemeral, as the command port
    ro.io_timeout_s = options.io_timeout_s;
    ro.idle_timeout_s = kSenderStartS;
    // The image is restored at once, while the source keeps its own copy until the replacement
    // runs: no fsync (the kernel writes it back in its own time).
    ro.durable = false;
    StatusOr<std::unique_ptr<transfer::Receiver>> receiver = transfer::Receiver::Listen(ro);
    if (!receiver.ok()) {
      (void)ch.Send("ERR " + receiver.status().message());
      return;
    }
    if (!ch.Send("OK " + std::to_string((*receiver)->port()) + " " + *salt).ok()) return;
    const Clock::time_point t0 = Clock::now();
    {
      std::lock_guard<std::mutex> lock(threads_mu);
      if (stop.load()) return;
      receiving = receiver->get();
    }
    StatusOr<transfer::ReceiveReport> got = (*receiver)->ReceiveOne();
    {
      std::lock_guard<std::mutex> lock(threads_mu);
      receiving = nullptr;
    }
    receiver->reset();
    if (!got.ok()) {
      (void)ch.Send("ERR the image did not arrive whole: " + got.status().message());
      Log("carry: " + name + " failed: " + got.status().message());
      return;
    }
    StatusOr<ckpt::Manifest> m = ckpt::ReadManifest(ro.out_dir);
    if (!m.ok() || m->name != name) {
      fs::remove_all(ro.out_dir, ec);
      (void)ch.Send("ERR the image's manifest names '" + (m.ok() ? m->name.substr(0, 64) : "") +
                    "', not " + name + ": refused");
      Log("carry: " + name + " refused: its manifest names another image");
      return;
    }
    fs::rename(ro.out_dir, final_dir, ec);
    if (ec) {
      (void)ch.Send("ERR cannot put the image in place at " + final_dir + ": " + ec.message());
      return;
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    (void)ch.Send("OK carried " + std::to_string(got->files) + " " + std::to_string(got->bytes));
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.2f", s);
    Log("carry: " + name + " received into " + final_dir + " (" + std::to_string(got->files) +
        " files, " + std::to_string(got->bytes) + " bytes, " + secs + " s)");
  }
};

StatusOr<std::unique_ptr<CarryServer>> CarryServer::Listen(CarryServerOptions options) {
  if (options.images.empty()) return InvalidArgument("the carry needs this node's image folder");
  if (options.key.empty()) return InvalidArgument("the carry needs the cluster's move key");
  std::error_code ec;
  fs::create_directories(options.images, ec);
  if (ec) return IoError("cannot create " + options.images + ": " + ec.message());
  for (const fs::directory_entry& e : fs::directory_iterator(options.images, ec)) {
    if (e.path().filename().string().rfind(kIncomingPrefix, 0) == 0) {
      std::error_code rm;
      fs::remove_all(e.path(), rm);
    }
  }
  StatusOr<migrate::Listener> l = migrate::Listener::Listen(options.bind_address, options.port);
  if (!l.ok()) return l.status();
  auto impl = std::make_unique<Impl>(std::move(*l));
  impl->port = impl->listener.port();
  impl->token = CarryToken(options.key);
  impl->options = std::move(options);
  Impl* raw = impl.get();
  impl->acceptor = std::thread([raw] { raw->Accept(); });
  return std::unique_ptr<CarryServer>(new CarryServer(std::move(impl)));
}

CarryServer::CarryServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CarryServer::~CarryServer() { Stop(); }

int CarryServer::port() const { return impl_->port; }

void CarryServer::Stop() {
  impl_->stop.store(true);
  if (impl_->acceptor.joinable()) impl_->acceptor.join();
  std::list<Impl::Connection> connections;
  {
    std::lock_guard<std::mutex> lock(impl_->threads_mu);
    // Each connection's next read or write fails at once; a transfer in flight ends.
    for (Impl::Connection& c : impl_->connections) {
      if (!c.ended->load()) shutdown(c.fd, SHUT_RDWR);
    }
    if (impl_->receiving != nullptr) impl_->receiving->Stop();
    connections.swap(impl_->connections);
  }
  for (Impl::Connection& c : connections) c.thread.join();
}

namespace {

// Connected and authenticated, trying for `connect_s` (a move that finds no mover is tried again
// by the next pass of its own mover: see MoverOptions::finish_within_s).
StatusOr<migrate::Channel> Open(const std::string& host, int port, const std::string& key,
                                double connect_s) {
  StatusOr<migrate::Channel> ch = migrate::Channel::Connect(host, port, connect_s);
  if (!ch.ok()) {
    return Unavailable("the destination node's mover does not answer at " + host + ":" +
                       std::to_string(port) + " (" + ch.status().message() + ")");
  }
  const Status proved = migrate::ProveToken(&*ch, CarryToken(key), 30);
  const std::string where = host + ":" + std::to_string(port);
  if (proved.code() == StatusCode::kPermissionDenied) {
    return PermissionDenied("the destination node's mover at " + where + " refused this node: " +
                            proved.message() + " (the nodes' move keys differ?)");
  }
  if (!proved.ok()) {
    return Unavailable("the destination node's mover at " + where +
                       " did not speak the carry's protocol: " + proved.message());
  }
  return ch;
}

}  // namespace

StatusOr<CarryReport> CarryImageTo(const std::string& dir, const std::string& host, int port,
                                   const std::string& key,
                                   const std::function<void(const std::string&)>& progress) {
  const Clock::time_point t0 = Clock::now();
  const std::string name = fs::path(dir).filename().string();
  if (!CarriableImageName(name)) {
    return InvalidArgument("'" + name + "' is not a move's or a checkpoint's image");
  }
  std::error_code ec;
  if (!fs::exists(dir + "/manifest.json", ec)) {
    ckpt::Manifest m;
    m.name = name;
    m.created_unix = static_cast<int64_t>(std::time(nullptr));
    utsname u{};
    if (uname(&u) == 0) {
      m.hostname = u.nodename;
      m.kernel = u.release;
      m.arch = u.machine;
    }
    if (Status s = ckpt::WriteManifest(dir, m); !s.ok()) return s;
  }
  const uint64_t bytes = FolderBytes(dir);
  StatusOr<migrate::Channel> ch = Open(host, port, key, kConnectS);
  if (!ch.ok()) return ch.status();
  StatusOr<std::string> answer =
      ch->Call("CARRY " + name + " " + std::to_string(bytes), kCarryAnswerS);
  if (!answer.ok()) {
    return Status(answer.status().code(),
                  "the destination refused the image: " + answer.status().message());
  }
  CarryReport report;
  if (*answer == "present") {
    report.present = true;
    report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return report;
  }
  const std::vector<std::string> where = Words(*answer);
  int tport = 0;
  try {
    if (where.size() == 2) tport = std::stoi(where[0]);
  } catch (const std::exception&) {
  }
  if (tport <= 0 || tport > 65535 || where[1].size() != 64) {
    return Internal("the destination answered CARRY with '" + answer->substr(0, 64) + "'");
  }
  transfer::SendOptions so;
  so.token = TransferTokenUnder(CarryToken(key), where[1]);
  StatusOr<transfer::SendReport> sent =
      transfer::SendImage(dir, host, tport, so, [&](const transfer::SendProgress& p) {
        if (!progress || p.final) return;
        progress("carried " + std::to_string(p.bytes_done >> 20) + " of " +
                 std::to_string(p.bytes_total >> 20) + " MiB");
      });
  if (!sent.ok())
    return Status(sent.status().code(), "carrying the image: " + sent.status().message());
  StatusOr<std::string> verdict = ch->Receive(kCarryAnswerS);
  if (!verdict.ok())
    return Unavailable("the destination said nothing of the image: " + verdict.status().message());
  if (verdict->rfind("OK carried", 0) != 0) {
    return Internal("the destination did not take the image: " + verdict->substr(0, 300));
  }
  report.files = sent->files;
  report.bytes = sent->bytes_total;
  report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return report;
}

StatusOr<int> PruneCarried(const std::string& host, int port, const std::string& key,
                           const std::string& node, const std::set<std::string>& present_uids) {
  StatusOr<migrate::Channel> ch = Open(host, port, key, kConnectS);
  if (!ch.ok()) return ch.status();
  std::string uids;
  for (const std::string& u : present_uids) uids += (uids.empty() ? "" : ",") + u;
  StatusOr<std::string> answer =
      ch->Call("PRUNE " + node + (uids.empty() ? "" : " " + uids), kCarryAnswerS);
  if (!answer.ok()) return answer.status();
  try {
    return std::stoi(*answer);
  } catch (const std::exception&) {
    return Internal("the destination answered PRUNE with '" + answer->substr(0, 64) + "'");
  }
}

StatusOr<bool> CarriedImageHas(const std::string& host, int port, const std::string& key,
                               const std::string& image, const std::string& file) {
  StatusOr<migrate::Channel> ch = Open(host, port, key, kConnectS);
  if (!ch.ok()) return ch.status();
  StatusOr<std::string> answer = ch->Call("MARK " + image + " " + file, 30);
  if (!answer.ok()) return answer.status();
  return *answer == "yes";
}

}  // namespace paladin::k8s
