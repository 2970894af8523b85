// The source's ways out of a move: abandoning it before RESUME was sent, settling it after (the
// direct form: only the destination's word decides), and the job's record once it moved.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include "migrate_internal.h"

namespace paladin::migrate {

namespace fs = std::filesystem;

namespace {

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
      const Status hello = ProveToken(&*c, token, 5);
      StatusOr<std::string> answer =
          hello.ok() ? c->Call("OUTCOME " + st.id, 5) : StatusOr<std::string>(hello);
      // The answer is the destination's step: only committed and aborted are decided.
      const std::optional<MoveStep> said =
          answer.ok() ? MoveStepNamed(*answer) : std::optional<MoveStep>();
      if (said == MoveStep::kCommitted || said == MoveStep::kAborted) {
        progress("the destination says migration " + st.id + " " + *answer);
        *channel = std::move(*c);
        return said == MoveStep::kCommitted ? Outcome::kCommitted : Outcome::kAborted;
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

// Whether the image here holds the job's memory (CRIU's pagemap files): not after a streaming
// pre-copy dump, which sent it to the destination's page server.
bool ImageHoldsMemory(const std::string& image) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(image, ec)) {
    if (e.path().filename().string().rfind("pagemap-", 0) == 0) return true;
  }
  return false;
}

}  // namespace

bool SaidAborted(const Status& answer) {
  return answer.code() == StatusCode::kInternal && answer.message().rfind("aborted", 0) == 0;
}

Status Abandon(const ckpt::Criu& criu, ckpt::JobRecord* job, Channel* channel, const Status& why,
               MoveState* st, const std::string& state_file, Keeper* keeper,
               const ckpt::Progress& progress) {
  // The destination drops its copy before it answers: only then may the job run here again.
  if (channel != nullptr) (void)channel->Call("ABORT", 60);
  progress("the move failed (" + why.message() + "); " +
           (st->released ? "restoring the job here" : "resuming the job here"));
  Status resumed = BackHere(criu, job, *st, progress);
  st->step = StepAfterBack(resumed, *st);
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

Status SettleSource(const ckpt::Criu& criu, ckpt::JobRecord* job, MoveState* st,
                    const std::string& state_file, const std::string& token,
                    const ckpt::Progress& progress) {
  Channel asked;
  const Outcome outcome = AskOutcome(*st, token, &asked, progress);
  Status back = Status::Ok();
  if (outcome == Outcome::kCommitted) {
    if (!st->released) Release(job);
    st->step = MoveStep::kDone;
  } else if (outcome == Outcome::kAborted) {
    back = BackHere(criu, job, *st, progress);
    if (!back.ok()) progress("getting the job back here failed: " + back.message());
    st->step = StepAfterBack(back, *st);
  } else if (!ImageHoldsMemory(st->image)) {
    // Streaming pre-copy: the memory went to the destination only, so the image here cannot
    // bring the job back; the stopped copy stays, for whoever sorts it out.
    st->step = MoveStep::kInDoubt;
  } else {
    // Nobody can say: the stopped copy goes, the image stays, for whoever sorts it out.
    if (!st->released) Release(job);
    st->step = MoveStep::kInDoubt;
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

void RecordMoved(ckpt::JobRecord* job, const MigrateOptions& options, const std::string& remote_pid,
                 const std::string& image, MigrateReport* report) {
  job->state = ckpt::RunState::kMoved;
  job->image = options.host + ":" + std::to_string(options.port) + " pid " + remote_pid;
  // A destination on this machine under the same run base restored the job into this same run
  // directory: the record there is the running copy's, and stays.
  StatusOr<ckpt::JobRecord> there = ckpt::ReadJob(job->run_dir);
  if (!there.ok() || there->pid == job->pid) (void)ckpt::WriteJob(*job);
  if (options.keep_image) report->image = image;
}

Status CommitInDoubt(const Status& committed, const ckpt::JobRecord& job) {
  return Status(committed.code(), "the commit is in doubt (" + committed.message() +
                                      "); the job stays stopped here (pid " +
                                      std::to_string(job.pid) + ")");
}

}  // namespace paladin::migrate
