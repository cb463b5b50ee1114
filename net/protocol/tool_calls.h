// Tool calls in a model's output text: the formats models write them in, which format a chat
// template asks for, and two parsers that turn the text into OpenAI `tool_calls`: one for a
// complete output and one fed the deltas of a stream (one per choice). Pure; no I/O.
//
//   tool_call_format_from_template(source)  Hermes / Mistral / Llama 3 JSON, or nullopt
//   parse_tool_call_format(name)            vLLM's --tool-call-parser names
//   parse_tool_calls(output, format)        {content, calls}
//   ToolCallStreamParser                    feed(delta) / finish() -> OpenAI stream deltas
//
// A call is {"name": NAME, "arguments": {...}} with `name` first (Llama 3 may say
// "parameters"); its `arguments` string is the model's JSON object with the whitespace outside
// strings removed (key order and string escapes as the model wrote them). A call commits once
// its name and the `{` of its arguments are read: the stream parser then announces it and
// streams the arguments as they come. Text that looked like a call start but is not one (bad
// JSON, no name, arguments not an object, no closing tag) stays content, unchanged.
// `content` is the text outside the calls, concatenated and stripped of leading and trailing
// whitespace (empty when only calls were written).
//
// The one difference between the two parsers: a call that breaks after it committed (the
// output was cut by max_tokens inside the arguments, or the arguments are not valid JSON)
// has already been streamed, as vLLM streams it; parse_tool_calls returns its text as content.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagedserve::net {

enum class ToolCallFormat {
  // <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, as many as the model
  // likes, text around them: Hermes 2 Pro / Hermes 3, Qwen2.5, Qwen3.
  kHermes,
  // {"name": ..., "parameters": {...}} (or "arguments"), optionally after <|python_tag|>,
  // several separated by ';' or newlines; the output must start with the call: Llama 3.1,
  // 3.2, 3.3 JSON tool calling. Text after the calls is content.
  kLlama3Json,
  // [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "abc123def"}, ...], text before it
  // is content: Mistral Nemo and other Mistral models with the v3 tokenizer. Call ids are
  // 9 alphanumeric characters, the only ids Mistral's templates accept back.
  kMistral,
};

// The format a chat template renders tool calls in: `[TOOL_CALLS]` -> Mistral,
// `<tool_call>` -> Hermes, `<|python_tag|>` or Llama 3.1's `"parameters"` -> Llama 3 JSON;
// nullopt for a template that shows no tool-call format (Gemma 2, Phi-3.5, ...).
std::optional<ToolCallFormat> tool_call_format_from_template(std::string_view template_source);

// vLLM's --tool-call-parser names: "hermes", "llama3_json", "mistral"; nullopt otherwise.
std::optional<ToolCallFormat> parse_tool_call_format(std::string_view name);
std::string_view tool_call_format_name(ToolCallFormat format);

struct ToolCall {
  std::string id;         // "call_" + 24 alphanumerics; 9 alphanumerics for kMistral
  std::string name;       // the function's name
  std::string arguments;  // a JSON object as text, without insignificant whitespace
};

// {"id", "type": "function", "function": {"name", "arguments"}}, as message.tool_calls holds.
nlohmann::ordered_json tool_call_json(const ToolCall& call);

struct ParsedToolCalls {
  std::string content;  // the text outside the calls, stripped; empty when there is none
  std::vector<ToolCall> calls;
};

// `id_seed` draws the call ids: the same seed gives the same ids (a stream parser with that
// seed gives the same ones too); nullopt draws a random seed.
ParsedToolCalls parse_tool_calls(std::string_view output, ToolCallFormat format,
                                 std::optional<uint64_t> id_seed = std::nullopt);

// What one feed() or finish() adds to a streamed message: content text, and entries of
// OpenAI's `delta.tool_calls`: {"index", "id", "type": "function", "function": {"name",
// "arguments": ""}} when a call's name is known, then {"index", "function": {"arguments":
// fragment}}; a call's fragments concatenate to its ToolCall::arguments.
struct ToolCallStreamDelta {
  std::string content;
  nlohmann::ordered_json tool_calls = nlohmann::ordered_json::array();
  bool empty() const { return content.empty() && tool_calls.empty(); }
};

namespace tool_calls_detail {
class Scanner;
}

// One choice's stream. Holds back text that may be a call's markup until it knows; all
// other text comes out as content at once, except leading whitespace and a trailing run of
// whitespace (kept until more content follows, dropped at the end, as parse_tool_calls
// strips). Not thread-safe: one per choice, on the thread that streams it.
class ToolCallStreamParser {
 public:
  explicit ToolCallStreamParser(ToolCallFormat format,
                                std::optional<uint64_t> id_seed = std::nullopt);
  ~ToolCallStreamParser();
  ToolCallStreamParser(ToolCallStreamParser&&) noexcept;
  ToolCallStreamParser& operator=(ToolCallStreamParser&&) noexcept;

  ToolCallStreamDelta feed(std::string_view text);
  // The end of the output: whatever was held back (a partial tag, a call that never got its
  // name) comes out as content. Call once; feed() after finish() is a bug.
  ToolCallStreamDelta finish();

  // Calls announced so far (their ids and names, arguments as streamed).
  size_t num_calls() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace pagedserve::net
