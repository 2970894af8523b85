// The emulated driver's configuration, read from the environment on first use (never in a static
// constructor: the library is loaded into programs that may set the variables after loading it).
//
//   PALADIN_EMU_GPUS            devices, "NxSIZE[,NxSIZE...]" (default 1x80GiB, at most 16)
//   PALADIN_EMU_STATE           the shared device-state file (default
//   /dev/shm/paladin-emu-<uid>.state) PALADIN_EMU_CTX_OVERHEAD    bytes a context costs on its
//   device (default 256MiB) PALADIN_EMU_DRIVER_VERSION  what cuDriverGetVersion reports (default
//   13000)
//
// A malformed value is reported with one line on stderr; a bad device spec leaves the process with
// no device, the others fall back to their default.
#ifndef PALADIN_EMUCUDA_CONFIG_H_
#define PALADIN_EMUCUDA_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "paladin/base/size.h"

namespace paladin::emucuda {

inline constexpr int kMaxDevices = 16;
inline constexpr uint64_t kGranularity = 2ull << 20;  // what capacity is counted in
inline constexpr int kDefaultDriverVersion = 13000;
inline constexpr uint64_t kDefaultContextOverhead = 256ull << 20;
inline constexpr const char* kDefaultDeviceSpec = "1x80GiB";

// Rounds up to a multiple of kGranularity; saturates instead of overflowing.
uint64_t RoundToGranularity(uint64_t bytes);

// Sizes: the project's one parser and formatter (paladin/base/size.h).
using base::FormatSize;
using base::ParseSize;
// Parses a device spec such as "2x80GiB" or "1x16GiB,1x40GiB". On failure returns false and says
// what is wrong in *error (without the variable's name).
bool ParseDeviceSpec(std::string_view text, std::vector<uint64_t>* device_bytes,
                     std::string* error);

struct Config {
  std::vector<uint64_t> device_bytes;  // empty: the spec was malformed, there is no device
  std::string state_path;
  uint64_t context_overhead = kDefaultContextOverhead;
  int driver_version = kDefaultDriverVersion;
  // Bytes a second the driver's checkpoint and restore move (PALADIN_EMU_CHECKPOINT_RATE and
  // PALADIN_EMU_RESTORE_RATE, sizes a second such as 1600MB); 0, the default: at once.
  uint64_t checkpoint_rate = 0;
  uint64_t restore_rate = 0;
};

// PALADIN_EMU_STATE, or the default path for this user.
std::string StatePathFromEnv();
// The device sizes PALADIN_EMU_GPUS asks for; empty (and one line on stderr) when malformed.
std::vector<uint64_t> DeviceSpecFromEnv();
// The folder where checkpoint requests and process states are exchanged: "<state path>.ctl".
std::string ControlDir(const std::string& state_path);

// The configuration of this process, read from the environment on the first call. Thread safe.
const Config& ProcessConfig();
// True when the emulated driver version is at least `version` (a function introduced in
// `version` exists).
bool DriverHas(int version);

// Writes "paladin-emucuda: <message>\n" to stderr with a single write.
void LogLine(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace paladin::emucuda

#endif  // PALADIN_EMUCUDA_CONFIG_H_
