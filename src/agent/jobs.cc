// The job table: what heartbeats report of each workload (state, usage, new log text), exit
// detection, the agent's per-job record (agent.json) and forgetting a job.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "agent_impl.h"
#include "paladin/api/wire.h"
#include "paladin/base/cgroup.h"
#include "paladin/base/process.h"
#include "paladin/ckpt/rank_net.h"
#include "paladin/quota/usage.h"

namespace paladin::agent {

namespace fs = std::filesystem;
namespace key = api::key;

namespace {

constexpr int64_t kMaxLogBytes = int64_t{64} * 1024;  // per stream per heartbeat

}  // namespace

char ProcState(pid_t pid, pid_t* parent) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return '\0';
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 4 >= line.size()) return '\0';
  char state = line[close + 2];
  if (parent != nullptr) *parent = static_cast<pid_t>(std::atoll(line.c_str() + close + 4));
  return state;
}

namespace {

// Appends `text` to `out` as valid UTF-8 (invalid bytes become U+FFFD); returns how many bytes
// were consumed: an incomplete sequence at the end waits for the rest.
size_t AppendUtf8(const std::string& text, std::string* out) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t n = 0;
    if (c < 0x80) {
      n = 1;
    } else if ((c & 0xE0) == 0xC0 && c >= 0xC2) {
      n = 2;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3;
    } else if ((c & 0xF8) == 0xF0 && c <= 0xF4) {
      n = 4;
    }
    if (n == 0) {
      out->append("\xEF\xBF\xBD");
      ++i;
      continue;
    }
    if (i + n > text.size()) break;  // the rest of this character has not been written yet
    bool valid = true;
    for (size_t k = 1; k < n; ++k) {
      valid &= (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    }
    if (!valid) {
      out->append("\xEF\xBF\xBD");
      ++i;
      continue;
    }
    out->append(text, i, n);
    i += n;
  }
  return i;
}

// New text of a log from `offset`, at most kMaxLogBytes; *end is where the next read starts.
// The log lies in the job's own run directory: what is read as root must be the job's plain file
// (not a link, a FIFO or another name of someone else's file), or the job could have the agent
// serve it another file as its log.
std::string ReadLog(const std::string& path, int64_t offset, int64_t* end, int64_t owner) {
  *end = offset;
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st {};
  const bool plain =
      fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
      (st.st_uid == 0 || static_cast<int64_t>(st.st_uid) == owner || st.st_uid == geteuid());
  std::ifstream in;
  if (plain) in.open("/proc/self/fd/" + std::to_string(fd), std::ios::binary);
  close(fd);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const int64_t size = in.tellg();
  if (size <= offset) {
    if (size < offset) *end = size;  // replaced by a shorter file (a restore): start over there
    return "";
  }
  std::string raw(static_cast<size_t>(std::min(size - offset, kMaxLogBytes)), '\0');
  in.seekg(offset);
  in.read(raw.data(), static_cast<std::streamsize>(raw.size()));
  raw.resize(static_cast<size_t>(in.gcount()));
  std::string text;
  *end = offset + static_cast<int64_t>(AppendUtf8(raw, &text));
  return text;
}

bool WaitGone(pid_t pid, double seconds) {
  for (int i = 0; i < static_cast<int>(seconds * 50); ++i) {
    pid_t parent = 0;
    const char state = ProcState(pid, &parent);
    if (state == '\0') return true;
    if (state == 'Z') {
      if (parent == getpid()) waitpid(pid, nullptr, WNOHANG);
      if (parent != getpid()) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ProcState(pid, nullptr) == '\0';
}

}  // namespace

Workload* Agent::Find(const std::string& id, int64_t epoch) {
  for (auto& [key, w] : jobs_) {
    if (key.first == id && (epoch < 0 || key.second == epoch)) return w.get();
  }
  return nullptr;
}

std::vector<api::JobReport> Agent::Reports(bool with_logs) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<api::JobReport> out;
  for (auto& [key, w] : jobs_) {
    api::CopyState state = w->state;
    if (state != api::CopyState::kExited) {
      const char letter = ProcState(static_cast<pid_t>(w->record.pid), nullptr);
      // A fenced job is frozen from the lease's deadline on, whether or not the agent noticed.
      const bool frozen = w->frozen || (w->fenced && LeaseOut());
      state = frozen                           ? api::CopyState::kFrozen
              : letter == 'T' || letter == 't' ? api::CopyState::kStopped
                                               : api::CopyState::kRunning;
    }
    CheckRegion(w.get());
    uint64_t used = 0;
    if (w->region != nullptr) {
      for (int slot = 0; slot < w->region->device_count(); ++slot) used += w->region->used(slot);
    }
    api::JobReport r;
    r.id = w->id;
    r.epoch = w->epoch;
    r.state = state;
    r.pid = w->record.pid;
    r.used_bytes = static_cast<int64_t>(used);
    if (w->region != nullptr) {
      r.quota_bytes = static_cast<int64_t>(w->region->quota());
      r.quota_grows = static_cast<int64_t>(w->region->grows());
      r.refusals = static_cast<int64_t>(w->region->refusals());
    }
    r.exit_code = w->exit_code;
    if (with_logs) {
      r.stdout_text = ReadLog(w->record.stdout_log, w->out_offset, &w->out_pending, w->uid);
      r.stderr_text = ReadLog(w->record.stderr_log, w->err_offset, &w->err_pending, w->uid);
      r.stdout_from = w->out_offset;
      r.stdout_to = w->out_pending;
      r.stderr_from = w->err_offset;
      r.stderr_to = w->err_pending;
    }
    w->exit_reported = state == api::CopyState::kExited;
    out.push_back(std::move(r));
  }
  return out;
}

