// Tests for ResponseAssembler: exact OpenAI bodies, exact SSE framing, errors.
#include <gtest/gtest.h>

#include "net/protocol/response_assembler.h"

namespace pagedserve::net {
namespace {

using nlohmann::json;

// A request of `num_prompts` prompts of 3 tokens each, n choices per prompt.
GenerationRequest make_request(Endpoint endpoint, size_t num_prompts, int n, bool stream) {
  GenerationRequest req;
  req.endpoint = endpoint;
  req.model = "m";
  req.n = n;
  req.stream = stream;
  for (size_t i = 0; i < num_prompts; ++i) {
    actors::GenerateRequest prompt;
    prompt.prompt_token_ids = {1, 2, 3};
    prompt.sampling.n = n;
    req.prompts.push_back(prompt);
    req.prompt_texts.push_back("P" + std::to_string(i));
  }
  return req;
}

actors::TokenEvent token(int index, std::vector<int32_t> ids, std::string text) {
  actors::TokenEvent e;
  e.index = index;
  e.token_ids = std::move(ids);
  e.text = std::move(text);
  e.num_prompt_tokens = 3;
  e.num_cached_tokens = 1;
  return e;
}

actors::TokenEvent final_event(std::string reason, std::string text = {}) {
  actors::TokenEvent e = token(0, {}, std::move(text));
  e.finished = true;
  e.finish_reason = std::move(reason);
  return e;
}

TEST(ResponseAssemblerTest, CompletionBodyWithPromptsTimesChoices) {
  const GenerationRequest req = make_request(Endpoint::kCompletions, 2, 2, false);
  ResponseAssembler a(req, "cmpl-abc", 1700000000);
  EXPECT_EQ(a.on_event(1, token(1, {7}, "x")), "");
  a.on_event(0, token(0, {4, 5}, "He"));
  a.on_event(0, token(1, {6}, "Yo"));
  a.on_event(0, token(0, {8}, "y"));
  a.on_event(0, final_event("stop"));
  EXPECT_FALSE(a.done());
  a.on_event(1, final_event("length", "!"));  // the flushed tail goes to index 0
  ASSERT_TRUE(a.done());
  EXPECT_FALSE(a.failed());
  const HttpResponse r = a.response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/json");
  const json body = json::parse(r.body);
  EXPECT_EQ(body["id"], "cmpl-abc");
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["created"], 1700000000);
  EXPECT_EQ(body["model"], "m");
  ASSERT_EQ(body["choices"].size(), 4u);
  const std::vector<std::string> texts = {"Hey", "Yo", "!", "x"};
  const std::vector<std::string> reasons = {"stop", "stop", "length", "length"};
  for (int c = 0; c < 4; ++c) {
    const json& choice = body["choices"][c];
    EXPECT_EQ(choice.size(), 4u);
    EXPECT_EQ(choice["index"], c);
    EXPECT_EQ(choice["text"], texts[c]);
    EXPECT_TRUE(choice["logprobs"].is_null());
    EXPECT_EQ(choice["finish_reason"], reasons[c]);
  }
  const json expected_usage = {{"prompt_tokens", 6},
                               {"completion_tokens", 5},
                               {"total_tokens", 11},
                               {"prompt_tokens_details", {{"cached_tokens", 2}}}};
  EXPECT_EQ(body["usage"], expected_usage);
  // Key order follows OpenAI's.
  EXPECT_EQ(r.body.rfind("{\"id\":\"cmpl-abc\",\"object\":\"text_completion\",\"created\":", 0),
            0u);
}

TEST(ResponseAssemblerTest, EachChoiceEndsWithItsOwnSequenceFinishedEvent) {
  const GenerationRequest req = make_request(Endpoint::kCompletions, 1, 2, true);
  ResponseAssembler a(req, "cmpl-q", 2);
  actors::TokenEvent last = token(1, {4}, "z");
  last.sequence_finished = true;
  last.finish_reason = "length";
  const std::string text = a.on_event(0, last);
  // Choice 1's text, then its final chunk, at once; choice 0 is still open.
  const size_t split = text.find("\n\n") + 2;
  const json content = json::parse(text.substr(6, split - 8));
  const json finish = json::parse(text.substr(split + 6, text.size() - split - 8));
  EXPECT_EQ(content["choices"][0]["text"], "z");
  EXPECT_EQ(finish["choices"][0]["index"], 1);
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(a.done());
  actors::TokenEvent end = final_event("stop");
  end.sequence_finished = true;
  const std::string tail = a.on_event(0, end);
  EXPECT_NE(tail.find("\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"stop\""),
            std::string::npos);
  EXPECT_EQ(tail.find("\"index\":1"), std::string::npos);  // not ended twice
  EXPECT_TRUE(a.done());

  // Non-streaming, each choice keeps its own reason.
  const GenerationRequest plain = make_request(Endpoint::kCompletions, 1, 2, false);
  ResponseAssembler b(plain, "cmpl-r", 2);
  b.on_event(0, last);
  b.on_event(0, end);
  const json body = json::parse(b.response().body);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(body["choices"][1]["text"], "z");
}

TEST(ResponseAssemblerTest, EchoPrependsThePrompt) {
  GenerationRequest req = make_request(Endpoint::kCompletions, 1, 1, false);
  req.echo = true;
  ResponseAssembler a(req, "cmpl-1", 1);
  a.on_event(0, token(0, {4}, " end"));
  a.on_event(0, final_event("stop"));
  EXPECT_EQ(json::parse(a.response().body)["choices"][0]["text"], "P0 end");
}

TEST(ResponseAssemblerTest, ChatBody) {
  const GenerationRequest req = make_request(Endpoint::kChat, 1, 1, false);
  ResponseAssembler a(req, "chatcmpl-1", 5);
  a.on_event(0, token(0, {4}, "Hello"));
  a.on_event(0, final_event("stop"));
  const json body = json::parse(a.response().body);
  EXPECT_EQ(body["object"], "chat.completion");
  const json expected_choice = {{"index", 0},
                                {"message", {{"role", "assistant"}, {"content", "Hello"}}},
                                {"logprobs", nullptr},
                                {"finish_reason", "stop"}};
  EXPECT_EQ(body["choices"][0], expected_choice);
  EXPECT_EQ(body["usage"]["completion_tokens"], 1);
}

TEST(ResponseAssemblerTest, EngineErrorsBecomeHttpErrors) {
  const GenerationRequest req = make_request(Endpoint::kCompletions, 2, 1, false);
  ResponseAssembler a(req, "cmpl-1", 1);
  a.on_event(0, final_event("stop"));
  actors::TokenEvent failure = final_event("error");
  failure.error = "executor failed";
  a.on_event(1, failure);
  ASSERT_TRUE(a.done());
  EXPECT_TRUE(a.failed());
  HttpResponse r = a.response();
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(json::parse(r.body)["error"]["message"], "executor failed");
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "server_error");

