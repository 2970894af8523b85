#include "paladin/ckpt/image.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "chunk_hasher.h"
#include "paladin/base/size.h"
#include "paladin/ckpt/beneath.h"
#include "paladin/ckpt/rank_net.h"
#include "sha256_hex.h"

namespace paladin::ckpt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kManifest = "manifest.json";

json ToJson(const Manifest& m) {
  json files = json::array();
  for (const ImageFile& f : m.files) {
    if (m.version == 1) {
      files.push_back({{"path", f.path}, {"size", f.size}, {"sha256", f.sha256}});
    } else {
      files.push_back({{"path", f.path}, {"size", f.size}, {"xxh3", f.xxh3}});
    }
  }
  json gpus = json::array();
  for (const ImageGpu& g : m.gpus) {
    gpus.push_back({{"uuid", g.uuid}, {"name", g.name}, {"memory_bytes", g.memory_bytes}});
  }
  json j = {{"format", "paladin-image"},
            {"version", m.version},
            {"created_unix", m.created_unix},
            {"workload",
             {{"name", m.name},
              {"command", m.command},
              {"cwd", m.cwd},
              {"pid", m.pid},
              {"uid", m.uid},
              {"run_dir", m.run_dir},
              {"logs", m.logs},
              {"log_targets", m.log_targets},
              {"region", m.region},
              {"lease", m.lease},
              {"stopped", m.stopped}}},
            {"host", {{"hostname", m.hostname}, {"kernel", m.kernel}, {"arch", m.arch}}},
            {"criu", {{"version", m.criu_version}, {"no_breakpoints", m.criu_no_breakpoints}}},
            {"gpu",
             {{"driver", m.gpu_driver},
              {"mode", m.gpu_mode},
              {"emu_state", m.emu_state},
              {"emu_gpus", m.emu_gpus},
              {"gpus", gpus}}},
            {"files", files}};
  if (m.version != 1) j["chunk_bytes"] = m.chunk_bytes;
  if (!m.net_ns.empty()) {
    j["workload"]["net_ns"] = m.net_ns;
    j["workload"]["net_address"] = m.net_address;
  }
  return j;
}

// Reads a field, saying which one is missing or of the wrong type.
template <typename T>
Status Field(const json& j, const char* object, const char* key, T* out) {
  const json& parent = object[0] == '\0' ? j : j.at(object);
  if (!parent.contains(key)) {
    return InvalidArgument(std::string("manifest: missing ") + (object[0] ? object : "") +
                           (object[0] ? "." : "") + key);
  }
  try {
    *out = parent.at(key).get<T>();
  } catch (const json::exception&) {
    return InvalidArgument(std::string("manifest: ") + (object[0] ? object : "") +
                           (object[0] ? "." : "") + key + " has the wrong type");
  }
  return Status::Ok();
}

