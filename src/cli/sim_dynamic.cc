// `paladin sim dynamic`: jobs arrive and leave at their trace times, follow real usage curves,
// and five sizing + packing (+ rebalancing) configurations run side by side.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "paladin/core/dynamic_sim.h"
#include "paladin/core/predict_eval.h"
#include "paladin/report/chart.h"
#include "paladin/report/fgd_report.h"
#include "paladin/report/format.h"
#include "paladin/trace/alibaba_csv.h"
#include "paladin/trace/genai_usage.h"
#include "paladin/trace/lucid.h"
#include "paladin/trace/move_costs.h"

namespace paladin::cli {
namespace {

struct DynArgs {
  std::string nodes, pods, usage, lucid;
  std::string move_costs;  // a fleet's measured moves (paladin move-costs), for the moves' cost
  std::string times_from;  // a pod list with times, for variants without them
  std::string loads = "1.0,1.5";
  std::string seeds = "42-44";
  std::string configs = "all";
  std::string out = "dynamic-results";
  int fleet_gpus = 0;  // 0: auto
  int jobs = 0;
  // Out of sample: a job replaying a pod of fold f is sized by paladin's class models trained
  // without fold f (folds by pod, as `predict eval --folds` splits them; 0: one model learns
  // online from every job).
  int folds = 5;
  uint64_t fold_seed = 1;
  bool quiet = false;
  core::DynamicParams params;
};

int DynamicFail(const Status& st) {
  std::fprintf(stderr, "paladin sim dynamic: error: %s\n", st.message().c_str());
  return st.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

StatusOr<std::vector<double>> ParseLoads(const std::string& spec) {
  std::vector<double> out;
  for (const auto& part : SplitComma(spec)) {
    try {
      size_t used = 0;
      const double v = std::stod(part, &used);
      if (used != part.size() || !(v >= 0.5 && v <= 2.0)) throw std::invalid_argument(part);
      out.push_back(v);
    } catch (const std::exception&) {
      return InvalidArgument("--loads: '" + part +
                             "' is not a load between 0.5 and 2 (example: 1.0,1.5)");
    }
  }
  if (out.empty()) return InvalidArgument("--loads is empty");
  return out;
}

StatusOr<std::vector<core::DynamicConfig>> ParseConfigs(const std::string& spec) {
  const auto all = core::DefaultDynamicConfigs();
  if (spec == "all") return all;
  std::vector<core::DynamicConfig> out;
  for (const auto& part : SplitComma(spec)) {
    auto it = std::find_if(all.begin(), all.end(), [&](const auto& c) { return c.name == part; });
    if (it == all.end()) {
      std::string valid;
      for (const auto& c : all) valid += (valid.empty() ? "" : ", ") + c.name;
      std::string msg = "--configs: unknown '";
      msg += part;
      msg += "' (valid: ";
      msg += valid;
      msg += ")";
      return InvalidArgument(msg);
    }
    out.push_back(*it);
  }
  return out;
}

// The GenAI series joined per pod on the minute grid: pods present in all three files.
StatusOr<std::vector<core::UsageCurve>> LoadCurves(const std::string& dir) {
  using trace::GenAiMetric;
  std::map<std::string, std::vector<core::UsageSample>> by[3];
  const GenAiMetric metrics[3] = {GenAiMetric::kGpuMemBytes, GenAiMetric::kGpuDutyPct,
                                  GenAiMetric::kHostMemShare};
  int64_t t0 = INT64_MAX, t1 = 0;
  for (int m = 0; m < 3; ++m) {
    auto series = trace::ReadGenAiUsage(dir, metrics[m]);
    if (!series.ok()) return series.status();
    for (auto& s : *series) {
      if (s.samples.empty()) continue;
      t0 = std::min(t0, s.samples.front().t_s);
      t1 = std::max(t1, s.samples.back().t_s);
      by[m][s.id] = std::move(s.samples);
    }
  }
  constexpr int64_t kStep = 60;
  const auto n = static_cast<size_t>((t1 - t0) / kStep + 1);
  const double gpu_bytes = 48.0 * (int64_t{1} << 30);
  std::vector<core::UsageCurve> curves;
  for (const auto& [pod, gpu] : by[0]) {
    auto duty = by[1].find(pod);
    auto host = by[2].find(pod);
    if (duty == by[1].end() || host == by[2].end()) continue;
    core::UsageCurve c;
    c.id = pod;
    c.step_s = kStep;
    const auto fill = [&](const std::vector<core::UsageSample>& src, double scale, double cap,
                          std::vector<float>* dst) {
      dst->assign(n, 0.0F);
      size_t k = 0;
      double last = src.empty() ? 0 : src.front().value;
      for (size_t i = 0; i < n; ++i) {
        const int64_t t = t0 + static_cast<int64_t>(i) * kStep;
        while (k < src.size() && src[k].t_s <= t + kStep / 2) last = src[k++].value;
        (*dst)[i] = static_cast<float>(std::min(cap, last * scale));
      }
    };
    fill(gpu, 1 / gpu_bytes, 1.0, &c.gpu_mem);
    fill(duty->second, 0.01, 1.0, &c.gpu_busy);
    fill(host->second, 1.0, 1.0, &c.host_mem);
    curves.push_back(std::move(c));
  }
  if (curves.empty()) return InvalidArgument(dir + ": no pod appears in all three usage files");
  return curves;
}

// Out of sample: each curve's fold, and per fold paladin's class models trained on the usage
// series (every pod of the files, as `predict eval` reads them) of the other folds only.
struct FoldModels {
  std::vector<int32_t> curve_fold;
  std::vector<std::shared_ptr<const core::PaladinClassModel>> gpu, host;
};
StatusOr<FoldModels> TrainFolds(const std::string& dir, std::span<const core::UsageCurve> curves,
                                int folds, uint64_t seed) {
  FoldModels out;
  for (const auto& c : curves) out.curve_fold.push_back(core::FoldOf(c.id, folds, seed));
  // The specs `predict eval` scores with; what a model learns is scale-free, so the simulation's
  // shares of a job's own request read it alike.
  const double gib = 1024.0 * 1024 * 1024;
  const core::ResourceSpec gpu_spec{48 * gib, 3600, 1}, host_spec{1.0, 3600, gib};
  const core::PaladinPredictorParams params;
  for (const auto metric : {trace::GenAiMetric::kGpuMemBytes, trace::GenAiMetric::kHostMemShare}) {
    auto series = trace::ReadGenAiUsage(dir, metric);
    if (!series.ok()) return series.status();
    const bool gpu = metric == trace::GenAiMetric::kGpuMemBytes;
    (gpu ? out.gpu : out.host) =
        core::TrainFoldModels(*series, gpu ? gpu_spec : host_spec, params, folds, seed);
  }
  return out;
}

// Every k-th node so that the GPUs reach `gpus`; keeps the node list's mix of models.
core::Fleet SampleFleet(const core::Fleet& full, int gpus) {
  core::Fleet out;
  int64_t total = 0;
  for (const auto& n : full.nodes()) total += n.gpu_count();
  const int64_t stride = std::max<int64_t>(1, total / std::max(1, gpus));
  for (size_t i = 0; i < full.models().size(); ++i) {
    auto id = out.models().Intern(full.models().Name(static_cast<core::ModelId>(i)));
    out.models().SetMemoryMib(*id, full.models().MemoryMib(static_cast<core::ModelId>(i)));
  }
  int have = 0;
  int64_t seen = 0;
  for (const auto& n : full.nodes()) {
    if (n.gpu_count() == 0) continue;
    if (seen >= static_cast<int64_t>(have) * stride && have < gpus) {
      auto model = out.models().Find(full.models().Name(n.model));
      (void)out.AddNode(n.name, n.cpu_milli, n.mem_mib, n.gpu_count(), *model);
      have += n.gpu_count();
    }
    seen += n.gpu_count();
  }
  return out;
}

std::string DynamicNum(double v, int digits) { return report::Fixed(v, digits); }

int RunDynamic(DynArgs a) {
  auto loads = ParseLoads(a.loads);
  if (!loads.ok()) return DynamicFail(loads.status());
  auto seeds = ParseSeeds(a.seeds);
  if (!seeds.ok()) return DynamicFail(seeds.status());
  auto configs = ParseConfigs(a.configs);
  if (!configs.ok()) return DynamicFail(configs.status());
  if (a.params.tick_s <= 0 || a.params.tick_s > 3600) {
    return DynamicFail(InvalidArgument("--tick must be in 1..3600 seconds"));
  }
  if (a.folds < 0 || a.folds == 1 || a.folds > 100) {
    return DynamicFail(
        InvalidArgument("--folds must be 0 (one model learning online) or 2 to 100, not " +
                        std::to_string(a.folds)));
  }

  core::DynamicParams params = a.params;
  std::string costs_note = "MigrationCost's rates";
  if (!a.move_costs.empty()) {
    auto measured = trace::ReadMoveCosts(a.move_costs);
    if (!measured.ok()) return DynamicFail(measured.status());
    if (measured->empty()) {
      return DynamicFail(InvalidArgument("--move-costs " + a.move_costs + ": no moves in it"));
    }
    auto model = std::make_shared<core::MoveCostModel>(params.migration);
    for (const auto& m : *measured) model->Observe(m.from, m.to, m.observed);
    params.measured_costs = std::move(model);
    costs_note = std::to_string(measured->size()) + " measured moves (" + a.move_costs + ")";
  }

  auto full = trace::ReadNodeCsv(a.nodes);
  if (!full.ok()) return DynamicFail(full.status());
  auto pods = trace::ReadPodCsv(a.pods, full->models());
  if (!pods.ok()) return DynamicFail(pods.status());
  auto times = trace::ReadPodTimes(a.pods);
  if (!times.ok()) return DynamicFail(times.status());
  std::string times_note;
  if (times->empty()) {
    // Variants without times: each pod takes the arrival and run time of a pod of the default
    // trace, drawn uniformly (seeded by the pod's index).
    auto from = trace::ReadPodTimes(a.times_from);
    if (!from.ok()) return DynamicFail(from.status());
    if (from->empty()) return DynamicFail(InvalidArgument(a.times_from + ": has no time columns"));
    core::Rng rng(7);
    for (size_t i = 0; i < pods->size(); ++i) {
      times->push_back((*from)[rng.Uniform(from->size())]);
    }
    times_note = " (times drawn from " + a.times_from + ")";
  }
  std::vector<core::TraceJob> trace_jobs;
  int64_t never_scheduled = 0, zero_length = 0;
  for (size_t i = 0; i < pods->size(); ++i) {
    const auto& t = (*times)[i];
    if (t.scheduled_s < 0) {
      ++never_scheduled;
      continue;
    }
    const int64_t end = t.deletion_s >= 0 ? t.deletion_s : t.scheduled_s;
    const int64_t duration = end - t.scheduled_s;
    if (duration <= 0) {
      ++zero_length;
      continue;
    }
    trace_jobs.push_back({(*pods)[i], t.creation_s, duration});
  }
  if (trace_jobs.empty()) return DynamicFail(InvalidArgument(a.pods + ": no pod with a run time"));

  // The fleet: sized by default for the trace's mean concurrent GPU request over its busy
  // period (from the arrival at the 1st percentile to the last arrival).
  int gpus = a.fleet_gpus;
  if (gpus <= 0) {
    std::vector<int64_t> arrivals;
    arrivals.reserve(trace_jobs.size());
    for (const auto& j : trace_jobs) arrivals.push_back(j.arrival_s);
    std::sort(arrivals.begin(), arrivals.end());
    const int64_t from = arrivals[arrivals.size() / 100], to = arrivals.back();
    double milli_s = 0;
    for (const auto& j : trace_jobs) {
      const int64_t s = std::max(from, j.arrival_s), e = std::min(to, j.arrival_s + j.duration_s);
      if (e > s)
        milli_s += static_cast<double>(j.request.TotalGpuMilli()) * static_cast<double>(e - s);
    }
    gpus = std::max(1, static_cast<int>(std::lround(milli_s / static_cast<double>(to - from) /
                                                    core::kMilliPerGpu)));
  }
  const core::Fleet fleet = SampleFleet(*full, gpus);

  auto curves = LoadCurves(a.usage);
  if (!curves.ok()) return DynamicFail(curves.status());
  std::vector<int64_t> lengths;
  for (const auto& c : *curves)
    lengths.push_back(static_cast<int64_t>(c.host_mem.size()) * c.step_s);
  FoldModels fold_models;
  if (a.folds > 0) {
    auto f = TrainFolds(a.usage, *curves, a.folds, a.fold_seed);
    if (!f.ok()) return DynamicFail(f.status());
    fold_models = std::move(*f);
  }
  trace::LucidProfiles lucid;
  if (!a.lucid.empty()) {
    auto l = trace::ReadLucidProfiles(a.lucid);
    if (!l.ok()) return DynamicFail(l.status());
    lucid = std::move(*l);
  }
  std::vector<core::Workload> shapes;
  shapes.reserve(trace_jobs.size());
  for (const auto& j : trace_jobs) shapes.push_back(j.request);

  std::fprintf(
      stderr,
      "paladin sim dynamic: %zu jobs%s (%lld never scheduled, %lld of zero length left "
      "out); fleet %zu nodes, %lld GPUs; %zu usage curves; interference %s; paladin "
      "sizes %s; moves cost by %s\n",
      trace_jobs.size(), times_note.c_str(), static_cast<long long>(never_scheduled),
      static_cast<long long>(zero_length), fleet.size(),
      static_cast<long long>(fleet.GpuMilliCapacity() / core::kMilliPerGpu), curves->size(),
      a.lucid.empty() ? "from GPU busy shares"
                      : ("from " + std::to_string(lucid.pairs) + " Lucid pairs").c_str(),
      a.folds > 0 ? ("out of sample (" + std::to_string(a.folds) + " folds by pod)").c_str()
                  : "with one class model learning online from every job",
      costs_note.c_str());
  std::error_code ec;
  std::filesystem::create_directories(a.out, ec);
  if (ec)
    return DynamicFail(IoError("cannot create --out directory " + a.out + ": " + ec.message()));

  // The runs: every config on the same jobs for a (load, seed).
  struct Task {
    size_t load, seed, config;
  };
  std::vector<Task> tasks;
  for (size_t l = 0; l < loads->size(); ++l) {
    for (size_t s = 0; s < seeds->size(); ++s) {
      for (size_t c = 0; c < configs->size(); ++c) tasks.push_back({l, s, c});
    }
  }
  std::vector<std::vector<core::DynamicJob>> jobs(loads->size() * seeds->size());
  for (size_t l = 0; l < loads->size(); ++l) {
    for (size_t s = 0; s < seeds->size(); ++s) {
      jobs[l * seeds->size() + s] =
          core::BuildDynamicJobs(trace_jobs, curves->size(), lengths, lucid.interference.profiles,
                                 (*loads)[l], (*seeds)[s]);
    }
  }
  std::vector<StatusOr<core::DynamicResult>> results(tasks.size(), Internal("not run"));
  std::atomic<size_t> next{0}, finished{0};
  std::mutex mu;
  const bool tty = isatty(2) != 0;
  const auto start = std::chrono::steady_clock::now();
  const int workers =
      a.jobs > 0 ? a.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(workers));
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < tasks.size(); i = next++) {
        const Task& t = tasks[i];
        core::DynamicInputs in;
        in.fleet = &fleet;
        in.jobs = jobs[t.load * seeds->size() + t.seed];
        in.curves = *curves;
        in.interference = a.lucid.empty() ? nullptr : &lucid.interference;
        in.shape_trace = shapes;
        in.curve_fold = fold_models.curve_fold;
        in.gpu_class_models = fold_models.gpu;
        in.host_class_models = fold_models.host;
        results[i] = core::RunDynamicSim(in, (*configs)[t.config], params, (*loads)[t.load],
                                         (*seeds)[t.seed]);
        const size_t done = ++finished;
        if (!a.quiet) {
          std::lock_guard<std::mutex> lock(mu);
          const double el =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          std::fprintf(stderr, "%s[%3zu/%zu] %-26s load %.2f seed %-4llu (elapsed %.0f s)%s",
                       tty ? "\r" : "", done, tasks.size(), (*configs)[t.config].name.c_str(),
                       (*loads)[t.load], static_cast<unsigned long long>((*seeds)[t.seed]), el,
                       tty ? "   " : "\n");
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  if (!a.quiet && tty) std::fprintf(stderr, "\n");
  for (const auto& r : results) {
    if (!r.ok()) return DynamicFail(r.status());
  }

  // dynamic.csv, timeseries.csv, plots and the table.
  std::string csv =
      "config,load,seed,completed_gpu_hours,jobs_completed,queue_mean_s,queue_p99_s,jct_mean_s,"
      "gpu_active_pct,mem_alloc_gib_h,mem_used_gib_h,oom_per_1k_job_h,migrations,"
      "migration_downtime_s\n";
  std::string series = "config,load,seed,t_h,queued,running,mem_alloc_gib,mem_used_gib\n";
  for (const auto& rr : results) {
    const auto& r = *rr;
    csv += r.config + "," + DynamicNum(r.load, 2) + "," + std::to_string(r.seed) + "," +
           DynamicNum(r.completed_gpu_hours, 2) + "," + std::to_string(r.jobs_completed) + "," +
           DynamicNum(r.queue_mean_s, 1) + "," + DynamicNum(r.queue_p99_s, 1) + "," +
           DynamicNum(r.jct_mean_s, 1) + "," + DynamicNum(r.gpu_active_pct, 2) + "," +
           DynamicNum(r.mem_alloc_gib_h, 1) + "," + DynamicNum(r.mem_used_gib_h, 1) + "," +
           DynamicNum(r.oom_per_1k_job_h, 3) + "," + std::to_string(r.migrations) + "," +
           DynamicNum(r.migration_downtime_s, 1) + "\n";
    for (const auto& s : r.series) {
      series += r.config + "," + DynamicNum(r.load, 2) + "," + std::to_string(r.seed) + "," +
                DynamicNum(static_cast<double>(s.t_s) / 3600, 0) + "," + std::to_string(s.queued) +
                "," + std::to_string(s.running) + "," + DynamicNum(s.mem_alloc_gib, 1) + "," +
                DynamicNum(s.mem_used_gib, 1) + "\n";
    }
  }
  for (const auto& [file, content] :
       {std::pair{"dynamic.csv", &csv}, std::pair{"timeseries.csv", &series}}) {
    auto st = report::WriteFile(a.out + "/" + file, *content);
    if (!st.ok()) return DynamicFail(st);
  }
  // Plots of the first seed at each load, from the first arrival after the quiet start.
  for (size_t l = 0; l < loads->size(); ++l) {
    report::Chart queue, mem;
    const std::string tag =
        "load " + DynamicNum((*loads)[l], 2) + ", seed " + std::to_string((*seeds)[0]);
    queue.title = "Jobs waiting in the queue, " + tag;
    queue.x_label = "trace time (days)";
    queue.y_label = "queued jobs";
    mem.title = "GPU memory allocated (solid) and used (markers), " + tag;
    mem.x_label = "trace time (days)";
    mem.y_label = "GiB";
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (tasks[i].load != l || tasks[i].seed != 0) continue;
      const auto& r = *results[i];
      report::ChartSeries q{r.config, {}, false}, alloc{r.config + " allocated", {}, false},
          used{r.config + " used", {}, true};
      for (const auto& s : r.series) {
        const double day = static_cast<double>(s.t_s) / 86400;
        if (day < 114) continue;  // the trace's first 114 days hold 40 arrivals
        q.points.emplace_back(day, s.queued);
        alloc.points.emplace_back(day, s.mem_alloc_gib);
        if (static_cast<int64_t>(day * 24) % 12 == 0) used.points.emplace_back(day, s.mem_used_gib);
      }
      queue.series.push_back(std::move(q));
      mem.series.push_back(std::move(alloc));
      mem.series.push_back(std::move(used));
    }
    const std::string suffix = "_load" + DynamicNum((*loads)[l], 2) + ".svg";
    for (const auto& [name, chart] : {std::pair{"queue", &queue}, std::pair{"memory", &mem}}) {
      auto st = report::WriteFile(a.out + "/" + name + suffix, report::LineChartSvg(*chart));
      if (!st.ok()) return DynamicFail(st);
    }
  }
  // Means over seeds.
  std::printf("%-26s %5s %10s %8s %10s %10s %9s %8s %9s %6s %7s\n", "config", "load", "done_gpu_h",
              "jobs", "queue_mean", "queue_p99", "jct_mean", "gpu_act%", "oom/1kh", "moves",
              "preempt");
  for (size_t l = 0; l < loads->size(); ++l) {
    for (size_t c = 0; c < configs->size(); ++c) {
      double g = 0, jobs_done = 0, qm = 0, qp = 0, jct = 0, act = 0, oom = 0, mv = 0, pre = 0;
      int n = 0;
      for (size_t i = 0; i < tasks.size(); ++i) {
        if (tasks[i].load != l || tasks[i].config != c) continue;
        const auto& r = *results[i];
        g += r.completed_gpu_hours, jobs_done += static_cast<double>(r.jobs_completed);
        qm += r.queue_mean_s, qp += r.queue_p99_s, jct += r.jct_mean_s;
        act += r.gpu_active_pct, oom += r.oom_per_1k_job_h, mv += static_cast<double>(r.migrations);
        pre += static_cast<double>(r.preemptions);
        ++n;
      }
      std::printf("%-26s %5.2f %10.1f %8.0f %10.0f %10.0f %9.0f %8.1f %9.2f %6.0f %7.0f\n",
                  (*configs)[c].name.c_str(), (*loads)[l], g / n, jobs_done / n, qm / n, qp / n,
                  jct / n, act / n, oom / n, mv / n, pre / n);
    }
  }
  std::printf("(means over %zu seeds; every run in %s/dynamic.csv)\n", seeds->size(),
              a.out.c_str());
  return 0;
}

}  // namespace

void AddSimDynamic(CLI::App* sim, int* exit_code) {
  auto args = std::make_shared<DynArgs>();
  const std::string data = BundledDataDir();
  args->nodes = data + "/alibaba-gpu-2023/openb_node_list_gpu_node.csv";
  args->pods = data + "/alibaba-gpu-2023/openb_pod_list_default.csv";
  args->times_from = args->pods;
  args->usage = data + "/alibaba-genai-2026-pod-usage";
  CLI::App* dyn = sim->add_subcommand(
      "dynamic",
      "Jobs arrive and run at their trace times with real usage curves; compares sizing "
      "(request, vpa, paladin), packing (FGD, paladin) and rebalancing side by side.");
  dyn->add_option("--nodes", args->nodes, "Node list CSV")->capture_default_str();
  dyn->add_option("--pods", args->pods, "Pod list CSV with creation/scheduled/deletion times")
      ->capture_default_str();
  dyn->add_option("--times-from", args->times_from,
                  "Pod list whose times are drawn for a --pods variant without times")
      ->capture_default_str();
  dyn->add_option("--usage", args->usage, "GenAI usage directory (the three pod_*_anon.csv)")
      ->capture_default_str();
  dyn->add_option("--lucid", args->lucid,
                  "Lucid profiles directory (single_data.csv, colocate_info.csv) for co-location "
                  "slowdowns; without it GPU time is shared by busy share");
  dyn->add_option("--loads", args->loads, "Load factors, 0.5..2 (resampled arrivals)")
      ->capture_default_str();
  dyn->add_option("--seeds", args->seeds, "Seeds: 42, 42-44 or 1,5,9")->capture_default_str();
  dyn->add_option("--configs", args->configs,
                  "Comma-separated configurations, or all (FGD+request, FGD+vpa, "
                  "paladin+request, paladin+paladin, paladin+paladin+rebalance)")
      ->capture_default_str();
  dyn->add_option("--out", args->out, "Output directory")->capture_default_str();
  dyn->add_option("--fleet-gpus", args->fleet_gpus,
                  "GPUs in the simulated fleet (default: the trace's mean concurrent GPU request "
                  "over its busy period)");
  dyn->add_option("--tick", args->params.tick_s, "Simulation step, seconds")->capture_default_str();
  dyn->add_option("--checkpoint-every", args->params.checkpoint_every_s,
                  "Periodic checkpoint interval, seconds (work after it is lost on OOM)")
      ->capture_default_str();
  dyn->add_option("--migration-fixed", args->params.migration.fixed_s,
                  "Fixed downtime of a migration, seconds")
      ->capture_default_str();
  dyn->add_option("--gpu-out-gbps", args->params.migration.gpu_out_gbps,
                  "GPU state checkpoint rate, GB/s")
      ->capture_default_str();
  dyn->add_option("--gpu-in-gbps", args->params.migration.gpu_in_gbps,
                  "GPU state restore rate, GB/s")
      ->capture_default_str();
  dyn->add_option("--move-costs", args->move_costs,
                  "A fleet's measured moves (CSV, as paladin move-costs writes it): the moves' "
                  "cost is fitted to them, the rates above its prior "
                  "(docs/formats/move_costs.md)");
  dyn->add_option("--disk-gbps", args->params.migration.disk_gbps, "Host state rate, GB/s")
      ->capture_default_str();
  dyn->add_option("--paladin-quantile", args->params.paladin_quantile,
                  "paladin's sizing quantile where quotas grow on demand (0: its default)")
      ->capture_default_str();
  dyn->add_option("--admission-wait", args->params.admission_min_wait_s,
                  "Seconds a job waits before the rebalancer moves others to admit it")
      ->capture_default_str();
  dyn->add_option("--admission-max-gpus", args->params.admission_max_gpus,
                  "Jobs asking more GPUs than this get no admission plan (0 = no limit)")
      ->capture_default_str();
  dyn->add_flag("--admission-head-only", args->params.admission_head_only,
                "Only the oldest waiting job gets an admission plan");
  dyn->add_option("--admission-plans", args->params.max_admission_plans_per_tick,
                  "Admission plans tried per tick")
      ->capture_default_str();
  dyn->add_flag(
      "!--share-sensitive", args->params.isolate_sensitive,
      "Let paladin's packing co-locate jobs Lucid labels as sharing-sensitive (by default "
      "they get GPUs of their own)");
  dyn->add_option("--defrag-moves", args->params.defrag_moves,
                  "Full cycle: fragmentation-lowering moves of shared jobs per hour while jobs "
                  "wait (0 = none)")
      ->capture_default_str();
  dyn->add_flag("!--no-preemption", args->params.preemption,
                "Full cycle: never checkpoint running jobs off a node to admit one that waited "
                "--preemption-wait and that no move admits");
  dyn->add_option("--preemption-wait", args->params.preemption_min_wait_s,
                  "Full cycle: seconds a job waits before running jobs may be checkpointed off a "
                  "node to admit it")
      ->capture_default_str();
  dyn->add_flag("!--share-whole-gpus", args->params.keep_whole_gpus,
                "Let paladin's sizing co-locate jobs that asked for a whole GPU once their memory "
                "quota shrinks (by default they keep their GPU)");
  dyn->add_option("--folds", args->folds,
                  "Out of sample: a job replaying a pod of fold f is sized by paladin's class "
                  "models trained without fold f (folds as in predict eval; 0: one model learns "
                  "online from every job)")
      ->capture_default_str();
  dyn->add_option("--fold-seed", args->fold_seed,
                  "Seed of the split into folds (predict eval's --seed)")
      ->capture_default_str();
  dyn->add_option("--jobs", args->jobs, "Parallel runs (default: all cores)");
  dyn->add_flag("--quiet", args->quiet, "No progress lines");
  dyn->callback([args, exit_code] { *exit_code = RunDynamic(*args); });
}

}  // namespace paladin::cli
