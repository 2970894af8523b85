// Placement's CopyIntoRunDir: an image's file copied into the run directory, hashed on the way
// (XXH3-128 per chunk, or SHA-256 in images of format version 1) and checked against the
// manifest.
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <vector>

#include "chunk_hasher.h"
#include "placement.h"
#include "sha256_hex.h"

namespace paladin::ckpt {

namespace {

// The file of the manifest's list at `rel`, or null.
const ImageFile* Listed(const Manifest& m, const std::string& rel) {
  for (const ImageFile& f : m.files) {
    if (f.path == rel) return &f;
  }
  return nullptr;
}

// Writes all `n` bytes of `data` to `fd`.
Status WriteAll(int fd, const char* data, ssize_t n, const std::string& to_name) {
  for (ssize_t done = 0; done < n;) {
    const ssize_t w = write(fd, data + done, static_cast<size_t>(n - done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return IoError("cannot write " + to_name + ": " + strerror(errno));
    done += w;
  }
  return Status::Ok();
}

// Copies `from` to `to` to its end, handing what it reads to `hash`; with `to` < 0 it only
// hashes.
Status CopyHashing(int from, int to, const std::function<void(const uint8_t*, size_t)>& hash,
                   const std::string& rel, const std::string& to_name) {
  std::vector<char> buf(size_t{1} << 20);
  for (;;) {
    const ssize_t n = read(from, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError("cannot read the image's " + rel + ": " + strerror(errno));
    if (n == 0) return Status::Ok();
    hash(reinterpret_cast<const uint8_t*>(buf.data()), static_cast<size_t>(n));
    if (to >= 0) PALADIN_RETURN_IF_ERROR(WriteAll(to, buf.data(), n, to_name));
  }
}

// Reads up to `n` bytes (fewer only at the file's end).
ssize_t ReadFull(int fd, char* data, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = read(fd, data + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(done);
}

// The run directory's `name`, open for reading, when it is a plain file (one link) holding
// exactly the bytes of `from` (`from_st` its stat); an invalid Fd otherwise. `from` is read from
// its start and left at its end.
Fd SameFileIn(int dir, const std::string& name, int from, const struct stat& from_st) {
  const int fd = openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Fd();
  Fd file(fd);
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
      st.st_size != from_st.st_size) {
    return Fd();
  }
  std::vector<char> a(size_t{1} << 16);
  std::vector<char> b(a.size());
  for (;;) {
    const ssize_t n = ReadFull(from, a.data(), a.size());
    const ssize_t m = ReadFull(fd, b.data(), b.size());
    if (n < 0 || n != m || std::memcmp(a.data(), b.data(), static_cast<size_t>(n)) != 0) {
      return Fd();
    }
    if (n == 0) return file;
  }
}

// Copies `from` to `to` and returns the SHA-256 (hex) of what it copied.
StatusOr<std::string> CopySha256(int from, int to, const std::string& rel,
                                 const std::string& to_name) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  const Status copied = CopyHashing(
      from, to, [ctx](const uint8_t* p, size_t n) { EVP_DigestUpdate(ctx, p, n); }, rel, to_name);
  std::string hex = FinishSha256Hex(ctx);
  PALADIN_RETURN_IF_ERROR(copied);
  return hex;
}

// Copies `from` to `to` and returns the XXH3-128 digests (hex) of its chunks.
StatusOr<std::vector<std::string>> CopyXxh3(int from, int to, uint64_t chunk_bytes,
                                            const std::string& rel, const std::string& to_name) {
  ChunkHasher hasher(chunk_bytes);
  PALADIN_RETURN_IF_ERROR(CopyHashing(
      from, to, [&hasher](const uint8_t* p, size_t n) { hasher.Update(p, n); }, rel, to_name));
  return hasher.Finish();
}

// Copies and compares with the manifest's digests; the error says what differs.
Status CopyChecked(int from, int to, const Manifest& m, const ImageFile& listed,
                   const std::string& rel, const std::string& to_name) {
  if (m.version == 1) {
    StatusOr<std::string> hex = CopySha256(from, to, rel, to_name);
    if (!hex.ok()) return hex.status();
    if (*hex == listed.sha256) return Status::Ok();
    return InvalidArgument(rel + ": changed since the image was verified (SHA-256 " +
                           hex->substr(0, 16) + "…, the manifest says " +
                           listed.sha256.substr(0, 16) + "…)");
  }
  StatusOr<std::vector<std::string>> digests = CopyXxh3(from, to, m.chunk_bytes, rel, to_name);
  if (!digests.ok()) return digests.status();
  if (*digests == listed.xxh3) return Status::Ok();
  size_t i = 0;
  while (i < digests->size() && i < listed.xxh3.size() && (*digests)[i] == listed.xxh3[i]) ++i;
  return InvalidArgument(rel + ": changed since the image was verified (XXH3-128 of the chunk at " +
                         std::to_string(i * m.chunk_bytes) + " differs from the manifest's)");
}

}  // namespace

Status CopyIntoRunDir(int image, const Manifest& m, const std::string& rel, const Placement& p,
                      const std::string& name, int mode) {
  const ImageFile* listed = Listed(m, rel);
  if (listed == nullptr) return InvalidArgument(rel + ": not in the image's manifest");
  struct stat from_st {};
  StatusOr<Fd> from = OpenRegularBeneath(image, rel, &from_st);
  if (!from.ok()) return InvalidArgument("the image's " + from.status().message());
  // CRIU checks the mode of the files it reopens; nothing but read and write bits is taken from
  // the image.
  const mode_t want = mode >= 0 ? static_cast<mode_t>(mode) : from_st.st_mode & 0666;
  // A move within one host (or over a shared file system) finds the source's file here, open in
  // the source's stopped copy and holding the image's bytes. It is kept as it is: emptied and
  // written again, it would be shorter for a moment under the source, whose agent would then
  // read its log from the start again. The image's copy is still checked against the manifest.
  if (Fd same = SameFileIn(p.dir.get(), name, from->get(), from_st); same.get() >= 0) {
    if (lseek(from->get(), 0, SEEK_SET) != 0) {
      return IoError("cannot read the image's " + rel + ": " + strerror(errno));
    }
    PALADIN_RETURN_IF_ERROR(CopyChecked(from->get(), -1, m, *listed, rel, p.run_dir + "/" + name));
    if (fchmod(same.get(), want) != 0) {
      return IoError("cannot set the mode of " + p.run_dir + "/" + name + ": " + strerror(errno));
    }
    return Status::Ok();
  }
  if (lseek(from->get(), 0, SEEK_SET) != 0) {
    return IoError("cannot read the image's " + rel + ": " + strerror(errno));
  }
  StatusOr<Fd> to = CreateRegularIn(p.dir.get(), name);
  if (!to.ok()) return Status(to.status().code(), p.run_dir + "/" + to.status().message());
  if (fchmod(to->get(), want) != 0) {
    return IoError("cannot set the mode of " + p.run_dir + "/" + name + ": " + strerror(errno));
  }
  Status checked = CopyChecked(from->get(), to->get(), m, *listed, rel, p.run_dir + "/" + name);
  if (!checked.ok() && checked.code() == StatusCode::kInvalidArgument) {
    (void)ftruncate(to->get(), 0);
  }
  return checked;
}

}  // namespace paladin::ckpt
