// The limits an operator sets on the server, each over a real socket: --max-prompt-tokens
// (400 naming the limit, exact at the boundary), --max-n and --max-best-of (400 naming the
// field), --max-ws-streams (an error frame for the extra request, the socket stays open),
// --max-header-bytes (431 with an error body) and --max-requests-per-connection (the N-th
// answer says "Connection: close" and the server closes).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/net/server/test_client.h"

namespace pagedserve::net::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// A prompt of exactly `count` token ids (all inside stories260K's 512-token vocabulary).
json token_prompt(int count) {
  json ids = json::array();
  for (int i = 0; i < count; ++i) ids.push_back(100 + i);
  return ids;
}

json parse(const HttpResult& result) { return json::parse(result.body, nullptr, false); }

TEST(LimitsTest, MaxPromptTokensIsExactAndNamed) {
  HttpServerConfig config;
  config.request_limits.max_prompt_tokens = 8;
  TestServer server(config);
  const uint16_t port = server.port();
  const json at_limit = {{"prompt", token_prompt(8)}, {"max_tokens", 2}};
  const HttpResult ok = http_request(port, "POST", "/v1/completions", at_limit.dump());
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(parse(ok)["usage"]["prompt_tokens"], 8);

  const json over = {{"prompt", token_prompt(9)}, {"max_tokens", 2}};
  const HttpResult refused = http_request(port, "POST", "/v1/completions", over.dump());
  EXPECT_EQ(refused.status, 400) << refused.body;
  const json error = parse(refused)["error"];
  EXPECT_EQ(error["param"], "prompt") << refused.body;
  EXPECT_EQ(error["code"], "prompt_too_long") << refused.body;
  const std::string message = error["message"];
  EXPECT_NE(message.find("9 tokens"), std::string::npos) << message;
  EXPECT_NE(message.find("limit of 8"), std::string::npos) << message;
  EXPECT_NE(message.find("--max-prompt-tokens"), std::string::npos) << message;

  // Chat: the rendered conversation counts (the template alone is longer than 8 tokens).
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Hello there, how are you?"}}}},
                     {"max_tokens", 2}};
  const HttpResult chat_refused = http_request(port, "POST", "/v1/chat/completions", chat.dump());
  EXPECT_EQ(chat_refused.status, 400) << chat_refused.body;
  EXPECT_EQ(parse(chat_refused)["error"]["param"], "messages") << chat_refused.body;

  // The WebSocket start frame goes through the same parser: an error frame, same code.
  WsClient client(port);
  client.send(json{{"type", "completion"}, {"id", "long"}, {"prompt", token_prompt(9)}}.dump());
  const std::optional<std::string> frame = client.read();
  ASSERT_TRUE(frame.has_value());
  const json ws_error = json::parse(*frame);
  EXPECT_EQ(ws_error["type"], "error") << *frame;
  EXPECT_EQ(ws_error["id"], "long") << *frame;
  EXPECT_EQ(ws_error["error"]["code"], "prompt_too_long") << *frame;
  EXPECT_TRUE(server.wait_until_idle());
}

TEST(LimitsTest, MaxNAndMaxBestOfNameTheField) {
  HttpServerConfig config;
  config.request_limits.max_n = 2;
  config.request_limits.max_best_of = 3;
  TestServer server(config);
  const uint16_t port = server.port();
  const auto ask = [port](const json& extra) {
    json body = {{"prompt", "Once upon a time"}, {"max_tokens", 2}};
    body.update(extra);
    return http_request(port, "POST", "/v1/completions", body.dump());
  };
  const HttpResult two = ask({{"n", 2}});
  ASSERT_EQ(two.status, 200) << two.body;
  EXPECT_EQ(parse(two)["choices"].size(), 2u);

  const HttpResult three = ask({{"n", 3}});
  EXPECT_EQ(three.status, 400) << three.body;
  EXPECT_EQ(parse(three)["error"]["param"], "n");
  EXPECT_NE(three.body.find("at most 2"), std::string::npos) << three.body;
  EXPECT_NE(three.body.find("--max-n"), std::string::npos) << three.body;

  EXPECT_EQ(ask({{"n", 1}, {"best_of", 3}}).status, 200);
  const HttpResult four = ask({{"n", 1}, {"best_of", 4}});
  EXPECT_EQ(four.status, 400) << four.body;
  EXPECT_EQ(parse(four)["error"]["param"], "best_of");
  EXPECT_NE(four.body.find("--max-best-of"), std::string::npos) << four.body;
  EXPECT_TRUE(server.wait_until_idle());
}

