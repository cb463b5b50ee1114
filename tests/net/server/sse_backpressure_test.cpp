// SSE backpressure end to end: a client that stops reading (a tiny socket receive buffer)
// while its stream would produce megabytes. The server queues at most sse_max_queued_events
// events for it, then cancels its requests: every KV block is free again while the client is
// still connected and still not reading, the aborts are counted in
// pagedserve_request_success_total{finish_reason="abort"}, and when the client reads again it
// gets the "slow_reader" error event and [DONE].
#include <gtest/gtest.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/net/server/test_client.h"

namespace pagedserve::net::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr int kMaxTokens = 450;

TEST(SseBackpressureTest, SlowReaderIsCancelledAndItsBlocksFreed) {
  HttpServerConfig config;
  config.sse_max_queued_events = 160;  // four steps' worth of events for its 16 choices
  TestServer server(config);
  // 4 prompts x n = 4: 16 choices of 450 tokens, each chunk with 20 top logprobs (about a
  // kilobyte): several megabytes of events, far more than the socket buffers hold.
  const std::string body = json{
      {"prompt", {"Once upon a time", "Lily and Tom", "One day", "The sun"}},
      {"n", 4},
      {"max_tokens", kMaxTokens},
      {"ignore_eos", true},
      {"temperature", 1.0},
      {"seed", 3},
      {"logprobs", 20},
      {"stream", true}}.dump();
  SseClient client(server.port(), "/v1/completions", body, {}, 4096);
  ASSERT_EQ(client.status(), 200);
  ASSERT_TRUE(client.next_event().has_value());

  // The client reads nothing more; the server must give up on it on its own.
  ASSERT_TRUE(server.wait_until_idle(120s)) << "the slow reader's requests still hold blocks";
  const HttpResult metrics = http_request(server.port(), "GET", "/metrics");
  EXPECT_EQ(metric_value(metrics.body, "pagedserve_kv_blocks_free"),
            metric_value(metrics.body, "pagedserve_kv_blocks_total"));
  EXPECT_EQ(metric_value(metrics.body, "pagedserve_request_success_total{finish_reason=\"abort\"}"),
            4.0)
      << metrics.body;
  EXPECT_EQ(
      metric_value(metrics.body, "pagedserve_request_success_total{finish_reason=\"length\"}"),
      0.0);

  // Reading again: what the socket buffers held, then the error and [DONE].
  std::vector<std::string> events;
  while (std::optional<std::string> event = client.next_event()) events.push_back(*event);
  ASSERT_GE(events.size(), 2u) << (events.empty() ? "" : events.back());
  EXPECT_EQ(events.back(), "[DONE]");
  const json error = json::parse(events[events.size() - 2]);
  EXPECT_EQ(error["error"]["code"], "slow_reader") << error.dump();
  EXPECT_LT(events.size(), 16u * kMaxTokens) << "the stream was not cut short";
  std::cout << "[ slow reader ] " << events.size() - 1 << " events reached the client (of "
            << 16 * kMaxTokens << " tokens asked for) before slow_reader\n";

  bool logged = false;
  for (const std::string& line : server.log_lines()) {
    logged |= line.find("/v1/completions") != std::string::npos &&
              line.find("slow_reader") != std::string::npos;
  }
  EXPECT_TRUE(logged);
  EXPECT_EQ(http_request(server.port(), "GET", "/health").status, 200);
}

// A stream that fits the bound is delivered whole, with the bound in place. The bound is not
// set below the stream's length (130 events): the engine makes a stories260K token in
// microseconds, and with the io thread starved of CPU (ctest -j2 on 2 cores) the writer can
// fall behind a reader that is reading by any number of events, so a tighter bound would cut
// it off. Coalescing a stream's queued deltas into one chunk would let a tight bound work.
TEST(SseBackpressureTest, ReaderThatKeepsUpGetsEverything) {
  HttpServerConfig config;
  config.sse_max_queued_events = 160;
  TestServer server(config);
  const std::string body = json{{"prompt", "Once upon a time"},
                                {"max_tokens", 128},
                                {"ignore_eos", true},
                                {"temperature", 0},
                                {"stream", true},
                                {"stream_options", {{"include_usage", true}}}}
                               .dump();
  SseClient client(server.port(), "/v1/completions", body);
  std::vector<std::string> events;
  while (std::optional<std::string> event = client.next_event()) events.push_back(*event);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(json::parse(events[events.size() - 2])["usage"]["completion_tokens"], 128)
      << events[events.size() - 2] << " / " << events.size() << " events";
}

}  // namespace
}  // namespace pagedserve::net::testing
