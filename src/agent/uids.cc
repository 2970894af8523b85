// The per-job uid pool (uids.h). One file per held uid in the folder, "DIR/UID":
//   job ID
//   holder HOLDER     (one line per copy that holds it)
// written atomically (temporary file, rename) under an exclusive flock of DIR/.lock.
#include "uids.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace paladin::agent {

namespace fs = std::filesystem;

namespace {

bool ParseId(const std::string& text, uint32_t* id) {
  if (text.empty() || text.size() > 10 || text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  const uint64_t value = std::stoull(text);
  if (value > 0xfffffffeull) return false;
  *id = static_cast<uint32_t>(value);
  return true;
}

// FNV-1a: stable across builds and hosts, so a job's first choice is the same on every node.
uint64_t Hash(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

bool KnownToHost(uint32_t id) {
  struct passwd pw {};
  struct passwd* found_pw = nullptr;
  struct group gr {};
  struct group* found_gr = nullptr;
  char buf[4096];
  if (getpwuid_r(id, &pw, buf, sizeof buf, &found_pw) == 0 && found_pw != nullptr) return true;
  return getgrgid_r(id, &gr, buf, sizeof buf, &found_gr) == 0 && found_gr != nullptr;
}

// A holder is one line of the file: no line breaks.
bool ValidName(const std::string& name) {
  return !name.empty() && name.find_first_of("\n\r") == std::string::npos;
}

// A holder "DATA:JOB/EPOCH" whose agent record (DATA/runs/JOB-EPOCH/agent.json) is gone: its
// agent forgot the job without freeing the uid (killed meanwhile) or its data was deleted.
bool HolderGone(const std::string& holder) {
  const size_t colon = holder.rfind(':');
  const size_t slash = holder.rfind('/');
  if (colon == std::string::npos || slash == std::string::npos || slash < colon) return false;
  const std::string record = holder.substr(0, colon) + "/runs/" +
                             holder.substr(colon + 1, slash - colon - 1) + "-" +
                             holder.substr(slash + 1) + "/agent.json";
  std::error_code ec;
  return !fs::exists(record, ec) && !ec;
}

}  // namespace

StatusOr<UidRange> ParseUidRange(const std::string& text) {
  const size_t dash = text.find('-');
  UidRange range;
  if (dash == std::string::npos || !ParseId(text.substr(0, dash), &range.first) ||
      !ParseId(text.substr(dash + 1), &range.last)) {
    return InvalidArgument("--uid-range " + text + ": expected FIRST-LAST, e.g. " +
                           FormatUidRange(kDefaultUidRange));
  }
  if (range.first > range.last) {
    return InvalidArgument("--uid-range " + text + ": the first uid is above the last");
  }
  if (range.first == 0) return InvalidArgument("--uid-range " + text + ": includes root (0)");
  for (uint32_t reserved : {65534u, 65535u}) {
    if (range.first <= reserved && reserved <= range.last) {
      return InvalidArgument("--uid-range " + text + ": includes " + std::to_string(reserved) +
                             " (nobody, or 16-bit -1)");
    }
  }
  return range;
}

std::string FormatUidRange(const UidRange& range) {
  return std::to_string(range.first) + "-" + std::to_string(range.last);
}

std::set<uint32_t> UidsInUse() {
  std::set<uint32_t> uids;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return uids;
  while (dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("Uid:", 0) != 0) continue;
      std::istringstream ids(line.substr(4));
      for (uint32_t id = 0; ids >> id;) uids.insert(id);
      break;
    }
  }
  closedir(proc);
  return uids;
}

int64_t UidOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Uid:", 0) != 0) continue;
    std::istringstream ids(line.substr(4));
    int64_t id = -1;
    ids >> id;
    return id;
  }
  return -1;
}

Status UidPool::Open() {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return IoError("cannot create the uid folder " + dir_ + ": " + ec.message());
  struct stat st {};
  if (lstat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return IoError("the uid folder " + dir_ + " is not a directory");
  }
  if (st.st_uid != geteuid()) {
    return FailedPrecondition("the uid folder " + dir_ + " belongs to uid " +
                              std::to_string(st.st_uid) + ", not to this agent's user");
  }
  chmod(dir_.c_str(), 0700);
  const int fd = Lock();
  if (fd < 0) return IoError("cannot lock " + dir_ + "/.lock: " + strerror(errno));
  close(fd);
  return Status::Ok();
}

int UidPool::Lock() const {
  const int fd = open((dir_ + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return -1;
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      close(fd);
      return -1;
    }
  }
  return fd;
}

bool UidPool::Read(uint32_t uid, Entry* entry) const {
  std::ifstream in(dir_ + "/" + std::to_string(uid));
  if (!in) return false;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("job ", 0) == 0) entry->job = line.substr(4);
    if (line.rfind("holder ", 0) == 0) entry->holders.insert(line.substr(7));
  }
  return true;
}

Status UidPool::Write(uint32_t uid, const Entry& entry) const {
  const std::string path = dir_ + "/" + std::to_string(uid);
  std::error_code ec;
  if (entry.holders.empty()) {
    fs::remove(path, ec);
    return Status::Ok();
  }
  {
    std::ofstream out(path + ".tmp", std::ios::trunc);
    out << "job " << entry.job << "\n";
    for (const std::string& holder : entry.holders) out << "holder " << holder << "\n";
    if (!out) return IoError("cannot write " + path + ".tmp");
  }
  fs::rename(path + ".tmp", path, ec);
  if (ec) return IoError("cannot write " + path + ": " + ec.message());
  return Status::Ok();
}