// The places on the host the manifest names are only hints (a restore writes where this node's
// record of the job says), but even a hint must be a plain path: no NUL, no "..", no relative
// path, and an image-relative copy may not leave the image.
Status CheckHostPaths(const Manifest& m) {
  if (!m.run_dir.empty()) {
    PALADIN_RETURN_IF_ERROR(CheckAbsolutePath("manifest: workload.run_dir", m.run_dir));
  }
  if (!m.cwd.empty()) PALADIN_RETURN_IF_ERROR(CheckAbsolutePath("manifest: workload.cwd", m.cwd));
  // A job's logs and region live in its run directory under fixed names (docs/formats/job.md).
  const fs::path run_dir = fs::path(m.run_dir).lexically_normal();
  auto in_run_dir = [&](const std::string& field, const std::string& path,
                        const std::string& name) -> Status {
    PALADIN_RETURN_IF_ERROR(CheckAbsolutePath(field, path));
    if (m.run_dir.empty() || fs::path(path).lexically_normal() != run_dir / name) {
      return InvalidArgument(field + " '" + path + "' is not " + name +
                             " in the job's run directory (workload.run_dir '" + m.run_dir + "')");
    }
    return Status::Ok();
  };
  for (size_t i = 0; i < m.logs.size(); ++i) {
    const std::string index = "[" + std::to_string(i) + "]";
    PALADIN_RETURN_IF_ERROR(CheckRelativePath("manifest: workload.logs" + index, m.logs[i]));
    if (m.logs[i] != "logs/stdout.log" && m.logs[i] != "logs/stderr.log") {
      return InvalidArgument("manifest: workload.logs" + index + " '" + m.logs[i] +
                             "' is neither logs/stdout.log nor logs/stderr.log");
    }
    PALADIN_RETURN_IF_ERROR(in_run_dir("manifest: workload.log_targets" + index, m.log_targets[i],
                                       m.logs[i].substr(5)));
  }
  if (!m.region.empty()) {
    PALADIN_RETURN_IF_ERROR(in_run_dir("manifest: workload.region", m.region, "quota.region"));
  }
  if (!m.emu_state.empty()) {
    PALADIN_RETURN_IF_ERROR(CheckAbsolutePath("manifest: gpu.emu_state", m.emu_state));
    const std::string suffix = ".state";
    if (m.emu_state.size() <= suffix.size() ||
        m.emu_state.compare(m.emu_state.size() - suffix.size(), suffix.size(), suffix) != 0 ||
        m.emu_state[m.emu_state.size() - suffix.size() - 1] == '/') {
      return InvalidArgument("manifest: gpu.emu_state '" + m.emu_state +
                             "' is not an emulated GPU state file (NAME.state)");
    }
  }
  return Status::Ok();
}

// A version 2 file's digest list: one per chunk, each 32 lowercase hex digits.
Status CheckDigests(const Manifest& m, const ImageFile& f) {
  const uint64_t chunks = (f.size + m.chunk_bytes - 1) / m.chunk_bytes;
  if (f.xxh3.size() != chunks) {
    return InvalidArgument("manifest: " + f.path + " has " + std::to_string(f.xxh3.size()) +
                           " chunk digests (xxh3); its size needs " + std::to_string(chunks));
  }
  for (const std::string& d : f.xxh3) {
    if (d.size() != 2 * kChunkDigestBytes ||
        d.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return InvalidArgument("manifest: " + f.path + " has a malformed chunk digest '" +
                             d.substr(0, 40) + "'");
    }
  }
  return Status::Ok();
}

