// Placement's CopyIntoRunDir: an image's file copied into the run directory, hashed on the way
// and checked against the manifest.
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

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

// Copies `from` to `to` to its end, hashing what it reads into `ctx`.
Status CopyHashing(int from, int to, EVP_MD_CTX* ctx, const std::string& rel,
                   const std::string& to_name) {
  std::vector<char> buf(size_t{1} << 20);
  for (;;) {
    const ssize_t n = read(from, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError("cannot read the image's " + rel + ": " + strerror(errno));
    if (n == 0) return Status::Ok();
    EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(n));
    PALADIN_RETURN_IF_ERROR(WriteAll(to, buf.data(), n, to_name));
  }
}

// Copies `from` to `to` and returns the SHA-256 (hex) of what it copied.
StatusOr<std::string> CopySha256(int from, int to, const std::string& rel,
                                 const std::string& to_name) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  const Status copied = CopyHashing(from, to, ctx, rel, to_name);
  std::string hex = FinishSha256Hex(ctx);
  PALADIN_RETURN_IF_ERROR(copied);
  return hex;
}

}  // namespace

Status CopyIntoRunDir(int image, const Manifest& m, const std::string& rel, const Placement& p,
                      const std::string& name, int mode) {
  const ImageFile* listed = Listed(m, rel);
  if (listed == nullptr) return InvalidArgument(rel + ": not in the image's manifest");
  struct stat from_st {};
  StatusOr<Fd> from = OpenRegularBeneath(image, rel, &from_st);
  if (!from.ok()) return InvalidArgument("the image's " + from.status().message());
  StatusOr<Fd> to = CreateRegularIn(p.dir.get(), name);
  if (!to.ok()) return Status(to.status().code(), p.run_dir + "/" + to.status().message());
  // CRIU checks the mode of the files it reopens; nothing but read and write bits is taken from
  // the image.
  const mode_t want = mode >= 0 ? static_cast<mode_t>(mode) : from_st.st_mode & 0666;
  if (fchmod(to->get(), want) != 0) {
    return IoError("cannot set the mode of " + p.run_dir + "/" + name + ": " + strerror(errno));
  }
  StatusOr<std::string> hex = CopySha256(from->get(), to->get(), rel, p.run_dir + "/" + name);
  if (!hex.ok()) return hex.status();
  if (*hex != listed->sha256) {
    (void)ftruncate(to->get(), 0);
    return InvalidArgument(rel + ": changed since the image was verified (SHA-256 " +
                           hex->substr(0, 16) + "…, the manifest says " +
                           listed->sha256.substr(0, 16) + "…)");
  }
  return Status::Ok();
}

}  // namespace paladin::ckpt
