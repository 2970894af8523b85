// The source's end of a fleet move, once the destination holds the job restored and stopped: the
// owner of the job's record (the server, through MigrateOptions::commit) decides the move, and
// its row is the truth. Once asked, the source never resumes the job unless the owner said no.
#include <chrono>
#include <string>
#include <thread>

#include "migrate_internal.h"

namespace paladin::migrate {

StatusOr<MigrateReport> FleetPreCopyEnd(const ckpt::Criu& criu, ckpt::JobRecord* job,
                                        Channel* channel, MoveState* st,
                                        const std::string& state_file, Keeper* keeper,
                                        const MigrateOptions& options,
                                        const std::function<StatusOr<MigrateReport>()>& release,
                                        const std::function<void()>& cleanup,
                                        const ckpt::Progress& progress) {
  progress("the destination holds the job, stopped; asking the job's owner to commit");
  (void)SaveStep(state_file, st, MoveStep::kResumeSent);
  Status committed = options.commit();
  if (committed.code() == StatusCode::kFailedPrecondition) {
    cleanup();
    return Abandon(criu, job, channel,
                   Status(committed.code(), "the move was not committed: " + committed.message()),
                   st, state_file, keeper, progress);
  }
  if (!committed.ok()) {
    (void)SaveStep(state_file, st, MoveStep::kInDoubt);
    return CommitInDoubt(committed, *job);
  }
  CrashPoint("src-before-resume");
  // The destination resumes on RESUME, or on asking the server once it loses this connection:
  // whatever the answer, the job is no longer this side's.
  StatusOr<std::string> resumed = CallOrDrop(channel, "RESUME", "RESUME", kAnswerTimeoutS);
  CrashPoint("src-after-resume");
  if (!resumed.ok()) progress("RESUME: " + resumed.status().message() + "; committed anyway");
  return release();
}

// A post-copy move, once the dump has ended (`pages`): the owner commits, asked only once every
// page is at the destination and its copy runs there; until then the destination's copy runs
// provisionally and this one stays stopped. A failure resumes the job here only once the
// destination's copy is known to be gone: the destination said so, or the owner decided against
// the move and its lease has had fence_s to stop a copy there that it could not reach
// (docs/lazy_migration.md, "Fleet moves").
StatusOr<MigrateReport> FleetPostCopyEnd(
    ckpt::JobRecord* job, Channel* channel, MoveState* st, const std::string& state_file,
    const Status& pages, const MigrateOptions& options,
    const std::function<StatusOr<MigrateReport>()>& release,
    const std::function<Status(const std::string&)>& resume_here, const ckpt::Progress& progress) {
  bool gone_there = false;  // the destination said its copy was killed
  std::string why;
  if (pages.ok()) {
    StatusOr<std::string> there = channel->Call("PAGES-DONE " + st->id, 120);
    if (there.ok()) {
      progress(
          "every page has reached the destination and its copy runs; asking the job's "
          "owner to commit");
      (void)SaveStep(state_file, st, MoveStep::kResumeSent);
      Status committed = options.commit();
      if (committed.ok()) return release();
      if (committed.code() != StatusCode::kFailedPrecondition) {
        (void)SaveStep(state_file, st, MoveStep::kInDoubt);
        return CommitInDoubt(committed, *job);
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
      (void)SaveStep(state_file, st, MoveStep::kInDoubt);
      return Unavailable(why + "; the owner did not say what became of the move (" +
                         committed.status().message() + "): the job stays stopped here (pid " +
                         std::to_string(job->pid) + ")");
    }
    if (*committed) return release();  // only after a commit asked above whose answer was lost
    progress("the owner decided against the move; waiting " + std::to_string(options.fence_s) +
             " s for the destination's lease to stop any copy there before resuming here");
    std::this_thread::sleep_for(std::chrono::duration<double>(options.fence_s));
  }
  job->state = ckpt::RunState::kStopped;
  return resume_here(why);
}

}  // namespace paladin::migrate
