// Tests for the WebSocket protocol: client frame parsing and server frames.
#include <gtest/gtest.h>

#include "net/protocol/websocket.h"
#include "tests/net/protocol/protocol_fixtures.h"

namespace pagedserve::net {
namespace {

using nlohmann::json;
using testing::stories_model;

WsInvalid expect_invalid(const std::string& text, const std::string& id, const std::string& param) {
  WsClientFrame frame = parse_ws_client_frame(text, stories_model());
  EXPECT_TRUE(std::holds_alternative<WsInvalid>(frame)) << text;
  if (!std::holds_alternative<WsInvalid>(frame)) return {};
  WsInvalid invalid = std::get<WsInvalid>(frame);
  EXPECT_EQ(invalid.id, id) << text;
  EXPECT_EQ(invalid.error.param, param) << text << " -> " << invalid.error.message;
  return invalid;
}

TEST(WebSocketTest, ParsesStartFrames) {
  WsClientFrame frame = parse_ws_client_frame(
      R"({"type": "completion", "id": "c1", "prompt": "Hi", "max_tokens": 4, "stream": false})",
      stories_model());
  ASSERT_TRUE(std::holds_alternative<WsStart>(frame));
  const WsStart& start = std::get<WsStart>(frame);
  EXPECT_EQ(start.id, "c1");
  EXPECT_EQ(start.request.endpoint, Endpoint::kCompletions);
  EXPECT_TRUE(start.request.stream);  // always streams
  EXPECT_EQ(start.request.prompts[0].sampling.max_tokens, 4);

  frame = parse_ws_client_frame(
      R"({"type": "chat", "id": "c2", "messages": [{"role": "user", "content": "Hi"}],
          "stream_options": {"include_usage": true}})",
      stories_model());
  ASSERT_TRUE(std::holds_alternative<WsStart>(frame));
  EXPECT_EQ(std::get<WsStart>(frame).request.endpoint, Endpoint::kChat);
  EXPECT_EQ(std::get<WsStart>(frame).request.prompt_texts[0],
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

// The structured-output fields work on the WebSocket as on HTTP: a grammar for the engine, or a
// 400 naming the field.
TEST(WebSocketTest, StartFramesTakeStructuredOutputs) {
  WsClientFrame frame = parse_ws_client_frame(
      R"({"type": "completion", "id": "g1", "prompt": "Hi", "guided_choice": ["yes", "no"]})",
      stories_model());
  ASSERT_TRUE(std::holds_alternative<WsStart>(frame));
  EXPECT_NE(std::get<WsStart>(frame).request.prompts[0].sampling.grammar, nullptr);
  frame = parse_ws_client_frame(
      R"({"type": "chat", "id": "g2", "messages": [{"role": "user", "content": "Hi"}],
          "response_format": {"type": "json_schema", "json_schema": {"name": "x",
            "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}})",
      stories_model());
  ASSERT_TRUE(std::holds_alternative<WsStart>(frame));
  EXPECT_NE(std::get<WsStart>(frame).request.prompts[0].sampling.grammar, nullptr);
  expect_invalid(R"({"type": "completion", "id": "g3", "prompt": "Hi", "guided_regex": "(a"})",
                 "g3", "guided_regex");
  expect_invalid(R"({"type": "completion", "id": "g4", "prompt": "Hi",
                     "json_schema": {"type": "string", "multipleOf": 2}})",
                 "g4", "json_schema");
}

TEST(WebSocketTest, ParsesCancel) {
  WsClientFrame frame = parse_ws_client_frame(R"({"type": "cancel", "id": "c1"})", stories_model());
  ASSERT_TRUE(std::holds_alternative<WsCancel>(frame));
  EXPECT_EQ(std::get<WsCancel>(frame).id, "c1");
}

TEST(WebSocketTest, InvalidFrames) {
  expect_invalid("not json", "", "");
  expect_invalid("{\"id\": \"\xff\"}", "", "");
  expect_invalid(R"({"type": "cancel"})", "", "id");
  expect_invalid(R"({"type": "cancel", "id": ""})", "", "id");
  expect_invalid(R"({"type": "cancel", "id": 5})", "", "id");
  expect_invalid(json({{"type", "cancel"}, {"id", std::string(300, 'x')}}).dump(), "", "id");
  expect_invalid(R"({"id": "a"})", "a", "type");
  expect_invalid(R"({"id": "a", "type": "dance"})", "a", "type");
  expect_invalid(R"({"id": "a", "type": "completion"})", "a", "prompt");
  expect_invalid(R"({"id": "a", "type": "completion", "prompt": "x", "max_tokens": 0})", "a",
                 "max_tokens");
  expect_invalid(R"({"id": "a", "type": "chat", "messages": []})", "a", "messages");
  EXPECT_EQ(
      expect_invalid(R"({"id": "a", "type": "chat", "model": "x", "messages": []})", "a", "model")
          .error.status,
      404);
}

TEST(WebSocketTest, ServerFrames) {
  const std::vector<int32_t> ids = {5, 6};
  EXPECT_EQ(ws_token_frame("c1", 0, ids, "ab"),
            R"({"type":"token","id":"c1","index":0,"token_ids":[5,6],"text":"ab"})");
  Usage usage;
  usage.prompt_tokens = 3;
  usage.completion_tokens = 2;
  EXPECT_EQ(ws_done_frame("c1", 1, "stop", usage),
            R"({"type":"done","id":"c1","index":1,"finish_reason":"stop","usage":)"
            R"({"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
  EXPECT_EQ(ws_error_frame("", invalid_request("bad", "id")),
            R"({"type":"error","id":null,"error":{"message":"bad",)"
            R"("type":"invalid_request_error","param":"id","code":null}})");
}

GenerationRequest two_prompts(int n) {
  GenerationRequest req;
  req.n = n;
  req.stream = true;
  for (int i = 0; i < 2; ++i) {
    actors::GenerateRequest prompt;
    prompt.prompt_token_ids = {1, 2};
    req.prompts.push_back(prompt);
    req.prompt_texts.push_back("p");
  }
  return req;
}

TEST(WebSocketTest, StreamFramesPerChoice) {
  WsResponseStream s("r", two_prompts(2));
  actors::TokenEvent e;
  e.index = 1;
  e.token_ids = {9};
  e.text = "x";
  e.num_prompt_tokens = 2;
  std::vector<std::string> frames = s.on_event(1, e);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(json::parse(frames[0])["index"], 3);  // prompt 1, output 1
  actors::TokenEvent bare;
  EXPECT_TRUE(s.on_event(0, bare).empty());  // nothing to say
  actors::TokenEvent end;
  end.finished = true;
  end.finish_reason = "length";
  frames = s.on_event(1, end);
  ASSERT_EQ(frames.size(), 2u);
  const json done2 = json::parse(frames[0]);
  const json done3 = json::parse(frames[1]);
  EXPECT_EQ(done2["type"], "done");
  EXPECT_EQ(done2["index"], 2);
  EXPECT_EQ(done2["usage"]["completion_tokens"], 0);
  EXPECT_EQ(done3["index"], 3);
  EXPECT_EQ(done3["finish_reason"], "length");
  EXPECT_EQ(done3["usage"]["completion_tokens"], 1);
  EXPECT_EQ(done3["usage"]["prompt_tokens"], 2);
  EXPECT_FALSE(s.done());
  end.finish_reason = "stop";
  EXPECT_EQ(s.on_event(0, end).size(), 2u);
  EXPECT_TRUE(s.done());
  EXPECT_FALSE(s.failed());
  EXPECT_TRUE(s.on_event(0, e).empty());
}

TEST(WebSocketTest, DoneFrameAtSequenceFinished) {
  WsResponseStream s("r", two_prompts(2));
  actors::TokenEvent e;
  e.index = 0;
  e.token_ids = {9};
  e.text = "x";
  e.sequence_finished = true;
  e.finish_reason = "stop";
  std::vector<std::string> frames = s.on_event(0, e);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(json::parse(frames[0])["type"], "token");
  EXPECT_EQ(json::parse(frames[1])["type"], "done");
  EXPECT_EQ(json::parse(frames[1])["index"], 0);
  actors::TokenEvent end;
  end.index = 1;
  end.sequence_finished = true;
  end.finished = true;
  end.finish_reason = "length";
  frames = s.on_event(0, end);
  ASSERT_EQ(frames.size(), 1u);  // only choice 1: choice 0 already ended
  EXPECT_EQ(json::parse(frames[0])["index"], 1);
  EXPECT_EQ(json::parse(frames[0])["finish_reason"], "length");
}

TEST(WebSocketTest, StreamErrorsAndCancel) {
  WsResponseStream s("r", two_prompts(1));
  actors::TokenEvent aborted;
  aborted.finished = true;
  aborted.finish_reason = "abort";
  std::vector<std::string> frames = s.on_event(0, aborted);
  ASSERT_EQ(frames.size(), 1u);
  const json error = json::parse(frames[0]);
  EXPECT_EQ(error["type"], "error");
  EXPECT_EQ(error["id"], "r");
  EXPECT_EQ(error["error"]["code"], "request_aborted");
  EXPECT_TRUE(s.done());
  EXPECT_TRUE(s.failed());
  EXPECT_EQ(s.fail(invalid_request("again")), "");

  WsResponseStream slow("q", two_prompts(1));
  const json overflow =
      json::parse(slow.fail(server_error("send buffer full", 503, "slow_reader")));
  EXPECT_EQ(overflow["error"]["code"], "slow_reader");
  EXPECT_TRUE(slow.failed());
}

TEST(WebSocketTest, CancelEndsUnfinishedChoicesWithAbort) {
  WsResponseStream s("r", two_prompts(2));
  actors::TokenEvent e;
  e.token_ids = {9, 10};
  e.text = "xy";
  e.num_prompt_tokens = 2;
  s.on_event(0, e);
  actors::TokenEvent end;
  end.finished = true;
  end.finish_reason = "stop";
  s.on_event(1, end);  // prompt 1 (choices 2, 3) already done
  const std::vector<std::string> frames = s.cancel();
  ASSERT_EQ(frames.size(), 2u);
  const json first = json::parse(frames[0]);
  EXPECT_EQ(first["type"], "done");
  EXPECT_EQ(first["index"], 0);
  EXPECT_EQ(first["finish_reason"], "abort");
  EXPECT_EQ(first["usage"]["completion_tokens"], 2);
  EXPECT_EQ(json::parse(frames[1])["index"], 1);
  EXPECT_TRUE(s.done());
  EXPECT_FALSE(s.failed());
  EXPECT_TRUE(s.cancel().empty());
  EXPECT_TRUE(s.on_event(0, end).empty());  // the engine's abort event is swallowed
}

TEST(WebSocketTest, TransportErrors) {
  const ApiError dup = ws_duplicate_id_error("c1");
  EXPECT_EQ(dup.status, 400);
  EXPECT_EQ(dup.code, "duplicate_id");
  EXPECT_EQ(dup.param, "id");
  EXPECT_EQ(ws_slow_reader_error().code, "slow_reader");
  EXPECT_EQ(ws_shutdown_error().status, 503);
}

}  // namespace
}  // namespace pagedserve::net
