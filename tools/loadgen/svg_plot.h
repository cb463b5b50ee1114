// A hand-written SVG line plot for `pagedserve bench sweep`: normalized latency against
// request rate, one polyline per server or configuration, with axes, ticks and a legend.
// Pure: returns the document as a string.
#pragma once

#include <string>
#include <vector>

namespace pagedserve::loadgen {

struct PlotSeries {
  std::string label;
  std::vector<double> x;  // request rate (req/s)
  std::vector<double> y;  // normalized latency (s/token); non-finite points are skipped
};

struct PlotOptions {
  std::string title = "Normalized latency vs request rate";
  std::string x_label = "request rate (req/s)";
  std::string y_label = "normalized latency (s/token)";
  int width = 720;
  int height = 480;
};

// Ticks at 1, 2 or 5 times a power of ten covering [lo, hi] (about `target` of them).
std::vector<double> nice_ticks(double lo, double hi, int target);

std::string svg_line_plot(const std::vector<PlotSeries>& series, const PlotOptions& options);

}  // namespace pagedserve::loadgen
