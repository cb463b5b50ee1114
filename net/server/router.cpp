// route_request and the transport's own error bodies (see router.h). Pure; any thread.
#include "net/server/router.h"

#include <cctype>

#include "net/protocol/chat.h"
#include "net/protocol/completions.h"
#include "net/protocol/endpoints.h"

namespace pagedserve::net {
namespace {

std::string_view path_of(std::string_view target) { return target.substr(0, target.find('?')); }

// Compares without an early exit, so the time taken does not reveal the key's prefix.
bool same_secret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

Route route_generation(const RouteInput& input, std::string_view path, const ServedModel& served) {
  if (input.method != "POST") return method_not_allowed_response(input.method, path);
  Result<GenerationRequest> parsed = path == "/v1/completions"
                                         ? parse_completion_request(input.body, served)
                                         : parse_chat_request(input.body, served);
  if (!parsed) return error_response(parsed.error());
  return RouteGenerate{std::move(parsed.value())};
}

}  // namespace

bool is_authorized(std::string_view path, std::string_view authorization,
                   std::string_view api_key) {
  if (api_key.empty() || path == "/health" || path == "/metrics") return true;
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() < kBearer.size()) return false;
  // The scheme is case-insensitive (RFC 7235); the key is not.
  for (size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) !=
        std::tolower(static_cast<unsigned char>(kBearer[i]))) {
      return false;
    }
  }
  return same_secret(authorization.substr(kBearer.size()), api_key);
}

ApiError unauthorized_error() {
  ApiError error;
  error.status = 401;
  error.message = "Invalid or missing API key: send the header 'Authorization: Bearer <key>'.";
  error.code = "invalid_api_key";
  return error;
}

ApiError body_too_large_error(size_t limit) {
  ApiError error;
  error.status = 413;
  error.message = "The request body exceeds the limit of " + std::to_string(limit) + " bytes.";
  error.code = "request_too_large";
  return error;
}

ApiError bad_http_error(std::string_view what) {
  return invalid_request("Malformed HTTP request: " + std::string(what));
}

Route route_request(const RouteInput& input, const ServedModel& served, std::string_view api_key) {
  const std::string_view path = path_of(input.target);
  if (!is_authorized(path, input.authorization, api_key)) {
    return error_response(unauthorized_error());
  }
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    return route_generation(input, path, served);
  }
  if (path == "/metrics") {
    if (input.method != "GET") return method_not_allowed_response(input.method, path);
    return RouteMetrics{};
  }
  if (path == kWebSocketPath || path == kWebSocketAliasPath) {
    if (input.method != "GET") return method_not_allowed_response(input.method, path);
    if (!input.websocket_upgrade) {
      ApiError error = invalid_request("GET " + std::string(path) +
                                       " expects a WebSocket upgrade (Upgrade: websocket).");
      error.status = 426;
      return error_response(error);
    }
    return RouteWebSocket{};
  }
  if (std::optional<HttpResponse> simple =
          route_simple_endpoint(input.method, input.target, input.body, served)) {
    return std::move(*simple);
  }
  return not_found_response(input.target);
}

}  // namespace pagedserve::net