  ResponseAssembler aborted(req, "cmpl-2", 1);
  aborted.on_event(0, final_event("abort"));
  r = aborted.response();
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "request_aborted");
  // Events after the end are ignored.
  EXPECT_EQ(aborted.on_event(1, final_event("stop")), "");
  EXPECT_EQ(aborted.response().status, 503);
}

TEST(ResponseAssemblerTest, CompletionStreamIsExact) {
  GenerationRequest req = make_request(Endpoint::kCompletions, 1, 1, true);
  req.echo = true;
  ResponseAssembler a(req, "cmpl-s", 9);
  EXPECT_EQ(a.on_event(0, token(0, {4}, "")), "");  // a partial character: nothing yet
  EXPECT_EQ(a.on_event(0, token(0, {5}, "A")),
            "data: {\"id\":\"cmpl-s\",\"object\":\"text_completion\",\"created\":9,\"model\":\"m\","
            "\"choices\":[{\"index\":0,\"text\":\"P0A\",\"logprobs\":null,\"finish_reason\":null}]}"
            "\n\n");
  EXPECT_EQ(a.on_event(0, token(0, {6}, "B")),
            "data: {\"id\":\"cmpl-s\",\"object\":\"text_completion\",\"created\":9,\"model\":\"m\","
            "\"choices\":[{\"index\":0,\"text\":\"B\",\"logprobs\":null,\"finish_reason\":null}]}"
            "\n\n");
  EXPECT_EQ(
      a.on_event(0, final_event("length")),
      "data: {\"id\":\"cmpl-s\",\"object\":\"text_completion\",\"created\":9,\"model\":\"m\","
      "\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"length\"}"
      "]}\n\ndata: [DONE]\n\n");
  EXPECT_TRUE(a.done());
}

TEST(ResponseAssemblerTest, ChatStreamWithUsageIsExact) {
  GenerationRequest req = make_request(Endpoint::kChat, 1, 1, true);
  req.include_usage = true;
  ResponseAssembler a(req, "chatcmpl-s", 9);
  const std::string head =
      "data: {\"id\":\"chatcmpl-s\",\"object\":\"chat.completion.chunk\",\"created\":9,"
      "\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":";
  EXPECT_EQ(a.on_event(0, token(0, {4}, "Hi")),
            head +
                "{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
                "\"finish_reason\":null}],\"usage\":null}\n\n" +
                head +
                "{\"content\":\"Hi\"},\"logprobs\":null,\"finish_reason\":null}],"
                "\"usage\":null}\n\n");
  EXPECT_EQ(a.on_event(0, final_event("stop", "!")),
            head +
                "{\"content\":\"!\"},\"logprobs\":null,\"finish_reason\":null}],"
                "\"usage\":null}\n\n" +
                head + "{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\n\n" +
                "data: {\"id\":\"chatcmpl-s\",\"object\":\"chat.completion.chunk\",\"created\":9,"
                "\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,"
                "\"completion_tokens\":1,\"total_tokens\":4,\"prompt_tokens_details\":"
                "{\"cached_tokens\":1}}}\n\ndata: [DONE]\n\n");
}

