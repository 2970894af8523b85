// The job's process tree as the checkpoint engine sees it through /proc: its host pids, their
// states and namespace pids, and stopping it (checkpoint.h's ContinueTree resumes it).
#ifndef PALADIN_SRC_CKPT_PROCESS_TREE_H_
#define PALADIN_SRC_CKPT_PROCESS_TREE_H_

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "paladin/base/process.h"
#include "paladin/base/status.h"

namespace paladin::ckpt {

// `root` and every process below it, host pids.
std::vector<pid_t> Tree(pid_t root);

// The pid of host pid `pid` in its own (innermost) PID namespace, or -1.
int64_t NamespacePid(pid_t pid);

// The state letter of /proc/PID/stat (after the command's closing parenthesis), or '?'.
char ProcessState(pid_t pid);

// Stops every process of the tree below `root` (SIGSTOP) and waits until each is stopped or
// gone, looking again for children forked meanwhile. An error (the tree is then partly
// stopped: the caller continues it) when a process is not stopped within 10 s.
Status StopTree(pid_t root);

// The uid the job's command runs as: its first process that is not root's (the root may be
// paladin-workload-init, as root), else root's; -1 when none could be read.
int64_t CommandUid(const std::vector<pid_t>& pids);

// The quota region's identities of `pids` (whose counters a restore hands to them).
std::vector<base::ProcessId> RestoredIds(const std::vector<pid_t>& pids);

}  // namespace paladin::ckpt

#endif  // PALADIN_SRC_CKPT_PROCESS_TREE_H_
