// A minimal SVG line chart: named series of (x, y) points on linear axes, with a legend.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace paladin::report {

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // drawn in order; NaN y breaks nothing, skipped
  bool markers = false;
};

struct Chart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<ChartSeries> series;
  // Axis ranges; when min == max the range is taken from the data.
  double x_min = 0, x_max = 0, y_min = 0, y_max = 0;
};

std::string LineChartSvg(const Chart& chart);

}  // namespace paladin::report
