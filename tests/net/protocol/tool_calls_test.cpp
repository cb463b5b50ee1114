// Tool-call parsing: each format's complete parse against hand-written expectations (content,
// names, arguments), then the stream parser fed the same outputs byte by byte and in random
// chunkings, its deltas reassembled (content concatenated, each index's header and argument
// fragments joined) and compared with parse_tool_calls; format detection on the real templates
// of ../shared/chat-templates.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <random>

#include "net/protocol/tool_calls.h"
#include "tests/test_paths.h"

namespace pagedserve::net {
namespace {

struct ExpectedCall {
  std::string name;
  std::string arguments;
};

struct Case {
  const char* label;
  ToolCallFormat format;
  std::string output;
  std::string content;
  std::vector<ExpectedCall> calls;
};

const std::vector<Case>& cases() {
  using F = ToolCallFormat;
  static const std::vector<Case> all = {
      {"hermes_single",
       F::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
       "\"c\"}}\n</tool_call>",
       "",
       {{"get_weather", R"({"city":"Paris","unit":"c"})"}}},
      {"hermes_content_then_parallel",
       F::kHermes,
       "Let me check both.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, 2, {\"y\": null}]}}\n"
       "</tool_call>",
       "Let me check both.",
       {{"a", "{}"}, {"b", R"({"x":[1,2,{"y":null}]})"}}},
      {"hermes_nested_unicode_escapes",
       F::kHermes,
       "<tool_call>\n{\"name\": \"say\", \"arguments\": {\"text\": \"caf\u00e9 \u65e5\u672c "
       "\U0001F44B\\u00e9 \\\"quoted\\\" {not} [json] \\\\\", \"opts\": {\"a\": {\"b\": "
       "true}}}}\n</tool_call>",
       "",
       {{"say",
         "{\"text\":\"caf\u00e9 \u65e5\u672c \U0001F44B\\u00e9 \\\"quoted\\\" {not} "
         "[json] \\\\\",\"opts\":{\"a\":{\"b\":true}}}"}}},
      {"hermes_malformed_stays_content",
       F::kHermes,
       "Sure. <tool_call>\nnot json at all\n</tool_call> and <tool_call>{\"arguments\": {}, "
       "\"name\": \"x\"}</tool_call> done <tool_call>{\"name\": \"ok\", \"arguments\": "
       "{\"k\": 1}}</tool_call>",
       "Sure. <tool_call>\nnot json at all\n</tool_call> and <tool_call>{\"arguments\": {}, "
       "\"name\": \"x\"}</tool_call> done",
       {{"ok", R"({"k":1})"}}},
      {"hermes_arguments_not_object",
       F::kHermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>",
       "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>",
       {}},
      {"hermes_unclosed_last_call",
       F::kHermes,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n",
       "",
       {{"f", R"({"a":1})"}}},
      {"hermes_partial_tag_is_content", F::kHermes, "a < b and <tool_c", "a < b and <tool_c", {}},
      {"hermes_cut_in_header",
       F::kHermes,
       "Hi <tool_call>\n{\"name\": \"get_we",
       "Hi <tool_call>\n{\"name\": \"get_we",
       {}},
      {"hermes_plain_text", F::kHermes, "  Just an answer.\n", "Just an answer.", {}},
      {"llama_python_tag",
       F::kLlama3Json,
       "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
       "",
       {{"get_weather", R"({"city":"Oslo"})"}}},
      {"llama_semicolons_newlines_arguments",
       F::kLlama3Json,
       "{\"name\": \"a\", \"parameters\": {\"n\": 1}}; {\"name\": \"b\", \"arguments\": "
       "{\"s\": \"x;y\"}}\n{\"name\": \"c\", \"parameters\": {}}",
       "",
       {{"a", R"({"n":1})"}, {"b", R"({"s":"x;y"})"}, {"c", "{}"}}},
      {"llama_text_is_content",
       F::kLlama3Json,
       "The weather is {\"fine\": true}.",
       "The weather is {\"fine\": true}.",
       {}},
      {"llama_json_without_name", F::kLlama3Json, "{\"answer\": 42}", "{\"answer\": 42}", {}},
      {"llama_text_after_calls",
       F::kLlama3Json,
       "{\"name\": \"a\", \"parameters\": {}}\nThat is all.",
       "That is all.",
       {{"a", "{}"}}},
      {"mistral_content_and_two_calls",
       F::kMistral,
       "I will call two tools.[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": "
       "\"\u00fc\"}, \"id\": \"abc123def\"}, {\"name\": \"b\", \"arguments\": {\"l\": [1]}, "
       "\"id\": \"xyz987uvw\"}]",
       "I will call two tools.",
       {{"a", "{\"q\":\"\u00fc\"}"}, {"b", R"({"l":[1]})"}}},
      {"mistral_not_a_list", F::kMistral, "[TOOL_CALLS] sorry", "[TOOL_CALLS] sorry", {}},
      {"mistral_text_after_list",
       F::kMistral,
       "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}] trailing",
       "trailing",
       {{"a", "{}"}}},
  };
  return all;
}

std::vector<ExpectedCall> names_and_arguments(const std::vector<ToolCall>& calls) {
  std::vector<ExpectedCall> out;
  for (const ToolCall& c : calls) out.push_back({c.name, c.arguments});
  return out;
}

bool operator==(const ExpectedCall& a, const ExpectedCall& b) {
  return a.name == b.name && a.arguments == b.arguments;
}

void PrintTo(const ExpectedCall& c, std::ostream* os) { *os << c.name << " " << c.arguments; }

// A stream's deltas put back together: the content and one ToolCall per index.
struct Reassembled {
  std::string content;
  std::vector<ToolCall> calls;

