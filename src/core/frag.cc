#include "paladin/core/frag.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace paladin::core {

std::vector<TypicalWorkload> BuildTypicalWorkloads(std::span<const Workload> workloads,
                                                   const TypicalOptions& options) {
  using Key = std::tuple<int64_t, int32_t, int32_t, ModelMask>;  // cpu, milli, count, models
  std::map<Key, std::pair<int64_t, int64_t>> counts;             // shape -> (count, summed memory)
  int64_t total = 0;
  for (const Workload& w : workloads) {
    if (!options.include_cpu_only && w.gpu_count == 0) continue;
    auto& [count, mem] = counts[Key{w.cpu_milli, w.gpu_milli, w.gpu_count, w.allowed_models}];
    ++count;
    mem += w.mem_mib;
    ++total;
  }
  std::vector<TypicalWorkload> all;
  all.reserve(counts.size());
  for (const auto& [k, cm] : counts) {
    all.push_back(TypicalWorkload{std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k),
                                  cm.second / cm.first, cm.first, 0.0});
  }
  // Most frequent first; equal counts in a fixed order (larger shapes first) so the cut is stable.
  std::sort(all.begin(), all.end(), [](const TypicalWorkload& a, const TypicalWorkload& b) {
    return std::tie(b.count, b.cpu_milli, b.gpu_milli, b.gpu_count, b.allowed_models) <
           std::tie(a.count, a.cpu_milli, a.gpu_milli, a.gpu_count, a.allowed_models);
  });
  const double target = options.coverage * static_cast<double>(total);
  int64_t covered = 0;
  size_t kept = 0;
  while (kept < all.size() && static_cast<double>(covered) < target) covered += all[kept++].count;
  all.resize(kept);
  for (auto& t : all) t.freq = static_cast<double>(t.count) / static_cast<double>(covered);
  return all;
}

int64_t NodeView::IdleMilli() const {
  int64_t sum = 0;
  for (int i = 0; i < gpu_count; ++i) sum += milli_left[static_cast<size_t>(i)];
  return sum;
}

NodeView ViewOf(const Node& n) {
  NodeView v;
  v.model = n.model;
  v.cpu_left = n.cpu_left;
  v.mem_left = n.mem_left;
  v.gpu_count = n.gpu_count();
  for (int i = 0; i < v.gpu_count; ++i) {
    const Gpu& g = n.gpus[static_cast<size_t>(i)];
    v.milli_left[static_cast<size_t>(i)] = g.milli_left;
    v.gpu_mem_left[static_cast<size_t>(i)] =
        g.mem_total_mib > 0 ? g.mem_left_mib : NodeView::kUntrackedMemory;
  }
  return v;
}

double FragAmount(const NodeView& v, std::span<const TypicalWorkload> typical,
                  double mem_fraction) {
  const int64_t idle = v.IdleMilli();
  if (idle == 0) return 0;
  double frag = 0;
  for (const TypicalWorkload& t : typical) {
    int64_t unusable = idle;
    const bool model_ok =
        t.allowed_models == 0 || (v.model != kNoModel && ((t.allowed_models >> v.model) & 1U));
    const bool mem_ok =
        static_cast<double>(v.mem_left) >= mem_fraction * static_cast<double>(t.mem_mib);
    if (t.gpu_milli > 0 && model_ok && v.cpu_left >= t.cpu_milli && mem_ok) {
      int fitting = 0;
      int64_t stranded = 0;
      for (int i = 0; i < v.gpu_count; ++i) {
        const int32_t m = v.milli_left[static_cast<size_t>(i)];
        if (m >= t.gpu_milli) {
          ++fitting;
        } else {
          stranded += m;
        }
      }
      if (fitting >= t.gpu_count) unusable = stranded;
    }
    frag += t.freq * static_cast<double>(unusable);
  }
  return frag;
}

double StrandedAmount(const NodeView& v, std::span<const TypicalWorkload> shapes) {
  const int64_t idle = v.IdleMilli();
  if (idle == 0) return 0;
  int full = 0;
  for (int i = 0; i < v.gpu_count; ++i)
    full += v.milli_left[static_cast<size_t>(i)] == kMilliPerGpu;
  double stranded = 0;
  for (const TypicalWorkload& t : shapes) {
    int64_t usable = 0;
    const bool model_ok =
        t.allowed_models == 0 || (v.model != kNoModel && ((t.allowed_models >> v.model) & 1U));
    if (t.gpu_milli > 0 && model_ok) {
      int64_t copies = 0;
      if (t.gpu_count == 1) {
        for (int i = 0; i < v.gpu_count; ++i)
          copies += v.milli_left[static_cast<size_t>(i)] / t.gpu_milli;
      } else {
        copies = full / t.gpu_count;
      }
      if (t.cpu_milli > 0) copies = std::min(copies, v.cpu_left / t.cpu_milli);
      if (t.mem_mib > 0) copies = std::min(copies, v.mem_left / t.mem_mib);
      usable = std::min(idle, copies * t.gpu_count * t.gpu_milli);
    }
    stranded += t.freq * static_cast<double>(idle - usable);
  }
  return stranded;
}

NodeView After(const NodeView& v, const Workload& w, std::span<const int16_t> gpus) {
  NodeView out = v;
  out.cpu_left -= w.cpu_milli;
  out.mem_left -= w.mem_mib;
  for (int16_t g : gpus) {
    out.milli_left[static_cast<size_t>(g)] -= w.gpu_milli;
    if (out.gpu_mem_left[static_cast<size_t>(g)] != NodeView::kUntrackedMemory) {
      out.gpu_mem_left[static_cast<size_t>(g)] -= w.gpu_mem_mib;
    }
  }
  return out;
}

std::vector<int16_t> TightestGpus(const NodeView& v, const Workload& w) {
  std::array<int16_t, kMaxGpusPerNode> order{};
  for (int i = 0; i < v.gpu_count; ++i) order[static_cast<size_t>(i)] = static_cast<int16_t>(i);
  std::stable_sort(order.begin(), order.begin() + v.gpu_count, [&](int16_t a, int16_t b) {
    return v.milli_left[static_cast<size_t>(a)] < v.milli_left[static_cast<size_t>(b)];
  });
  std::vector<int16_t> out;
  for (int i = 0; i < v.gpu_count && static_cast<int>(out.size()) < w.gpu_count; ++i) {
    const int16_t g = order[static_cast<size_t>(i)];
    if (v.GpuFits(g, w)) out.push_back(g);
  }
  if (static_cast<int>(out.size()) < w.gpu_count) out.clear();
  return out;
}

}  // namespace paladin::core
