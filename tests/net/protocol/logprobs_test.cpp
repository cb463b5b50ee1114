// Logprobs in the protocol layer (pure): the OpenAI JSON shapes of completions and chat
// logprobs, non-streaming and per SSE chunk, the WebSocket token frame's fields, and the
// request checks (echo with logprobs, beam search with logprobs).
#include <gtest/gtest.h>

#include <limits>

#include "net/protocol/chat.h"
#include "net/protocol/completions.h"
#include "net/protocol/response_assembler.h"
#include "net/protocol/websocket.h"
#include "tests/net/protocol/protocol_fixtures.h"

namespace pagedserve::net {
namespace {

using nlohmann::json;

actors::TokenLogprobInfo info(int32_t id, float logprob, std::string token,
                              std::string bytes = {}) {
  actors::TokenLogprobInfo out;
  out.token_id = id;
  out.logprob = logprob;
  out.bytes = bytes.empty() ? token : std::move(bytes);
  out.token = std::move(token);
  return out;
}

actors::TokenLogprobs entry(actors::TokenLogprobInfo sampled,
                            std::vector<actors::TokenLogprobInfo> top) {
  return actors::TokenLogprobs{std::move(sampled), std::move(top)};
}

// Two tokens: "Hi" (the best), then a partial UTF-8 character (raw byte 0xF0, shown as
// U+FFFD) that was not among the top 2.
std::vector<actors::TokenLogprobs> two_tokens() {
  return {entry(info(10, -0.5f, "Hi"), {info(10, -0.5f, "Hi"), info(11, -1.25f, "Yo")}),
          entry(info(243, -3.0f, "\uFFFD", "\xF0"),
                {info(12, -0.25f, "!"), info(13, -2.0f, "\u00e9")})};
}

GenerationRequest make_request(Endpoint endpoint, bool stream, std::optional<int> logprobs) {
  GenerationRequest req;
  req.endpoint = endpoint;
  req.model = "m";
  req.stream = stream;
  req.logprobs = logprobs;
  actors::GenerateRequest prompt;
  prompt.prompt_token_ids = {1, 2, 3};
  req.prompts.push_back(prompt);
  req.prompt_texts.push_back("P");
  return req;
}

actors::TokenEvent event_with(std::vector<int32_t> ids, std::string text,
                              std::vector<actors::TokenLogprobs> logprobs) {
  actors::TokenEvent e;
  e.token_ids = std::move(ids);
  e.text = std::move(text);
  e.logprobs = std::move(logprobs);
  e.num_prompt_tokens = 3;
  return e;
}

actors::TokenEvent final_event(std::string reason) {
  actors::TokenEvent e;
  e.finished = true;
  e.sequence_finished = true;
  e.finish_reason = std::move(reason);
  return e;
}

TEST(LogprobsJson, CompletionShapeIsOpenAis) {
  const json got = json::parse(dump_json(completion_logprobs_json(two_tokens(), 0)));
  const json expected = json::parse(R"({
    "tokens": ["Hi", "\ufffd"],
    "token_logprobs": [-0.5, -3.0],
    "top_logprobs": [{"Hi": -0.5, "Yo": -1.25}, {"\ufffd": -3.0, "!": -0.25, "\u00e9": -2.0}],
    "text_offset": [0, 2]
  })");
  EXPECT_EQ(got, expected);
  // Keys in OpenAI's order, and the offsets start where the caller says.
  const std::string text = dump_json(completion_logprobs_json(two_tokens(), 7));
  EXPECT_LT(text.find("\"tokens\""), text.find("\"token_logprobs\""));
  EXPECT_LT(text.find("\"token_logprobs\""), text.find("\"top_logprobs\""));
  EXPECT_LT(text.find("\"top_logprobs\""), text.find("\"text_offset\""));
  EXPECT_NE(text.find("\"text_offset\":[7,9]"), std::string::npos) << text;
}

TEST(LogprobsJson, ChatShapeIsOpenAisWithRawBytes) {
  const json got = json::parse(dump_json(chat_logprobs_json(two_tokens())));
  const json expected = json::parse(R"({"content": [
    {"token": "Hi", "logprob": -0.5, "bytes": [72, 105],
     "top_logprobs": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105]},
                      {"token": "Yo", "logprob": -1.25, "bytes": [89, 111]}]},
    {"token": "\ufffd", "logprob": -3.0, "bytes": [240],
     "top_logprobs": [{"token": "!", "logprob": -0.25, "bytes": [33]},
                      {"token": "\u00e9", "logprob": -2.0, "bytes": [195, 169]}]}
  ]})");
  EXPECT_EQ(got, expected);
}