  void add(const ToolCallStreamDelta& delta) {
    content += delta.content;
    for (const auto& entry : delta.tool_calls) {
      const size_t index = entry.at("index").get<size_t>();
      if (entry.contains("id")) {
        ASSERT_EQ(index, calls.size()) << "headers come in index order, once each";
        EXPECT_EQ(entry.at("type"), "function");
        EXPECT_EQ(entry.at("function").at("arguments"), "");
        calls.push_back({entry.at("id"), entry.at("function").at("name"), ""});
      } else {
        ASSERT_LT(index, calls.size()) << "arguments before their header";
        EXPECT_FALSE(entry.at("function").contains("name"));
        calls[index].arguments += entry.at("function").at("arguments").get<std::string>();
      }
    }
  }
};

Reassembled stream(const Case& c, const std::vector<size_t>& cuts, uint64_t seed) {
  ToolCallStreamParser parser(c.format, seed);
  Reassembled result;
  size_t begin = 0;
  for (size_t cut : cuts) {
    result.add(parser.feed(std::string_view(c.output).substr(begin, cut - begin)));
    begin = cut;
  }
  result.add(parser.feed(std::string_view(c.output).substr(begin)));
  result.add(parser.finish());
  return result;
}

void expect_same(const Reassembled& streamed, const ParsedToolCalls& parsed,
                 const std::string& how) {
  EXPECT_EQ(streamed.content, parsed.content) << how;
  ASSERT_EQ(streamed.calls.size(), parsed.calls.size()) << how;
  for (size_t i = 0; i < parsed.calls.size(); ++i) {
    EXPECT_EQ(streamed.calls[i].id, parsed.calls[i].id) << how;
    EXPECT_EQ(streamed.calls[i].name, parsed.calls[i].name) << how;
    EXPECT_EQ(streamed.calls[i].arguments, parsed.calls[i].arguments) << how;
  }
}

TEST(ToolCallParse, EachCaseAsWritten) {
  for (const Case& c : cases()) {
    const ParsedToolCalls parsed = parse_tool_calls(c.output, c.format, /*id_seed=*/1);
    EXPECT_EQ(parsed.content, c.content) << c.label;
    EXPECT_EQ(names_and_arguments(parsed.calls), c.calls) << c.label;
    for (const ToolCall& call : parsed.calls) {
      EXPECT_TRUE(nlohmann::json::accept(call.arguments)) << c.label;
      if (c.format == ToolCallFormat::kMistral) {
        EXPECT_EQ(call.id.size(), 9u) << c.label;
      } else {
        EXPECT_TRUE(call.id.starts_with("call_")) << c.label;
      }
    }
  }
}

TEST(ToolCallParse, IdsAreUniqueAndSeeded) {
  const Case& c = cases()[1];
  const ParsedToolCalls a = parse_tool_calls(c.output, c.format, 7);
  const ParsedToolCalls b = parse_tool_calls(c.output, c.format, 7);
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_NE(a.calls[0].id, a.calls[1].id);
  EXPECT_EQ(a.calls[0].id, b.calls[0].id);
  EXPECT_NE(parse_tool_calls(c.output, c.format).calls[0].id,
            parse_tool_calls(c.output, c.format).calls[0].id);
  const nlohmann::ordered_json json = tool_call_json(a.calls[1]);
  EXPECT_EQ(json.dump(), R"({"id":")" + a.calls[1].id +
                             R"(","type":"function","function":{"name":"b","arguments":)" +
                             nlohmann::json(a.calls[1].arguments).dump() + "}}");
}

TEST(ToolCallStream, ByteByByteMatchesTheCompleteParse) {
  for (const Case& c : cases()) {
    std::vector<size_t> cuts;
    for (size_t i = 1; i < c.output.size(); ++i) cuts.push_back(i);
    expect_same(stream(c, cuts, 3), parse_tool_calls(c.output, c.format, 3),
                std::string(c.label) + " byte by byte");
  }
}

TEST(ToolCallStream, RandomChunkingsMatchTheCompleteParse) {
  std::mt19937 rng(12345);
  for (const Case& c : cases()) {
    const ParsedToolCalls parsed = parse_tool_calls(c.output, c.format, 5);
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<size_t> cuts;
      for (size_t i = 1; i < c.output.size(); ++i) {
        if (rng() % 5 == 0) cuts.push_back(i);
      }
      expect_same(stream(c, cuts, 5), parsed,
                  std::string(c.label) + " trial " + std::to_string(trial));
    }
  }
}