void Agent::Delivered() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::string, int64_t>> ended;
  for (auto& [key, w] : jobs_) {
    if (w->out_pending != w->out_offset || w->err_pending != w->err_offset) {
      w->out_offset = w->out_pending;
      w->err_offset = w->err_pending;
      if (!w->exit_reported) SaveRecord(*w);
    }
    if (w->exit_reported && !w->busy) ended.push_back(key);
  }
  for (const auto& [id, epoch] : ended) Forget(id, epoch, true);
}

void RemoveLeftPlaces(const ckpt::JobRecord& record, bool group, bool run_dir) {
  if ((!group || record.cgroup.empty()) && (!run_dir || record.run_dir.empty())) return;
  auto remove = [record, group, run_dir](const base::CgroupsLock& held) {
    if (group && !record.cgroup.empty()) {
      (void)base::Cgroup::Existing(record.cgroup).RemoveHolding(held);
    }
    if (run_dir) (void)ckpt::RemoveRunDirUnlessTaken(record, held);
  };
  if (std::optional<base::CgroupsLock> now = base::CgroupsLock::TryExclusive()) {
    remove(*now);
    return;
  }
  std::thread([remove] { remove(base::CgroupsLock::Exclusive()); }).detach();
}

void Agent::PollExits() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, w] : jobs_) {
    if (w->busy || w->state == api::CopyState::kExited) continue;
    const auto pid = static_cast<pid_t>(w->record.pid);
    pid_t parent = 0;
    const char state = ProcState(pid, &parent);
    if (parent == getpid() && state != '\0') {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) != pid) continue;
      w->exit_code = WIFEXITED(status)     ? WEXITSTATUS(status)
                     : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                           : 1;
    } else {
      base::ProcessId id;
      id.pid = static_cast<uint32_t>(pid);
      id.start_time = w->start_time;
      if (state != '\0' && state != 'Z' && base::ProcessAlive(id)) continue;
      w->exit_code.reset();  // not our child: its exit status went to its parent
    }
    w->state = api::CopyState::kExited;
    Say("job " + w->id + " (pid " + std::to_string(pid) + ") exited" +
        (w->exit_code ? " with code " + std::to_string(*w->exit_code) : " (exit code unknown)"));
    if (w->grower) w->grower->Stop();
    RemoveLeftPlaces(w->record, true, false);
  }
}

void Agent::Forget(const std::string& id, int64_t epoch, bool remove_run_dir) {
  auto it = jobs_.find({id, epoch});
  if (it == jobs_.end()) return;
  Workload* w = it->second.get();
  if (w->grower) w->grower->Stop();
  w->grower.reset();
  w->region.reset();
  FreeUser(w);
  std::error_code ec;
  fs::remove_all(w->agent_dir, ec);
  // Only directories of this agent's: a restored job's run directory may be another's path.
  // And not one that another copy now runs from (another agent of this host restored the job
  // there while this one was away, or is restoring it now: its record names that copy's pid).
  if (remove_run_dir && !w->record.run_dir.empty() &&
      (w->record.run_dir.rfind(runs_dir_ + "/", 0) == 0 ||
       w->record.run_dir.rfind(workloads_dir_ + "/", 0) == 0)) {
    RemoveLeftPlaces(w->record, false, true);
  }
  const std::string rank_net = w->rank_net;
  jobs_.erase(it);
  // The rank's network goes with its last copy here.
  if (!rank_net.empty() && std::none_of(jobs_.begin(), jobs_.end(), [&rank_net](const auto& kv) {
        return kv.second->rank_net == rank_net;
      })) {
    if (Status s = ckpt::DestroyRankNet(rank_net); !s.ok()) {
      Say("job " + id + ": removing its rank network " + rank_net + ": " + s.message());
    }
  }
}