TEST(LogprobsJson, MinusInfinityBecomesMinus9999) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<actors::TokenLogprobs> tokens = {entry(info(1, -inf, "a"), {})};
  EXPECT_EQ(completion_logprobs_json(tokens, 0)["token_logprobs"][0], -9999.0);
  EXPECT_EQ(chat_logprobs_json(tokens)["content"][0]["logprob"], -9999.0);
  EXPECT_EQ(count_code_points("a\u00e9\U0001F600"), 3u);
}

TEST(LogprobsAssembler, CompletionBodyCarriesEveryToken) {
  ResponseAssembler a(make_request(Endpoint::kCompletions, false, 2), "cmpl-x", 1);
  const std::vector<actors::TokenLogprobs> lps = two_tokens();
  a.on_event(0, event_with({10}, "Hi", {lps[0]}));
  a.on_event(0, event_with({243}, "", {lps[1]}));  // text held back: still counted
  a.on_event(0, final_event("length"));
  const json body = json::parse(a.response().body);
  EXPECT_EQ(body["choices"][0]["logprobs"],
            json::parse(dump_json(completion_logprobs_json(lps, 0))));
}

TEST(LogprobsAssembler, NullUnlessAsked) {
  ResponseAssembler a(make_request(Endpoint::kChat, false, std::nullopt), "chatcmpl-x", 1);
  a.on_event(0, event_with({10}, "Hi", {two_tokens()[0]}));
  a.on_event(0, final_event("stop"));
  EXPECT_TRUE(json::parse(a.response().body)["choices"][0]["logprobs"].is_null());
}

TEST(LogprobsAssembler, ChatBodyHasContentList) {
  ResponseAssembler a(make_request(Endpoint::kChat, false, 2), "chatcmpl-x", 1);
  const std::vector<actors::TokenLogprobs> lps = two_tokens();
  a.on_event(0, event_with({10, 243}, "Hi", lps));
  a.on_event(0, final_event("stop"));
  const json body = json::parse(a.response().body);
  EXPECT_EQ(body["choices"][0]["logprobs"], json::parse(dump_json(chat_logprobs_json(lps))));
}

TEST(LogprobsAssembler, CompletionStreamChunksCarryTheirTokens) {
  ResponseAssembler a(make_request(Endpoint::kCompletions, true, 2), "cmpl-s", 9);
  const std::vector<actors::TokenLogprobs> lps = two_tokens();
  const std::string head =
      "data: {\"id\":\"cmpl-s\",\"object\":\"text_completion\",\"created\":9,\"model\":\"m\","
      "\"choices\":[{\"index\":0,\"text\":";
  EXPECT_EQ(a.on_event(0, event_with({10}, "Hi", {lps[0]})),
            head +
                "\"Hi\",\"logprobs\":{\"tokens\":[\"Hi\"],\"token_logprobs\":[-0.5],"
                "\"top_logprobs\":[{\"Hi\":-0.5,\"Yo\":-1.25}],\"text_offset\":[0]},"
                "\"finish_reason\":null}]}\n\n");
  // Text held back (a partial character): the chunk still goes out, with empty text, and the
  // offset continues after the 2 characters sent.
  EXPECT_EQ(a.on_event(0, event_with({243}, "", {lps[1]})),
            head +
                "\"\",\"logprobs\":{\"tokens\":[\"\xEF\xBF\xBD\"],\"token_logprobs\":[-3.0],"
                "\"top_logprobs\":[{\"\xEF\xBF\xBD\":-3.0,\"!\":-0.25,\"\xC3\xA9\":-2.0}],"
                "\"text_offset\":[2]},\"finish_reason\":null}]}\n\n");
  EXPECT_EQ(a.on_event(0, final_event("length")),
            head + "\"\",\"logprobs\":null,\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n");
}

