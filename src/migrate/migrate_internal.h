// What the files of src/migrate share to carry out a move (include/paladin/migrate/migrate.h):
// not part of Paladin's public surface. Where each part lives:
//   source.cc              Migrate: the source's transaction up to the destination's RESTORE,
//                          then the direct pre-copy move's end
//   source_settle.cc       the source's ways out: abandoning before RESUME, settling after it
//   local_copy.cc          this side's copy of the job: killed, resumed, let go, restored back
//   fleet_source.cc        the source's end of a fleet move (the server owns the commit)
//   postcopy_source.cc     the source's end of a post-copy move (it serves the pages)
//   destination.cc         ServeOneMigration: the destination's part, and its late answers
//   postcopy_destination.cc  the destination's page puller for a post-copy move
//   page_relay.cc          the page relays that carry a page stream (page_relay.h)
//   page_relay_link.cc     their link: frames, seal, socket helpers (page_relay_link.h)
//   keeper.cc              RunKeeper: settling a side whose process died
//   stream.cc              streaming pre-copy's page server, and the destination's opening
//   mode_choice.cc         --mode auto's choice (public: ChooseMode in paladin/migrate/migrate.h)
//   state.cc (state.h)     the state files, the keeper's start, the fault hooks
//   owned_dir.cc           a move's folders, locked by their owner (paladin/migrate/owned_dir.h)
//   control.cc             the command channel (public: paladin/migrate/control.h)
// The state machine, every message and every timeout: docs/formats/migrate.md.
#ifndef PALADIN_MIGRATE_MIGRATE_INTERNAL_H_
#define PALADIN_MIGRATE_MIGRATE_INTERNAL_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "page_relay.h"
#include "paladin/base/status.h"
#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/criu.h"
#include "paladin/ckpt/workload.h"
#include "paladin/migrate/control.h"
#include "paladin/migrate/migrate.h"
#include "state.h"

