// Re-adoption: workloads outlive the agent (their own sessions, detached from it), so a new agent
// with the same data directory and node name finds them by its records
// (DATA/agents/NODE/<job>-<epoch>/agent.json and job.json: root's, mode 0700, written by no job
// and no other agent) and carries on reporting, growing and checkpointing them, or kills them
// when the server says they are stale copies. A record whose pid is gone, or now names another
// process (another start time), is reported once as exited and forgotten.
#include <filesystem>
#include <fstream>

#include "agent_impl.h"
#include "paladin/api/wire.h"
#include "paladin/base/process.h"
#include "paladin/ckpt/checkpoint.h"

namespace paladin::agent {

namespace fs = std::filesystem;
namespace key = api::key;

StatusOr<std::unique_ptr<Workload>> Agent::Track(const std::string& id, int64_t epoch,
                                                 const ckpt::JobRecord& record, int gpu_index,
                                                 const std::string& gpu_uuid) {
  auto w = std::make_unique<Workload>();
  w->id = id;
  w->epoch = epoch;
  w->agent_dir = records_dir_ + "/" + id + "-" + std::to_string(epoch);
  w->record = record;
  // Restored or received here with this agent's lease, or adopted from a previous agent of it.
  w->fenced = lease_fd_ >= 0 && ckpt::HeldLease(record.pid) == lease_path_;
  w->gpu_index = gpu_index;
  w->gpu_uuid = gpu_uuid.empty() ? GpuUuid(gpu_index) : gpu_uuid;
  w->start_time = base::ProcessIdOf(std::to_string(record.pid)).start_time;
  if (!record.region.empty()) {
    std::string error;
    w->region = quota::Region::Open(record.region, &error);
    if (w->region == nullptr) return Internal("job " + id + ": its quota region: " + error);
    // Until the server says otherwise (restore's quota, agent.json's for an adopted job): what
    // the image or the previous agent left.
    w->quota_bytes = w->region->quota();
    w->ceiling_bytes = w->region->ceiling();
  }
  StartGrower(w.get());
  return w;
}

void Agent::AdoptUser(const Json& j, Workload* w) const {
  w->uid = j.value("uid", int64_t{-1});
  w->gid = j.value("gid", int64_t{-1});
  w->pooled_uid = j.value("pooled_uid", false) && uid_pool_ != nullptr;
  w->quota_bytes = j.value(key::kQuotaBytes, w->region != nullptr ? w->region->quota() : 0);
  w->ceiling_bytes = j.value(key::kCeilingBytes, w->region != nullptr ? w->region->ceiling() : 0);
}

void Agent::Adopt() {
  std::error_code ec;
  int adopted = 0;
  for (const auto& entry : fs::directory_iterator(records_dir_, ec)) {
    if (!entry.is_directory()) continue;
    const std::string path = entry.path().string() + "/agent.json";
    std::ifstream in(path);
    if (!in) continue;
    const Json j = Json::parse(in, nullptr, false);
    std::string id;
    int64_t epoch = 0;
    uint64_t start_time = 0;
    int gpu_index = -1;
    std::string gpu_uuid;
    int64_t out_offset = 0;
    int64_t err_offset = 0;
    try {
      id = j.at(key::kId).get<std::string>();
      epoch = j.at(key::kEpoch).get<int64_t>();
      start_time = j.at("start_time").get<uint64_t>();
      gpu_index = j.value(key::kGpuIndex, -1);
      gpu_uuid = j.value(key::kGpuUuid, std::string());
      out_offset = j.value("out_offset", int64_t{0});
      err_offset = j.value("err_offset", int64_t{0});
    } catch (const Json::exception& e) {
      Say("ignoring " + path + ": " + e.what());
      continue;
    }
    StatusOr<ckpt::JobRecord> record = ckpt::ReadJobFile(entry.path().string() + "/job.json");
    if (!record.ok()) {
      Say("ignoring " + path + ": " + record.status().message());
      fs::remove_all(entry.path(), ec);
      continue;
    }
    // What the agent itself recorded wins over job.json, which lies in the job's own directory.
    for (const char* key : {"region", "cgroup", "stdout_log", "stderr_log"}) {
      if (!j.contains(key) || !j[key].is_string()) continue;
      std::string& field = std::string(key) == "region"       ? record->region
                           : std::string(key) == "cgroup"     ? record->cgroup
                           : std::string(key) == "stdout_log" ? record->stdout_log
                                                              : record->stderr_log;
      field = j[key].get<std::string>();
    }
    if (j.contains(key::kPid) && j[key::kPid].is_number_integer())
      record->pid = j[key::kPid].get<int64_t>();
    base::ProcessId pid;
    pid.pid = static_cast<uint32_t>(record->pid);
    pid.start_time = start_time;
    const bool alive = record->pid > 0 && base::ProcessAlive(pid) &&
                       base::ProcessIdOf(std::to_string(record->pid)).start_time == start_time;
    std::unique_ptr<Workload> w;
    if (alive) {
      StatusOr<std::unique_ptr<Workload>> tracked = Track(id, epoch, *record, gpu_index, gpu_uuid);
      if (!tracked.ok()) {
        Say("cannot adopt job " + id + ": " + tracked.status().message());
        continue;
      }
      w = std::move(*tracked);
      w->start_time = start_time;
      AdoptUser(j, w.get());
      w->incoming_migration = j.value("incoming_migration", int64_t{0});
      w->outgoing_migration = j.value("outgoing_migration", int64_t{0});
      w->rank_net = j.value(key::kRankNet, "");
      w->rank_address = j.value("rank_address", "");
      // Frozen by the previous agent, or by its init, when the lease ran out: the server's next
      // answer decides.
      const char state = ProcState(static_cast<pid_t>(record->pid), nullptr);
      if (w->fenced ? LeaseOut() : state == 'T' || state == 't') {
        w->frozen = true;
        frozen_ = true;
      }
      ++adopted;
      Say("adopted job " + id + " (epoch " + std::to_string(epoch) + ", pid " +
          std::to_string(record->pid) + "), left running by a previous agent");
    } else {
      w = std::make_unique<Workload>();
      w->id = id;
      w->epoch = epoch;
      w->agent_dir = entry.path().string();
      w->record = *record;
      w->state = api::CopyState::kExited;
      AdoptUser(j, w.get());
      Say("job " + id + " (pid " + std::to_string(record->pid) +
          ") ended while no agent watched it (exit code unknown)");
    }
    w->out_offset = w->out_pending = out_offset;
    w->err_offset = w->err_pending = err_offset;
    std::lock_guard<std::mutex> lock(mu_);
    jobs_[{id, epoch}] = std::move(w);
  }
  if (adopted > 0) Say("adopted " + std::to_string(adopted) + " running workload(s)");
  // Uids a previous agent held for jobs that are gone (a crash between their end and the record's
  // removal) go back to the pool.
  if (uid_pool_ != nullptr) {
    std::set<std::string> live;
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, w] : jobs_) live.insert(UidHolder(key.first, key.second));
    const int dropped = uid_pool_->Recover(data_dir_ + ":", live);
    if (dropped > 0) Say("gave back " + std::to_string(dropped) + " uid(s) of jobs gone meanwhile");
  }
}

}  // namespace paladin::agent