Status FromJson(const json& j, Manifest* m) {
  std::string format;
  PALADIN_RETURN_IF_ERROR(Field(j, "", "format", &format));
  if (format != "paladin-image") return InvalidArgument("manifest: not a Paladin image");
  PALADIN_RETURN_IF_ERROR(Field(j, "", "version", &m->version));
  if (m->version < kOldestImageFormatVersion || m->version > kImageFormatVersion) {
    return InvalidArgument("manifest: image format version " + std::to_string(m->version) +
                           " (this Paladin reads versions " +
                           std::to_string(kOldestImageFormatVersion) + " to " +
                           std::to_string(kImageFormatVersion) + ")");
  }
  m->chunk_bytes = 0;
  if (m->version >= 2) {
    PALADIN_RETURN_IF_ERROR(Field(j, "", "chunk_bytes", &m->chunk_bytes));
    if (m->chunk_bytes < kMinManifestChunkBytes || m->chunk_bytes > kMaxManifestChunkBytes) {
      return InvalidArgument("manifest: chunk_bytes " + std::to_string(m->chunk_bytes) +
                             " is out of range (4 KiB to 64 MiB)");
    }
  }
  for (const char* object : {"workload", "host", "criu", "gpu"}) {
    if (!j.contains(object) || !j.at(object).is_object()) {
      return InvalidArgument(std::string("manifest: missing ") + object);
    }
  }
  PALADIN_RETURN_IF_ERROR(Field(j, "", "created_unix", &m->created_unix));
  PALADIN_RETURN_IF_ERROR(Field(j, "workload", "name", &m->name));
  PALADIN_RETURN_IF_ERROR(Field(j, "workload", "command", &m->command));
  PALADIN_RETURN_IF_ERROR(Field(j, "workload", "cwd", &m->cwd));
  PALADIN_RETURN_IF_ERROR(Field(j, "workload", "pid", &m->pid));
  PALADIN_RETURN_IF_ERROR(Field(j, "workload", "run_dir", &m->run_dir));
  // Optional: images written before it was recorded restore as they always did.
  if (j.at("workload").contains("uid")) {
    PALADIN_RETURN_IF_ERROR(Field(j, "workload", "uid", &m->uid));
    if (m->uid < -1 || m->uid > 0xfffffffe) {
      return InvalidArgument("manifest: workload.uid " + std::to_string(m->uid) + " is not a uid");
    }
  }
  PALADIN_RETURN_IF_ERROR(Field(j, "workload", "logs", &m->logs));
  PALADIN_RETURN_IF_ERROR(Field(j, "workload", "log_targets", &m->log_targets));
  PALADIN_RETURN_IF_ERROR(Field(j, "host", "hostname", &m->hostname));
  PALADIN_RETURN_IF_ERROR(Field(j, "host", "kernel", &m->kernel));
  PALADIN_RETURN_IF_ERROR(Field(j, "host", "arch", &m->arch));
  PALADIN_RETURN_IF_ERROR(Field(j, "criu", "version", &m->criu_version));
  PALADIN_RETURN_IF_ERROR(Field(j, "criu", "no_breakpoints", &m->criu_no_breakpoints));
  PALADIN_RETURN_IF_ERROR(Field(j, "workload", "region", &m->region));
  // Optional: images of jobs that held no lease, and images older than the lease, lack it.
  if (j.at("workload").contains("lease")) {
    PALADIN_RETURN_IF_ERROR(Field(j, "workload", "lease", &m->lease));
  }
  // Optional: images of jobs in their launcher's network lack them.
  if (j.at("workload").contains("net_ns")) {
    PALADIN_RETURN_IF_ERROR(Field(j, "workload", "net_ns", &m->net_ns));
    PALADIN_RETURN_IF_ERROR(Field(j, "workload", "net_address", &m->net_address));
    PALADIN_RETURN_IF_ERROR(CheckAbsolutePath("manifest: workload.net_ns", m->net_ns));
    if (!m->net_address.empty()) {
      Status address = CheckRankAddress(m->net_address);
      if (!address.ok())
        return InvalidArgument("manifest: workload.net_address: " + address.message());
    }
  }
  // Optional: images older than it had every process resumed.
  if (j.at("workload").contains("stopped")) {
    PALADIN_RETURN_IF_ERROR(Field(j, "workload", "stopped", &m->stopped));
    for (size_t i = 0; i < m->stopped.size(); ++i) {
      // PID_MAX_LIMIT: no pid is larger on any Linux.
      if (m->stopped[i] < 1 || m->stopped[i] > (int64_t{1} << 22)) {
        return InvalidArgument("manifest: workload.stopped[" + std::to_string(i) + "] " +
                               std::to_string(m->stopped[i]) + " is not a pid");
      }
    }
  }
  PALADIN_RETURN_IF_ERROR(Field(j, "gpu", "driver", &m->gpu_driver));
  PALADIN_RETURN_IF_ERROR(Field(j, "gpu", "mode", &m->gpu_mode));
  PALADIN_RETURN_IF_ERROR(Field(j, "gpu", "emu_state", &m->emu_state));
  PALADIN_RETURN_IF_ERROR(Field(j, "gpu", "emu_gpus", &m->emu_gpus));
  if (m->logs.size() != m->log_targets.size()) {
    return InvalidArgument("manifest: workload.logs and workload.log_targets differ in length");
  }
  PALADIN_RETURN_IF_ERROR(CheckHostPaths(*m));
  json gpus;
  PALADIN_RETURN_IF_ERROR(Field(j, "gpu", "gpus", &gpus));
  if (!gpus.is_array()) return InvalidArgument("manifest: gpu.gpus has the wrong type");
  for (const json& g : gpus) {
    ImageGpu gpu;
    PALADIN_RETURN_IF_ERROR(Field(g, "", "uuid", &gpu.uuid));
    PALADIN_RETURN_IF_ERROR(Field(g, "", "name", &gpu.name));
    PALADIN_RETURN_IF_ERROR(Field(g, "", "memory_bytes", &gpu.memory_bytes));
    m->gpus.push_back(gpu);
  }
  json files;
  PALADIN_RETURN_IF_ERROR(Field(j, "", "files", &files));
  if (!files.is_array()) return InvalidArgument("manifest: files has the wrong type");
  std::set<std::string> paths;
  for (const json& f : files) {
    ImageFile file;
    PALADIN_RETURN_IF_ERROR(Field(f, "", "path", &file.path));
    const std::string field = "manifest: files[" + std::to_string(m->files.size()) + "].path";
    PALADIN_RETURN_IF_ERROR(CheckRelativePath(field, file.path));
    if (file.path == kManifest) return InvalidArgument(field + " names the manifest itself");
    if (!paths.insert(file.path).second) {
      return InvalidArgument(field + " '" + file.path + "' is listed twice");
    }
    PALADIN_RETURN_IF_ERROR(Field(f, "", "size", &file.size));
    if (m->version == 1) {
      PALADIN_RETURN_IF_ERROR(Field(f, "", "sha256", &file.sha256));
    } else {
      PALADIN_RETURN_IF_ERROR(Field(f, "", "xxh3", &file.xxh3));
      PALADIN_RETURN_IF_ERROR(CheckDigests(*m, file));
    }
    m->files.push_back(file);
  }
  return Status::Ok();
}

}  // namespace

