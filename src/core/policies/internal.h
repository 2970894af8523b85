// Policy constructors and shared helpers, private to the core library.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "paladin/core/policies.h"

namespace paladin::core::internal {

Policy MakeRandomPolicy();
Policy MakeDotProductPolicy();
Policy MakeGpuClusteringPolicy();
Policy MakeGpuPackingPolicy();
Policy MakeBestFitPolicy();
Policy MakeFgdPolicy(const PolicyContext& ctx);
Policy MakePaladinPolicy(const PolicyContext& ctx);

// The shape of a request, as far as per-node scores care.
struct ShapeKey {
  int64_t cpu_milli;
  int64_t gpu_mem_mib;
  ModelMask models;
  int32_t gpu_milli;
  int32_t gpu_count;
  bool operator==(const ShapeKey&) const = default;
};
ShapeKey ShapeOf(const Workload& w);

struct ShapeKeyHash {
  size_t operator()(const ShapeKey& k) const {
    uint64_t h = static_cast<uint64_t>(k.cpu_milli) * 0x9e3779b97f4a7c15ULL;
    h ^= (static_cast<uint64_t>(k.gpu_milli) << 32 | static_cast<uint32_t>(k.gpu_count)) +
         0x632be59bd9b4e019ULL + (h << 6) + (h >> 2);
    h ^= k.models + 0x85ebca6b + (h << 6) + (h >> 2);
    h ^= static_cast<uint64_t>(k.gpu_mem_mib) + (h << 6) + (h >> 2);
    return static_cast<size_t>(h);
  }
};

// Memoises a per-(node, request shape) computation until the node's state changes. A decision
// touches one node, so after the first pass nearly every lookup is a hit. The key is the node's
// whole NodeView, not its version, so a packer reused on another fleet never sees stale values.
template <typename Value>
class PerNodeCache {
 public:
  // Returns the cached value for (node, shape) or computes and stores it.
  const Value& Get(const Node& n, int32_t node, const Workload& w,
                   const std::function<Value()>& compute) {
    if (static_cast<size_t>(node) >= slots_.size()) slots_.resize(static_cast<size_t>(node) + 1);
    Slot& s = slots_[static_cast<size_t>(node)];
    const NodeView now = ViewOf(n);
    if (!s.valid || s.version != n.version || !(s.view == now)) {
      s.values.clear();
      s.view = now;
      s.version = n.version;
      s.valid = true;
    }
    const ShapeKey key = ShapeOf(w);
    auto it = s.values.find(key);
    if (it == s.values.end()) it = s.values.emplace(key, compute()).first;
    return it->second;
  }

 private:
  struct Slot {
    NodeView view;
    uint64_t version = 0;
    bool valid = false;
    std::unordered_map<ShapeKey, Value, ShapeKeyHash> values;
  };
  std::vector<Slot> slots_;
};

// The score plugin and the GPU selector of a policy whose work is one memoising evaluator (FGD,
// paladin): both read the same cached choice, so the GPUs handed out are the ones scored.
// An evaluator may have PrepareFor(fleet), called once per decision.
template <typename Evaluator>
class EvaluatorScore final : public ScorePlugin {
 public:
  EvaluatorScore(std::string_view name, std::shared_ptr<Evaluator> eval)
      : name_(name), eval_(std::move(eval)) {}
  std::string_view name() const override { return name_; }
  void PreScore(const Fleet& fleet, const Workload& /*w*/, std::span<const int32_t> /*feasible*/,
                Rng& /*rng*/) override {
    if constexpr (requires(Evaluator & e) { e.PrepareFor(fleet); }) eval_->PrepareFor(fleet);
  }
  double Score(const Fleet& fleet, const Workload& w, int32_t node) override {
    return eval_->Evaluate(fleet, w, node).score;
  }

 private:
  std::string_view name_;
  std::shared_ptr<Evaluator> eval_;
};

template <typename Evaluator>
class EvaluatorGpuSelector final : public GpuSelector {
 public:
  EvaluatorGpuSelector(std::string_view name, std::shared_ptr<Evaluator> eval)
      : name_(name), eval_(std::move(eval)) {}
  std::string_view name() const override { return name_; }
  std::vector<int16_t> Select(const Fleet& fleet, const Workload& w, int32_t node,
                              Rng& /*rng*/) override {
    if (w.gpu_count == 0) return {};
    return eval_->Evaluate(fleet, w, node).gpus;
  }

 private:
  std::string_view name_;
  std::shared_ptr<Evaluator> eval_;
};

}  // namespace paladin::core::internal
