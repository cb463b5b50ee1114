// Prometheus text exposition format 0.0.4 (see prometheus_text.h).
#include "net/protocol/prometheus_text.h"

#include <cassert>
#include <charconv>
#include <cmath>

namespace pagedserve::net {

void PrometheusText::header(std::string_view name, std::string_view type, std::string_view help) {
  text_.append("# HELP ").append(name).append(" ").append(help).append("\n");
  text_.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

// Sample values: the shortest decimal that reads back as the same double; +Inf, -Inf and NaN
// spelled the format's way.
void PrometheusText::append_value(double value) {
  if (std::isnan(value)) {
    text_.append("NaN");
  } else if (std::isinf(value)) {
    text_.append(value > 0 ? "+Inf" : "-Inf");
  } else {
    char buffer[64];
    const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
    text_.append(buffer, ec == std::errc() ? end : buffer);
  }
}

void PrometheusText::sample(std::string_view name, std::string_view labels, double value) {
  text_.append(name);
  if (!labels.empty()) text_.append("{").append(labels).append("}");
  text_.push_back(' ');
  append_value(value);
  text_.push_back('\n');
}

void PrometheusText::metric(std::string_view name, std::string_view type, std::string_view help,
                            double value) {
  header(name, type, help);
  sample(name, "", value);
}

void PrometheusText::histogram_series(std::string_view name, std::string_view labels,
                                      const std::vector<double>& upper_bounds,
                                      const std::vector<uint64_t>& cumulative, double sum,
                                      uint64_t count) {
  assert(cumulative.size() == upper_bounds.size() + 1);
  for (size_t i = 0; i <= upper_bounds.size(); ++i) {
    text_.append(name).append("_bucket{");
    if (!labels.empty()) text_.append(labels).push_back(',');
    text_.append("le=\"");
    if (i < upper_bounds.size()) {
      append_value(upper_bounds[i]);
    } else {
      text_.append("+Inf");
    }
    text_.append("\"} ");
    append_value(static_cast<double>(i < upper_bounds.size() ? cumulative[i] : count));
    text_.push_back('\n');
  }
  text_.append(name).append("_sum");
  if (!labels.empty()) text_.append("{").append(labels).append("}");
  text_.push_back(' ');
  append_value(sum);
  text_.push_back('\n');
  text_.append(name).append("_count");
  if (!labels.empty()) text_.append("{").append(labels).append("}");
  text_.push_back(' ');
  append_value(static_cast<double>(count));
  text_.push_back('\n');
}

std::string label_pair(std::string_view name, std::string_view value) {
  std::string out(name);
  out.append("=\"");
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace pagedserve::net