std::string ws_start(const std::string& id, int max_tokens) {
  return json{{"type", "completion"},     {"id", id},           {"prompt", "Once upon a time"},
              {"max_tokens", max_tokens}, {"ignore_eos", true}, {"temperature", 0}}
      .dump();
}

json read_frame(WsClient& client) {
  std::optional<std::string> text = client.read();
  return text ? json::parse(*text) : json();
}

// Reads frames until `id`'s done or error frame; returns it (null if the socket closed).
json wait_for_end(WsClient& client, const std::string& id) {
  for (json frame = read_frame(client); frame.is_object(); frame = read_frame(client)) {
    if (frame["id"] == id && (frame["type"] == "done" || frame["type"] == "error")) return frame;
  }
  return json();
}

TEST(LimitsTest, MaxWsStreamsRefusesTheExtraRequestAndKeepsTheSocket) {
  HttpServerConfig config;
  config.ws_max_streams = 2;
  TestServer server(config);
  WsClient client(server.port());
  client.send(ws_start("a", 400));
  client.send(ws_start("b", 400));
  client.send(ws_start("c", 400));
  const json refused = wait_for_end(client, "c");
  ASSERT_TRUE(refused.is_object());
  EXPECT_EQ(refused["type"], "error") << refused.dump();
  EXPECT_EQ(refused["error"]["code"], "too_many_streams") << refused.dump();
  EXPECT_NE(refused["error"]["message"].get<std::string>().find("--max-ws-streams"),
            std::string::npos);
  // a and b were not disturbed; once one of them ends, a new request is accepted.
  client.send(R"({"type": "cancel", "id": "a"})");
  EXPECT_EQ(wait_for_end(client, "a")["finish_reason"], "abort");
  client.send(ws_start("d", 3));
  const json d_done = wait_for_end(client, "d");
  EXPECT_EQ(d_done["type"], "done") << d_done.dump();
  EXPECT_EQ(d_done["usage"]["completion_tokens"], 3);
  client.send(R"({"type": "cancel", "id": "b"})");
  EXPECT_EQ(wait_for_end(client, "b")["finish_reason"], "abort");
  EXPECT_TRUE(server.wait_until_idle());
}

TEST(LimitsTest, MaxHeaderBytesGets431WithABody) {
  HttpServerConfig config;
  config.max_header_bytes = 2048;
  TestServer server(config);
  const uint16_t port = server.port();
  EXPECT_EQ(http_request(port, "GET", "/health", "", {{"X-Filler", std::string(1500, 'a')}}).status,
            200);
  const std::string answer = raw_exchange(
      port, "GET /health HTTP/1.1\r\nHost: x\r\nX-Filler: " + std::string(3000, 'a') + "\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 431", 0), 0u) << answer.substr(0, 200);
  const size_t body_start = answer.find("\r\n\r\n");
  ASSERT_NE(body_start, std::string::npos);
  const json body = json::parse(answer.substr(body_start + 4), nullptr, false);
  ASSERT_TRUE(body.is_object()) << answer;
  EXPECT_EQ(body["error"]["code"], "header_too_large");
  EXPECT_NE(body["error"]["message"].get<std::string>().find("2048 bytes"), std::string::npos);
  EXPECT_EQ(http_request(port, "GET", "/health").status, 200);
}

TEST(LimitsTest, MaxRequestsPerConnectionClosesAfterTheNth) {
  HttpServerConfig config;
  config.max_requests_per_connection = 3;
  TestServer server(config);
  HttpConnection connection(server.port());
  for (int i = 1; i <= 2; ++i) {
    const HttpResult result = connection.request("GET", "/health");
    EXPECT_EQ(result.status, 200);
    EXPECT_EQ(result.headers.count("connection"), 0u) << "request " << i;  // HTTP/1.1 keep-alive
  }
  const HttpResult third =
      connection.request("POST", "/v1/completions", R"({"prompt": "Once", "max_tokens": 2})");
  EXPECT_EQ(third.status, 200) << third.body;
  EXPECT_EQ(third.headers.at("connection"), "close");
  EXPECT_TRUE(connection.closed_by_server(20s));
}

TEST(LimitsTest, RequestsPerConnectionUnlimitedByDefault) {
  TestServer server;
  HttpConnection connection(server.port());
  for (int i = 0; i < 50; ++i) {
    const HttpResult result = connection.request("GET", "/health");
    ASSERT_EQ(result.status, 200);
    ASSERT_EQ(result.headers.count("connection"), 0u) << "request " << i;
  }
}

}  // namespace
}  // namespace pagedserve::net::testing
