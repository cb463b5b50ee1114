// route_request and is_authorized as pure functions (no sockets): which requests need the
// API key, how the Bearer and X-Api-Key headers are matched against several keys, CORS
// origins and preflights, and what each path and method routes to.
#include "net/server/router.h"

#include <gtest/gtest.h>

namespace pagedserve::net {
namespace {

const std::vector<std::string> kNoKeys;
const std::vector<std::string> kOneKey = {"k1"};

RouteInput get(std::string_view target, bool upgrade = false) {
  RouteInput input;
  input.method = "GET";
  input.target = target;
  input.websocket_upgrade = upgrade;
  return input;
}

TEST(RouterTest, AuthorizationNeedsTheExactBearerKey) {
  EXPECT_TRUE(is_authorized("/v1/completions", "", "", kNoKeys));
  EXPECT_FALSE(is_authorized("/v1/completions", "", "", kOneKey));
  EXPECT_TRUE(is_authorized("/v1/completions", "Bearer k1", "", kOneKey));
  EXPECT_TRUE(is_authorized("/v1/completions", "bearer k1", "", kOneKey));
  EXPECT_FALSE(is_authorized("/v1/completions", "Bearer k2", "", kOneKey));
  EXPECT_FALSE(is_authorized("/v1/completions", "Bearer k1x", "", kOneKey));
  EXPECT_FALSE(is_authorized("/v1/completions", "Bearer k", "", kOneKey));
  EXPECT_FALSE(is_authorized("/v1/completions", "Bearer ", "", kOneKey));
  EXPECT_FALSE(is_authorized("/v1/completions", "k1", "", kOneKey));
  EXPECT_FALSE(is_authorized("/v1/models", "Basic k1", "", kOneKey));
  EXPECT_TRUE(is_authorized("/health", "", "", kOneKey));
  EXPECT_TRUE(is_authorized("/metrics", "", "", kOneKey));
}

TEST(RouterTest, XApiKeyHeaderAndSeveralKeys) {
  const std::vector<std::string> keys = {"alpha", "a-much-longer-second-key", "c"};
  EXPECT_TRUE(is_authorized("/v1/models", "", "k1", kOneKey));
  EXPECT_FALSE(is_authorized("/v1/models", "", "Bearer k1", kOneKey));  // the key alone
  for (const std::string& key : keys) {
    EXPECT_TRUE(is_authorized("/v1/models", "Bearer " + key, "", keys)) << key;
    EXPECT_TRUE(is_authorized("/v1/models", "", key, keys)) << key;
  }
  EXPECT_FALSE(is_authorized("/v1/models", "Bearer alph", "", keys));
  EXPECT_FALSE(is_authorized("/v1/models", "Bearer alphaa", "", keys));
  EXPECT_FALSE(is_authorized("/v1/models", "Bearer cc", "", keys));
  EXPECT_FALSE(is_authorized("/v1/models", "", "", keys));
  // Either header may carry a valid key, the other a wrong one.
  EXPECT_TRUE(is_authorized("/v1/models", "Bearer wrong", "c", keys));
  EXPECT_TRUE(is_authorized("/v1/models", "Bearer c", "wrong", keys));
}

TEST(RouterTest, TransportRoutesAndErrors) {
  const ServedModel served;  // no tokenizer: only routes that never parse a body
  const AccessPolicy open;
  const AccessPolicy keyed{{"key"}, {}};
  EXPECT_TRUE(
      std::holds_alternative<RouteMetrics>(route_request(get("/metrics?x=1"), served, open)));
  EXPECT_TRUE(
      std::holds_alternative<RouteWebSocket>(route_request(get("/v1/stream", true), served, open)));
  EXPECT_EQ(std::get<HttpResponse>(route_request(get("/v1/stream"), served, open)).status, 426);
  EXPECT_EQ(std::get<HttpResponse>(route_request(get("/v1/stream", true), served, keyed)).status,
            401);
  RouteInput input = get("/v1/completions");
  input.method = "PUT";
  EXPECT_EQ(std::get<HttpResponse>(route_request(input, served, open)).status, 405);
  input = get("/metrics");
  input.method = "POST";
  EXPECT_EQ(std::get<HttpResponse>(route_request(input, served, open)).status, 405);
  EXPECT_EQ(std::get<HttpResponse>(route_request(get("/nowhere"), served, open)).status, 404);
  EXPECT_EQ(std::get<HttpResponse>(route_request(get("/health"), served, keyed)).status, 200);
}

TEST(RouterTest, RenderEndpointsArePostOnlyAndNeedTheKey) {
  const ServedModel served;  // no tokenizer: only answers that never reach the body parser
  const AccessPolicy open;
  const AccessPolicy keyed{{"key"}, {}};
  for (const char* path : {"/v1/completions/render", "/v1/chat/completions/render"}) {
    EXPECT_EQ(std::get<HttpResponse>(route_request(get(path), served, open)).status, 405) << path;
    RouteInput post = get(path);
    post.method = "POST";
    post.body = "{not json";
    EXPECT_EQ(std::get<HttpResponse>(route_request(post, served, keyed)).status, 401) << path;
    // A malformed body reaches the render endpoint (400), not the generation route.
    EXPECT_EQ(std::get<HttpResponse>(route_request(post, served, open)).status, 400) << path;
    post.authorization = "Bearer key";
    EXPECT_EQ(std::get<HttpResponse>(route_request(post, served, keyed)).status, 400) << path;
  }
  EXPECT_EQ(
      std::get<HttpResponse>(route_request(get("/v1/completions/renderx"), served, open)).status,
      404);
}

TEST(RouterTest, CorsOriginsMatchExactlyOrByWildcard) {
  const std::vector<std::string> allowed = {"https://a.example", "http://localhost:3000"};
  EXPECT_EQ(cors_allowed_origin(allowed, "https://a.example"), "https://a.example");
  EXPECT_EQ(cors_allowed_origin(allowed, "http://localhost:3000"), "http://localhost:3000");
  EXPECT_FALSE(cors_allowed_origin(allowed, "https://a.example.evil"));
  EXPECT_FALSE(cors_allowed_origin(allowed, "http://a.example"));
  EXPECT_FALSE(cors_allowed_origin(allowed, "http://localhost:3001"));
  EXPECT_FALSE(cors_allowed_origin(allowed, ""));
  EXPECT_FALSE(cors_allowed_origin({}, "https://a.example"));
  EXPECT_EQ(cors_allowed_origin({"*"}, "https://any.where"), "https://any.where");
  EXPECT_FALSE(cors_allowed_origin({"*"}, ""));
}

TEST(RouterTest, PreflightSkipsTheKeyOnlyForAllowedOrigins) {
  const ServedModel served;
  RouteInput preflight;
  preflight.method = "OPTIONS";
  preflight.target = "/v1/chat/completions";
  preflight.origin = "https://a.example";
  preflight.preflight_method = "POST";
  const AccessPolicy cors{{"key"}, {"https://a.example"}};
  EXPECT_TRUE(std::holds_alternative<RoutePreflight>(route_request(preflight, served, cors)));
  // CORS off, or another origin: OPTIONS is an ordinary request (401 without the key).
  EXPECT_EQ(std::get<HttpResponse>(route_request(preflight, served, {{"key"}, {}})).status, 401);
  preflight.origin = "https://b.example";
  EXPECT_EQ(std::get<HttpResponse>(route_request(preflight, served, cors)).status, 401);
  // Without Access-Control-Request-Method it is no preflight.
  preflight.origin = "https://a.example";
  preflight.preflight_method = "";
  EXPECT_EQ(std::get<HttpResponse>(route_request(preflight, served, cors)).status, 401);
  EXPECT_EQ(std::get<HttpResponse>(route_request(preflight, served, {{}, {"*"}})).status, 405);
}

TEST(RouterTest, TransportErrorBodies) {
  EXPECT_EQ(unauthorized_error().status, 401);
  EXPECT_EQ(body_too_large_error(10).status, 413);
  EXPECT_NE(body_too_large_error(10).message.find("10 bytes"), std::string::npos);
  EXPECT_EQ(header_too_large_error(8192).status, 431);
  EXPECT_NE(header_too_large_error(8192).message.find("8192 bytes"), std::string::npos);
  EXPECT_EQ(bad_http_error("bad method").status, 400);
}

}  // namespace
}  // namespace pagedserve::net
