// The HTTP server end to end on stories260K (an in-process Engine and HttpServer on an
// ephemeral port, Beast clients): completions and chat as JSON and as server-sent events
// streamed token by token, the small endpoints and /metrics, keep-alive, and HEAD.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/net/server/test_client.h"

namespace pagedserve::net::testing {
namespace {

using nlohmann::json;

std::string completion_body(int max_tokens, bool stream, bool ignore_eos = false) {
  return json{{"prompt", "Once upon a time"},
              {"max_tokens", max_tokens},
              {"temperature", 0},
              {"stream", stream},
              {"ignore_eos", ignore_eos}}
      .dump();
}

std::string chat_body(int max_tokens, bool stream) {
  return json{{"messages", {{{"role", "user"}, {"content", "Tell me a story."}}}},
              {"max_tokens", max_tokens},
              {"temperature", 0},
              {"stream", stream}}
      .dump();
}

// Reads a whole SSE stream; returns the data payloads, "[DONE]" included.
std::vector<std::string> read_all_events(SseClient& client) {
  std::vector<std::string> events;
  while (std::optional<std::string> event = client.next_event()) events.push_back(*event);
  return events;
}

TEST(HttpServerTest, CompletionReturnsOpenAiBody) {
  TestServer server;
  const HttpResult result =
      http_request(server.port(), "POST", "/v1/completions", completion_body(16, false));
  ASSERT_EQ(result.status, 200) << result.body;
  EXPECT_EQ(result.headers.at("content-type"), "application/json");
  const json body = json::parse(result.body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], "stories260K");
  ASSERT_EQ(body["choices"].size(), 1u);
  EXPECT_FALSE(body["choices"][0]["text"].get<std::string>().empty());
  EXPECT_GT(body["usage"]["completion_tokens"].get<int>(), 0);
  EXPECT_LE(body["usage"]["completion_tokens"].get<int>(), 16);
  EXPECT_TRUE(server.wait_until_idle());
}

TEST(HttpServerTest, ChatReturnsAssistantMessage) {
  TestServer server;
  const HttpResult result =
      http_request(server.port(), "POST", "/v1/chat/completions", chat_body(12, false));
  ASSERT_EQ(result.status, 200) << result.body;
  const json body = json::parse(result.body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(body["choices"][0]["message"]["content"].is_string());
}

// The stream's chunks concatenate to the non-streamed (greedy) text, and the first chunk
// arrives while the engine is still generating.
TEST(HttpServerTest, CompletionStreamsTokenByToken) {
  TestServer server;
  const HttpResult whole =
      http_request(server.port(), "POST", "/v1/completions", completion_body(300, false, true));
  ASSERT_EQ(whole.status, 200) << whole.body;
  const std::string expected = json::parse(whole.body)["choices"][0]["text"];

  SseClient client(server.port(), "/v1/completions", completion_body(300, true, true));
  ASSERT_EQ(client.status(), 200);
  EXPECT_EQ(client.headers().at("content-type"), "text/event-stream");
  std::optional<std::string> first = client.next_event();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(server.engine().stats().num_unfinished_requests, 1) << "first chunk came at the end";
  std::vector<std::string> events{*first};
  for (const std::string& event : read_all_events(client)) events.push_back(event);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  int num_content_chunks = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    const std::string piece = chunk["choices"][0]["text"];
    num_content_chunks += piece.empty() ? 0 : 1;
    text += piece;
  }
  EXPECT_EQ(text, expected);
  EXPECT_GT(num_content_chunks, 10);
  EXPECT_TRUE(server.wait_until_idle());
}

TEST(HttpServerTest, ChatStreamStartsWithRoleAndEndsWithDone) {
  TestServer server;
  SseClient client(server.port(), "/v1/chat/completions", chat_body(8, true));
  ASSERT_EQ(client.status(), 200);
  const std::vector<std::string> events = read_all_events(client);
  ASSERT_GE(events.size(), 3u);
  const json first = json::parse(events.front());
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_FALSE(json::parse(events[events.size() - 2])["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(events.back(), "[DONE]");
}

TEST(HttpServerTest, SmallEndpoints) {
  TestServer server;
  const HttpResult models = http_request(server.port(), "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(json::parse(models.body)["data"][0]["id"], "stories260K");
  EXPECT_EQ(http_request(server.port(), "GET", "/health").status, 200);
  EXPECT_EQ(json::parse(http_request(server.port(), "GET", "/version").body)["version"], "0.1.0");

  const HttpResult tokens =
      http_request(server.port(), "POST", "/tokenize", R"({"prompt": "Once upon a time"})");
  ASSERT_EQ(tokens.status, 200) << tokens.body;
  const json ids = json::parse(tokens.body)["tokens"];
  EXPECT_GT(ids.size(), 1u);
  const HttpResult text =
      http_request(server.port(), "POST", "/detokenize", json{{"tokens", ids}}.dump());
  ASSERT_EQ(text.status, 200) << text.body;
  EXPECT_NE(json::parse(text.body)["prompt"].get<std::string>().find("Once upon a time"),
            std::string::npos);
}

TEST(HttpServerTest, MetricsShowEngineGaugesAndRequestCounters) {
  TestServer server;
  ASSERT_EQ(
      http_request(server.port(), "POST", "/v1/completions", completion_body(4, false)).status,
      200);
  ASSERT_TRUE(server.wait_until_idle());
  const HttpResult metrics = http_request(server.port(), "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.headers.at("content-type").find("text/plain"), std::string::npos);
  EXPECT_EQ(metric_value(metrics.body, "pagedserve_kv_blocks_total"), 1024.0);
  EXPECT_EQ(metric_value(metrics.body, "pagedserve_kv_blocks_free"), 1024.0);
  EXPECT_GT(metric_value(metrics.body, "pagedserve_generation_tokens_total").value_or(0), 0.0);
  EXPECT_NE(metrics.body.find("pagedserve_time_to_first_token_seconds_bucket"), std::string::npos);
}

TEST(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  TestServer server;
  HttpConnection connection(server.port());
  EXPECT_EQ(connection.request("GET", "/health").status, 200);
  EXPECT_EQ(connection.request("POST", "/v1/completions", "{not json").status, 400);
  EXPECT_EQ(connection.request("POST", "/v1/completions", completion_body(4, false)).status, 200);
  EXPECT_EQ(connection.request("GET", "/v1/models").status, 200);
}

TEST(HttpServerTest, StreamOnKeepAliveConnectionThenAnotherRequest) {
  TestServer server;
  HttpConnection connection(server.port());
  const HttpResult streamed =
      connection.request("POST", "/v1/completions", completion_body(6, true));
  ASSERT_EQ(streamed.status, 200);
  EXPECT_NE(streamed.body.find("data: [DONE]\n\n"), std::string::npos);
  EXPECT_EQ(connection.request("GET", "/health").status, 200);
}

TEST(HttpServerTest, HeadAnswersWithoutBody) {
  TestServer server;
  const std::string answer =
      raw_exchange(server.port(), "HEAD /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_EQ(answer.find("\"version\""), std::string::npos) << answer;
}

TEST(HttpServerTest, LogsOneLinePerRequest) {
  TestServer server;
  ASSERT_EQ(http_request(server.port(), "GET", "/health").status, 200);
  ASSERT_EQ(
      http_request(server.port(), "POST", "/v1/completions", completion_body(3, false)).status,
      200);
  const std::vector<std::string> lines = server.log_lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("\"GET /health\" 200"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("\"POST /v1/completions\" 200"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("completion_tokens="), std::string::npos) << lines[1];
}

}  // namespace
}  // namespace pagedserve::net::testing
