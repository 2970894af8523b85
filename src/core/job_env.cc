#include "paladin/core/job_env.h"

#include <array>

namespace paladin::core {

namespace {

// The variables glibc drops for set-user-id programs (its "unsecure" list), less TMPDIR, which
// programs legitimately take from their users.
constexpr std::array<std::string_view, 12> kLoaderVariables = {
    "GCONV_PATH",   "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES",      "LOCALDOMAIN", "LOCPATH",
    "MALLOC_TRACE", "NIS_PATH",    "NLSPATH",        "RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR"};

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

bool WellFormedName(std::string_view name) {
  if (name.empty() || name.size() > kMaxJobEnvNameBytes) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!letter && !(digit && i > 0)) return false;
  }
  return true;
}

std::string Shown(std::string_view name) {
  std::string out;
  for (char c : name.substr(0, 64)) {
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return out;
}

}  // namespace

std::string RefusedJobEnvName(std::string_view name) {
  if (StartsWith(name, "LD_")) return "it steers the dynamic loader";
  for (std::string_view v : kLoaderVariables) {
    if (name == v) return "it steers glibc's loading of code or data";
  }
  if (StartsWith(name, "PALADIN_")) return "Paladin sets it";
  if (name == "CUDA_VISIBLE_DEVICES" || StartsWith(name, "CUDA_MPS_")) {
    return "Paladin sets it (the job's GPUs and their sharing)";
  }
  return "";
}

Status CheckJobEnv(const std::vector<std::pair<std::string, std::string>>& env) {
  if (env.size() > kMaxJobEnvVariables) {
    return InvalidArgument("env: " + std::to_string(env.size()) + " variables (at most " +
                           std::to_string(kMaxJobEnvVariables) + ")");
  }
  size_t total = 0;
  for (const auto& [name, value] : env) {
    if (!WellFormedName(name)) {
      return InvalidArgument("env: '" + Shown(name) +
                             "' is not a variable name (letters, digits and '_', not starting "
                             "with a digit, at most " +
                             std::to_string(kMaxJobEnvNameBytes) + " characters)");
    }
    if (std::string why = RefusedJobEnvName(name); !why.empty()) {
      std::string message = "env: " + name;
      message.append(" may not be set by a job: ").append(why);
      return InvalidArgument(message);
    }
    if (value.find('\0') != std::string::npos) {
      return InvalidArgument("env: " + name + ": the value holds a NUL character");
    }
    if (value.size() > kMaxJobEnvValueBytes) {
      return InvalidArgument("env: " + name + ": the value is " + std::to_string(value.size()) +
                             " bytes (at most " + std::to_string(kMaxJobEnvValueBytes) + ")");
    }
    total += name.size() + value.size() + 2;
  }
  if (total > kMaxJobEnvTotalBytes) {
    return InvalidArgument("env: " + std::to_string(total) + " bytes in all (at most " +
                           std::to_string(kMaxJobEnvTotalBytes) + ")");
  }
  return Status::Ok();
}

}  // namespace paladin::core
