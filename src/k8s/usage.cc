#include "paladin/k8s/usage.h"

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "paladin/base/size.h"

namespace paladin::k8s {

using Json = nlohmann::json;

namespace {

bool UidChar(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == '-' || c == '_';
}

}  // namespace

std::string PodUidOfCgroup(std::string_view cgroup) {
  // A pod's UID is 36 characters (8-4-4-4-12 hex); systemd's slices write its '-' as '_'.
  constexpr size_t kUidLength = 36;
  for (size_t at = cgroup.find("pod"); at != std::string_view::npos;
       at = cgroup.find("pod", at + 1)) {
    const size_t from = at + 3;
    if (from + kUidLength > cgroup.size()) break;
    if (at > 0 && cgroup[at - 1] != '/' && cgroup[at - 1] != '-') continue;
    std::string uid(cgroup.substr(from, kUidLength));
    bool ok = true;
    for (size_t i = 0; i < uid.size() && ok; ++i) {
      const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
      ok = dash ? (uid[i] == '-' || uid[i] == '_')
                : (UidChar(uid[i]) && uid[i] != '-' && uid[i] != '_');
      if (dash) uid[i] = '-';
    }
    const char after = from + kUidLength < cgroup.size() ? cgroup[from + kUidLength] : '\n';
    if (ok && (after == '/' || after == '.' || after == '\n')) return uid;
  }
  return "";
}

std::map<std::string, uint64_t> UsageByPod(const std::vector<GpuProcessUse>& processes,
                                           const std::function<std::string(uint32_t)>& cgroup_of) {
  std::map<std::string, uint64_t> used;
  for (const GpuProcessUse& p : processes) {
    const std::string uid = PodUidOfCgroup(cgroup_of(p.pid));
    if (!uid.empty()) used[uid] += p.used_bytes;
  }
  return used;
}

StatusOr<std::vector<std::string>> PublishPodUsage(const ApiClient& client, const std::string& node,
                                                   const std::map<std::string, uint64_t>& used) {
  StatusOr<std::string> body = client.Get("/api/v1/pods?fieldSelector=spec.nodeName%3D" + node);
  if (!body.ok()) return body.status();
  const Json pods = Json::parse(*body, nullptr, false);
  if (!pods.is_object()) return Unavailable("the API server's pod list is not JSON");
  std::vector<std::string> written;
  for (const Json& pod : pods.value("items", Json::array())) {
    const Json meta = pod.value("metadata", Json::object());
    const std::string uid = meta.value("uid", "");
    const std::string ns = meta.value("namespace", "");
    const std::string name = meta.value("name", "");
    if (uid.empty() || ns.empty() || name.empty() || meta.contains("deletionTimestamp")) continue;
    const Json annotations = meta.value("annotations", Json::object());
    const Json shown =
        annotations.is_object() ? annotations.value(kGpuUsedAnnotation, Json()) : Json();
    const bool has = shown.is_string();
    const uint64_t before = has ? std::strtoull(shown.get<std::string>().c_str(), nullptr, 10) : 0;
    auto it = used.find(uid);
    if (it == used.end() && (!has || before == 0)) continue;  // holds nothing, says nothing
    const uint64_t now = it != used.end() ? it->second : 0;
    const uint64_t diff = now > before ? now - before : before - now;
    if (has && diff < (uint64_t{1} << 20)) continue;
    Json patch;
    patch["metadata"]["annotations"][kGpuUsedAnnotation] = std::to_string(now);
    std::string path = "/api/v1/namespaces/";
    path.append(ns).append("/pods/").append(name);
    StatusOr<std::string> r = client.Patch(path, patch.dump(), "application/merge-patch+json");
    if (!r.ok()) return r.status();
    std::string line = ns;
    line.append("/").append(name).append(" uses ").append(base::FormatSize(now));
    written.push_back(line.append(" of GPU memory"));
  }
  return written;
}

}  // namespace paladin::k8s
