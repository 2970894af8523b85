#include "paladin/base/process.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace paladin::base {

namespace {

// The boot-time offset of this process's time namespace, in clock ticks (0 in the host's).
// /proc shows every start time shifted by it, and CRIU restores a tree in a time namespace of
// its own (so that its clocks continue): start times are kept in the host's view.
int64_t BoottimeOffsetTicks() {
  FILE* f = fopen("/proc/self/timens_offsets", "re");
  if (f == nullptr) return 0;
  char name[32];
  long long seconds = 0;
  long long nanos = 0;
  int64_t ticks = 0;
  const long long hz = sysconf(_SC_CLK_TCK);
  while (fscanf(f, "%31s %lld %lld", name, &seconds, &nanos) == 3) {
    if (strcmp(name, "boottime") == 0) ticks = seconds * hz + nanos * hz / 1000000000LL;
  }
  fclose(f);
  return ticks;
}

// Field 22 (starttime) of a /proc/PID/stat text, in the host's view; 0 if unreadable.
uint64_t StartTimeField(const char* stat, char* state) {
  const char* p = strrchr(stat, ')');
  if (p == nullptr) return 0;
  if (state != nullptr) *state = p[1] == ' ' ? p[2] : '?';
  int field = 2;
  for (; *p != '\0' && field < 22; ++p) {
    if (*p == ' ') ++field;
  }
  const int64_t shifted = static_cast<int64_t>(strtoull(p, nullptr, 10));
  return static_cast<uint64_t>(shifted - BoottimeOffsetTicks());
}

// The inode number of a /proc/.../ns/pid link's namespace; 0 when it cannot be read.
uint32_t PidNamespaceOf(const std::string& proc_name) {
  struct stat ns {};
  const std::string path = "/proc/" + proc_name + "/ns/pid";
  return stat(path.c_str(), &ns) == 0 ? static_cast<uint32_t>(ns.st_ino) : 0;
}

// The NSpid values of a /proc/NAME/status: from the namespace /proc belongs to down to the
// process's own. Empty when unreadable.
std::vector<uint32_t> NsPids(const std::string& proc_name) {
  std::vector<uint32_t> pids;
  const std::string status = "/proc/" + proc_name + "/status";
  FILE* f = fopen(status.c_str(), "re");
  if (f == nullptr) return pids;
  char line[256];
  while (fgets(line, sizeof line, f) != nullptr) {
    if (strncmp(line, "NSpid:", 6) != 0) continue;
    char* p = line + 6;
    for (char* end = p;; p = end) {
      const unsigned long next = strtoul(p, &end, 10);
      if (end == p) break;
      pids.push_back(static_cast<uint32_t>(next));
    }
    break;
  }
  fclose(f);
  return pids;
}

// The text of /proc/PID/stat (its first 1023 bytes), NUL-terminated; false with *error set to
// errno when it cannot be opened.
bool ReadStat(uint32_t pid, char (&buf)[1024], int* error) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/stat", pid);
  FILE* f = fopen(path, "re");
  if (f == nullptr) {
    if (error != nullptr) *error = errno;
    return false;
  }
  buf[fread(buf, 1, sizeof buf - 1, f)] = '\0';
  fclose(f);
  return true;
}

constexpr uint32_t kNoParent = ~uint32_t{0};

// Field 4 (ppid) of /proc/PID/stat; kNoParent when it cannot be read (the process is gone).
uint32_t ParentOf(uint32_t pid) {
  char buf[1024];
  if (!ReadStat(pid, buf, nullptr)) return kNoParent;
  // After ") ": the state letter, then the ppid.
  const char* p = strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ' || p[2] == '\0' || p[3] != ' ') return kNoParent;
  char* end = nullptr;
  const unsigned long ppid = strtoul(p + 4, &end, 10);
  return end == p + 4 ? kNoParent : static_cast<uint32_t>(ppid);
}

// Field 22 of /proc/PID/stat in the host's time view, and the state letter; 0 if unreadable.
uint64_t StartTimeOf(uint32_t pid, char* state, int* error) {
  char buf[1024];
  if (!ReadStat(pid, buf, error)) return 0;
  return StartTimeField(buf, state);
}

// Within a tick: a time namespace's offset is not a whole number of ticks, so the same start
// time converted from inside and from outside may differ by one.
bool SameStart(uint64_t seen, uint64_t recorded) {
  return seen + 1 >= recorded && seen <= recorded + 1;
}

}  // namespace

uint32_t OwnProcView() {
  // The host's PID namespace has a fixed inode number (the kernel's PROC_PID_INIT_INO).
  constexpr uint32_t kHostPidNamespace = 0xEFFFFFFCU;
  const uint32_t own = PidNamespaceOf("self");
  if (own == 0 || own == kHostPidNamespace) return 0;
  // One NSpid value: /proc belongs to the process's own namespace.
  return NsPids("self").size() == 1 ? own : 0;
}