namespace {

constexpr size_t kHashBlock = size_t{8} << 20;
constexpr size_t kSmallBlock = size_t{1} << 20;

// Reads up to `size` bytes at the file's position; fewer only at its end.
StatusOr<size_t> ReadBlock(int fd, unsigned char* data, size_t size, const std::string& path) {
  size_t got = 0;
  while (got < size) {
    const ssize_t n = read(fd, data + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError("error reading " + path + ": " + strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

using Consumer = std::function<void(const unsigned char*, size_t)>;

// Feeds the whole file to `consume`. A file larger than two blocks is read by a thread of its own
// into three rotating blocks while this one hashes: reading from disk and hashing overlap, so
// the pair runs at the speed of the slower, not of their sum.
Status HashFd(int fd, const std::string& path, const Consumer& consume) {
  struct stat st {};
  const bool large = fstat(fd, &st) == 0 && st.st_size > static_cast<off_t>(2 * kHashBlock);
  if (!large) {
    std::unique_ptr<unsigned char[]> buf(new unsigned char[kSmallBlock]);
    while (true) {
      StatusOr<size_t> got = ReadBlock(fd, buf.get(), kSmallBlock, path);
      if (!got.ok()) return got.status();
      consume(buf.get(), *got);
      if (*got < kSmallBlock) return Status::Ok();
    }
  }
  constexpr int kBlocks = 3;
  std::vector<std::unique_ptr<unsigned char[]>> blocks(kBlocks);
  for (auto& block : blocks) block.reset(new unsigned char[kHashBlock]);
  std::vector<size_t> sizes(kBlocks, 0);
  std::mutex mu;
  std::condition_variable cv;
  std::deque<int> empty = {0, 1, 2};
  std::deque<int> full;
  bool done = false;
  Status error = Status::Ok();
  std::thread reader([&] {
    while (true) {
      int b = 0;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return !empty.empty(); });
        b = empty.front();
        empty.pop_front();
      }
      StatusOr<size_t> n = ReadBlock(fd, blocks[b].get(), kHashBlock, path);
      std::lock_guard<std::mutex> lock(mu);
      if (!n.ok()) error = n.status();
      sizes[b] = n.ok() ? *n : 0;
      full.push_back(b);
      done = !n.ok() || *n < kHashBlock;
      cv.notify_all();
      if (done) return;
    }
  });
  while (true) {
    int b = 0;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return !full.empty(); });
      b = full.front();
      full.pop_front();
    }
    consume(blocks[b].get(), sizes[b]);
    std::lock_guard<std::mutex> lock(mu);
    const bool last = done && full.empty();
    empty.push_back(b);
    cv.notify_all();
    if (last) break;
  }
  reader.join();
  return error;
}

}  // namespace

