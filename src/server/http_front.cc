// The event thread owns every connection and all their state; the workers see only a request
// (moved to them) and hand back a result through `done_` and the wake-up eventfd. A connection
// whose request is with a worker is not polled for input, so nothing it sends meanwhile is read.
#include "http_front.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tls_session.h"

namespace paladin::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;
constexpr size_t kReadChunk = 64 << 10;
// After an answer that closes the connection, what the client still sends is read and dropped
// for a moment, so that closing does not reset the connection before the client has read the
// answer; bounded, so that a client streaming a large refused body cannot keep us reading it.
constexpr size_t kMaxLingerBytes = 1 << 20;
constexpr double kLingerSeconds = 2;
constexpr auto kSweepInterval = std::chrono::milliseconds(100);

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

enum class Phase {
  kIdle,       // waiting for a request's first byte
  kHead,       // reading the head
  kAdmitting,  // a worker decides whether the body is wanted
  kBody,       // reading the body
  kHandling,   // a worker runs the route
  kWriting,    // sending the answer
  kLinger,     // answered and shut down for writing; dropping input until the client closes
};

struct Connection {
  uint64_t id = 0;
  int fd = -1;
  std::string remote;
  Phase phase = Phase::kIdle;
  bool dead = false;
  Clock::time_point deadline;
  uint32_t interest = 0;
  int requests = 0;

  std::string in;  // received, not yet consumed from in_pos on
  size_t in_pos = 0;
  std::unique_ptr<HttpRequest> request;
  BodyFraming framing;
  std::optional<BodyReader> body;
  std::function<HttpResponse(const HttpRequest&)> handle;
  bool keep_alive = true;
  bool head_request = false;
  bool expect_continue = false;

  std::string out;
  size_t out_pos = 0;
  bool close_after_write = false;
  size_t lingered = 0;

  // HTTPS: the session, and what it must send that no answer carries yet (its handshake).
  std::unique_ptr<TlsSession> tls;
  std::string tls_out;
};

// A worker's result for a connection.
struct Done {
  uint64_t id = 0;
  std::unique_ptr<HttpRequest> request;
  bool admission_only = false;  // `admission` holds HttpAdmit's answer; else `response` is final
  HttpAdmission admission;
  HttpResponse response;
};

HttpResponse InternalError() { return HttpError(500, "internal error"); }

}  // namespace

class HttpFront::Impl {
 public:
  Impl(HttpFrontOptions options, HttpAdmit admit)
      : options_(std::move(options)), admit_(std::move(admit)) {}
  ~Impl() { Stop(); }

  Status Bind();
  void Run();
  void Stop();
  int port() const { return port_; }
  HttpFrontStats stats() const {
    return HttpFrontStats{connections_.load(), timed_out_.load(),       refused_early_.load(),
                          too_large_.load(),   over_peer_limit_.load(), tls_refused_.load()};
  }

 private:
  // --- event thread ---
  void Loop();
  void Accept();
  void OnEvent(Connection& c, uint32_t events);
  void ReadSome(Connection& c);
  void Advance(Connection& c);
  void OnHead(Connection& c);
  void OnBody(Connection& c);
  void OnDone(Done done);
  void Answer(Connection& c, const HttpResponse& response, bool keep_alive);
  void Flush(Connection& c);
  void AfterWrite(Connection& c);
  void Close(Connection& c);
  void SetInterest(Connection& c, uint32_t events);
  void Sweep(Clock::time_point now);
  void Compact(Connection& c);
  // HTTPS: sends what the session has to send outside an answer; false when it closed `c`.
  bool SendTlsOut(Connection& c);

  // --- workers ---
  void Dispatch(Connection& c, bool admission_only);
  void Work();
  void Post(Done done);

  const HttpFrontOptions options_;
  const HttpAdmit admit_;
  std::unique_ptr<TlsContext> tls_;  // HTTPS, when the options name a certificate
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  bool stopped_ = false;
  std::thread loop_thread_;
  std::vector<std::thread> workers_;

  // Event thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections_by_id_;
  std::vector<uint64_t> graveyard_;
  uint64_t next_id_ = 2;
  Clock::time_point accept_paused_until_{};
  bool accept_paused_ = false;
  std::unordered_map<std::string, int> per_peer_;  // open connections by peer address

  std::mutex tasks_mu_;
  std::condition_variable tasks_cv_;
  std::deque<std::function<void()>> tasks_;
  bool workers_stop_ = false;

