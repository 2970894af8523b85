// Driver entry points for streams, modules and kernel launches. Emulated kernels do nothing:
// a module is a placeholder, any function name resolves, and a launch succeeds at once.
#include <mutex>
#include <set>

#include "emucuda/driver.h"
#include "emucuda/entry_points.h"
#include "emucuda/runtime.h"

namespace paladin::emucuda {
namespace {

std::set<CUstream>& Streams() {
  static auto* streams = new std::set<CUstream>;
  return *streams;
}

std::set<CUmodule>& Modules() {
  static auto* modules = new std::set<CUmodule>;
  return *modules;
}

bool IsSpecialStream(CUstream stream) {
  return stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
}

}  // namespace

CUresult StreamContext(CUstream stream, CUcontext* ctx) {
  if (IsSpecialStream(stream)) {
    *ctx = CurrentContext();
    return *ctx != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
  }
  if (Streams().count(stream) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (!IsLiveContext(stream->ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *ctx = stream->ctx;
  return CUDA_SUCCESS;
}

}  // namespace paladin::emucuda

using paladin::emucuda::CurrentContext;
using paladin::emucuda::Runtime;

EMU_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  EMU_API_ENTRY();
  CUcontext ctx = CurrentContext();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (stream == nullptr || (flags != CU_STREAM_DEFAULT && flags != CU_STREAM_NON_BLOCKING)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* created = new CUstream_st;
  created->ctx = ctx;
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  paladin::emucuda::Streams().insert(created);
  *stream = created;
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  EMU_API_ENTRY();
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  if (paladin::emucuda::Streams().erase(stream) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete stream;
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuStreamSynchronize(CUstream stream) {
  EMU_API_ENTRY();
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  CUcontext ctx = nullptr;
  return paladin::emucuda::StreamContext(stream, &ctx);
}

EMU_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  EMU_API_ENTRY();
  CUcontext ctx = CurrentContext();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* created = new CUmod_st;
  created->ctx = ctx;
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  paladin::emucuda::Modules().insert(created);
  *module = created;
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuModuleUnload(CUmodule module) {
  EMU_API_ENTRY();
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  if (paladin::emucuda::Modules().erase(module) == 0) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& [name, function] : module->functions) delete function;
  delete module;
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  EMU_API_ENTRY();
  if (function == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  if (paladin::emucuda::Modules().count(module) == 0) return CUDA_ERROR_INVALID_HANDLE;
  CUfunction& found = module->functions[name];
  if (found == nullptr) {
    found = new CUfunc_st;
    found->name = name;
  }
  *function = found;
  return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuLaunchKernel(CUfunction function, unsigned int /*grid_x*/,
                                   unsigned int /*grid_y*/, unsigned int /*grid_z*/,
                                   unsigned int /*block_x*/, unsigned int /*block_y*/,
                                   unsigned int /*block_z*/, unsigned int /*shared_bytes*/,
                                   CUstream stream, void** /*params*/, void** /*extra*/) {
  EMU_API_ENTRY();
  if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  CUcontext ctx = nullptr;
  return paladin::emucuda::StreamContext(stream, &ctx);
}
