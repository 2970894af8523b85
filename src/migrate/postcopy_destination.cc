// The destination's page puller for a post-copy move (PagePuller, migrate_internal.h): `criu
// lazy-pages` pulls the job's memory from the source's page server through the page relays
// (every frame sealed unless both sides allow plain), while the restored copy runs.
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "migrate_internal.h"

namespace paladin::migrate {

StatusOr<ckpt::Criu> PagePuller::Start(const ckpt::Criu& criu,
                                       const std::optional<StatusOr<ckpt::Criu>>& known,
                                       const Channel& channel, const std::string& relay_text,
                                       const std::string& image, bool allow_plain) {
  std::istringstream words(relay_text);
  std::string port_text;
  std::string nonce;
  std::string plain;
  std::string extra;
  words >> port_text >> nonce >> plain >> extra;
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  if (end == port_text.c_str() || *end != '\0' || port <= 0 || port > 65535 || nonce.size() != 64 ||
      nonce.find_first_not_of("0123456789abcdef") != std::string::npos ||
      !(plain.empty() || plain == "plain") || !extra.empty()) {
    return InvalidArgument(
        "RESTORE LAZY needs the source's page relay port, a nonce (64 hex digits) and at most "
        "'plain', got '" +
        relay_text.substr(0, 24) + "'");
  }
  const bool sealed = plain.empty();
  StatusOr<std::string> secret = PageRelaySecret(channel, nonce);
  if (!secret.ok()) return secret.status();
  StatusOr<ckpt::Criu> lazy = known ? *known : ckpt::LazyCriu(criu);
  if (!lazy.ok()) return lazy.status();
  sockaddr_storage peer{};
  socklen_t len = sizeof(peer);
  char host[INET6_ADDRSTRLEN] = {};
  if (getpeername(channel.fd(), reinterpret_cast<sockaddr*>(&peer), &len) != 0 ||
      getnameinfo(reinterpret_cast<sockaddr*>(&peer), len, host, sizeof(host), nullptr, 0,
                  NI_NUMERICHOST) != 0) {
    return IoError("cannot tell the source's address");
  }
  if (!sealed && !allow_plain) {
    return PermissionDenied(
        "the source sends its pages in clear (--lazy-plain); this destination takes plain page "
        "streams only with paladin receive --lazy-plain");
  }
  log_ = image + "/lazy-pages.log";
  StatusOr<std::pair<SocketEnd, SocketEnd>> ends = CriuSocketPair();
  if (!ends.ok()) return ends.status();
  PageRelayOptions relay_options;
  relay_options.seal = sealed;
  // For the tests: the link is cut once, a few MiB into the pages (docs/lazy_migration.md).
  if (FaultSet("cut:page-relay")) relay_options.cut_after = uint64_t{24} << 20;
  StatusOr<PageRelay> relay = PageRelay::Reach(
      host, static_cast<int>(port), std::move(ends->second), *secret, relay_options, progress_);
  if (!relay.ok()) return relay.status();
  relay_ = std::move(*relay);
  progress_("post-copy: pulling the job's memory from " + std::string(host) + ":" +
            std::to_string(port) + " through the page relays, " +
            (sealed ? "sealed" : "in clear (--lazy-plain)") + " (CRIU patches " +
            lazy->lazy_patches + ")");
  StatusOr<pid_t> puller = ckpt::StartLazyPages(*lazy, image, ends->first.fd());
  if (!puller.ok()) {
    relay_.Stop();
    return Status(puller.status().code(), "criu lazy-pages: " + puller.status().message());
  }
  pid_ = *puller;
  return lazy;
}

void PagePuller::Stop() {
  if (pid_ > 0) StopServing(pid_, "criu lazy-pages", log_, 10);
  relay_.Stop();
}

void PagePuller::Watch(int64_t copy) {
  watcher_ = std::thread([this, copy] {
    Status s = ckpt::ServingResult(pid_, "criu lazy-pages", log_, 7 * 24 * 3600.0);
    if (!s.ok()) {
      KillTree(copy);
      error_ = s.message();
      failed_.store(true);
      progress_("the page transfer failed; the restored copy was killed: " + s.message());
    }
    over_.store(true);
  });
}

void PagePuller::End(double wait_s) {
  if (!watcher_.joinable()) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  while (!over_.load() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!over_.load()) kill(-pid_, SIGKILL);
  watcher_.join();
}

}  // namespace paladin::migrate
