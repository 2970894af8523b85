// Files and tables produced by `paladin sim fgd`. All output is a pure function of the results:
// the same results give byte-identical files.
#pragma once

#include <string>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/core/fgd_sim.h"

namespace paladin::report {

struct SummaryRow {
  std::string policy;
  int seeds = 0;
  // Mean over seeds and the half-width of its 95% confidence interval (Student t), at each point.
  std::vector<int> points;  // arrived %
  std::vector<double> alloc_mean, alloc_ci95;
  std::vector<double> frag_mean;
  double decisions_per_s = 0;  // over all runs of the policy, when timed
  double p99_decision_us = 0;
};

inline const std::vector<int> kSummaryPoints = {90, 100, 110, 130};

// Results must be grouped by policy (in the order to report) with seeds in any order.
std::vector<SummaryRow> Summarize(const std::vector<core::FgdRunResult>& runs,
                                  const std::vector<int>& points = kSummaryPoints);

// allocation.csv: policy,seed,arrived_pct,alloc_pct
std::string AllocationCsv(const std::vector<core::FgdRunResult>& runs);
// fragmentation.csv: policy,seed,arrived_pct,frag_ratio_pct
std::string FragmentationCsv(const std::vector<core::FgdRunResult>& runs);
// summary.csv: policy,seeds,alloc_90,alloc_90_ci95,...,frag_130
std::string SummaryCsv(const std::vector<SummaryRow>& rows);
// Mean allocation against arrived load, one line per policy.
std::string AllocationSvg(const std::vector<core::FgdRunResult>& runs, const std::string& title);
// The table printed at the end of a run.
std::string SummaryTable(const std::vector<SummaryRow>& rows, bool with_timing);

// The per-seed difference `policy - baseline` at arrived load `pct`, paired on seeds (both
// policies see the same arrival stream for a seed): mean, 95% CI half-width, smallest, count.
struct PairedGap {
  double mean = 0, ci95 = 0, min = 0;
  int seeds = 0;
};
PairedGap Paired(const std::vector<core::FgdRunResult>& runs, const std::string& policy,
                 const std::string& baseline, int pct);

// Published means of one trace: policy -> value at 90/100/110/130 (NaN where unknown).
struct PublishedMeans {
  std::string policy;
  std::vector<double> alloc;  // aligned with kSummaryPoints
};
// Our means beside the published ones, and the difference, for the policies that have both.
std::string PublishedComparison(const std::vector<SummaryRow>& rows,
                                const std::vector<PublishedMeans>& published);

Status WriteFile(const std::string& path, const std::string& content);

}  // namespace paladin::report
