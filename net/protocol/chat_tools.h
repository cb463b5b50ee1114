// OpenAI tool calling on /v1/chat/completions: the `tools`, `tool_choice` and
// `parallel_tool_calls` fields, read and checked. Pure.
//
//   tools: [{"type": "function", "function": {"name", "description"?, "parameters"?,
//           "strict"?}}]; names are 1-64 of [a-zA-Z0-9_-] and unique.
//   tool_choice: "none" | "auto" (the default with tools) | "required" |
//                {"type": "function", "function": {"name"}} (one of the tools).
//   parallel_tool_calls: bool (default true); false allows one call per turn.
// The tools go to the chat template as its `tools` variable, as given (key order kept).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "net/protocol/json_fields.h"

namespace pagedserve::net {

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ChatTools {
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // as the client sent them
  ToolChoice choice = ToolChoice::kNone;
  std::string named;  // kNamed: the function that must be called
  bool parallel = true;

  // The model is asked for calls (their output is parsed): tools given, choice not none.
  bool calls_wanted() const { return !tools.empty() && choice != ToolChoice::kNone; }
  // The output must be calls (the grammar enforces it): required, or a named function.
  bool calls_forced() const {
    return !tools.empty() && (choice == ToolChoice::kRequired || choice == ToolChoice::kNamed);
  }
  // The tools a forced call may use: all, or only the named one.
  std::vector<const nlohmann::ordered_json*> callable() const;
};

// Reads the three fields (`ordered`: the body with its key order, or null). Errors go to
// `fields` as 400s naming the field, e.g. "tools[1].function.name must be ...".
ChatTools read_chat_tools(FieldReader& fields, const nlohmann::ordered_json* ordered);

}  // namespace pagedserve::net
