#include "paladin/core/fleet.h"

#include <algorithm>

namespace paladin::core {

StatusOr<ModelId> GpuModelTable::Intern(std::string_view name) {
  auto found = Find(name);
  if (found.ok()) return found;
  if (name.empty()) return InvalidArgument("empty GPU model name");
  if (names_.size() >= static_cast<size_t>(kMaxGpuModels)) {
    return ResourceExhausted("more than " + std::to_string(kMaxGpuModels) + " GPU models");
  }
  names_.emplace_back(name);
  memory_mib_.push_back(0);
  return static_cast<ModelId>(names_.size() - 1);
}

StatusOr<ModelId> GpuModelTable::Find(std::string_view name) const {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == name) return static_cast<ModelId>(i);
  }
  return NotFound("unknown GPU model '" + std::string(name) + "'");
}

StatusOr<ModelMask> GpuModelTable::ParseAllowed(std::string_view list) const {
  ModelMask mask = 0;
  size_t start = 0;
  while (start <= list.size()) {
    size_t bar = list.find('|', start);
    if (bar == std::string_view::npos) bar = list.size();
    std::string_view item = list.substr(start, bar - start);
    if (!item.empty()) {
      auto id = Find(item);
      if (!id.ok()) {
        std::string known;
        for (const auto& n : names_) known += (known.empty() ? "" : ", ") + n;
        return InvalidArgument("unknown GPU model '" + std::string(item) +
                               "' (models in the fleet: " + known + ")");
      }
      mask |= ModelMask{1} << *id;
    }
    start = bar + 1;
  }
  return mask;
}

std::string GpuModelTable::MaskToString(ModelMask mask) const {
  if (mask == 0) return "any";
  std::string out;
  for (size_t i = 0; i < names_.size(); ++i) {
    if (mask & (ModelMask{1} << i)) out += (out.empty() ? "" : "|") + names_[i];
  }
  return out;
}

int64_t Node::GpuMilliLeft() const {
  int64_t sum = 0;
  for (const auto& g : gpus) sum += g.milli_left;
  return sum;
}

int Node::FullyFreeGpus() const {
  int n = 0;
  for (const auto& g : gpus) n += g.milli_left == kMilliPerGpu ? 1 : 0;
  return n;
}

int Workload::AffinityTag() const {
  if (gpu_count == 0) return -1;
  if (IsSharedGpu()) return 0;
  return std::min(gpu_count, kMaxGpusPerNode);
}

Status ValidateWorkload(const Workload& w) {
  const std::string who = w.name.empty() ? "workload" : "workload '" + w.name + "'";
  if (w.cpu_milli < 0) return InvalidArgument(who + ": cpu_milli is negative");
  if (w.mem_mib < 0) return InvalidArgument(who + ": memory is negative");
  if (w.gpu_count < 0 || w.gpu_count > kMaxGpusPerNode) {
    return InvalidArgument(who + ": gpu count " + std::to_string(w.gpu_count) + " outside 0.." +
                           std::to_string(kMaxGpusPerNode));
  }
  if (w.gpu_count > 0 && (w.gpu_milli <= 0 || w.gpu_milli > kMilliPerGpu)) {
    return InvalidArgument(who + ": gpu share " + std::to_string(w.gpu_milli) +
                           " milli outside 1..1000");
  }
  if (w.gpu_count > 1 && w.gpu_milli != kMilliPerGpu) {
    return InvalidArgument(who + ": a multi-GPU workload must take whole GPUs");
  }
  if (w.gpu_count == 0 && (w.gpu_milli != 0 || w.gpu_mem_mib != 0)) {
    return InvalidArgument(who + ": GPU share or memory given without a GPU count");
  }
  if (w.gpu_mem_mib < 0) return InvalidArgument(who + ": GPU memory is negative");
  return Status::Ok();
}

bool ModelAllowed(const Workload& w, const Node& n) {
  if (w.gpu_count == 0 || w.allowed_models == 0) return true;
  if (n.model == kNoModel) return false;
  return (w.allowed_models >> n.model) & 1U;
}

StatusOr<int32_t> Fleet::AddNode(std::string name, int64_t cpu_milli, int64_t mem_mib,
                                 int gpu_count, ModelId model) {
  if (cpu_milli < 0 || mem_mib < 0) {
    return InvalidArgument("node '" + name + "': negative CPU or memory capacity");
  }
  if (gpu_count < 0 || gpu_count > kMaxGpusPerNode) {
    return InvalidArgument("node '" + name + "': " + std::to_string(gpu_count) +
                           " GPUs; Paladin supports 0.." + std::to_string(kMaxGpusPerNode));
  }
  if (gpu_count > 0 && (model < 0 || static_cast<size_t>(model) >= models_.size())) {
    return InvalidArgument("node '" + name + "': GPUs without a known model");
  }
  Node n;
  n.name = std::move(name);
  n.cpu_milli = n.cpu_left = cpu_milli;
  n.mem_mib = n.mem_left = mem_mib;
  n.model = gpu_count > 0 ? model : kNoModel;
  const int64_t gpu_mem = gpu_count > 0 ? models_.MemoryMib(model) : 0;
  n.gpus.assign(static_cast<size_t>(gpu_count), Gpu{kMilliPerGpu, gpu_mem, gpu_mem});
  nodes_.push_back(std::move(n));
  gpu_milli_capacity_ += static_cast<int64_t>(gpu_count) * kMilliPerGpu;
  return static_cast<int32_t>(nodes_.size() - 1);
}

