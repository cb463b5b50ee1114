// Statistics over request records: distributions, throughput, the table and the JSON.
#include "tools/loadgen/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace pagedserve::loadgen {

double percentile(const std::vector<double>& sorted, double p) {
  const double rank = (static_cast<double>(sorted.size()) - 1.0) * p / 100.0;
  const size_t lower = static_cast<size_t>(std::floor(rank));
  const size_t upper = std::min(sorted.size() - 1, lower + 1);
  const double weight = rank - static_cast<double>(lower);
  return sorted[lower] + (sorted[upper] - sorted[lower]) * weight;
}

Distribution distribution_ms(std::vector<double> values_s) {
  Distribution d;
  if (values_s.empty()) return d;
  std::sort(values_s.begin(), values_s.end());
  d.count = static_cast<int64_t>(values_s.size());
  d.mean_ms = 1e3 * std::accumulate(values_s.begin(), values_s.end(), 0.0) /
              static_cast<double>(values_s.size());
  d.p50_ms = 1e3 * percentile(values_s, 50);
  d.p90_ms = 1e3 * percentile(values_s, 90);
  d.p99_ms = 1e3 * percentile(values_s, 99);
  d.max_ms = 1e3 * values_s.back();
  return d;
}

Summary summarize(const std::vector<RequestRecord>& records, double duration_s) {
  Summary s;
  s.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e, lag;
  double normalized_sum = 0.0;
  int64_t normalized_count = 0;
  for (const RequestRecord& r : records) {
    lag.push_back(std::max(0.0, r.sent_s - r.scheduled_s));
    if (!r.ok) {
      ++s.failed;
      ++s.failure_reasons[r.error.empty() ? "unknown" : r.error];
      continue;
    }
    ++s.completed;
    s.total_input_tokens += r.prompt_tokens;
    s.total_output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_s());
    e2e.push_back(r.latency_s());
    if (r.output_tokens >= 2) {
      tpot.push_back((r.latency_s() - r.ttft_s()) / static_cast<double>(r.output_tokens - 1));
    }
    for (size_t i = 1; i < r.chunk_s.size(); ++i) itl.push_back(r.chunk_s[i] - r.chunk_s[i - 1]);
    if (r.output_tokens >= 1) {
      normalized_sum += r.latency_s() / static_cast<double>(r.output_tokens);
      ++normalized_count;
    }
  }
  if (duration_s > 0) {
    s.request_throughput = static_cast<double>(s.completed) / duration_s;
    s.input_token_throughput = static_cast<double>(s.total_input_tokens) / duration_s;
    s.output_token_throughput = static_cast<double>(s.total_output_tokens) / duration_s;
  }
  s.ttft = distribution_ms(std::move(ttft));
  s.tpot = distribution_ms(std::move(tpot));
  s.itl = distribution_ms(std::move(itl));
  s.e2e = distribution_ms(std::move(e2e));
  s.send_lag = distribution_ms(std::move(lag));
  if (normalized_count > 0) s.normalized_latency_s = normalized_sum / normalized_count;
  return s;
}

std::string format_summary(const Summary& s, const std::string& title) {
  std::string out;
  char line[160];
  const auto row = [&](const char* name, const std::string& value) {
    std::snprintf(line, sizeof line, "%-34s %s\n", name, value.c_str());
    out += line;
  };
  const auto num = [](double v, const char* fmt = "%.2f") {
    char b[64];
    std::snprintf(b, sizeof b, fmt, v);
    return std::string(b);
  };
  out += "============ " + title + " ============\n";
  row("Completed requests:", std::to_string(s.completed));
  row("Failed requests:", std::to_string(s.failed));
  for (const auto& [reason, count] : s.failure_reasons) {
    row("  failed:", std::to_string(count) + " x " + reason);
  }
  row("Duration (s):", num(s.duration_s));
  row("Total input tokens:", std::to_string(s.total_input_tokens));
  row("Total output tokens:", std::to_string(s.total_output_tokens));
  row("Request throughput (req/s):", num(s.request_throughput));
  row("Input token throughput (tok/s):", num(s.input_token_throughput));
  row("Output token throughput (tok/s):", num(s.output_token_throughput));
  row("Normalized latency (s/token):", num(s.normalized_latency_s, "%.4f"));
  std::snprintf(line, sizeof line, "%-16s %10s %10s %10s %10s %10s\n", "(ms)", "mean", "p50", "p90",
                "p99", "max");
  out += line;
  const auto dist = [&](const char* name, const Distribution& d) {
    std::snprintf(line, sizeof line, "%-16s %10.2f %10.2f %10.2f %10.2f %10.2f\n", name, d.mean_ms,
                  d.p50_ms, d.p90_ms, d.p99_ms, d.max_ms);
    out += line;
  };
  dist("TTFT", s.ttft);
  dist("TPOT", s.tpot);
  dist("ITL", s.itl);
  dist("E2E latency", s.e2e);
  dist("Send lag", s.send_lag);
  return out;
}

namespace {
nlohmann::ordered_json distribution_json(const Distribution& d) {
  return {{"count", d.count},   {"mean_ms", d.mean_ms}, {"p50_ms", d.p50_ms},
          {"p90_ms", d.p90_ms}, {"p99_ms", d.p99_ms},   {"max_ms", d.max_ms}};
}
}  // namespace

nlohmann::ordered_json summary_json(const Summary& s) {
  nlohmann::ordered_json reasons = nlohmann::ordered_json::object();
  for (const auto& [reason, count] : s.failure_reasons) reasons[reason] = count;
  return {{"completed", s.completed},
          {"failed", s.failed},
          {"failure_reasons", reasons},
          {"duration_s", s.duration_s},
          {"total_input_tokens", s.total_input_tokens},
          {"total_output_tokens", s.total_output_tokens},
          {"request_throughput", s.request_throughput},
          {"input_token_throughput", s.input_token_throughput},
          {"output_token_throughput", s.output_token_throughput},
          {"normalized_latency_s", s.normalized_latency_s},
          {"ttft", distribution_json(s.ttft)},
          {"tpot", distribution_json(s.tpot)},
          {"itl", distribution_json(s.itl)},
          {"e2e_latency", distribution_json(s.e2e)},
          {"send_lag", distribution_json(s.send_lag)}};
}

nlohmann::ordered_json record_json(const RequestRecord& r) {
  nlohmann::ordered_json itl_ms = nlohmann::ordered_json::array();
  for (size_t i = 1; i < r.chunk_s.size(); ++i)
    itl_ms.push_back(1e3 * (r.chunk_s[i] - r.chunk_s[i - 1]));
  nlohmann::ordered_json out = {{"index", r.index},
                                {"ok", r.ok},
                                {"scheduled_s", r.scheduled_s},
                                {"sent_s", r.sent_s},
                                {"end_s", r.end_s},
                                {"prompt_tokens", r.prompt_tokens},
                                {"output_tokens", r.output_tokens},
                                {"expected_output_tokens", r.expected_output_tokens},
                                {"ttft_ms", 1e3 * r.ttft_s()},
                                {"latency_ms", 1e3 * r.latency_s()},
                                {"itl_ms", std::move(itl_ms)}};
  if (!r.ok) out["error"] = r.error;
  return out;
}

}  // namespace pagedserve::loadgen
