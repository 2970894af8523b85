// What a move costs the job moved, learned from the moves this fleet has made.
//
// MigrationCost (rebalance.h) is a prior: rates measured once on one machine. A fleet's real moves
// differ by node pair (the link, the disks, the CRIU build, post-copy or not), so the server feeds
// every finished move's measured pause here, and the rebalancer asks here what the next one will
// cost. Per node pair, the estimate is the prior rescaled by what that pair's recent moves took:
//
//   few sizes seen   pause ≈ prior(bytes) × median over recent moves of (pause / prior(their
//   bytes)) sizes spread     pause ≈ a + b × prior_variable(bytes), least squares over recent
//   moves, a, b ≥ 0
//                    (a: the pair's fixed cost; b: how much faster or slower its rates are)
//
// A pair with no moves yet borrows from the source node's moves to any destination, then from
// the whole fleet's, then falls back to the prior. Pure: no clock, no I/O; deterministic. Not
// thread-safe (the server calls it under its lock).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>

#include "paladin/core/rebalance.h"

namespace paladin::core {

struct MoveObservation {
  double gpu_bytes = 0;   // GPU memory the job held
  double host_bytes = 0;  // host memory (image bytes) it held
  double pause_s = 0;     // measured: stopped at the source until running at the destination
};

// Where an estimate came from, for `paladin explain` and events.
enum class EstimateBasis { kPrior, kFleet, kSourceNode, kPair };
const char* EstimateBasisName(EstimateBasis basis);

struct PauseEstimate {
  double pause_s = 0;
  EstimateBasis basis = EstimateBasis::kPrior;
  int moves = 0;  // how many measured moves it rests on
};

class MoveCostModel {
 public:
  explicit MoveCostModel(MigrationCost prior = {}, int keep = 16) : prior_(prior), keep_(keep) {}

  // A finished move's measurement. Non-finite or negative values are ignored (a report from a
  // node is not trusted to be sane).
  void Observe(const std::string& from, const std::string& to, const MoveObservation& o);

  // The pause a move of a job of this size from `from` to `to` should take. `to` may be empty
  // (destination not chosen yet): the source node's moves, then the fleet's, then the prior.
  PauseEstimate Estimate(const std::string& from, const std::string& to, double gpu_bytes,
                         double host_bytes) const;

  const MigrationCost& prior() const { return prior_; }

 private:
  using Window = std::deque<MoveObservation>;
  double FromWindow(const Window& w, double gpu_bytes, double host_bytes) const;
  void Add(Window* w, const MoveObservation& o) const;

  MigrationCost prior_;
  int keep_;
  std::map<std::pair<std::string, std::string>, Window> pairs_;
  std::map<std::string, Window> sources_;
  Window fleet_;
};

}  // namespace paladin::core
