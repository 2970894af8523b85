#include "paladin/quota/usage.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "paladin/base/cgroup.h"
#include "paladin/base/process.h"

namespace paladin::quota {

namespace {

struct ProcStat {
  uint32_t ppid = 0;
  uint64_t ticks = 0;  // utime + stime
};

bool ReadStat(uint32_t pid, ProcStat* out) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/stat", pid);
  FILE* f = fopen(path, "re");
  if (f == nullptr) return false;
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char* p = strrchr(buf, ')');
  if (p == nullptr) return false;
  // After ") ": state(3) ppid(4) ... utime(14) stime(15).
  char state = 0;
  unsigned long long fields[13] = {};
  if (sscanf(p + 2, "%c %llu %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &state, &fields[0],
             &fields[1], &fields[2]) != 4) {
    return false;
  }
  out->ppid = static_cast<uint32_t>(fields[0]);
  out->ticks = fields[1] + fields[2];
  return true;
}

uint64_t ResidentBytes(uint32_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/statm", pid);
  FILE* f = fopen(path, "re");
  if (f == nullptr) return 0;
  unsigned long long size = 0;
  unsigned long long resident = 0;
  const int got = fscanf(f, "%llu %llu", &size, &resident);
  fclose(f);
  return got == 2 ? resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

}  // namespace

WorkloadUsage SampleUsage(const Region& region, const gpu::Nvml* nvml, uint32_t root,
                          const std::string& cgroup) {
  WorkloadUsage usage;
  usage.pids = base::ProcessTree(root);
  if (!cgroup.empty()) {
    const base::Cgroup group = base::Cgroup::Existing(cgroup);
    usage.host_rss_bytes = group.MemoryBytes();
    usage.cpu_seconds = group.CpuSeconds();
  } else {
    const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
    for (uint32_t pid : usage.pids) {
      usage.host_rss_bytes += ResidentBytes(pid);
      ProcStat st;
      if (ReadStat(pid, &st)) usage.cpu_seconds += static_cast<double>(st.ticks) / tick;
    }
  }
  usage.refusals = region.refusals();
  usage.grows = region.grows();
  for (int slot = 0; slot < region.device_count(); ++slot) {
    GpuUsage g;
    char uuid[16];
    region.DeviceUuid(slot, uuid);
    g.uuid = gpu::FormatGpuUuid(uuid);
    g.quota_bytes = region.quota();
    g.counted_bytes = region.used(slot);
    g.counted_peak_bytes = region.peak(slot);
    for (int p = 0; p < kMaxProcesses; ++p) {
      if (region.process(p).pid != 0) g.context_bytes += region.process_context_bytes(p, slot);
    }
    if (nvml != nullptr) {
      StatusOr<std::vector<gpu::GpuProcess>> procs = nvml->Processes(g.uuid);
      if (procs.ok()) {
        g.nvml_available = true;
        for (const gpu::GpuProcess& proc : *procs) {
          for (uint32_t pid : usage.pids) {
            if (proc.pid != pid) continue;
            g.nvml_bytes += proc.used_bytes;
            g.sm_util_pct += proc.sm_util_pct;
          }
        }
      }
    }
    usage.gpus.push_back(std::move(g));
  }
  return usage;
}

}  // namespace paladin::quota
