#include "paladin/migrate/migrate.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "page_tls.h"
#include "paladin/ckpt/cgroup.h"
#include "paladin/migrate/control.h"
#include "paladin/quota/usage.h"
#include "paladin/transfer/transfer.h"
#include "state.h"
#include "stream.h"

namespace paladin::migrate {

namespace fs = std::filesystem;

namespace {

// The address this host sends from to reach HOST:PORT (a UDP socket's connect sends nothing):
// the post-copy page server listens there only, not on every interface.
StatusOr<std::string> LocalAddressTowards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0 || found == nullptr) {
    return Unavailable("cannot resolve " + host + " for the page server's address");
  }
  const int fd = socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_storage local{};
  socklen_t size = sizeof local;
  const bool ok = fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &size) == 0;
  freeaddrinfo(found);
  if (fd >= 0) close(fd);
  char text[INET6_ADDRSTRLEN] = {};
  const void* where =
      local.ss_family == AF_INET6
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
  if (!ok || inet_ntop(local.ss_family, where, text, sizeof text) == nullptr) {
    return Unavailable("no route from here to " + host + " for the page server");
  }
  return std::string(text);
}

constexpr double kAnswerTimeoutS = 600;

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// For tests (PALADIN_MIGRATE_FAULT=corrupt-image): one byte of the image's largest file is
// flipped after the manifest is written, as a disk or a copy might.
void MaybeCorrupt(const std::string& image, const ckpt::Progress& progress) {
  if (!FaultSet("corrupt-image")) return;
  fs::path largest;
  uintmax_t size = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(image, ec)) {
    if (e.is_regular_file() && e.file_size() > size && e.path().filename() != "manifest.json") {
      largest = e.path();
      size = e.file_size();
    }
  }
  if (size == 0) return;
  std::fstream f(largest, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(size / 2));
  char byte = 0;
  f.read(&byte, 1);
  f.seekp(static_cast<std::streamoff>(size / 2));
  byte = static_cast<char>(byte ^ 0x5a);
  f.write(&byte, 1);
  progress("fault injected: one byte of " + largest.filename().string() + " flipped");
}

// A message lost on the way, for the tests (PALADIN_MIGRATE_FAULT=drop:WHAT): the connection is
// cut where it would have been sent, so neither side hears from the other on it again.
Status SendOrDrop(Channel* channel, const std::string& what, const std::string& line) {
  if (FaultSet("drop:" + what)) {
    shutdown(channel->fd(), SHUT_RDWR);
    return IoError("fault injected: " + what + " lost");
  }
  return channel->Send(line);
}

StatusOr<std::string> CallOrDrop(Channel* channel, const std::string& what, const std::string& line,
                                 double timeout_s) {
  if (FaultSet("drop:" + what)) {
    shutdown(channel->fd(), SHUT_RDWR);
    return IoError("fault injected: " + what + " lost");
  }
  return channel->Call(line, timeout_s);
}

std::string RandomId() {
  std::ifstream in("/dev/urandom", std::ios::binary);
  unsigned char bytes[8] = {};
  in.read(reinterpret_cast<char*>(bytes), sizeof bytes);
  static const char* kHex = "0123456789abcdef";
  std::string id;
  for (unsigned char b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  // Unique even without /dev/urandom.
  return id + "-" + std::to_string(getpid()) + "-" + std::to_string(time(nullptr));
}

void KillTree(int64_t root) {
  if (root <= 0) return;
  for (uint32_t pid : quota::ProcessTree(static_cast<uint32_t>(root))) {
    kill(static_cast<pid_t>(pid), SIGKILL);
  }
}

// Resumes a job that this side stopped. A dump that was still running when this side's process
// died leaves the tree stopped once it ends: look again for a while.
Status ResumeHere(ckpt::JobRecord* job, double settle_s) {
  Status s = ckpt::ResumeJob(job);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(settle_s);
  while (std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ckpt::ContinueTree(static_cast<pid_t>(job->pid), job->stopped);
  }
  return s;
}

// The source once the destination runs the job: its stopped copy goes.
void Release(ckpt::JobRecord* job) {
  KillTree(job->pid);
  if (!job->cgroup.empty()) (void)ckpt::Cgroup::Existing(job->cgroup).Remove();
}

// A job whose image holds file locks cannot keep its stopped copy here while the destination
// restores it: on a file system the two sides share (one machine, NFS) the restore takes the
// same locks again and waits for this copy to let go of them, which it does only once the move
// commits. So such a copy is let go once the destination has verified the image, before RESTORE,
// and a move that fails after that restores the job here from the image (BackHere). The state
// file says so before the copy goes (`released`), and forgets its pid once it has gone.
Status LetGoForLocks(ckpt::JobRecord* job, MoveState* st, const std::string& state_file,
                     const ckpt::Progress& progress) {
  st->released = true;
  if (Status saved = SaveState(state_file, *st); !saved.ok()) {
    st->released = false;
    return saved;
  }
  // Its supervisor (paladin run) sees it end: "moving" leaves the run directory, where the image
  // is, to the job.
  job->state = "moving";
  (void)ckpt::WriteJob(*job);
  const std::vector<uint32_t> pids = quota::ProcessTree(static_cast<uint32_t>(job->pid));
  for (uint32_t pid : pids) kill(static_cast<pid_t>(pid), SIGKILL);
  // A process's locks go with its files, before it is a zombie.
  auto gone = [](uint32_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    if (!std::getline(in, stat)) return true;
    const size_t paren = stat.rfind(')');
    return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z' ||
           stat[paren + 2] == 'X';
  };
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!std::all_of(pids.begin(), pids.end(), gone) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!job->cgroup.empty()) (void)ckpt::Cgroup::Existing(job->cgroup).Remove();
  progress("let go of the stopped copy here (pid " + std::to_string(job->pid) +
           ") so that the destination can take its file locks; if the move fails, the job is "
           "restored here from " +
           st->image);
  // Never signalled again: that number may be another process's now.
  job->pid = 0;
  st->pid = 0;
  (void)SaveState(state_file, *st);
  return Status::Ok();
}

// The job back here after a failed move: its stopped copy resumes, or, once let go for its file
// locks, the job is restored from the image (removed then, unless kept). *job becomes the
// restored job's record.
Status BackHere(const ckpt::Criu& criu, ckpt::JobRecord* job, const MoveState& st,
                const ckpt::Progress& progress) {
  if (!st.released) return ckpt::ResumeJob(job);
  progress("restoring the job here from its image " + st.image);
  ckpt::RestoreOptions2 restore;
  restore.placement.run_base = fs::path(st.run_dir).parent_path().string();
  ckpt::PhaseTimes times;
  StatusOr<ckpt::JobRecord> got = ckpt::RestoreJob(criu, st.image, restore, progress, &times);
  if (!got.ok()) {
    return Status(got.status().code(), got.status().message() + " (the image is kept in " +
                                           st.image + ": paladin restore it)");
  }
  *job = *got;
  // Nothing of Paladin's waits for the restored job: its group goes when it ends.
  if (!job->cgroup.empty()) {
    (void)ckpt::Cgroup::Existing(job->cgroup).RemoveWhenGone(static_cast<pid_t>(job->pid));
  }
  progress("the job runs here again as pid " + std::to_string(job->pid) +
           ", restored from its image");
  std::error_code ec;
  if (!st.keep_image) fs::remove_all(st.image, ec);
  return Status::Ok();
}

