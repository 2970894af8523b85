// This side's copy of the job during a move: killed, resumed, released, let go for its file
// locks, or brought back from the image (migrate_internal.h).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "migrate_internal.h"
#include "paladin/base/cgroup.h"
#include "paladin/base/process.h"

namespace paladin::migrate {

namespace fs = std::filesystem;

void KillTree(int64_t root) {
  if (root <= 0) return;
  for (uint32_t pid : base::ProcessTree(static_cast<uint32_t>(root))) {
    kill(static_cast<pid_t>(pid), SIGKILL);
  }
}

bool ProcessLives(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (pid <= 0 || !std::getline(in, stat)) return false;
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z' &&
         stat[paren + 2] != 'X';
}

void StopServing(pid_t pid, const std::string& what, const std::string& log, double wait_s) {
  kill(-pid, SIGKILL);
  (void)ckpt::ServingResult(pid, what, log, wait_s);
}

Status ResumeHere(ckpt::JobRecord* job, double settle_s) {
  Status s = ckpt::ResumeJob(job);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(settle_s);
  while (std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ckpt::ContinueTree(static_cast<pid_t>(job->pid), job->stopped);
  }
  return s;
}

void Release(ckpt::JobRecord* job) {
  KillTree(job->pid);
  if (!job->cgroup.empty()) (void)base::Cgroup::Existing(job->cgroup).Remove();
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
  job->state = ckpt::RunState::kMoving;
  (void)ckpt::WriteJob(*job);
  const std::vector<uint32_t> pids = base::ProcessTree(static_cast<uint32_t>(job->pid));
  for (uint32_t pid : pids) kill(static_cast<pid_t>(pid), SIGKILL);
  // A process's locks go with its files, before it is a zombie.
  auto gone = [](uint32_t pid) { return !ProcessLives(pid); };
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!std::all_of(pids.begin(), pids.end(), gone) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!job->cgroup.empty()) (void)base::Cgroup::Existing(job->cgroup).Remove();
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
    (void)base::Cgroup::Existing(job->cgroup).RemoveWhenGone(static_cast<pid_t>(job->pid));
  }
  progress("the job runs here again as pid " + std::to_string(job->pid) +
           ", restored from its image");
  std::error_code ec;
  if (!st.keep_image) fs::remove_all(st.image, ec);
  return Status::Ok();
}

std::string BackHereSaid(const ckpt::JobRecord& job, const MoveState& st) {
  return st.released
             ? "the job was restored here from its image (pid " + std::to_string(job.pid) + ")"
             : "the job resumed here";
}

MoveStep StepAfterBack(const Status& back, const MoveState& st) {
  return back.ok() || !st.released ? MoveStep::kResumed : MoveStep::kInDoubt;
}

}  // namespace paladin::migrate
