// The destination's page puller for a post-copy move (PagePuller, migrate_internal.h): `criu
// lazy-pages` pulls the job's memory from the source's page server, over TLS with keys made for
// the move unless both sides allow plain TCP, while the restored copy runs.
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "migrate_internal.h"

namespace paladin::migrate {

Status PagePuller::AcceptTls(const std::string& id, const std::string& certificate) {
  if (tls_.has_peer()) return FailedPrecondition("PAGE-TLS was already given");
  StatusOr<PageTls> made = PageTls::Create(id + " destination");
  if (!made.ok()) return made.status();
  PALADIN_RETURN_IF_ERROR(made->TrustPeer(certificate));
  tls_ = std::move(*made);
  return Status::Ok();
}

StatusOr<ckpt::Criu> PagePuller::Start(const ckpt::Criu& criu,
                                       const std::optional<StatusOr<ckpt::Criu>>& known,
                                       const Channel& channel, const std::string& relay_text,
                                       const std::string& image, bool allow_plain) {
  const size_t space = relay_text.find(' ');
  const std::string port_text = relay_text.substr(0, space);
  const std::string nonce = space == std::string::npos ? "" : relay_text.substr(space + 1);
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  if (end == port_text.c_str() || *end != '\0' || port <= 0 || port > 65535 || nonce.size() != 64 ||
      nonce.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return InvalidArgument(
        "RESTORE LAZY needs the source's page relay port and a nonce (64 hex digits), got '" +
        relay_text.substr(0, 24) + "'");
  }
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
  if (!tls_.has_peer() && !allow_plain) {
    return PermissionDenied(
        "the page stream is not secured (no PAGE-TLS before RESTORE LAZY); this destination "
        "takes plain page streams only with paladin receive --lazy-plain");
  }
  log_ = image + "/lazy-pages.log";
  PageRelayOptions relay_options;
  // For the tests: the link is cut once, a few MiB into the pages (docs/lazy_migration.md).
  if (FaultSet("cut:page-relay")) relay_options.cut_after = uint64_t{24} << 20;
  StatusOr<PageRelay> relay =
      PageRelay::Reach(host, static_cast<int>(port), *secret, relay_options, progress_);
  if (!relay.ok()) return relay.status();
  relay_ = std::move(*relay);
  progress_("post-copy: pulling the job's memory from " + std::string(host) + ":" +
            std::to_string(port) + (tls_.has_peer() ? " over TLS" : " over plain TCP") +
            " through the page relay (CRIU patches " + lazy->lazy_patches + ")");
  StatusOr<pid_t> puller =
      ckpt::StartLazyPages(*lazy, image, "127.0.0.1", relay_.local_port(),
                           tls_.has_peer() ? tls_.CriuArgs() : std::vector<std::string>{});
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
