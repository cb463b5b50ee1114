// route_request and the transport's own error bodies (see router.h). Pure; any thread.
#include "net/server/router.h"

#include <cctype>

#include "net/protocol/chat.h"
#include "net/protocol/completions.h"
#include "net/protocol/endpoints.h"
#include "net/ui/ui_assets.h"
#include "net/protocol/render.h"

namespace pagedserve::net {
namespace {

std::string_view path_of(std::string_view target) { return target.substr(0, target.find('?')); }

// Compares without an early exit, so the time taken does not reveal how much of the key a
// guess got right. The loop runs over the guess's length (the client's own), so the time can
// tell at most whether the guess is longer than the key.
bool same_secret(std::string_view guess, std::string_view key) {
  unsigned char diff = guess.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < guess.size(); ++i) {
    diff |= static_cast<unsigned char>(guess[i] ^ (i < key.size() ? key[i] : 0));
  }
  return diff == 0;
}

// Compares the guess with every key, without stopping at a match: the time depends on the
// number of keys and the lengths, never on which key matched or on the keys' contents.
bool matches_any_key(std::string_view guess, const std::vector<std::string>& api_keys) {
  unsigned char matched = 0;
  for (const std::string& key : api_keys) matched |= same_secret(guess, key) ? 1 : 0;
  return matched != 0;
}

// The token of "Bearer <token>" (the scheme is case-insensitive, RFC 7235), or nullopt.
std::optional<std::string_view> bearer_token(std::string_view authorization) {
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() < kBearer.size()) return std::nullopt;
  for (size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) !=
        std::tolower(static_cast<unsigned char>(kBearer[i]))) {
      return std::nullopt;
    }
  }
  return authorization.substr(kBearer.size());
}

// The entries of a comma-separated header list, trimmed.
template <class Fn>
void for_each_list_entry(std::string_view list, Fn fn) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view entry = list.substr(0, comma);
    while (!entry.empty() && (entry.front() == ' ' || entry.front() == '\t')) entry.remove_prefix(1);
    while (!entry.empty() && (entry.back() == ' ' || entry.back() == '\t')) entry.remove_suffix(1);
    if (!entry.empty()) fn(entry);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

std::optional<std::string> decode_base64url(std::string_view text) {
  std::string out;
  uint32_t bits = 0;
  int num_bits = 0;
  for (char c : text) {
    int value = -1;
    if (c >= 'A' && c <= 'Z') value = c - 'A';
    if (c >= 'a' && c <= 'z') value = c - 'a' + 26;
    if (c >= '0' && c <= '9') value = c - '0' + 52;
    if (c == '-') value = 62;
    if (c == '_') value = 63;
    if (value < 0) return std::nullopt;
    bits = (bits << 6) | static_cast<uint32_t>(value);
    num_bits += 6;
    if (num_bits >= 8) {
      num_bits -= 8;
      out.push_back(static_cast<char>((bits >> num_bits) & 0xff));
    }
  }
  return out;
}

// GET / and /ui/<file>: the embedded playground page, when the server serves it.
std::optional<HttpResponse> ui_response(std::string_view method, std::string_view path) {
  if (method != "GET") return std::nullopt;
  const std::optional<ui::UiAsset> asset = ui::find_ui_asset(path);
  if (!asset) return std::nullopt;
  HttpResponse response;
  response.content_type = std::string(asset->content_type);
  response.body = std::string(asset->body);
  return response;
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
                   std::string_view x_api_key, const std::vector<std::string>& api_keys) {
  if (api_keys.empty() || path == "/health" || path == "/metrics") return true;
  const std::optional<std::string_view> bearer = bearer_token(authorization);
  // Both headers are checked when present (no shortcut between them either).
  const bool by_bearer = bearer && matches_any_key(*bearer, api_keys);
  const bool by_header = !x_api_key.empty() && matches_any_key(x_api_key, api_keys);
  return by_bearer || by_header;
}

bool offers_websocket_protocol(std::string_view protocols, std::string_view name) {
  bool found = false;
  for_each_list_entry(protocols, [&](std::string_view entry) { found = found || entry == name; });
  return found;
}

std::optional<std::string> websocket_protocol_key(std::string_view protocols) {
  std::optional<std::string> key;
  for_each_list_entry(protocols, [&](std::string_view entry) {
    if (!key && entry.starts_with(kWebSocketKeyProtocolPrefix)) {
      key = decode_base64url(entry.substr(kWebSocketKeyProtocolPrefix.size()));
    }
  });
  if (key && key->empty()) return std::nullopt;
  return key;
}

std::optional<std::string> cors_allowed_origin(const std::vector<std::string>& allowed_origins,
                                               std::string_view origin) {
  if (origin.empty()) return std::nullopt;
  for (const std::string& allowed : allowed_origins) {
    if (allowed == "*" || allowed == origin) return std::string(origin);
  }
  return std::nullopt;
}

ApiError unauthorized_error() {
  ApiError error;
  error.status = 401;
  error.message =
      "Invalid or missing API key: send the header 'Authorization: Bearer <key>' (or "
      "'X-Api-Key: <key>').";
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

ApiError header_too_large_error(size_t limit) {
  ApiError error = invalid_request("The request line and headers exceed the limit of " +
                                   std::to_string(limit) + " bytes (--max-header-bytes).");
  error.status = 431;
  error.code = "header_too_large";
  return error;
}

Route route_request(const RouteInput& input, const ServedModel& served,
                    const AccessPolicy& access) {
  const std::string_view path = path_of(input.target);
  // A preflight carries no credentials (browsers never send them on OPTIONS), so it is
  // answered before authentication, as vLLM's CORS middleware does; only allowed origins.
  if (input.method == "OPTIONS" && !input.preflight_method.empty() &&
      cors_allowed_origin(access.allowed_origins, input.origin)) {
    return RoutePreflight{};
  }
  // The page is static and holds no secret; it asks the user for the key.
  if (access.open_ui) {
    if (std::optional<HttpResponse> page = ui_response(input.method, path)) return std::move(*page);
  }
  const bool websocket_path = path == kWebSocketPath || path == kWebSocketAliasPath;
  if (!is_authorized(path, input.authorization, input.x_api_key, access.api_keys)) {
    // A browser's WebSocket can only offer the key as a subprotocol (see router.h).
    const std::optional<std::string> protocol_key =
        websocket_path ? websocket_protocol_key(input.websocket_protocols) : std::nullopt;
    if (!protocol_key || !matches_any_key(*protocol_key, access.api_keys)) {
      return error_response(unauthorized_error());
    }
  }
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    return route_generation(input, path, served);
  }
  if (path == kCompletionsRenderPath || path == kChatRenderPath) {
    if (input.method != "POST") return method_not_allowed_response(input.method, path);
    return render_response(path == kChatRenderPath ? Endpoint::kChat : Endpoint::kCompletions,
                           input.body, served);
  }
  if (path == "/metrics") {
    if (input.method != "GET") return method_not_allowed_response(input.method, path);
    return RouteMetrics{};
  }
  if (websocket_path) {
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
