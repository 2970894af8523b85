#include "fleet_format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "paladin/api/job_state.h"
#include "paladin/api/wire.h"
#include "paladin/base/size.h"

namespace paladin::cli::fleet {

namespace key = api::key;

namespace {}  // namespace

std::string FormatBytes(uint64_t bytes) { return base::FormatSizeShort(bytes); }

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  if (seconds > 1e12) seconds = 1e12;  // keeps the casts below defined
  const auto s = static_cast<long long>(seconds);
  char buf[64];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%llds", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  } else if (s < 86400) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lldd%02lldh", s / 86400, (s % 86400) / 3600);
  }
  return buf;
}

std::string FormatAgo(std::optional<double> t, double now) {
  if (!t.has_value() || !std::isfinite(*t)) return "-";
  return FormatDuration(now - *t) + " ago";
}

StatusOr<uint64_t> ParseSizeFlag(const std::string& flag, const std::string& text,
                                 bool allow_zero) {
  uint64_t bytes = 0;
  if (!base::ParseSize(text, &bytes)) {
    return InvalidArgument(flag + " '" + Printable(text) +
                           "': not a size (expected e.g. 8GiB, 512MiB, 1.5GiB or a number of "
                           "bytes)");
  }
  if (bytes == 0 && !allow_zero) return InvalidArgument(flag + " '" + text + "': must be above 0");
  return bytes;
}

StatusOr<api::Json> ParseGpuMemFlag(const std::string& flag, const std::string& text) {
  if (text == "auto") return api::Json("auto");
  StatusOr<uint64_t> bytes = ParseSizeFlag(flag, text);
  if (!bytes.ok()) {
    return InvalidArgument(bytes.status().message() + ", or auto to let Paladin predict it");
  }
  return api::Json(*bytes);
}

StatusOr<NodeGpu> ParseNodeGpu(const std::string& flag, const std::string& text) {
  const std::string shown = flag + " '" + Printable(text) + "'";
  NodeGpu out;
  const size_t slash = text.find('/');
  out.node = text.substr(0, slash);
  if (out.node.empty()) return InvalidArgument(shown + ": expected NODE or NODE/GPU");
  for (const char c : out.node) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= ' ' || u == 0x7f) {
      return InvalidArgument(shown + ": the node name has a space or a control character");
    }
  }
  if (slash == std::string::npos) return out;
  const std::string gpu = text.substr(slash + 1);
  if (gpu.empty() || gpu.size() > 4 ||
      !std::all_of(gpu.begin(), gpu.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return InvalidArgument(shown + ": the GPU after '/' must be an index such as 0 or 1");
  }
  out.gpu = std::stoi(gpu);
  return out;
}

StatusOr<std::map<std::string, std::string>> ParseEnv(const std::vector<std::string>& items) {
  std::map<std::string, std::string> env;
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    const std::string name = item.substr(0, eq);
    bool valid = eq != std::string::npos && !name.empty() && !(name[0] >= '0' && name[0] <= '9');
    for (const char c : name) {
      valid = valid && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                        (c >= '0' && c <= '9') || c == '_');
    }
    if (!valid) {
      return InvalidArgument("--env '" + Printable(item) +
                             "': expected NAME=VALUE with NAME made of letters, digits and _");
    }
    env[name] = item.substr(eq + 1);
  }
  return env;
}

std::string Printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
      ++i;
      continue;
    }
    // A well-formed multi-byte sequence is kept whole; anything else is one '?'.
    const size_t n = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    bool ok = n != 0 && i + n <= text.size();
    for (size_t k = 1; ok && k < n; ++k) {
      ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
    }
    // C1 controls (U+0080-U+009F) act as escapes on some terminals.
    if (ok && n == 2 && c == 0xc2 && static_cast<unsigned char>(text[i + 1]) < 0xa0) ok = false;
    if (ok) {
      out.append(text, i, n);
      i += n;
    } else {
      out += '?';
      ++i;
    }
  }
  return out;
}

size_t DisplayWidth(const std::string& text) {
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  }));
}

Table::Table(std::vector<std::string> header) : header_(std::move(header)) {}

void Table::AddRow(std::vector<std::string> row) {
  row.resize(header_.size());
  for (std::string& cell : row) cell = Printable(cell);
  rows_.push_back(std::move(row));
}

std::string Table::Render() const {
  std::vector<size_t> widths(header_.size(), 0);
  auto measure = [&widths](const std::vector<std::string>& row) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], DisplayWidth(row[c]));
  };
  measure(header_);
  for (const auto& row : rows_) measure(row);
  std::string out;
  auto line = [&out, &widths](const std::vector<std::string>& row) {
    std::string text;
    for (size_t c = 0; c < row.size(); ++c) {
      text += row[c];
      if (c + 1 < row.size()) text.append(widths[c] - DisplayWidth(row[c]) + 2, ' ');
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text + "\n";
  };
  line(header_);
  for (const auto& row : rows_) line(row);
  return out;
}

