// A checkpoint image: a directory of CRIU's files plus Paladin's own (the workload's logs, GPU
// metadata) and `manifest.json`, which names the workload, where and with what it was taken, and
// every file's size and content digests (XXH3-128 per chunk; SHA-256 per file in images of format
// version 1). `Verify` runs before every restore: a corrupted, truncated or incompatible image is
// refused with what is wrong, and nothing is started. Format: docs/formats/image.md.
#ifndef PALADIN_CKPT_IMAGE_H_
#define PALADIN_CKPT_IMAGE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "paladin/base/status.h"

namespace paladin::ckpt {

// What WriteManifest writes; ReadManifest also reads version 1 (SHA-256 per file).
inline constexpr int kImageFormatVersion = 2;
inline constexpr int kOldestImageFormatVersion = 1;
// Version 2 digests each file in pieces of `Manifest::chunk_bytes` (this by default: the
// transfer's chunk, so that a transfer checks each arriving chunk against the manifest itself).
inline constexpr uint64_t kManifestChunkBytes = uint64_t{8} << 20;
inline constexpr uint64_t kMinManifestChunkBytes = uint64_t{4} << 10;
inline constexpr uint64_t kMaxManifestChunkBytes = uint64_t{64} << 20;

inline constexpr size_t kChunkDigestBytes = 16;
// XXH3-128 of a chunk, in its canonical (big-endian) byte order.
using ChunkDigest = std::array<uint8_t, kChunkDigestBytes>;
ChunkDigest Xxh3Chunk(const uint8_t* data, size_t size);
std::string DigestHex(const uint8_t* data, size_t size);  // lowercase hex

struct ImageFile {
  std::string path;  // relative to the image directory
  uint64_t size = 0;
  std::string sha256;  // version 1: lowercase hex of the whole file
  // Version 2: XXH3-128 (lowercase hex) of each piece of Manifest::chunk_bytes, in order (the
  // last shorter; an empty file has none).
  std::vector<std::string> xxh3;
};

struct ImageGpu {
  std::string uuid;
  std::string name;
  uint64_t memory_bytes = 0;  // what the workload held there
};

struct Manifest {
  int version = kImageFormatVersion;
  uint64_t chunk_bytes = kManifestChunkBytes;  // version 2 only (0 in version 1)
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
  // The job ran in a network namespace of its own that the image does not hold (a rank's own
  // network, rank_net.h; CRIU's external netns): its file when dumped, and the rank's address on
  // pal0 ("" when it was no rank network). A restore puts the job into a namespace made for it
  // (RestoreOptions2::net_ns, by default the same file on the restoring node). "" for a job in
  // its launcher's network.
  std::string net_ns;
  std::string net_address;
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

// Fills m.files with every regular file under `dir` (except manifest.json), each with its
// digests (XXH3-128 per m.chunk_bytes; SHA-256 when m.version is 1), and writes
// dir/manifest.json.
Status WriteManifest(const std::string& dir, Manifest m);
// Reads dir/manifest.json (a regular file, not followed through a symlink); an error names what
// is malformed. Every path the manifest names is checked: the image's own paths are relative and
// stay inside it, the host paths are absolute with no "..", none holds a NUL byte.
StatusOr<Manifest> ReadManifest(const std::string& dir);

struct VerifyReport {
  int files_checked = 0;
  uint64_t bytes_checked = 0;
  uint64_t bytes_hashed = 0;  // 0 when the contents were not checked
};
// Checks the manifest and every file's presence, size and digests; and that this host can
// restore it (architecture, CRIU major version). Each file is opened below `dir` without
// following any symlink and must be a regular file; the image may hold nothing else but
// directories, CRIU's `parent` links to its pre-dumps, what a restore writes (restore.log,
// restored.pid, stats-restore) and the names in `also_allowed` (top-level files of the caller's
// own). `check_contents` false skips the digests only: for a caller that has verified every
// byte against this manifest's digests already (the transfer's receiver, as chunks arrive).
StatusOr<VerifyReport> VerifyImage(const std::string& dir, const std::string& local_criu_version,
                                   const std::vector<std::string>& also_allowed = {},
                                   bool check_contents = true);
// Checks the content of one open file of the manifest `m` against its digests (the file's size
// already checked); the error names the file and, in version 2, the offset of the first chunk
// that differs. Adds what it hashed to *bytes_hashed.
Status VerifyFileContents(int fd, const Manifest& m, const ImageFile& f, uint64_t* bytes_hashed);

// A human summary of the manifest (paladin image inspect).
std::string DescribeManifest(const Manifest& m);

}  // namespace paladin::ckpt

#endif  // PALADIN_CKPT_IMAGE_H_
