// `paladin predict eval`: every predictor on real usage series, by rolling origin.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "commands.h"
#include "paladin/core/predict_eval.h"
#include "paladin/report/chart.h"
#include "paladin/report/fgd_report.h"
#include "paladin/report/format.h"
#include "paladin/trace/genai_usage.h"

namespace paladin::cli {
namespace {

struct EvalArgs {
  std::string usage;
  std::string out = "predict-results";
  std::string predictors = "request,peak,vpa,paladin";
  int64_t window_s = 3600;
  double gpu_request_gib = 48;
  double host_unit_gib = 64;
  bool sweep = true;
};

struct Resource {
  const char* name;
  trace::GenAiMetric metric;
  core::ResourceSpec spec;
  double scale;  // values -> reported unit
};

std::vector<std::string> NonEmpty(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const auto& i : items) {
    if (!i.empty()) out.push_back(i);
  }
  return out;
}

std::string Num(double v, int digits = 4) { return report::Fixed(v, digits); }

int Fail(const Status& st) {
  std::fprintf(stderr, "paladin predict eval: error: %s\n", st.message().c_str());
  return 2;
}

int RunEval(const EvalArgs& a) {
  const auto names = NonEmpty(SplitComma(a.predictors));
  if (names.empty()) return Fail(InvalidArgument("--predictors is empty"));
  for (const auto& n : names) {
    if (auto f = core::PredictorFactory::ForName(n); !f.ok()) return Fail(f.status());
  }
  if (a.window_s <= 0) return Fail(InvalidArgument("--window must be positive"));
  std::error_code ec;
  std::filesystem::create_directories(a.out, ec);
  if (ec) return Fail(IoError("cannot create " + a.out + ": " + ec.message()));

  const double gib = 1024.0 * 1024 * 1024;
  std::vector<Resource> resources = {
      {"gpu_mem", trace::GenAiMetric::kGpuMemBytes, {a.gpu_request_gib * gib, a.window_s, 1}, 1},
      {"host_mem", trace::GenAiMetric::kHostMemShare, {1.0, a.window_s, a.host_unit_gib * gib}, 1}};
  std::string csv = "predictor,resource,windows,median_rel_err,p95_rel_err,under_rate,mean_slack\n";
  std::string tradeoff =
      "predictor,resource,knob,value,windows,median_rel_err,p95_rel_err,under_rate,mean_slack\n";
  std::string frontier = "resource,max_under_rate";
  for (const auto& n : names) frontier += "," + core::PredictorFactory::ForName(n)->name();
  frontier += "\n";
  std::string table;
  for (const auto& r : resources) {
    std::fprintf(stderr, "paladin predict eval: reading %s ...\n", trace::GenAiFileName(r.metric));
    int64_t skipped = 0;
    auto series = trace::ReadGenAiUsage(a.usage, r.metric, &skipped);
    if (!series.ok()) return Fail(series.status());
    if (skipped > 0) {
      std::fprintf(stderr, "paladin predict eval: %s: skipped %lld rows with no pod id\n",
                   trace::GenAiFileName(r.metric), static_cast<long long>(skipped));
    }
    size_t samples = 0;
    for (const auto& s : *series) samples += s.samples.size();
    std::fprintf(stderr, "paladin predict eval: %s: %zu series, %zu samples; replaying %s%s\n",
                 r.name, series->size(), samples, a.predictors.c_str(),
                 a.sweep ? " and their trade-off sweeps" : "");
    auto study = core::StudyPredictors(*series, r.spec, names, a.sweep);
    if (!study.ok()) return Fail(study.status());
    char buf[256];
    std::snprintf(buf, sizeof buf, "\n%s (%zu series)\n%-9s %8s %10s %10s %10s %10s\n", r.name,
                  series->size(), "predictor", "windows", "median_err", "p95_err", "under_rate",
                  "mean_slack");
    table += buf;
    for (const auto& [name, m] : study->defaults) {
      csv += name + "," + r.name + "," + std::to_string(m.windows) + "," + Num(m.median_rel_err) +
             "," + Num(m.p95_rel_err) + "," + Num(m.under_rate) + "," + Num(m.mean_slack) + "\n";
      std::snprintf(buf, sizeof buf, "%-9s %8lld %10.3f %10.3f %10.3f %10.3f\n", name.c_str(),
                    static_cast<long long>(m.windows), m.median_rel_err, m.p95_rel_err,
                    m.under_rate, m.mean_slack);
      table += buf;
    }
    // paladin against VPA at VPA's own under-prediction rate: the claim the sweep checks.
    for (const auto& [name, m] : study->defaults) {
      if (name != "vpa" || !a.sweep) continue;
      const double slack = core::FrontierSlack(study->tradeoff, "paladin", m.under_rate);
      if (std::isnan(slack)) continue;
      std::snprintf(buf, sizeof buf,
                    "at vpa's under_rate %.3f: paladin's least slack %.3f, vpa's %.3f\n",
                    m.under_rate, slack, m.mean_slack);
      table += buf;
    }
    report::Chart chart;
    chart.title = std::string("Slack against under-prediction, ") + r.name +
                  " (each point: one setting of the predictor's knob)";
    chart.x_label = "under-prediction rate (share of windows)";
    chart.y_label = "mean slack (share of the forecast)";
    chart.x_min = 0, chart.x_max = 0.3, chart.y_min = 0, chart.y_max = 0.8;
    for (const auto& n : names) {
      const std::string name = core::PredictorFactory::ForName(n)->name();
      report::ChartSeries cs{name + " (frontier)", {}, true};
      for (const auto& p : study->tradeoff) {
        if (p.predictor != name) continue;
        tradeoff += p.predictor + "," + r.name + "," + p.knob + "," + Num(p.value, 4) + "," +
                    std::to_string(p.metrics.windows) + "," + Num(p.metrics.median_rel_err) + "," +
                    Num(p.metrics.p95_rel_err) + "," + Num(p.metrics.under_rate) + "," +
                    Num(p.metrics.mean_slack) + "\n";
      }
      for (int u = 0; u <= 30; ++u) {
        const double slack = core::FrontierSlack(study->tradeoff, name, u / 100.0);
        if (!std::isnan(slack)) cs.points.emplace_back(u / 100.0, slack);
      }
      if (name == "request") {  // a single setting: the default
        for (const auto& [dn, m] : study->defaults) {
          if (dn == name) cs.points = {{m.under_rate, m.mean_slack}};
        }
      }
      chart.series.push_back(std::move(cs));
    }
    for (int u = 1; u <= 10; ++u) {
      frontier += std::string(r.name) + "," + Num(u / 100.0, 2);
      for (const auto& n : names) {
        frontier +=
            "," + Num(core::FrontierSlack(study->tradeoff,
                                          core::PredictorFactory::ForName(n)->name(), u / 100.0));
      }
      frontier += "\n";
    }
    auto st =
        report::WriteFile(a.out + "/tradeoff_" + r.name + ".svg", report::LineChartSvg(chart));
    if (!st.ok()) return Fail(st);
  }
  for (const auto& [file, content] :
       {std::pair{"predictors.csv", &csv}, std::pair{"tradeoff.csv", &tradeoff},
        std::pair{"frontier.csv", &frontier}}) {
    auto st = report::WriteFile(a.out + "/" + file, *content);
    if (!st.ok()) return Fail(st);
  }
  std::printf("%s\nwrote %s/{predictors.csv,tradeoff.csv,frontier.csv,tradeoff_*.svg}\n",
              table.c_str(), a.out.c_str());
  return 0;
}

}  // namespace

