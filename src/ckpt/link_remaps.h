// CRIU's link remaps in a job's own /dev/shm: the ones a dump that leaves the job alive made go
// again afterwards, or the next dump of the job fails on them.
#ifndef PALADIN_SRC_CKPT_LINK_REMAPS_H_
#define PALADIN_SRC_CKPT_LINK_REMAPS_H_

#include <sys/types.h>

#include <set>
#include <string>

#include "paladin/base/status.h"
#include "paladin/ckpt/beneath.h"

namespace paladin::ckpt {

// The job's own /dev/shm (ckpt::WorkloadSpec::own_shm) seen from here, open; NotFound when the
// job shares the host's, whose files stay where they are.
StatusOr<Fd> OwnShm(pid_t root);

// CRIU's link remaps (`link_remap.N`, a second name it gives a file the job holds by a name that
// is gone) in the directory `shm`.
std::set<std::string> LinkRemaps(int shm);

// Removes the link remaps in the own /dev/shm of the job under `root` that are not in `before`
// (those it had before the dump, which its image carries, stay).
void DropNewLinkRemaps(pid_t root, const std::set<std::string>& before);

}  // namespace paladin::ckpt

#endif  // PALADIN_SRC_CKPT_LINK_REMAPS_H_
