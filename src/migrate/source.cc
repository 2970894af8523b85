// Migrate: the source's side of a move (include/paladin/migrate/migrate.h). It checkpoints the
// job and leaves it stopped (a post-copy dump goes on serving its memory; a streaming one sends
// it to the destination's page server), sends the image, has the destination verify and restore
// it, then ends the move by its form: post-copy (postcopy_source.cc), fleet (fleet_source.cc) or
// the direct pre-copy move's end below. Every way back: source_settle.cc.
#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "migrate_internal.h"
#include "paladin/transfer/transfer.h"
#include "stream.h"

namespace paladin::migrate {

namespace fs = std::filesystem;

namespace {

// The address this host sends from to reach HOST:PORT (a UDP socket's connect sends nothing):
// the post-copy page relay listens there only, not on every interface.
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
  st.role = MoveRole::kSource;
  st.id = options.id.empty() ? RandomId() : options.id;
  st.step = MoveStep::kCheckpointing;
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
  auto save = [&](MoveStep step) { return SaveStep(state_file, &st, step); };

  ckpt::CheckpointOptions checkpoint;
  checkpoint.after = ckpt::CheckpointOptions::After::kLeaveStopped;
  // Post-copy: the dump goes on running after CheckpointJob, serving the job's memory.
  pid_t lazy_dump = 0;
  const std::string lazy_log = image + ".dump.log";
  const int lazy_port = options.lazy_port > 0 ? options.lazy_port : options.port + 2;
  // The page stream crosses the network between two page relays (page_relay.h): the dump's page
  // server serves on a socket pair with this side's relay, which listens on
  // lazy_address:lazy_port and seals every frame (unless --lazy-plain). A secret both sides
  // derive from the command channel's session key and a nonce sent with RESTORE LAZY
  // authenticates every link between them and keys the seal.
  std::optional<Listener> relay_listener;
  PageRelay relay;
  SocketEnd dump_end;   // the dump's end of the socket pair, closed once it runs
  SocketEnd relay_end;  // the relay's, taken by it
  if (options.lazy) {
    StatusOr<std::pair<SocketEnd, SocketEnd>> ends = CriuSocketPair();
    StatusOr<Listener> listening = Listener::Listen(lazy_address, lazy_port);
    Status ready = !ends.ok() ? ends.status() : listening.status();
    if (!ready.ok()) {
      (void)save(MoveStep::kResumed);  // nothing was stopped yet
      keeper.Done();
      return Status(ready.code(), "the page relay: " + ready.message());
    }
    relay_listener.emplace(std::move(*listening));
    dump_end = std::move(ends->first);
    relay_end = std::move(ends->second);
    checkpoint.lazy_socket = dump_end.fd();
    checkpoint.lazy_log = lazy_log;
    checkpoint.lazy_dump = &lazy_dump;
    report.mode = "post-copy";
  }
  // Streaming pre-copy: the page server there is set up before the dump, on the command channel
  // (which then goes on to BEGIN once the image is there).
  StatusOr<PageStream> stream = FailedPrecondition("not streaming");
  bool streaming = options.stream;
  if (streaming) {
    stream = OpenPageStream(options.host, options.port + 1, options.token, st.id,
                            JobMemoryBytes(*job), progress);
    // Refused (OpenPageStream): the destination is up but started no page server, and waits for
    // this side to connect again.
    if (!stream.ok() && options.image_if_refused &&
        stream.status().code() == StatusCode::kFailedPrecondition) {
      report.mode_note = "streaming refused: " + stream.status().message() + "; moved by image";
      progress(report.mode_note);
      streaming = false;
    } else if (!stream.ok()) {
      (void)save(MoveStep::kResumed);  // nothing was stopped yet
      keeper.Done();
      return stream.status();
    }
  }
  // The dump into the page server: the patched CRIU's where it is installed (StreamCriu).
  ckpt::Criu dump_criu = criu;
  if (streaming) {
    stream->Apply(&checkpoint);
    report.mode = "stream";
    dump_criu = ckpt::StreamCriu(criu);
    if (!dump_criu.lazy_patches.empty()) {
      progress("the streaming dump runs the CRIU of scripts/criu_lazy.sh (patches " +
               dump_criu.lazy_patches + ")");
    }
  }
  // Before the destination may run the job: killing the dump lets the tree go (CRIU held it).
  auto stop_dump = [&] {
    if (lazy_dump <= 0) return;
    StopServing(lazy_dump, "the post-copy dump", lazy_log, 10);
    lazy_dump = 0;
  };
  progress("checkpointing " + job->name + " (it stays stopped here until the move commits)" +
           (options.lazy ? "; post-copy: its memory stays here, served on " + lazy_address + ":" +
                               std::to_string(lazy_port)
                         : ""));
  const auto paused = std::chrono::steady_clock::now();
  StatusOr<ckpt::PhaseTimes> times =
      ckpt::CheckpointJob(dump_criu, job, image, checkpoint, progress);
  dump_end.Close();  // the dump's own now: its end is seen once the dump ends
  if (!times.ok()) {
    if (lazy_dump > 0) {
      stop_dump();
      (void)ResumeHere(job, 1);
    }
    (void)save(MoveStep::kResumed);  // the job keeps running
    keeper.Done();
    if (streaming) {
      return Status(times.status().code(), "the streaming dump failed (" +
                                               times.status().message() +
                                               "); the job keeps running here");
    }
    return times.status();
  }
  report.times = *times;
  if (streaming) {
    // The dump's end of the socket pair goes; both relays settle the stream (the dump's exit
    // already says the page server has every page).
    const Status settled = stream->Finish(30);
    report.page_stream_resumes = stream->relay.resumes();
    if (!settled.ok()) {
      cleanup();
      return Abandon(criu, job, nullptr,
                     Status(settled.code(), "the page relay: " + settled.message()), &st,
                     state_file, &keeper, progress);
    }
  }
  // The file locks the image holds: a direct pre-copy move lets its stopped copy here go before
  // the destination restores (LetGoForLocks). A post-copy move's copy serves the job's memory, a
  // streaming move's image holds none, and a fleet move's job is its agent's: they keep theirs.
  StatusOr<int> file_locks = ckpt::FileLocksInImage(image);
  if (!file_locks.ok()) {
    progress("warning: cannot tell the job's file locks (" + file_locks.status().message() +
             "); its copy here stays until the move commits");
    file_locks = 0;
  } else if (*file_locks > 0 && (options.lazy || streaming || options.commit)) {
    progress("the job holds " + std::to_string(*file_locks) +
             " file lock(s), which its stopped copy here keeps until the move commits: on a file "
             "system the destination shares, its restore waits for them");
  } else if (*file_locks > 0) {
    progress("the job holds " + std::to_string(*file_locks) +
             " file lock(s): its stopped copy here goes before the destination restores it, and "
             "a failed move restores it here from its image");
  }
  const bool let_go = *file_locks > 0 && !options.lazy && !streaming && !options.commit;
  MaybeCorrupt(image, progress);
  CrashPoint("src-after-checkpoint");
  (void)save(MoveStep::kSending);

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

