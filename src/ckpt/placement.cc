#include "placement.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace paladin::ckpt {

namespace fs = std::filesystem;

namespace {

bool SamePath(const std::string& a, const std::string& b) {
  return fs::path(a).lexically_normal() == fs::path(b).lexically_normal();
}

// The run base of `where`, normalised, without a trailing slash.
std::string RunBaseOf(const RestorePlacement& where) {
  std::string base =
      fs::path(where.run_base.empty() ? RunBase() : where.run_base).lexically_normal().string();
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return base;
}

// The name of the run directory the manifest names, which must be directly in `base` (and,
// with a name prefix, be this job's).
StatusOr<std::string> RunDirName(const Manifest& m, const RestorePlacement& where,
                                 const std::string& base) {
  if (m.run_dir.empty()) return InvalidArgument("manifest: workload.run_dir is empty");
  fs::path hinted = fs::path(m.run_dir).lexically_normal();
  if (!hinted.has_filename()) hinted = hinted.parent_path();
  const std::string name = hinted.filename().string();
  std::error_code ec;
  const std::string canonical_base = fs::weakly_canonical(base, ec).string();
  const std::string parent = hinted.parent_path().string();
  if (name.empty() || name == "." || name == ".." || (parent != base && parent != canonical_base)) {
    return InvalidArgument("manifest: workload.run_dir '" + m.run_dir +
                           "' is not a run directory of this node (they are directly in " + base +
                           ")");
  }
  if (!where.name_prefix.empty() &&
      (name.size() <= where.name_prefix.size() || name.rfind(where.name_prefix, 0) != 0 ||
       name.find_first_not_of("0123456789", where.name_prefix.size()) != std::string::npos)) {
    return InvalidArgument("manifest: workload.run_dir '" + m.run_dir +
                           "' is not this job's run directory (" + base + "/" + where.name_prefix +
                           "N)");
  }
  return name;
}

// The manifest's logs must be the job's stdout.log and stderr.log in `p`'s run directory.
Status CheckLogs(const Manifest& m, const Placement& p) {
  for (size_t i = 0; i < m.logs.size(); ++i) {
    const std::string index = "[" + std::to_string(i) + "]";
    const std::string expected = m.logs[i] == "logs/stdout.log"   ? p.stdout_log
                                 : m.logs[i] == "logs/stderr.log" ? p.stderr_log
                                                                  : "";
    if (expected.empty()) {
      return InvalidArgument("manifest: workload.logs" + index + " '" + m.logs[i] +
                             "' is neither logs/stdout.log nor logs/stderr.log");
    }
    if (!SamePath(m.log_targets[i], expected)) {
      std::string message = "manifest: workload.log_targets" + index;
      message.append(" '").append(m.log_targets[i]);
      message.append("' is not where this node keeps the job's log (").append(expected).append(")");
      return InvalidArgument(message);
    }
  }
  return Status::Ok();
}

// Sets `p`'s region where the manifest names one, which must be quota.region in the run directory.
Status CheckRegion(const Manifest& m, Placement* p) {
  if (m.region.empty()) return Status::Ok();
  p->region = p->run_dir + "/quota.region";
  if (!SamePath(m.region, p->region)) {
    return InvalidArgument("manifest: workload.region '" + m.region +
                           "' is not where this node keeps the job's quota region (" + p->region +
                           ")");
  }
  return Status::Ok();
}

// Opens the run directory `name` in `base` (both created where missing) into `p->dir`.
Status OpenRunDir(const std::string& base, const std::string& name, Placement* p) {
  std::error_code ec;
  fs::create_directories(base, ec);
  StatusOr<Fd> base_fd = OpenDirectory(base);
  if (!base_fd.ok()) return base_fd.status();
  PALADIN_RETURN_IF_ERROR(CheckOwnDirectory(base_fd->get(), "the run base", base));
  // CRIU restores the working directory with the mode it had; the run directory is 0755 when the
  // job starts (the node agent's and paladin run's).
  StatusOr<Fd> dir = MakeDirectoryIn(base_fd->get(), name, 0755);
  if (!dir.ok()) return Status(dir.status().code(), base + "/" + dir.status().message());
  p->dir = std::move(*dir);
  return Status::Ok();
}

}  // namespace

StatusOr<Placement> Place(const Manifest& m, const RestorePlacement& where) {
  const std::string base = RunBaseOf(where);
  StatusOr<std::string> name = RunDirName(m, where, base);
  if (!name.ok()) return name.status();
  Placement p;
  p.run_dir = base + "/" + *name;
  p.stdout_log = p.run_dir + "/stdout.log";
  p.stderr_log = p.run_dir + "/stderr.log";
  PALADIN_RETURN_IF_ERROR(CheckLogs(m, p));
  PALADIN_RETURN_IF_ERROR(CheckRegion(m, &p));
  PALADIN_RETURN_IF_ERROR(OpenRunDir(base, *name, &p));
  return p;
}

Status CheckOwnDirectory(int fd, const std::string& what, const std::string& path) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return IoError("cannot stat " + path + ": " + strerror(errno));
  const uid_t me = geteuid();
  if ((st.st_uid != me && st.st_uid != 0) || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return FailedPrecondition(what + " " + path + " is owned by uid " + std::to_string(st.st_uid) +
                              " with mode " + mode + ": only this user (uid " + std::to_string(me) +
                              ") or root may be able to write it");
  }
  return Status::Ok();
}

Status CheckImageWriters(int image, const std::string& dir) {
  PALADIN_RETURN_IF_ERROR(CheckOwnDirectory(image, "the image directory", dir));
  return WalkBeneath(image, [&](const std::string& rel, const struct stat& st) -> Status {
    if (!S_ISDIR(st.st_mode)) return Status::Ok();
    StatusOr<Fd> sub = OpenBeneath(image, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    if (!sub.ok()) return InvalidArgument("the image's " + sub.status().message());
    return CheckOwnDirectory(sub->get(), "the image directory", dir + "/" + rel);
  });
}

std::string SafeCgroup(const std::string& name) {
  return CheckRelativePath("cgroup", name).ok() ? name : "";
}

}  // namespace paladin::ckpt