namespace paladin::migrate {

// How long the source waits for the answer to RESTORE and to RESUME.
inline constexpr double kAnswerTimeoutS = 600;

inline double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Whether an answer (to RESUME) says the destination dropped its copy (source_settle.cc).
bool SaidAborted(const Status& answer);
// The source's next line, waiting up to `timeout_s` (may be infinite) and watching for the
// owner's call-off (`cancel`, may be null), which returns FailedPrecondition(called_off)
// (destination.cc).
StatusOr<std::string> ReceiveUnlessCancelled(Channel* channel, const std::atomic<bool>* cancel,
                                             double timeout_s, const std::string& called_off);

// --- This side's copy of the job (local_copy.cc).
void KillTree(int64_t root);
// Whether process `pid` exists and is neither a zombie nor dead.
bool ProcessLives(int64_t pid);
// Kills a CRIU server this side started (a dump serving pages, a puller) and waits for it.
void StopServing(pid_t pid, const std::string& what, const std::string& log, double wait_s);
// Resumes a job that this side stopped. A dump that was still running when this side's process
// died leaves the tree stopped once it ends: looks again for `settle_s`.
Status ResumeHere(ckpt::JobRecord* job, double settle_s);
// The source once the destination runs the job: its stopped copy goes.
void Release(ckpt::JobRecord* job);
// A direct pre-copy move of a job whose image holds file locks: its stopped copy goes before
// RESTORE, recorded in the state file first (MoveState::released); see local_copy.cc.
Status LetGoForLocks(ckpt::JobRecord* job, MoveState* st, const std::string& state_file,
                     const ckpt::Progress& progress);
// The job back here after a failed move: its stopped copy resumes, or, once let go for its file
// locks, the job is restored from the image (removed then, unless kept). *job becomes the
// restored job's record.
Status BackHere(const ckpt::Criu& criu, ckpt::JobRecord* job, const MoveState& st,
                const ckpt::Progress& progress);
// "the job resumed here", or where the job restored here runs.
std::string BackHereSaid(const ckpt::JobRecord& job, const MoveState& st);
// The source's step once BackHere returned `back`: a job that could not be restored here from
// its image is that image, kept (in doubt).
MoveStep StepAfterBack(const Status& back, const MoveState& st);

// --- The source's ways out (source_settle.cc).
// The way back when the move fails before RESUME was sent: ABORT on `channel` (may be null), then
// the job back here.
Status Abandon(const ckpt::Criu& criu, ckpt::JobRecord* job, Channel* channel, const Status& why,
               MoveState* st, const std::string& state_file, Keeper* keeper,
               const ckpt::Progress& progress);
// Settles the source's side once RESUME was sent (the direct form): only the destination's word
// decides whether the job resumes here.
Status SettleSource(const ckpt::Criu& criu, ckpt::JobRecord* job, MoveState* st,
                    const std::string& state_file, const std::string& token,
                    const ckpt::Progress& progress);
// The job's record here once the destination runs it, and the image in the report if kept.
void RecordMoved(ckpt::JobRecord* job, const MigrateOptions& options, const std::string& remote_pid,
                 const std::string& image, MigrateReport* report);
// The owner's answer to the commit was neither yes nor no: the job stays stopped here.
Status CommitInDoubt(const Status& committed, const ckpt::JobRecord& job);

// --- The source's endings, once the destination holds the job restored and stopped. `release`
// ends the move as moved (this copy goes), `cleanup` removes the image unless it is kept.
// The fleet form of a pre-copy move (fleet_source.cc).
StatusOr<MigrateReport> FleetPreCopyEnd(const ckpt::Criu& criu, ckpt::JobRecord* job,
                                        Channel* channel, MoveState* st,
                                        const std::string& state_file, Keeper* keeper,
                                        const MigrateOptions& options,
                                        const std::function<StatusOr<MigrateReport>()>& release,
                                        const std::function<void()>& cleanup,
                                        const ckpt::Progress& progress);
// The fleet form of a post-copy move, once the dump has ended with `pages` (fleet_source.cc).
StatusOr<MigrateReport> FleetPostCopyEnd(
    ckpt::JobRecord* job, Channel* channel, MoveState* st, const std::string& state_file,
    const Status& pages, const MigrateOptions& options,
    const std::function<StatusOr<MigrateReport>()>& release,
    const std::function<Status(const std::string&)>& resume_here, const ckpt::Progress& progress);

// Post-copy, before RESUME: fails when the dump's page server has already failed (a dump that
// ended with exit 0 served every page) (postcopy_source.cc).
Status DumpStillServes(pid_t dump, const std::string& log);
// The source's side of a post-copy move from RESUME on (postcopy_source.cc).
StatusOr<MigrateReport> PostCopy(ckpt::JobRecord* job, Channel* channel, MoveState* st,
                                 const std::string& state_file, Keeper* keeper, pid_t lazy_dump,
                                 const std::string& lazy_log, const MigrateOptions& options,
                                 std::chrono::steady_clock::time_point paused,
                                 MigrateReport* report, const std::string& remote_pid,
                                 const std::function<void()>& cleanup,
                                 const ckpt::Progress& progress);

// --- The destination.
// Its answers about a decided move, after its command connection ended: to OUTCOME, RESUME and
// ABORT for it, until the source says BYE or `answer_for_s` passes (destination.cc).
void AnswerQueries(Listener* listener, const std::string& state_file, const std::string& token,
                   double answer_for_s, const ckpt::Progress& progress);

// A post-copy move's page puller at the destination (`criu lazy-pages`, this process's child)
// and its watcher, which kills the restored copy the moment the puller fails: the copy would
// read zeros where pages had not arrived (postcopy_destination.cc). The watcher must have been
// ended (End) before this object goes.
class PagePuller {
 public:
  explicit PagePuller(const ckpt::Progress& progress) : progress_(progress) {}
  PagePuller(const PagePuller&) = delete;
  PagePuller& operator=(const PagePuller&) = delete;

  // Starts the puller for the source's page server, reached through the page relays
  // (page_relay.h): `relay_text` is RESTORE LAZY's "<port> <nonce>[ plain]", the source's relay
  // at the command connection's peer address; the puller, on a socket pair with this side's
  // relay, pulls into `image`. Returns the CRIU to restore with. The relays seal every frame;
  // "plain" (a source's --lazy-plain) is taken only when allow_plain.
  // `known`: the post-copy CRIU when already found (DestinationOptions::lazy_criu).
  StatusOr<ckpt::Criu> Start(const ckpt::Criu& criu,
                             const std::optional<StatusOr<ckpt::Criu>>& known,
                             const Channel& channel, const std::string& relay_text,
                             const std::string& image, bool allow_plain);
  bool started() const { return pid_ > 0; }
  // The restore failed: the puller goes.
  void Stop();
  // Once the copy (root `copy`) is restored: watches the puller.
  void Watch(int64_t copy);
  // Waits for the puller to end (killing it after `wait_s`).
  void End(double wait_s);
  bool failed() const { return failed_.load(); }
  const std::string& error() const { return error_; }  // once failed()

 private:
  const ckpt::Progress& progress_;
  pid_t pid_ = 0;
  std::string log_;
  std::thread watcher_;
  std::atomic<bool> over_{false};
  std::atomic<bool> failed_{false};
  std::string error_;  // read once over_
  PageRelay relay_;    // this side's end of the page stream's link
};

}  // namespace paladin::migrate

#endif  // PALADIN_MIGRATE_MIGRATE_INTERNAL_H_
