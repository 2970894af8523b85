#include "link_remaps.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace paladin::ckpt {

StatusOr<Fd> OwnShm(pid_t root) {
  StatusOr<Fd> job_root = OpenDirectory("/proc/" + std::to_string(root) + "/root");
  if (!job_root.ok()) return job_root.status();
  StatusOr<Fd> shm = OpenBeneath(job_root->get(), "dev/shm", O_RDONLY | O_DIRECTORY);
  if (!shm.ok()) return shm.status();
  struct stat own {};
  struct stat host {};
  if (fstat(shm->get(), &own) != 0 || stat("/dev/shm", &host) != 0 || own.st_dev == host.st_dev) {
    return NotFound("the job has no /dev/shm of its own");
  }
  return shm;
}

std::set<std::string> LinkRemaps(int shm) {
  std::set<std::string> names;
  const int dup_fd = fcntl(shm, F_DUPFD_CLOEXEC, 0);
  DIR* dir = dup_fd >= 0 ? fdopendir(dup_fd) : nullptr;
  if (dir == nullptr) {
    if (dup_fd >= 0) close(dup_fd);
    return names;
  }
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind("link_remap.", 0) == 0 && name.size() > 11 &&
        name.find_first_not_of("0123456789", 11) == std::string::npos) {
      names.insert(name);
    }
  }
  closedir(dir);
  return names;
}

// CRIU leaves the link remaps it made after a dump that succeeded (a restore opens the files
// through them), and its next dump of the same processes fails on them ("Can't link remap to
// ...: File exists"). A job that goes on running after its dump loses the ones in its own
// /dev/shm again, which the image carries in its copy of that tmpfs: those it had before the dump
// (`before`) stay.
void DropNewLinkRemaps(pid_t root, const std::set<std::string>& before) {
  StatusOr<Fd> shm = OwnShm(root);
  if (!shm.ok()) return;
  for (const std::string& name : LinkRemaps(shm->get())) {
    struct stat st {};
    if (before.count(name) == 0 &&
        fstatat(shm->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
      (void)unlinkat(shm->get(), name.c_str(), 0);
    }
  }
}

}  // namespace paladin::ckpt
