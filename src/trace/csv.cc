#include "paladin/trace/csv.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <sstream>

namespace paladin::trace {
namespace {

// Splits one record starting at `pos`; advances `pos` past its line end. `line` counts lines.
Status SplitRecord(const std::string& text, size_t& pos, int& line, const std::string& source,
                   std::vector<std::string>& out) {
  out.clear();
  std::string field;
  bool quoted = false;
  const int start_line = line;
  while (pos < text.size()) {
    const char c = text[pos];
    if (quoted) {
      if (c == '"') {
        if (pos + 1 < text.size() && text[pos + 1] == '"') {
          field += '"';
          pos += 2;
          continue;
        }
        quoted = false;
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      ++pos;
      continue;
    }
    if (c == '"' && field.empty()) {
      quoted = true;
    } else if (c == ',') {
      out.push_back(std::move(field));
      field.clear();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && pos + 1 < text.size() && text[pos + 1] == '\n') ++pos;
      ++pos;
      ++line;
      out.push_back(std::move(field));
      return Status::Ok();
    } else {
      field += c;
    }
    ++pos;
  }
  if (quoted) {
    return InvalidArgument(source + ":" + std::to_string(start_line) +
                           ": unterminated quoted field (file truncated?)");
  }
  out.push_back(std::move(field));
  ++line;
  return Status::Ok();
}

bool BlankRecord(const std::vector<std::string>& r) { return r.size() == 1 && r[0].empty(); }

}  // namespace

StatusOr<CsvTable> CsvTable::Parse(const std::string& text, const std::string& source) {
  CsvTable t;
  t.source_ = source;
  size_t pos = 0;
  int line = 1;
  std::vector<std::string> record;
  if (text.empty()) return InvalidArgument(source + ": empty file, expected a CSV header");
  PALADIN_RETURN_IF_ERROR(SplitRecord(text, pos, line, source, record));
  if (BlankRecord(record)) return InvalidArgument(source + ":1: empty header line");
  t.header_ = record;
  for (size_t i = 0; i < t.header_.size(); ++i) {
    if (!t.index_.emplace(t.header_[i], i).second) {
      return InvalidArgument(source + ":1: column '" + t.header_[i] + "' appears twice");
    }
  }
  while (pos < text.size()) {
    const int record_line = line;
    PALADIN_RETURN_IF_ERROR(SplitRecord(text, pos, line, source, record));
    if (BlankRecord(record)) continue;
    if (record.size() != t.header_.size()) {
      return InvalidArgument(source + ":" + std::to_string(record_line) + ": expected " +
                             std::to_string(t.header_.size()) + " fields (" +
                             std::to_string(t.header_.size()) + " columns in the header), found " +
                             std::to_string(record.size()) +
                             (record.size() < t.header_.size() ? " (row truncated?)" : ""));
    }
    t.rows_.push_back(record);
    t.lines_.push_back(record_line);
  }
  return t;
}

StatusOr<size_t> CsvTable::Column(std::string_view name) const {
  auto it = index_.find(std::string(name));
  if (it != index_.end()) return it->second;
  std::string present;
  for (const auto& h : header_) present += (present.empty() ? "" : ", ") + h;
  return InvalidArgument(source_ + ":1: missing column '" + std::string(name) +
                         "' (header has: " + present + ")");
}

Status CsvTable::ErrorAt(size_t row, size_t col, const std::string& what) const {
  return InvalidArgument(source_ + ":" + std::to_string(lines_[row]) + ": field '" + header_[col] +
                         "': " + what);
}

StatusOr<int64_t> CsvTable::Int(size_t row, size_t col, int64_t min, int64_t max) const {
  const std::string& s = rows_[row][col];
  if (s.empty()) return ErrorAt(row, col, "empty, expected an integer");
  int64_t v = 0;
  const char* first = s.data();
  const char* last = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(first, last, v);
  if (ec == std::errc::result_out_of_range) return ErrorAt(row, col, "'" + s + "' is too large");
  if (ec != std::errc() || ptr != last) {
    // Accept integral floats such as "1000.0" (pandas writes them), reject everything else.
    double d = 0;
    auto [dptr, dec] = std::from_chars(first, last, d);
    // Check the range before converting: casting a huge or non-finite double is undefined.
    if (dec != std::errc() || dptr != last || !std::isfinite(d) || d < -9.0e18 || d > 9.0e18 ||
        d != std::trunc(d)) {
      return ErrorAt(row, col, "'" + s + "' is not an integer");
    }
    v = static_cast<int64_t>(d);
  }
  if (v < min || v > max) {
    return ErrorAt(
        row, col,
        std::to_string(v) + " outside " + std::to_string(min) + ".." + std::to_string(max));
  }
  return v;
}

StatusOr<double> CsvTable::Double(size_t row, size_t col, double min, double max) const {
  const std::string& s = rows_[row][col];
  if (s.empty()) return ErrorAt(row, col, "empty, expected a number");
  double d = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(d)) {
    return ErrorAt(row, col, "'" + s + "' is not a number");
  }
  if (d < min || d > max) {
    return ErrorAt(row, col,
                   "'" + s + "' outside " + std::to_string(min) + ".." + std::to_string(max));
  }
  return d;
}

StatusOr<std::string> ReadWholeFile(const std::string& path) {
  // A trace is a regular file of bounded size: a FIFO would block, a directory reads as nothing
  // and /dev/zero never ends.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const std::string why = std::strerror(errno);
    struct stat st {};
    if (stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
      return InvalidArgument(path + ": a socket, expected a regular file");
    }
    return IoError("cannot open " + path + ": " + why);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return IoError("cannot read " + path + ": " + why);
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    return InvalidArgument(path + ": " + kind + ", expected a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxTraceFileBytes) {
    close(fd);
    return InvalidArgument(path + ": " + std::to_string(st.st_size) + " bytes, more than the " +
                           std::to_string(kMaxTraceFileBytes >> 30) + " GiB a trace file may be");
  }
  std::string text;
  text.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::string message = "error reading " + path;
      message.append(": ").append(std::strerror(errno));
      close(fd);
      return IoError(message);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxTraceFileBytes) {  // it grew while being read
      close(fd);
      return InvalidArgument(path + ": grew past the " + std::to_string(kMaxTraceFileBytes >> 30) +
                             " GiB a trace file may be while being read");
    }
  }
  close(fd);
  return text;
}

}  // namespace paladin::trace
