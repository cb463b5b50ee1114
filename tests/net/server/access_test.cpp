// Who may call the server, over a real socket: several API keys (each accepted, in either
// "Authorization: Bearer" or "X-Api-Key"), the WebSocket upgrade guarded like the rest,
// /health and /metrics open; CORS off by default (no Access-Control-* headers, OPTIONS as any
// other method), and with --allowed-origins: the origin echoed for allowed origins only, on
// JSON, SSE and error answers, and preflights answered with 204 without the API key.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/net/server/test_client.h"

namespace pagedserve::net::testing {
namespace {

using nlohmann::json;

const std::string kBody = R"({"prompt": "Once", "max_tokens": 2})";

TEST(AccessTest, SeveralKeysInEitherHeader) {
  HttpServerConfig config;
  config.api_keys = {"first-key", "second-much-longer-key"};
  TestServer server(config);
  const uint16_t port = server.port();
  for (const std::string& key : config.api_keys) {
    EXPECT_EQ(
        http_request(port, "GET", "/v1/models", "", {{"Authorization", "Bearer " + key}}).status,
        200)
        << key;
    EXPECT_EQ(http_request(port, "POST", "/v1/completions", kBody, {{"X-Api-Key", key}}).status,
              200)
        << key;
    EXPECT_EQ(ws_handshake_status(port, "/v1/stream", {{"X-Api-Key", key}}), 101) << key;
    EXPECT_EQ(ws_handshake_status(port, "/v1/stream", {{"Authorization", "Bearer " + key}}), 101);
  }
  for (const char* wrong : {"first-ke", "first-keyy", "second", ""}) {
    EXPECT_EQ(http_request(port, "GET", "/v1/models", "", {{"X-Api-Key", wrong}}).status, 401);
    EXPECT_EQ(http_request(port, "GET", "/v1/models", "",
                           {{"Authorization", std::string("Bearer ") + wrong}})
                  .status,
              401);
    EXPECT_EQ(ws_handshake_status(port, "/v1/stream", {{"X-Api-Key", wrong}}), 401);
  }
  const HttpResult refused = http_request(port, "GET", "/v1/models");
  EXPECT_EQ(refused.status, 401);
  EXPECT_EQ(refused.headers.at("www-authenticate"), "Bearer");
  EXPECT_NE(refused.body.find("X-Api-Key"), std::string::npos) << refused.body;
  EXPECT_EQ(http_request(port, "GET", "/health").status, 200);
  EXPECT_EQ(http_request(port, "GET", "/metrics").status, 200);
  EXPECT_TRUE(server.wait_until_idle());
}

bool has_cors_headers(const HttpResult& result) {
  for (const auto& [name, value] : result.headers) {
    if (name.rfind("access-control-", 0) == 0) return true;
  }
  return false;
}

TEST(AccessTest, CorsIsOffByDefault) {
  TestServer server;
  const uint16_t port = server.port();
  const Headers origin = {{"Origin", "https://app.example"}};
  const HttpResult models = http_request(port, "GET", "/v1/models", "", origin);
  EXPECT_EQ(models.status, 200);
  EXPECT_FALSE(has_cors_headers(models));
  const HttpResult preflight =
      http_request(port, "OPTIONS", "/v1/chat/completions", "",
                   {{"Origin", "https://app.example"}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_EQ(preflight.status, 405) << preflight.body;
  EXPECT_FALSE(has_cors_headers(preflight));
}

TEST(AccessTest, AllowedOriginsGetCorsHeadersOthersDoNot) {
  HttpServerConfig config;
  config.api_keys = {"k"};
  config.allowed_origins = {"https://app.example", "http://localhost:3000"};
  TestServer server(config);
  const uint16_t port = server.port();
  const Headers key = {{"Authorization", "Bearer k"}};

  // Preflight: no key needed, 204 with what the real request may use.
  const HttpResult preflight =
      http_request(port, "OPTIONS", "/v1/chat/completions", "",
                   {{"Origin", "http://localhost:3000"},
                    {"Access-Control-Request-Method", "POST"},
                    {"Access-Control-Request-Headers", "authorization, content-type"}});
  EXPECT_EQ(preflight.status, 204) << preflight.body;
  EXPECT_EQ(preflight.headers.at("access-control-allow-origin"), "http://localhost:3000");
  EXPECT_EQ(preflight.headers.at("vary"), "Origin");
  const std::string methods = preflight.headers.at("access-control-allow-methods");
  EXPECT_NE(methods.find("POST"), std::string::npos) << methods;
  const std::string headers = preflight.headers.at("access-control-allow-headers");
  EXPECT_NE(headers.find("Authorization"), std::string::npos) << headers;
  EXPECT_NE(headers.find("Content-Type"), std::string::npos) << headers;

  // A preflight from elsewhere is an ordinary request: 401 without the key, no CORS headers.
  const HttpResult foreign =
      http_request(port, "OPTIONS", "/v1/chat/completions", "",
                   {{"Origin", "https://evil.example"}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_EQ(foreign.status, 401);
  EXPECT_FALSE(has_cors_headers(foreign));

  // The real requests: JSON, SSE and errors all carry the origin for the allowed one.
  Headers allowed = key;
  allowed["Origin"] = "https://app.example";
  const HttpResult completion = http_request(port, "POST", "/v1/completions", kBody, allowed);
  EXPECT_EQ(completion.status, 200) << completion.body;
  EXPECT_EQ(completion.headers.at("access-control-allow-origin"), "https://app.example");
  SseClient stream(port, "/v1/completions",
                   R"({"prompt": "Once", "max_tokens": 2, "stream": true})", allowed);
  EXPECT_EQ(stream.status(), 200);
  EXPECT_EQ(stream.headers().at("access-control-allow-origin"), "https://app.example");
  while (stream.next_event()) {
  }
  const HttpResult unauthorized =
      http_request(port, "GET", "/v1/models", "", {{"Origin", "https://app.example"}});
  EXPECT_EQ(unauthorized.status, 401);
  EXPECT_EQ(unauthorized.headers.at("access-control-allow-origin"), "https://app.example");

  Headers other = key;
  other["Origin"] = "https://app.example.evil";
  const HttpResult not_allowed = http_request(port, "GET", "/v1/models", "", other);
  EXPECT_EQ(not_allowed.status, 200);
  EXPECT_FALSE(has_cors_headers(not_allowed));
  EXPECT_FALSE(has_cors_headers(http_request(port, "GET", "/v1/models", "", key)));
  EXPECT_TRUE(server.wait_until_idle());
}

TEST(AccessTest, WildcardAllowsAnyOrigin) {
  HttpServerConfig config;
  config.allowed_origins = {"*"};
  TestServer server(config);
  const HttpResult result =
      http_request(server.port(), "GET", "/v1/models", "", {{"Origin", "https://x.example:8443"}});
  EXPECT_EQ(result.headers.at("access-control-allow-origin"), "https://x.example:8443");
  EXPECT_FALSE(has_cors_headers(http_request(server.port(), "GET", "/v1/models")));
}

}  // namespace
}  // namespace pagedserve::net::testing
