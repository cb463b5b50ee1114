// The server's request routing as a pure function (request line, auth header and body in; what
// to do out), so the sessions only do I/O. Decides: authentication (401), the small endpoints
// (net/protocol/endpoints.h), parsing completions/chat bodies (400s come from the protocol
// layer), the render endpoints (net/protocol/render.h), /metrics, the WebSocket upgrade, 404
// and 405. No Asio; any thread.
//
// Authentication: with API keys set, every path but /health and /metrics needs one of them as
// "Authorization: Bearer <key>" (OpenAI's and vLLM's way) or "X-Api-Key: <key>" (llama.cpp's,
// also Anthropic-style clients); /health is for load balancers, /metrics for scrapers. A CORS
// preflight (OPTIONS from an allowed origin) needs no key either: browsers never send one.
// A browser's WebSocket cannot send headers, so the upgrade may instead offer the key as a
// subprotocol: "Sec-WebSocket-Protocol: pagedserve, pagedserve.key.<base64url(key)>"; the
// server then answers with the subprotocol "pagedserve" (never echoing the key token).
// The playground page (GET / and /ui/*, embedded in the binary) is open: it asks for the key.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "net/protocol/api_error.h"
#include "net/protocol/generation_request.h"
#include "net/protocol/served_model.h"

namespace pagedserve::net {

inline constexpr std::string_view kWebSocketPath = "/v1/stream";
inline constexpr std::string_view kWebSocketAliasPath = "/v1/ws";

// Who may call the server: the configuration's keys and origins (HttpServerConfig).
struct AccessPolicy {
  std::vector<std::string> api_keys;         // empty: no authentication
  std::vector<std::string> allowed_origins;  // empty: CORS off; "*": any origin
  bool open_ui = false;                      // serve the playground page (no key needed)
};

// The subprotocol a browser offers on the WebSocket upgrade, and the prefix of the one that
// carries its API key (base64url, no padding).
inline constexpr std::string_view kWebSocketProtocol = "pagedserve";
inline constexpr std::string_view kWebSocketKeyProtocolPrefix = "pagedserve.key.";

struct RouteInput {
  std::string_view method;         // as on the wire: "GET", "POST", ...
  std::string_view target;         // path plus an optional query string
  std::string_view authorization;  // the Authorization header ("" when absent)
  std::string_view body;
  bool websocket_upgrade = false;     // the request asks to upgrade to a WebSocket
  std::string_view x_api_key;         // the X-Api-Key header ("" when absent)
  std::string_view origin;            // the Origin header ("" when absent)
  std::string_view preflight_method;  // Access-Control-Request-Method ("" when absent)
  std::string_view websocket_protocols;  // Sec-WebSocket-Protocol ("" when absent)
};

struct RouteGenerate {  // POST /v1/completions or /v1/chat/completions, parsed and valid
  GenerationRequest request;
};
struct RouteMetrics {};    // GET /metrics: the transport renders it (it needs engine stats)
struct RouteWebSocket {};  // GET /v1/stream with an upgrade, authorized
struct RoutePreflight {};  // OPTIONS from an allowed origin: 204 with the CORS preflight headers

using Route =
    std::variant<HttpResponse, RouteGenerate, RouteMetrics, RouteWebSocket, RoutePreflight>;

Route route_request(const RouteInput& input, const ServedModel& served, const AccessPolicy& access);

// True when no key is configured, the path is exempt, or either header carries one of the
// keys. Every key is compared in full whatever the outcome (see router.cpp for what the time
// taken can reveal).
bool is_authorized(std::string_view path, std::string_view authorization,
                   std::string_view x_api_key, const std::vector<std::string>& api_keys);
// Whether a Sec-WebSocket-Protocol list offers `name` (comma-separated, spaces ignored).
bool offers_websocket_protocol(std::string_view protocols, std::string_view name);
// The key carried by a "pagedserve.key.<base64url>" entry of the list, or nullopt when there
// is none or it does not decode.
std::optional<std::string> websocket_protocol_key(std::string_view protocols);
ApiError unauthorized_error();                   // 401, code "invalid_api_key"
ApiError body_too_large_error(size_t limit);     // 413
ApiError bad_http_error(std::string_view what);  // 400 for a request Beast could not parse
ApiError header_too_large_error(size_t limit);   // 431

// ---- CORS ----
// The value of Access-Control-Allow-Origin for a request from `origin`: the origin itself
// when it is allowed (then "Vary: Origin" goes with it), nullopt otherwise (no CORS headers:
// the browser then refuses the response to the page). Origins compare exactly (scheme, host
// and port, as browsers send them); "*" allows any.
std::optional<std::string> cors_allowed_origin(const std::vector<std::string>& allowed_origins,
                                               std::string_view origin);
inline constexpr std::string_view kCorsAllowMethods = "GET, POST, OPTIONS";
inline constexpr std::string_view kCorsAllowHeaders = "Authorization, Content-Type, X-Api-Key";
inline constexpr std::string_view kCorsMaxAgeSeconds = "600";

}  // namespace pagedserve::net
