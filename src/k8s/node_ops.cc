// What `paladin k8s move`, `checkpoint` and `recover` share on a node (node_ops.h).
#include "node_ops.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "paladin/api/wire.h"
#include "paladin/gpu/nvml.h"

namespace paladin::k8s {
namespace detail {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// The node's key: 32 bytes or more, written as hex (the RuntimeClass's script reads it so).
StatusOr<std::string> ReadKey(const std::string& path) {
  std::ifstream in(path);
  std::string hex;
  if (!in || !(in >> hex)) {
    return FailedPrecondition("the node's move key '" + path +
                              "' is unreadable (the node's installation writes it; "
                              "docs/kubernetes.md)");
  }
  if (hex.size() < 64 || hex.size() > 128 || hex.size() % 2 != 0 ||
      hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
    return FailedPrecondition("the node's move key '" + path +
                              "': expected 32 to 64 bytes in hex on one line");
  }
  std::string key;
  for (size_t i = 0; i < hex.size(); i += 2) {
    key.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return key;
}

// The GPUs' UUIDs by index, as NVML names them on this node.
StatusOr<std::vector<std::string>> GpuUuids(const std::string& nvml_library) {
  StatusOr<std::unique_ptr<gpu::Nvml>> nvml = gpu::Nvml::Load(nvml_library);
  if (!nvml.ok()) return nvml.status();
  StatusOr<std::vector<gpu::GpuInfo>> gpus = (*nvml)->Gpus();
  if (!gpus.ok()) return gpus.status();
  std::vector<std::string> uuids;
  for (const gpu::GpuInfo& g : *gpus) {
    if (g.index >= 0 && static_cast<size_t>(g.index) >= uuids.size()) {
      uuids.resize(static_cast<size_t>(g.index) + 1);
    }
    if (g.index >= 0) uuids[static_cast<size_t>(g.index)] = g.uuid;
  }
  return uuids;
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return Internal("cannot write " + path);
  return Status::Ok();
}

std::string ImageName() {
  std::random_device rd;
  char name[64];
  std::snprintf(name, sizeof name, "move-%lld-%04x",
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                           std::chrono::system_clock::now().time_since_epoch())
                                           .count()),
                rd() & 0xffffu);
  return name;
}

// Waits for the pod to run its container; its container id.
StatusOr<std::string> WaitRunning(const ApiClient& client, const std::string& path,
                                  double timeout_s) {
  const Clock::time_point start = Clock::now();
  std::string last = "not created";
  while (MsSince(start) < static_cast<int64_t>(timeout_s * 1000)) {
    StatusOr<std::string> body = client.Get(path);
    if (body.ok()) {
      const Json pod = Json::parse(*body, nullptr, false);
      const Json status = pod.is_object() ? pod.value("status", Json::object()) : Json::object();
      const std::string phase = Str(status, "phase");
      last = "phase " + phase;
      for (const Json& c : status.value("containerStatuses", Json::array())) {
        const Json state = c.value("state", Json::object());
        if (state.contains("running")) {
          const std::string id = Str(c, "containerID");
          const size_t at = id.find("://");
          return at == std::string::npos ? id : id.substr(at + 3);
        }
        for (const char* s : {"waiting", "terminated"}) {
          if (state.contains(s)) {
            last = std::string(s) + ": " + Str(state[s], "reason") + " " + Str(state[s], "message");
          }
        }
      }
      for (const Json& c : status.value("conditions", Json::array())) {
        if (Str(c, "type") == "PodScheduled" && Str(c, "status") == "False") {
          last = "not scheduled: " + Str(c, "message");
        }
      }
      if (api::PodPhaseEnded(phase)) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Unavailable("the replacement pod does not run (" + last + ")");
}

// Carries a checkpoint image into the destination node's folder: a copy on this machine (the
// other node's folder, or a filesystem both nodes mount), written under a temporary name and
// renamed, so the destination's runtime never sees half an image.
Status CarryImage(const std::string& from, const std::string& to) {
  std::error_code ec;
  const std::string partial = to + ".partial";
  fs::remove_all(partial, ec);
  fs::create_directories(fs::path(to).parent_path(), ec);
  fs::copy(from, partial, fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
  if (!ec) fs::rename(partial, to, ec);
  if (ec) {
    fs::remove_all(partial, ec);
    return Internal("cannot carry the image " + from + " to " + to + ": " + ec.message());
  }
  return Status::Ok();
}

std::string ReadBundle(const std::string& bundle) {
  std::ifstream in(bundle + "/config.json");
  const Json config = Json::parse(in, nullptr, false);
  if (!config.is_object()) return "";
  std::string shm;
  for (const Json& m : config.value("mounts", Json::array())) {
    if (Str(m, "destination") == "/dev/shm") shm = Str(m, "source");
  }
  for (const Json& e : config.value("process", Json::object()).value("env", Json::array())) {
    const std::string kv = e.is_string() ? e.get<std::string>() : "";
    if (kv.rfind("PALADIN_EMU_STATE=", 0) == 0) {
      setenv("PALADIN_EMU_TARGET_STATE", kv.substr(18).c_str(), 1);
    }
  }
  return shm;
}

}  // namespace detail

}  // namespace paladin::k8s
