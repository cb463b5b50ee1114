// Many clients at once: 200 concurrent streaming completions, a random third of which
// disconnect midway, on one and on two io threads. Afterwards every KV block is free again
// (pagedserve_kv_blocks_free == pagedserve_kv_blocks_total on /metrics), each request is
// counted once in pagedserve_request_success_total (the disconnected ones as "abort") and
// the server still answers.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <thread>

#include "tests/net/server/test_client.h"

namespace pagedserve::net::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr int kNumClients = 200;
constexpr int kMaxTokens = 96;

struct ClientOutcome {
  bool ok = false;
  std::string problem;
};

// Streams one completion; a leaver disconnects after `leave_after` events.
ClientOutcome run_client(uint16_t port, int leave_after) {
  const std::string body = json{{"prompt", "Once upon a time"},
                                {"max_tokens", kMaxTokens},
                                {"ignore_eos", true},
                                {"stream", true},
                                {"stream_options", {{"include_usage", true}}}}
                               .dump();
  SseClient client(port, "/v1/completions", body);
  if (client.status() != 200) return {false, "status " + std::to_string(client.status())};
  std::vector<std::string> events;
  while (std::optional<std::string> event = client.next_event()) {
    events.push_back(*event);
    if (leave_after > 0 && static_cast<int>(events.size()) == leave_after) {
      client.disconnect();
      return {true, ""};
    }
  }
  if (events.size() < 3 || events.back() != "[DONE]") return {false, "stream did not end"};
  const json usage = json::parse(events[events.size() - 2])["usage"];
  if (usage["completion_tokens"] != kMaxTokens) return {false, "usage " + usage.dump()};
  return {true, ""};
}

void run_load_test(int num_io_threads) {
  HttpServerConfig config;
  config.num_io_threads = num_io_threads;
  TestServer server(config);
  std::vector<int> leave_after(kNumClients, 0);
  std::vector<int> order(kNumClients);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(20240611);
  std::shuffle(order.begin(), order.end(), rng);
  std::uniform_int_distribution<int> midway(2, kMaxTokens / 2);
  for (int i = 0; i < kNumClients / 3; ++i) leave_after[order[i]] = midway(rng);

  std::vector<ClientOutcome> outcomes(kNumClients);
  const auto start = std::chrono::steady_clock::now();
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < kNumClients; ++i) {
      threads.emplace_back([&, i] {
        try {
          outcomes[i] = run_client(server.port(), leave_after[i]);
        } catch (const std::exception& e) {
          outcomes[i] = {false, e.what()};
        }
      });
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int num_aborted = 0;  // leavers whose request was still generating (logged as 499)
  for (const std::string& line : server.log_lines())
    num_aborted += line.find("\" 499 ") != std::string::npos;
  std::cout << "[ load ] " << kNumClients << " streaming clients x " << kMaxTokens << " tokens ("
            << kNumClients / 3 << " leaving midway, " << num_aborted << " aborted mid-stream), "
            << num_io_threads << " io threads, in " << seconds << " s\n";
  for (int i = 0; i < kNumClients; ++i)
    EXPECT_TRUE(outcomes[i].ok) << i << ": " << outcomes[i].problem;

  ASSERT_TRUE(server.wait_until_idle(30s));
  const HttpResult metrics = http_request(server.port(), "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_EQ(metric_value(metrics.body, "pagedserve_kv_blocks_free"),
            metric_value(metrics.body, "pagedserve_kv_blocks_total"));
  // Every request is counted once by how it ended: those cut off by their client's disconnect
  // as "abort", the rest as "length". A leaver is logged 499 whenever its response was cut
  // short, but when the writer lags the engine by more than the tokens left (a slow io thread:
  // sanitizer builds), the engine has already finished it as "length" when the disconnect is
  // seen; so every abort is a 499, not every 499 an abort.
  const auto finished = [&](const std::string& reason) {
    return metric_value(metrics.body,
                        "pagedserve_request_success_total{finish_reason=\"" + reason + "\"}")
        .value_or(-1);
  };
  EXPECT_LE(num_aborted, kNumClients / 3);  // only leavers are cut short
  EXPECT_LE(finished("abort"), num_aborted);
  EXPECT_GT(finished("abort"), 0);
  EXPECT_EQ(finished("abort") + finished("length"), kNumClients);
  EXPECT_EQ(http_request(server.port(), "GET", "/health").status, 200);
  EXPECT_EQ(http_request(server.port(), "POST", "/v1/completions",
                         R"({"prompt": "Once", "max_tokens": 2})")
                .status,
            200);
}

TEST(LoadTest, TwoHundredStreamingClientsAThirdDisconnecting) { run_load_test(1); }

// The same with two io threads: connections on different threads, one engine and one metrics
// registry between them.
TEST(LoadTest, TwoHundredStreamingClientsOnTwoIoThreads) { run_load_test(2); }

}  // namespace
}  // namespace pagedserve::net::testing
