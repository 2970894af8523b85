// The fleet model: nodes with CPU, host memory and GPUs; workloads with their requests; and the
// bookkeeping of which workload holds what. Pure data and arithmetic: no I/O, clocks or threads.
//
// Thread safety: none. A Fleet is owned by one scheduling loop (or one simulation run).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "paladin/base/status.h"

namespace paladin::core {

inline constexpr int32_t kMilliPerGpu = 1000;  // one whole GPU, in milli-GPU
inline constexpr int kMaxGpusPerNode = 16;
inline constexpr int kMaxGpuModels = 64;  // models are kept as bits of a 64-bit mask

using ModelId = int16_t;
inline constexpr ModelId kNoModel = -1;
using ModelMask = uint64_t;  // bit i set = model i allowed; 0 = any model

// Interns GPU model names ("T4", "V100M32", "H200") and remembers each model's memory.
class GpuModelTable {
 public:
  // Returns the id of `name`, adding it when new. Fails past kMaxGpuModels models.
  StatusOr<ModelId> Intern(std::string_view name);
  // The id of a known model, or NotFound.
  StatusOr<ModelId> Find(std::string_view name) const;
  const std::string& Name(ModelId id) const { return names_[static_cast<size_t>(id)]; }
  size_t size() const { return names_.size(); }
  // GPU memory of a model in MiB; 0 when not disclosed (the Alibaba traces hide G1/G2/G3).
  int64_t MemoryMib(ModelId id) const { return memory_mib_[static_cast<size_t>(id)]; }
  void SetMemoryMib(ModelId id, int64_t mib) { memory_mib_[static_cast<size_t>(id)] = mib; }
  // "T4|V100M32" -> mask; an unknown name is an error naming it and the known models.
  StatusOr<ModelMask> ParseAllowed(std::string_view list) const;
  std::string MaskToString(ModelMask mask) const;

 private:
  std::vector<std::string> names_;
  std::vector<int64_t> memory_mib_;
};

struct Gpu {
  int32_t milli_left = kMilliPerGpu;
  int64_t mem_total_mib = 0;  // 0 = not tracked (model memory unknown)
  int64_t mem_left_mib = 0;
};

// What GPU-sharing workloads occupy on a node, by kind, for policies that cluster alike work.
// Tag 0 = a fractional (shared) GPU; tag n = n whole GPUs.
struct AffinityCounts {
  std::array<int32_t, kMaxGpusPerNode + 1> count{};
  int32_t distinct = 0;  // number of tags with count > 0
};

struct Node {
  std::string name;
  int64_t cpu_milli = 0;  // capacity
  int64_t mem_mib = 0;    // capacity
  ModelId model = kNoModel;
  std::vector<Gpu> gpus;

  int64_t cpu_left = 0;
  int64_t mem_left = 0;
  AffinityCounts affinity;
  // Bumped on every change; caches of per-node computations key on it.
  uint64_t version = 0;

  int gpu_count() const { return static_cast<int>(gpus.size()); }
  int64_t GpuMilliLeft() const;
  int FullyFreeGpus() const;
};

struct Workload {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t mem_mib = 0;
  int32_t gpu_count = 0;    // GPUs requested
  int32_t gpu_milli = 0;    // share of each GPU, 1..1000 (1000 = whole GPU); 0 when gpu_count == 0
  int64_t gpu_mem_mib = 0;  // GPU memory per GPU; 0 = not specified
  ModelMask allowed_models = 0;  // 0 = any model
  std::string team;
  int32_t priority = 0;

  bool IsSharedGpu() const { return gpu_count == 1 && gpu_milli < kMilliPerGpu; }
  int64_t TotalGpuMilli() const { return static_cast<int64_t>(gpu_count) * gpu_milli; }
  // The GpuClustering tag (see AffinityCounts), or -1 for CPU-only work.
  int AffinityTag() const;
};

// Checks that a workload's own fields are consistent (not that it fits anywhere).
Status ValidateWorkload(const Workload& w);

struct Placement {
  int32_t node = -1;
  std::vector<int16_t> gpus;  // GPU indices on that node, one per requested GPU
  bool valid() const { return node >= 0; }
};

// True when the node's GPU model is in the workload's allowed set (CPU-only work fits anywhere).
bool ModelAllowed(const Workload& w, const Node& n);

class Fleet {
 public:
  Fleet() = default;
  Fleet(const Fleet&) = default;  // simulations copy a pristine fleet per run
  Fleet& operator=(const Fleet&) = default;

  GpuModelTable& models() { return models_; }
  const GpuModelTable& models() const { return models_; }

  // Adds a node with `gpu_count` GPUs of `model` (kNoModel when gpu_count == 0).
  StatusOr<int32_t> AddNode(std::string name, int64_t cpu_milli, int64_t mem_mib, int gpu_count,
                            ModelId model);

  size_t size() const { return nodes_.size(); }
  const Node& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  const std::vector<Node>& nodes() const { return nodes_; }

  // Whether `p` is a legal home for `w` right now: model allowed, CPU, memory, and per-GPU share
  // and memory all sufficient, GPU indices distinct and in range. The reason says what is short.
  Status CheckPlacement(const Workload& w, const Placement& p) const;

  // Takes the resources of `p` for workload `id`. Reserving the same id again with the same
  // placement is a no-op; with a different placement it is AlreadyExists.
  Status Reserve(uint64_t id, const Workload& w, const Placement& p);
  // Returns what `id` holds. Unknown ids are a no-op (unreserve is idempotent).
  void Unreserve(uint64_t id);
  bool IsReserved(uint64_t id) const { return reservations_.count(id) != 0; }
  // What `id` holds and where, or nullopt when it holds nothing.
  struct Holding {
    Workload workload;
    Placement placement;
  };
  std::optional<Holding> HoldingOf(uint64_t id) const {
    auto it = reservations_.find(id);
    if (it == reservations_.end()) return std::nullopt;
    return Holding{it->second.workload, it->second.placement};
  }
  size_t reservation_count() const { return reservations_.size(); }

  int64_t GpuMilliCapacity() const { return gpu_milli_capacity_; }
  int64_t GpuMilliUsed() const { return gpu_milli_used_; }

 private:
  struct Reservation {
    Workload workload;
    Placement placement;
  };
  void Apply(const Workload& w, const Placement& p, int sign);

  GpuModelTable models_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, Reservation> reservations_;
  int64_t gpu_milli_capacity_ = 0;
  int64_t gpu_milli_used_ = 0;
};

}  // namespace paladin::core