// Splits SSE text into its data payloads, checking the framing.
std::vector<std::string> sse_payloads(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    EXPECT_EQ(text.compare(pos, 6, "data: "), 0) << text.substr(pos);
    const size_t end = text.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    out.push_back(text.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

TEST(ResponseAssemblerTest, ChatStreamOpensEveryChoiceEvenWithoutTokens) {
  const GenerationRequest req = make_request(Endpoint::kChat, 1, 2, true);
  ResponseAssembler a(req, "chatcmpl-n", 1);
  std::string text = a.on_event(0, token(1, {4}, "b"));
  text += a.on_event(0, final_event("stop"));
  const std::vector<std::string> payloads = sse_payloads(text);
  ASSERT_EQ(payloads.size(), 6u);  // role+b for 1; role, finish for 0; finish for 1; [DONE]
  const json role1 = json::parse(payloads[0]);
  EXPECT_EQ(role1["choices"][0]["index"], 1);
  EXPECT_EQ(role1["choices"][0]["delta"]["role"], "assistant");
  EXPECT_FALSE(role1.contains("usage"));
  EXPECT_EQ(json::parse(payloads[1])["choices"][0]["delta"]["content"], "b");
  const json role0 = json::parse(payloads[2]);
  EXPECT_EQ(role0["choices"][0]["index"], 0);
  EXPECT_EQ(role0["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(json::parse(payloads[3])["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(json::parse(payloads[4])["choices"][0]["index"], 1);
  EXPECT_EQ(json::parse(payloads[4])["choices"][0]["delta"], json::object());
  EXPECT_EQ(payloads[5], "[DONE]");
}

TEST(ResponseAssemblerTest, MidStreamErrorIsAnErrorChunkThenDone) {
  const GenerationRequest req = make_request(Endpoint::kCompletions, 2, 1, true);
  ResponseAssembler a(req, "cmpl-e", 1);
  a.on_event(0, token(0, {4}, "a"));
  actors::TokenEvent failure = final_event("error");
  failure.error = "out of memory";
  const std::vector<std::string> payloads = sse_payloads(a.on_event(1, failure));
  ASSERT_EQ(payloads.size(), 2u);
  const json error = json::parse(payloads[0]);
  EXPECT_EQ(error, json::parse(R"({"error": {"message": "out of memory", "type": "server_error",
                                             "param": null, "code": null}})"));
  EXPECT_EQ(payloads[1], "[DONE]");
  EXPECT_TRUE(a.done());
  EXPECT_TRUE(a.failed());
  EXPECT_EQ(a.on_event(0, token(0, {5}, "b")), "");
  EXPECT_EQ(a.fail(invalid_request("late")), "");
}

TEST(ResponseAssemblerTest, TransportFailureAndIgnoredIndices) {
  const GenerationRequest req = make_request(Endpoint::kCompletions, 1, 1, true);
  ResponseAssembler a(req, "cmpl-f", 1);
  // best_of > n streams extra candidates: their events are not choices.
  EXPECT_EQ(a.on_event(0, token(3, {4}, "zzz")), "");
  EXPECT_EQ(a.usage().completion_tokens, 0);
  const std::vector<std::string> payloads =
      sse_payloads(a.fail(server_error("client too slow", 503, "slow_reader")));
  ASSERT_EQ(payloads.size(), 2u);
  EXPECT_EQ(json::parse(payloads[0])["error"]["code"], "slow_reader");
  EXPECT_TRUE(a.failed());
}

TEST(ResponseAssemblerTest, ResponseIdsAreUniqueAndPrefixed) {
  const std::string a = make_response_id(Endpoint::kCompletions);
  const std::string b = make_response_id(Endpoint::kCompletions);
  EXPECT_EQ(a.rfind("cmpl-", 0), 0u);
  EXPECT_EQ(a.size(), 5u + 32u);
  EXPECT_NE(a, b);
  EXPECT_EQ(make_response_id(Endpoint::kChat).rfind("chatcmpl-", 0), 0u);
  EXPECT_GT(unix_time_now(), 1600000000);
}

}  // namespace
}  // namespace pagedserve::net
