// `paladin sim fgd`: the FGD trace experiment, every policy side by side.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "paladin/core/bounds.h"
#include "paladin/core/fgd_sim.h"
#include "paladin/core/policies.h"
#include "paladin/report/fgd_report.h"
#include "paladin/trace/alibaba_csv.h"
#include "paladin/trace/csv.h"

namespace paladin::cli {

std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

StatusOr<std::vector<uint64_t>> ParseSeeds(const std::string& spec) {
  std::vector<uint64_t> seeds;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string::npos) comma = spec.size();
    const std::string part = spec.substr(start, comma - start);
    const size_t dash = part.find('-');
    try {
      size_t used = 0;
      if (dash == std::string::npos) {
        seeds.push_back(std::stoull(part, &used));
        if (used != part.size()) throw std::invalid_argument(part);
      } else {
        const uint64_t lo = std::stoull(part.substr(0, dash), &used);
        if (used != dash) throw std::invalid_argument(part);
        const uint64_t hi = std::stoull(part.substr(dash + 1), &used);
        if (used != part.size() - dash - 1) throw std::invalid_argument(part);
        if (hi < lo || hi - lo > 100000) throw std::invalid_argument(part);
        for (uint64_t k = 0; k <= hi - lo; ++k) seeds.push_back(lo + k);
      }
    } catch (const std::exception&) {
      return InvalidArgument("--seeds: '" + part +
                             "' is not a seed or an ascending range (examples: 42, 42-51, 1,5,9)");
    }
    start = comma + 1;
  }
  return seeds;
}