// "the job resumed here", or where the job restored here runs.
std::string BackHereSaid(const ckpt::JobRecord& job, const MoveState& st) {
  return st.released
             ? "the job was restored here from its image (pid " + std::to_string(job.pid) + ")"
             : "the job resumed here";
}

enum class Outcome { kCommitted, kAborted, kUnknown };

// The source's question, after it sent RESUME and lost the answer: what became of migration
// `id`? Asked again and again (with backoff) until the destination says committed or aborted, or
// `timeout_s` passes. The connection that got the answer is returned in *channel, for the BYE.
Outcome AskOutcome(const MoveState& st, const std::string& token, Channel* channel,
                   const ckpt::Progress& progress) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(st.wait_s);
  double backoff = 0.2;
  for (int attempt = 1;; ++attempt) {
    StatusOr<Channel> c = Channel::Connect(st.host, st.port, 2);
    std::string why;
    if (c.ok()) {
      StatusOr<std::string> hello = c->Call("TOKEN " + token, 5);
      StatusOr<std::string> answer =
          hello.ok() ? c->Call("OUTCOME " + st.id, 5) : StatusOr<std::string>(hello.status());
      if (answer.ok() && (*answer == "committed" || *answer == "aborted")) {
        progress("the destination says migration " + st.id + " " + *answer);
        *channel = std::move(*c);
        return *answer == "committed" ? Outcome::kCommitted : Outcome::kAborted;
      }
      why = answer.ok() ? "it says " + *answer : answer.status().message();
    } else {
      why = c.status().message();
    }
    if (std::chrono::steady_clock::now() >= deadline) return Outcome::kUnknown;
    if (attempt == 1 || attempt % 10 == 0) {
      progress("what became of migration " + st.id + "? not known yet (" + why +
               "); the job stays stopped here; asking again");
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
    backoff = std::min(backoff * 2, 5.0);
  }
}

// The source's way back when the move fails before RESUME was sent.
Status Abandon(const ckpt::Criu& criu, ckpt::JobRecord* job, Channel* channel, const Status& why,
               MoveState* st, const std::string& state_file, Keeper* keeper,
               const ckpt::Progress& progress) {
  // The destination drops its copy before it answers: only then may the job run here again.
  if (channel != nullptr) (void)channel->Call("ABORT", 60);
  progress("the move failed (" + why.message() + "); " +
           (st->released ? "restoring the job here" : "resuming the job here"));
  Status resumed = BackHere(criu, job, *st, progress);
  // A job that could not be restored here from its image is that image, kept.
  st->step = resumed.ok() || !st->released ? "resumed" : "in_doubt";
  (void)SaveState(state_file, *st);
  keeper->Done();
  if (!resumed.ok()) {
    return Status(
        why.code(),
        why.message() + "; " + (st->released ? "restoring" : "resuming") +
            " it here failed too: " + resumed.message() +
            (st->released ? "" : " (the job is stopped at pid " + std::to_string(job->pid) + ")"));
  }
  return Status(why.code(), why.message() + "; " + BackHereSaid(*job, *st));
}

