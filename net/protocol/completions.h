// POST /v1/completions: parses an OpenAI completions body into a GenerationRequest (one
// actors::GenerateRequest per prompt). Pure: no I/O; safe from any thread.
//
//   Result<GenerationRequest> parse_completion_request(std::string_view body, const ServedModel&)
//   Result<GenerationRequest> parse_completion_json(const nlohmann::json&, const ServedModel&)
//
// `prompt`: a string, a list of token ids, or a list whose items are strings or lists of token
// ids (one GenerateRequest each). Strings are encoded with the model's special tokens (BOS)
// unless `add_special_tokens` is false (vLLM's extra field); token lists are used as given.
// `max_tokens` defaults to 16. `suffix` is refused (400). Every other rule: generation_request.h.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "net/protocol/api_error.h"
#include "net/protocol/generation_request.h"
#include "net/protocol/served_model.h"

namespace pagedserve::net {

inline constexpr int kDefaultCompletionMaxTokens = 16;  // OpenAI's default for completions

Result<GenerationRequest> parse_completion_request(std::string_view body,
                                                   const ServedModel& served);
// `ordered`: the same body with its key order kept (structured_output.h), or null.
Result<GenerationRequest> parse_completion_json(const nlohmann::json& body,
                                                const ServedModel& served,
                                                const nlohmann::ordered_json* ordered = nullptr);

}  // namespace pagedserve::net
