// What filling memory a process has never touched costs on this machine, the way a post-copy
// move's destination fills its restored job (UFFDIO_COPY, 4 MiB at a time) and the way a plain
// copy does (memcpy), optionally while HOLD_MIB of other memory is held (a move's source copy).
// On a virtual machine whose host backs guest memory on first use, memory beyond what the guest
// has used lately costs a host fault per page; this separates that from Paladin's own costs
// (docs/lazy_migration.md, "The page stream's rate").
//
//   bench/fresh_memory SIZE_MIB [HOLD_MIB]      (userfaultfd needs root, or
//                                                vm.unprivileged_userfaultfd=1)
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr size_t kChunk = 4UL << 20;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

char* Map(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  return static_cast<char*>(p);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: fresh_memory SIZE_MIB [HOLD_MIB]\n");
    return 2;
  }
  const size_t bytes = strtoul(argv[1], nullptr, 10) << 20;
  const size_t hold = argc > 2 ? strtoul(argv[2], nullptr, 10) << 20 : 0;
  if (bytes == 0 || bytes % kChunk != 0) {
    fprintf(stderr, "fresh_memory: SIZE_MIB must be a positive multiple of 4\n");
    return 2;
  }
  if (hold > 0) {
    char* held = Map(hold);
    for (size_t i = 0; i < hold; i += 4096) held[i] = 1;
    printf("holding %zu MiB\n", hold >> 20);
  }
  static char buffer[kChunk] __attribute__((aligned(4096)));
  memset(buffer, 7, sizeof(buffer));

  char* plain = Map(bytes);
  auto start = std::chrono::steady_clock::now();
  for (size_t at = 0; at < bytes; at += kChunk) memcpy(plain + at, buffer, kChunk);
  printf("memcpy into %zu MiB of fresh memory: %.2f s\n", bytes >> 20, Seconds(start));
  munmap(plain, bytes);

  const int uffd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC));
  uffdio_api api{};
  api.api = UFFD_API;
  if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api) != 0) {
    perror("userfaultfd");
    return 1;
  }
  char* filled = Map(bytes);
  uffdio_register reg{};
  reg.range.start = reinterpret_cast<unsigned long>(filled);
  reg.range.len = bytes;
  reg.mode = UFFDIO_REGISTER_MODE_MISSING;
  if (ioctl(uffd, UFFDIO_REGISTER, &reg) != 0) {
    perror("UFFDIO_REGISTER");
    return 1;
  }
  start = std::chrono::steady_clock::now();
  for (size_t at = 0; at < bytes; at += kChunk) {
    uffdio_copy copy{};
    copy.dst = reinterpret_cast<unsigned long>(filled + at);
    copy.src = reinterpret_cast<unsigned long>(buffer);
    copy.len = kChunk;
    if (ioctl(uffd, UFFDIO_COPY, &copy) != 0) {
      perror("UFFDIO_COPY");
      return 1;
    }
  }
  printf("UFFDIO_COPY into %zu MiB of fresh memory: %.2f s\n", bytes >> 20, Seconds(start));
  return 0;
}