Status Fleet::CheckPlacement(const Workload& w, const Placement& p) const {
  if (p.node < 0 || static_cast<size_t>(p.node) >= nodes_.size()) {
    return InvalidArgument("placement names no node");
  }
  const Node& n = nodes_[static_cast<size_t>(p.node)];
  if (!ModelAllowed(w, n)) {
    return FailedPrecondition("node " + n.name + " has GPU model " +
                              (n.model == kNoModel ? "none" : models_.Name(n.model)) +
                              ", workload allows " + models_.MaskToString(w.allowed_models));
  }
  if (n.cpu_left < w.cpu_milli) {
    return ResourceExhausted("node " + n.name + ": CPU " + std::to_string(n.cpu_left) +
                             "m free < " + std::to_string(w.cpu_milli) + "m requested");
  }
  if (n.mem_left < w.mem_mib) {
    return ResourceExhausted("node " + n.name + ": memory " + std::to_string(n.mem_left) +
                             " MiB free < " + std::to_string(w.mem_mib) + " MiB requested");
  }
  if (static_cast<int>(p.gpus.size()) != w.gpu_count) {
    return InvalidArgument("placement gives " + std::to_string(p.gpus.size()) +
                           " GPUs for a workload asking " + std::to_string(w.gpu_count));
  }
  for (size_t i = 0; i < p.gpus.size(); ++i) {
    const int g = p.gpus[i];
    if (g < 0 || g >= n.gpu_count()) return InvalidArgument("GPU index out of range");
    for (size_t j = 0; j < i; ++j) {
      if (p.gpus[j] == g) return InvalidArgument("GPU index repeated in placement");
    }
    const Gpu& gpu = n.gpus[static_cast<size_t>(g)];
    if (gpu.milli_left < w.gpu_milli) {
      return ResourceExhausted("node " + n.name + " GPU " + std::to_string(g) + ": " +
                               std::to_string(gpu.milli_left) + " milli free < " +
                               std::to_string(w.gpu_milli) + " requested");
    }
    if (w.gpu_mem_mib > 0 && gpu.mem_total_mib > 0 && gpu.mem_left_mib < w.gpu_mem_mib) {
      return ResourceExhausted("node " + n.name + " GPU " + std::to_string(g) + ": " +
                               std::to_string(gpu.mem_left_mib) + " MiB GPU memory free < " +
                               std::to_string(w.gpu_mem_mib) + " requested");
    }
  }
  return Status::Ok();
}

void Fleet::Apply(const Workload& w, const Placement& p, int sign) {
  Node& n = nodes_[static_cast<size_t>(p.node)];
  n.cpu_left -= sign * w.cpu_milli;
  n.mem_left -= sign * w.mem_mib;
  for (int16_t g : p.gpus) {
    Gpu& gpu = n.gpus[static_cast<size_t>(g)];
    gpu.milli_left -= sign * w.gpu_milli;
    if (gpu.mem_total_mib > 0) gpu.mem_left_mib -= sign * w.gpu_mem_mib;
  }
  gpu_milli_used_ += sign * w.TotalGpuMilli();
  const int tag = w.AffinityTag();
  if (tag >= 0) {
    int32_t& c = n.affinity.count[static_cast<size_t>(tag)];
    if (sign > 0 && c++ == 0) ++n.affinity.distinct;
    if (sign < 0 && --c == 0) --n.affinity.distinct;
  }
  ++n.version;
}

Status Fleet::Reserve(uint64_t id, const Workload& w, const Placement& p) {
  auto it = reservations_.find(id);
  if (it != reservations_.end()) {
    if (it->second.placement.node == p.node && it->second.placement.gpus == p.gpus) {
      return Status::Ok();
    }
    return AlreadyExists("reservation " + std::to_string(id) + " already holds node " +
                         nodes_[static_cast<size_t>(it->second.placement.node)].name);
  }
  PALADIN_RETURN_IF_ERROR(CheckPlacement(w, p));
  Apply(w, p, +1);
  reservations_.emplace(id, Reservation{w, p});
  return Status::Ok();
}

void Fleet::Unreserve(uint64_t id) {
  auto it = reservations_.find(id);
  if (it == reservations_.end()) return;
  Apply(it->second.workload, it->second.placement, -1);
  reservations_.erase(it);
}

}  // namespace paladin::core
