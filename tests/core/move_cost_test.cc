#include "paladin/core/move_cost.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "paladin/core/rng.h"

namespace paladin::core {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

// A node pair whose moves take fixed_s plus GPU bytes at gpu_gbps (both ways, as the prior's
// shape has it) and host bytes at host_gbps, with ±noise (uniform) on each measurement.
struct Link {
  double fixed_s;
  double gpu_gbps;
  double host_gbps;
  double noise;
  double Pause(double gpu, double host, Rng& rng) const {
    const double exact = fixed_s + 2 * gpu / (gpu_gbps * 1e9) + 2 * host / (host_gbps * 1e9);
    return exact * (1 + noise * (2 * rng.UniformDouble() - 1));
  }
  double Exact(double gpu, double host) const {
    return fixed_s + 2 * gpu / (gpu_gbps * 1e9) + 2 * host / (host_gbps * 1e9);
  }
};

TEST(MoveCostModelTest, WithoutMovesTheEstimateIsThePrior) {
  MoveCostModel model;
  const PauseEstimate e = model.Estimate("a", "b", 4 * kGiB, 1 * kGiB);
  EXPECT_EQ(e.basis, EstimateBasis::kPrior);
  EXPECT_EQ(e.moves, 0);
  EXPECT_DOUBLE_EQ(e.pause_s, MigrationCost{}.DowntimeS(4 * kGiB, 1 * kGiB));
}

// The aim: after a few moves of mixed sizes over a pair, the estimate of the pair's next
// move is within 25% of what it measures, for links far from the prior's rates either way.
TEST(MoveCostModelTest, AfterAFewMovesTheNextPauseIsWithin25Percent) {
  const Link links[] = {{0.4, 0.5, 0.3, 0.10},           // slow link, small fixed cost
                        {3.0, 4.0, 2.0, 0.10},           // fast rates, large fixed cost
                        {1.0, 1.6, 1.6, 0.05}};          // near the prior
  const double sizes[] = {0.25, 2, 8, 1, 4, 0.5, 6, 3};  // GiB of GPU memory; host = half
  for (const Link& link : links) {
    Rng rng(7);
    MoveCostModel model;
    int within = 0;
    int tried = 0;
    for (int i = 0; i < 8; ++i) {
      const double gpu = sizes[i] * kGiB;
      const double host = gpu / 2;
      const double measured = link.Pause(gpu, host, rng);
      if (i >= 3) {  // "after a few moves"
        const PauseEstimate e = model.Estimate("a", "b", gpu, host);
        EXPECT_EQ(e.basis, EstimateBasis::kPair);
        ++tried;
        if (std::abs(e.pause_s - measured) <= 0.25 * measured) ++within;
        EXPECT_NEAR(e.pause_s, measured, 0.25 * measured)
            << "move " << i << " of " << sizes[i] << " GiB, link fixed " << link.fixed_s;
      }
      model.Observe("a", "b", {gpu, host, measured});
    }
    EXPECT_EQ(within, tried);
  }
}

// Moves of one size only: the prior's shape is rescaled by the measured ratio, which is exact for
// that size.
TEST(MoveCostModelTest, OneSizeRescalesThePrior) {
  MoveCostModel model;
  for (int i = 0; i < 4; ++i) model.Observe("a", "b", {2 * kGiB, 0, 1.5});
  EXPECT_NEAR(model.Estimate("a", "b", 2 * kGiB, 0).pause_s, 1.5, 1e-9);
  const double prior_ratio = 1.5 / MigrationCost{}.DowntimeS(2 * kGiB, 0);
  EXPECT_NEAR(model.Estimate("a", "b", 4 * kGiB, 0).pause_s,
              prior_ratio * MigrationCost{}.DowntimeS(4 * kGiB, 0), 1e-9);
}

TEST(MoveCostModelTest, PairsDifferAndUnknownPairsBorrow) {
  MoveCostModel model;
  Rng rng(3);
  const Link fast{0.5, 8, 8, 0}, slow{2, 0.4, 0.4, 0};
  for (double g : {1.0, 4.0, 2.0, 8.0}) {
    model.Observe("a", "b", {g * kGiB, 0, fast.Pause(g * kGiB, 0, rng)});
    model.Observe("c", "b", {g * kGiB, 0, slow.Pause(g * kGiB, 0, rng)});
  }
  const PauseEstimate ab = model.Estimate("a", "b", 3 * kGiB, 0);
  const PauseEstimate cb = model.Estimate("c", "b", 3 * kGiB, 0);
  EXPECT_NEAR(ab.pause_s, fast.Exact(3 * kGiB, 0), 0.01);
  EXPECT_NEAR(cb.pause_s, slow.Exact(3 * kGiB, 0), 0.01);
  // a to an unseen destination: a's own moves.
  const PauseEstimate ad = model.Estimate("a", "d", 3 * kGiB, 0);
  EXPECT_EQ(ad.basis, EstimateBasis::kSourceNode);
  EXPECT_NEAR(ad.pause_s, ab.pause_s, 1e-9);
  // No destination chosen yet: the same.
  EXPECT_EQ(model.Estimate("a", "", 3 * kGiB, 0).basis, EstimateBasis::kSourceNode);
  // An unseen source: the fleet's moves (both links), between the two.
  const PauseEstimate dx = model.Estimate("d", "b", 3 * kGiB, 0);
  EXPECT_EQ(dx.basis, EstimateBasis::kFleet);
  EXPECT_EQ(dx.moves, 8);
  EXPECT_GT(dx.pause_s, ab.pause_s);
  EXPECT_LT(dx.pause_s, cb.pause_s);
}

// A node's report is not trusted to be sane: nothing non-finite, negative or zero is learned.
TEST(MoveCostModelTest, InsaneObservationsAreIgnored) {
  MoveCostModel model;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (MoveObservation o :
       {MoveObservation{nan, 0, 1}, MoveObservation{1, -1, 1}, MoveObservation{1, 0, inf},
        MoveObservation{1, 0, -3}, MoveObservation{1, 0, 0}, MoveObservation{inf, 0, 2}}) {
    model.Observe("a", "b", o);
  }
  const PauseEstimate e = model.Estimate("a", "b", kGiB, 0);
  EXPECT_EQ(e.basis, EstimateBasis::kPrior);
  // Hostile sizes asked about give the prior of nothing, not a NaN.
  model.Observe("a", "b", {kGiB, 0, 2});
  EXPECT_TRUE(std::isfinite(model.Estimate("a", "b", nan, -5).pause_s));
}

// Only the recent moves count: a link that got faster is learned within `keep` moves.
TEST(MoveCostModelTest, OldMovesAreForgotten) {
  MoveCostModel model(MigrationCost{}, 4);
  for (int i = 0; i < 10; ++i) model.Observe("a", "b", {kGiB, 0, 10});
  for (int i = 0; i < 4; ++i) model.Observe("a", "b", {kGiB, 0, 1});
  EXPECT_NEAR(model.Estimate("a", "b", kGiB, 0).pause_s, 1, 1e-9);
  EXPECT_EQ(model.Estimate("a", "b", kGiB, 0).moves, 4);
}

}  // namespace
}  // namespace paladin::core
