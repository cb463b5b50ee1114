// The load generator's HTTP client against a fake server with fixed token delays: measured
// TTFT, TPOT, ITL and throughput match the delays; replay with --time-scale keeps its
// schedule; failures are counted with reasons; --max-concurrency caps the streams.
#include <gtest/gtest.h>

#include "tests/loadgen/fake_openai_server.h"
#include "tools/loadgen/client.h"
#include "tools/loadgen/schedule.h"

namespace pagedserve::loadgen {
namespace {

using namespace std::chrono_literals;

std::vector<OutgoingRequest> requests(size_t count, int max_tokens) {
  std::vector<TraceRequest> trace(count);
  for (TraceRequest& t : trace) {
    t.prompt_tokens = 16;
    t.max_tokens = max_tokens;
  }
  PromptOptions options;
  options.vocab_size = 100;
  options.model = "fake";
  return build_requests(trace, options);
}

RunOptions quiet(const std::string& url) {
  RunOptions options;
  options.base_url = url;
  options.progress = false;
  return options;
}

// Generous for a loaded 2-core CI machine; sanitizer and Debug builds (run with ctest -j2 in
// CI) get twice as much, and wider arrival bounds below.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(NDEBUG)
constexpr double kToleranceMs = 30.0;
constexpr double kTokenToleranceMs = 6.0;
constexpr double kArrivalToleranceMs = 40.0;
#else
constexpr double kToleranceMs = 15.0;
constexpr double kTokenToleranceMs = 3.0;
// 20 ms was exceeded once (20.7 ms) under the full ctest -j2; arrivals are 75 ms apart.
constexpr double kArrivalToleranceMs = 30.0;
#endif

TEST(HttpClient, TimingsMatchTheServersTokenDelays) {
  testing::FakeOpenAiServer server({50ms, 10ms, 0});
  const RunResult run =
      run_load(quiet(server.base_url()), requests(8, 10), rate_arrivals(8, 200, 1, 1));
  const Summary s = summarize(run.records, run.duration_s);
  ASSERT_EQ(s.completed, 8) << format_summary(s, "run");
  EXPECT_EQ(s.total_output_tokens, 80);
  EXPECT_EQ(s.total_input_tokens, 8 * 16);
  EXPECT_NEAR(s.ttft.mean_ms, 50, kToleranceMs);
  EXPECT_GE(s.ttft.p50_ms, 49);
  EXPECT_NEAR(s.tpot.mean_ms, 10, kTokenToleranceMs);
  EXPECT_NEAR(s.itl.p50_ms, 10, kTokenToleranceMs);
  EXPECT_NEAR(s.e2e.mean_ms, 50 + 9 * 10, kToleranceMs);
  EXPECT_NEAR(s.output_token_throughput, 80 / run.duration_s, 1e-6);
  EXPECT_GT(run.duration_s, 0.14);
  EXPECT_LT(run.duration_s, 0.14 + 0.035 + 0.15);  // last arrival ~35 ms + slack
  for (const RequestRecord& r : run.records) {
    EXPECT_EQ(r.chunk_s.size(), 10u);
    EXPECT_NEAR(1e3 * r.latency_s() / r.output_tokens, 14, kToleranceMs / 7.5);  // 140 ms / 10
  }
}

TEST(HttpClient, ReplayWithTimeScaleTenArrivesOnSchedule) {
  testing::FakeOpenAiServer server({5ms, 1ms, 0});
  std::vector<double> timestamps;
  for (int i = 0; i < 12; ++i) timestamps.push_back(100.0 + 0.75 * i + (i % 3) * 0.2);
  const std::vector<double> arrivals = replay_arrivals(timestamps, 10.0);
  const RunResult run = run_load(quiet(server.base_url()), requests(12, 2), arrivals);
  const Summary s = summarize(run.records, run.duration_s);
  ASSERT_EQ(s.completed, 12);
  EXPECT_LT(s.send_lag.max_ms, kArrivalToleranceMs);
  const auto seen = server.arrivals();
  ASSERT_EQ(seen.size(), 12u);
  for (size_t i = 0; i < seen.size(); ++i) {
    const double gap_ms = std::chrono::duration<double, std::milli>(seen[i] - seen[0]).count();
    EXPECT_NEAR(gap_ms, 1e3 * arrivals[i], kArrivalToleranceMs) << i;  // own connection each
  }
}

TEST(HttpClient, FailuresAreCountedWithTheServersReason) {
  testing::FakeOpenAiServer server({1ms, 1ms, 3});
  const RunResult run =
      run_load(quiet(server.base_url()), requests(9, 3), rate_arrivals(9, 1e9, 1, 0));
  const Summary s = summarize(run.records, run.duration_s);
  EXPECT_EQ(s.completed, 6);
  EXPECT_EQ(s.failed, 3);
  EXPECT_EQ(s.failure_reasons.at("http 503: overloaded"), 3);
}

TEST(HttpClient, ConnectionRefusedIsAFailureNotAHang) {
  std::string url;
  { url = testing::FakeOpenAiServer({}).base_url(); }  // the port is closed again
  const RunResult run = run_load(quiet(url), requests(2, 3), {0.0, 0.0});
  const Summary s = summarize(run.records, run.duration_s);
  EXPECT_EQ(s.failed, 2);
  EXPECT_EQ(s.failure_reasons.begin()->first.rfind("connect: ", 0), 0u);
}

TEST(HttpClient, MaxConcurrencyCapsStreamsButKeepsTheArrivalClock) {
  testing::FakeOpenAiServer server({20ms, 5ms, 0});
  RunOptions options = quiet(server.base_url());
  options.max_concurrency = 2;
  const RunResult run = run_load(options, requests(6, 4), std::vector<double>(6, 0.0));
  const Summary s = summarize(run.records, run.duration_s);
  EXPECT_EQ(s.completed, 6);
  EXPECT_EQ(server.max_in_flight(), 2);
  EXPECT_GT(s.send_lag.max_ms, 50);  // the last pair waited for two earlier pairs
}

TEST(BaseUrl, Parses) {
  const BaseUrl a = parse_base_url("http://localhost:8000/api/");
  EXPECT_EQ(a.host, "localhost");
  EXPECT_EQ(a.port, "8000");
  EXPECT_EQ(a.path_prefix, "/api");
  EXPECT_EQ(parse_base_url("http://10.0.0.1").port, "80");
  EXPECT_THROW(parse_base_url("https://x"), std::invalid_argument);
}

}  // namespace
}  // namespace pagedserve::loadgen