void RegisterPredict(CLI::App& app, int* exit_code) {
  CLI::App* predict = app.add_subcommand("predict", "Evaluate resource predictors");
  predict->require_subcommand(1);
  auto args = std::make_shared<EvalArgs>();
  args->usage = BundledDataDir() + "/alibaba-genai-2026-pod-usage";
  CLI::App* eval = predict->add_subcommand(
      "eval",
      "Rolling-origin evaluation on per-pod usage series: each hour every predictor forecasts the "
      "next hour's peak GPU and host memory, having seen only earlier samples.");
  eval->add_option("--usage", args->usage,
                   "Directory with pod_gpu_memory_used_bytes_anon.csv and pod_memory_util_anon.csv")
      ->capture_default_str();
  eval->add_option("--out", args->out, "Output directory")->capture_default_str();
  eval->add_option("--predictors", args->predictors, "Comma-separated predictors")
      ->capture_default_str();
  eval->add_option("--window", args->window_s, "Forecast window, seconds")->capture_default_str();
  eval->add_option("--gpu-request-gib", args->gpu_request_gib,
                   "The GPU-memory request of every pod (the trace publishes none)")
      ->capture_default_str();
  eval->add_option("--host-unit-gib", args->host_unit_gib,
                   "Container memory limit assumed when VPA's byte constants meet host-memory "
                   "shares")
      ->capture_default_str();
  eval->add_flag("!--no-sweep", args->sweep, "Skip the slack/under-prediction trade-off sweep");
  eval->callback([args, exit_code] { *exit_code = RunEval(*args); });
}

}  // namespace paladin::cli
