// The grammar that makes a model call a tool: for tool_choice "required" or a named function,
// the output must be tool calls in the served model's format (tool_calls.h) whose arguments
// validate against the called function's parameters. Built from one JSON schema per call
// ({"name": const, "arguments": parameters}, anyOf over the callable tools) and the format's
// markup. Pure.
#pragma once

#include <string>

#include "net/protocol/chat_tools.h"
#include "net/protocol/tool_calls.h"

namespace pagedserve::net {

// Most calls one forced answer may hold with parallel_tool_calls (a weak model would otherwise
// go on calling until max_tokens cuts a call in half).
inline constexpr int kMaxForcedToolCalls = 4;

// The root rule of tool_call_gbnf's grammar (the schema's own rules keep their names).
inline constexpr const char* kToolCallsRootRule = "tool-calls---root";

// GBNF for `tools.callable()` in `format` (parse with root kToolCallsRootRule): Hermes
// `<tool_call>\n{call}\n</tool_call>` (1 to kMaxForcedToolCalls, "\n" between them when
// tools.parallel); Mistral `[TOOL_CALLS][{call}, ...]`; Llama 3 JSON `{call}` with "parameters"
// (one call: Llama 3.1's templates show one at a time). Throws model::grammar::GrammarError for
// parameters the schema compiler refuses (its message names the tool).
std::string tool_call_gbnf(const ChatTools& tools, ToolCallFormat format);

}  // namespace pagedserve::net
