// Tests for POST /v1/completions parsing: prompts, defaults, every field, every 400.
#include <gtest/gtest.h>

#include "net/protocol/completions.h"
#include "tests/net/protocol/protocol_fixtures.h"

namespace pagedserve::net {
namespace {

using nlohmann::json;
using testing::stories_model;
using testing::stories_tokenizer;

Result<GenerationRequest> parse(const json& body, const ServedModel& served = stories_model()) {
  return parse_completion_request(body.dump(), served);
}

// The 400 a body gets, checked to name `param`.
ApiError expect_400(const json& body, const std::string& param,
                    const ServedModel& served = stories_model()) {
  Result<GenerationRequest> r = parse(body, served);
  EXPECT_FALSE(r.ok()) << body.dump();
  if (r.ok()) return {};
  EXPECT_EQ(r.error().status, 400) << body.dump();
  EXPECT_EQ(r.error().param, param) << body.dump() << " -> " << r.error().message;
  EXPECT_EQ(r.error().type, "invalid_request_error");
  return r.error();
}

TEST(CompletionsTest, StringPromptIsEncodedWithSpecialTokensAndDefaultsApply) {
  Result<GenerationRequest> r = parse({{"prompt", "Once upon a time"}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const GenerationRequest& req = r.value();
  EXPECT_EQ(req.endpoint, Endpoint::kCompletions);
  EXPECT_EQ(req.model, "stories260K");
  ASSERT_EQ(req.prompts.size(), 1u);
  EXPECT_EQ(req.prompts[0].prompt, "Once upon a time");
  EXPECT_EQ(req.prompts[0].prompt_token_ids, stories_tokenizer().encode("Once upon a time", true));
  EXPECT_EQ(req.prompt_texts, std::vector<std::string>{"Once upon a time"});
  const model::SamplingParams& s = req.prompts[0].sampling;
  EXPECT_EQ(s.max_tokens, 16);
  EXPECT_FLOAT_EQ(s.temperature, 1.0f);
  EXPECT_EQ(s.n, 1);
  EXPECT_FALSE(req.stream);
  EXPECT_FALSE(req.echo);
  EXPECT_FALSE(req.logprobs);
  EXPECT_EQ(req.num_choices(), 1u);
}

TEST(CompletionsTest, AddSpecialTokensFalseSkipsBos) {
  Result<GenerationRequest> r = parse({{"prompt", "Hello"}, {"add_special_tokens", false}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().prompts[0].prompt_token_ids, stories_tokenizer().encode("Hello", false));
}

TEST(CompletionsTest, PromptShapes) {
  // A list of token ids is one prompt, used as given.
  Result<GenerationRequest> tokens = parse({{"prompt", {5, 6, 7}}, {"echo", true}});
  ASSERT_TRUE(tokens.ok()) << tokens.error().message;
  ASSERT_EQ(tokens.value().prompts.size(), 1u);
  EXPECT_EQ(tokens.value().prompts[0].prompt_token_ids, (std::vector<int32_t>{5, 6, 7}));
  const std::vector<int32_t> ids = {5, 6, 7};
  EXPECT_EQ(tokens.value().prompt_texts[0], stories_tokenizer().decode(ids));  // for echo

  // A list of strings and token lists: one prompt each, in order.
  Result<GenerationRequest> mixed = parse({{"prompt", json::array({"A", {9, 10}, "B"})}});
  ASSERT_TRUE(mixed.ok()) << mixed.error().message;
  ASSERT_EQ(mixed.value().prompts.size(), 3u);
  EXPECT_EQ(mixed.value().prompts[0].prompt_token_ids, stories_tokenizer().encode("A", true));
  EXPECT_EQ(mixed.value().prompts[1].prompt_token_ids, (std::vector<int32_t>{9, 10}));
  EXPECT_EQ(mixed.value().prompts[2].prompt, "B");
  EXPECT_EQ(mixed.value().prompt_texts[2], "B");
  // Every prompt gets the same sampling parameters.
  for (const auto& p : mixed.value().prompts) EXPECT_EQ(p.sampling.max_tokens, 16);
}

TEST(CompletionsTest, EveryFieldIsParsed) {
  const json body = {{"model", "stories260K"},
                     {"prompt", "Hi"},
                     {"max_tokens", 20},
                     {"temperature", 0.5},
                     {"top_p", 0.9},
                     {"top_k", 40},
                     {"min_p", 0.05},
                     {"n", 2},
                     {"best_of", 3},
                     {"length_penalty", 0.5},
                     {"stop", "\n"},
                     {"stop_token_ids", {2, 3}},
                     {"seed", 42},
                     {"presence_penalty", 0.5},
                     {"frequency_penalty", -0.5},
                     {"repetition_penalty", 1.2},
                     {"echo", true},  // (echo with logprobs is refused: logprobs_test.cpp)
                     {"ignore_eos", true},
                     {"min_tokens", 4},
                     {"user", "u-1"},
                     {"unknown_field", {{"ignored", true}}}};
  Result<GenerationRequest> r = parse(body);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const GenerationRequest& req = r.value();
  const model::SamplingParams& s = req.prompts[0].sampling;
  EXPECT_EQ(s.max_tokens, 20);
  EXPECT_FLOAT_EQ(s.temperature, 0.5f);
  EXPECT_FLOAT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.top_k, 40);
  EXPECT_FLOAT_EQ(s.min_p, 0.05f);
  EXPECT_EQ(s.n, 2);
  EXPECT_EQ(s.best_of, 3);
  EXPECT_FALSE(s.use_beam_search);
  EXPECT_FLOAT_EQ(s.length_penalty, 0.5f);
  EXPECT_EQ(s.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(s.stop_token_ids, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(s.seed, 42u);
  EXPECT_TRUE(s.ignore_eos);
  EXPECT_EQ(s.min_tokens, 4);
  EXPECT_EQ(req.n, 2);
  EXPECT_EQ(req.num_choices(), 2u);
  EXPECT_FLOAT_EQ(req.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(req.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(req.repetition_penalty, 1.2f);
  // ...and reach the sampler through each prompt's sampling params.
  EXPECT_FLOAT_EQ(s.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.2f);
  EXPECT_FALSE(req.logprobs);
  EXPECT_TRUE(req.echo);
  EXPECT_EQ(req.user, "u-1");
}

TEST(CompletionsTest, StreamOptionsAndBeamSearch) {
  Result<GenerationRequest> r = parse({{"prompt", "Hi"},
                                       {"stream", true},
                                       {"stream_options", {{"include_usage", true}}},
                                       {"stop", json::array({"a", "b"})},
                                       {"max_tokens", 16.0}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r.value().stream);
  EXPECT_TRUE(r.value().include_usage);
  EXPECT_EQ(r.value().prompts[0].sampling.stop, (std::vector<std::string>{"a", "b"}));

  Result<GenerationRequest> beam = parse(
      {{"prompt", "Hi"}, {"use_beam_search", true}, {"n", 2}, {"temperature", 0}, {"seed", -1}});
  ASSERT_TRUE(beam.ok()) << beam.error().message;
  EXPECT_TRUE(beam.value().prompts[0].sampling.use_beam_search);
  EXPECT_EQ(beam.value().prompts[0].sampling.seed, UINT64_MAX);  // negative seeds wrap
}

TEST(CompletionsTest, NullFieldsMeanAbsent) {
  Result<GenerationRequest> r =
      parse({{"prompt", "Hi"}, {"max_tokens", nullptr}, {"stop", nullptr}, {"suffix", nullptr}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().prompts[0].sampling.max_tokens, 16);
}

TEST(CompletionsTest, ModelMustMatchTheServedName) {
  Result<GenerationRequest> r = parse({{"model", "gpt-4"}, {"prompt", "Hi"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status, 404);
  EXPECT_EQ(r.error().message, "The model `gpt-4` does not exist.");
  EXPECT_EQ(r.error().type, "not_found_error");
  EXPECT_EQ(r.error().param, "model");
  EXPECT_EQ(r.error().code, "model_not_found");
  expect_400({{"model", 7}, {"prompt", "Hi"}}, "model");
}

TEST(CompletionsTest, WrongTypesNameTheParam) {
  const std::vector<std::pair<std::string, json>> cases = {
      {"max_tokens", "16"},
      {"max_tokens", 1.5},
      {"temperature", "hot"},
      {"top_p", true},
      {"top_k", 2.5},
      {"min_p", "x"},
      {"n", "2"},
      {"best_of", json::array()},
      {"use_beam_search", 1},
      {"length_penalty", "x"},
      {"stop", 5},
      {"stop", json::array({"a", 1})},
      {"stop_token_ids", "2"},
      {"stop_token_ids", {1.5}},
      {"seed", "s"},
      {"presence_penalty", "x"},
      {"frequency_penalty", json::object()},
      {"repetition_penalty", false},
      {"logprobs", true},
      {"echo", "yes"},
      {"ignore_eos", 0},
      {"min_tokens", "1"},
      {"stream", "true"},
      {"stream_options", true},
      {"user", 5},
      {"add_special_tokens", 1},
  };
  for (const auto& [param, value] : cases) {
    json body = {{"prompt", "Hi"}, {param, value}};
    if (param == "stream_options") body["stream"] = true;
    expect_400(body, param);
  }
  expect_400({{"prompt", "Hi"}, {"stream", true}, {"stream_options", {{"include_usage", 1}}}},
             "stream_options.include_usage");
}

TEST(CompletionsTest, RangesNameTheParam) {
  const std::vector<std::pair<std::string, json>> cases = {
      {"max_tokens", 0},
      {"max_tokens", -3},
      {"temperature", -0.1},
      {"top_p", 0},
      {"top_p", 1.5},
      {"top_k", -2},
      {"min_p", 1.5},
      {"n", 0},
      {"n", 129},
      {"best_of", 0},
      {"best_of", 200},
      {"min_tokens", -1},
      {"min_tokens", 17},
      {"presence_penalty", 2.5},
      {"frequency_penalty", -3},
      {"repetition_penalty", 0},
      {"logprobs", 21},
      {"logprobs", -1},
      {"stop_token_ids", {512}},
      {"stop_token_ids", {-1}},
      {"stop", json::array({""})},
      {"temperature", 1e39},
  };
  for (const auto& [param, value] : cases) expect_400({{"prompt", "Hi"}, {param, value}}, param);
  EXPECT_EQ(expect_400({{"prompt", "Hi"}, {"max_tokens", 0}}, "max_tokens").message,
            "max_tokens must be an integer >= 1, got 0");
}

TEST(CompletionsTest, SequenceRules) {
  // best_of < n.
  expect_400({{"prompt", "Hi"}, {"n", 3}, {"best_of", 2}}, "best_of");
  // n > 1 needs sampling (SamplingParams::validate's rule, mapped to its field).
  EXPECT_NE(expect_400({{"prompt", "Hi"}, {"n", 2}, {"temperature", 0}}, "n").message, "");
  // Beam search needs temperature 0.
  expect_400({{"prompt", "Hi"}, {"n", 2}, {"use_beam_search", true}}, "temperature");
  // OpenAI: best_of cannot be streamed.
  expect_400({{"prompt", "Hi"}, {"n", 1}, {"best_of", 2}, {"stream", true}}, "best_of");
  // stream_options without stream.
  expect_400({{"prompt", "Hi"}, {"stream_options", {{"include_usage", true}}}}, "stream_options");
}

TEST(CompletionsTest, PromptErrors) {
  expect_400({{"max_tokens", 5}}, "prompt");
  expect_400({{"prompt", ""}}, "prompt");
  expect_400({{"prompt", json::array()}}, "prompt");
  expect_400({{"prompt", json::array({"A", ""})}}, "prompt");
  expect_400({{"prompt", json::array({"A", json::array()})}}, "prompt");
  expect_400({{"prompt", 5}}, "prompt");
  expect_400({{"prompt", json::array({json::object({{"a", 1}})})}}, "prompt");
  expect_400({{"prompt", json::array({1, "x"})}}, "prompt");
  expect_400({{"prompt", {1, 2.5}}}, "prompt");
  EXPECT_EQ(expect_400({{"prompt", {1, 512}}}, "prompt").message,
            "token id 512 is outside the vocabulary [0, 512)");
  expect_400({{"prompt", json::array({json::array({1, -1})})}}, "prompt");
  expect_400({{"prompt", "Hi"}, {"suffix", "end"}}, "suffix");
}

TEST(CompletionsTest, InvalidUtf8AndJson) {
  const ServedModel served = stories_model();
  Result<GenerationRequest> bad = parse_completion_request("{\"prompt\": \"\xC3\x28\"}", served);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().status, 400);
  EXPECT_EQ(bad.error().message, "the request body is not valid UTF-8");
  EXPECT_FALSE(parse_completion_request(R"({"prompt": "\udc00"})", served).ok());
  EXPECT_FALSE(parse_completion_request("{prompt: 1}", served).ok());
  EXPECT_FALSE(parse_completion_request("[]", served).ok());
}

TEST(CompletionsTest, ContextLengthUsesVllmsMessage) {
  const ServedModel served = stories_model(/*max_model_len=*/32);
  const std::vector<int32_t> ten(10, 5);
  const ApiError e = expect_400({{"prompt", ten}, {"max_tokens", 23}}, "max_tokens", served);
  EXPECT_EQ(e.message,
            "This model's maximum context length is 32 tokens. However, you requested 33 tokens "
            "(10 in the prompt, 23 in the completion). Please reduce the length of the prompt or "
            "completion.");
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_TRUE(parse({{"prompt", ten}, {"max_tokens", 22}}, served).ok());
  // A prompt that alone fills the context names the prompt.
  const std::vector<int32_t> long_prompt(32, 5);
  expect_400({{"prompt", long_prompt}, {"max_tokens", 1}}, "prompt", served);
  // The longest of several prompts counts.
  expect_400(
      {{"prompt", json::array({json(ten), json(std::vector<int32_t>(20, 5))})}, {"max_tokens", 16}},
      "max_tokens", served);
}

}  // namespace
}  // namespace pagedserve::net