  std::mutex done_mu_;
  std::vector<Done> done_;

  std::atomic<int64_t> connections_{0};
  std::atomic<int64_t> timed_out_{0};
  std::atomic<int64_t> over_peer_limit_{0};
  std::atomic<int64_t> refused_early_{0};
  std::atomic<int64_t> too_large_{0};
  std::atomic<int64_t> tls_refused_{0};
};

Status HttpFront::Impl::Bind() {
  if (!options_.tls_cert_file.empty() || !options_.tls_key_file.empty()) {
    StatusOr<std::unique_ptr<TlsContext>> tls =
        TlsContext::Load(options_.tls_cert_file, options_.tls_key_file);
    if (!tls.ok()) return tls.status();
    tls_ = std::move(*tls);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(options_.port);
  if (getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return InvalidArgument("cannot resolve '" + options_.host + "'");
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
      listen_fd_ = fd;
      break;
    }
    why = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0)
    return Unavailable("cannot listen on " + options_.host + ":" + port + ": " + why);
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  (void)getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0)
    return IoError("epoll/eventfd: " + std::string(std::strerror(errno)));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenId;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev) != 0) return IoError("epoll_ctl");
  ev.data.u64 = kWakeId;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) return IoError("epoll_ctl");
  return Status::Ok();
}

void HttpFront::Impl::Run() {
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { Work(); });
  loop_thread_ = std::thread([this] { Loop(); });
}

void HttpFront::Impl::Stop() {
  if (stopped_) return;
  stopped_ = true;
  stopping_.store(true);
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
  }
  if (loop_thread_.joinable()) loop_thread_.join();
  {
    std::lock_guard<std::mutex> lock(tasks_mu_);
    workers_stop_ = true;
  }
  tasks_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  for (auto& [id, c] : connections_by_id_) close(c->fd);
  connections_by_id_.clear();
  for (int* fd : {&listen_fd_, &epoll_fd_, &wake_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

void HttpFront::Impl::Loop() {
  std::vector<epoll_event> events(256);
  Clock::time_point next_sweep = Clock::now() + kSweepInterval;
  while (!stopping_.load()) {
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), 100);
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kListenId) {
        Accept();
      } else if (id == kWakeId) {
        uint64_t count = 0;
        (void)!read(wake_fd_, &count, sizeof count);
      } else if (auto it = connections_by_id_.find(id); it != connections_by_id_.end()) {
        if (!it->second->dead) OnEvent(*it->second, events[i].events);
      }
    }
    std::vector<Done> done;
    {
      std::lock_guard<std::mutex> lock(done_mu_);
      done.swap(done_);
    }
    for (Done& d : done) OnDone(std::move(d));
    const Clock::time_point now = Clock::now();
    if (now >= next_sweep) {
      Sweep(now);
      next_sweep = now + kSweepInterval;
    }
    for (const uint64_t id : graveyard_) connections_by_id_.erase(id);
    graveyard_.clear();
  }
}

void HttpFront::Impl::Accept() {
  while (true) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: stop polling the listener for a moment instead of spinning on it.
        epoll_event ev{};
        ev.data.u64 = kListenId;
        (void)epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
        accept_paused_ = true;
        accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
      }
      return;
    }
    if (connections_by_id_.size() >= static_cast<size_t>(options_.max_connections)) {
      close(fd);
      continue;
    }
    const int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<Connection>();
    c->id = next_id_++;
    c->fd = fd;
    char text[INET6_ADDRSTRLEN] = "";
    if (addr.ss_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, text, sizeof text);
    } else if (addr.ss_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, text, sizeof text);
    }
    c->remote = text;
    int& from_peer = per_peer_[c->remote];
    if (from_peer >= options_.max_connections_per_peer) {
      over_peer_limit_.fetch_add(1);
      close(fd);
      continue;
    }
    c->deadline = Clock::now() + Seconds(options_.idle_timeout_s);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = c->id;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      if (from_peer == 0) per_peer_.erase(c->remote);
      close(fd);
      continue;
    }
    c->interest = ev.events;
    if (tls_ != nullptr) c->tls = std::make_unique<TlsSession>(*tls_);
    ++from_peer;
    connections_.fetch_add(1);
    connections_by_id_.emplace(c->id, std::move(c));
  }
}

