#include "paladin/report/fgd_report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include "paladin/report/format.h"

namespace paladin::report {
namespace {

// Two-sided 95% Student t quantiles for 1..30 degrees of freedom; 1.96 beyond.
double T95(int dof) {
  static const double kT[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                              2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                              2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                              2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  if (dof < 1) return 0;
  if (dof <= 30) return kT[dof - 1];
  return 1.96;
}

std::string CurveCsv(const std::vector<core::FgdRunResult>& runs, const char* value_name,
                     bool frag) {
  std::string out = std::string("policy,seed,arrived_pct,") + value_name + "\n";
  for (const auto& r : runs) {
    const auto& curve = frag ? r.frag_pct : r.alloc_pct;
    for (size_t pct = 0; pct < curve.size(); ++pct) {
      out += r.policy + "," + std::to_string(r.seed) + "," + std::to_string(pct) + "," +
             Fixed(curve[pct], 4) + "\n";
    }
  }
  return out;
}

}  // namespace

std::vector<SummaryRow> Summarize(const std::vector<core::FgdRunResult>& runs,
                                  const std::vector<int>& points) {
  std::vector<SummaryRow> rows;
  std::map<std::string, size_t> index;
  std::vector<std::vector<const core::FgdRunResult*>> groups;
  for (const auto& r : runs) {
    auto [it, fresh] = index.emplace(r.policy, rows.size());
    if (fresh) {
      rows.push_back(SummaryRow{});
      rows.back().policy = r.policy;
      groups.emplace_back();
    }
    groups[it->second].push_back(&r);
  }
  for (size_t g = 0; g < rows.size(); ++g) {
    SummaryRow& row = rows[g];
    row.points = points;
    row.seeds = static_cast<int>(groups[g].size());
    for (int p : points) {
      std::vector<double> a, f;
      for (const auto* r : groups[g]) {
        const auto i = static_cast<size_t>(p);
        if (i < r->alloc_pct.size() && !std::isnan(r->alloc_pct[i])) a.push_back(r->alloc_pct[i]);
        if (i < r->frag_pct.size() && !std::isnan(r->frag_pct[i])) f.push_back(r->frag_pct[i]);
      }
      double mean = std::nan(""), ci = std::nan(""), fmean = std::nan("");
      if (!a.empty()) {
        double s = 0;
        for (double v : a) s += v;
        mean = s / static_cast<double>(a.size());
        double ss = 0;
        for (double v : a) ss += (v - mean) * (v - mean);
        const int n = static_cast<int>(a.size());
        ci = n > 1 ? T95(n - 1) * std::sqrt(ss / (n - 1)) / std::sqrt(static_cast<double>(n)) : 0;
      }
      if (!f.empty()) {
        double s = 0;
        for (double v : f) s += v;
        fmean = s / static_cast<double>(f.size());
      }
      row.alloc_mean.push_back(mean);
      row.alloc_ci95.push_back(ci);
      row.frag_mean.push_back(fmean);
    }
    std::vector<int64_t> ns;
    for (const auto* r : groups[g])
      ns.insert(ns.end(), r->decision_ns.begin(), r->decision_ns.end());
    if (!ns.empty()) {
      double total = 0;
      for (int64_t v : ns) total += static_cast<double>(v);
      row.decisions_per_s = total > 0 ? static_cast<double>(ns.size()) / (total * 1e-9) : 0;
      const size_t k = std::min(ns.size() - 1, static_cast<size_t>(0.99 * ns.size()));
      std::nth_element(ns.begin(), ns.begin() + static_cast<std::ptrdiff_t>(k), ns.end());
      row.p99_decision_us = static_cast<double>(ns[k]) / 1000.0;
    }
  }
  return rows;
}

std::string AllocationCsv(const std::vector<core::FgdRunResult>& runs) {
  return CurveCsv(runs, "alloc_pct", false);
}

std::string FragmentationCsv(const std::vector<core::FgdRunResult>& runs) {
  return CurveCsv(runs, "frag_ratio_pct", true);
}

std::string SummaryCsv(const std::vector<SummaryRow>& rows) {
  std::string out = "policy,seeds";
  if (!rows.empty()) {
    for (int p : rows[0].points) {
      out += ",alloc_" + std::to_string(p) + ",alloc_" + std::to_string(p) + "_ci95";
    }
    for (int p : rows[0].points) out += ",frag_" + std::to_string(p);
  }
  out += "\n";
  for (const auto& r : rows) {
    out += r.policy + "," + std::to_string(r.seeds);
    for (size_t i = 0; i < r.points.size(); ++i) {
      out += "," + Fixed(r.alloc_mean[i], 3) + "," + Fixed(r.alloc_ci95[i], 3);
    }
    for (size_t i = 0; i < r.points.size(); ++i) out += "," + Fixed(r.frag_mean[i], 3);
    out += "\n";
  }
  return out;
}

std::string SummaryTable(const std::vector<SummaryRow>& rows, bool with_timing) {
  std::string out;
  char buf[256];
  std::string head = "policy         seeds";
  if (!rows.empty()) {
    for (int p : rows[0].points) {
      std::snprintf(buf, sizeof buf, "  alloc@%-3d", p);
      head += buf;
    }
    head += "   ±95%CI@" + std::to_string(rows[0].points.back());
    head += "  frag@" + std::to_string(rows[0].points.back());
  }
  if (with_timing) head += "   decisions/s  p99 µs";
  out += head + "\n";
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof buf, "%-14s %5d", r.policy.c_str(), r.seeds);
    std::string line = buf;
    for (size_t i = 0; i < r.points.size(); ++i) {
      std::snprintf(buf, sizeof buf, "  %9s", Fixed(r.alloc_mean[i], 2).c_str());
      line += buf;
    }
    std::snprintf(buf, sizeof buf, "   %9s  %7s", Fixed(r.alloc_ci95.back(), 2).c_str(),
                  Fixed(r.frag_mean.back(), 2).c_str());
    line += buf;
    if (with_timing) {
      std::snprintf(buf, sizeof buf, "   %11.0f  %6.1f", r.decisions_per_s, r.p99_decision_us);
      line += buf;
    }
    out += line + "\n";
  }
  return out;
}

