#include "process_tree.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "paladin/base/process.h"
#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/fence.h"

namespace paladin::ckpt {

std::vector<pid_t> Tree(pid_t root) {
  std::vector<pid_t> pids;
  for (uint32_t p : base::ProcessTree(static_cast<uint32_t>(root))) {
    pids.push_back(static_cast<pid_t>(p));
  }
  return pids;
}

int64_t NamespacePid(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    int64_t last = -1;
    for (int64_t id = 0; fields >> id;) last = id;
    return last;
  }
  return -1;
}

char ProcessState(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
}

Status StopTree(pid_t root) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::set<pid_t> signalled;
  while (true) {
    bool all_stopped = true;
    for (pid_t pid : Tree(root)) {
      if (signalled.insert(pid).second) kill(pid, SIGSTOP);
      const char state = ProcessState(pid);
      if (state != 'T' && state != 't' && state != 'Z' && state != 'X' && state != '?') {
        all_stopped = false;
      }
    }
    if (all_stopped) return Status::Ok();
    if (std::chrono::steady_clock::now() > deadline) {
      return Internal(
          "the job's processes did not all stop within 10 s of SIGSTOP (one may be "
          "in uninterruptible sleep); nothing was dumped");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

int64_t CommandUid(const std::vector<pid_t>& pids) {
  int64_t found = -1;
  for (pid_t pid : pids) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    int64_t uid = -1;
    while (std::getline(in, line)) {
      if (line.rfind("Uid:", 0) == 0) {
        std::istringstream(line.substr(4)) >> uid;
        break;
      }
    }
    if (uid > 0) return uid;
    if (uid == 0) found = 0;
  }
  return found;
}

std::vector<base::ProcessId> RestoredIds(const std::vector<pid_t>& pids) {
  std::vector<base::ProcessId> ids;
  ids.reserve(pids.size());
  for (pid_t pid : pids) ids.push_back(base::ProcessIdOf(std::to_string(pid)));
  return ids;
}

std::vector<int64_t> StoppedProcesses(const std::vector<pid_t>& pids) {
  std::vector<int64_t> stopped;
  for (pid_t pid : pids) {
    if (ProcessState(pid) != 'T') continue;
    const int64_t ns_pid = NamespacePid(pid);
    if (ns_pid > 0) stopped.push_back(ns_pid);
  }
  return stopped;
}

void ContinueTree(pid_t root, const std::vector<int64_t>& stopped) {
  sigval value{};
  value.sival_int = fence::kResumeValue;
  for (pid_t pid : Tree(root)) {
    if (!stopped.empty() &&
        std::find(stopped.begin(), stopped.end(), NamespacePid(pid)) != stopped.end()) {
      continue;
    }
    sigqueue(pid, SIGCONT, value);
  }
}

}  // namespace paladin::ckpt