void HttpFront::Impl::SetInterest(Connection& c, uint32_t events) {
  if (c.interest == events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = c.id;
  (void)epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  c.interest = events;
}

void HttpFront::Impl::Close(Connection& c) {
  if (c.dead) return;
  c.dead = true;
  (void)epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  close(c.fd);
  auto peer = per_peer_.find(c.remote);
  if (peer != per_peer_.end() && --peer->second <= 0) per_peer_.erase(peer);
  graveyard_.push_back(c.id);
}

void HttpFront::Impl::OnEvent(Connection& c, uint32_t events) {
  const bool with_worker = c.phase == Phase::kAdmitting || c.phase == Phase::kHandling;
  if ((events & EPOLLERR) != 0 || (with_worker && (events & EPOLLHUP) != 0)) {
    // Gone: nobody is left to answer (a worker's result for it is dropped).
    Close(c);
    return;
  }
  if (c.phase == Phase::kWriting && (events & EPOLLOUT) != 0) {
    Flush(c);
    return;
  }
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) != 0 && !with_worker) ReadSome(c);
}

void HttpFront::Impl::ReadSome(Connection& c) {
  char buf[kReadChunk];
  // A bounded number of reads per event, so one fast client cannot keep the thread to itself.
  for (int round = 0; round < 16 && !c.dead; ++round) {
    if (c.phase != Phase::kIdle && c.phase != Phase::kHead && c.phase != Phase::kBody &&
        c.phase != Phase::kLinger) {
      return;
    }
    const ssize_t n = recv(c.fd, buf, sizeof buf, 0);
    if (n == 0) {
      Close(c);  // the client went away, or finished after our last answer
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) Close(c);
      return;
    }
    if (c.phase == Phase::kLinger) {
      c.lingered += static_cast<size_t>(n);
      if (c.lingered > kMaxLingerBytes) Close(c);
      continue;
    }
    if (c.tls != nullptr) {
      // The request's bytes are what the session decrypts; its handshake goes out at once.
      const size_t before = c.in.size();
      if (!c.tls->Receive(buf, static_cast<size_t>(n), &c.in, &c.tls_out).ok()) {
        tls_refused_.fetch_add(1);
        (void)SendTlsOut(c);  // its alert, if any
        Close(c);
        return;
      }
      if (!SendTlsOut(c)) return;
      if (c.tls->closed() && c.in.size() == before) {
        Close(c);
        return;
      }
      if (c.in.size() == before) continue;
    } else {
      c.in.append(buf, static_cast<size_t>(n));
    }
    Advance(c);
  }
}

void HttpFront::Impl::Compact(Connection& c) {
  if (c.in_pos == c.in.size()) {
    c.in.clear();
    c.in_pos = 0;
    if (c.in.capacity() > kReadChunk) std::string().swap(c.in);
  } else if (c.in_pos > kReadChunk) {
    c.in.erase(0, c.in_pos);
    c.in_pos = 0;
  }
}

void HttpFront::Impl::Advance(Connection& c) {
  if (c.dead) return;
  if (c.phase == Phase::kIdle || c.phase == Phase::kHead) {
    OnHead(c);
  } else if (c.phase == Phase::kBody) {
    OnBody(c);
  }
  if (!c.dead) Compact(c);
}

void HttpFront::Impl::OnHead(Connection& c) {
  if (c.in_pos == c.in.size()) return;
  if (c.phase == Phase::kIdle) {
    c.head_request = false;  // until this request's method is known
    c.phase = Phase::kHead;
    c.deadline = Clock::now() + Seconds(options_.header_timeout_s);
  }
  const std::string_view pending = std::string_view(c.in).substr(c.in_pos);
  const std::optional<size_t> end = FindHeadEnd(pending);
  if (!end || *end > options_.max_head_bytes) {
    if (pending.size() > options_.max_head_bytes || (end && *end > options_.max_head_bytes)) {
      Answer(c,
             HttpError(431, "request head larger than " +
                                std::to_string(options_.max_head_bytes >> 10) + " KiB"),
             false);
    }
    return;
  }
  HeadResult head = ParseHead(pending.substr(0, *end), options_.max_target_bytes);
  c.in_pos += *end;
  if (head.error_status != 0) {
    Answer(c, HttpError(head.error_status, head.error), false);
    return;
  }
  ++c.requests;
  c.request = std::make_unique<HttpRequest>(std::move(head.request));
  c.request->remote_addr = c.remote;
  c.framing = head.framing;
  c.keep_alive = head.keep_alive && c.requests < options_.max_requests_per_connection;
  c.head_request = c.request->method == "HEAD";
  c.expect_continue = head.expect_continue;
  if (c.framing.content_length > options_.max_body_bytes) {
    too_large_.fetch_add(1);
    Answer(c,
           HttpError(413,
                     "body larger than " + std::to_string(options_.max_body_bytes >> 20) + " MiB"),
           false);
    return;
  }
  c.phase = Phase::kAdmitting;
  SetInterest(c, 0);
  Dispatch(c, /*admission_only=*/true);
}