StatusOr<std::string> Sha256Fd(int fd, const std::string& name) {
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  const Status hashed =
      HashFd(fd, name, [ctx](const unsigned char* p, size_t n) { EVP_DigestUpdate(ctx, p, n); });
  std::string hex = FinishSha256Hex(ctx);
  if (!hashed.ok()) return hashed;
  return hex;
}

StatusOr<std::string> Sha256File(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot read " + path + ": " + strerror(errno));
  StatusOr<std::string> hash = Sha256Fd(fd, path);
  close(fd);
  return hash;
}

namespace {

StatusOr<std::vector<std::string>> Xxh3Fd(int fd, uint64_t chunk_bytes, const std::string& name) {
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  ChunkHasher hasher(chunk_bytes);
  PALADIN_RETURN_IF_ERROR(
      HashFd(fd, name, [&hasher](const unsigned char* p, size_t n) { hasher.Update(p, n); }));
  return hasher.Finish();
}

StatusOr<std::vector<std::string>> Xxh3File(const std::string& path, uint64_t chunk_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot read " + path + ": " + strerror(errno));
  StatusOr<std::vector<std::string>> digests = Xxh3Fd(fd, chunk_bytes, path);
  close(fd);
  return digests;
}

}  // namespace

Status WriteManifest(const std::string& dir, Manifest m) {
  if (m.version != 1) {
    m.version = kImageFormatVersion;
    if (m.chunk_bytes < kMinManifestChunkBytes || m.chunk_bytes > kMaxManifestChunkBytes) {
      return InvalidArgument("manifest chunk size out of range");
    }
  }
  m.files.clear();
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    // Only what is a regular file itself: a symlink in the image (CRIU's parent link) is never
    // followed, so nothing outside the image is listed or hashed.
    if (!fs::is_regular_file(it->symlink_status(ec))) continue;
    const std::string rel = fs::relative(it->path(), dir).string();
    if (rel == kManifest) continue;
    ImageFile file{rel, static_cast<uint64_t>(it->file_size()), "", {}};
    if (m.version == 1) {
      StatusOr<std::string> hash = Sha256File(it->path().string());
      if (!hash.ok()) return hash.status();
      file.sha256 = *hash;
    } else {
      StatusOr<std::vector<std::string>> digests = Xxh3File(it->path().string(), m.chunk_bytes);
      if (!digests.ok()) return digests.status();
      file.xxh3 = std::move(*digests);
    }
    m.files.push_back(std::move(file));
  }
  if (ec) return IoError("cannot list " + dir + ": " + ec.message());
  std::sort(m.files.begin(), m.files.end(),
            [](const ImageFile& a, const ImageFile& b) { return a.path < b.path; });
  const std::string tmp = dir + "/" + kManifest + ".tmp";
  {
    std::ofstream out(tmp);
    out << ToJson(m).dump(2) << "\n";
    if (!out) return IoError("cannot write " + tmp);
  }
  fs::rename(tmp, dir + "/" + kManifest, ec);
  if (ec) return IoError("cannot write " + dir + "/" + kManifest + ": " + ec.message());
  return Status::Ok();
}

