// The HTTP server's answers to bad input and faults, end to end: malformed JSON and invalid
// fields (400 with OpenAI's error body), unknown model (404), unknown path (404), wrong method
// (405), oversized body (413), unparsable HTTP (400), API keys (401; /health and /metrics
// open), overload (429 with Retry-After), clients that leave mid-request or mid-stream (the
// request is aborted and its KV blocks freed), idle connections (closed), and shutdown with a
// stream in flight (it finishes).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tests/net/server/test_client.h"

namespace pagedserve::net::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const std::string kLongStream =
    R"({"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": true, "stream": true})";
const std::string kLongRequest =
    R"({"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": true})";

void expect_openai_error(const HttpResult& result, int status, const std::string& type) {
  EXPECT_EQ(result.status, status) << result.body;
  const json body = json::parse(result.body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << result.body;
  EXPECT_EQ(body["error"]["type"], type) << result.body;
  EXPECT_TRUE(body["error"]["message"].is_string()) << result.body;
}

bool logged(const TestServer& server, const std::string& fragment) {
  for (const std::string& line : server.log_lines()) {
    if (line.find(fragment) != std::string::npos) return true;
  }
  return false;
}

bool wait_for(const std::function<bool()>& done, std::chrono::milliseconds timeout = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

TEST(HttpErrorsTest, ClientErrorsGetOpenAiBodies) {
  TestServer server;
  const uint16_t port = server.port();
  expect_openai_error(http_request(port, "POST", "/v1/completions", "{\"prompt\": "), 400,
                      "invalid_request_error");
  expect_openai_error(http_request(port, "POST", "/v1/completions", "[1, 2]"), 400,
                      "invalid_request_error");
  expect_openai_error(
      http_request(port, "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": "x"})"), 400,
      "invalid_request_error");
  expect_openai_error(http_request(port, "POST", "/v1/chat/completions", R"({"messages": []})"),
                      400, "invalid_request_error");
  expect_openai_error(
      http_request(port, "POST", "/v1/completions", R"({"prompt": "a", "model": "gpt-9"})"), 404,
      "not_found_error");
  expect_openai_error(http_request(port, "GET", "/v1/nope"), 404, "not_found_error");
  // The engine's own entry check (more sequences than max_num_seqs) is a 400 too, not a 500.
  expect_openai_error(http_request(port, "POST", "/v1/completions", R"({"prompt": "a", "n": 300})"),
                      400, "invalid_request_error");
  const HttpResult wrong_method = http_request(port, "GET", "/v1/completions");
  EXPECT_EQ(wrong_method.status, 405) << wrong_method.body;
  EXPECT_EQ(http_request(port, "DELETE", "/health").status, 405);
  EXPECT_EQ(http_request(port, "GET", "/v1/stream").status, 426);
  EXPECT_TRUE(server.wait_until_idle());
}

TEST(HttpErrorsTest, OversizedBodyGets413) {
  TestServer server;
  const std::string huge = "{\"prompt\": \"" + std::string(5 << 20, 'a') + "\"}";
  expect_openai_error(http_request(server.port(), "POST", "/v1/completions", huge), 413,
                      "invalid_request_error");
  EXPECT_EQ(http_request(server.port(), "GET", "/health").status, 200);
}

TEST(HttpErrorsTest, UnparsableHttpGets400AndClose) {
  TestServer server;
  const std::string answer = raw_exchange(server.port(), "NOT AN HTTP REQUEST\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << answer;
  const std::string bad_length =
      raw_exchange(server.port(), "POST /v1/completions HTTP/1.1\r\nContent-Length: x\r\n\r\n{}");
  EXPECT_EQ(bad_length.rfind("HTTP/1.1 400", 0), 0u) << bad_length;
  EXPECT_EQ(http_request(server.port(), "GET", "/health").status, 200);
}

TEST(HttpErrorsTest, ApiKeyGuardsEverythingButHealthAndMetrics) {
  HttpServerConfig config;
  config.api_keys = {"sekret"};
  TestServer server(config);
  const uint16_t port = server.port();
  const std::string body = R"({"prompt": "Once", "max_tokens": 2})";
  expect_openai_error(http_request(port, "POST", "/v1/completions", body), 401,
                      "authentication_error");
  expect_openai_error(
      http_request(port, "POST", "/v1/completions", body, {{"Authorization", "Bearer wrong"}}), 401,
      "authentication_error");
  EXPECT_EQ(http_request(port, "GET", "/v1/models").status, 401);
  EXPECT_EQ(ws_handshake_status(port, "/v1/stream"), 401);
  EXPECT_EQ(
      http_request(port, "POST", "/v1/completions", body, {{"Authorization", "Bearer sekret"}})
          .status,
      200);
  EXPECT_EQ(http_request(port, "GET", "/health").status, 200);
  EXPECT_EQ(http_request(port, "GET", "/metrics").status, 200);
  EXPECT_EQ(ws_handshake_status(port, "/v1/stream", {{"Authorization", "Bearer sekret"}}), 101);
}

// max_num_seqs 2 + max_queued_requests 1: a fourth request while three stream gets 429 at once.
TEST(HttpErrorsTest, OverloadGets429WithRetryAfter) {
  HttpServerConfig config;
  config.max_queued_requests = 1;
  TestServer server(config, /*max_num_seqs=*/2);
  std::vector<std::unique_ptr<SseClient>> streams;
  for (int i = 0; i < 3; ++i) {
    streams.push_back(std::make_unique<SseClient>(server.port(), "/v1/completions", kLongStream));
    ASSERT_EQ(streams.back()->status(), 200);
  }
  const auto start = std::chrono::steady_clock::now();
  const HttpResult refused = http_request(server.port(), "POST", "/v1/completions", kLongRequest);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  expect_openai_error(refused, 429, "rate_limit_error");
  EXPECT_EQ(refused.headers.count("retry-after"), 1u);
  for (auto& stream : streams) stream->disconnect();
  ASSERT_TRUE(server.wait_until_idle());
  EXPECT_TRUE(wait_for([&] {
    return http_request(server.port(), "POST", "/v1/completions",
                        R"({"prompt": "Once", "max_tokens": 2})")
               .status == 200;
  }));
}

TEST(HttpErrorsTest, ClientLeavingMidStreamAbortsTheRequest) {
  TestServer server;
  SseClient client(server.port(), "/v1/completions", kLongStream);
  ASSERT_EQ(client.status(), 200);
  ASSERT_TRUE(client.next_event().has_value());
  ASSERT_TRUE(client.next_event().has_value());
  client.disconnect();
  EXPECT_TRUE(server.wait_until_idle(5s)) << "the request kept its KV blocks";
  EXPECT_TRUE(logged(server, "\"POST /v1/completions\" 499")) << "it was not aborted";
  EXPECT_EQ(http_request(server.port(), "GET", "/health").status, 200);
}

TEST(HttpErrorsTest, ClientLeavingBeforeTheAnswerAbortsTheRequest) {
  TestServer server;
  {
    HttpConnection connection(server.port());
    connection.send("POST", "/v1/completions", kLongRequest);
    ASSERT_TRUE(wait_for([&] { return server.engine().stats().num_kv_blocks_used > 0; }));
  }  // closes the socket while the request generates
  EXPECT_TRUE(server.wait_until_idle(5s)) << "the request kept its KV blocks";
  EXPECT_TRUE(logged(server, "\"POST /v1/completions\" 499")) << "it was not aborted";
}

TEST(HttpErrorsTest, IdleConnectionsTimeOut) {
  HttpServerConfig config;
  config.idle_timeout = 1s;
  TestServer server(config);
  HttpConnection connection(server.port());
  EXPECT_EQ(connection.request("GET", "/health").status, 200);
  EXPECT_TRUE(connection.closed_by_server(5s));
}

TEST(HttpErrorsTest, StopLetsStreamsInFlightFinish) {
  TestServer server;
  SseClient client(server.port(), "/v1/completions",
                   R"({"prompt": "Once upon a time", "max_tokens": 60, "ignore_eos": true,
                       "stream": true})");
  ASSERT_EQ(client.status(), 200);
  ASSERT_TRUE(client.next_event().has_value());
  std::thread stopper([&] { server.server().stop(); });
  std::vector<std::string> rest;
  while (std::optional<std::string> event = client.next_event()) rest.push_back(*event);
  stopper.join();
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back(), "[DONE]");
  EXPECT_EQ(json::parse(rest[rest.size() - 2])["choices"][0]["finish_reason"], "length");
  EXPECT_THROW(http_request(server.port(), "GET", "/health"), std::exception);
}

}  // namespace
}  // namespace pagedserve::net::testing
