// Statistics of the load generator: percentiles, TTFT / TPOT / ITL / normalized latency from
// hand-made records, the table, the JSON and the SVG plot.
#include <gtest/gtest.h>

#include "tools/loadgen/stats.h"
#include "tools/loadgen/svg_plot.h"

namespace pagedserve::loadgen {
namespace {

TEST(Stats, PercentilesInterpolateLinearly) {
  const std::vector<double> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_DOUBLE_EQ(percentile(v, 50), 5.5);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 9.1);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 10);
  EXPECT_DOUBLE_EQ(percentile({4}, 99), 4);
}

RequestRecord record(double sent, double ttft, double itl, int tokens) {
  RequestRecord r;
  r.ok = true;
  r.sent_s = sent;
  r.scheduled_s = sent;
  r.prompt_tokens = 10;
  r.output_tokens = tokens;
  for (int i = 0; i < tokens; ++i) r.chunk_s.push_back(sent + ttft + i * itl);
  r.end_s = r.chunk_s.back();
  return r;
}

TEST(Stats, SummaryFromKnownRecords) {
  std::vector<RequestRecord> records = {record(0.0, 0.05, 0.01, 11), record(1.0, 0.15, 0.03, 6)};
  RequestRecord failed;
  failed.error = "http 503";
  records.push_back(failed);
  records.push_back(failed);
  const Summary s = summarize(records, 2.0);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 2);
  EXPECT_EQ(s.failure_reasons.at("http 503"), 2);
  EXPECT_EQ(s.total_output_tokens, 17);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(s.input_token_throughput, 10.0);
  EXPECT_DOUBLE_EQ(s.output_token_throughput, 8.5);
  EXPECT_NEAR(s.ttft.mean_ms, 100, 1e-9);
  EXPECT_NEAR(s.tpot.mean_ms, 20, 1e-9);
  EXPECT_NEAR(s.itl.mean_ms, (10 * 10 + 5 * 30) / 15.0, 1e-9);
  EXPECT_NEAR(s.e2e.p50_ms, (150 + 300) / 2.0, 1e-9);
  EXPECT_NEAR(s.normalized_latency_s, (0.15 / 11 + 0.3 / 6) / 2, 1e-12);

  const std::string table = format_summary(s, "Serving Benchmark Result");
  EXPECT_NE(table.find("Failed requests:"), std::string::npos);
  EXPECT_NE(table.find("2 x http 503"), std::string::npos);
  EXPECT_NE(table.find("TPOT"), std::string::npos);
  const auto json = summary_json(s);
  EXPECT_EQ(json["failure_reasons"]["http 503"], 2);
  EXPECT_NEAR(json["tpot"]["mean_ms"].get<double>(), 20, 1e-9);
  const auto r = record_json(records[0]);
  EXPECT_EQ(r["itl_ms"].size(), 10u);
  EXPECT_NEAR(r["ttft_ms"].get<double>(), 50, 1e-9);
}

TEST(SvgPlot, AxesTicksOneLinePerSeriesAndLegend) {
  EXPECT_EQ(nice_ticks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_DOUBLE_EQ(nice_ticks(0, 0.7, 4).back(), 0.8);
  const std::string svg = svg_line_plot({{"pagedserve", {1, 2, 4}, {0.01, 0.02, 0.5}},
                                         {"vllm <ref>", {1, 2, 4}, {0.02, 0.04, std::nan("")}}},
                                        PlotOptions{});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  size_t lines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos;
       at = svg.find("<polyline", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 2u);
  EXPECT_NE(svg.find("vllm &lt;ref&gt;"), std::string::npos);
  EXPECT_NE(svg.find("request rate (req/s)"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

}  // namespace
}  // namespace pagedserve::loadgen
