// route_request and is_authorized as pure functions (no sockets): which requests need the
// API key, how the Bearer header is matched, and what each path and method routes to.
#include "net/server/router.h"

#include <gtest/gtest.h>

namespace pagedserve::net {
namespace {

TEST(RouterTest, AuthorizationNeedsTheExactBearerKey) {
  EXPECT_TRUE(is_authorized("/v1/completions", "", ""));
  EXPECT_FALSE(is_authorized("/v1/completions", "", "k1"));
  EXPECT_TRUE(is_authorized("/v1/completions", "Bearer k1", "k1"));
  EXPECT_TRUE(is_authorized("/v1/completions", "bearer k1", "k1"));
  EXPECT_FALSE(is_authorized("/v1/completions", "Bearer k2", "k1"));
  EXPECT_FALSE(is_authorized("/v1/completions", "Bearer k1x", "k1"));
  EXPECT_FALSE(is_authorized("/v1/completions", "k1", "k1"));
  EXPECT_FALSE(is_authorized("/v1/models", "Basic k1", "k1"));
  EXPECT_TRUE(is_authorized("/health", "", "k1"));
  EXPECT_TRUE(is_authorized("/metrics", "", "k1"));
}

TEST(RouterTest, TransportRoutesAndErrors) {
  const ServedModel served;  // no tokenizer: only routes that never parse a body
  RouteInput input{"GET", "/metrics?x=1", "", "", false};
  EXPECT_TRUE(std::holds_alternative<RouteMetrics>(route_request(input, served, "")));
  input = {"GET", "/v1/stream", "", "", true};
  EXPECT_TRUE(std::holds_alternative<RouteWebSocket>(route_request(input, served, "")));
  input = {"GET", "/v1/stream", "", "", false};
  EXPECT_EQ(std::get<HttpResponse>(route_request(input, served, "")).status, 426);
  input = {"GET", "/v1/stream", "", "", true};
  EXPECT_EQ(std::get<HttpResponse>(route_request(input, served, "key")).status, 401);
  input = {"PUT", "/v1/completions", "", "", false};
  EXPECT_EQ(std::get<HttpResponse>(route_request(input, served, "")).status, 405);
  input = {"POST", "/metrics", "", "", false};
  EXPECT_EQ(std::get<HttpResponse>(route_request(input, served, "")).status, 405);
  input = {"GET", "/nowhere", "", "", false};
  EXPECT_EQ(std::get<HttpResponse>(route_request(input, served, "")).status, 404);
  input = {"GET", "/health", "", "", false};
  EXPECT_EQ(std::get<HttpResponse>(route_request(input, served, "key")).status, 200);
}

TEST(RouterTest, TransportErrorBodies) {
  EXPECT_EQ(unauthorized_error().status, 401);
  EXPECT_EQ(body_too_large_error(10).status, 413);
  EXPECT_NE(body_too_large_error(10).message.find("10 bytes"), std::string::npos);
  EXPECT_EQ(bad_http_error("bad method").status, 400);
}

}  // namespace
}  // namespace pagedserve::net
