#include <algorithm>
#include <cctype>

#include "paladin/core/policies.h"
#include "policies/internal.h"

namespace paladin::core {

const std::vector<std::string>& PolicyNames() {
  static const std::vector<std::string> kNames = {
      "Random", "DotProduct", "GpuClustering", "GpuPacking", "BestFit", "FGD", "paladin"};
  return kNames;
}

StatusOr<std::string> CanonicalPolicyName(std::string_view name) {
  auto lower = [](std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
  };
  const std::string want = lower(name);
  for (const auto& n : PolicyNames()) {
    if (lower(n) == want) return n;
  }
  std::string valid;
  for (const auto& n : PolicyNames()) valid += (valid.empty() ? "" : ", ") + n;
  return InvalidArgument("unknown policy '" + std::string(name) + "' (valid: " + valid + ")");
}

StatusOr<Policy> MakePolicy(std::string_view name, const PolicyContext& ctx) {
  auto canonical = CanonicalPolicyName(name);
  if (!canonical.ok()) return canonical.status();
  const std::string& n = *canonical;
  if ((n == "FGD" || n == "paladin") && (!ctx.typical || ctx.typical->empty())) {
    return FailedPrecondition("policy " + n + " needs the workload's typical shapes");
  }
  if (n == "Random") return internal::MakeRandomPolicy();
  if (n == "DotProduct") return internal::MakeDotProductPolicy();
  if (n == "GpuClustering") return internal::MakeGpuClusteringPolicy();
  if (n == "GpuPacking") return internal::MakeGpuPackingPolicy();
  if (n == "BestFit") return internal::MakeBestFitPolicy();
  if (n == "FGD") return internal::MakeFgdPolicy(ctx);
  return internal::MakePaladinPolicy(ctx);
}

namespace internal {
ShapeKey ShapeOf(const Workload& w) {
  return ShapeKey{w.cpu_milli, w.gpu_mem_mib, w.allowed_models, w.gpu_milli, w.gpu_count};
}
}  // namespace internal

}  // namespace paladin::core
