// A job's states and the transitions between them, in one place: the control plane compares and
// sets states only through this type, and the API, the store and /metrics spell them only through
// JobStateName (the states and their names: paladin/api/job_state.h, which clients read too).
// docs/server.md ("A job's life") draws the same graph.
//
//   pending ──▶ starting ──▶ running ──▶ migrating ──▶ running
//      ▲            │          │  ▲
//      │            ▼          ▼  │
//      └──── restoring ◀── checkpointing ──▶ checkpointed ──▶ restoring ──▶ running
//
// Any state that has not ended may end (succeeded, failed, cancelled); a job that lost its node,
// or ran out of GPU memory, goes back to pending (no checkpoint) or restoring (from its last
// one). An ended job never changes again.
#pragma once

#include "paladin/api/job_state.h"

namespace paladin::server {

// The states and their names are the API's (paladin/api/job_state.h).
using api::IsTerminal;
using api::JobState;
using api::JobStateName;
using api::kAllJobStates;
using api::ParseJobState;

// Whether a job may go from `from` to `to`. Staying in a state is allowed (a no-op); an ended job
// goes nowhere.
bool JobStateAllows(JobState from, JobState to);

}  // namespace paladin::server
