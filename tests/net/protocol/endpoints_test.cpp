// Tests for /v1/models, /health, /version, /tokenize, /detokenize and the small router.
#include <gtest/gtest.h>

#include "net/protocol/endpoints.h"
#include "tests/net/protocol/protocol_fixtures.h"

namespace pagedserve::net {
namespace {

using nlohmann::json;
using testing::smollm_model;
using testing::smollm_tokenizer;
using testing::stories_model;
using testing::stories_tokenizer;

void expect_error(const HttpResponse& r, int status, const std::string& param) {
  EXPECT_EQ(r.status, status) << r.body;
  const json body = json::parse(r.body);
  if (param.empty()) {
    EXPECT_TRUE(body["error"]["param"].is_null()) << r.body;
  } else {
    EXPECT_EQ(body["error"]["param"], param) << r.body;
  }
}

TEST(EndpointsTest, Models) {
  const HttpResponse r = models_response(stories_model(512));
  EXPECT_EQ(r.status, 200);
  const json expected = {{"object", "list"},
                         {"data",
                          {{{"id", "stories260K"},
                            {"object", "model"},
                            {"created", 1700000000},
                            {"owned_by", "pagedserve"},
                            {"root", "stories260K"},
                            {"max_model_len", 512}}}}};
  EXPECT_EQ(json::parse(r.body), expected);
}

TEST(EndpointsTest, HealthAndVersion) {
  const HttpResponse health = health_response();
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, "");
  EXPECT_EQ(health.content_type, "");
  const HttpResponse version = version_response();
  EXPECT_EQ(version.status, 200);
  EXPECT_EQ(version.body, R"({"version":"0.1.0"})");
}

TEST(EndpointsTest, TokenizePrompt) {
  const ServedModel served = stories_model(512);
  HttpResponse r = tokenize_response(R"({"prompt": "Once upon a time"})", served);
  ASSERT_EQ(r.status, 200) << r.body;
  json body = json::parse(r.body);
  const std::vector<int32_t> ids = stories_tokenizer().encode("Once upon a time", true);
  EXPECT_EQ(body["tokens"].get<std::vector<int32_t>>(), ids);
  EXPECT_EQ(body["count"], ids.size());
  EXPECT_EQ(body["max_model_len"], 512);
  r = tokenize_response(
      R"({"prompt": "Once", "add_special_tokens": false, "model": "stories260K"})", served);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["tokens"].get<std::vector<int32_t>>(),
            stories_tokenizer().encode("Once", false));
}

TEST(EndpointsTest, TokenizeMessagesMatchesTheChatPrompt) {
  const json golden = testing::read_jsonl(testing::smollm_dir() / "chat_golden.jsonl").front();
  ASSERT_TRUE(golden["add_generation_prompt"].get<bool>());
  const HttpResponse r =
      tokenize_response(json({{"messages", golden["messages"]}}).dump(), smollm_model());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["tokens"], golden["ids"]);
}

TEST(EndpointsTest, TokenizeErrors) {
  const ServedModel served = stories_model();
  expect_error(tokenize_response("{}", served), 400, "prompt");
  expect_error(tokenize_response(R"({"prompt": "a", "messages": []})", served), 400, "prompt");
  expect_error(tokenize_response(R"({"prompt": 5})", served), 400, "prompt");
  expect_error(tokenize_response(R"({"prompt": "a", "add_special_tokens": "no"})", served), 400,
               "add_special_tokens");
  expect_error(tokenize_response(R"({"messages": []})", served), 400, "messages");
  expect_error(tokenize_response("{\"prompt\": \"\xff\"}", served), 400, "");
  expect_error(tokenize_response("nope", served), 400, "");
  expect_error(tokenize_response(R"({"prompt": "a", "model": "x"})", served), 404, "model");
}

TEST(EndpointsTest, Detokenize) {
  const ServedModel served = smollm_model();
  const std::vector<int32_t> ids = smollm_tokenizer().encode("Hello, world!", false);
  const HttpResponse r = detokenize_response(json({{"tokens", ids}}).dump(), served);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body), json({{"prompt", "Hello, world!"}}));
  expect_error(detokenize_response("{}", served), 400, "tokens");
  expect_error(detokenize_response(R"({"tokens": "1 2"})", served), 400, "tokens");
  expect_error(detokenize_response(R"({"tokens": [1, 1.5]})", served), 400, "tokens");
  expect_error(detokenize_response(R"({"tokens": [49152]})", served), 400, "tokens");
  expect_error(detokenize_response(R"({"tokens": [-1]})", served), 400, "tokens");
}

TEST(EndpointsTest, Router) {
  const ServedModel served = stories_model();
  EXPECT_EQ(route_simple_endpoint("GET", "/health", "", served)->status, 200);
  EXPECT_EQ(route_simple_endpoint("GET", "/version?x=1", "", served)->body,
            R"({"version":"0.1.0"})");
  EXPECT_EQ(route_simple_endpoint("GET", "/v1/models", "", served)->status, 200);
  EXPECT_EQ(route_simple_endpoint("POST", "/tokenize", R"({"prompt": "a"})", served)->status, 200);
  EXPECT_EQ(route_simple_endpoint("POST", "/detokenize", R"({"tokens": [1]})", served)->status,
            200);
  expect_error(*route_simple_endpoint("POST", "/health", "", served), 405, "");
  expect_error(*route_simple_endpoint("GET", "/tokenize", "", served), 405, "");
  EXPECT_FALSE(route_simple_endpoint("POST", "/v1/completions", "{}", served));
  EXPECT_FALSE(route_simple_endpoint("GET", "/metrics", "", served));
  const HttpResponse missing = not_found_response("/nope");
  expect_error(missing, 404, "");
  EXPECT_EQ(json::parse(missing.body)["error"]["type"], "not_found_error");
}

}  // namespace
}  // namespace pagedserve::net
