// RunKeeper: the keeper of one side of a direct move (`paladin migrate-keeper`, started through
// state.h's Keeper). If its side's process dies before the move is settled, it settles the move
// from the side's state file: the source's job resumed, restored from its image or released; the
// destination's copy killed or resumed, and the source's questions answered.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "migrate_internal.h"

namespace paladin::migrate {

namespace fs = std::filesystem;

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
  say(std::string("the ") + MoveRoleName(st->role) + "'s process ended at step " +
      MoveStepName(st->step) + " of migration " + st->id + "; settling it");
  if (st->role == MoveRole::kSource) {
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
    const MoveStep step = st->step;
    if (step == MoveStep::kCheckpointing || step == MoveStep::kSending ||
        step == MoveStep::kRestoring) {
      // RESUME was never sent: the destination cannot commit; its copy goes when it hears the
      // connection end.
      Status s = Status::Ok();
      if (st->released) {
        KillTree(st->pid);  // let go before this side died unless its pid is still recorded
        s = BackHere(*criu, &*job, *st, say);
      } else {
        s = ResumeHere(&*job, 5);
      }
      st->step = StepAfterBack(s, *st);
      (void)SaveState(state_file, *st);
      say(s.ok() ? (st->released ? "restored the job here from its image" : "resumed the job here")
                 : "getting the job back here failed: " + s.message());
    } else if (step == MoveStep::kResumeSent) {
      Status s = SettleSource(*criu, &*job, &*st, state_file, token, say);
      say(s.ok() ? "the destination runs the job; the copy here was released" : s.message());
    }
    if (!st->keep_image && (st->step == MoveStep::kDone || st->step == MoveStep::kResumed)) {
      std::error_code ec;
      fs::remove_all(st->image, ec);
    }
    return 0;
  }
  // The destination.
  Listener listener(4);
  if (st->step == MoveStep::kReceived || st->step == MoveStep::kRestoring ||
      st->step == MoveStep::kRestored) {
    int64_t pid = st->pid;
    if (pid == 0 && st->step == MoveStep::kRestoring) {
      // A restore still under way finishes without this side's process: wait for its copy.
      const std::string pidfile = st->image + "/restored.pid";
      for (int i = 0; i < 600 && pid == 0; ++i) {
        std::ifstream in(pidfile);
        if (!(in >> pid)) pid = 0;
        if (pid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    }
    KillTree(pid);
    st->step = MoveStep::kAborted;
    (void)SaveState(state_file, *st);
    say("dropped the restored copy" + (pid > 0 ? " (pid " + std::to_string(pid) + ")" : ""));
  } else if (st->step == MoveStep::kCommitted) {
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
