// A small CSV reader for trace files: header-named columns, RFC 4180 quotes, CRLF tolerated.
// Errors name the source, the 1-based line and the column.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "paladin/base/status.h"

namespace paladin::trace {

class CsvTable {
 public:
  // Parses all of `text`; fails on unbalanced quotes or a row whose field count differs from
  // the header's.
  static StatusOr<CsvTable> Parse(const std::string& text, const std::string& source);

  // Index of a named column, or an error naming the missing column and the ones present.
  StatusOr<size_t> Column(std::string_view name) const;
  bool HasColumn(std::string_view name) const { return index_.count(std::string(name)) != 0; }

  size_t rows() const { return rows_.size(); }
  const std::string& Cell(size_t row, size_t col) const { return rows_[row][col]; }
  int LineOf(size_t row) const { return lines_[row]; }
  const std::string& source() const { return source_; }

  // The cell as an integer in [min, max]; errors say "file:line: field 'name': ...".
  StatusOr<int64_t> Int(size_t row, size_t col, int64_t min, int64_t max) const;
  // The cell as a finite number in [min, max].
  StatusOr<double> Double(size_t row, size_t col, double min, double max) const;
  Status ErrorAt(size_t row, size_t col, const std::string& what) const;

 private:
  std::string source_;
  std::vector<std::string> header_;
  std::unordered_map<std::string, size_t> index_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<int> lines_;
};

// The whole of a regular file of at most kMaxTraceFileBytes; a directory, FIFO, device or socket
// is an error naming what it is, and is never read.
inline constexpr uint64_t kMaxTraceFileBytes = uint64_t{4} << 30;
StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace paladin::trace