  StatusOr<Channel> channel = streaming ? StatusOr<Channel>(std::move(stream->channel))
                                        : Channel::Connect(options.host, options.port + 1, 60);
  if (!channel.ok()) {
    stop_dump();
    cleanup();
    return Abandon(criu, job, nullptr, channel.status(), &st, state_file, &keeper, progress);
  }
  StatusOr<std::string> hello = std::string();
  if (!streaming) {
    const Status proved = ProveToken(&*channel, options.token, 30);
    if (!proved.ok()) hello = proved;
  }
  if (hello.ok()) hello = channel->Call("BEGIN " + st.id, 30);
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
  // The source's page relay, now that the channel it derives its secret from is there; the
  // destination's connects once it has RESTORE LAZY's nonce.
  std::string relay_nonce;
  if (options.lazy) {
    StatusOr<std::string> nonce = RandomHex(32);
    StatusOr<std::string> secret =
        nonce.ok() ? PageRelaySecret(*channel, *nonce) : StatusOr<std::string>(nonce.status());
    PageRelayOptions relay_options;
    relay_options.seal = !options.lazy_plain;
    StatusOr<PageRelay> serving =
        secret.ok() ? PageRelay::Serve(std::move(*relay_listener), std::move(relay_end), *secret,
                                       relay_options, progress)
                    : StatusOr<PageRelay>(secret.status());
    const Status started = serving.status();
    if (started.ok()) {
      relay_nonce = *nonce;
      relay = std::move(*serving);
    } else {
      stop_dump();
      cleanup();
      return Abandon(criu, job, &*channel,
                     Status(started.code(), "the page relay: " + started.message()), &st,
                     state_file, &keeper, progress);
    }
  }
  (void)save(MoveStep::kRestoring);
  progress("the destination verified the image; restoring it there, stopped");
  const auto restoring = std::chrono::steady_clock::now();
  StatusOr<std::string> restored =
      CallOrDrop(&*channel, "RESTORE",
                 options.lazy ? "RESTORE LAZY " + std::to_string(lazy_port) + " " + relay_nonce +
                                    (options.lazy_plain ? " plain" : "")
                              : std::string("RESTORE"),
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
  if (options.lazy) {
    Status serves = DumpStillServes(lazy_dump, lazy_log);
    if (!serves.ok()) {
      stop_dump();
      cleanup();
      return Abandon(criu, job, &*channel, serves, &st, state_file, &keeper, progress);
    }
  }
  if (options.lazy) {
    report.total_s = 0;
    StatusOr<MigrateReport> moved =
        PostCopy(job, &*channel, &st, state_file, &keeper, lazy_dump, lazy_log, options, paused,
                 &report, *restored, cleanup, progress);
    if (moved.ok()) moved->page_stream_resumes = relay.resumes();
    return moved;
  }

  auto released = [&]() -> StatusOr<MigrateReport> {
    report.pause_s = Since(paused);
    if (!st.released) Release(job);
    image_is_the_job = false;
    (void)save(MoveStep::kDone);
    (void)SendOrDrop(&*channel, "BYE", "BYE " + st.id);
    keeper.Done();
    RecordMoved(job, options, *restored, image, &report);
    cleanup();
    std::error_code ec;
    fs::remove(state_file, ec);
    return report;
  };

  if (options.commit) {
    return FleetPreCopyEnd(criu, job, &*channel, &st, state_file, &keeper, options, released,
                           cleanup, progress);
  }

  // The direct form: the destination owns the commit. From here on the job resumes here only if
  // the destination says it did not take it.
  PALADIN_RETURN_IF_ERROR(save(MoveStep::kResumeSent));
  CrashPoint("src-before-resume");
  job->state = ckpt::RunState::kMoving;
  (void)ckpt::WriteJob(*job);
  StatusOr<std::string> resumed = CallOrDrop(&*channel, "RESUME", "RESUME", kAnswerTimeoutS);
  CrashPoint("src-after-resume");
  if (resumed.ok()) return released();
  job->state = ckpt::RunState::kStopped;
  if (SaidAborted(resumed.status())) {
    cleanup();
    Status s = BackHere(criu, job, st, progress);
    (void)save(StepAfterBack(s, st));
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
    RecordMoved(job, options, *restored, image, &report);
    cleanup();
    return report;
  }
  if (st.step == MoveStep::kResumed) cleanup();
  return settled;
}

}  // namespace paladin::migrate
