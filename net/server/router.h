// The server's request routing as a pure function (request line, auth header and body in; what
// to do out), so the sessions only do I/O. Decides: authentication (401), the small endpoints
// (net/protocol/endpoints.h), parsing completions/chat bodies (400s come from the protocol
// layer), /metrics, the WebSocket upgrade, 404 and 405. No Asio; any thread.
//
// Authentication: with an API key set, every path but /health and /metrics needs
// "Authorization: Bearer <key>" (/health for load balancers, /metrics for scrapers).
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "net/protocol/api_error.h"
#include "net/protocol/generation_request.h"
#include "net/protocol/served_model.h"

namespace pagedserve::net {

inline constexpr std::string_view kWebSocketPath = "/v1/stream";
inline constexpr std::string_view kWebSocketAliasPath = "/v1/ws";

struct RouteInput {
  std::string_view method;         // as on the wire: "GET", "POST", ...
  std::string_view target;         // path plus an optional query string
  std::string_view authorization;  // the Authorization header ("" when absent)
  std::string_view body;
  bool websocket_upgrade = false;  // the request asks to upgrade to a WebSocket
};

struct RouteGenerate {  // POST /v1/completions or /v1/chat/completions, parsed and valid
  GenerationRequest request;
};
struct RouteMetrics {};    // GET /metrics: the transport renders it (it needs engine stats)
struct RouteWebSocket {};  // GET /v1/stream with an upgrade, authorized

using Route = std::variant<HttpResponse, RouteGenerate, RouteMetrics, RouteWebSocket>;

Route route_request(const RouteInput& input, const ServedModel& served, std::string_view api_key);

// True when no key is configured, the path is exempt, or the header carries the key.
bool is_authorized(std::string_view path, std::string_view authorization, std::string_view api_key);
ApiError unauthorized_error();                   // 401, code "invalid_api_key"
ApiError body_too_large_error(size_t limit);     // 413
ApiError bad_http_error(std::string_view what);  // 400 for a request Beast could not parse

}  // namespace pagedserve::net
