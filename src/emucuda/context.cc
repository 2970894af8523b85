// Driver entry points for contexts: primary contexts (one per device per process, with a retain
// count), created contexts, and the per-thread context stack. Creating a context counts the
// configured context overhead on its device; destroying it gives that back together with the
// memory allocated in it.
#include <mutex>
#include <set>

#include "emucuda/driver.h"
#include "emucuda/entry_points.h"
#include "emucuda/runtime.h"

namespace paladin::emucuda {
namespace {

constexpr int kStackDepth = 64;
thread_local CUcontext t_stack[kStackDepth];
thread_local int t_depth = 0;

// Contexts are never deleted, so a stale handle is recognised as dead rather than reused.
std::set<CUcontext>& KnownContexts() {
  static auto* known = new std::set<CUcontext>;
  return *known;
}

CUcontext& PrimaryContext(int ordinal) {
  static auto* primaries = new CUcontext[kMaxDevices]();
  return primaries[ordinal];
}

CUresult CreateContext(int ordinal, bool primary, CUcontext* out) {
  CUresult result = Runtime::Get().ChargeContext(ordinal);
  if (result != CUDA_SUCCESS) return result;
  CUcontext ctx = primary ? PrimaryContext(ordinal) : nullptr;
  if (ctx == nullptr) {
    ctx = new CUctx_st;
    ctx->ordinal = ordinal;
    ctx->primary = primary;
    KnownContexts().insert(ctx);
    if (primary) PrimaryContext(ordinal) = ctx;
  }
  ctx->alive.store(true);
  *out = ctx;
  return CUDA_SUCCESS;
}

void DestroyContext(CUcontext ctx) {
  FreeContextMemory(ctx);
  Runtime::Get().UnchargeContext(ctx->ordinal);
  ctx->alive.store(false);
  ctx->retains = 0;
}

CUresult Push(CUcontext ctx) {
  if (t_depth == kStackDepth) return CUDA_ERROR_INVALID_VALUE;
  t_stack[t_depth++] = ctx;
  return CUDA_SUCCESS;
}

CUresult CreateAndPush(CUcontext* ctx, CUdevice device) {
  Runtime& runtime = Runtime::Get();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!runtime.ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  if (t_depth == kStackDepth) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(runtime.mu());
  CUresult result = CreateContext(device, false, ctx);
  if (result == CUDA_SUCCESS) result = Push(*ctx);
  return result;
}

}  // namespace

CUcontext CurrentContext() {
  if (t_depth == 0) return nullptr;
  CUcontext ctx = t_stack[t_depth - 1];
  return ctx != nullptr && ctx->alive.load() ? ctx : nullptr;
}

bool IsLiveContext(CUcontext ctx) {
  return ctx != nullptr && KnownContexts().count(ctx) != 0 && ctx->alive.load();
}

}  // namespace paladin::emucuda

using paladin::emucuda::CurrentContext;
using paladin::emucuda::IsLiveContext;
using paladin::emucuda::Runtime;

EMU_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) {
  EMU_API_ENTRY();
  Runtime& runtime = Runtime::Get();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!runtime.ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(runtime.mu());
  CUcontext primary = paladin::emucuda::PrimaryContext(device);
  if (primary == nullptr || primary->retains == 0) {
    CUresult result = paladin::emucuda::CreateContext(device, true, &primary);
    if (result != CUDA_SUCCESS) return result;
  }
  ++primary->retains;
  *ctx = primary;
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  EMU_API_ENTRY();
  Runtime& runtime = Runtime::Get();
  if (!runtime.ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(runtime.mu());
  CUcontext primary = paladin::emucuda::PrimaryContext(device);
  if (primary == nullptr || primary->retains == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--primary->retains == 0) paladin::emucuda::DestroyContext(primary);
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice device) {
  EMU_API_ENTRY();
  Runtime& runtime = Runtime::Get();
  if (!runtime.ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(runtime.mu());
  CUcontext primary = paladin::emucuda::PrimaryContext(device);
  if (primary != nullptr && primary->retains > 0) paladin::emucuda::DestroyContext(primary);
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned int /*flags*/, CUdevice device) {
  EMU_API_ENTRY();
  return paladin::emucuda::CreateAndPush(ctx, device);
}

EMU_EXPORT CUresult cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam* /*params*/,
                                   int /*num_params*/, unsigned int /*flags*/, CUdevice device) {
  EMU_API_ENTRY();
  return paladin::emucuda::CreateAndPush(ctx, device);
}

EMU_EXPORT CUresult cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams* /*params*/,
                                   unsigned int /*flags*/, CUdevice device) {
  EMU_REQUIRE_DRIVER(12050);
  EMU_API_ENTRY();
  return paladin::emucuda::CreateAndPush(ctx, device);
}

EMU_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  EMU_API_ENTRY();
  Runtime& runtime = Runtime::Get();
  std::lock_guard<std::mutex> lock(runtime.mu());
  if (!IsLiveContext(ctx) || ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
  paladin::emucuda::DestroyContext(ctx);
  if (paladin::emucuda::t_depth > 0 &&
      paladin::emucuda::t_stack[paladin::emucuda::t_depth - 1] == ctx) {
    --paladin::emucuda::t_depth;
  }
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  EMU_API_ENTRY();
  if (ctx != nullptr) {
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    if (!IsLiveContext(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (paladin::emucuda::t_depth == 0) return paladin::emucuda::Push(ctx);
  paladin::emucuda::t_stack[paladin::emucuda::t_depth - 1] = ctx;
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuCtxGetCurrent(CUcontext* ctx) {
  EMU_API_ENTRY();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = CurrentContext();
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  EMU_API_ENTRY();
  {
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    if (!IsLiveContext(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  }
  return paladin::emucuda::Push(ctx);
}

EMU_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* ctx) {
  EMU_API_ENTRY();
  if (paladin::emucuda::t_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  CUcontext popped = paladin::emucuda::t_stack[--paladin::emucuda::t_depth];
  if (ctx != nullptr) *ctx = popped;
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  EMU_API_ENTRY();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUcontext ctx = CurrentContext();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *device = ctx->ordinal;
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuCtxSynchronize() {
  EMU_API_ENTRY();
  return CurrentContext() != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}
