// FileLocksInImage (checkpoint.h): how many file locks CRIU recorded in an image.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "paladin/ckpt/beneath.h"
#include "paladin/ckpt/checkpoint.h"

namespace paladin::ckpt {

namespace {

// CRIU's image of the dumped tree's file locks (its CR_FD_FILE_LOCKS, one image for the tree): a
// header of two 32-bit magics, then one entry a lock, each a 32-bit little-endian length and that
// many bytes of a FileLockEntry message.
constexpr const char* kFileLocksImage = "filelocks.img";
constexpr size_t kHeaderBytes = 8;
// A lock entry is a handful of varints; anything larger is not CRIU's.
constexpr uint32_t kMaxEntryBytes = 4096;
// The image of a tree with more locks than this is not one this reader trusts.
constexpr off_t kMaxImageBytes = 64 << 20;

Status ReadAll(int fd, std::vector<unsigned char>* out, size_t size) {
  out->resize(size);
  size_t got = 0;
  while (got < size) {
    const ssize_t n = read(fd, out->data() + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return IoError(std::string("cannot read ") + kFileLocksImage + ": " + strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  out->resize(got);
  return Status::Ok();
}

}  // namespace

StatusOr<int> FileLocksInImage(const std::string& dir) {
  StatusOr<Fd> image = OpenDirectory(dir);
  if (!image.ok()) return image.status();
  struct stat st {};
  StatusOr<Fd> file = OpenRegularBeneath(image->get(), kFileLocksImage, &st);
  // CRIU writes the image for every dump with --file-locks; an image without it has no locks.
  if (!file.ok() && file.status().code() == StatusCode::kNotFound) return 0;
  if (!file.ok()) return file.status();
  if (st.st_size > kMaxImageBytes) {
    return InvalidArgument(std::string(kFileLocksImage) + " is " + std::to_string(st.st_size) +
                           " bytes: not a file-lock image");
  }
  std::vector<unsigned char> bytes;
  PALADIN_RETURN_IF_ERROR(ReadAll(file->get(), &bytes, static_cast<size_t>(st.st_size)));
  if (bytes.size() < kHeaderBytes) return 0;
  int locks = 0;
  for (size_t at = kHeaderBytes; at < bytes.size();) {
    if (bytes.size() - at < 4) {
      return InvalidArgument(std::string(kFileLocksImage) + ": an entry's length is cut at byte " +
                             std::to_string(at));
    }
    const uint32_t length =
        static_cast<uint32_t>(bytes[at]) | static_cast<uint32_t>(bytes[at + 1]) << 8 |
        static_cast<uint32_t>(bytes[at + 2]) << 16 | static_cast<uint32_t>(bytes[at + 3]) << 24;
    if (length > kMaxEntryBytes || bytes.size() - at - 4 < length) {
      return InvalidArgument(std::string(kFileLocksImage) + ": entry " + std::to_string(locks) +
                             " of " + std::to_string(length) + " bytes does not fit at byte " +
                             std::to_string(at));
    }
    at += 4 + length;
    ++locks;
  }
  return locks;
}

}  // namespace paladin::ckpt
