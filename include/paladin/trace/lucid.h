// Reader for the Lucid (ASPLOS'23) profiles of DL training jobs: single_data.csv (one row per
// job configuration, alone on a GPU) and colocate_info.csv (measured pairs sharing one GPU, each
// job's speed normalised to its speed alone). The dataset is licensed for non-commercial use
// only: Paladin does not ship it; it is read from a path the user gives.
#pragma once

#include <string>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/core/dynamic_sim.h"

namespace paladin::trace {

struct LucidProfiles {
  std::vector<std::string> names;  // "model/dataset/batch/amp", one per profile
  core::Interference interference;
  int pairs = 0;  // measured pairs read
};

StatusOr<LucidProfiles> ReadLucidProfiles(const std::string& dir);

}  // namespace paladin::trace
