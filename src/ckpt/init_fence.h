// The lease watch of paladin-workload-init (include/paladin/ckpt/fence.h says what it enforces).
// Part of the init only: plain libc, no Paladin library.
#ifndef PALADIN_SRC_CKPT_INIT_FENCE_H_
#define PALADIN_SRC_CKPT_INIT_FENCE_H_

namespace paladin::ckpt::fence {

// Takes the lease at kLeaseFd ("--lease"), close-on-exec so that the command never inherits it.
// False when there is no such descriptor or this is not pid 1 of its own PID namespace.
bool AdoptLeaseFd();

// One look at the lease: stops or continues every other process of the PID namespace as the
// lease says. Cheap; called every kPollMs and after every signal.
void CheckLease();

// Opens the lease again by its path, in this process's mount namespace: after a restore, CRIU
// hands the init the restoring agent's lease (--inherit-fd) as a descriptor on a mount of the
// host's, which the job's own mount namespace lacks, and which the next dump could not resolve.
// Called once CRIU lets the init go (its wait ends with EINTR); a no-op when the path no longer
// names the same file.
void ReopenLease();

// Whether the job is held stopped now: a SIGCONT meant for the command is not forwarded then.
bool Fenced();

}  // namespace paladin::ckpt::fence

#endif  // PALADIN_SRC_CKPT_INIT_FENCE_H_