StatusOr<uint32_t> UidPool::Allocate(const std::string& job, const std::string& holder) {
  if (!ValidName(job) || !ValidName(holder)) return InvalidArgument("bad job or holder name");
  const int fd = Lock();
  if (fd < 0) return IoError("cannot lock " + dir_ + "/.lock: " + strerror(errno));
  const uint64_t size = uint64_t{range_.last} - range_.first + 1;
  const uint64_t start = Hash(job) % size;
  const std::set<uint32_t> running = UidsInUse();
  StatusOr<uint32_t> result = ResourceExhausted(
      "no free uid for job " + job + ": all " + std::to_string(size) +
      " uids of this node's range " + FormatUidRange(range_) +
      " are held by jobs, known to the host or in use by processes (see --uid-range)");
  for (uint64_t i = 0; i < size; ++i) {
    const auto uid = static_cast<uint32_t>(range_.first + (start + i) % size);
    Entry entry;
    if (Read(uid, &entry) && entry.job != job && !Stale(uid, entry, running)) continue;
    // Free, a copy of the same job holds it already (a move between two agents of this host), or
    // what held it is gone.
    if (entry.job != job && (running.count(uid) != 0 || KnownToHost(uid))) continue;
    if (entry.job != job) entry = Entry();
    entry.job = job;
    entry.holders.insert(holder);
    if (Status s = Write(uid, entry); !s.ok()) {
      result = s;
    } else {
      result = uid;
    }
    break;
  }
  close(fd);
  return result;
}

Status UidPool::Reserve(uint32_t uid, const std::string& job, const std::string& holder) {
  if (!ValidName(job) || !ValidName(holder)) return InvalidArgument("bad job or holder name");
  if (uid < range_.first || uid > range_.last) {
    return FailedPrecondition("job " + job + " runs as uid " + std::to_string(uid) +
                              ", outside this node's uid range " + FormatUidRange(range_) +
                              " (give the nodes that exchange jobs the same --uid-range)");
  }
  const int fd = Lock();
  if (fd < 0) return IoError("cannot lock " + dir_ + "/.lock: " + strerror(errno));
  Status result = Status::Ok();
  Entry entry;
  const std::set<uint32_t> running = UidsInUse();
  if (Read(uid, &entry) && entry.job != job && Stale(uid, entry, running)) entry = Entry();
  if (!entry.holders.empty()) {
    if (entry.job != job) {
      result = FailedPrecondition("job " + job + " runs as uid " + std::to_string(uid) +
                                  ", which job " + entry.job + " holds on this node");
    }
  } else if (KnownToHost(uid)) {
    result = FailedPrecondition("job " + job + " runs as uid " + std::to_string(uid) +
                                ", which is a user or group of this host");
  } else if (running.count(uid) != 0) {
    result = FailedPrecondition("job " + job + " runs as uid " + std::to_string(uid) +
                                ", which processes of no job of this node run as");
  }
  if (result.ok()) {
    entry.job = job;
    entry.holders.insert(holder);
    result = Write(uid, entry);
  }
  close(fd);
  return result;
}

bool UidPool::Stale(uint32_t uid, const Entry& entry, const std::set<uint32_t>& running) const {
  if (running.count(uid) != 0) return false;
  // A job being started or restored has its uid before its record and its processes: give it
  // time.
  struct stat st {};
  if (stat((dir_ + "/" + std::to_string(uid)).c_str(), &st) != 0 ||
      time(nullptr) - st.st_mtime < 300) {
    return false;
  }
  for (const std::string& holder : entry.holders) {
    if (!HolderGone(holder)) return false;
  }
  return true;
}

void UidPool::Free(uint32_t uid, const std::string& holder) {
  const int fd = Lock();
  if (fd < 0) return;
  Entry entry;
  if (Read(uid, &entry) && entry.holders.erase(holder) > 0) (void)Write(uid, entry);
  close(fd);
}

int UidPool::Recover(const std::string& prefix, const std::set<std::string>& live) {
  const int fd = Lock();
  if (fd < 0) return 0;
  int dropped = 0;
  std::error_code ec;
  for (const auto& file : fs::directory_iterator(dir_, ec)) {
    uint32_t uid = 0;
    if (!ParseId(file.path().filename().string(), &uid)) continue;
    Entry entry;
    if (!Read(uid, &entry)) continue;
    bool changed = false;
    for (auto it = entry.holders.begin(); it != entry.holders.end();) {
      if (it->rfind(prefix, 0) == 0 && live.count(*it) == 0) {
        it = entry.holders.erase(it);
        changed = true;
        ++dropped;
      } else {
        ++it;
      }
    }
    if (changed) (void)Write(uid, entry);
  }
  close(fd);
  return dropped;
}

std::string UidPool::Owner(uint32_t uid) {
  const int fd = Lock();
  Entry entry;
  Read(uid, &entry);
  if (fd >= 0) close(fd);
  return entry.job;
}

}  // namespace paladin::agent