// Post-copy over TLS: waits until the page server has completed its handshake with a client
// (CRIU's dump log says so: it takes one client only, then closes its port). A client that
// connected first and holds the server in its handshake, or one that made the server fail, is
// found here, before RESUME, while the move can still be abandoned; without this the source would
// wait for its dump for an hour with the destination's copy waiting for pages.
Status WaitPageHandshake(pid_t dump, const std::string& log, double timeout_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  auto ended = [dump] {
    siginfo_t info{};
    return waitid(P_PID, static_cast<id_t>(dump), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
           info.si_pid == dump;
  };
  // CRIU logs the handshake before it verifies the client's certificate, and an error if that
  // fails; the verification follows within microseconds.
  auto said = [&log](const char* what) {
    std::ifstream in(log);
    std::string line;
    while (std::getline(in, line)) {
      if (line.find(what) != std::string::npos) return true;
    }
    return false;
  };
  for (;;) {
    if (said("TLS handshake completed")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (!said("Error (criu/tls.c") && !ended()) return Status::Ok();
      return Unavailable("the page server refused the client that connected first (see " + log +
                         ")");
    }
    if (ended()) {
      return Unavailable("the page server ended before any TLS handshake (see " + log + ")");
    }
    if (std::chrono::steady_clock::now() >= until) {
      return Unavailable("no TLS handshake on the page server within " +
                         std::to_string(static_cast<int>(timeout_s)) +
                         " s of the restore (a client that connected before the destination's "
                         "puller holds it, or the puller could not connect)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// How long the destination's puller has, once the restore there returned, to complete its TLS
// handshake with the page server (it connects as the restore hands it the job's memory).
constexpr double kPageHandshakeS = 30;

// Whether the image here holds the job's memory (CRIU's pagemap files): not after a streaming
// pre-copy dump, which sent it to the destination's page server.
bool ImageHoldsMemory(const std::string& image) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(image, ec)) {
    if (e.path().filename().string().rfind("pagemap-", 0) == 0) return true;
  }
  return false;
}

// Settles the source's side once RESUME was sent (the direct form): only the destination's word
// decides whether the job resumes here.
Status SettleSource(const ckpt::Criu& criu, ckpt::JobRecord* job, MoveState* st,
                    const std::string& state_file, const std::string& token,
                    const ckpt::Progress& progress) {
  Channel asked;
  const Outcome outcome = AskOutcome(*st, token, &asked, progress);
  Status back = Status::Ok();
  if (outcome == Outcome::kCommitted) {
    if (!st->released) Release(job);
    st->step = "done";
  } else if (outcome == Outcome::kAborted) {
    back = BackHere(criu, job, *st, progress);
    if (!back.ok()) progress("getting the job back here failed: " + back.message());
    st->step = back.ok() || !st->released ? "resumed" : "in_doubt";
  } else if (!ImageHoldsMemory(st->image)) {
    // Streaming pre-copy: the memory went to the destination only, so the image here cannot
    // bring the job back; the stopped copy stays, for whoever sorts it out.
    st->step = "in_doubt";
  } else {
    // Nobody can say: the stopped copy goes, the image stays, for whoever sorts it out.
    if (!st->released) Release(job);
    st->step = "in_doubt";
  }
  (void)SaveState(state_file, *st);
  if (outcome != Outcome::kUnknown) (void)SendOrDrop(&asked, "BYE", "BYE " + st->id);
  if (outcome == Outcome::kCommitted) return Status::Ok();
  if (outcome == Outcome::kAborted) {
    return FailedPrecondition(
        "the destination did not take the job; " +
        (back.ok() ? BackHereSaid(*job, *st) : "getting it back here failed: " + back.message()));
  }
  if (!ImageHoldsMemory(st->image)) {
    return Unavailable("the destination did not say within " +
                       std::to_string(static_cast<int>(st->wait_s)) +
                       " s whether it runs the job: its memory was streamed there, so it stays "
                       "stopped here (pid " +
                       std::to_string(job->pid) + "; SIGCONT it if it runs nowhere)");
  }
  return Unavailable(
      "the destination did not say within " + std::to_string(static_cast<int>(st->wait_s)) +
      " s whether it runs the job: " +
      (st->released ? "its copy here was let go for its file locks" : "it is stopped here") +
      " and its image kept in " + st->image + " (paladin restore it if it runs nowhere)");
}

// The fleet form's end of a post-copy move, once the dump has ended (`pages`): the owner (the
// server) commits, asked only once every page is at the destination and its copy runs there;
// until then the destination's copy runs provisionally and this one stays stopped. A failure
// resumes the job here only once the destination's copy is known to be gone: the destination
// said so, or the owner decided against the move and its lease has had fence_s to stop a copy
// there that it could not reach (docs/lazy_migration.md, "Fleet moves").
StatusOr<MigrateReport> FleetPostCopyEnd(
    ckpt::JobRecord* job, Channel* channel, MoveState* st, const std::string& state_file,
    const Status& pages, const MigrateOptions& options,
    const std::function<StatusOr<MigrateReport>()>& release,
    const std::function<Status(const std::string&)>& resume_here, const ckpt::Progress& progress) {
  auto save = [&](const std::string& step) {
    st->step = step;
    return SaveState(state_file, *st);
  };
  bool gone_there = false;  // the destination said its copy was killed
  std::string why;
  if (pages.ok()) {
    StatusOr<std::string> there = channel->Call("PAGES-DONE " + st->id, 120);
    if (there.ok()) {
      progress(
          "every page has reached the destination and its copy runs; asking the job's "
          "owner to commit");
      (void)save("resume_sent");
      Status committed = options.commit();
      if (committed.ok()) return release();
      if (committed.code() != StatusCode::kFailedPrecondition) {
        (void)save("in_doubt");
        return Status(committed.code(), "the commit is in doubt (" + committed.message() +
                                            "); the job stays stopped here (pid " +
                                            std::to_string(job->pid) + ")");
      }
      why = "the owner did not commit the move (" + committed.message() + ")";
      gone_there = channel->Call("ABORT", 60).ok();
    } else if (there.status().code() == StatusCode::kInternal) {
      gone_there = true;
      why = "the destination's copy ended before every page had reached it (" +
            there.status().message() + "): what the job did there since the move is lost";
    } else {
      why = "the destination did not answer once every page was sent (" + there.status().message() +
            "): what the job did there since the move is lost";
    }
  } else {
    progress("the page transfer failed (" + pages.message() + "); stopping the destination's copy");
    gone_there = channel->Call("PAGES-FAILED " + st->id, 120).ok();
    why = "the page transfer failed (" + pages.message() + ")";
  }
  if (!gone_there) {
    progress(why + "; the destination did not confirm that its copy is gone: asking the owner");
    StatusOr<bool> committed =
        options.resolve ? options.resolve() : StatusOr<bool>(Unavailable("no owner to ask"));
    if (!committed.ok()) {
      (void)save("in_doubt");
      return Unavailable(why + "; the owner did not say what became of the move (" +
                         committed.status().message() + "): the job stays stopped here (pid " +
                         std::to_string(job->pid) + ")");
    }
    if (*committed) return release();  // only after a commit asked above whose answer was lost
    progress("the owner decided against the move; waiting " + std::to_string(options.fence_s) +
             " s for the destination's lease to stop any copy there before resuming here");
    std::this_thread::sleep_for(std::chrono::duration<double>(options.fence_s));
  }
  job->state = "stopped";
  return resume_here(why);
}

// The source's side of a post-copy move once the destination holds the job, restored without
// its memory and stopped: the job runs there at once, and this copy, stopped, serves its pages
// (the dump, `lazy_dump`) until the destination has them all. Only then, and only if the
// destination's copy still runs, is this copy released; a copy that died there leaves the job to
// resume here, and a transfer that failed has the destination's copy killed before this one
// resumes: never two copies at once (docs/lazy_migration.md).
StatusOr<MigrateReport> PostCopy(ckpt::JobRecord* job, Channel* channel, MoveState* st,
                                 const std::string& state_file, Keeper* keeper, pid_t lazy_dump,
                                 const std::string& lazy_log, const MigrateOptions& options,
                                 std::chrono::steady_clock::time_point paused,
                                 MigrateReport* report, const std::string& remote_pid,
                                 const std::function<void()>& cleanup,
                                 const ckpt::Progress& progress) {
  auto save = [&](const std::string& step) {
    st->step = step;
    return SaveState(state_file, *st);
  };
  auto resume_here = [&](const std::string& why) -> Status {
    Status s = ResumeHere(job, 0);
    (void)save("resumed");
    (void)channel->Send("BYE " + st->id);
    keeper->Done();
    cleanup();
    std::error_code ec;
    fs::remove(lazy_log, ec);
    return FailedPrecondition(
        why + "; " + (s.ok() ? "the job resumed here" : "resuming it failed: " + s.message()));
  };
  // The keeper leaves a copy in this step stopped: it cannot know whether the pages all went.
  (void)save("serving");
  job->state = "moving";
  (void)ckpt::WriteJob(*job);
  StatusOr<std::string> resumed = CallOrDrop(channel, "RESUME", "RESUME", kAnswerTimeoutS);
  if (!resumed.ok() && resumed.status().code() == StatusCode::kInternal &&
      resumed.status().message().rfind("aborted", 0) == 0) {
    kill(-lazy_dump, SIGKILL);
    (void)ckpt::ServingResult(lazy_dump, "the post-copy dump", lazy_log, 10);
    job->state = "stopped";
    return resume_here("the destination did not take the job (" + resumed.status().message() + ")");
  }
  if (resumed.ok()) {
    report->pause_s = Since(paused);
    progress("the job runs at the destination after a pause of " + std::to_string(report->pause_s) +
             " s; its memory follows from this stopped copy");
  } else {
    progress("no answer to RESUME (" + resumed.status().message() +
             "); the job stays stopped here while its pages are served");
  }
  const auto serving = std::chrono::steady_clock::now();
  Status pages =
      ckpt::ServingResult(lazy_dump, "the post-copy dump", lazy_log, options.lazy_timeout_s);
  report->times.seconds.emplace_back("post-copy pages", Since(serving));
  // The move is over and the job runs at the destination: this copy goes.
  auto release = [&]() -> StatusOr<MigrateReport> {
    report->total_s = Since(paused);
    Release(job);
    (void)save("done");
    (void)channel->Send("BYE " + st->id);
    keeper->Done();
    job->state = "moved";
    job->image = options.host + ":" + std::to_string(options.port) + " pid " + remote_pid;
    (void)ckpt::WriteJob(*job);
    if (options.keep_image) report->image = st->image;
    cleanup();
    std::error_code ec;
    fs::remove(lazy_log, ec);
    fs::remove(state_file, ec);
    return *report;
  };
  if (options.commit) {
    return FleetPostCopyEnd(job, channel, st, state_file, pages, options, release, resume_here,
                            progress);
  }
  if (pages.ok()) {
    // Every page left; the destination says whether its copy took them all and still runs.
    StatusOr<std::string> there = channel->Call("PAGES-DONE " + st->id, 120);
    if (there.ok()) return release();
    if (there.status().code() == StatusCode::kInternal) {
      job->state = "stopped";
      return resume_here("the destination's copy ended before every page had reached it (" +
                         there.status().message() +
                         "): what the job did there since the move is lost");
    }
    (void)save("in_doubt");
    return Unavailable(
        "every page was sent but the destination did not say whether its copy runs (" +
        there.status().message() + "): the job stays stopped here (pid " +
        std::to_string(job->pid) + ")");
  }
  progress("the page transfer failed (" + pages.message() + "); stopping the destination's copy");
  StatusOr<std::string> dropped = channel->Call("PAGES-FAILED " + st->id, 120);
  if (dropped.ok()) {
    job->state = "stopped";
    return resume_here("the page transfer failed; the destination's copy was killed");
  }
  (void)save("in_doubt");
  return Unavailable("the page transfer failed (" + pages.message() +
                     ") and the destination did not confirm that its copy was killed (" +
                     dropped.status().message() + "): the job stays stopped here (pid " +
                     std::to_string(job->pid) + ")");
}

}  // namespace

StatusOr<MigrateReport> Migrate(const ckpt::Criu& criu, ckpt::JobRecord* job,
                                const MigrateOptions& options, const ckpt::Progress& progress) {
  if (options.lazy && options.commit && !options.resolve) {
    return InvalidArgument("a fleet post-copy move needs the owner's resolve");
  }
  if (options.lazy && options.stream) {
    return InvalidArgument("a move is post-copy or streaming pre-copy, not both");
  }
  std::string lazy_address = options.lazy_address;
  if (options.lazy && lazy_address.empty()) {
    StatusOr<std::string> local = LocalAddressTowards(options.host, options.port);
    if (!local.ok()) return local.status();
    lazy_address = *local;
  }
  MigrateReport report;
  const std::string image =
      options.work_dir + "/" + job->name + "-" + std::to_string(time(nullptr)) + ".image";
  MoveState st;
  st.role = "source";
  st.id = options.id.empty() ? RandomId() : options.id;
  st.step = "checkpointing";
  st.run_dir = job->run_dir;
  st.pid = job->pid;
  st.image = image;
  st.host = options.host;
  st.port = options.port + 1;
  st.wait_s = options.outcome_timeout_s;
  st.keep_image = options.keep_image;
  const std::string state_file = image + ".migration";
  PALADIN_RETURN_IF_ERROR(SaveState(state_file, st));
  Keeper keeper;
  if (!options.keeper_exe.empty()) {
    StatusOr<Keeper> k = Keeper::Start(options.keeper_exe, state_file, options.token, -1);
    if (!k.ok()) return k.status();
    keeper = std::move(*k);
  }
  // Once the stopped copy was let go for its locks (LetGoForLocks), the image is the job here
  // until the destination runs it: cleanup leaves it, BackHere removes it once restored from.
  bool image_is_the_job = false;
  auto cleanup = [&] {
    std::error_code ec;
    if (!options.keep_image && !image_is_the_job) fs::remove_all(image, ec);
  };
  auto save = [&](const std::string& step) {
    st.step = step;
    return SaveState(state_file, st);
  };

  ckpt::CheckpointOptions checkpoint;
  checkpoint.after = ckpt::CheckpointOptions::After::kLeaveStopped;
  // Post-copy: the dump goes on running after CheckpointJob, serving the job's memory.
  pid_t lazy_dump = 0;
  const std::string lazy_log = image + ".dump.log";
  const int lazy_port = options.lazy_port > 0 ? options.lazy_port : options.port + 2;
  // The page stream's keys: made before the dump, which starts the page server; removed when
  // this call returns, once the dump (which reads them when the puller connects) has ended.
  PageTls page_tls;
  if (options.lazy) {
    checkpoint.lazy_port = lazy_port;
    checkpoint.lazy_address = lazy_address;
    checkpoint.lazy_log = lazy_log;
    checkpoint.lazy_dump = &lazy_dump;
    report.mode = "post-copy";
    if (!options.lazy_plain) {
      StatusOr<PageTls> made = PageTls::Create(st.id + " source");
      if (!made.ok()) {
        (void)save("resumed");  // nothing was stopped yet
        keeper.Done();
        return made.status();
      }
      page_tls = std::move(*made);
      checkpoint.lazy_tls_args = page_tls.CriuArgs();
    }
  }
  // Streaming pre-copy: the page server there is set up before the dump, on the command channel
  // (which then goes on to BEGIN once the image is there).
  StatusOr<PageStream> stream = FailedPrecondition("not streaming");
  if (options.stream) {
    stream = OpenPageStream(options.host, options.port + 1, options.token, st.id,
                            JobMemoryBytes(*job), progress);
    if (!stream.ok()) {
      (void)save("resumed");  // nothing was stopped yet
      keeper.Done();
      return stream.status();
    }
    stream->Apply(&checkpoint);
    report.mode = "pre-copy stream";
  }
  // Before the destination may run the job: killing the dump lets the tree go (CRIU held it).
  auto stop_dump = [&] {
    if (lazy_dump <= 0) return;
    kill(-lazy_dump, SIGKILL);
    (void)ckpt::ServingResult(lazy_dump, "the post-copy dump", lazy_log, 10);
    lazy_dump = 0;
  };
  progress("checkpointing " + job->name + " (it stays stopped here until the move commits)" +
           (options.lazy ? "; post-copy: its memory stays here, served on " + lazy_address + ":" +
                               std::to_string(lazy_port)
                         : ""));
  const auto paused = std::chrono::steady_clock::now();
  StatusOr<ckpt::PhaseTimes> times = ckpt::CheckpointJob(criu, job, image, checkpoint, progress);
  if (!times.ok()) {
    if (lazy_dump > 0) {
      stop_dump();
      (void)ResumeHere(job, 1);
    }
    (void)save("resumed");  // the job keeps running
    keeper.Done();
    if (options.stream) {
      return Status(times.status().code(), "the streaming dump failed (" +
                                               times.status().message() +
                                               "); the job keeps running here");
    }
    return times.status();
  }
  report.times = *times;
  // The file locks the image holds: a direct pre-copy move lets its stopped copy here go before
  // the destination restores (LetGoForLocks). A post-copy move's copy serves the job's memory, a
  // streaming move's image holds none, and a fleet move's job is its agent's: they keep theirs.
  StatusOr<int> file_locks = ckpt::FileLocksInImage(image);
  if (!file_locks.ok()) {
    progress("warning: cannot tell the job's file locks (" + file_locks.status().message() +
             "); its copy here stays until the move commits");
    file_locks = 0;
  } else if (*file_locks > 0 && (options.lazy || options.stream || options.commit)) {
    progress("the job holds " + std::to_string(*file_locks) +
             " file lock(s), which its stopped copy here keeps until the move commits: on a file "
             "system the destination shares, its restore waits for them");
  } else if (*file_locks > 0) {
    progress("the job holds " + std::to_string(*file_locks) +
             " file lock(s): its stopped copy here goes before the destination restores it, and "
             "a failed move restores it here from its image");
  }
  const bool let_go = *file_locks > 0 && !options.lazy && !options.stream && !options.commit;
  MaybeCorrupt(image, progress);
  CrashPoint("src-after-checkpoint");
  (void)save("sending");

  transfer::SendOptions send;
  send.token = options.token;
  send.streams = options.streams;
  StatusOr<transfer::Fault> fault = transfer::FaultFromEnv();
  if (fault.ok()) send.fault = *fault;
  progress("sending the image to " + options.host + ":" + std::to_string(options.port));
  const auto sending = std::chrono::steady_clock::now();
  StatusOr<transfer::SendReport> sent =
      transfer::SendImage(image, options.host, options.port, send, nullptr);
  if (!sent.ok()) {
    stop_dump();
    cleanup();
    return Abandon(criu, job, nullptr, sent.status(), &st, state_file, &keeper, progress);
  }
  report.times.seconds.emplace_back("transfer", Since(sending));
  CrashPoint("src-after-transfer");

  StatusOr<Channel> channel = options.stream ? StatusOr<Channel>(std::move(stream->channel))
                                             : Channel::Connect(options.host, options.port + 1, 60);
  if (!channel.ok()) {
    stop_dump();
    cleanup();
    return Abandon(criu, job, nullptr, channel.status(), &st, state_file, &keeper, progress);
  }
  StatusOr<std::string> hello =
      options.stream ? std::string() : channel->Call("TOKEN " + options.token, 30);
  if (hello.ok()) hello = channel->Call("BEGIN " + st.id, 30);
  if (hello.ok() && options.lazy && !options.lazy_plain) {
    // Before RESTORE LAZY, after which the puller connects: the page server, which reads the
    // trusted certificate as it accepts, then knows the puller's.
    hello = channel->Call("PAGE-TLS " + page_tls.certificate(), 30);
    if (hello.ok()) {
      Status trusted = page_tls.TrustPeer(*hello);
      if (!trusted.ok()) hello = Status(trusted.code(), "PAGE-TLS answer: " + trusted.message());
    }
  }
  if (!hello.ok()) {
    stop_dump();
    cleanup();
    return Abandon(criu, job, &*channel, hello.status(), &st, state_file, &keeper, progress);
  }
  if (let_go) {
    Status gone = LetGoForLocks(job, &st, state_file, progress);
    if (!gone.ok()) {
      return Abandon(criu, job, &*channel, gone, &st, state_file, &keeper, progress);
    }
    image_is_the_job = true;
  }
  (void)save("restoring");
  progress("the destination verified the image; restoring it there, stopped");
  const auto restoring = std::chrono::steady_clock::now();
  StatusOr<std::string> restored = CallOrDrop(
      &*channel, "RESTORE",
      options.lazy ? "RESTORE LAZY " + std::to_string(lazy_port) : std::string("RESTORE"),
      kAnswerTimeoutS);
  if (!restored.ok()) {
    stop_dump();
    cleanup();
    return Abandon(criu, job, &*channel,
                   Status(restored.status().code(), "the destination could not restore the job: " +
                                                        restored.status().message()),
                   &st, state_file, &keeper, progress);
  }
  report.remote_pid = std::atoll(restored->c_str());
  report.times.seconds.emplace_back("remote restore", Since(restoring));
  CrashPoint("src-after-restore");
  if (options.lazy && !options.lazy_plain) {
    Status handshake = WaitPageHandshake(lazy_dump, lazy_log, kPageHandshakeS);
    if (!handshake.ok()) {
      stop_dump();
      cleanup();
      return Abandon(criu, job, &*channel, handshake, &st, state_file, &keeper, progress);
    }
  }
  if (options.lazy) {
    report.total_s = 0;
    return PostCopy(job, &*channel, &st, state_file, &keeper, lazy_dump, lazy_log, options, paused,
                    &report, *restored, cleanup, progress);
  }

  auto released = [&]() -> StatusOr<MigrateReport> {
    report.pause_s = Since(paused);
    if (!st.released) Release(job);
    image_is_the_job = false;
    (void)save("done");
    (void)SendOrDrop(&*channel, "BYE", "BYE " + st.id);
    keeper.Done();
    job->state = "moved";
    job->image = options.host + ":" + std::to_string(options.port) + " pid " + *restored;
    (void)ckpt::WriteJob(*job);
    if (options.keep_image) report.image = image;
    cleanup();
    std::error_code ec;
    fs::remove(state_file, ec);
    return report;
  };

  if (options.commit) {
    // The fleet form: the server owns the commit and its row is the truth. Once asked, the job
    // never resumes here unless the server said no.
    progress("the destination holds the job, stopped; asking the job's owner to commit");
    (void)save("resume_sent");
    Status committed = options.commit();
    if (committed.code() == StatusCode::kFailedPrecondition) {
      cleanup();
      return Abandon(criu, job, &*channel,
                     Status(committed.code(), "the move was not committed: " + committed.message()),
                     &st, state_file, &keeper, progress);
    }
    if (!committed.ok()) {
      (void)save("in_doubt");
      return Status(committed.code(), "the commit is in doubt (" + committed.message() +
                                          "); the job stays stopped here (pid " +
                                          std::to_string(job->pid) + ")");
    }
    CrashPoint("src-before-resume");
    // The destination resumes on RESUME, or on asking the server once it loses this connection:
    // whatever the answer, the job is no longer this side's.
    StatusOr<std::string> resumed = CallOrDrop(&*channel, "RESUME", "RESUME", kAnswerTimeoutS);
    CrashPoint("src-after-resume");
    if (!resumed.ok()) progress("RESUME: " + resumed.status().message() + "; committed anyway");
    return released();
  }

  // The direct form: the destination owns the commit. From here on the job resumes here only if
  // the destination says it did not take it.
  PALADIN_RETURN_IF_ERROR(save("resume_sent"));
  CrashPoint("src-before-resume");
  job->state = "moving";
  (void)ckpt::WriteJob(*job);
  StatusOr<std::string> resumed = CallOrDrop(&*channel, "RESUME", "RESUME", kAnswerTimeoutS);
  CrashPoint("src-after-resume");
  if (resumed.ok()) return released();
  job->state = "stopped";
  if (resumed.status().code() == StatusCode::kInternal &&
      resumed.status().message().rfind("aborted", 0) == 0) {
    cleanup();
    Status s = BackHere(criu, job, st, progress);
    (void)save(s.ok() || !st.released ? "resumed" : "in_doubt");
    (void)channel->Send("BYE " + st.id);
    keeper.Done();
    return Status(
        StatusCode::kFailedPrecondition,
        "the destination did not take the job (" + resumed.status().message() + "); " +
            (s.ok() ? BackHereSaid(*job, st) : "getting it back here failed: " + s.message()));
  }
  progress("no answer to RESUME (" + resumed.status().message() +
           "); the job stays stopped here until the destination says what became of the move");
  Status settled = SettleSource(criu, job, &st, state_file, options.token, progress);
  keeper.Done();
  if (settled.ok()) {
    image_is_the_job = false;
    report.pause_s = Since(paused);
    job->state = "moved";
    job->image = options.host + ":" + std::to_string(options.port) + " pid " + *restored;
    (void)ckpt::WriteJob(*job);
    if (options.keep_image) report.image = image;
    cleanup();
    return report;
  }
  if (st.step == "resumed") cleanup();
  return settled;
}

namespace {

// The destination's answers about a decided move, after its command connection ended: to
// OUTCOME, RESUME and ABORT for it, until the source says BYE or `answer_for_s` passes.
void AnswerQueries(Listener* listener, const std::string& state_file, const std::string& token,
                   double answer_for_s, const ckpt::Progress& progress) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(answer_for_s);
  for (;;) {
    StatusOr<MoveState> st = LoadState(state_file);
    if (!st.ok() || st->acked) return;
    const double left =
        std::chrono::duration<double>(until - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      progress("nobody asked about migration " + st->id + " (" + st->step +
               "); no longer answering");
      return;
    }
    StatusOr<Channel> c = listener->Accept(std::min(left, 1.0));
    if (!c.ok()) continue;
    StatusOr<std::string> hello = c->Receive(5);
    if (!hello.ok()) continue;
    if (hello->rfind("TOKEN ", 0) != 0 || !SameSecret(hello->substr(6), token)) {
      (void)c->Send("ERR authentication failed");
      continue;
    }
    (void)c->Send("OK");
    for (;;) {
      StatusOr<std::string> line = c->Receive(5);
      if (!line.ok()) break;
      const size_t space = line->find(' ');
      const std::string verb = line->substr(0, space);
      const std::string id = space == std::string::npos ? "" : line->substr(space + 1);
      if (id != st->id) {
        (void)c->Send(verb == "OUTCOME" ? "OK unknown" : "ERR no migration " + id + " here");
        continue;
      }
      const bool committed = st->step == "committed";
      if (verb == "OUTCOME") {
        (void)c->Send("OK " + st->step);
      } else if (verb == "RESUME") {
        (void)c->Send(committed ? "OK" : "ERR aborted: the destination dropped its copy");
      } else if (verb == "ABORT") {
        (void)c->Send(committed ? "ERR committed: the job runs here" : "OK");
      } else if (verb == "BYE") {
        st->acked = true;
        (void)SaveState(state_file, *st);
        (void)c->Send("OK");
        return;
      } else {
        (void)c->Send("ERR unexpected command '" + verb + "'");
      }
    }
  }
}

struct Destination {
  const ckpt::Criu& criu;
  const DestinationOptions& options;
  const std::string& image;
  const std::string& state_file;
  const ckpt::Progress& progress;
  MoveState st;
  ckpt::JobRecord job;
  bool restored = false;
  bool answered_restore = false;  // the source may have sent RESUME: it may ask what became of it
  // Post-copy: the page puller (`criu lazy-pages`, this process's child) and its watcher, which
  // kills the restored copy the moment the puller fails: the copy would read zeros where pages
  // had not arrived.
  pid_t lazyd = 0;
  std::string lazy_log;
  std::thread watcher;
  std::atomic<bool> lazy_over{false};
  std::atomic<bool> lazy_failed{false};
  std::string lazy_error;  // read once lazy_over
  PageTls page_tls;        // the page stream's keys, made at PAGE-TLS; removed with this object
  // Streaming pre-copy: the page server that took the job's memory (owned by the caller).
  PageSink* sink = nullptr;

  void WatchLazyPages() {
    watcher = std::thread([this] {
      Status s = ckpt::ServingResult(lazyd, "criu lazy-pages", lazy_log, 7 * 24 * 3600.0);
      if (!s.ok()) {
        KillTree(job.pid);
        lazy_error = s.message();
        lazy_failed.store(true);
        progress("the page transfer failed; the restored copy was killed: " + s.message());
      }
      lazy_over.store(true);
    });
  }
  // Waits for the puller to end (killing it after `wait_s`).
  void EndLazyPages(double wait_s) {
    if (!watcher.joinable()) return;
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
    while (!lazy_over.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!lazy_over.load()) kill(-lazyd, SIGKILL);
    watcher.join();
  }
  bool CopyRuns() const {
    std::ifstream in("/proc/" + std::to_string(job.pid) + "/stat");
    std::string stat;
    if (job.pid <= 0 || !std::getline(in, stat)) return false;
    const size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z' &&
           stat[paren + 2] != 'X';
  }

  Status Save(const std::string& step) {
    st.step = step;
    return SaveState(state_file, st);
  }
  // The copy dies before the decision is written: a source that reads "aborted" may resume at
  // once.
  void Drop() {
    if (restored) KillTree(job.pid);
    (void)Save("aborted");
  }
  bool Cancelled() const { return options.cancel != nullptr && options.cancel->load(); }

  // The source is gone before RESUME: who decides.
  Status SourceGone(const Status& why) {
    if (restored && options.resolve) {
      // The fleet form: the owner's row is the truth; it decides every move within its timeout.
      progress("the source went away (" + why.message() + "); asking the job's owner");
      for (;;) {
        StatusOr<bool> committed = options.resolve();
        if (committed.ok() && *committed) {
          (void)Save("committed");
          Status s = ckpt::ResumeJob(&job);
          if (s.ok()) return Status::Ok();
          return s;
        }
        if (committed.ok() || Cancelled()) break;
        progress("the owner did not answer (" + committed.status().message() + "); asking again");
        std::this_thread::sleep_for(std::chrono::seconds(1));
      }
    }
    Drop();
    return Status(why.code(), "the source went away before the commit (" + why.message() +
                                  "); the restored copy was dropped");
  }

  // Post-copy: starts the page puller for the source's page server on `port_text`, at the
  // command connection's peer address; returns the CRIU to restore with.
  StatusOr<ckpt::Criu> StartPuller(const Channel& channel, const std::string& port_text) {
    char* end = nullptr;
    const long port = std::strtol(port_text.c_str(), &end, 10);
    if (end == port_text.c_str() || *end != '\0' || port <= 0 || port > 65535) {
      return InvalidArgument("RESTORE LAZY needs a port, got '" + port_text + "'");
    }
    StatusOr<ckpt::Criu> lazy = ckpt::LazyCriu(criu);
    if (!lazy.ok()) return lazy.status();
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    char host[INET6_ADDRSTRLEN] = {};
    if (getpeername(channel.fd(), reinterpret_cast<sockaddr*>(&peer), &len) != 0 ||
        getnameinfo(reinterpret_cast<sockaddr*>(&peer), len, host, sizeof(host), nullptr, 0,
                    NI_NUMERICHOST) != 0) {
      return IoError("cannot tell the source's address");
    }
    if (!page_tls.has_peer() && !options.lazy_plain) {
      return PermissionDenied(
          "the page stream is not secured (no PAGE-TLS before RESTORE LAZY); this destination "
          "takes plain page streams only with paladin receive --lazy-plain");
    }
    lazy_log = image + "/lazy-pages.log";
    progress("post-copy: pulling the job's memory from " + std::string(host) + ":" +
             std::to_string(port) + (page_tls.has_peer() ? " over TLS" : " over plain TCP") +
             " (CRIU patches " + lazy->lazy_patches + ")");
    StatusOr<pid_t> puller = ckpt::StartLazyPages(
        *lazy, image, host, static_cast<int>(port),
        page_tls.has_peer() ? page_tls.CriuArgs() : std::vector<std::string>{});
    if (!puller.ok()) {
      return Status(puller.status().code(), "criu lazy-pages: " + puller.status().message());
    }
    lazyd = *puller;
    return lazy;
  }

  // PAGE-TLS: this side's keys for the page stream, trusting only the source's certificate.
  Status AcceptPageTls(const std::string& certificate) {
    if (page_tls.has_peer()) return FailedPrecondition("PAGE-TLS was already given");
    StatusOr<PageTls> made = PageTls::Create(st.id + " destination");
    if (!made.ok()) return made.status();
    PALADIN_RETURN_IF_ERROR(made->TrustPeer(certificate));
    page_tls = std::move(*made);
    return Status::Ok();
  }

  // The fleet form of a post-copy move: the copy here runs before the owner has committed (it
  // commits once every page is here, asked by the source). Whenever this side is unsure of the
  // move (the source went away, the owner called the move off), the copy stops and the owner is
  // asked: committed, it continues; else it is killed. Stopped first, so that it never runs
  // beside a source that the owner's "no" lets resume. The source's BYE (`stop` false) comes
  // after the source was released (the owner committed) or resumed (the owner said no and the
  // copy here was called off meanwhile): the happy path keeps running while it asks.
  Status SettleProvisional(const std::string& why, bool stop = true) {
    progress(why + "; asking the job's owner whether the move committed" +
             (stop ? " (the copy here stops meanwhile)" : ""));
    for (uint32_t pid :
         stop ? quota::ProcessTree(static_cast<uint32_t>(job.pid)) : std::vector<uint32_t>()) {
      kill(static_cast<pid_t>(pid), SIGSTOP);
    }
    StatusOr<bool> committed = Unavailable("not asked");
    for (int tries = 0; tries < 3600; ++tries) {
      committed = options.resolve();
      if (committed.ok()) break;
      if (tries % 10 == 0) {
        progress("the owner did not answer (" + committed.status().message() + "); asking again");
      }
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    if (committed.ok() && *committed) {
      (void)Save("committed");
      Status s = stop ? ckpt::ResumeJob(&job) : Status::Ok();
      if (!s.ok()) return s;
      progress("the move committed; the job runs here");
      return Status::Ok();
    }
    KillTree(job.pid);
    EndLazyPages(0);
    (void)Save("aborted");
    return FailedPrecondition(why + "; the move did not commit: the copy here was dropped");
  }

  // A command from the source, for a copy that runs here provisionally: waits as long as the
  // pages take (the source's dump bounds that), watching for the owner's call-off.
  StatusOr<std::string> ReceiveProvisional(Channel* channel) {
    for (;;) {
      StatusOr<std::string> buffered = channel->Receive(0);
      if (buffered.ok()) return buffered;
      if (Cancelled()) return FailedPrecondition("the job's owner called the move off");
      pollfd p{channel->fd(), POLLIN, 0};
      if (poll(&p, 1, 200) > 0) return channel->Receive(30);
    }
  }

  // Carries out the source's commands until RESUME, ABORT or BYE. OK: the job runs here.
  Status Obey(Channel* channel) {
    for (;;) {
      const bool provisional = st.step == "provisional";
      StatusOr<std::string> command =
          provisional ? ReceiveProvisional(channel) : channel->Receive(options.command_timeout_s);
      if (!command.ok()) {
        if (provisional) return SettleProvisional(command.status().message());
        if (st.step == "committed") return Status::Ok();  // the answer may have been lost
        if (st.step == "aborted") return FailedPrecondition("the move was aborted");
        return SourceGone(command.status());
      }
      const bool lazy = command->rfind("RESTORE LAZY ", 0) == 0;
      if (command->rfind("PAGE-TLS ", 0) == 0 && !restored && st.step == "received") {
        Status s = AcceptPageTls(command->substr(9));
        (void)channel->Send(s.ok() ? "OK " + page_tls.certificate() : "ERR " + s.message());
        continue;
      }
      if ((*command == "RESTORE" || lazy) && !restored && st.step == "received") {
        // Streaming pre-copy: the restore reads the memory where the page server put it.
        StatusOr<std::string> from = image;
        if (sink != nullptr) {
          from = lazy ? InvalidArgument("a streaming pre-copy move cannot restore lazily")
                      : sink->Finish(image, 60);
          if (!from.ok()) {
            (void)Save("aborted");
            (void)channel->Send("ERR the streamed memory: " + from.status().message());
            return from.status();
          }
          st.image = *from;  // where a restore under way writes its pid (the keeper's)
        }
        (void)Save("restoring");
        StatusOr<ckpt::Criu> lazy_criu = criu;
        if (lazy) {
          lazy_criu = StartPuller(*channel, command->substr(13));
          if (!lazy_criu.ok()) {
            (void)Save("aborted");
            (void)channel->Send("ERR " + lazy_criu.status().message());
            return lazy_criu.status();
          }
        }
        ckpt::RestoreOptions2 restore;
        restore.lazy_pages = lazy;
        restore.gpu_map = options.gpu_map;
        restore.placement = options.placement;
        restore.leave_stopped = true;
        restore.verified = true;  // by the transfer, as it committed the image
        restore.lease_fd = options.lease_fd;
        ckpt::PhaseTimes times;
        StatusOr<ckpt::JobRecord> got =
            ckpt::RestoreJob(*lazy_criu, *from, restore, progress, &times);
        if (sink != nullptr) sink->Remove(image);  // the memory is the restored job's now
        if (!got.ok()) {
          if (lazyd > 0) kill(-lazyd, SIGKILL);
          if (lazyd > 0) (void)ckpt::ServingResult(lazyd, "criu lazy-pages", lazy_log, 10);
          (void)Save("aborted");
          (void)channel->Send("ERR " + got.status().message());
          return got.status();
        }
        job = *got;
        restored = true;
        st.pid = job.pid;
        st.run_dir = job.run_dir;
        if (lazyd > 0) WatchLazyPages();
        (void)Save("restored");
        if (options.restored) options.restored(job);
        if (Status sent = SendOrDrop(channel, "RESTORE-answer", "OK " + std::to_string(job.pid));
            !sent.ok()) {
          return SourceGone(sent);
        }
        answered_restore = true;
        CrashPoint("dst-after-restore");
      } else if (*command == "RESUME" && restored) {
        if (st.step == "aborted") {
          (void)channel->Send("ERR aborted: the destination dropped its copy");
          continue;
        }
        if (lazyd > 0 && options.resolve) {
          // The fleet form, post-copy: the copy runs before the commit, pulling its memory; the
          // owner commits once every page is here (asked by the source).
          if (st.step == "restored") {
            PALADIN_RETURN_IF_ERROR(Save("provisional"));
            Status s = ckpt::ResumeJob(&job);
            if (!s.ok()) {
              Drop();
              (void)channel->Send("ERR aborted: " + s.message());
              return s;
            }
          }
          (void)SendOrDrop(channel, "RESUME-answer", "OK");
          CrashPoint("dst-during-pages");
          continue;
        }
        if (st.step != "committed") {
          // The decision: written before the job runs here, so that whoever asks later hears it.
          PALADIN_RETURN_IF_ERROR(Save("committed"));
          Status s = ckpt::ResumeJob(&job);
          if (!s.ok()) {
            // Nobody has heard "committed" yet: it can still be taken back.
            Drop();
            (void)channel->Send("ERR aborted: " + s.message());
            return s;
          }
        }
        CrashPoint("dst-after-commit");
        (void)SendOrDrop(channel, "RESUME-answer", "OK");
        // The fleet form: the owner's row says who runs the job; nothing more to hear.
        if (options.resolve) return Status::Ok();
      } else if (command->rfind("PAGES-", 0) == 0 && lazyd > 0 &&
                 (st.step == "committed" || st.step == "provisional")) {
        // The source's dump ended: with success, every page left it (and the puller, which said
        // so, ends); the copy here must still run for the move to hold.
        const bool done = command->rfind("PAGES-DONE ", 0) == 0;
        if (!done) KillTree(job.pid);
        EndLazyPages(done ? 60 : 0);
        if (done && !lazy_failed.load() && CopyRuns()) {
          progress("every page has arrived; the job runs here");
          (void)channel->Send("OK runs");
          continue;
        }
        const std::string why = !done                ? "the source's page transfer failed"
                                : lazy_failed.load() ? lazy_error
                                                     : "the restored copy is gone";
        KillTree(job.pid);
        (void)Save("aborted");
        progress(why +
                 "; the copy here was dropped and the job resumes at the source (what it "
                 "did here since the move is lost)");
        (void)channel->Send(done ? "ERR lost: " + why : "OK dropped");
      } else if (*command == "BYE " + st.id && st.step == "provisional") {
        // The fleet form: the source is done (released after the owner's commit, or resumed
        // after its "no"); the owner's row says which.
        st.acked = true;
        (void)channel->Send("OK");
        return SettleProvisional("the source is done with the move", false);
      } else if (*command == "ABORT") {
        if (st.step == "committed") {
          (void)channel->Send("ERR committed: the job runs here");
          continue;
        }
        st.acked = true;  // the source decided to give up: it will not ask
        Drop();
        (void)channel->Send("OK");
        return FailedPrecondition("the source abandoned the move; the restored copy was dropped");
      } else if (command->rfind("BYE", 0) == 0) {
        st.acked = true;
        (void)SaveState(state_file, st);
        (void)channel->Send("OK");
        if (st.step == "committed") return Status::Ok();
        return FailedPrecondition("the move was aborted");
      } else if (command->rfind("OUTCOME ", 0) == 0) {
        (void)channel->Send(command->substr(8) == st.id ? "OK " + st.step : "OK unknown");
      } else {
        (void)channel->Send("ERR unexpected command '" + *command + "'");
      }
    }
  }
};

}  // namespace

StatusOr<ckpt::JobRecord> ServeOneMigration(const ckpt::Criu& criu,
                                            const DestinationOptions& options,
                                            const ckpt::Progress& progress) {
  const std::string image = options.dir + "/image";
  const std::string state_file = options.dir + "/migration.state";
  StatusOr<Listener> commands = Listener::Listen(options.bind_address, options.port + 1);
  if (!commands.ok()) return commands.status();
  transfer::ReceiverOptions receive;
  receive.out_dir = image;
  receive.token = options.token;
  receive.bind_address = options.bind_address;
  receive.port = options.port;
  receive.local_criu_version = criu.version;
  receive.idle_timeout_s = 600;  // a source that gives up must not keep the destination waiting
  StatusOr<transfer::Fault> fault = transfer::FaultFromEnv();
  if (fault.ok()) receive.fault = *fault;
  StatusOr<std::unique_ptr<transfer::Receiver>> receiver = transfer::Receiver::Listen(receive);
  if (!receiver.ok()) return receiver.status();
  progress("listening on " + options.bind_address + ":" + std::to_string(options.port) +
           " (images) and :" + std::to_string(options.port + 1) + " (commands)");
  StatusOr<Arrival> arrival = AwaitSource(criu, options, &*commands, receiver->get(), progress);
  if (!arrival.ok()) return arrival.status();
  Channel* channel = &arrival->channel;
  Destination d{criu, options, image, state_file, progress};
  d.st.role = "destination";
  d.st.id = arrival->id;
  d.sink = arrival->sink.get();
  d.st.image = image;
  d.st.wait_s = options.answer_for_s;
  PALADIN_RETURN_IF_ERROR(d.Save("received"));
  // From here a stopped copy may exist: if this process dies, the keeper settles the move.
  Keeper keeper;
  if (!options.keeper_exe.empty()) {
    StatusOr<Keeper> k =
        Keeper::Start(options.keeper_exe, state_file, options.token, commands->fd());
    if (!k.ok()) {
      (void)channel->Send("ERR " + k.status().message());
      return k.status();
    }
    keeper = std::move(*k);
  }
  PALADIN_RETURN_IF_ERROR(channel->Send("OK"));
  Status obeyed = d.Obey(&*channel);
  // The direct form: the source may have lost the last answer and ask again.
  if (!options.resolve && options.answer_for_s > 0 && d.answered_restore &&
      (d.st.step == "committed" || d.st.step == "aborted") && !d.st.acked) {
    AnswerQueries(&*commands, state_file, options.token, options.answer_for_s, progress);
  }
  // A post-copy move whose source went silent: the puller still watches the copy here.
  d.EndLazyPages(d.st.step == "committed" ? 7 * 24 * 3600.0 : 10);
  keeper.Done();
  if (!obeyed.ok()) return obeyed;
  return d.job;
}

int RunKeeper(const std::string& state_file) {
  const auto say = [](const std::string& line) {
    std::fprintf(stderr, "paladin keeper: %s\n", line.c_str());
    std::fflush(stderr);
  };
  const char* token_env = getenv("PALADIN_MIGRATE_KEEPER_TOKEN");
  const std::string token = token_env != nullptr ? token_env : "";
  unsetenv("PALADIN_MIGRATE_KEEPER_TOKEN");
  // Waits for this side's process: a byte when it settled the move, end of file when it died.
  char byte = 0;
  ssize_t n;
  do {
    n = read(3, &byte, 1);
  } while (n < 0 && errno == EINTR);
  if (n == 1 && byte == 'd') return 0;
  StatusOr<MoveState> st = LoadState(state_file);
  if (!st.ok()) {
    say(st.status().message());
    return 1;
  }
  say("the " + st->role + "'s process ended at step " + st->step + " of migration " + st->id +
      "; settling it");
  if (st->role == "source") {
    StatusOr<ckpt::JobRecord> job = ckpt::ReadJob(st->run_dir);
    if (!job.ok()) {
      say(job.status().message());
      return 1;
    }
    // On one host the destination's copy writes its record into the same run directory.
    job->pid = st->pid;
    // A copy let go for its file locks comes back from the image, with this machine's CRIU.
    StatusOr<ckpt::Criu> criu = ckpt::Criu{};
    if (st->released) {
      criu = ckpt::LocateCriu();
      if (criu.ok()) {
        Status probed = ckpt::ProbeBreakpoints(&*criu, ckpt::RunBase());
        if (!probed.ok()) criu = probed;
      }
      if (!criu.ok()) {
        say("no CRIU to restore the job from its image " + st->image + ": " +
            criu.status().message());
        return 1;
      }
    }
    const std::string& step = st->step;
    if (step == "checkpointing" || step == "sending" || step == "restoring") {
      // RESUME was never sent: the destination cannot commit; its copy goes when it hears the
      // connection end.
      Status s = Status::Ok();
      if (st->released) {
        KillTree(st->pid);  // let go before this side died unless its pid is still recorded
        s = BackHere(*criu, &*job, *st, say);
      } else {
        s = ResumeHere(&*job, 5);
      }
      st->step = s.ok() || !st->released ? "resumed" : "in_doubt";
      (void)SaveState(state_file, *st);
      say(s.ok() ? (st->released ? "restored the job here from its image" : "resumed the job here")
                 : "getting the job back here failed: " + s.message());
    } else if (step == "resume_sent") {
      Status s = SettleSource(*criu, &*job, &*st, state_file, token, say);
      say(s.ok() ? "the destination runs the job; the copy here was released" : s.message());
    }
    if (!st->keep_image && (st->step == "done" || st->step == "resumed")) {
      std::error_code ec;
      fs::remove_all(st->image, ec);
    }
    return 0;
  }
  // The destination.
  Listener listener(4);
  if (st->step == "received" || st->step == "restoring" || st->step == "restored") {
    int64_t pid = st->pid;
    if (pid == 0 && st->step == "restoring") {
      // A restore still under way finishes without this side's process: wait for its copy.
      const std::string pidfile = st->image + "/restored.pid";
      for (int i = 0; i < 600 && pid == 0; ++i) {
        std::ifstream in(pidfile);
        if (!(in >> pid)) pid = 0;
        if (pid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    }
    KillTree(pid);
    st->step = "aborted";
    (void)SaveState(state_file, *st);
    say("dropped the restored copy" + (pid > 0 ? " (pid " + std::to_string(pid) + ")" : ""));
  } else if (st->step == "committed") {
    // The decision stands: the copy runs, even if this side died before letting it go. Its pid
    // is this side's own record's: the run directory's may have been rewritten by the job.
    StatusOr<ckpt::JobRecord> job = ckpt::ReadJob(st->run_dir);
    if (job.ok() && st->pid > 0) job->pid = st->pid;
    if (job.ok()) {
      Status s = ckpt::ResumeJob(&*job);
      say(s.ok() ? "the job runs here" : "resuming the job failed: " + s.message());
    }
  }
  if (!st->acked) AnswerQueries(&listener, state_file, token, st->wait_s, say);
  return 0;
}

}  // namespace paladin::migrate
