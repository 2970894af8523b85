// What `paladin k8s move`, `checkpoint` and `recover` share on a node: runc bounded in time, the
// node's key, the GPUs' UUIDs, files, and waiting for a pod's container to run (node_ops.cc); and
// the second half of a move, shared by MovePod and ResumeMove (move.cc). Internal to paladin_k8s.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "json_fields.h"
#include "paladin/base/status.h"
#include "paladin/ckpt/gpu_checkpoint.h"
#include "paladin/ckpt/subprocess.h"
#include "paladin/k8s/api.h"
#include "paladin/k8s/move.h"

namespace paladin::k8s::detail {

using Json = nlohmann::json;

int64_t MsSince(std::chrono::steady_clock::time_point t);
// The node's key: 32 bytes or more, written as hex (the RuntimeClass's script reads it so).
StatusOr<std::string> ReadKey(const std::string& path);
// The GPUs' UUIDs by index, as NVML names them on this node.
StatusOr<std::vector<std::string>> GpuUuids(const std::string& nvml_library);
Status WriteFile(const std::string& path, const std::string& text);
std::string ImageName();
// Waits for the pod to run its container; its container id.
StatusOr<std::string> WaitRunning(const ApiClient& client, const std::string& path,
                                  double timeout_s);
// Carries a checkpoint image into another folder, whole or not at all.
Status CarryImage(const std::string& from, const std::string& to);
// Reads a container's bundle (BUNDLE/config.json): the source of its /dev/shm mount ("" when
// none), returned; and the emulated driver's state file as the container sees it, which is put in
// PALADIN_EMU_TARGET_STATE, so that a GPU state restored or given back from here joins the
// container's (the driver sends the caller's own path otherwise, which is the node's).
std::string ReadBundle(const std::string& bundle);

// In a move image's folder once the checkpoint in it is whole (and its /dev/shm copied).
inline constexpr char kCheckpointedMark[] = "checkpointed";
// A fault for tests (PALADIN_K8S_MOVE_FAULT=crash:POINT): the mover killed at POINT, as a node's
// mover can be at any instant.
void CrashPoint(const std::string& point);
// This node's GPUs' UUIDs by index (NVML), checked to hold the pod's GPU and, where the target
// is on this machine, the target's.
StatusOr<std::vector<std::string>> MoveGpuUuids(const MoveOptions& o, const MovablePod& pod,
                                                const MoveOptions& target);
// The second half of a move, from its whole image `result->image`: carried to the destination
// when it is not there yet, the replacement created and run, the GPU state restored where the
// destination's runtime did not, the old pod deleted. `driver` may be null (loaded when needed).
Status FinishFromImage(const ApiClient& client, const MoveOptions& o, const std::string& body,
                       const MovablePod& pod, const MoveOptions& target, const std::string& key,
                       const std::vector<std::string>& uuids, ckpt::GpuCheckpointer* driver,
                       std::chrono::steady_clock::time_point t0, MoveResult* result,
                       const std::function<void(const std::string&)>& progress);

// runc on this node, bounded in time; its output on success.
struct Runc {
  const MoveOptions& o;
  std::string root;  // the node's runc state folder
  StatusOr<std::string> Call(std::vector<std::string> args, double timeout_s = 30) const {
    std::vector<std::string> argv = {o.runc, "--root", root};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::pair<std::string, std::string>> env;
    if (!o.criu_dir.empty()) {
      const char* path = std::getenv("PATH");
      env.emplace_back("PATH", o.criu_dir + ":" + (path != nullptr ? path : "/usr/bin:/bin"));
    }
    const ckpt::SubprocessResult r = ckpt::RunBounded(argv, env, timeout_s);
    if (r.exit_code != 0 || r.timed_out) {
      std::string out = r.output;
      while (!out.empty() && out.back() == '\n') out.pop_back();
      return Internal("runc " + args.front() + (r.timed_out ? " timed out" : " failed") + ": " +
                      out);
    }
    return r.output;
  }
  // The container's state: pid, bundle, annotations.
  StatusOr<Json> State(const std::string& id) const {
    StatusOr<std::string> out = Call({"state", id});
    if (!out.ok()) return out.status();
    Json j = Json::parse(*out, nullptr, false);
    if (!j.is_object()) return Internal("runc state " + id + ": not JSON");
    return j;
  }
  StatusOr<std::vector<pid_t>> Pids(const std::string& id) const {
    StatusOr<std::string> out = Call({"ps", "--format", "json", id});
    if (!out.ok()) return out.status();
    const Json j = Json::parse(*out, nullptr, false);
    std::vector<pid_t> pids;
    if (!j.is_array()) return Internal("runc ps " + id + ": not a JSON list");
    for (const Json& p : j) {
      if (p.is_number_integer()) pids.push_back(p.get<pid_t>());
    }
    return pids;
  }
};

}  // namespace paladin::k8s::detail
