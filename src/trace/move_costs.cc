#include "paladin/trace/move_costs.h"

#include <cstdio>

#include "paladin/trace/csv.h"

namespace paladin::trace {
namespace {

// A field as RFC 4180 has it: quoted, its quotes doubled, when it holds a comma, a quote or a
// line break (node names do not, but the file must read back whatever it was given).
std::string Field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

StatusOr<std::vector<MeasuredMove>> ParseMoveCosts(const std::string& text,
                                                   const std::string& source) {
  StatusOr<CsvTable> t = CsvTable::Parse(text, source);
  if (!t.ok()) return t.status();
  std::vector<size_t> col;
  for (const char* name : {"from", "to", "gpu_bytes", "host_bytes", "pause_s"}) {
    StatusOr<size_t> c = t->Column(name);
    if (!c.ok()) return c.status();
    col.push_back(*c);
  }
  constexpr double kWeekS = 7 * 24 * 3600.0;
  std::vector<MeasuredMove> out;
  out.reserve(t->rows());
  for (size_t r = 0; r < t->rows(); ++r) {
    MeasuredMove m;
    m.from = t->Cell(r, col[0]);
    m.to = t->Cell(r, col[1]);
    if (m.from.empty()) return t->ErrorAt(r, col[0], "empty node name");
    if (m.to.empty()) return t->ErrorAt(r, col[1], "empty node name");
    StatusOr<double> gpu = t->Double(r, col[2], 0, 1e18);
    if (!gpu.ok()) return gpu.status();
    StatusOr<double> host = t->Double(r, col[3], 0, 1e18);
    if (!host.ok()) return host.status();
    StatusOr<double> pause = t->Double(r, col[4], 0, kWeekS);
    if (!pause.ok()) return pause.status();
    if (*pause <= 0) return t->ErrorAt(r, col[4], "a measured pause is above 0 s");
    m.observed = {*gpu, *host, *pause};
    out.push_back(std::move(m));
  }
  return out;
}

StatusOr<std::vector<MeasuredMove>> ReadMoveCosts(const std::string& path) {
  StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  return ParseMoveCosts(*text, path);
}

std::string MoveCostsCsv(std::span<const MeasuredMove> moves) {
  std::string out = "from,to,gpu_bytes,host_bytes,pause_s\n";
  char line[128];
  for (const MeasuredMove& m : moves) {
    // %.9g: a pause of any size the server keeps (above 0) reads back above 0.
    std::snprintf(line, sizeof line, ",%.0f,%.0f,%.9g\n", m.observed.gpu_bytes,
                  m.observed.host_bytes, m.observed.pause_s);
    out += Field(m.from) + "," + Field(m.to) + line;
  }
  return out;
}

}  // namespace paladin::trace