namespace {

struct Panel {
  double left, top, width, height;  // pixels
  double xmin, xmax, ymin, ymax;    // data
  double xstep, ystep;              // grid
};

using Curves = std::vector<std::pair<std::string, std::vector<double>>>;  // policy -> mean curve

std::string DrawPanel(const Panel& p, const Curves& curves, const std::string& caption) {
  auto X = [&](double x) { return p.left + p.width * (x - p.xmin) / (p.xmax - p.xmin); };
  auto Y = [&](double y) { return p.top + p.height * (1 - (y - p.ymin) / (p.ymax - p.ymin)); };
  std::string s;
  char buf[512];
  for (double y = p.ymin; y <= p.ymax + 1e-9; y += p.ystep) {
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                  X(p.xmin), Y(y), X(p.xmax), Y(y), X(p.xmin) - 6, Y(y) + 4, y);
    s += buf;
  }
  for (double x = p.xmin; x <= p.xmax + 1e-9; x += p.xstep) {
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                  X(x), Y(p.ymin), X(x), Y(p.ymax), X(x), Y(p.ymin) + 16, x);
    s += buf;
  }
  std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">",
                p.left + p.width / 2, p.top - 8);
  s += buf + XmlEscape(caption) + "</text>\n";
  for (size_t c = 0; c < curves.size(); ++c) {
    std::string pts;
    const auto& curve = curves[c].second;
    for (size_t i = 0; i < curve.size(); ++i) {
      const auto x = static_cast<double>(i);
      if (std::isnan(curve[i]) || x < p.xmin || x > p.xmax) continue;
      const double y = std::clamp(curve[i], p.ymin, p.ymax);
      std::snprintf(buf, sizeof buf, "%.1f,%.1f ", X(x), Y(y));
      pts += buf;
    }
    const char* color = SeriesColor(c);
    s += std::string("<polyline fill=\"none\" stroke=\"") + color +
         "\" stroke-width=\"1.8\" points=\"" + pts + "\"/>\n";
  }
  return s;
}

}  // namespace

