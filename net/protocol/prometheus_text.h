// PrometheusText: appends Prometheus text exposition format 0.0.4 (what GET /metrics answers)
// to one growing buffer: a family's # HELP and # TYPE lines, samples with optional labels, and
// histograms as cumulative _bucket{le} lines ending in le="+Inf", then _sum and _count.
// Written for a cheap scrape (the llm-d endpoint picker scrapes every 50 ms): every piece is
// appended in place, with no temporary strings per sample.
//
// Pure; one instance belongs to one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagedserve::net {

class PrometheusText {
 public:
  explicit PrometheusText(size_t reserve_bytes = 16384) { text_.reserve(reserve_bytes); }

  // `type`: "counter", "gauge" or "histogram". A counter's family name ends in _total, as
  // Python's prometheus_client writes it (and vLLM's /metrics shows).
  void header(std::string_view name, std::string_view type, std::string_view help);
  // `labels`: the text between { and }, already escaped (label_pair builds it); "" for none.
  void sample(std::string_view name, std::string_view labels, double value);
  // header + one unlabelled sample.
  void metric(std::string_view name, std::string_view type, std::string_view help, double value);

  // One histogram series: `upper_bounds` (finite, increasing) with `cumulative` counts (one
  // per bound, then +Inf), plus sum and count. `labels` go before le on every bucket line.
  void histogram_series(std::string_view name, std::string_view labels,
                        const std::vector<double>& upper_bounds,
                        const std::vector<uint64_t>& cumulative, double sum, uint64_t count);

  std::string take() { return std::move(text_); }

 private:
  void append_value(double value);

  std::string text_;
};

// name="value" with the value escaped as the format requires (\\, \" and \n).
std::string label_pair(std::string_view name, std::string_view value);

}  // namespace pagedserve::net
