#include "emucuda/host_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace paladin::emucuda {
namespace {

// The value of a "Name:\tvalue" line of a /proc status file, up to the end of the line.
std::string StatusField(const std::string& status, const char* name) {
  std::string key = std::string("\n") + name + ":";
  size_t at = status.find(key);
  if (at == std::string::npos) return {};
  at += key.size();
  size_t end = status.find('\n', at);
  return status.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// The first number of an NSpid line ("\t1234\t7"); 0 when there is none.
uint32_t FirstNumber(const std::string& text) {
  const char* p = text.c_str();
  while (*p == ' ' || *p == '\t') ++p;
  return static_cast<uint32_t>(std::strtoul(p, nullptr, 10));
}

uint32_t HostIdFrom(const char* status_path, uint32_t fallback) {
  std::string status;
  if (!ReadSmallFile(status_path, &status)) return fallback;
  uint32_t id = FirstNumber(StatusField("\n" + status, "NSpid"));
  return id != 0 ? id : fallback;
}

// The boot-time offset of this process's time namespace, in clock ticks (0 in the host's).
int64_t BoottimeOffsetTicks() {
  std::string text;
  if (!ReadSmallFile("/proc/self/timens_offsets", &text)) return 0;
  const char* line = std::strstr(text.c_str(), "boottime");
  if (line == nullptr) return 0;
  char* end = nullptr;
  const long long seconds = std::strtoll(line + 8, &end, 10);
  const long long nanos = std::strtoll(end, nullptr, 10);
  const long long hz = sysconf(_SC_CLK_TCK);
  return seconds * hz + nanos * hz / 1000000000LL;
}

// Parses /proc/<pid>/stat: the state letter (field 3) and the start time (field 22). The command
// name (field 2) may hold spaces and parentheses, so fields are counted after its last ')'.
bool ParseStat(const std::string& stat, char* state, uint64_t* start_time) {
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return false;
  const char* p = stat.c_str() + close + 1;
  for (int field = 3; field <= 22; ++field) {
    while (*p == ' ') ++p;
    if (*p == '\0') return false;
    if (field == 3) *state = *p;
    if (field == 22) {
      // /proc shows start times shifted by the reader's time namespace (CRIU restores a tree in
      // one, so that its clocks continue): convert to the host's view, the same from anywhere.
      const int64_t shifted = static_cast<int64_t>(std::strtoull(p, nullptr, 10));
      *start_time = static_cast<uint64_t>(shifted - BoottimeOffsetTicks());
      return true;
    }
    while (*p != ' ' && *p != '\0') ++p;
  }
  return false;
}

}  // namespace

bool ReadSmallFile(const std::string& path, std::string* text) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  text->clear();
  char buffer[4096];
  while (text->size() < 65536) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text->append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return true;
}

HostProcess SelfHostProcess() {
  HostProcess self;
  self.pid = HostIdFrom("/proc/self/status", static_cast<uint32_t>(getpid()));
  std::string stat;
  char state = 0;
  if (ReadSmallFile("/proc/self/stat", &stat)) ParseStat(stat, &state, &self.start_time);
  return self;
}

uint32_t SelfThreadHostTid() {
  return HostIdFrom("/proc/thread-self/status", static_cast<uint32_t>(gettid()));
}

bool LiveStartTime(uint32_t pid, uint64_t* start_time) {
  std::string stat;
  if (pid == 0 || !ReadSmallFile("/proc/" + std::to_string(pid) + "/stat", &stat)) return false;
  char state = 0;
  if (!ParseStat(stat, &state, start_time)) return false;
  return state != 'Z' && state != 'X' && state != 'x';
}

bool HostProcessAlive(uint32_t pid, uint64_t start_time) {
  uint64_t actual = 0;
  // Within a tick: a time namespace's offset is not a whole number of ticks, so the same start
  // time converted from inside and from outside may differ by one.
  return LiveStartTime(pid, &actual) && actual + 1 >= start_time && actual <= start_time + 1;
}

bool ProcessCatchesSignal(uint32_t pid, int signo) {
  std::string status;
  if (signo < 1 || signo > 64) return false;
  if (!ReadSmallFile("/proc/" + std::to_string(pid) + "/status", &status)) return false;
  std::string mask = StatusField("\n" + status, "SigCgt");
  uint64_t bits = std::strtoull(mask.c_str(), nullptr, 16);
  return (bits >> (signo - 1)) & 1u;
}

bool ThreadBelongsTo(uint32_t pid, uint32_t tid) {
  struct stat info {};
  std::string path = "/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid);
  return tid != 0 && stat(path.c_str(), &info) == 0;
}

uint32_t FindThreadNamed(uint32_t pid, const char* name) {
  std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = opendir(tasks.c_str());
  if (dir == nullptr) return 0;
  uint32_t found = 0;
  while (dirent* entry = readdir(dir)) {
    std::string comm;
    if (entry->d_name[0] == '.' || !ReadSmallFile(tasks + "/" + entry->d_name + "/comm", &comm)) {
      continue;
    }
    if (comm == std::string(name) + "\n") {
      found = static_cast<uint32_t>(std::strtoul(entry->d_name, nullptr, 10));
      break;
    }
  }
  closedir(dir);
  return found;
}

}  // namespace paladin::emucuda