std::string AllocationSvg(const std::vector<core::FgdRunResult>& runs, const std::string& title) {
  // Mean curve per policy, in the order the runs list them.
  Curves curves;
  std::map<std::string, size_t> index;
  std::vector<std::vector<int>> counts;
  for (const auto& r : runs) {
    auto [it, fresh] = index.emplace(r.policy, curves.size());
    if (fresh) {
      curves.push_back({r.policy, {}});
      counts.emplace_back();
    }
    auto& sum = curves[it->second].second;
    auto& n = counts[it->second];
    if (sum.size() < r.alloc_pct.size()) {
      sum.resize(r.alloc_pct.size(), 0);
      n.resize(r.alloc_pct.size(), 0);
    }
    for (size_t i = 0; i < r.alloc_pct.size(); ++i) {
      if (std::isnan(r.alloc_pct[i])) continue;
      sum[i] += r.alloc_pct[i];
      ++n[i];
    }
  }
  size_t len = 0;
  double low = 100;  // lowest mean allocation at the right end, for the zoomed panel
  for (size_t c = 0; c < curves.size(); ++c) {
    auto& sum = curves[c].second;
    for (size_t i = 0; i < sum.size(); ++i) {
      sum[i] = counts[c][i] > 0 ? sum[i] / counts[c][i] : std::nan("");
    }
    len = std::max(len, sum.size());
    if (!sum.empty() && !std::isnan(sum.back())) low = std::min(low, sum.back());
  }
  const double xmax = len > 1 ? static_cast<double>(len - 1) : 130;
  const double zoom_ymin = std::max(0.0, std::floor(low / 5) * 5 - 5);
  const double zoom_xmin = std::max(0.0, std::floor(zoom_ymin / 10) * 10);
  const double w = 1100, h = 480;
  std::string s;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" "
                "height=\"100%%\" fill=\"white\"/>\n<text x=\"70\" y=\"22\" font-size=\"14\">",
                w, h);
  s += buf + XmlEscape(title) + "</text>\n";
  s += DrawPanel({70, 60, 400, 340, 0, xmax, 0, 100, 10, 10}, curves, "whole run");
  s += DrawPanel({540, 60, 400, 340, zoom_xmin, xmax, zoom_ymin, 100, 10, 5}, curves,
                 "zoomed where policies part");
  std::snprintf(buf, sizeof buf,
                "<text x=\"505\" y=\"%.0f\" text-anchor=\"middle\">arrived GPU request (%% of "
                "capacity)</text>\n<text x=\"18\" y=\"230\" text-anchor=\"middle\" "
                "transform=\"rotate(-90 18 230)\">GPU allocation (%% of capacity)</text>\n",
                h - 18);
  s += buf;
  for (size_t c = 0; c < curves.size(); ++c) {
    const double ly = 74 + 18 * static_cast<double>(c);
    const char* color = SeriesColor(c);
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"960\" y1=\"%.1f\" x2=\"984\" y2=\"%.1f\" stroke=\"%s\" "
                  "stroke-width=\"3\"/><text x=\"990\" y=\"%.1f\">",
                  ly, ly, color, ly + 4);
    s += buf + XmlEscape(curves[c].first) + "</text>\n";
  }
  s += "</svg>\n";
  return s;
}

PairedGap Paired(const std::vector<core::FgdRunResult>& runs, const std::string& policy,
                 const std::string& baseline, int pct) {
  std::map<uint64_t, double> a, b;
  const auto i = static_cast<size_t>(pct);
  for (const auto& r : runs) {
    if (i >= r.alloc_pct.size() || std::isnan(r.alloc_pct[i])) continue;
    if (r.policy == policy) a[r.seed] = r.alloc_pct[i];
    if (r.policy == baseline) b[r.seed] = r.alloc_pct[i];
  }
  std::vector<double> d;
  for (const auto& [seed, v] : a) {
    auto it = b.find(seed);
    if (it != b.end()) d.push_back(v - it->second);
  }
  PairedGap g;
  g.seeds = static_cast<int>(d.size());
  if (d.empty()) return g;
  double s = 0;
  g.min = d[0];
  for (double v : d) {
    s += v;
    g.min = std::min(g.min, v);
  }
  g.mean = s / static_cast<double>(d.size());
  double ss = 0;
  for (double v : d) ss += (v - g.mean) * (v - g.mean);
  const int n = g.seeds;
  g.ci95 = n > 1 ? T95(n - 1) * std::sqrt(ss / (n - 1)) / std::sqrt(static_cast<double>(n)) : 0;
  return g;
}

std::string PublishedComparison(const std::vector<SummaryRow>& rows,
                                const std::vector<PublishedMeans>& published) {
  std::string out;
  char buf[256];
  for (const auto& row : rows) {
    for (const auto& p : published) {
      if (p.policy != row.policy) continue;
      if (out.empty()) {
        out = "published (FGD artifact, mean of its 10 runs) vs this run, GPU allocation %:\n";
        out += "policy          pub@100  ours@100   diff    pub@130  ours@130   diff\n";
      }
      const size_t i100 = 1, i130 = 3;
      std::snprintf(buf, sizeof buf, "%-14s %8.2f  %8.2f  %+6.2f   %8.2f  %8.2f  %+6.2f\n",
                    row.policy.c_str(), p.alloc[i100], row.alloc_mean[i100],
                    row.alloc_mean[i100] - p.alloc[i100], p.alloc[i130], row.alloc_mean[i130],
                    row.alloc_mean[i130] - p.alloc[i130]);
      out += buf;
    }
  }
  return out;
}

Status WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return IoError("cannot write " + path + ": " + std::strerror(errno));
  out << content;
  out.close();
  if (!out) return IoError("error writing " + path);
  return Status::Ok();
}

}  // namespace paladin::report
