// Logprobs over HTTP end to end on stories260K: completions (non-streaming) and chat (SSE)
// carry OpenAI's logprobs shapes with one entry per generated token.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/net/server/test_client.h"

namespace pagedserve::net::testing {
namespace {

using nlohmann::json;

// Logprobs over HTTP: the shapes, one entry per generated token, and greedy's token being
// its own best candidate. (Their values are checked against a reference forward pass in
// tests/actors/logprobs_test.cpp.)
TEST(HttpLogprobsTest, CompletionsAndChatCarryLogprobs) {
  TestServer server;
  const HttpResult completion = http_request(
      server.port(), "POST", "/v1/completions",
      json{{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}, {"logprobs", 3}}
          .dump());
  ASSERT_EQ(completion.status, 200) << completion.body;
  const json body = json::parse(completion.body);
  const json& lp = body["choices"][0]["logprobs"];
  const size_t n = body["usage"]["completion_tokens"].get<size_t>();
  ASSERT_GT(n, 0u);
  ASSERT_EQ(lp["tokens"].size(), n);
  ASSERT_EQ(lp["token_logprobs"].size(), n);
  ASSERT_EQ(lp["top_logprobs"].size(), n);
  ASSERT_EQ(lp["text_offset"].size(), n);
  for (size_t i = 0; i < n; ++i) {
    const json& top = lp["top_logprobs"][i];
    EXPECT_GE(top.size(), 3u);
    EXPECT_LE(top.size(), 4u);
    const double chosen = lp["token_logprobs"][i];
    EXPECT_LE(chosen, 0.0);
    double best = -1e9;
    for (const auto& [token, value] : top.items()) best = std::max(best, value.get<double>());
    EXPECT_DOUBLE_EQ(chosen, best) << "greedy picks the most likely token";
    EXPECT_EQ(top[lp["tokens"][i].get<std::string>()], chosen);
  }
  EXPECT_EQ(lp["text_offset"][0], 0);

  SseClient stream(server.port(), "/v1/chat/completions",
                   json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                        {"max_tokens", 10},
                        {"temperature", 0},
                        {"logprobs", true},
                        {"top_logprobs", 2},
                        {"stream", true},
                        {"stream_options", {{"include_usage", true}}}}
                       .dump());
  ASSERT_EQ(stream.status(), 200);
  size_t num_entries = 0;
  std::vector<std::string> events;
  while (std::optional<std::string> event = stream.next_event()) events.push_back(*event);
  ASSERT_GE(events.size(), 3u);
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    const json& logprobs = chunk["choices"][0]["logprobs"];
    if (logprobs.is_null()) continue;
    for (const json& entry : logprobs["content"]) {
      ++num_entries;
      EXPECT_TRUE(entry["token"].is_string());
      EXPECT_TRUE(entry["bytes"].is_array());
      EXPECT_EQ(entry["top_logprobs"].size(), 2u);
      EXPECT_EQ(entry["top_logprobs"][0]["logprob"], entry["logprob"]);
    }
  }
  EXPECT_EQ(num_entries,
            json::parse(events[events.size() - 2])["usage"]["completion_tokens"].get<size_t>());
}

}  // namespace
}  // namespace pagedserve::net::testing