ProcessId SelfProcessId() { return ProcessIdOf("self"); }

ProcessId ProcessIdOf(const std::string& proc_name) {
  ProcessId id;
  id.pid = proc_name == "self" ? static_cast<uint32_t>(getpid())
                               : static_cast<uint32_t>(strtoul(proc_name.c_str(), nullptr, 10));
  id.ns_pid = id.pid;
  // NSpid lists the pid in every namespace from the one /proc was mounted in down to the
  // process's own; the first is what the launcher and NVML see, the last is what a restore keeps.
  const std::vector<uint32_t> pids = NsPids(proc_name);
  if (!pids.empty()) {
    id.pid = pids.front();
    id.ns_pid = pids.back();
  }
  id.start_time = StartTimeOf(id.pid, nullptr, nullptr);
  id.view = OwnProcView();
  id.pid_namespace = PidNamespaceOf(proc_name);
  return id;
}

bool ProcessAlive(const ProcessId& id) {
  if (id.pid == 0) return false;
  const uint32_t view = OwnProcView();
  if (id.view != view) return view != 0 || HostPidOf(id) != 0;
  char state = '?';
  int error = 0;
  const uint64_t start = StartTimeOf(id.pid, &state, &error);
  if (error != 0) return error != ENOENT && error != ESRCH;
  if (state == 'Z' || state == 'X') return false;
  return id.start_time == 0 || SameStart(start, id.start_time);
}

bool ProcessDying(const ProcessId& id) {
  const uint32_t pid = id.view == OwnProcView() ? id.pid : HostPidOf(id);
  if (pid == 0 || !ProcessAlive(id)) return false;
  char buf[1024];
  if (!ReadStat(pid, buf, nullptr)) return false;
  // Field 9 (flags): PF_EXITING, the kernel's mark of a task in exit().
  constexpr unsigned long kExiting = 0x4;
  const char* p = strrchr(buf, ')');
  for (int field = 2; p != nullptr && *p != '\0' && field < 9; ++p) {
    if (*p == ' ') ++field;
  }
  if (p != nullptr && (strtoul(p, nullptr, 10) & kExiting) != 0) return true;
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/status", pid);
  FILE* f = fopen(path, "re");
  if (f == nullptr) return false;
  constexpr unsigned long long kKillBit = 1ULL << (SIGKILL - 1);
  bool killed = false;
  char line[256];
  while (!killed && fgets(line, sizeof line, f) != nullptr) {
    if (strncmp(line, "SigPnd:", 7) == 0 || strncmp(line, "ShdPnd:", 7) == 0) {
      killed = (strtoull(line + 7, nullptr, 16) & kKillBit) != 0;
    }
  }
  fclose(f);
  return killed;
}

uint32_t HostPidOf(const ProcessId& id) {
  if (id.pid == 0 || OwnProcView() != 0) return 0;
  if (id.view == 0) return ProcessAlive(id) ? id.pid : 0;
  // Another namespace's process: the one whose start time, own namespace and innermost pid match.
  // Start times are compared first, as they rule out nearly every process cheaply.
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return 0;
  uint32_t found = 0;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const unsigned long pid = strtoul(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    char state = '?';
    const uint64_t start = StartTimeOf(static_cast<uint32_t>(pid), &state, nullptr);
    if (state == 'Z' || state == 'X' || !SameStart(start, id.start_time)) continue;
    const std::vector<uint32_t> pids = NsPids(e->d_name);
    if (!pids.empty() && pids.back() == id.pid && PidNamespaceOf(e->d_name) == id.view) {
      found = static_cast<uint32_t>(pid);
      break;
    }
  }
  closedir(dir);
  return found;
}

std::vector<uint32_t> ProcessTree(uint32_t root) {
  std::map<uint32_t, std::vector<uint32_t>> children;
  if (DIR* dir = opendir("/proc")) {
    while (dirent* e = readdir(dir)) {
      char* end = nullptr;
      const unsigned long pid = strtoul(e->d_name, &end, 10);
      if (end == e->d_name || *end != '\0') continue;
      const uint32_t parent = ParentOf(static_cast<uint32_t>(pid));
      if (parent != kNoParent) children[parent].push_back(static_cast<uint32_t>(pid));
    }
    closedir(dir);
  }
  std::vector<uint32_t> tree;
  if (ParentOf(root) == kNoParent) return tree;
  tree.push_back(root);
  for (size_t i = 0; i < tree.size(); ++i) {
    for (uint32_t child : children[tree[i]]) tree.push_back(child);
  }
  return tree;
}

}  // namespace paladin::base
