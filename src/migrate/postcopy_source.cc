// The source's side of a post-copy move (docs/lazy_migration.md): its stopped copy serves the
// job's memory through the dump's page server while the job already runs at the destination, and
// goes only once every page is there and the copy there still runs.
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "migrate_internal.h"

namespace paladin::migrate {

namespace fs = std::filesystem;

// The relays have proved each other before RESTORE was answered and no one else can reach the
// page server (a socket pair): what is left to find before RESUME, while the move can still be
// abandoned, is a page server that has failed already.
Status DumpStillServes(pid_t dump, const std::string& log) {
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(dump), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
      info.si_pid != dump) {
    return Status::Ok();  // still serving
  }
  // Ended (left to be reaped by its caller): a small job's memory can reach the puller before
  // RESUME, and with --leave-stopped (patch 0002) exit 0 says every page was served.
  if (info.si_code == CLD_EXITED && info.si_status == 0) return Status::Ok();
  return Unavailable("the page server ended before the job could run at the destination (see " +
                     log + ")");
}

// Once the destination holds the job, restored without its memory and stopped: the job runs
// there at once, and this copy, stopped, serves its pages (the dump, `lazy_dump`) until the
// destination has them all. Only then, and only if the destination's copy still runs, is this
// copy released; a copy that died there leaves the job to resume here, and a transfer that failed
// has the destination's copy killed before this one resumes: never two copies at once. The fleet
// form ends in FleetPostCopyEnd.
StatusOr<MigrateReport> PostCopy(ckpt::JobRecord* job, Channel* channel, MoveState* st,
                                 const std::string& state_file, Keeper* keeper, pid_t lazy_dump,
                                 const std::string& lazy_log, const MigrateOptions& options,
                                 std::chrono::steady_clock::time_point paused,
                                 MigrateReport* report, const std::string& remote_pid,
                                 const std::function<void()>& cleanup,
                                 const ckpt::Progress& progress) {
  auto resume_here = [&](const std::string& why) -> Status {
    Status s = ResumeHere(job, 0);
    (void)SaveStep(state_file, st, MoveStep::kResumed);
    (void)channel->Send("BYE " + st->id);
    keeper->Done();
    cleanup();
    std::error_code ec;
    fs::remove(lazy_log, ec);
    return FailedPrecondition(
        why + "; " + (s.ok() ? "the job resumed here" : "resuming it failed: " + s.message()));
  };
  // The keeper leaves a copy in this step stopped: it cannot know whether the pages all went.
  (void)SaveStep(state_file, st, MoveStep::kServing);
  job->state = ckpt::RunState::kMoving;
  (void)ckpt::WriteJob(*job);
  StatusOr<std::string> resumed = CallOrDrop(channel, "RESUME", "RESUME", kAnswerTimeoutS);
  if (!resumed.ok() && SaidAborted(resumed.status())) {
    StopServing(lazy_dump, "the post-copy dump", lazy_log, 10);
    job->state = ckpt::RunState::kStopped;
    return resume_here("the destination did not take the job (" + resumed.status().message() + ")");
  }
  if (resumed.ok()) {
    report->pause_s = Since(paused);
    progress("the job runs at the destination after a pause of " + std::to_string(report->pause_s) +
             " s; its memory follows from this stopped copy");
    CrashPoint("src-during-pages");
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
    (void)SaveStep(state_file, st, MoveStep::kDone);
    (void)channel->Send("BYE " + st->id);
    keeper->Done();
    RecordMoved(job, options, remote_pid, st->image, report);
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
      job->state = ckpt::RunState::kStopped;
      return resume_here("the destination's copy ended before every page had reached it (" +
                         there.status().message() +
                         "): what the job did there since the move is lost");
    }
    (void)SaveStep(state_file, st, MoveStep::kInDoubt);
    return Unavailable(
        "every page was sent but the destination did not say whether its copy runs (" +
        there.status().message() + "): the job stays stopped here (pid " +
        std::to_string(job->pid) + ")");
  }
  progress("the page transfer failed (" + pages.message() + "); stopping the destination's copy");
  StatusOr<std::string> dropped = channel->Call("PAGES-FAILED " + st->id, 120);
  if (dropped.ok()) {
    job->state = ckpt::RunState::kStopped;
    return resume_here("the page transfer failed; the destination's copy was killed");
  }
  (void)SaveStep(state_file, st, MoveStep::kInDoubt);
  return Unavailable("the page transfer failed (" + pages.message() +
                     ") and the destination did not confirm that its copy was killed (" +
                     dropped.status().message() + "): the job stays stopped here (pid " +
                     std::to_string(job->pid) + ")");
}

}  // namespace paladin::migrate