TEST(LogprobsAssembler, ChatStreamChunksCarryTheirTokens) {
  ResponseAssembler a(make_request(Endpoint::kChat, true, 0), "chatcmpl-s", 9);
  actors::TokenLogprobs lp = two_tokens()[0];
  lp.top.clear();  // logprobs: true without top_logprobs
  const std::string out = a.on_event(0, event_with({10}, "Hi", {lp}));
  const std::string head =
      "data: {\"id\":\"chatcmpl-s\",\"object\":\"chat.completion.chunk\",\"created\":9,"
      "\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":";
  EXPECT_EQ(out, head +
                     "{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
                     "\"finish_reason\":null}]}\n\n" +
                     head +
                     "{\"content\":\"Hi\"},\"logprobs\":{\"content\":[{\"token\":\"Hi\","
                     "\"logprob\":-0.5,\"bytes\":[72,105],\"top_logprobs\":[]}]},"
                     "\"finish_reason\":null}]}\n\n");
}

TEST(LogprobsWebSocket, TokenFrameCarriesLogprobsAndTopWhenAsked) {
  const std::vector<actors::TokenLogprobs> lps = two_tokens();
  const std::vector<int32_t> ids = {10, 243};
  const json with_top = json::parse(ws_token_frame("r", 0, ids, "Hi", lps, true));
  EXPECT_EQ(with_top["logprobs"], json::parse("[-0.5, -3.0]"));
  EXPECT_EQ(with_top["top_logprobs"], json::parse(R"([
    [{"token_id": 10, "token": "Hi", "logprob": -0.5},
     {"token_id": 11, "token": "Yo", "logprob": -1.25}],
    [{"token_id": 12, "token": "!", "logprob": -0.25},
     {"token_id": 13, "token": "\u00e9", "logprob": -2.0}]])"));
  const json plain = json::parse(ws_token_frame("r", 0, ids, "Hi", lps, false));
  EXPECT_EQ(plain["logprobs"], json::parse("[-0.5, -3.0]"));
  EXPECT_FALSE(plain.contains("top_logprobs"));
  EXPECT_FALSE(json::parse(ws_token_frame("r", 0, ids, "Hi")).contains("logprobs"));

  GenerationRequest req = make_request(Endpoint::kCompletions, true, 2);
  WsResponseStream stream("r", req);
  const std::vector<std::string> frames = stream.on_event(0, event_with(ids, "Hi", lps));
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(json::parse(frames[0])["top_logprobs"], with_top["top_logprobs"]);
}

TEST(LogprobsRequest, ParsedIntoSamplingAndCheckedAgainstEchoAndBeamSearch) {
  const ServedModel served = testing::stories_model();
  Result<GenerationRequest> ok =
      parse_completion_request(R"({"prompt": "Hi", "logprobs": 3, "max_tokens": 4})", served);
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok.value().prompts[0].sampling.logprobs, 3);

  Result<GenerationRequest> echo = parse_completion_request(
      R"({"prompt": "Hi", "logprobs": 0, "echo": true, "max_tokens": 4})", served);
  ASSERT_FALSE(echo);
  EXPECT_EQ(echo.error().status, 400);
  EXPECT_EQ(echo.error().param, "echo");
  EXPECT_NE(echo.error().message.find("prompt logprobs are not computed"), std::string::npos);

  Result<GenerationRequest> beam = parse_completion_request(
      R"({"prompt": "Hi", "logprobs": 1, "use_beam_search": true, "n": 2, "temperature": 0,
          "max_tokens": 4})",
      served);
  ASSERT_FALSE(beam);
  EXPECT_EQ(beam.error().param, "logprobs");
  EXPECT_EQ(beam.error().message, "logprobs is not supported with use_beam_search");

  Result<GenerationRequest> chat = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "logprobs": true, "top_logprobs": 2})",
      served);
  ASSERT_TRUE(chat) << chat.error().message;
  EXPECT_EQ(chat.value().prompts[0].sampling.logprobs, 2);
  Result<GenerationRequest> none =
      parse_chat_request(R"({"messages": [{"role": "user", "content": "Hi"}]})", served);
  ASSERT_TRUE(none);
  EXPECT_FALSE(none.value().prompts[0].sampling.logprobs.has_value());
}

}  // namespace
}  // namespace pagedserve::net