TEST(ToolCallStream, ContentFlowsAndCallsAnnounceEarly) {
  ToolCallStreamParser parser(ToolCallFormat::kHermes, 1);
  EXPECT_EQ(parser.feed("Checking ").content, "Checking");  // the trailing blank waits
  EXPECT_EQ(parser.feed("now. <tool").content, " now.");    // a possible tag waits
  EXPECT_TRUE(parser.feed("_call>\n{\"name\": \"f\", ").empty());
  const ToolCallStreamDelta header = parser.feed("\"arguments\": {\"a\": ");
  ASSERT_EQ(header.tool_calls.size(), 2u);
  EXPECT_EQ(header.tool_calls[0]["function"]["name"], "f");
  EXPECT_EQ(header.tool_calls[1]["function"]["arguments"], "{\"a\":");
  EXPECT_EQ(parser.feed("\"b c\"").tool_calls[0]["function"]["arguments"], "\"b c\"");
  EXPECT_EQ(parser.feed("}}\n</tool_call>").tool_calls[0]["function"]["arguments"], "}");
  EXPECT_EQ(parser.num_calls(), 1u);
  EXPECT_TRUE(parser.finish().empty());
}

TEST(ToolCallStream, ACallCutAfterItsHeaderWasStreamedButIsContentWhenComplete) {
  const std::string output = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"unfin";
  ToolCallStreamParser parser(ToolCallFormat::kHermes, 1);
  Reassembled streamed;
  streamed.add(parser.feed(output));
  streamed.add(parser.finish());
  ASSERT_EQ(streamed.calls.size(), 1u);
  EXPECT_EQ(streamed.calls[0].arguments, "{\"a\":\"unfin");
  const ParsedToolCalls parsed = parse_tool_calls(output, ToolCallFormat::kHermes);
  EXPECT_TRUE(parsed.calls.empty());
  EXPECT_EQ(parsed.content, output);
}

TEST(ToolCallFormats, Names) {
  EXPECT_EQ(parse_tool_call_format("hermes"), ToolCallFormat::kHermes);
  EXPECT_EQ(parse_tool_call_format("llama3_json"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(parse_tool_call_format("mistral"), ToolCallFormat::kMistral);
  EXPECT_EQ(parse_tool_call_format("pythonic"), std::nullopt);
  for (auto f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    EXPECT_EQ(parse_tool_call_format(tool_call_format_name(f)), f);
  }
}

TEST(ToolCallFormats, DetectedFromTheRealTemplates) {
  const auto detect = [](const std::string& name) {
    const auto path = testing::shared_dir() / "chat-templates" / (name + ".jinja");
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in) << path;
    return tool_call_format_from_template(
        std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  };
  EXPECT_EQ(detect("Qwen-Qwen2.5-7B-Instruct"), ToolCallFormat::kHermes);
  EXPECT_EQ(detect("NousResearch-Hermes-3-Llama-3.1-8B-tool_use"), ToolCallFormat::kHermes);
  EXPECT_EQ(detect("meta-llama-Llama-3.1-8B-Instruct"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(detect("mistralai-Mistral-Nemo-Instruct-2407"), ToolCallFormat::kMistral);
  EXPECT_EQ(detect("google-gemma-2-2b-it"), std::nullopt);
  EXPECT_EQ(detect("microsoft-Phi-3.5-mini-instruct"), std::nullopt);
  EXPECT_EQ(detect("HuggingFaceTB-SmolLM3-3B"), std::nullopt);
  EXPECT_EQ(detect("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"), std::nullopt);
}

}  // namespace
}  // namespace pagedserve::net
