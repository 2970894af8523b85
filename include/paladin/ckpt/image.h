// A checkpoint image: a directory of CRIU's files plus Paladin's own (the workload's logs, GPU
// metadata) and `manifest.json`, which names the workload, where and with what it was taken, and
// every file's size and SHA-256. `Verify` runs before every restore: a corrupted, truncated or
// incompatible image is refused with what is wrong, and nothing is started.
// Format: docs/formats/image.md.
#ifndef PALADIN_CKPT_IMAGE_H_
#define PALADIN_CKPT_IMAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "paladin/base/status.h"

namespace paladin::ckpt {

inline constexpr int kImageFormatVersion = 1;

struct ImageFile {
  std::string path;  // relative to the image directory
  uint64_t size = 0;
  std::string sha256;  // lowercase hex
};

struct ImageGpu {
  std::string uuid;
  std::string name;
  uint64_t memory_bytes = 0;  // what the workload held there
};

struct Manifest {
  int version = kImageFormatVersion;
  int64_t created_unix = 0;
  // The workload.
  std::string name;
  std::vector<std::string> command;
  std::string cwd;
  int64_t pid = 0;  // host pid of the tree's root when dumped
  // The uid the workload's command ran as (-1: not recorded). CRIU restores it from the image,
  // so a node agent must hold that uid for the job before it restores it (docs/agent.md).
  int64_t uid = -1;
  std::string run_dir;
  std::vector<std::string> logs;         // image-relative copies of stdout/stderr
  std::vector<std::string> log_targets;  // where each log lives on the host
  std::string region;  // the GPU-memory accounting region's path ("" without a quota); a copy
                       // travels in the image as quota.region
  // The node lease paladin-workload-init held (fence.h) when dumped, "" for none: at a restore
  // the restoring agent's own lease takes its place (CRIU's --inherit-fd key).
  std::string lease;
  // The processes stopped (SIGSTOP, state T) when dumped, by their pid in the job's PID
  // namespace: CRIU restores them stopped, and Paladin's resume leaves them so.
  std::vector<int64_t> stopped;
  // Where and with what.
  std::string hostname;
  std::string kernel;
  std::string arch;
  std::string criu_version;
  bool criu_no_breakpoints = false;
  std::string gpu_driver;  // "" when the workload used no GPU; "emulated ..." for emucuda
  std::string gpu_mode;    // "", "real" or "emulated"
  std::string emu_state;   // emulated GPUs: the state file the job used
  std::string emu_gpus;
  std::vector<ImageGpu> gpus;
  std::vector<ImageFile> files;
};

// SHA-256 of a file, lowercase hex.
StatusOr<std::string> Sha256File(const std::string& path);
// SHA-256 of what is left to read from `fd` (`name` for errors).
StatusOr<std::string> Sha256Fd(int fd, const std::string& name);

// Fills m.files with every regular file under `dir` (except manifest.json) and writes
// dir/manifest.json.
Status WriteManifest(const std::string& dir, Manifest m);
// Reads dir/manifest.json (a regular file, not followed through a symlink); an error names what
// is malformed. Every path the manifest names is checked: the image's own paths are relative and
// stay inside it, the host paths are absolute with no "..", none holds a NUL byte.
StatusOr<Manifest> ReadManifest(const std::string& dir);

struct VerifyReport {
  int files_checked = 0;
  uint64_t bytes_checked = 0;
};
// Checks the manifest and every file's presence, size and hash; and that this host can restore
// it (architecture, CRIU major version). Each file is opened below `dir` without following any
// symlink and must be a regular file; the image may hold nothing else but directories, CRIU's
// `parent` links to its pre-dumps, what a restore writes (restore.log, restored.pid,
// stats-restore) and the names in `also_allowed` (top-level files of the caller's own).
StatusOr<VerifyReport> VerifyImage(const std::string& dir, const std::string& local_criu_version,
                                   const std::vector<std::string>& also_allowed = {});

// A human summary of the manifest (paladin image inspect).
std::string DescribeManifest(const Manifest& m);

}  // namespace paladin::ckpt

#endif  // PALADIN_CKPT_IMAGE_H_
