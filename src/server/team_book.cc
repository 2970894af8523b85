#include "team_book.h"

#include <algorithm>
#include <utility>

#include "paladin/base/size.h"

namespace paladin::server {
namespace {

// Sizes in quota reasons: the project's one formatter (negative ones never occur).
std::string QuotaBytes(int64_t b) {
  return base::FormatSize(static_cast<uint64_t>(std::max<int64_t>(b, 0)));
}

}  // namespace

TeamAsk AskOf(const JobRecord& j) { return {j.gpus, j.quota_bytes * j.gpus}; }

void TeamBook::Load(std::vector<TeamRecord> teams) {
  for (TeamRecord& t : teams) {
    std::string name = t.name;
    teams_[name] = std::move(t);
  }
}

const TeamRecord* TeamBook::Find(const std::string& name) const {
  auto it = teams_.find(name);
  return it == teams_.end() ? nullptr : &it->second;
}

TeamRecord& TeamBook::FindOrAdd(const std::string& name) {
  auto it = teams_.find(name);
  if (it == teams_.end()) {
    TeamRecord t;
    t.name = name;
    it = teams_.emplace(name, t).first;
    MarkDirty(name);
  }
  return it->second;
}

TeamUse TeamBook::InUse(const std::string& team, const JobTable& jobs) const {
  TeamUse use;
  for (const auto& [seq, j] : jobs) {
    if (j.team != team || !j.HoldsGpu()) continue;
    const TeamAsk held = AskOf(j);
    use.job_gpus += held.gpus;
    use.job_bytes += held.bytes;
  }
  if (pods_) use.pods = pods_(team);
  for (const auto& [cluster, held] : use.pods) {
    use.pod_gpus += held.gpus;
    use.pod_bytes += held.bytes;
  }
  return use;
}

std::string TeamBook::Refusal(const std::string& team, const TeamAsk& ask, const std::string& asker,
                              const JobTable& jobs) const {
  const TeamRecord* t = Find(team);
  if (t == nullptr || (t->max_gpus <= 0 && t->max_gpu_mem <= 0)) return "";
  return Refusal(*t, InUse(team, jobs), ask, asker);
}

std::string TeamBook::Refusal(const TeamRecord& t, const TeamUse& use, const TeamAsk& ask,
                              const std::string& asker) {
  const int64_t gpus_used = use.job_gpus + use.pod_gpus;
  if (t.max_gpus > 0 && gpus_used + ask.gpus > t.max_gpus) {
    return "team " + t.name + " quota: " + std::to_string(gpus_used) + " of its " +
           std::to_string(t.max_gpus) + " GPUs in use" +
           (use.pod_gpus > 0 ? " (" + std::to_string(use.pod_gpus) + " by its Kubernetes pods)"
                             : "") +
           ", " + asker + " needs " + std::to_string(ask.gpus);
  }
  const int64_t bytes_used = use.job_bytes + use.pod_bytes;
  if (t.max_gpu_mem > 0 && bytes_used + ask.bytes > t.max_gpu_mem) {
    return "team " + t.name + " quota: " + QuotaBytes(bytes_used) + " of its " +
           QuotaBytes(t.max_gpu_mem) + " GPU memory in use" +
           (use.pod_bytes > 0 ? " (" + QuotaBytes(use.pod_bytes) + " by its Kubernetes pods)"
                              : "") +
           ", " + asker + " needs " + QuotaBytes(ask.bytes);
  }
  return "";
}

std::string TeamBook::NeverFits(const std::string& team, const TeamAsk& ask,
                                const std::string& asker) const {
  const TeamRecord* t = Find(team);
  if (t == nullptr) return "";
  if (t->max_gpus > 0 && ask.gpus > t->max_gpus) {
    return asker + " needs " + std::to_string(ask.gpus) + " GPUs, more than team " + t->name +
           "'s quota of " + std::to_string(t->max_gpus);
  }
  if (t->max_gpu_mem > 0 && ask.bytes > t->max_gpu_mem) {
    return asker + " needs " + std::to_string(ask.bytes) + " bytes of GPU memory, more than team " +
           t->name + "'s quota";
  }
  return "";
}

void TeamBook::NoteSubmitted(const std::string& team) {
  ++FindOrAdd(team).usage.jobs;
  MarkDirty(team);
}

void TeamBook::NoteQueued(const std::string& team, double seconds) {
  FindOrAdd(team).usage.queue_seconds += std::max(0.0, seconds);
  MarkDirty(team);
}

void TeamBook::NoteHeld(const JobRecord& j, double dt) {
  AddHeld(&FindOrAdd(j.team).usage, j, dt);
  MarkDirty(j.team);
}

void TeamBook::AddHeld(TeamUsage* usage, const JobRecord& j, double dt) {
  usage->gpu_seconds += dt * j.gpus;
  usage->mem_alloc_byte_seconds += dt * static_cast<double>(j.quota_bytes) * j.gpus;
  usage->mem_used_byte_seconds += dt * static_cast<double>(j.used_bytes);
}

std::vector<const TeamRecord*> TeamBook::Dirty() const {
  return writes_.Records<TeamRecord>([this](const std::string& name) { return Find(name); });
}

}  // namespace paladin::server
