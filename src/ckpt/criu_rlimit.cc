// libpaladin-criu-rlimit.so: preloaded into CRIU (ckpt::Criu::Env) when this process lacks
// CAP_SYS_RESOURCE, as root does in Docker containers and some sandboxed virtual machines (they
// drop it from the bounding set). Without it the kernel refuses CRIU's
// prlimit64(pid, resource, nullptr, &old) for a process of another user (EPERM), and CRIU cannot
// dump an unprivileged workload at all ("Can't get rlimit 0"). This library answers such a refused
// read from /proc/PID/limits, the same numbers, and changes nothing else: every other call, and
// every call that succeeds, is the real syscall()'s. Loaded into CRIU (which runs through its own
// loader and libc): plain C library calls only, no sanitizers, no exceptions, nothing of Paladin's.
#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// The rows of /proc/PID/limits, in RLIMIT_* order; the values start at column 26.
const char* const kRows[] = {
    "Max cpu time",       "Max file size",     "Max data size",         "Max stack size",
    "Max core file size", "Max resident set",  "Max processes",         "Max open files",
    "Max locked memory",  "Max address space", "Max file locks",        "Max pending signals",
    "Max msgqueue size",  "Max nice priority", "Max realtime priority", "Max realtime timeout"};

unsigned long long Value(const char* text) {
  return strcmp(text, "unlimited") == 0 ? RLIM64_INFINITY : strtoull(text, nullptr, 10);
}

int FromProc(long pid, long resource, struct rlimit64* out) {
  if (resource < 0 || resource >= static_cast<long>(sizeof kRows / sizeof kRows[0])) return -1;
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/limits", pid);
  FILE* f = fopen(path, "re");
  if (f == nullptr) return -1;
  char line[256];
  int found = -1;
  while (fgets(line, sizeof line, f) != nullptr) {
    const size_t n = strlen(kRows[resource]);
    char soft[64];
    char hard[64];
    if (strncmp(line, kRows[resource], n) != 0 || line[n] != ' ' || strlen(line) < 26) continue;
    if (sscanf(line + 26, "%63s %63s", soft, hard) == 2) {
      out->rlim_cur = Value(soft);
      out->rlim_max = Value(hard);
      found = 0;
    }
    break;
  }
  fclose(f);
  return found;
}

}  // namespace

extern "C" long syscall(long number, ...) {
  static long (*real)(long, ...);
  va_list ap;
  va_start(ap, number);
  const long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
  const long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
  va_end(ap);
  if (real == nullptr) real = reinterpret_cast<long (*)(long, ...)>(dlsym(RTLD_NEXT, "syscall"));
  const long r = real(number, a, b, c, d, e, f);
  // prlimit64(pid, resource, new = NULL, old): the fourth argument is the caller's pointer.
  if (r != 0 && errno == EPERM && number == SYS_prlimit64 && c == 0 && d != 0) {
    auto* old = reinterpret_cast<struct rlimit64*>(d);  // NOLINT(performance-no-int-to-ptr)
    if (FromProc(a, b, old) != 0) {
      errno = EPERM;
      return r;
    }
    errno = 0;
    return 0;
  }
  return r;
}
