// ServeOneMigration: the destination's side of a move (include/paladin/migrate/migrate.h). It
// takes the image (stream.cc's AwaitSource), then carries out the source's commands: RESTORE
// (stopped; lazily for post-copy, with postcopy_destination.cc's puller), RESUME, the post-copy
// PAGES- verdicts, ABORT, BYE; and answers questions about the move once it is decided.
#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "migrate_internal.h"
#include "paladin/base/process.h"
#include "paladin/migrate/owned_dir.h"
#include "paladin/transfer/transfer.h"
#include "stream.h"

namespace paladin::migrate {

StatusOr<std::string> ReceiveUnlessCancelled(Channel* channel, const std::atomic<bool>* cancel,
                                             double timeout_s, const std::string& called_off) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    StatusOr<std::string> buffered = channel->Receive(0);
    if (buffered.ok()) return buffered;
    if (cancel != nullptr && cancel->load()) return FailedPrecondition(called_off);
    if (Since(start) > timeout_s) {
      return Unavailable("the source said nothing for " +
                         std::to_string(static_cast<int>(timeout_s)) + " s");
    }
    pollfd p{channel->fd(), POLLIN, 0};
    if (poll(&p, 1, 200) > 0) return channel->Receive(30);
  }
}

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
      progress("nobody asked about migration " + st->id + " (" + MoveStepName(st->step) +
               "); no longer answering");
      return;
    }
    StatusOr<Channel> c = listener->Accept(std::min(left, 1.0));
    if (!c.ok()) continue;
    if (!CheckProof(&*c, token, 5).ok()) continue;
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
      const bool committed = st->step == MoveStep::kCommitted;
      if (verb == "OUTCOME") {
        (void)c->Send(std::string("OK ") + MoveStepName(st->step));
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

namespace {

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
  PagePuller puller{progress};    // post-copy
  // Streaming pre-copy: the page server that took the job's memory (owned by the caller).
  PageSink* sink = nullptr;

  Status Save(MoveStep step) { return SaveStep(state_file, &st, step); }
  // The copy dies before the decision is written: a source that reads "aborted" may resume at
  // once.
  void Drop() {
    if (restored) KillTree(job.pid);
    (void)Save(MoveStep::kAborted);
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
          (void)Save(MoveStep::kCommitted);
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
         stop ? base::ProcessTree(static_cast<uint32_t>(job.pid)) : std::vector<uint32_t>()) {
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
      (void)Save(MoveStep::kCommitted);
      Status s = stop ? ckpt::ResumeJob(&job) : Status::Ok();
      if (!s.ok()) return s;
      progress("the move committed; the job runs here");
      return Status::Ok();
    }
    KillTree(job.pid);
    puller.End(0);
    (void)Save(MoveStep::kAborted);
    return FailedPrecondition(why + "; the move did not commit: the copy here was dropped");
  }

  // RESTORE [LAZY port]: the job restored here, stopped (post-copy: without its memory, which the
  // puller brings). A Status: the move is over here, with it; none: the next command.
  std::optional<Status> Restore(Channel* channel, const std::string& command, bool lazy) {
    if (options.before_restore) {
      StatusOr<ckpt::Manifest> manifest = ckpt::ReadManifest(image);
      const Status ready = manifest.ok() ? options.before_restore(*manifest) : manifest.status();
      if (!ready.ok()) {
        (void)Save(MoveStep::kAborted);
        (void)channel->Send("ERR " + ready.message());
        return ready;
      }
    }
    // Streaming pre-copy: the restore reads the memory where the page server put it.
    StatusOr<std::string> from = image;
    if (sink != nullptr) {
      from = lazy ? InvalidArgument("a streaming pre-copy move cannot restore lazily")
                  : sink->Finish(image, 60);
      if (!from.ok()) {
        (void)Save(MoveStep::kAborted);
        (void)channel->Send("ERR the streamed memory: " + from.status().message());
        return from.status();
      }
      st.image = *from;  // where a restore under way writes its pid (the keeper's)
    }
    (void)Save(MoveStep::kRestoring);
    StatusOr<ckpt::Criu> lazy_criu = criu;
    if (lazy) {
      lazy_criu = puller.Start(criu, options.lazy_criu, *channel, command.substr(13), image,
                               options.lazy_plain);
      if (!lazy_criu.ok()) {
        (void)Save(MoveStep::kAborted);
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
    StatusOr<ckpt::JobRecord> got = ckpt::RestoreJob(*lazy_criu, *from, restore, progress, &times);
    if (sink != nullptr) sink->Remove(image);  // the memory is the restored job's now
    if (!got.ok()) {
      puller.Stop();
      (void)Save(MoveStep::kAborted);
      (void)channel->Send("ERR " + got.status().message());
      return got.status();
    }
    job = *got;
    restored = true;
    st.pid = job.pid;
    st.run_dir = job.run_dir;
    if (puller.started()) puller.Watch(job.pid);
    (void)Save(MoveStep::kRestored);
    if (options.restored) options.restored(job);
    if (Status sent = SendOrDrop(channel, "RESTORE-answer", "OK " + std::to_string(job.pid));
        !sent.ok()) {
      return SourceGone(sent);
    }
    answered_restore = true;
    CrashPoint("dst-after-restore");
    return std::nullopt;
  }

  // RESUME: the commit (the direct form) or, in a fleet post-copy move, the copy here running
  // provisionally. A Status: the move is over here, with it; none: the next command.
  std::optional<Status> Resume(Channel* channel) {
    if (st.step == MoveStep::kAborted) {
      (void)channel->Send("ERR aborted: the destination dropped its copy");
      return std::nullopt;
    }
    if (puller.started() && options.resolve) {
      // The fleet form, post-copy: the copy runs before the commit, pulling its memory; the
      // owner commits once every page is here (asked by the source).
      if (st.step == MoveStep::kRestored) {
        PALADIN_RETURN_IF_ERROR(Save(MoveStep::kProvisional));
        Status s = ckpt::ResumeJob(&job);
        if (!s.ok()) {
          Drop();
          (void)channel->Send("ERR aborted: " + s.message());
          return s;
        }
      }
      (void)SendOrDrop(channel, "RESUME-answer", "OK");
      CrashPoint("dst-during-pages");
      return std::nullopt;
    }
    if (st.step != MoveStep::kCommitted) {
      // The decision: written before the job runs here, so that whoever asks later hears it.
      PALADIN_RETURN_IF_ERROR(Save(MoveStep::kCommitted));
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
    return std::nullopt;
  }

  // PAGES-DONE or PAGES-FAILED: the source's dump ended. With success, every page left it (and
  // the puller, which said so, ends); the copy here must still run for the move to hold.
  void PagesVerdict(Channel* channel, const std::string& command) {
    const bool done = command.rfind("PAGES-DONE ", 0) == 0;
    if (!done) KillTree(job.pid);
    puller.End(done ? 60 : 0);
    if (done && !puller.failed() && ProcessLives(job.pid)) {
      progress("every page has arrived; the job runs here");
      (void)channel->Send("OK runs");
      return;
    }
    const std::string why = !done             ? "the source's page transfer failed"
                            : puller.failed() ? puller.error()
                                              : "the restored copy is gone";
    KillTree(job.pid);
    (void)Save(MoveStep::kAborted);
    progress(why +
             "; the copy here was dropped and the job resumes at the source (what it "
             "did here since the move is lost)");
    (void)channel->Send(done ? "ERR lost: " + why : "OK dropped");
  }

  // Carries out the source's commands until RESUME, ABORT or BYE. OK: the job runs here.
  Status Obey(Channel* channel) {
    for (;;) {
      // A copy that runs here provisionally waits for the source as long as the pages take (the
      // source's dump bounds that), watching for the owner's call-off.
      const bool provisional = st.step == MoveStep::kProvisional;
      StatusOr<std::string> command =
          provisional ? ReceiveUnlessCancelled(channel, options.cancel,
                                               std::numeric_limits<double>::infinity(),
                                               "the job's owner called the move off")
                      : channel->Receive(options.command_timeout_s);
      if (!command.ok()) {
        if (provisional) return SettleProvisional(command.status().message());
        if (st.step == MoveStep::kCommitted) return Status::Ok();  // the answer may have been lost
        if (st.step == MoveStep::kAborted) return FailedPrecondition("the move was aborted");
        return SourceGone(command.status());
      }
      const bool lazy = command->rfind("RESTORE LAZY ", 0) == 0;
      if ((*command == "RESTORE" || lazy) && !restored && st.step == MoveStep::kReceived) {
        if (std::optional<Status> over = Restore(channel, *command, lazy)) return *over;
      } else if (*command == "RESUME" && restored) {
        if (std::optional<Status> over = Resume(channel)) return *over;
      } else if (command->rfind("PAGES-", 0) == 0 && puller.started() &&
                 (st.step == MoveStep::kCommitted || st.step == MoveStep::kProvisional)) {
        PagesVerdict(channel, *command);
      } else if (*command == "BYE " + st.id && st.step == MoveStep::kProvisional) {
        // The fleet form: the source is done (released after the owner's commit, or resumed
        // after its "no"); the owner's row says which.
        st.acked = true;
        (void)channel->Send("OK");
        return SettleProvisional("the source is done with the move", false);
      } else if (*command == "ABORT") {
        if (st.step == MoveStep::kCommitted) {
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
        if (st.step == MoveStep::kCommitted) return Status::Ok();
        return FailedPrecondition("the move was aborted");
      } else if (command->rfind("OUTCOME ", 0) == 0) {
        (void)channel->Send(command->substr(8) == st.id ? std::string("OK ") + MoveStepName(st.step)
                                                        : "OK unknown");
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
  // Held until the move is over here: a sweep after this process's death removes the folder
  // (RemoveOrphanedMoveFolders), never while it lives.
  StatusOr<OwnedDir> owned = OwnedDir::Claim(options.dir);
  if (!owned.ok()) return owned.status();
  StatusOr<Listener> commands = Listener::Listen(options.bind_address, options.port + 1);
  if (!commands.ok()) return commands.status();
  transfer::ReceiverOptions receive;
  receive.out_dir = image;
  receive.token = options.token;
  receive.bind_address = options.bind_address;
  receive.port = options.port;
  receive.local_criu_version = criu.version;
  receive.idle_timeout_s = 600;  // a source that gives up must not keep the destination waiting
  // Restored at once, while the source still holds the job: no fsync in the pause.
  receive.durable = false;
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
  d.st.role = MoveRole::kDestination;
  d.st.id = arrival->id;
  d.sink = arrival->sink.get();
  d.st.image = image;
  d.st.wait_s = options.answer_for_s;
  PALADIN_RETURN_IF_ERROR(d.Save(MoveStep::kReceived));
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
      (d.st.step == MoveStep::kCommitted || d.st.step == MoveStep::kAborted) && !d.st.acked) {
    AnswerQueries(&*commands, state_file, options.token, options.answer_for_s, progress);
  }
  // A post-copy move whose source went silent: the puller still watches the copy here.
  d.puller.End(d.st.step == MoveStep::kCommitted ? 7 * 24 * 3600.0 : 10);
  keeper.Done();
  if (!obeyed.ok()) return obeyed;
  return d.job;
}

}  // namespace paladin::migrate
