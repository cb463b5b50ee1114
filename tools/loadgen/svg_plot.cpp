// SVG line plot: axes with 1-2-5 ticks, one polyline (with point markers) per series, legend.
#include "tools/loadgen/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace pagedserve::loadgen {
namespace {

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                               "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

std::string fmt(const char* format, double a, double b = 0, double c = 0, double d = 0) {
  char buffer[128];
  std::snprintf(buffer, sizeof buffer, format, a, b, c, d);
  return buffer;
}

std::string tick_label(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", std::abs(v) < 1e-12 ? 0.0 : v);
  return buffer;
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + 1.0;
  const double raw = (hi - lo) / std::max(1, target);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * power;
    if (step >= raw) break;
  }
  // From the last multiple of step at or below lo to the first at or above hi.
  const int64_t first = static_cast<int64_t>(std::floor(lo / step + 1e-9));
  const int64_t last = static_cast<int64_t>(std::ceil(hi / step - 1e-9));
  std::vector<double> ticks;
  for (int64_t i = first; i <= last; ++i) ticks.push_back(static_cast<double>(i) * step);
  return ticks;
}

std::string svg_line_plot(const std::vector<PlotSeries>& series, const PlotOptions& o) {
  double x_max = 0, y_max = 0;
  for (const PlotSeries& s : series) {
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (std::isfinite(s.x[i])) x_max = std::max(x_max, s.x[i]);
      if (std::isfinite(s.y[i])) y_max = std::max(y_max, s.y[i]);
    }
  }
  const std::vector<double> x_ticks = nice_ticks(0, x_max > 0 ? x_max : 1, 6);
  const std::vector<double> y_ticks = nice_ticks(0, y_max > 0 ? y_max : 1, 5);
  x_max = x_ticks.back();
  y_max = y_ticks.back();
  const double left = 80, right = o.width - 170.0, top = 40, bottom = o.height - 60.0;
  const auto px = [&](double x) { return left + (right - left) * x / x_max; };
  const auto py = [&](double y) { return bottom - (bottom - top) * y / y_max; };

  std::string svg =
      fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
          o.width, o.height, o.width, o.height);
  svg += fmt("<rect width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", o.width, o.height);
  svg += fmt("<text x=\"%.1f\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">",
             (left + right) / 2) +
         escape(o.title) + "</text>\n";
  for (const double t : x_ticks) {
    svg += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", px(t),
               top, px(t), bottom);
    svg += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", px(t), bottom + 18) +
           tick_label(t) + "</text>\n";
  }
  for (const double t : y_ticks) {
    svg += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", left,
               py(t), right, py(t));
    svg += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", left - 6, py(t) + 4) +
           tick_label(t) + "</text>\n";
  }
  svg += fmt("<path d=\"M%.1f %.1f V%.1f H%.1f\" fill=\"none\" stroke=\"black\"/>\n", left, top,
             bottom, right);
  svg += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", (left + right) / 2,
             o.height - 18.0) +
         escape(o.x_label) + "</text>\n";
  svg += fmt("<text transform=\"translate(%.1f %.1f) rotate(-90)\" text-anchor=\"middle\">", 20,
             (top + bottom) / 2) +
         escape(o.y_label) + "</text>\n";
  for (size_t k = 0; k < series.size(); ++k) {
    const PlotSeries& s = series[k];
    const std::string color = kColors[k % (sizeof kColors / sizeof kColors[0])];
    std::string points, markers;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      points += fmt("%.1f,%.1f ", px(s.x[i]), py(s.y[i]));
      markers += fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"", px(s.x[i]), py(s.y[i])) +
                 color + "\"/>\n";
    }
    svg += "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"" + color + "\" points=\"" +
           points + "\"/>\n" + markers;
    const double ly = top + 10 + 20.0 * static_cast<double>(k);
    svg += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke-width=\"2\" stroke=\"",
               right + 15, ly, right + 40, ly) +
           color + "\"/>\n";
    svg += fmt("<text x=\"%.1f\" y=\"%.1f\">", right + 46, ly + 4) + escape(s.label) + "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace pagedserve::loadgen