namespace {

struct FgdArgs {
  std::string nodes;
  std::string pods;
  std::string policies = "all";
  std::string seeds = "42-51";
  std::string out = "fgd-results";
  double ratio = 1.3;
  int jobs = 0;
  bool quiet = false;
  std::string published;  // published means to compare with; empty = none
  bool bounds = false;
  bool rebalance = false;
  int rebalance_candidates = 8;
  double defrag_every_pct = 1;
};

// The published means for `trace` (a pods file stem such as openb_pod_list_default), if any.
StatusOr<std::vector<report::PublishedMeans>> LoadPublished(const std::string& path,
                                                            const std::string& trace) {
  auto text = trace::ReadWholeFile(path);
  if (!text.ok()) return text.status();
  auto table = trace::CsvTable::Parse(*text, path);
  if (!table.ok()) return table.status();
  std::vector<size_t> cols;
  for (const char* c : {"trace", "policy", "alloc_90", "alloc_100", "alloc_110", "alloc_130"}) {
    auto col = table->Column(c);
    if (!col.ok()) return col.status();
    cols.push_back(*col);
  }
  std::vector<report::PublishedMeans> out;
  for (size_t r = 0; r < table->rows(); ++r) {
    if (table->Cell(r, cols[0]) != trace) continue;
    report::PublishedMeans m;
    m.policy = table->Cell(r, cols[1]);
    for (size_t k = 2; k < cols.size(); ++k) {
      try {
        m.alloc.push_back(std::stod(table->Cell(r, cols[k])));
      } catch (const std::exception&) {
        return table->ErrorAt(r, cols[k], "not a number");
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

StatusOr<std::vector<std::string>> ParsePolicies(const std::string& spec) {
  if (spec == "all") return core::PolicyNames();
  std::vector<std::string> out;
  for (const auto& part : SplitComma(spec)) {
    auto name = core::CanonicalPolicyName(part);
    if (!name.ok()) return InvalidArgument("--policies: " + name.status().message());
    out.push_back(*name);
  }
  return out;
}

int FgdFail(const Status& st) {
  std::fprintf(stderr, "paladin sim fgd: error: %s\n", st.message().c_str());
  return st.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int RunFgd(const FgdArgs& a) {
  auto seeds = ParseSeeds(a.seeds);
  if (!seeds.ok()) return FgdFail(seeds.status());
  auto policies = ParsePolicies(a.policies);
  if (!policies.ok()) return FgdFail(policies.status());
  if (!(a.ratio > 0 && a.ratio <= 10))
    return FgdFail(InvalidArgument("--ratio must be in (0, 10]"));

  auto fleet = trace::ReadNodeCsv(a.nodes);
  if (!fleet.ok()) return FgdFail(fleet.status());
  auto pods = trace::ReadPodCsv(a.pods, fleet->models());
  if (!pods.ok()) return FgdFail(pods.status());

  std::error_code ec;
  std::filesystem::create_directories(a.out, ec);
  if (ec) return FgdFail(IoError("cannot create --out directory " + a.out + ": " + ec.message()));

  const std::string pods_name = std::filesystem::path(a.pods).filename().string();
  const std::string nodes_name = std::filesystem::path(a.nodes).filename().string();
  const int max_pct = static_cast<int>(std::lround(a.ratio * 100));
  std::fprintf(stderr,
               "FGD trace experiment: %zu tasks from %s on %zu nodes (%lld GPUs) from %s; "
               "%zu policies x %zu seeds, arrivals to %d%% of GPU capacity\n",
               pods->size(), pods_name.c_str(), fleet->size(),
               static_cast<long long>(fleet->GpuMilliCapacity() / core::kMilliPerGpu),
               nodes_name.c_str(), policies->size(), seeds->size(), max_pct);

  struct Task {
    std::string policy;
    uint64_t seed;
    bool rebalance;
  };
  std::vector<Task> tasks;
  for (const auto& p : *policies) {
    for (uint64_t s : *seeds) tasks.push_back({p, s, false});
  }
  if (a.rebalance) {
    for (const auto& p : *policies) {
      for (uint64_t s : *seeds) tasks.push_back({p, s, true});
    }
  }
  std::vector<core::FgdRunResult> results(tasks.size());
  std::string bounds_line;
  std::vector<Status> errors(tasks.size());
  std::atomic<size_t> next{0}, done{0};
  std::mutex progress_mu;
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  const int64_t t_start = NowNs();
  core::FgdSimOptions opts;
  opts.target_ratio = a.ratio;
  opts.max_pct = max_pct;
  opts.clock_ns = NowNs;

  auto worker = [&] {
    for (size_t i = next++; i < tasks.size(); i = next++) {
      const int64_t t0 = NowNs();
      core::FgdSimOptions o = opts;
      o.rebalance = tasks[i].rebalance;
      o.rebalance_params.max_moves = 4;
      o.rebalance_params.max_candidate_nodes = a.rebalance_candidates;
      o.defrag_every_pct = a.defrag_every_pct;
      auto r = core::RunFgdSim(*fleet, *pods, tasks[i].policy, tasks[i].seed, o);
      if (r.ok()) {
        results[i] = std::move(r).value();
      } else {
        errors[i] = r.status();
      }
      const size_t d = ++done;
      if (!a.quiet) {
        std::lock_guard<std::mutex> lock(progress_mu);
        std::fprintf(stderr, "%s[%3zu/%zu] %-13s seed %-4llu %5.1f s  (elapsed %.0f s)%s",
                     tty ? "\r" : "", d, tasks.size(), tasks[i].policy.c_str(),
                     static_cast<unsigned long long>(tasks[i].seed), (NowNs() - t0) * 1e-9,
                     (NowNs() - t_start) * 1e-9, tty ? "" : "\n");
        std::fflush(stderr);
      }
    }
  };
  int jobs = a.jobs > 0 ? a.jobs : static_cast<int>(std::thread::hardware_concurrency());
  jobs = std::max(1, std::min<int>(jobs, static_cast<int>(tasks.size())));
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(jobs));
  for (int j = 0; j < jobs; ++j) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  if (!a.quiet && tty) std::fprintf(stderr, "\n");
  for (const auto& e : errors) {
    if (!e.ok()) return FgdFail(e);
  }

  if (a.bounds) {
    // Per seed: a valid upper bound on any placement, and an offline packer's result.
    std::vector<double> ub(seeds->size()), off(seeds->size());
    std::vector<Status> errs(seeds->size());
    std::atomic<size_t> nb{0};
    core::TypicalOptions all_shapes;
    all_shapes.coverage = 1.0;
    const core::PolicyContext ctx{std::make_shared<const std::vector<core::TypicalWorkload>>(
                                      core::BuildTypicalWorkloads(*pods)),
                                  std::make_shared<const std::vector<core::TypicalWorkload>>(
                                      core::BuildTypicalWorkloads(*pods, all_shapes))};
    auto bound_worker = [&] {
      for (size_t i = nb++; i < seeds->size(); i = nb++) {
        const auto arrivals =
            core::BuildFgdArrivals(*pods, fleet->GpuMilliCapacity(), a.ratio, (*seeds)[i]);
        ub[i] = core::ResourceUpperBoundPct(*fleet, arrivals);
        auto o = core::OfflineSortedAllocPct(*fleet, arrivals, "paladin", ctx);
        if (o.ok()) {
          off[i] = *o;
        } else {
          errs[i] = o.status();
        }
      }
    };
    std::vector<std::thread> bpool;
    bpool.reserve(static_cast<size_t>(jobs));
    for (int j = 0; j < jobs; ++j) bpool.emplace_back(bound_worker);
    for (auto& t : bpool) t.join();
    for (const auto& e : errs) {
      if (!e.ok()) return FgdFail(e);
    }
    std::string csv = "seed,upper_bound_pct,offline_sorted_paladin_pct\n";
    double ub_sum = 0, off_sum = 0;
    for (size_t i = 0; i < seeds->size(); ++i) {
      char line[128];
      std::snprintf(line, sizeof line, "%llu,%.4f,%.4f\n",
                    static_cast<unsigned long long>((*seeds)[i]), ub[i], off[i]);
      csv += line;
      ub_sum += ub[i];
      off_sum += off[i];
    }
    Status st = report::WriteFile(a.out + "/bounds.csv", csv);
    if (!st.ok()) return FgdFail(st);
    char msg[256];
    std::snprintf(msg, sizeof msg,
                  "Room above (mean of %zu seeds, allocation at the end of the stream): no "
                  "placement can exceed %.2f%%; offline, largest tasks first with paladin: "
                  "%.2f%% (bounds.csv).\n",
                  seeds->size(), ub_sum / static_cast<double>(seeds->size()),
                  off_sum / static_cast<double>(seeds->size()));
    bounds_line = msg;
  }

  const auto rows = report::Summarize(results);
  const std::string dir = a.out + "/";
  const std::string title = "GPU allocation vs arrived load: " + pods_name + ", seeds " + a.seeds;
  for (auto [file, content] :
       {std::pair{"allocation.csv", report::AllocationCsv(results)},
        std::pair{"fragmentation.csv", report::FragmentationCsv(results)},
        std::pair{"summary.csv", report::SummaryCsv(rows)},
        std::pair{"allocation.svg", report::AllocationSvg(results, title)}}) {
    Status st = report::WriteFile(dir + file, content);
    if (!st.ok()) return FgdFail(st);
  }
  std::printf("%s", report::SummaryTable(rows, true).c_str());
  const std::string trace_name = std::filesystem::path(a.pods).stem().string();
  if (!a.published.empty()) {
    auto published = LoadPublished(a.published, trace_name);
    if (!published.ok()) return FgdFail(published.status());
    const std::string cmp = report::PublishedComparison(rows, *published);
    if (!cmp.empty()) std::printf("\n%s", cmp.c_str());
  }
  bool has_paladin = false, has_fgd = false;
  for (const auto& p : *policies) {
    has_paladin = has_paladin || p == "paladin";
    has_fgd = has_fgd || p == "FGD";
  }
  if (!bounds_line.empty()) std::printf("\n%s", bounds_line.c_str());
  if (a.rebalance) {
    // What the moves bought, paired by seed, and how many moves it took.
    std::string csv = "policy,seeds,alloc_130_gain,alloc_130_gain_ci95,moves_mean,admitted_mean\n";
    std::printf("\nrebalancer (moves placed tasks to admit one that fits nowhere), at 130%%:\n");
    for (const auto& p : *policies) {
      const auto g = report::Paired(results, p + "+rebalance", p, 130);
      double moves = 0, admitted = 0;
      int n = 0;
      for (const auto& r : results) {
        if (r.policy != p + "+rebalance") continue;
        moves += static_cast<double>(r.moves), admitted += static_cast<double>(r.rebalanced), ++n;
      }
      if (n == 0) continue;
      std::printf(
          "  %-13s allocation %+.2f points (95%% CI +-%.2f, %d seeds), %.0f moves to admit %.0f "
          "tasks per run\n",
          p.c_str(), g.mean, g.ci95, g.seeds, moves / n, admitted / n);
      char line[200];
      std::snprintf(line, sizeof line, "%s,%d,%.4f,%.4f,%.1f,%.1f\n", p.c_str(), g.seeds, g.mean,
                    g.ci95, moves / n, admitted / n);
      csv += line;
    }
    Status st = report::WriteFile(dir + "rebalance.csv", csv);
    if (!st.ok()) return FgdFail(st);
  }
  if (has_paladin && has_fgd) {
    std::printf("\npaladin - FGD, paired by seed (both see the same arrivals):\n");
    std::string csv = "policy,baseline,arrived_pct,mean_gap,ci95,min_gap,seeds\n";
    for (int pct : report::kSummaryPoints) {
      const auto g = report::Paired(results, "paladin", "FGD", pct);
      char line[160];
      std::snprintf(line, sizeof line, "paladin,FGD,%d,%.4f,%.4f,%.4f,%d\n", pct, g.mean, g.ci95,
                    g.min, g.seeds);
      csv += line;
    }
    Status st = report::WriteFile(dir + "paired.csv", csv);
    if (!st.ok()) return FgdFail(st);
    for (int pct : {100, 130}) {
      const auto g = report::Paired(results, "paladin", "FGD", pct);
      std::printf("  at %3d%% arrived: %+.2f points (95%% CI +/- %.2f, smallest %+.2f, %d seeds)\n",
                  pct, g.mean, g.ci95, g.min, g.seeds);
    }
  }
  std::printf(
      "\nGPU allocation in %% of capacity at x%% arrived GPU request (mean of %zu seeds); "
      "frag = %% of idle GPU capacity the typical tasks cannot use.\n"
      "Wrote %sallocation.csv, fragmentation.csv, summary.csv, allocation.svg "
      "(%.1f s in all).\n",
      seeds->size(), dir.c_str(), (NowNs() - t_start) * 1e-9);
  return 0;
}

}  // namespace

void RegisterSim(CLI::App& app, int* exit_code) {
  CLI::App* sim = app.add_subcommand("sim", "Evaluate placement policies on traces");
  sim->require_subcommand(1);
  auto args = std::make_shared<FgdArgs>();
  const std::string data = BundledDataDir() + "/alibaba-gpu-2023/";
  args->nodes = data + "openb_node_list_gpu_node.csv";
  args->pods = data + "openb_pod_list_default.csv";
  args->published = BundledDataDir() + "/fgd-published/alloc_means.csv";
  CLI::App* fgd = sim->add_subcommand(
      "fgd",
      "The FGD paper's protocol: a static cluster, tasks arrive in random order until their GPU "
      "request reaches --ratio x capacity, none departs; reports GPU allocation per policy.");
  fgd->add_option("--nodes", args->nodes, "Node list CSV (sn,cpu_milli,memory_mib,gpu,model)")
      ->capture_default_str();
  fgd->add_option("--pods", args->pods,
                  "Pod list CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...])")
      ->capture_default_str();
  fgd->add_option("--policies", args->policies,
                  "Comma-separated policies, or 'all' (Random,DotProduct,GpuClustering,"
                  "GpuPacking,BestFit,FGD,paladin)")
      ->capture_default_str();
  fgd->add_option("--seeds", args->seeds, "Seeds: 42, 42-51 or 1,5,9")->capture_default_str();
  fgd->add_option("--out", args->out, "Output directory")->capture_default_str();
  fgd->add_option("--ratio", args->ratio, "Arrived GPU request at the end, x capacity")
      ->capture_default_str();
  fgd->add_option("--jobs", args->jobs, "Parallel runs (default: all cores)");
  fgd->add_option("--published", args->published,
                  "Published means to print beside ours for a known trace ('' = none)")
      ->capture_default_str();
  fgd->add_flag("--quiet", args->quiet, "No progress lines");
  fgd->add_flag("--bounds", args->bounds,
                "Also compute, per seed, an upper bound for any placement and an offline "
                "packer's allocation (bounds.csv)");
  fgd->add_flag("--rebalance", args->rebalance,
                "Also run each policy with the rebalancer: a task that fits nowhere may move up "
                "to four placed tasks to make room, and every --defrag-every points of load shared "
                "tasks move where that lowers fragmentation (reported as POLICY+rebalance)");
  fgd->add_option("--defrag-every", args->defrag_every_pct,
                  "With --rebalance: every this many points of arrived load, move shared tasks "
                  "where that lowers fragmentation (0 = never)")
      ->capture_default_str();
  fgd->add_option("--rebalance-candidates", args->rebalance_candidates,
                  "Nodes the rebalancer tries per task that fits nowhere")
      ->capture_default_str();
  fgd->callback([args, exit_code] { *exit_code = RunFgd(*args); });
  AddSimDynamic(sim, exit_code);
}

}  // namespace paladin::cli
