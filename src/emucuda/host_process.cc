#include "emucuda/host_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "paladin/base/process.h"

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

// Process identities come from the accounting region's code, so that the emulated driver and
// the quota interposer agree (host pid, start time in the host's time namespace).
HostProcess SelfHostProcess() {
  const base::ProcessId id = base::SelfProcessId();
  return {id.pid, id.start_time, id.view};
}

bool ProcIsOwnPidNamespace() { return base::OwnProcView() != 0; }

uint32_t SelfThreadHostTid() {
  return HostIdFrom("/proc/thread-self/status", static_cast<uint32_t>(gettid()));
}

bool LiveStartTime(uint32_t pid, uint64_t* start_time) {
  if (pid == 0 || !base::ProcessAlive({pid, 0, 0, base::OwnProcView()})) return false;
  *start_time = base::ProcessIdOf(std::to_string(pid)).start_time;
  return *start_time != 0;
}

bool HostProcessAlive(uint32_t pid, uint64_t start_time) {
  return base::ProcessAlive({pid, start_time, 0, base::OwnProcView()});
}

bool HostProcessAlive(const HostProcess& process) {
  return base::ProcessAlive({process.pid, process.start_time, 0, process.view});
}

uint32_t PidSeenHere(const HostProcess& process) {
  if (process.view == base::OwnProcView()) return process.pid;
  return base::HostPidOf({process.pid, process.start_time, 0, process.view});
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
