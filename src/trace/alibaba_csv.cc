#include "paladin/trace/alibaba_csv.h"

#include <string_view>
#include <utility>

#include "paladin/trace/csv.h"

namespace paladin::trace {
namespace {

using core::Fleet;
using core::Workload;

// GPU memory of the public models in the trace (MiB, as the driver reports it). G1/G2/G3 are
// undisclosed internal models: their memory stays unknown (0).
constexpr std::pair<std::string_view, int64_t> kKnownModelMemory[] = {
    {"T4", 15109},  {"P100", 16280}, {"V100M16", 16160}, {"V100M32", 32510},
    {"A10", 22731}, {"A100", 81251}, {"H200", 143771},
};

constexpr int64_t kMaxCpuMilli = 1'000'000'000;
constexpr int64_t kMaxMemMib = 1'000'000'000;

}  // namespace

StatusOr<Fleet> ParseNodeCsv(const std::string& text, const std::string& source) {
  auto table = CsvTable::Parse(text, source);
  if (!table.ok()) return table.status();
  const CsvTable& t = *table;
  size_t c_sn, c_cpu, c_mem, c_gpu, c_model;
  for (auto [name, out] :
       {std::pair{"sn", &c_sn}, std::pair{"cpu_milli", &c_cpu}, std::pair{"memory_mib", &c_mem},
        std::pair{"gpu", &c_gpu}, std::pair{"model", &c_model}}) {
    auto c = t.Column(name);
    if (!c.ok()) return c.status();
    *out = *c;
  }
  if (t.rows() == 0) return InvalidArgument(source + ": no nodes");
  Fleet fleet;
  for (size_t r = 0; r < t.rows(); ++r) {
    const std::string& name = t.Cell(r, c_sn);
    if (name.empty()) return t.ErrorAt(r, c_sn, "empty node name");
    auto cpu = t.Int(r, c_cpu, 0, kMaxCpuMilli);
    if (!cpu.ok()) return cpu.status();
    auto mem = t.Int(r, c_mem, 0, kMaxMemMib);
    if (!mem.ok()) return mem.status();
    auto gpus = t.Int(r, c_gpu, 0, core::kMaxGpusPerNode);
    if (!gpus.ok()) return gpus.status();
    const std::string& model_name = t.Cell(r, c_model);
    core::ModelId model = core::kNoModel;
    if (*gpus > 0) {
      if (model_name.empty()) return t.ErrorAt(r, c_model, "a node with GPUs needs a model");
      auto id = fleet.models().Intern(model_name);
      if (!id.ok()) return t.ErrorAt(r, c_model, id.status().message());
      model = *id;
      for (auto [known, mib] : kKnownModelMemory) {
        if (known == model_name) fleet.models().SetMemoryMib(model, mib);
      }
    }
    auto added = fleet.AddNode(name, *cpu, *mem, static_cast<int>(*gpus), model);
    if (!added.ok()) return t.ErrorAt(r, c_sn, added.status().message());
  }
  return fleet;
}

StatusOr<Fleet> ReadNodeCsv(const std::string& path) {
  auto text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  return ParseNodeCsv(*text, path);
}

StatusOr<std::vector<Workload>> ParsePodCsv(const std::string& text, const std::string& source,
                                            const core::GpuModelTable& models) {
  auto table = CsvTable::Parse(text, source);
  if (!table.ok()) return table.status();
  const CsvTable& t = *table;
  size_t c_name, c_cpu, c_mem, c_num, c_milli;
  for (auto [name, out] :
       {std::pair{"name", &c_name}, std::pair{"cpu_milli", &c_cpu}, std::pair{"memory_mib", &c_mem},
        std::pair{"num_gpu", &c_num}, std::pair{"gpu_milli", &c_milli}}) {
    auto c = t.Column(name);
    if (!c.ok()) return c.status();
    *out = *c;
  }
  const bool has_spec = t.HasColumn("gpu_spec");
  const size_t c_spec = has_spec ? *t.Column("gpu_spec") : 0;
  if (t.rows() == 0) return InvalidArgument(source + ": no tasks");

  std::vector<Workload> out;
  out.reserve(t.rows());
  for (size_t r = 0; r < t.rows(); ++r) {
    Workload w;
    w.name = t.Cell(r, c_name);
    if (w.name.empty()) return t.ErrorAt(r, c_name, "empty task name");
    auto cpu = t.Int(r, c_cpu, 0, kMaxCpuMilli);
    if (!cpu.ok()) return cpu.status();
    auto mem = t.Int(r, c_mem, 0, kMaxMemMib);
    if (!mem.ok()) return mem.status();
    auto num = t.Int(r, c_num, 0, core::kMaxGpusPerNode);
    if (!num.ok()) return num.status();
    auto milli = t.Int(r, c_milli, 0, core::kMilliPerGpu);
    if (!milli.ok()) return milli.status();
    w.cpu_milli = *cpu;
    w.mem_mib = *mem;
    w.gpu_count = static_cast<int32_t>(*num);
    w.gpu_milli = static_cast<int32_t>(*milli);
    if (w.gpu_count > 0 && w.gpu_milli == 0) {
      return t.ErrorAt(
          r, c_milli,
          "0 for a task asking " + std::to_string(w.gpu_count) + " GPUs (expected 1..1000)");
    }
    if (w.gpu_count == 0 && w.gpu_milli != 0) {
      return t.ErrorAt(r, c_milli, std::to_string(w.gpu_milli) + " for a task with num_gpu 0");
    }
    if (w.gpu_count > 1 && w.gpu_milli != core::kMilliPerGpu) {
      return t.ErrorAt(
          r, c_milli,
          "a multi-GPU task must take whole GPUs (1000), got " + std::to_string(w.gpu_milli));
    }
    if (has_spec && w.gpu_count > 0) {
      auto mask = models.ParseAllowed(t.Cell(r, c_spec));
      if (!mask.ok()) return t.ErrorAt(r, c_spec, mask.status().message());
      w.allowed_models = *mask;
    }
    out.push_back(std::move(w));
  }
  return out;
}

StatusOr<std::vector<Workload>> ReadPodCsv(const std::string& path,
                                           const core::GpuModelTable& models) {
  auto text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  return ParsePodCsv(*text, path, models);
}

StatusOr<std::vector<PodTimes>> ParsePodTimes(const std::string& text, const std::string& source) {
  auto table = CsvTable::Parse(text, source);
  if (!table.ok()) return table.status();
  const CsvTable& t = *table;
  std::vector<PodTimes> out;
  if (!t.HasColumn("creation_time")) return out;
  size_t c_create, c_sched, c_del;
  for (auto [name, col] :
       {std::pair{"creation_time", &c_create}, std::pair{"scheduled_time", &c_sched},
        std::pair{"deletion_time", &c_del}}) {
    auto c = t.Column(name);
    if (!c.ok()) return c.status();
    *col = *c;
  }
  constexpr int64_t kMaxTime = int64_t{1} << 40;
  out.reserve(t.rows());
  for (size_t r = 0; r < t.rows(); ++r) {
    PodTimes p;
    auto created = t.Int(r, c_create, 0, kMaxTime);
    if (!created.ok()) return created.status();
    p.creation_s = *created;
    for (auto [col, field] :
         {std::pair{c_sched, &p.scheduled_s}, std::pair{c_del, &p.deletion_s}}) {
      if (t.Cell(r, col).empty()) continue;
      auto v = t.Int(r, col, 0, kMaxTime);
      if (!v.ok()) return v.status();
      *field = *v;
    }
    if (p.deletion_s >= 0 && p.deletion_s < p.creation_s) {
      return t.ErrorAt(r, c_del, "before the creation time");
    }
    if (p.scheduled_s >= 0 && p.deletion_s >= 0 && p.deletion_s < p.scheduled_s) {
      return t.ErrorAt(r, c_del, "before the scheduled time");
    }
    out.push_back(p);
  }
  return out;
}

StatusOr<std::vector<PodTimes>> ReadPodTimes(const std::string& path) {
  auto text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  return ParsePodTimes(*text, path);
}

}  // namespace paladin::trace
