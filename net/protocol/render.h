// The render endpoints, vLLM's shapes (vllm/entrypoints/serve/render): what the engine would
// run for a request, without running it. The llm-d endpoint picker's token producer calls them
// to get a request's exact token ids (after the chat template), from which it computes the KV
// block hashes it matches against the replicas' KV-cache events.
//
//   POST /v1/completions/render       a completions body -> a JSON array, one object per prompt
//   POST /v1/chat/completions/render  a chat body -> one object
//
// Each object is vLLM's GenerateRequest: {"request_id": "cmpl-..." | "chatcmpl-...",
// "token_ids": [...], "features": null, "sampling_params": {...}, "model", "stream",
// "stream_options", "cache_salt": null, "priority": 0, "kv_transfer_params": null}.
//
// The body is parsed by the generation path itself (parse_completion_request /
// parse_chat_request), so the ids, the validation and every 400 are exactly those of
// POST /v1/completions and /v1/chat/completions. Beam search is refused, as vLLM does.
// Pure; any thread.
#pragma once

#include <string_view>

#include "net/protocol/api_error.h"
#include "net/protocol/generation_request.h"
#include "net/protocol/served_model.h"

namespace pagedserve::net {

inline constexpr std::string_view kCompletionsRenderPath = "/v1/completions/render";
inline constexpr std::string_view kChatRenderPath = "/v1/chat/completions/render";

HttpResponse render_response(Endpoint endpoint, std::string_view body, const ServedModel& served);

// vLLM's GenerateRequest for prompt `index` of a parsed request (exposed for tests).
nlohmann::ordered_json generate_request_json(const GenerationRequest& request, size_t index);

}  // namespace pagedserve::net
