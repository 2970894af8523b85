// The readers of untrusted JSON fields that the wire's decoders share (src/api/wire.cc and
// wire_pods.cc): each leaves its output alone when the field is absent or null and names the
// field, and where it is (`where`, "jobs[3]: "), in the error it returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "paladin/base/status.h"

namespace paladin::api::wire_fields {

inline constexpr int64_t kMaxCount = int64_t{1} << 60;

// "jobs[3]: used_bytes: expected an integer from 0 to ..." and the like.
Status Wrong(const std::string& where, const std::string& key, const std::string& what);
// An integer from lo to hi.
Status Int(const nlohmann::json& o, const char* key, int64_t lo, int64_t hi,
           const std::string& where, int64_t* out);
// Int for an int.
Status SmallInt(const nlohmann::json& o, const char* key, int lo, int hi, const std::string& where,
                int* out);
Status Str(const nlohmann::json& o, const char* key, const std::string& where, std::string* out);
Status Bool(const nlohmann::json& o, const char* key, const std::string& where, bool* out);
// A field that must be there: absent or null is an error naming it.
Status Required(const nlohmann::json& o, const char* key, const std::string& where);
// The list `key` of `body`: null or absent is empty (nullptr).
StatusOr<const nlohmann::json*> List(const nlohmann::json& body, const char* key);
// "LIST[I]: ", the place of a list's element in an error.
std::string Where(const char* list, size_t i);
// A number of seconds, none when absent or null.
StatusOr<std::optional<double>> Seconds(const nlohmann::json& o, const char* key);

}  // namespace paladin::api::wire_fields
