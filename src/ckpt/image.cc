#include "paladin/ckpt/image.h"

#include <openssl/evp.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

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

StatusOr<std::string> Sha256File(const std::string& path) {
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return IoError("cannot read " + path);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<unsigned char> buf(1 << 20);
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) EVP_DigestUpdate(ctx, buf.data(), n);
  const bool error = ferror(f) != 0;
  fclose(f);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, digest, &len);
  EVP_MD_CTX_free(ctx);
  if (error) return IoError("error reading " + path);
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
