// Fields of the Kubernetes API's objects as paladin_k8s reads them (a string field, "" when it is
// not one), and sizes as its messages write them. Internal to paladin_k8s.
#pragma once

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "paladin/base/size.h"

namespace paladin::k8s {

// The string field KEY of J; "" when J is not an object, has no KEY or holds another type there.
inline std::string Str(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// BYTES as a message writes them ("2 GiB"); a negative count as 0.
inline std::string Size(int64_t bytes) {
  return base::FormatSize(static_cast<uint64_t>(std::max<int64_t>(bytes, 0)));
}

}  // namespace paladin::k8s