void HttpFront::Impl::OnBody(Connection& c) {
  switch (c.body->Feed(c.in, &c.in_pos)) {
    case BodyReader::Progress::kMore:
      return;
    case BodyReader::Progress::kTooLarge:
      too_large_.fetch_add(1);
      Answer(c,
             HttpError(
                 413, "body larger than " + std::to_string(options_.max_body_bytes >> 20) + " MiB"),
             false);
      return;
    case BodyReader::Progress::kMalformed:
      Answer(c, HttpError(400, "malformed body: " + c.body->error()), false);
      return;
    case BodyReader::Progress::kDone:
      c.request->body = std::move(c.body->body());
      c.body.reset();
      c.phase = Phase::kHandling;
      SetInterest(c, 0);
      Dispatch(c, /*admission_only=*/false);
      return;
  }
}

void HttpFront::Impl::OnDone(Done done) {
  auto it = connections_by_id_.find(done.id);
  if (it == connections_by_id_.end() || it->second->dead) return;
  Connection& c = *it->second;
  if (!done.admission_only) {
    Answer(c, done.response, c.keep_alive);
    return;
  }
  if (done.admission.refusal) {
    // Refused before the body: it stays unread, so the connection cannot carry another request.
    if (c.framing.has_body()) refused_early_.fetch_add(1);
    Answer(c, *done.admission.refusal, c.keep_alive && !c.framing.has_body());
    return;
  }
  c.request = std::move(done.request);
  c.handle = std::move(done.admission.handle);
  c.phase = Phase::kBody;
  c.deadline = Clock::now() + Seconds(options_.body_timeout_s);
  c.body.emplace(c.framing, options_.max_body_bytes);
  if (c.expect_continue && c.in_pos == c.in.size()) {
    static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    if (c.tls != nullptr) {
      if (!c.tls->Seal(kContinue, false, &c.tls_out).ok() || !SendTlsOut(c)) {
        Close(c);
        return;
      }
    } else {
      (void)send(c.fd, kContinue, sizeof kContinue - 1, MSG_NOSIGNAL);
    }
  }
  SetInterest(c, EPOLLIN | EPOLLRDHUP);
  Advance(c);
}

void HttpFront::Impl::Answer(Connection& c, const HttpResponse& response, bool keep_alive) {
  c.out = SerializeResponse(response, keep_alive, c.head_request);
  c.out_pos = 0;
  if (c.tls != nullptr) {
    // Sealed whole, behind whatever of the session's own bytes could not be sent yet.
    std::string sealed = std::move(c.tls_out);
    c.tls_out.clear();
    if (!c.tls->Seal(c.out, !keep_alive, &sealed).ok()) {
      Close(c);
      return;
    }
    c.out = std::move(sealed);
  }
  c.close_after_write = !keep_alive;
  c.phase = Phase::kWriting;
  c.deadline = Clock::now() + Seconds(options_.write_timeout_s);
  c.request.reset();
  c.handle = nullptr;
  c.body.reset();
  if (!keep_alive) {
    c.in.clear();
    c.in_pos = 0;
  }
  Flush(c);
}

bool HttpFront::Impl::SendTlsOut(Connection& c) {
  size_t sent = 0;
  while (sent < c.tls_out.size()) {
    const ssize_t n = send(c.fd, c.tls_out.data() + sent, c.tls_out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // A handshake flight is a few KiB, less than any socket's buffer: a peer that leaves it
      // there is not reading, and its deadline closes it. The rest goes before the next answer.
      break;
    } else {
      Close(c);
      return false;
    }
  }
  c.tls_out.erase(0, sent);
  return true;
}

void HttpFront::Impl::Flush(Connection& c) {
  while (c.out_pos < c.out.size()) {
    const ssize_t n = send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_pos += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      SetInterest(c, EPOLLOUT);
      return;
    } else {
      Close(c);
      return;
    }
  }
  AfterWrite(c);
}