void Agent::DropRankNetUnlessUsed(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, w] : jobs_) {
      if (w->rank_net == name) return;
    }
  }
  if (Status s = ckpt::DestroyRankNet(name); !s.ok()) {
    Say("removing rank network " + name + ": " + s.message());
  }
}

void Agent::ApplyRankRoutes(const Json& list) {
  StatusOr<std::vector<api::RankRoute>> routes = api::DecodeRankRoutes(list);
  if (!routes.ok()) {
    Say("heartbeat answer: " + routes.status().message());
    return;
  }
  std::set<std::string> local;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, w] : jobs_) {
      if (!w->rank_address.empty()) local.insert(w->rank_address);
    }
  }
  std::map<std::string, std::string> wanted;
  for (const api::RankRoute& r : *routes) {
    if (local.count(r.address) == 0) wanted[r.address] = r.via;
  }
  for (auto it = rank_routes_.begin(); it != rank_routes_.end();) {
    if (wanted.count(it->first) != 0 || local.count(it->first) != 0) {
      ++it;
      continue;
    }
    if (Status s = ckpt::RemoveRankRoute(it->first); !s.ok()) {
      Say("rank route to " + it->first + ": " + s.message());
      ++it;
      continue;
    }
    Say("rank route to " + it->first + " removed");
    it = rank_routes_.erase(it);
  }
  for (const auto& [address, via] : wanted) {
    auto have = rank_routes_.find(address);
    if (have != rank_routes_.end() && have->second == via) continue;
    if (Status s = ckpt::SetRankRoute(address, via); !s.ok()) {
      Say(std::string("rank route to ")
              .append(address)
              .append(" via ")
              .append(via)
              .append(": ")
              .append(s.message()));
      continue;
    }
    Say(std::string("rank route to ").append(address).append(" via ").append(via));
    rank_routes_[address] = via;
  }
}

// The agent's own copy of the job's record goes next to agent.json: the one in the run directory
// may be rewritten by another copy of the job (a restore by another agent of this host).
void Agent::SaveRecord(const Workload& w) const {
  const Json j = {{key::kId, w.id},
                  {key::kEpoch, w.epoch},
                  {key::kRunDir, w.record.run_dir},
                  {key::kPid, w.record.pid},
                  {"start_time", w.start_time},
                  {key::kGpuIndex, w.gpu_index},
                  {key::kGpuUuid, w.gpu_uuid},
                  {"out_offset", w.out_offset},
                  {"err_offset", w.err_offset},
                  {"uid", w.uid},
                  {"gid", w.gid},
                  {"pooled_uid", w.pooled_uid},
                  {key::kQuotaBytes, w.quota_bytes},
                  {key::kCeilingBytes, w.ceiling_bytes},
                  {"incoming_migration", w.incoming_migration},
                  {"outgoing_migration", w.outgoing_migration},
                  {key::kRankNet, w.rank_net},
                  {"rank_address", w.rank_address},
                  // The job can rewrite what is in its run directory (job.json): a restarted
                  // agent believes this copy.
                  {"region", w.record.region},
                  {"cgroup", w.record.cgroup},
                  {"stdout_log", w.record.stdout_log},
                  {"stderr_log", w.record.stderr_log}};
  std::error_code ec;
  fs::create_directories(w.agent_dir, ec);
  const std::string path = w.agent_dir + "/agent.json";
  {
    std::ofstream out(path + ".tmp");
    out << j.dump(2) << "\n";
    if (!out) {
      Say("cannot write " + path);
      return;
    }
  }
  fs::rename(path + ".tmp", path, ec);
  if (ec) Say("cannot write " + path + ": " + ec.message());
  if (Status s = ckpt::WriteJobFile(w.record, w.agent_dir + "/job.json"); !s.ok()) {
    Say(s.message());
  }
}

void Agent::StartGrower(Workload* w) const {
  if (w->region == nullptr || w->grower != nullptr) return;
  if (w->region->ceiling() <= w->region->quota()) return;
  const std::string id = w->id;
  w->grower = std::make_unique<quota::QuotaGrower>(
      w->region.get(), nvml_.get(),
      [id](const std::string& line) { Say("job " + id + ": " + line); });
  w->grower->Start();
}

Status Agent::KillTree(Workload* w) {
  const auto root = static_cast<pid_t>(w->record.pid);
  if (w->state != api::CopyState::kExited && root > 0) {
    SignalTree(root, SIGKILL);
    if (!WaitGone(root, 10)) {
      return Internal("job " + w->id + " (pid " + std::to_string(root) +
                      ") is still there 10 s after SIGKILL");
    }
  }
  if (w->grower) w->grower->Stop();
  RemoveLeftPlaces(w->record, true, false);
  return Status::Ok();
}

}  // namespace paladin::agent
