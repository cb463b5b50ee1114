// POST /v1/chat/completions: validates `messages`, renders them with the model's chat template
// (model::kDefaultChatTemplate, ChatML, for models that ship none), tokenizes the result
// without adding special tokens (as HF apply_chat_template(tokenize=True) does: the template
// writes BOS itself when it wants one), and builds a GenerationRequest. Pure; any thread.
//
//   Result<GenerationRequest> parse_chat_request(std::string_view body, const ServedModel&)
//   Result<GenerationRequest> parse_chat_json(const nlohmann::json&, const ServedModel&)
//   Result<std::string> render_chat(messages, served, add_generation_prompt, kwargs)
//
// messages: a non-empty list of {"role", "content"} with role one of system, developer, user,
// assistant, tool; content a string, a list of {"type": "text", "text"} parts (joined with
// "\n", as vLLM does for string-content templates), or null for an assistant turn (rendered as
// ""). An optional string "name" is passed through; an assistant turn's `tool_calls` too (each
// function's `arguments` string parsed into an object, as vLLM does), and a tool turn's
// `tool_call_id`. The template context is {messages, tools, documents (both null when absent,
// as transformers passes them), add_generation_prompt, bos_token, eos_token} plus the keys of
// vLLM's `chat_template_kwargs` object.
// A template's raise_exception(msg) is a 400 with msg (param "messages"). Extra fields:
// `add_generation_prompt` (default true), `add_special_tokens` (default false).
// max_tokens: `max_completion_tokens`, else `max_tokens`, else what the context leaves.
// Tools (chat_tools.h): `tools` go to the template; with tool_choice auto/required/named the
// output is parsed for calls in the served model's format (GenerationRequest::
// tool_call_format), and required/named constrain it to calls (tool_call_grammar.h). Also the
// structured-output fields (structured_output.h).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "net/protocol/api_error.h"
#include "net/protocol/generation_request.h"
#include "net/protocol/served_model.h"

namespace pagedserve::net {

Result<GenerationRequest> parse_chat_request(std::string_view body, const ServedModel& served);
// `ordered`: the same body with its key order kept (structured_output.h), or null.
Result<GenerationRequest> parse_chat_json(const nlohmann::json& body, const ServedModel& served,
                                          const nlohmann::ordered_json* ordered = nullptr);

// Validates `messages` and renders the prompt text. `kwargs` (may be null) is an object
// whose keys are added to the template context.
// `tools`: the request's tools (the template's `tools` variable; null when absent or empty).
Result<std::string> render_chat(const nlohmann::json* messages, const ServedModel& served,
                                bool add_generation_prompt, const nlohmann::json* kwargs,
                                const nlohmann::ordered_json* tools = nullptr);

}  // namespace pagedserve::net