void HttpFront::Impl::AfterWrite(Connection& c) {
  std::string().swap(c.out);
  c.out_pos = 0;
  if (c.close_after_write) {
    (void)shutdown(c.fd, SHUT_WR);
    c.phase = Phase::kLinger;
    c.lingered = 0;
    c.deadline = Clock::now() + Seconds(kLingerSeconds);
    SetInterest(c, EPOLLIN | EPOLLRDHUP);
    return;
  }
  c.phase = Phase::kIdle;
  c.deadline = Clock::now() + Seconds(options_.idle_timeout_s);
  SetInterest(c, EPOLLIN | EPOLLRDHUP);
  Advance(c);  // a pipelined request may be waiting already
}

void HttpFront::Impl::Sweep(Clock::time_point now) {
  if (accept_paused_ && now >= accept_paused_until_) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenId;
    (void)epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
    accept_paused_ = false;
  }
  for (auto& [id, ptr] : connections_by_id_) {
    Connection& c = *ptr;
    if (c.dead || now < c.deadline) continue;
    switch (c.phase) {
      case Phase::kIdle:
      case Phase::kLinger:
        Close(c);
        break;
      case Phase::kHead:
        timed_out_.fetch_add(1);
        Answer(
            c,
            HttpError(408, "request head not complete within " +
                               std::to_string(static_cast<int>(options_.header_timeout_s)) + " s"),
            false);
        break;
      case Phase::kBody:
        timed_out_.fetch_add(1);
        Answer(c,
               HttpError(408, "request body not complete within " +
                                  std::to_string(static_cast<int>(options_.body_timeout_s)) + " s"),
               false);
        break;
      case Phase::kWriting:
        timed_out_.fetch_add(1);
        Close(c);
        break;
      case Phase::kAdmitting:
      case Phase::kHandling:
        break;  // our own work: no deadline
    }
  }
}

void HttpFront::Impl::Dispatch(Connection& c, bool admission_only) {
  auto request = std::shared_ptr<HttpRequest>(std::move(c.request));
  std::function<HttpResponse(const HttpRequest&)> handle = std::move(c.handle);
  c.handle = nullptr;
  const uint64_t id = c.id;
  const bool has_body = c.framing.has_body();
  auto task = [this, id, request, handle = std::move(handle), admission_only, has_body]() {
    Done done;
    done.id = id;
    try {
      if (admission_only) {
        done.admission = admit_(*request);
        if (!done.admission.refusal && !done.admission.handle) {
          done.admission.refusal = InternalError();
        }
        if (!done.admission.refusal && !has_body) {
          // No body to wait for: run the route now, in the same task.
          done.response = done.admission.handle(*request);
          done.admission_only = false;
        } else {
          done.admission_only = true;
        }
      } else {
        done.response = handle(*request);
      }
    } catch (...) {
      done.admission_only = false;
      done.response = InternalError();
    }
    done.request = std::make_unique<HttpRequest>(std::move(*request));
    Post(std::move(done));
  };
  {
    std::lock_guard<std::mutex> lock(tasks_mu_);
    tasks_.emplace_back(std::move(task));
  }
  tasks_cv_.notify_one();
}

void HttpFront::Impl::Work() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(tasks_mu_);
      tasks_cv_.wait(lock, [this] { return workers_stop_ || !tasks_.empty(); });
      if (workers_stop_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void HttpFront::Impl::Post(Done done) {
  {
    std::lock_guard<std::mutex> lock(done_mu_);
    done_.push_back(std::move(done));
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

HttpFront::HttpFront(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpFront::~HttpFront() { Stop(); }

StatusOr<std::unique_ptr<HttpFront>> HttpFront::Start(const HttpFrontOptions& options,
                                                      HttpAdmit admit) {
  if (options.workers < 1) return InvalidArgument("HTTP workers: at least 1");
  auto impl = std::make_unique<Impl>(options, std::move(admit));
  PALADIN_RETURN_IF_ERROR(impl->Bind());
  impl->Run();
  return std::unique_ptr<HttpFront>(new HttpFront(std::move(impl)));
}

void HttpFront::Stop() {
  if (impl_) impl_->Stop();
}

int HttpFront::port() const { return impl_->port(); }

HttpFrontStats HttpFront::stats() const { return impl_->stats(); }

}  // namespace paladin::server
