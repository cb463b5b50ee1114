// Tests for POST /v1/chat/completions parsing: rendering with the real SmolLM2 template
// against Hugging Face's golden output, the default template for stories260K, and every 400.
#include <gtest/gtest.h>

#include "net/protocol/chat.h"
#include "tests/net/protocol/protocol_fixtures.h"

namespace pagedserve::net {
namespace {

using nlohmann::json;
using testing::smollm_model;
using testing::smollm_tokenizer;
using testing::stories_model;
using testing::stories_tokenizer;

json user(const std::string& text) { return {{"role", "user"}, {"content", text}}; }

ApiError expect_400(const json& body, const std::string& param, const ServedModel& served) {
  Result<GenerationRequest> r = parse_chat_request(body.dump(), served);
  EXPECT_FALSE(r.ok()) << body.dump();
  if (r.ok()) return {};
  EXPECT_EQ(r.error().status, 400) << body.dump();
  EXPECT_EQ(r.error().param, param) << body.dump() << " -> " << r.error().message;
  return r.error();
}

TEST(ChatTest, SmolLm2MatchesHuggingFaceGolden) {
  const ServedModel served = smollm_model();
  ASSERT_TRUE(served.chat_template.has_value());
  EXPECT_EQ(served.bos_token, "<|im_start|>");
  EXPECT_EQ(served.eos_token, "<|im_end|>");
  int checked = 0;
  for (const json& golden : testing::read_jsonl(testing::smollm_dir() / "chat_golden.jsonl")) {
    if (golden.contains("error")) continue;
    json body = {{"model", "smollm2"},
                 {"messages", golden["messages"]},
                 {"add_generation_prompt", golden["add_generation_prompt"]},
                 {"max_tokens", 8}};
    Result<GenerationRequest> r = parse_chat_request(body.dump(), served);
    ASSERT_TRUE(r.ok()) << golden["label"] << ": " << r.error().message;
    const GenerationRequest& req = r.value();
    EXPECT_EQ(req.endpoint, Endpoint::kChat);
    ASSERT_EQ(req.prompts.size(), 1u);
    EXPECT_EQ(req.prompt_texts[0], golden["rendered"].get<std::string>()) << golden["label"];
    EXPECT_EQ(req.prompts[0].prompt_token_ids, golden["ids"].get<std::vector<int32_t>>())
        << golden["label"];
    EXPECT_EQ(req.prompts[0].sampling.max_tokens, 8);
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

TEST(ChatTest, SmolLm2InjectsItsDefaultSystemPrompt) {
  Result<GenerationRequest> r =
      parse_chat_request(json({{"messages", {user("Hi")}}}).dump(), smollm_model());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().prompt_texts[0],
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTest, ModelWithoutTemplateUsesDefaultChatMl) {
  const ServedModel served = stories_model();
  ASSERT_FALSE(served.chat_template.has_value());
  const json messages = json::array({{{"role", "system"}, {"content", "Be brief."}},
                                     user("Tell a story"),
                                     {{"role", "assistant"}, {"content", nullptr}}});
  Result<GenerationRequest> r = parse_chat_request(json({{"messages", messages}}).dump(), served);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::string expected =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nTell a story<|im_end|>\n"
      "<|im_start|>assistant\n<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(r.value().prompt_texts[0], expected);
  // Tokenized without special tokens: no BOS in front.
  EXPECT_EQ(r.value().prompts[0].prompt_token_ids, stories_tokenizer().encode(expected, false));
}

TEST(ChatTest, TextPartsAreJoinedAndNamePassesThrough) {
  const json content =
      json::array({{{"type", "text"}, {"text", "first"}}, {{"type", "text"}, {"text", "second"}}});
  const json body = {{"messages", {{{"role", "user"}, {"content", content}, {"name", "ann"}}}},
                     {"add_generation_prompt", false}};
  Result<GenerationRequest> r = parse_chat_request(body.dump(), stories_model());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().prompt_texts[0], "<|im_start|>user\nfirst\nsecond<|im_end|>\n");
}

TEST(ChatTest, MaxTokens) {
  const ServedModel served = stories_model(/*max_model_len=*/256);
  const json messages = {user("Hi")};
  // Default: what the context leaves.
  Result<GenerationRequest> r = parse_chat_request(json({{"messages", messages}}).dump(), served);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const int prompt_len = static_cast<int>(r.value().prompts[0].prompt_token_ids.size());
  EXPECT_EQ(r.value().prompts[0].sampling.max_tokens, 256 - prompt_len);
  // max_completion_tokens wins over max_tokens.
  r = parse_chat_request(
      json({{"messages", messages}, {"max_tokens", 5}, {"max_completion_tokens", 7}}).dump(),
      served);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().prompts[0].sampling.max_tokens, 7);
  r = parse_chat_request(json({{"messages", messages}, {"max_tokens", 5}}).dump(), served);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().prompts[0].sampling.max_tokens, 5);
  const ApiError e =
      expect_400({{"messages", messages}, {"max_tokens", 256}}, "max_tokens", served);
  EXPECT_EQ(e.message,
            "This model's maximum context length is 256 tokens. However, you requested " +
                std::to_string(256 + prompt_len) + " tokens (" + std::to_string(prompt_len) +
                " in the messages, 256 in the completion). Please reduce the length of "
                "the messages or completion.");
  // A conversation that alone fills the context.
  expect_400({{"messages", {user(std::string(600, 'a'))}}}, "messages", served);
}

TEST(ChatTest, SamplingAndChatOnlyFields) {
  const json body = {{"messages", {user("Hi")}},
                     {"temperature", 0.7},
                     {"n", 2},
                     {"logprobs", true},
                     {"top_logprobs", 4},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  Result<GenerationRequest> r = parse_chat_request(body.dump(), stories_model());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().n, 2);
  EXPECT_EQ(r.value().logprobs, 4);
  EXPECT_TRUE(r.value().include_usage);
  Result<GenerationRequest> plain = parse_chat_request(
      json({{"messages", {user("Hi")}}, {"logprobs", true}}).dump(), stories_model());
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain.value().logprobs, 0);
}

