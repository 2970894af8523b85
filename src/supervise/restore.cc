// Making a node ready for a checkpoint image and restoring it
// (include/paladin/supervise/supervisor.h).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "paladin/supervise/supervisor.h"

namespace paladin::supervise {
namespace {

namespace fs = std::filesystem;

void Warn(const std::string& line) { std::fprintf(stderr, "paladin: warning: %s\n", line.c_str()); }

void GiveRestoredTo(const std::string& path, int64_t uid, int64_t gid) {
  if (uid < 0 || path.empty()) return;
  (void)lchown(path.c_str(), static_cast<uid_t>(uid), static_cast<gid_t>(gid));
}

// A manifest is untrusted: its emulated state file is only linked to where it is an absolute,
// normal path to a file named *.state (the names Paladin gives them), so that an image cannot
// have links made anywhere else.
bool LooksLikeStateFile(const std::string& path) {
  const fs::path p(path);
  return p.is_absolute() && p.lexically_normal() == p && p.extension() == ".state" &&
         path.find("/../") == std::string::npos;
}

// The job's run directory as the source had it (Owner::kJob), where this node keeps such
// directories: a name that is not the placement's prefix followed by digits is left for
// ckpt::RestoreJob to refuse.
void MakeRunDir(const ckpt::Manifest& manifest, const RestoreSpec& spec) {
  const ckpt::RestorePlacement& placement = spec.options.placement;
  if (placement.run_base.empty() || placement.name_prefix.empty()) return;
  const std::string name = fs::path(manifest.run_dir).lexically_normal().filename().string();
  const std::string& prefix = placement.name_prefix;
  if (name.size() <= prefix.size() || name.rfind(prefix, 0) != 0 ||
      name.find_first_not_of("0123456789", prefix.size()) != std::string::npos) {
    return;
  }
  const std::string dir = placement.run_base + "/" + name;
  if (mkdir(dir.c_str(), 0700) != 0) return;  // there already (a copy of this job on this host)
  GiveRestoredTo(dir, spec.uid, spec.gid);
}

}  // namespace

void PrepareFor(const ckpt::Manifest& manifest, const RestoreSpec& spec) {
  if (manifest.gpu_mode == "emulated" && !spec.emu_state.empty()) {
    LinkControlDir(spec.emu_state);
    // The restored process (the uid in its image) creates its usage file here.
    const int64_t uid = spec.uid >= 0 ? spec.uid : manifest.uid;
    if (uid >= 0 && static_cast<uid_t>(uid) != geteuid()) ShareUsageDir(spec.emu_state);
    if (LooksLikeStateFile(manifest.emu_state)) {
      LinkControlDir(manifest.emu_state);
      LinkStateFile(manifest.emu_state, spec.emu_state);
    } else {
      Warn("the image names '" + manifest.emu_state.substr(0, 200) +
           "' as its emulated GPUs' state file, which is not an absolute *.state path: not "
           "linked");
    }
  }
  if (spec.owner == Owner::kJob) MakeRunDir(manifest, spec);
}

StatusOr<ckpt::JobRecord> Restore(const ckpt::Criu& criu, const RestoreSpec& spec,
                                  const ckpt::Progress& progress, ckpt::PhaseTimes* times) {
  StatusOr<ckpt::Manifest> manifest = ckpt::ReadManifest(spec.image);
  if (!manifest.ok()) {
    return Status(manifest.status().code(), "refusing to restore: " + manifest.status().message());
  }
  if (spec.expect_uid >= 0 && manifest->uid != spec.expect_uid) {
    return PermissionDenied("refusing to restore " + spec.image + ": it holds processes of uid " +
                            std::to_string(manifest->uid) + ", and this restore is for uid " +
                            std::to_string(spec.expect_uid));
  }
  PrepareFor(*manifest, spec);
  ckpt::RestoreOptions2 options = spec.options;
  // Every GPU the process saw must be paired; the ones not paired by the caller go to gpu_uuid.
  for (const ckpt::ImageGpu& g : manifest->gpus) {
    bool paired = false;
    for (const auto& pair : options.gpu_map) paired |= pair.first == g.uuid;
    if (!paired && !spec.gpu_uuid.empty() && g.uuid != spec.gpu_uuid) {
      options.gpu_map.emplace_back(g.uuid, spec.gpu_uuid);
    }
  }
  StatusOr<ckpt::JobRecord> record = ckpt::RestoreJob(criu, spec.image, options, progress, times);
  if (!record.ok()) return record.status();
  HandOver(*record, spec);
  return record;
}

void HandOver(const ckpt::JobRecord& restored, const RestoreSpec& spec) {
  if (spec.owner != Owner::kJob) return;
  for (const std::string& path :
       {restored.run_dir, restored.stdout_log, restored.stderr_log, restored.region}) {
    GiveRestoredTo(path, spec.uid, spec.gid);
  }
}

void LinkControlDir(const std::string& state_path) {
  if (state_path.empty()) return;
  const fs::path control = state_path + ".ctl";
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(control, ec);
  if (fs::is_symlink(st) && fs::read_symlink(control, ec) == kHostControlDir) return;
  // A link or an empty folder is replaced, never anything with contents.
  if (fs::exists(st) || fs::is_symlink(st)) {
    if (!fs::is_symlink(st) && !fs::is_directory(st)) {
      Warn("not linking " + control.string() + ": it is " +
           (fs::is_regular_file(st) ? "a file" : "not a folder"));
      return;
    }
    fs::remove(control, ec);
    if (ec) {
      Warn("not linking " + control.string() + ": " + ec.message());
      return;
    }
  }
  fs::create_directories(control.parent_path(), ec);
  fs::create_directory_symlink(kHostControlDir, control, ec);
  if (ec) Warn("cannot link " + control.string() + ": " + ec.message());
}

void LinkStateFile(const std::string& old_state, const std::string& state) {
  std::error_code ec;
  if (old_state.empty() || old_state == state || fs::exists(fs::symlink_status(old_state, ec))) {
    return;
  }
  fs::create_directories(fs::path(old_state).parent_path(), ec);
  fs::create_symlink(state, old_state, ec);
  if (ec) Warn("cannot link " + old_state + ": " + ec.message());
}

void ShareUsageDir(const std::string& state_path) {
  if (state_path.empty()) return;
  std::error_code ec;
  const fs::path state = fs::canonical(state_path, ec);
  const std::string dir = (ec ? fs::path(state_path) : state).string() + ".usage";
  if (mkdir(dir.c_str(), 01777) != 0 && errno != EEXIST) {
    Warn("cannot create " + dir + ": " + strerror(errno));
    return;
  }
  // Only a real folder is opened up, never what a link points at.
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
    Warn("not opening " + dir + " to the jobs: it is not a folder of this user");
    return;
  }
  if ((st.st_mode & 07777) != 01777 && chmod(dir.c_str(), 01777) != 0) {
    Warn("cannot open " + dir + " to the jobs: " + strerror(errno));
  }
}

}  // namespace paladin::supervise
