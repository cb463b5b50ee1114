// Tests for ApiError bodies, HttpResponse helpers, UTF-8 validation and FieldReader.
#include <gtest/gtest.h>

#include "net/protocol/api_error.h"
#include "net/protocol/json_fields.h"

namespace pagedserve::net {
namespace {

using nlohmann::json;

TEST(ApiErrorTest, BodyHasOpenAiShapeWithNullsForEmptyFields) {
  const json body =
      json::parse(error_body(invalid_request("max_tokens must be >= 1", "max_tokens")));
  ASSERT_TRUE(body.contains("error"));
  EXPECT_EQ(body.size(), 1u);
  const json& e = body["error"];
  EXPECT_EQ(e.size(), 4u);
  EXPECT_EQ(e["message"], "max_tokens must be >= 1");
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["param"], "max_tokens");
  EXPECT_TRUE(e["code"].is_null());

  const json none = json::parse(error_body(ApiError{400, "bad", "", "", ""}));
  EXPECT_TRUE(none["error"]["param"].is_null());
  EXPECT_TRUE(none["error"]["code"].is_null());
}

TEST(ApiErrorTest, TypeFollowsStatus) {
  EXPECT_EQ(error_type_for(400), "invalid_request_error");
  EXPECT_EQ(error_type_for(401), "authentication_error");
  EXPECT_EQ(error_type_for(403), "permission_error");
  EXPECT_EQ(error_type_for(404), "not_found_error");
  EXPECT_EQ(error_type_for(405), "invalid_request_error");
  EXPECT_EQ(error_type_for(429), "rate_limit_error");
  EXPECT_EQ(error_type_for(500), "server_error");
  EXPECT_EQ(error_type_for(503), "server_error");
  // An empty type is derived from the status.
  const json body = json::parse(error_body(ApiError{401, "no key", "", "", ""}));
  EXPECT_EQ(body["error"]["type"], "authentication_error");
  const json nf = json::parse(
      error_body(not_found("The model `x` does not exist.", "model", "model_not_found")));
  EXPECT_EQ(nf["error"]["type"], "not_found_error");
  EXPECT_EQ(nf["error"]["code"], "model_not_found");
}

TEST(ApiErrorTest, ErrorResponseCarriesStatusAndJson) {
  const HttpResponse r = error_response(server_error("boom", 503, "request_aborted"));
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "server_error");
}

TEST(ApiErrorTest, DumpJsonNeverThrowsOnInvalidUtf8) {
  nlohmann::ordered_json value = {{"text", std::string("a\xff"
                                                       "b")}};
  EXPECT_EQ(dump_json(value),
            "{\"text\":\"a\xEF\xBF\xBD"
            "b\"}");
}

TEST(JsonFieldsTest, Utf8Validation) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xC3"));              // truncated
  EXPECT_FALSE(is_valid_utf8("\x80"));              // lone continuation
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // UTF-16 surrogate
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xFF"));
}

TEST(JsonFieldsTest, ParseJsonObjectRejectsBadBodies) {
  EXPECT_TRUE(parse_json_object("{}").ok());
  EXPECT_EQ(parse_json_object("{\"a\": \"\xff\"}").error().message,
            "the request body is not valid UTF-8");
  EXPECT_EQ(parse_json_object("{\"a\": ").error().message, "the request body is not valid JSON");
  EXPECT_EQ(parse_json_object("[1]").error().message, "the request body must be a JSON object");
  // A lone surrogate escape is not valid Unicode either.
  EXPECT_FALSE(parse_json_object(R"({"a": "\ud800"})").ok());
}

TEST(JsonFieldsTest, IntegersAcceptIntegralFloatsOnly) {
  EXPECT_EQ(json_to_integer(json(16), 0, 100), 16);
  EXPECT_EQ(json_to_integer(json(16.0), 0, 100), 16);
  EXPECT_FALSE(json_to_integer(json(16.5), 0, 100));
  EXPECT_FALSE(json_to_integer(json(true), 0, 100));
  EXPECT_FALSE(json_to_integer(json("16"), 0, 100));
  EXPECT_FALSE(json_to_integer(json(101), 0, 100));
  EXPECT_FALSE(json_to_integer(json(18446744073709551615ULL), INT64_MIN, INT64_MAX));
  EXPECT_FALSE(json_to_integer(json(1e300), INT64_MIN, INT64_MAX));
}

TEST(JsonFieldsTest, FieldReaderKeepsTheFirstErrorAndTreatsNullAsAbsent) {
  const json body = json::parse(R"({"a": null, "b": "x", "c": 5, "d": [1, "2"]})");
  FieldReader fields(body);
  EXPECT_FALSE(fields.integer("a"));
  EXPECT_FALSE(fields.failed());
  EXPECT_FALSE(fields.integer("b"));
  EXPECT_TRUE(fields.failed());
  EXPECT_EQ(fields.error().param, "b");
  EXPECT_EQ(fields.error().message, "b must be an integer");
  EXPECT_FALSE(fields.integer("c", 10, 20));
  EXPECT_EQ(fields.error().param, "b");  // the first error stays

  FieldReader ranges(body);
  EXPECT_FALSE(ranges.integer("c", 10, 20));
  EXPECT_EQ(ranges.error().message, "c must be an integer in [10, 20], got 5");
  FieldReader list(body);
  EXPECT_FALSE(list.string_or_list("d"));
  EXPECT_EQ(list.error().message, "d must be a string or a list of strings");
}

}  // namespace
}  // namespace pagedserve::net