TEST(ChatTest, ChatTemplateKwargsReachTheTemplate) {
  ServedModel served = stories_model();
  served.chat_template = model::ChatTemplate::parse(
      "{{ greeting }}{% for m in messages %}{{ m.content }}{% endfor %}");
  Result<GenerationRequest> r = parse_chat_request(
      json({{"messages", {user("Hi")}}, {"chat_template_kwargs", {{"greeting", "Hello: "}}}})
          .dump(),
      served);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().prompt_texts[0], "Hello: Hi");
}

TEST(ChatTest, TemplateRaiseExceptionIsA400WithItsMessage) {
  ServedModel served = stories_model();
  served.chat_template = model::ChatTemplate::parse(
      "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversation roles must start "
      "with user') }}{% endif %}{{ messages[0]['content'] }}");
  const json body = {{"messages", {{{"role", "assistant"}, {"content", "x"}}}}};
  const ApiError e = expect_400(body, "messages", served);
  EXPECT_EQ(e.message, "Conversation roles must start with user");
}

TEST(ChatTest, MessageErrorsNameTheParam) {
  const ServedModel served = stories_model();
  expect_400({{"max_tokens", 5}}, "messages", served);
  expect_400({{"messages", json::array()}}, "messages", served);
  expect_400({{"messages", "Hi"}}, "messages", served);
  expect_400({{"messages", {"Hi"}}}, "messages[0]", served);
  expect_400({{"messages", {user("a"), {{"content", "x"}}}}}, "messages[1].role", served);
  expect_400({{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}, "messages[0].role", served);
  expect_400({{"messages", {{{"role", "user"}}}}}, "messages[0].content", served);
  expect_400({{"messages", {{{"role", "user"}, {"content", 5}}}}}, "messages[0].content", served);
  expect_400({{"messages", {{{"role", "user"}, {"content", "x"}, {"name", 5}}}}},
             "messages[0].name", served);
  const json image = json::array({{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}});
  expect_400({{"messages", {{{"role", "user"}, {"content", image}}}}},
             "messages[0].content[0].type", served);
  const json no_text = json::array({{{"type", "text"}}});
  expect_400({{"messages", {{{"role", "user"}, {"content", no_text}}}}},
             "messages[0].content[0].text", served);
  expect_400({{"messages", {user("Hi")}}, {"tools", {{{"type", "function"}}}}}, "tools[0]", served);
  expect_400({{"messages", {user("Hi")}}, {"top_logprobs", 2}}, "top_logprobs", served);
  expect_400({{"messages", {user("Hi")}}, {"max_completion_tokens", 0}}, "max_completion_tokens",
             served);
  expect_400({{"messages", {user("Hi")}}, {"temperature", "x"}}, "temperature", served);
  expect_400({{"messages", {user("Hi")}}, {"chat_template_kwargs", 3}}, "chat_template_kwargs",
             served);
  Result<GenerationRequest> r =
      parse_chat_request(json({{"model", "other"}, {"messages", {user("Hi")}}}).dump(), served);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status, 404);
}

}  // namespace
}  // namespace pagedserve::net
