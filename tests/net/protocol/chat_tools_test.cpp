// Tool calling on the protocol side: tools reach the template, forced calls are a grammar whose
// sentences are exactly well-formed calls (checked by parsing them back and by hand-written
// valid and invalid texts), and the assembler turns call text into message.tool_calls.
#include <gtest/gtest.h>

#include "model/grammar/matcher.h"
#include "net/protocol/chat.h"
#include "net/protocol/response_assembler.h"
#include "net/protocol/tool_call_grammar.h"
#include "tests/net/protocol/protocol_fixtures.h"

namespace pagedserve::net {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using testing::stories_model;

const ordered_json kTools = ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"]}}},
  {"type": "function", "function": {"name": "add", "parameters": {
    "$defs": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "type": "object", "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"$ref": "#/$defs/n"}},
    "required": ["a", "b"]}}}
])");

// Whether `text` is a complete sentence of the forced-call grammar.
bool forced_call_accepts(const ChatTools& tools, ToolCallFormat format, const std::string& text) {
  auto grammar = model::grammar::parse_gbnf(tool_call_gbnf(tools, format), kToolCallsRootRule);
  auto vocab = std::make_shared<const model::grammar::TokenVocabulary>(
      std::vector<std::string>{"x"}, std::vector<int32_t>{});
  model::grammar::GrammarMatcher m(model::grammar::CompiledGrammar::compile(grammar, vocab));
  return m.accept_bytes(text) && m.can_end();
}

ChatTools tools_with(ToolChoice choice, std::string named = {}, bool parallel = true) {
  ChatTools tools;
  tools.tools = kTools;
  tools.choice = choice;
  tools.named = std::move(named);
  tools.parallel = parallel;
  return tools;
}

TEST(ChatTools, ForcedHermesCallsAreExactlyWellFormedCalls) {
  const ChatTools required = tools_with(ToolChoice::kRequired);
  const std::string weather =
      "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\",\"unit\":\"c\"}}"
      "\n</tool_call>";
  const std::string add =
      "<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":2,\"b\":3}}\n</tool_call>";
  EXPECT_TRUE(forced_call_accepts(required, ToolCallFormat::kHermes, weather));
  EXPECT_TRUE(forced_call_accepts(required, ToolCallFormat::kHermes, weather + "\n" + add));
  EXPECT_FALSE(forced_call_accepts(required, ToolCallFormat::kHermes, ""));
  EXPECT_FALSE(forced_call_accepts(required, ToolCallFormat::kHermes, "Sure! " + weather));
  // Arguments are checked against the tool's own schema ($refs rebased into the call schema).
  EXPECT_FALSE(forced_call_accepts(
      required, ToolCallFormat::kHermes,
      "<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":12,\"b\":3}}\n</tool_call>"));
  EXPECT_FALSE(
      forced_call_accepts(required, ToolCallFormat::kHermes,
                          "<tool_call>\n{\"name\":\"nope\",\"arguments\":{}}\n</tool_call>"));
  const ChatTools named = tools_with(ToolChoice::kNamed, "add", /*parallel=*/false);
  EXPECT_TRUE(forced_call_accepts(named, ToolCallFormat::kHermes, add));
  EXPECT_FALSE(forced_call_accepts(named, ToolCallFormat::kHermes, weather));
  EXPECT_FALSE(forced_call_accepts(named, ToolCallFormat::kHermes, add + "\n" + add));
  // What the grammar accepts, the parser reads back as the same call.
  const ParsedToolCalls parsed = parse_tool_calls(weather + "\n" + add, ToolCallFormat::kHermes);
  ASSERT_EQ(parsed.calls.size(), 2u);
  EXPECT_EQ(parsed.calls[0].name, "get_weather");
  EXPECT_EQ(parsed.calls[1].arguments, "{\"a\":2,\"b\":3}");
}

TEST(ChatTools, ForcedMistralAndLlama3Calls) {
  const ChatTools required = tools_with(ToolChoice::kRequired);
  EXPECT_TRUE(forced_call_accepts(
      required, ToolCallFormat::kMistral,
      "[TOOL_CALLS][{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}, "
      "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"x\",\"unit\":\"f\"}}]"));
  EXPECT_TRUE(forced_call_accepts(required, ToolCallFormat::kLlama3Json,
                                  "{\"name\":\"add\",\"parameters\":{\"a\":1,\"b\":2}}"));
  EXPECT_FALSE(forced_call_accepts(required, ToolCallFormat::kLlama3Json,
                                   "{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}"));
}

TEST(ChatTools, RequestFieldsAndErrors) {
  const ServedModel served = stories_model();
  json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
               {"tools", json::parse(kTools.dump())},
               {"tool_choice", "required"}};
  Result<GenerationRequest> ok = parse_chat_json(body, served);
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok.value().tool_call_format, ToolCallFormat::kHermes);
  EXPECT_NE(ok.value().prompts[0].sampling.grammar, nullptr);
  body["tool_choice"] = "none";
  ok = parse_chat_json(body, served);
  ASSERT_TRUE(ok);
  EXPECT_FALSE(ok.value().tool_call_format.has_value());
  EXPECT_EQ(ok.value().prompts[0].sampling.grammar, nullptr);

  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "missing"}}}};
  Result<GenerationRequest> bad = parse_chat_json(body, served);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().param, "tool_choice");
  body["tool_choice"] = "required";
  body["response_format"] = {{"type", "json_object"}};
  bad = parse_chat_json(body, served);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().param, "tool_choice");
}

TEST(ChatTools, AssemblerReportsParsedCalls) {
  GenerationRequest request;
  request.endpoint = Endpoint::kChat;
  request.model = "m";
  request.prompts.resize(1);
  request.prompt_texts = {""};
  request.tool_call_format = ToolCallFormat::kHermes;
  actors::TokenEvent event;
  event.token_ids = {1, 2};
  event.text =
      "Let me see.<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>";
  event.sequence_finished = event.finished = true;
  event.finish_reason = "stop";

  ResponseAssembler whole(request, "chatcmpl-1", 1);
  whole.on_event(0, event);
  const json body = json::parse(whole.response().body);
  const json& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Let me see.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "add");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");

  request.stream = true;
  ResponseAssembler stream(request, "chatcmpl-2", 1);
  const std::string sse = stream.on_event(0, event);
  EXPECT_NE(sse.find("\"tool_calls\":[{\"index\":0"), std::string::npos) << sse;
  EXPECT_NE(sse.find("\"finish_reason\":\"tool_calls\""), std::string::npos) << sse;
  EXPECT_EQ(sse.find("<tool_call>"), std::string::npos) << sse;
}

}  // namespace
}  // namespace pagedserve::net