std::string MemoryBar(uint64_t used, uint64_t allocated, uint64_t total, int width) {
  if (width < 1) width = 1;
  std::string bar(static_cast<size_t>(width), '.');
  if (total > 0) {
    auto cells = [total, width](uint64_t bytes) {
      const double share = std::min(1.0, static_cast<double>(bytes) / static_cast<double>(total));
      return static_cast<size_t>(std::lround(share * width));
    };
    const size_t alloc_cells = cells(allocated);
    const size_t used_cells = cells(used);
    for (size_t i = 0; i < alloc_cells; ++i) bar[i] = '=';
    for (size_t i = 0; i < used_cells; ++i) bar[i] = i < alloc_cells ? '#' : '!';
  }
  return "[" + bar + "]";
}

std::string JobPath(const std::string& job) { return "/v1/jobs/" + Escape(job); }

std::string Escape(const std::string& text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  // "." and ".." are path steps to a URL parser even when escaping is not needed.
  if (out == "." || out == "..") {
    std::string dots;
    for (size_t i = 0; i < out.size(); ++i) dots += "%2E";
    return dots;
  }
  return out;
}

std::string Query(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string out;
  for (const auto& [key, value] : params) {
    if (value.empty()) continue;
    out += (out.empty() ? "?" : "&") + Escape(key) + "=" + Escape(value);
  }
  return out;
}

std::string Str(const api::Json& j, const char* key, const std::string& fallback) {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number_integer()) return std::to_string(it->get<int64_t>());
  return fallback;
}

std::optional<double> Num(const api::Json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::optional<uint64_t> Bytes(const api::Json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find(key);
  if (it == j.end()) return std::nullopt;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer()) {
    const auto v = it->get<int64_t>();
    return v < 0 ? std::nullopt : std::optional<uint64_t>(static_cast<uint64_t>(v));
  }
  if (it->is_number_float()) {
    const auto v = it->get<double>();
    if (!std::isfinite(v) || v < 0 || v >= 1.8e19) return std::nullopt;
    return static_cast<uint64_t>(v);
  }
  return std::nullopt;
}

std::optional<int64_t> Int(const api::Json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find(key);
  if (it == j.end()) return std::nullopt;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_unsigned()) {
    const auto v = it->get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(v);
  }
  return std::nullopt;
}

const api::Json& Array(const api::Json& j, const char* key) {
  static const api::Json kEmpty = api::Json::array();
  if (!j.is_object()) return kEmpty;
  const auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : kEmpty;
}

std::string BytesCell(const api::Json& j, const char* key) {
  const std::optional<uint64_t> b = Bytes(j, key);
  return b.has_value() ? FormatBytes(*b) : "-";
}

std::string PlacementCell(const api::Json& job) {
  const std::string node = Str(job, key::kNode);
  if (node.empty()) return "-";
  const std::optional<int64_t> gpu = Int(job, key::kGpu);
  return gpu.has_value() ? node + "/" + std::to_string(*gpu) : node;
}

bool IsEnded(const api::Json& job) {
  const std::optional<api::JobState> state = api::JobStateOf(job);
  return state && api::IsTerminal(*state);
}

std::string NewLogText(const std::string& previous, const std::string& current) {
  if (current.size() >= previous.size() && current.compare(0, previous.size(), previous) == 0) {
    return current.substr(previous.size());
  }
  // The window slid: `current` starts inside `previous`. The earliest place where the rest of
  // `previous` is a prefix of `current` is the largest overlap (the least text printed twice).
  if (current.empty()) return "";
  for (size_t at = previous.find(current[0]); at != std::string::npos;
       at = previous.find(current[0], at + 1)) {
    const size_t overlap = previous.size() - at;
    if (overlap <= current.size() && current.compare(0, overlap, previous, at, overlap) == 0) {
      return current.substr(overlap);
    }
  }
  return current;  // nothing in common: all of it is new
}

std::string TailLines(const std::string& text, int lines) {
  if (lines <= 0) return text;
  size_t end = text.size();
  // A trailing newline ends the last line; it does not start an empty one.
  if (end > 0 && text[end - 1] == '\n') --end;
  size_t pos = end;
  for (int found = 0; found < lines; ++found) {
    const size_t nl = pos == 0 ? std::string::npos : text.rfind('\n', pos - 1);
    if (nl == std::string::npos) return text;
    pos = nl;
  }
  return text.substr(pos + 1);
}

}  // namespace paladin::cli::fleet
