// The job state graph (job_state.h).
#include "job_state.h"

namespace paladin::server {

bool JobStateAllows(JobState from, JobState to) {
  if (IsTerminal(from)) return false;
  if (from == to || IsTerminal(to)) return true;
  using S = JobState;
  switch (from) {
    case S::kPending:  // placed: started, or restored from the checkpoint it waited with
      return to == S::kStarting || to == S::kRestoring;
    case S::kStarting:  // ran; or its start failed or its node died (placed again)
      return to == S::kRunning || to == S::kPending || to == S::kRestoring;
    case S::kRunning:
      return to == S::kMigrating || to == S::kCheckpointing ||
             // out of GPU memory, or its node died: again from the checkpoint or from the start
             to == S::kRestoring || to == S::kPending;
    case S::kMigrating:  // committed or called off: running (here or there); or its node died
      return to == S::kRunning || to == S::kRestoring || to == S::kPending;
    case S::kCheckpointing:
      return to == S::kRunning ||       // a checkpoint that leaves it running, or that failed
             to == S::kCheckpointed ||  // stopped with its image
             to == S::kRestoring ||     // preempted: waits for room with its image
             to == S::kPending;         // its node died before the image was taken
    case S::kCheckpointed:              // resumed on request
      return to == S::kRestoring;
    case S::kRestoring:
      return to == S::kRunning ||       // restored
             to == S::kCheckpointed ||  // the restore failed and the job keeps its image
             to == S::kPending;         // the restore failed and the job starts over
    default:
      return false;
  }
}

}  // namespace paladin::server
