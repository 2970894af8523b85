// GPU fragmentation as defined by FGD ("Beware of Fragmentation", USENIX ATC'23): the share of a
// node's idle GPU capacity that the workload's typical tasks could not use.
//
// A node's fragmentation with respect to one typical task t is its idle milli-GPU when t cannot
// run there at all (wrong model, too little CPU, too few GPUs with t's share free, or t needs no
// GPU), and otherwise the idle milli-GPU on GPUs whose free share is below t's request. The
// node's fragmentation is the frequency-weighted sum over the typical tasks.
#pragma once

#include <array>
#include <climits>
#include <cstdint>
#include <span>
#include <vector>

#include "paladin/core/fleet.h"

namespace paladin::core {

struct TypicalWorkload {
  int64_t cpu_milli = 0;
  int32_t gpu_milli = 0;
  int32_t gpu_count = 0;
  ModelMask allowed_models = 0;
  int64_t mem_mib = 0;  // mean host memory of the tasks of this shape (not part of the shape)
  int64_t count = 0;    // occurrences in the workload it was learnt from
  double freq = 0;      // share among the kept typical workloads; sums to 1
};

struct TypicalOptions {
  double coverage = 0.95;        // keep the most frequent shapes until they cover this share
  bool include_cpu_only = true;  // CPU-only work counts too: it strands no GPU but takes CPU
};

// The workload's distribution of shapes (CPU, GPU share, GPU count, allowed models), most
// frequent first, cut where the kept shapes cover `coverage` of all workloads.
std::vector<TypicalWorkload> BuildTypicalWorkloads(std::span<const Workload> workloads,
                                                   const TypicalOptions& options = {});

// A compact copy of what fragmentation looks at; cheap to copy and modify hypothetically.
struct NodeView {
  ModelId model = kNoModel;
  int64_t cpu_left = 0;
  int64_t mem_left = 0;
  int gpu_count = 0;
  std::array<int32_t, kMaxGpusPerNode> milli_left{};
  // Free GPU memory per GPU in MiB; kUntrackedMemory where the model's memory is unknown.
  std::array<int64_t, kMaxGpusPerNode> gpu_mem_left{};

  static constexpr int64_t kUntrackedMemory = INT64_MAX;

  int64_t IdleMilli() const;
  // Whether GPU `i` has both the share and the GPU memory `w` asks for.
  bool GpuFits(int i, const Workload& w) const {
    return milli_left[static_cast<size_t>(i)] >= w.gpu_milli &&
           gpu_mem_left[static_cast<size_t>(i)] >= w.gpu_mem_mib;
  }
  bool operator==(const NodeView&) const = default;
};

NodeView ViewOf(const Node& n);

// Expected milli-GPU of `v` that the typical workloads cannot use (FGD's F(n)). FGD looks at GPU
// share and CPU only (mem_fraction = 0). With mem_fraction > 0 host memory counts too: a typical
// workload is also blocked on a node whose free host memory is under mem_fraction x its shape's
// mean memory (paladin's variant).
double FragAmount(const NodeView& v, std::span<const TypicalWorkload> typical,
                  double mem_fraction = 0);

// A stricter measure used by paladin: for each shape, the idle milli-GPU left over after the node
// takes as many copies of that shape as its GPUs, CPU and memory allow; weighted by `freq`.
// Unlike FragAmount it sees that CPU can run out after a few copies, not only before the first.
double StrandedAmount(const NodeView& v, std::span<const TypicalWorkload> shapes);

// `v` after `w` takes `gpus` (and its CPU).
NodeView After(const NodeView& v, const Workload& w, std::span<const int16_t> gpus);

// The GPUs FGD charges a non-shared workload with when it scores a node: the GPUs with the least
// free share that still fit, lowest index first among equals. Empty if they do not fit.
std::vector<int16_t> TightestGpus(const NodeView& v, const Workload& w);

}  // namespace paladin::core
