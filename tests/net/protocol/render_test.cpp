// Tests for POST /v1/completions/render and /v1/chat/completions/render: the token ids against
// Hugging Face's own (the tokenizer goldens: `tokenizers` for text, transformers'
// apply_chat_template for chat), against /tokenize, vLLM's response shape, and the errors.
#include <gtest/gtest.h>

#include "net/protocol/endpoints.h"
#include "net/protocol/render.h"
#include "tests/net/protocol/protocol_fixtures.h"

namespace pagedserve::net {
namespace {

using nlohmann::json;
using testing::read_jsonl;
using testing::smollm_dir;
using testing::smollm_model;

json render_ok(Endpoint endpoint, const json& body, const ServedModel& served) {
  const HttpResponse r = render_response(endpoint, body.dump(), served);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
  return json::parse(r.body);
}

void expect_error(const HttpResponse& r, int status, const std::string& param) {
  EXPECT_EQ(r.status, status) << r.body;
  const json body = json::parse(r.body);
  ASSERT_TRUE(body.contains("error")) << r.body;
  EXPECT_FALSE(body["error"]["message"].get<std::string>().empty());
  if (param.empty()) {
    EXPECT_TRUE(body["error"]["param"].is_null()) << r.body;
  } else {
    EXPECT_EQ(body["error"]["param"], param) << r.body;
  }
}

TEST(RenderTest, ChatIdsAreHuggingFacesApplyChatTemplate) {
  const ServedModel served = smollm_model();
  const std::vector<json> goldens = read_jsonl(smollm_dir() / "chat_golden.jsonl");
  ASSERT_GE(goldens.size(), 10u);
  for (const json& golden : goldens) {
    SCOPED_TRACE(golden["label"].get<std::string>());
    const json body = {{"model", "smollm2"},
                       {"messages", golden["messages"]},
                       {"add_generation_prompt", golden["add_generation_prompt"]}};
    const json rendered = render_ok(Endpoint::kChat, body, served);
    ASSERT_TRUE(rendered.is_object());
    EXPECT_EQ(rendered["token_ids"], golden["ids"]);
    // The same ids /tokenize reports for the same conversation.
    const HttpResponse tokenized =
        tokenize_response(json({{"messages", golden["messages"]},
                                {"add_generation_prompt", golden["add_generation_prompt"]}})
                              .dump(),
                          served);
    ASSERT_EQ(tokenized.status, 200) << tokenized.body;
    EXPECT_EQ(rendered["token_ids"], json::parse(tokenized.body)["tokens"]);
  }
}

TEST(RenderTest, CompletionsRenderOneObjectPerPromptWithHuggingFacesIds) {
  const ServedModel served = smollm_model();
  const std::vector<json> goldens = read_jsonl(smollm_dir() / "golden.jsonl");
  std::vector<std::string> texts;
  std::vector<json> expected;
  for (const json& golden : goldens) {
    const std::string text = golden["text"];
    if (text.empty()) continue;  // an empty prompt is refused by /v1/completions itself
    texts.push_back(text);
    expected.push_back(golden["ids"]);
  }
  ASSERT_GE(texts.size(), 20u);
  const json rendered = render_ok(Endpoint::kCompletions, {{"prompt", texts}}, served);
  ASSERT_TRUE(rendered.is_array());
  ASSERT_EQ(rendered.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE(texts[i]);
    EXPECT_EQ(rendered[i]["token_ids"], expected[i]);
  }
  // A single string is a one-element array too, as vLLM answers.
  const json single = render_ok(Endpoint::kCompletions, {{"prompt", texts[0]}}, served);
  ASSERT_TRUE(single.is_array());
  ASSERT_EQ(single.size(), 1u);
  EXPECT_EQ(single[0]["token_ids"], expected[0]);
}

TEST(RenderTest, TokenIdPromptsPassThrough) {
  const ServedModel served = smollm_model();
  const json rendered =
      render_ok(Endpoint::kCompletions, {{"prompt", {{5, 6, 7}, {8}}}, {"max_tokens", 3}}, served);
  ASSERT_EQ(rendered.size(), 2u);
  EXPECT_EQ(rendered[0]["token_ids"], json({5, 6, 7}));
  EXPECT_EQ(rendered[1]["token_ids"], json({8}));
}

TEST(RenderTest, ResponseHasVllmGenerateRequestShape) {
  const ServedModel served = smollm_model(2048);
  const json chat = render_ok(Endpoint::kChat,
                              {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                               {"max_tokens", 7},
                               {"temperature", 0.5},
                               {"seed", 11},
                               {"stop", {"\n\n"}},
                               {"stream", true}},
                              served);
  for (const char* key :
       {"request_id", "token_ids", "features", "sampling_params", "model", "stream",
        "stream_options", "cache_salt", "priority", "kv_transfer_params"}) {
    EXPECT_TRUE(chat.contains(key)) << key;
  }
  EXPECT_EQ(chat["request_id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_TRUE(chat["features"].is_null());
  EXPECT_EQ(chat["model"], "smollm2");
  EXPECT_EQ(chat["stream"], true);
  EXPECT_EQ(chat["stream_options"], json({{"include_usage", false}}));
  EXPECT_EQ(chat["priority"], 0);
  const json& sampling = chat["sampling_params"];
  EXPECT_EQ(sampling["max_tokens"], 7);
  EXPECT_FLOAT_EQ(sampling["temperature"].get<float>(), 0.5f);
  EXPECT_EQ(sampling["seed"], 11);
  EXPECT_EQ(sampling["stop"], json({"\n\n"}));
  EXPECT_EQ(sampling["n"], 1);

  // Without max_tokens: the completions default (16, OpenAI's and vLLM's), as for a real
  // request; chat gets what the context leaves after the prompt.
  const json completion = render_ok(Endpoint::kCompletions, {{"prompt", "Hello world"}}, served);
  ASSERT_EQ(completion.size(), 1u);
  EXPECT_EQ(completion[0]["request_id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(completion[0]["sampling_params"]["max_tokens"], 16);
  const json open_chat =
      render_ok(Endpoint::kChat, {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}, served);
  EXPECT_EQ(open_chat["sampling_params"]["max_tokens"],
            2048 - static_cast<int>(open_chat["token_ids"].size()));
  EXPECT_EQ(completion[0]["stream"], false);
  EXPECT_TRUE(completion[0]["stream_options"].is_null());
}

TEST(RenderTest, BadBodiesGetTheGenerationEndpointsErrors) {
  const ServedModel served = smollm_model(64);
  expect_error(render_response(Endpoint::kChat, "nope", served), 400, "");
  expect_error(render_response(Endpoint::kChat, "[]", served), 400, "");
  expect_error(render_response(Endpoint::kChat, "{}", served), 400, "messages");
  expect_error(render_response(Endpoint::kChat, R"({"messages": "hi"})", served), 400, "messages");
  expect_error(render_response(Endpoint::kCompletions, "{}", served), 400, "prompt");
  expect_error(render_response(Endpoint::kCompletions, R"({"prompt": 5})", served), 400, "prompt");
  expect_error(
      render_response(Endpoint::kCompletions, R"({"prompt": "a", "model": "other"})", served), 404,
      "model");
  expect_error(render_response(Endpoint::kCompletions, R"({"prompt": [[49152]]})", served), 400,
               "prompt");
  // Longer than the context: the same 400 as /v1/completions.
  const json too_long = {{"prompt", std::string(400, 'a') + " b c d e f g h"}};
  const HttpResponse r = render_response(Endpoint::kCompletions, too_long.dump(), served);
  EXPECT_EQ(r.status, 400) << r.body;
  // Beam search is refused, as vLLM's render does.
  const json beam = {{"prompt", "a"}, {"use_beam_search", true}, {"n", 2}, {"temperature", 0}};
  expect_error(render_response(Endpoint::kCompletions, beam.dump(), served), 400,
               "use_beam_search");
}

}  // namespace
}  // namespace pagedserve::net
