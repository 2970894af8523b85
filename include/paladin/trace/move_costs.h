// Measured moves in a file: what a fleet's moves took (`paladin move-costs` writes it from the
// server), for the dynamic simulation to cost its own moves by (`paladin sim dynamic
// --move-costs`). CSV with the header `from,to,gpu_bytes,host_bytes,pause_s`, one finished move
// a row, oldest first (docs/formats/move_costs.md).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/core/move_cost.h"

namespace paladin::trace {

struct MeasuredMove {
  std::string from, to;  // node names
  core::MoveObservation observed;
};

// Parses `text` (named `source` in errors): every row's bytes finite and at least 0, its pause
// above 0 and under a week; an error names the line and the field.
StatusOr<std::vector<MeasuredMove>> ParseMoveCosts(const std::string& text,
                                                   const std::string& source);
StatusOr<std::vector<MeasuredMove>> ReadMoveCosts(const std::string& path);
// The CSV ParseMoveCosts reads, header first.
std::string MoveCostsCsv(std::span<const MeasuredMove> moves);

}  // namespace paladin::trace