namespace {

constexpr int64_t kMaxManifestBytes = int64_t{64} << 20;

StatusOr<Manifest> ReadManifestAt(int dir, const std::string& dir_name) {
  const std::string path = dir_name + "/" + kManifest;
  struct stat st {};
  StatusOr<Fd> fd = OpenRegularBeneath(dir, kManifest, &st);
  if (!fd.ok() && fd.status().code() == StatusCode::kNotFound) {
    return NotFound(path + ": no manifest (not a Paladin image, or an unfinished one)");
  }
  if (!fd.ok()) return InvalidArgument(dir_name + "/" + fd.status().message());
  if (st.st_size > kMaxManifestBytes) {
    return InvalidArgument(path + ": " + std::to_string(st.st_size) +
                           " bytes, more than a manifest may have (64 MiB)");
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = read(fd->get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError("cannot read " + path + ": " + strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument(path + ": not valid JSON (truncated or corrupted)");
  }
  Manifest m;
  Status s = FromJson(j, &m);
  if (!s.ok()) return InvalidArgument(path + ": " + s.message());
  return m;
}

// CRIU links a dump to the pre-dump it builds on with a symlink named `parent`: `pre-N` in the
// image's top directory, `../pre-N` in a pre-dump's. Those, pointing at a pre-dump directory of
// the same image, are the only symlinks an image holds.
bool IsParentLink(int dir, const std::string& rel, const struct stat& st) {
  if (!S_ISLNK(st.st_mode) || st.st_size <= 0 || st.st_size > 64) return false;
  char target[65] = {0};
  const ssize_t n = readlinkat(dir, rel.c_str(), target, sizeof target - 1);
  if (n != st.st_size) return false;
  const std::string to(target, static_cast<size_t>(n));
  auto pre_dump = [](const std::string& name) {
    return name.size() > 4 && name.rfind("pre-", 0) == 0 &&
           name.find_first_not_of("0123456789", 4) == std::string::npos;
  };
  std::string pre;
  if (rel == "parent") {
    pre = to;
  } else if (rel.size() > 7 && rel.compare(rel.size() - 7, 7, "/parent") == 0 &&
             pre_dump(rel.substr(0, rel.size() - 7)) && to.rfind("../", 0) == 0) {
    pre = to.substr(3);
  } else {
    return false;
  }
  if (!pre_dump(pre)) return false;
  struct stat target_st {};
  return fstatat(dir, pre.c_str(), &target_st, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISDIR(target_st.st_mode);
}

// Everything in the image is a file the manifest lists, a directory, a parent link, the manifest,
// what a restore writes, or one of `also_allowed`; anything else (a symlink out of the image, a
// FIFO, a device, a file nobody listed, which CRIU might read) is refused by name.
Status CheckEntries(int dir, const Manifest& m, const std::vector<std::string>& also_allowed) {
  std::set<std::string> listed = {kManifest, "restore.log", "restored.pid", "stats-restore"};
  for (const ImageFile& f : m.files) listed.insert(f.path);
  for (const std::string& name : also_allowed) listed.insert(name);
  return WalkBeneath(dir, [&](const std::string& rel, const struct stat& st) -> Status {
    if (S_ISDIR(st.st_mode)) return Status::Ok();
    if (S_ISREG(st.st_mode)) {
      if (listed.count(rel) > 0) return Status::Ok();
      return InvalidArgument(rel + ": not in the manifest (added to the image after it was taken)");
    }
    if (IsParentLink(dir, rel, st)) return Status::Ok();
    if (S_ISLNK(st.st_mode)) {
      char target[256] = {0};
      const ssize_t n = readlinkat(dir, rel.c_str(), target, sizeof target - 1);
      return InvalidArgument(rel + ": a symlink" +
                             (n > 0 ? " to " + std::string(target, static_cast<size_t>(n)) : "") +
                             "; an image holds regular files only (symlinks are not followed)");
    }
    return InvalidArgument(rel + ": " + FileTypeName(st.st_mode) +
                           "; an image holds regular files only");
  });
}

}  // namespace

StatusOr<Manifest> ReadManifest(const std::string& dir) {
  StatusOr<Fd> fd = OpenDirectory(dir);
  if (!fd.ok() && fd.status().code() == StatusCode::kNotFound) {
    return NotFound(dir + "/" + kManifest +
                    ": no manifest (not a Paladin image, or an unfinished one)");
  }
  if (!fd.ok()) return fd.status();
  return ReadManifestAt(fd->get(), dir);
}

Status VerifyFileContents(int fd, const Manifest& m, const ImageFile& f, uint64_t* bytes_hashed) {
  *bytes_hashed += f.size;
  if (m.version == 1) {
    StatusOr<std::string> hash = Sha256Fd(fd, f.path);
    if (!hash.ok()) return hash.status();
    if (*hash != f.sha256) {
      return InvalidArgument(f.path + ": SHA-256 " + hash->substr(0, 16) +
                             "… does not match the manifest's " + f.sha256.substr(0, 16) +
                             "… (corrupted)");
    }
    return Status::Ok();
  }
  StatusOr<std::vector<std::string>> digests = Xxh3Fd(fd, m.chunk_bytes, f.path);
  if (!digests.ok()) return digests.status();
  for (size_t i = 0; i < f.xxh3.size(); ++i) {
    const std::string got = i < digests->size() ? (*digests)[i] : "(none)";
    if (got != f.xxh3[i]) {
      return InvalidArgument(f.path + " at offset " + std::to_string(i * m.chunk_bytes) +
                             ": XXH3-128 " + got.substr(0, 16) +
                             "… does not match the manifest's " + f.xxh3[i].substr(0, 16) +
                             "… (corrupted)");
    }
  }
  if (digests->size() != f.xxh3.size()) {
    return InvalidArgument(f.path + ": longer than the manifest says (changed while read)");
  }
  return Status::Ok();
}

StatusOr<VerifyReport> VerifyImage(const std::string& dir, const std::string& local_criu_version,
                                   const std::vector<std::string>& also_allowed,
                                   bool check_contents) {
  StatusOr<Fd> image = OpenDirectory(dir);
  if (!image.ok()) return image.status();
  StatusOr<Manifest> m = ReadManifestAt(image->get(), dir);
  if (!m.ok()) return m.status();
  PALADIN_RETURN_IF_ERROR(CheckEntries(image->get(), *m, also_allowed));
  VerifyReport report;
  for (const ImageFile& f : m->files) {
    struct stat st {};
    StatusOr<Fd> fd = OpenRegularBeneath(image->get(), f.path, &st);
    if (!fd.ok() && fd.status().code() == StatusCode::kNotFound) {
      return InvalidArgument(f.path + ": missing from the image");
    }
    if (!fd.ok()) return InvalidArgument(fd.status().message());
    const auto size = static_cast<uint64_t>(st.st_size);
    if (size != f.size) {
      return InvalidArgument(f.path + ": " + std::to_string(size) + " bytes, the manifest says " +
                             std::to_string(f.size) + " (truncated or altered)");
    }
    if (check_contents) {
      PALADIN_RETURN_IF_ERROR(VerifyFileContents(fd->get(), *m, f, &report.bytes_hashed));
    }
    ++report.files_checked;
    report.bytes_checked += size;
  }
#if defined(__x86_64__)
  const std::string arch = "x86_64";
#else
  const std::string arch = "unknown";
#endif
  if (m->arch != arch) {
    return FailedPrecondition("the image is for " + m->arch + "; this host is " + arch);
  }
  if (!local_criu_version.empty() && !m->criu_version.empty() &&
      local_criu_version[0] < m->criu_version[0]) {
    return FailedPrecondition("the image was dumped by CRIU " + m->criu_version +
                              "; this host has CRIU " + local_criu_version);
  }
  return report;
}

std::string DescribeManifest(const Manifest& m) {
  std::ostringstream out;
  std::string command;
  for (const std::string& arg : m.command) command += (command.empty() ? "" : " ") + arg;
  uint64_t bytes = 0;
  for (const ImageFile& f : m.files) bytes += f.size;
  out << "workload:  " << m.name << " (" << command << ")\n"
      << "taken:     unix time " << m.created_unix << " on " << m.hostname << " (kernel "
      << m.kernel << ", " << m.arch << "), pid " << m.pid << "\n"
      << "criu:      " << m.criu_version << (m.criu_no_breakpoints ? " (CRIU_FAULT=130)" : "")
      << "\n"
      << "gpu:       " << (m.gpu_driver.empty() ? "none" : m.gpu_driver) << "\n";
  for (const ImageGpu& g : m.gpus) {
    out << "           " << g.uuid << " " << g.name << ", held " << base::FormatSize(g.memory_bytes)
        << "\n";
  }
  if (!m.net_ns.empty()) {
    out << "network:   its own, " << m.net_ns
        << (m.net_address.empty() ? "" : " (address " + m.net_address + ")")
        << ", not in the image\n";
  }
  out << "files:     " << m.files.size() << ", " << base::FormatSize(bytes) << "\n"
      << "format:    version " << m.version
      << (m.version == 1 ? " (SHA-256 per file)"
                         : " (XXH3-128 per " + base::FormatSize(m.chunk_bytes) + " chunk)")
      << "\n";
  return out.str();
}

}  // namespace paladin::ckpt
