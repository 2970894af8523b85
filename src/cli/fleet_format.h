// Formatting and argument parsing for the fleet client commands: sizes, durations, NODE[/GPU],
// K=V, aligned tables, memory bars, URL escaping and JSON field access that never throws.
// Pure functions (no I/O, no clock: callers pass `now`), tested in tests/api/fleet_format_test.cc.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "paladin/api/client.h"
#include "paladin/base/status.h"

namespace paladin::cli::fleet {

// "8.0 GiB", "512 MiB", "1.5 GiB", "12 KiB", "100 B".
std::string FormatBytes(uint64_t bytes);
// "0s", "45s", "3m12s", "2h05m", "3d04h"; negative durations print as "0s".
std::string FormatDuration(double seconds);
// "3m12s ago" for a Unix time `t` seen at `now`; "-" when there is no time.
std::string FormatAgo(std::optional<double> t, double now);

// A size flag: "8GiB", "512MiB", "1.5GiB", "8G", "4096" (bytes). The error names the flag and
// the value. Zero is refused when `allow_zero` is false.
StatusOr<uint64_t> ParseSizeFlag(const std::string& flag, const std::string& text,
                                 bool allow_zero = false);
// --gpu-mem: "auto" or a size, as the API's gpu_mem field ("auto" or bytes).
StatusOr<api::Json> ParseGpuMemFlag(const std::string& flag, const std::string& text);

struct NodeGpu {
  std::string node;
  std::optional<int> gpu;
};
// "node-a" or "node-a/1"; the error names the flag and the value.
StatusOr<NodeGpu> ParseNodeGpu(const std::string& flag, const std::string& text);

// --env K=V ...: names are [A-Za-z_][A-Za-z0-9_]*; a repeated name keeps the last value.
StatusOr<std::map<std::string, std::string>> ParseEnv(const std::vector<std::string>& items);

// Text from the server made safe for a terminal: control characters (escape sequences
// included) become '?', invalid UTF-8 bytes too.
std::string Printable(const std::string& text);
// The number of characters (UTF-8 code points) in `text`: the width of a table cell.
size_t DisplayWidth(const std::string& text);

// Columns padded to their widest cell, two spaces apart; the last column is not padded.
class Table {
 public:
  explicit Table(std::vector<std::string> header);
  void AddRow(std::vector<std::string> row);
  size_t rows() const { return rows_.size(); }
  std::string Render() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// A memory bar `width` characters wide inside brackets: '#' used, '=' allocated but unused,
// '.' free; used memory past the allocation shows as '!'. total 0 draws an empty bar.
std::string MemoryBar(uint64_t used, uint64_t allocated, uint64_t total, int width);

// Percent-encodes everything but A-Z a-z 0-9 - . _ ~ (a path segment or a query value).
std::string Escape(const std::string& text);
// The API path of job JOB: /v1/jobs/ and its id, escaped.
std::string JobPath(const std::string& job);
// "?k=v&k2=v2" from the pairs whose value is not empty; "" when none are.
std::string Query(const std::vector<std::pair<std::string, std::string>>& params);

// Field access on the server's JSON that never throws: absent, null or the wrong type gives
// the fallback (or nullopt).
std::string Str(const api::Json& j, const char* key, const std::string& fallback = "");
std::optional<double> Num(const api::Json& j, const char* key);
std::optional<uint64_t> Bytes(const api::Json& j, const char* key);
std::optional<int64_t> Int(const api::Json& j, const char* key);
// j[key] when it is an array, else an empty array.
const api::Json& Array(const api::Json& j, const char* key);
// A size field as a table cell: FormatBytes, or "-" when absent.
std::string BytesCell(const api::Json& j, const char* key);
// "node-a/0", or "-" for a job that is not placed.
std::string PlacementCell(const api::Json& job);

// Whether a job (a /v1/jobs answer) has ended (succeeded, failed, cancelled).
bool IsEnded(const api::Json& job);

// The part of `current` that is new since `previous` was shown, for logs --follow: the server
// keeps the last 1 MiB of each stream, so once a stream is longer than that the window slides:
// the new text is what follows the largest overlap of the end of `previous` with the start of
// `current` (all of `current` when they do not overlap).
std::string NewLogText(const std::string& previous, const std::string& current);
// The last `lines` lines of `text` (all of it when lines <= 0).
std::string TailLines(const std::string& text, int lines);

}  // namespace paladin::cli::fleet
