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
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "paladin/quota/region.h"

namespace paladin::ckpt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kManifest = "manifest.json";

json ToJson(const Manifest& m) {
  json files = json::array();
  for (const ImageFile& f : m.files) {
    files.push_back({{"path", f.path}, {"size", f.size}, {"sha256", f.sha256}});
  }
  json gpus = json::array();
  for (const ImageGpu& g : m.gpus) {
    gpus.push_back({{"uuid", g.uuid}, {"name", g.name}, {"memory_bytes", g.memory_bytes}});
  }
  return {{"format", "paladin-image"},
          {"version", m.version},
          {"created_unix", m.created_unix},
          {"workload",
           {{"name", m.name},
            {"command", m.command},
            {"cwd", m.cwd},
            {"pid", m.pid},
            {"run_dir", m.run_dir},
            {"logs", m.logs},
            {"log_targets", m.log_targets},
            {"region", m.region}}},
          {"host", {{"hostname", m.hostname}, {"kernel", m.kernel}, {"arch", m.arch}}},
          {"criu", {{"version", m.criu_version}, {"no_breakpoints", m.criu_no_breakpoints}}},
          {"gpu",
           {{"driver", m.gpu_driver},
            {"mode", m.gpu_mode},
            {"emu_state", m.emu_state},
            {"emu_gpus", m.emu_gpus},
            {"gpus", gpus}}},
          {"files", files}};
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

Status FromJson(const json& j, Manifest* m) {
  std::string format;
  PALADIN_RETURN_IF_ERROR(Field(j, "", "format", &format));
  if (format != "paladin-image") return InvalidArgument("manifest: not a Paladin image");
  PALADIN_RETURN_IF_ERROR(Field(j, "", "version", &m->version));
  if (m->version != kImageFormatVersion) {
    return InvalidArgument("manifest: image format version " + std::to_string(m->version) +
                           " (this Paladin reads version " + std::to_string(kImageFormatVersion) +
                           ")");
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
  PALADIN_RETURN_IF_ERROR(Field(j, "workload", "logs", &m->logs));
  PALADIN_RETURN_IF_ERROR(Field(j, "workload", "log_targets", &m->log_targets));
  PALADIN_RETURN_IF_ERROR(Field(j, "host", "hostname", &m->hostname));
  PALADIN_RETURN_IF_ERROR(Field(j, "host", "kernel", &m->kernel));
  PALADIN_RETURN_IF_ERROR(Field(j, "host", "arch", &m->arch));
  PALADIN_RETURN_IF_ERROR(Field(j, "criu", "version", &m->criu_version));
  PALADIN_RETURN_IF_ERROR(Field(j, "criu", "no_breakpoints", &m->criu_no_breakpoints));
  PALADIN_RETURN_IF_ERROR(Field(j, "workload", "region", &m->region));
  PALADIN_RETURN_IF_ERROR(Field(j, "gpu", "driver", &m->gpu_driver));
  PALADIN_RETURN_IF_ERROR(Field(j, "gpu", "mode", &m->gpu_mode));
  PALADIN_RETURN_IF_ERROR(Field(j, "gpu", "emu_state", &m->emu_state));
  PALADIN_RETURN_IF_ERROR(Field(j, "gpu", "emu_gpus", &m->emu_gpus));
  if (m->logs.size() != m->log_targets.size()) {
    return InvalidArgument("manifest: workload.logs and workload.log_targets differ in length");
  }
  json gpus;
  PALADIN_RETURN_IF_ERROR(Field(j, "gpu", "gpus", &gpus));
  for (const json& g : gpus) {
    ImageGpu gpu;
    PALADIN_RETURN_IF_ERROR(Field(g, "", "uuid", &gpu.uuid));
    PALADIN_RETURN_IF_ERROR(Field(g, "", "name", &gpu.name));
    PALADIN_RETURN_IF_ERROR(Field(g, "", "memory_bytes", &gpu.memory_bytes));
    m->gpus.push_back(gpu);
  }
  json files;
  PALADIN_RETURN_IF_ERROR(Field(j, "", "files", &files));
  for (const json& f : files) {
    ImageFile file;
    PALADIN_RETURN_IF_ERROR(Field(f, "", "path", &file.path));
    PALADIN_RETURN_IF_ERROR(Field(f, "", "size", &file.size));
    PALADIN_RETURN_IF_ERROR(Field(f, "", "sha256", &file.sha256));
    if (file.path.empty() || file.path[0] == '/' || file.path.find("..") != std::string::npos) {
      return InvalidArgument("manifest: file path '" + file.path + "' leaves the image");
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

// Feeds the whole file to `ctx`. A file larger than two blocks is read by a thread of its own
// into three rotating blocks while this one hashes: reading from disk and hashing overlap, so
// the pair runs at the speed of the slower, not of their sum.
Status HashFd(int fd, const std::string& path, EVP_MD_CTX* ctx) {
  struct stat st {};
  const bool large = fstat(fd, &st) == 0 && st.st_size > static_cast<off_t>(2 * kHashBlock);
  if (!large) {
    std::unique_ptr<unsigned char[]> buf(new unsigned char[kSmallBlock]);
    while (true) {
      StatusOr<size_t> got = ReadBlock(fd, buf.get(), kSmallBlock, path);
      if (!got.ok()) return got.status();
      EVP_DigestUpdate(ctx, buf.get(), *got);
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
    EVP_DigestUpdate(ctx, blocks[b].get(), sizes[b]);
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

StatusOr<std::string> Sha256File(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot read " + path + ": " + strerror(errno));
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  const Status hashed = HashFd(fd, path, ctx);
  close(fd);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, digest, &len);
  EVP_MD_CTX_free(ctx);
  if (!hashed.ok()) return hashed;
  std::string hex;
  char byte[3];
  for (unsigned int i = 0; i < len; ++i) {
    snprintf(byte, sizeof byte, "%02x", digest[i]);
    hex += byte;
  }
  return hex;
}

Status WriteManifest(const std::string& dir, Manifest m) {
  m.files.clear();
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const std::string rel = fs::relative(it->path(), dir).string();
    if (rel == kManifest) continue;
    StatusOr<std::string> hash = Sha256File(it->path().string());
    if (!hash.ok()) return hash.status();
    m.files.push_back({rel, static_cast<uint64_t>(it->file_size()), *hash});
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

StatusOr<Manifest> ReadManifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifest;
  std::ifstream in(path);
  if (!in) return NotFound(path + ": no manifest (not a Paladin image, or an unfinished one)");
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument(path + ": not valid JSON (truncated or corrupted)");
  }
  Manifest m;
  Status s = FromJson(j, &m);
  if (!s.ok()) return InvalidArgument(path + ": " + s.message());
  return m;
}

StatusOr<VerifyReport> VerifyImage(const std::string& dir, const std::string& local_criu_version) {
  StatusOr<Manifest> m = ReadManifest(dir);
  if (!m.ok()) return m.status();
  VerifyReport report;
  for (const ImageFile& f : m->files) {
    const std::string path = dir + "/" + f.path;
    std::error_code ec;
    const uint64_t size = fs::file_size(path, ec);
    if (ec) return InvalidArgument(f.path + ": missing from the image");
    if (size != f.size) {
      return InvalidArgument(f.path + ": " + std::to_string(size) + " bytes, the manifest says " +
                             std::to_string(f.size) + " (truncated or altered)");
    }
    StatusOr<std::string> hash = Sha256File(path);
    if (!hash.ok()) return hash.status();
    if (*hash != f.sha256) {
      return InvalidArgument(f.path + ": SHA-256 " + hash->substr(0, 16) +
                             "… does not match the manifest's " + f.sha256.substr(0, 16) +
                             "… (corrupted)");
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
    out << "           " << g.uuid << " " << g.name << ", held "
        << quota::FormatSize(g.memory_bytes) << "\n";
  }
  out << "files:     " << m.files.size() << ", " << quota::FormatSize(bytes) << "\n"
      << "format:    version " << m.version << "\n";
  return out.str();
}

}  // namespace paladin::ckpt
