#include "emucuda/config.h"

#include <unistd.h>

#include <cctype>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace paladin::emucuda {
namespace {

// "'<entry>'<what>", built with append: GCC 12 warns falsely (-Wrestrict) on chained operator+.
std::string EntryError(std::string_view entry, const char* what) {
  std::string error = "'";
  error.append(entry);
  error += "'";
  error += what;
  return error;
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

bool ParseCount(std::string_view text, int* count) {
  if (text.empty() || text.size() > 3) return false;
  int value = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    value = value * 10 + (c - '0');
  }
  *count = value;
  return value > 0;
}

bool ParseDriverVersion(const char* text, int* version) {
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 1000 || value > 99990) return false;
  *version = static_cast<int>(value);
  return true;
}

uint64_t ContextOverheadFromEnv() {
  const char* text = std::getenv("PALADIN_EMU_CTX_OVERHEAD");
  uint64_t bytes = kDefaultContextOverhead;
  if (text != nullptr && !ParseSize(text, &bytes)) {
    LogLine("PALADIN_EMU_CTX_OVERHEAD='%s': not a size; using 256MiB", text);
    bytes = kDefaultContextOverhead;
  }
  return RoundToGranularity(bytes);
}

int DriverVersionFromEnv() {
  const char* text = std::getenv("PALADIN_EMU_DRIVER_VERSION");
  int version = kDefaultDriverVersion;
  if (text != nullptr && !ParseDriverVersion(text, &version)) {
    LogLine("PALADIN_EMU_DRIVER_VERSION='%s': not a driver version such as 12080; using %d", text,
            kDefaultDriverVersion);
    version = kDefaultDriverVersion;
  }
  return version;
}

// A rate of the driver's checkpoint API, in bytes a second; 0 (at once) when unset or malformed.
uint64_t RateFromEnv(const char* name) {
  const char* text = std::getenv(name);
  uint64_t bytes = 0;
  if (text != nullptr && *text != '\0' && !ParseSize(text, &bytes)) {
    LogLine("%s='%s': not a size a second such as 1600MB; the calls take no time", name, text);
    bytes = 0;
  }
  return bytes;
}

}  // namespace

uint64_t RoundToGranularity(uint64_t bytes) {
  if (bytes > UINT64_MAX - kGranularity) return UINT64_MAX - (UINT64_MAX % kGranularity);
  return (bytes + kGranularity - 1) / kGranularity * kGranularity;
}

bool ParseDeviceSpec(std::string_view text, std::vector<uint64_t>* device_bytes,
                     std::string* error) {
  device_bytes->clear();
  if (Trim(text).empty()) {
    *error = "empty";
    return false;
  }
  while (true) {
    size_t comma = text.find(',');
    std::string_view entry = Trim(text.substr(0, comma));
    size_t x = entry.find_first_of("xX");
    int count = 0;
    uint64_t bytes = 0;
    if (entry.empty()) {
      *error = "an empty entry";
      return false;
    }
    if (x == std::string_view::npos) {
      *error = EntryError(entry, " has no 'x' between the count and the size");
      return false;
    }
    if (!ParseCount(Trim(entry.substr(0, x)), &count)) {
      *error = EntryError(entry, ": bad device count");
      return false;
    }
    if (!ParseSize(entry.substr(x + 1), &bytes)) {
      *error = EntryError(entry, ": bad size");
      return false;
    }
    if (bytes < kGranularity) {
      *error = EntryError(entry, ": a device needs at least 2 MiB");
      return false;
    }
    if (device_bytes->size() + count > kMaxDevices) {
      *error = "more than 16 devices";
      return false;
    }
    device_bytes->insert(device_bytes->end(), count, bytes);
    if (comma == std::string_view::npos) return true;
    text.remove_prefix(comma + 1);
  }
}

std::string StatePathFromEnv() {
  const char* path = std::getenv("PALADIN_EMU_STATE");
  if (path != nullptr && *path != '\0') return path;
  return "/dev/shm/paladin-emu-" + std::to_string(getuid()) + ".state";
}

std::vector<uint64_t> DeviceSpecFromEnv() {
  const char* env = std::getenv("PALADIN_EMU_GPUS");
  const char* spec = env != nullptr ? env : kDefaultDeviceSpec;
  std::vector<uint64_t> bytes;
  std::string error;
  if (!ParseDeviceSpec(spec, &bytes, &error)) {
    LogLine("PALADIN_EMU_GPUS='%s': %s; expected e.g. 2x80GiB", spec, error.c_str());
    bytes.clear();
  }
  return bytes;
}

std::string ControlDir(const std::string& state_path) { return state_path + ".ctl"; }

const Config& ProcessConfig() {
  static const Config* config = [] {
    auto* c = new Config;
    c->device_bytes = DeviceSpecFromEnv();
    c->state_path = StatePathFromEnv();
    c->context_overhead = ContextOverheadFromEnv();
    c->driver_version = DriverVersionFromEnv();
    c->checkpoint_rate = RateFromEnv("PALADIN_EMU_CHECKPOINT_RATE");
    c->restore_rate = RateFromEnv("PALADIN_EMU_RESTORE_RATE");
    return c;
  }();
  return *config;
}

bool DriverHas(int version) { return ProcessConfig().driver_version >= version; }

void LogLine(const char* format, ...) {
  char line[768];
  int prefix = std::snprintf(line, sizeof(line), "paladin-emucuda: ");
  va_list args;
  va_start(args, format);
  int body = std::vsnprintf(line + prefix, sizeof(line) - prefix - 1, format, args);
  va_end(args);
  size_t length = prefix + (body < 0 ? 0 : static_cast<size_t>(body));
  if (length > sizeof(line) - 2) length = sizeof(line) - 2;
  line[length++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, length);
  (void)ignored;
}

}  // namespace paladin::emucuda
