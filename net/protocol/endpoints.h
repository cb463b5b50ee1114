// The small endpoints as pure functions (request in, HttpResponse out), and a router for them:
//
//   GET  /v1/models   models_response: {"object": "list", "data": [{"id", "object": "model",
//                     "created", "owned_by": "pagedserve", "root", "max_model_len"}]}
//   GET  /health      health_response: 200, empty body, no Content-Type
//   GET  /version     version_response: {"version": "0.1.0"}
//   POST /tokenize    tokenize_response: {"prompt": "..."} (add_special_tokens default true) or
//                     {"messages": [...]} (rendered as chat; add_generation_prompt default
//                     true, add_special_tokens default false); optional "model" ->
//                     {"tokens": [...], "count": N, "max_model_len": M}
//   POST /detokenize  detokenize_response: {"tokens": [...]} -> {"prompt": "..."}
//
// route_simple_endpoint answers those five paths (405 for a wrong method) and returns nullopt
// for every other path: /v1/completions, /v1/chat/completions, /metrics and the WebSocket
// upgrade stay with the transport, and not_found_response answers the rest.
#pragma once

#include <optional>
#include <string_view>

#include "net/protocol/api_error.h"
#include "net/protocol/served_model.h"

namespace pagedserve::net {

inline constexpr std::string_view kServerVersion = "0.1.0";

HttpResponse models_response(const ServedModel& served);
HttpResponse health_response();
HttpResponse version_response();
HttpResponse tokenize_response(std::string_view body, const ServedModel& served);
HttpResponse detokenize_response(std::string_view body, const ServedModel& served);
HttpResponse not_found_response(std::string_view target);
HttpResponse method_not_allowed_response(std::string_view method, std::string_view target);

// `method` as on the wire ("GET"), `target` the request target (a query string is ignored).
std::optional<HttpResponse> route_simple_endpoint(std::string_view method, std::string_view target,
                                                  std::string_view body, const ServedModel& served);

}  // namespace pagedserve::net
