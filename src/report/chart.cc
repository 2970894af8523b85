#include "paladin/report/chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "paladin/report/format.h"

namespace paladin::report {
namespace {

// A "nice" grid step giving about 5-10 lines over `span`.
double NiceStep(double span) {
  if (span <= 0) return 1;
  const double raw = span / 6;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10 * mag;
}

}  // namespace

std::string LineChartSvg(const Chart& chart) {
  double x0 = chart.x_min, x1 = chart.x_max, y0 = chart.y_min, y1 = chart.y_max;
  if (x0 == x1 || y0 == y1) {
    double lx = INFINITY, hx = -INFINITY, ly = INFINITY, hy = -INFINITY;
    for (const auto& s : chart.series) {
      for (auto [x, y] : s.points) {
        if (std::isnan(x) || std::isnan(y)) continue;
        lx = std::min(lx, x), hx = std::max(hx, x), ly = std::min(ly, y), hy = std::max(hy, y);
      }
    }
    if (!std::isfinite(lx)) lx = 0, hx = 1, ly = 0, hy = 1;
    if (x0 == x1) x0 = lx, x1 = hx > lx ? hx : lx + 1;
    if (y0 == y1) y0 = std::min(0.0, ly), y1 = hy > y0 ? hy * 1.05 : y0 + 1;
  }
  const double left = 80, top = 50, width = 640, height = 380, w = 960, h = 500;
  auto X = [&](double x) { return left + width * (x - x0) / (x1 - x0); };
  auto Y = [&](double y) { return top + height * (1 - (y - y0) / (y1 - y0)); };
  std::string s;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" "
                "height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" y=\"24\" font-size=\"14\">",
                w, h, left);
  s += buf + XmlEscape(chart.title) + "</text>\n";
  const double xs = NiceStep(x1 - x0), ys = NiceStep(y1 - y0);
  for (double y = std::ceil(y0 / ys) * ys; y <= y1 + 1e-9; y += ys) {
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                  X(x0), Y(y), X(x1), Y(y), X(x0) - 6, Y(y) + 4, y);
    s += buf;
  }
  for (double x = std::ceil(x0 / xs) * xs; x <= x1 + 1e-9; x += xs) {
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                  X(x), Y(y0), X(x), Y(y1), X(x), Y(y0) + 16, x);
    s += buf;
  }
  std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">",
                left + width / 2, top + height + 40);
  s += buf + XmlEscape(chart.x_label) + "</text>\n";
  std::snprintf(buf, sizeof buf,
                "<text x=\"20\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 20 "
                "%.1f)\">",
                top + height / 2, top + height / 2);
  s += buf + XmlEscape(chart.y_label) + "</text>\n";
  for (size_t c = 0; c < chart.series.size(); ++c) {
    const auto& ser = chart.series[c];
    const char* color = SeriesColor(c);
    std::string pts;
    for (auto [x, y] : ser.points) {
      if (std::isnan(x) || std::isnan(y) || x < x0 || x > x1) continue;
      std::snprintf(buf, sizeof buf, "%.1f,%.1f ", X(x), Y(std::clamp(y, y0, y1)));
      pts += buf;
      if (ser.markers) {
        std::snprintf(buf, sizeof buf, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n",
                      X(x), Y(std::clamp(y, y0, y1)), color);
        s += buf;
      }
    }
    s += std::string("<polyline fill=\"none\" stroke=\"") + color +
         "\" stroke-width=\"1.8\" points=\"" + pts + "\"/>\n";
    const double ly = top + 14 + 18 * static_cast<double>(c);
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                  "stroke-width=\"3\"/><text x=\"%.1f\" y=\"%.1f\">",
                  left + width + 20, ly, left + width + 44, ly, color, left + width + 50, ly + 4);
    s += buf + XmlEscape(ser.name) + "</text>\n";
  }
  s += "</svg>\n";
  return s;
}

}  // namespace paladin::report
