// Context hooks: each context costs memory on its GPU before the workload allocates anything.
// The interposer admits an estimate before the driver creates the context, then charges what
// NVML measures the context to hold (docs/quota.md, "Context overhead").
#include "shim.h"

namespace paladin::cudashim {
namespace {

// Admits the estimated overhead on `ordinal`, runs `create`, then corrects the charge to the
// measured overhead. `counted` says whether a context was created (a primary context is counted
// on its first retain only).
template <typename Create>
CUresult CountedCreate(CUdevice ordinal, bool count, const char* function, Create create,
                       CUcontext* out) {
  Shim& shim = Shim::Get();
  if (!shim.enforcing() || !count) return create();
  const int device = shim.SlotForOrdinal(ordinal);
  if (device < 0) return create();
  // A context whose cost is known (measured on an earlier one) must fit before it is made; the
  // workload's first context is charged what it turns out to cost.
  const uint64_t estimate = shim.region()->context_estimate();
  if (estimate > 0) {
    CUresult r = shim.Admit(device, estimate, function);
    if (r != CUDA_SUCCESS) return r;
  }
  CUresult r = create();
  if (estimate > 0) shim.Unadmit(device, estimate);
  if (r != CUDA_SUCCESS) return r;
  const uint64_t measured = shim.MeasureContextOverhead(ordinal, device);
  shim.region()->set_context_estimate(measured);
  shim.ForceCharge(device, measured, true);
  shim.ContextCreated(*out, device, measured);
  return r;
}

}  // namespace
}  // namespace paladin::cudashim

using paladin::cudashim::CountedCreate;
using paladin::cudashim::Shim;

PALADIN_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  Shim& shim = Shim::Get();
  auto real = shim.next().cuDevicePrimaryCtxRetain;
  if (real == nullptr) return shim.Missing("cuDevicePrimaryCtxRetain");
  if (!shim.enforcing()) return real(ctx, dev);
  // The first retain in this process creates the primary context.
  const bool first = shim.PrimaryRetained(dev) == 1;
  CUresult r = CountedCreate(
      dev, first, "cuDevicePrimaryCtxRetain", [&] { return real(ctx, dev); }, ctx);
  if (r != CUDA_SUCCESS) {
    shim.PrimaryReleased(dev, false);  // this retain did not happen
  } else if (first) {
    shim.SetPrimaryContext(dev, *ctx);
  }
  return r;
}

PALADIN_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  Shim& shim = Shim::Get();
  auto real = shim.next().cuDevicePrimaryCtxRelease;
  if (real == nullptr) return shim.Missing("cuDevicePrimaryCtxRelease_v2");
  CUresult r = real(dev);
  if (r == CUDA_SUCCESS && shim.enforcing()) {
    if (CUcontext gone = shim.PrimaryReleased(dev, false)) shim.ContextDestroyed(gone);
  }
  return r;
}

PALADIN_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  Shim& shim = Shim::Get();
  auto real = shim.next().cuDevicePrimaryCtxReset;
  if (real == nullptr) return shim.Missing("cuDevicePrimaryCtxReset_v2");
  CUresult r = real(dev);
  if (r == CUDA_SUCCESS && shim.enforcing()) {
    if (CUcontext gone = shim.PrimaryReleased(dev, true)) shim.ContextDestroyed(gone);
  }
  return r;
}

PALADIN_EXPORT CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned int flags, CUdevice dev) {
  Shim& shim = Shim::Get();
  auto real = shim.next().cuCtxCreate;
  if (real == nullptr) return shim.Missing("cuCtxCreate_v2");
  return CountedCreate(
      dev, true, "cuCtxCreate", [&] { return real(ctx, flags, dev); }, ctx);
}

PALADIN_EXPORT CUresult cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam* params, int count,
                                       unsigned int flags, CUdevice dev) {
  Shim& shim = Shim::Get();
  auto real = shim.next().cuCtxCreateV3;
  if (real == nullptr) return shim.Missing("cuCtxCreate_v3");
  return CountedCreate(
      dev, true, "cuCtxCreate", [&] { return real(ctx, params, count, flags, dev); }, ctx);
}

PALADIN_EXPORT CUresult cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams* params,
                                       unsigned int flags, CUdevice dev) {
  Shim& shim = Shim::Get();
  auto real = shim.next().cuCtxCreateV4;
  if (real == nullptr) return shim.Missing("cuCtxCreate_v4");
  return CountedCreate(
      dev, true, "cuCtxCreate", [&] { return real(ctx, params, flags, dev); }, ctx);
}

PALADIN_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  Shim& shim = Shim::Get();
  auto real = shim.next().cuCtxDestroy;
  if (real == nullptr) return shim.Missing("cuCtxDestroy_v2");
  CUresult r = real(ctx);
  if (r == CUDA_SUCCESS && shim.enforcing()) shim.ContextDestroyed(ctx);
  return r;
}
