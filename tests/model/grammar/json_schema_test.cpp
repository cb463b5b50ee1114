// json_schema_to_gbnf, keyword by keyword: each grammar is parsed and run by the matcher, and
// what it accepts is compared with arithmetic or hand-checked instances; refusals name the
// JSON pointer and keyword.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "model/grammar/json_schema.h"
#include "tests/model/grammar/grammar_test_util.h"

namespace pagedserve::model::grammar {
namespace {

using Json = nlohmann::ordered_json;
using testing::matches;

GrammarMatcher schema_matcher(const std::string& schema, JsonSchemaOptions options = {}) {
  std::string gbnf = json_schema_to_gbnf(Json::parse(schema), options);
  return testing::matcher_for(gbnf);
}

std::string refusal(const std::string& schema) {
  try {
    json_schema_to_gbnf(Json::parse(schema));
  } catch (const GrammarError& error) {
    return error.what();
  }
  return "(accepted)";
}

TEST(JsonSchemaTest, IntegerBoundsExhaustiveAgainstArithmetic) {
  struct Case {
    std::string bounds;
    std::optional<int64_t> low, high;
  };
  const std::vector<Case> cases = {
      {R"("minimum": -15, "maximum": 7)", -15, 7},
      {R"("minimum": 0, "maximum": 0)", 0, 0},
      {R"("minimum": -100, "maximum": -3)", -100, -3},
      {R"("minimum": 5)", 5, std::nullopt},
      {R"("minimum": -37)", -37, std::nullopt},
      {R"("maximum": -7)", std::nullopt, -7},
      {R"("maximum": 13)", std::nullopt, 13},
      {R"("minimum": 1, "maximum": 1000)", 1, 1000},
      {R"("minimum": 99, "maximum": 101)", 99, 101},
      {R"("minimum": -1234, "maximum": 567)", -1234, 567},
      {R"("exclusiveMinimum": 9, "exclusiveMaximum": 100)", 10, 99},
      {R"("minimum": 1.5, "maximum": 20.9)", 2, 20},
      {R"("exclusiveMinimum": -1.5, "maximum": 1e3)", -1, 1000},
      {R"("minimum": 3, "exclusiveMinimum": 7, "maximum": 300, "exclusiveMaximum": 200)", 8, 199},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.bounds);
    GrammarMatcher m = schema_matcher(R"({"type": "integer", )" + c.bounds + "}");
    for (int64_t x = -1500; x <= 1500; ++x) {
      bool in_range = (!c.low || x >= *c.low) && (!c.high || x <= *c.high);
      ASSERT_EQ(matches(m, std::to_string(x)), in_range) << x;
    }
    EXPECT_FALSE(matches(m, "012"));
    EXPECT_FALSE(matches(m, "-0"));
    EXPECT_FALSE(matches(m, "5.0"));
    EXPECT_EQ(matches(m, "123456789012"), !c.high);
    EXPECT_EQ(matches(m, "-123456789012"), !c.low);
  }
}

// x thousandths as plain decimals: shortest ("-1.5"), and with three fraction digits.
std::vector<std::string> thousandths_spellings(int64_t x) {
  std::string sign = x < 0 ? "-" : "";
  int64_t magnitude = x < 0 ? -x : x;
  std::string fraction = std::to_string(1000 + magnitude % 1000).substr(1);
  std::string integer = sign + std::to_string(magnitude / 1000);
  std::string shortest = fraction.substr(0, fraction.find_last_not_of('0') + 1);
  std::vector<std::string> out = {integer + "." + fraction};
  out.push_back(shortest.empty() ? integer : integer + "." + shortest);
  return out;
}

TEST(JsonSchemaTest, NumberBoundsExhaustiveAgainstArithmetic) {
  struct Case {
    std::string bounds;
    std::optional<int64_t> low, high;  // thousandths
    bool low_strict = false, high_strict = false;
  };
  const std::vector<Case> cases = {
      {R"("minimum": 1.1, "exclusiveMaximum": 2.25)", 1100, 2250, false, true},
      {R"("exclusiveMinimum": -0.5)", -500, std::nullopt, true},
      {R"("minimum": 0, "maximum": 1)", 0, 1000},
      {R"("minimum": -2.125, "maximum": -0.01)", -2125, -10},
      {R"("exclusiveMinimum": -1, "exclusiveMaximum": 0)", -1000, 0, true, true},
      {R"("maximum": 3.5)", std::nullopt, 3500},
      {R"("minimum": -12.5, "maximum": 11.75)", -12500, 11750},
      {R"("minimum": 0.005, "maximum": 0.005)", 5, 5},
      {R"("exclusiveMinimum": 0)", 0, std::nullopt, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.bounds);
    GrammarMatcher m = schema_matcher(R"({"type": "number", )" + c.bounds + "}");
    for (int64_t x = -15000; x <= 15000; ++x) {
      bool in_range = (!c.low || (c.low_strict ? x > *c.low : x >= *c.low)) &&
                      (!c.high || (c.high_strict ? x < *c.high : x <= *c.high));
      for (const std::string& text : thousandths_spellings(x)) {
        if (text == "-0" || text == "-0.000") continue;  // minus zero is not emitted
        ASSERT_EQ(matches(m, text), in_range) << text;
      }
    }
    EXPECT_FALSE(matches(m, "1e0"));  // bounded numbers are plain decimals
    EXPECT_FALSE(matches(m, "1."));
    EXPECT_EQ(matches(m, "123456789012.5"), !c.high);
  }
}

TEST(JsonSchemaTest, NumbersAndIntegersWithoutBounds) {
  GrammarMatcher integer = schema_matcher(R"({"type": "integer"})");
  GrammarMatcher number = schema_matcher(R"({"type": "number"})");
  for (std::string text : {"0", "-0", "12", "-907"}) {
    EXPECT_TRUE(matches(integer, text)) << text;
    EXPECT_TRUE(matches(number, text)) << text;
  }
  for (std::string text : {"1.5", "-0.25e-3", "1E+9", "2e10"}) {
    EXPECT_FALSE(matches(integer, text)) << text;
    EXPECT_TRUE(matches(number, text)) << text;
  }
  for (std::string text : {"01", "1.", ".5", "+1", "1e", "--1", "0x10"}) {
    EXPECT_FALSE(matches(number, text)) << text;
  }
}

TEST(JsonSchemaTest, StringLengthsCountCodePoints) {
  GrammarMatcher m = schema_matcher(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(matches(m, R"("é")"));
  EXPECT_TRUE(matches(m, R"("éé")"));
  EXPECT_TRUE(matches(m, "\"日本語\""));
  EXPECT_FALSE(matches(m, "\"日本語!\""));
  EXPECT_TRUE(matches(m, "\"😀😀😀\""));  // 4-byte UTF-8, one code point each
  EXPECT_FALSE(matches(m, "\"😀😀😀😀\""));
  EXPECT_TRUE(matches(m, R"("\n\u00e9")"));  // an escape is one character
  EXPECT_FALSE(matches(m, R"("\n")"));
  EXPECT_FALSE(matches(m, "\"a\nb\""));  // raw control characters are not JSON
  EXPECT_FALSE(matches(m, R"("a"b")"));
  GrammarMatcher empty = schema_matcher(R"({"type": "string", "maxLength": 0})");
  EXPECT_TRUE(matches(empty, R"("")"));
  EXPECT_FALSE(matches(empty, R"("a")"));
}

TEST(JsonSchemaTest, EnumAndConstOfAnyJsonValue) {
  GrammarMatcher m = schema_matcher(R"({"enum": [1.0, "a\"b", null, {"k": [true, 2.5]}, [ ]]})");
  for (std::string text : {"1", R"("a\"b")", "null", R"({"k":[true,2.5]})", "[]"}) {
    EXPECT_TRUE(matches(m, text)) << text;
  }
  for (std::string text : {"2", R"("a")", "true", R"({"k":[true]})", "[1]"}) {
    EXPECT_FALSE(matches(m, text)) << text;
  }
  GrammarMatcher typed = schema_matcher(R"({"type": "string", "enum": ["x", 1, "y"]})");
  EXPECT_TRUE(matches(typed, R"("y")"));
  EXPECT_FALSE(matches(typed, "1"));
  GrammarMatcher constant = schema_matcher(R"({"const": {"a": null}})");
  EXPECT_TRUE(matches(constant, R"({"a":null})"));
  EXPECT_FALSE(matches(constant, R"({})"));
}

TEST(JsonSchemaTest, NestedRefRecursion) {
  const std::string tree = R"({
    "$ref": "#/$defs/node",
    "$defs": {"node": {"type": "object", "properties": {
      "value": {"type": "integer", "minimum": 0},
      "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["value"]}}})";
  GrammarMatcher m = schema_matcher(tree);
  EXPECT_TRUE(matches(m, R"({"value":1})"));
  EXPECT_TRUE(matches(m, R"({"value":1,"children":[{"value":2,"children":[{"value":3}]}]})"));
  EXPECT_FALSE(matches(m, R"({"value":1,"children":[{"value":-2}]})"));
  EXPECT_FALSE(matches(m, R"({"value":1,"children":[{"children":[]}]})"));
  GrammarMatcher self =
      schema_matcher(R"({"type": ["array", "null"], "items": {"$ref": "#"}, "maxItems": 2})");
  EXPECT_TRUE(matches(self, "[[null,[]],null]"));
  EXPECT_FALSE(matches(self, "[[null,[],[]]]"));
}

TEST(JsonSchemaTest, AnyOfOneOfAndSiblingMerge) {
  GrammarMatcher m = schema_matcher(
      R"({"anyOf": [{"type": "string", "maxLength": 1}, {"type": "integer", "minimum": 10}]})");
  EXPECT_TRUE(matches(m, R"("a")"));
  EXPECT_TRUE(matches(m, "10"));
  EXPECT_FALSE(matches(m, "9"));
  EXPECT_FALSE(matches(m, R"("ab")"));
  GrammarMatcher merged = schema_matcher(R"({"type": "object", "required": ["a"],
      "oneOf": [{"properties": {"a": {"const": 1}}}, {"properties": {"a": {"const": 2}}}]})");
  EXPECT_TRUE(matches(merged, R"({"a":2})"));
  EXPECT_FALSE(matches(merged, R"({"a":3})"));
  EXPECT_FALSE(matches(merged, R"({})"));
  GrammarMatcher all = schema_matcher(R"({"allOf": [
      {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
      {"properties": {"b": {"type": "string"}, "a": {"maximum": 3}}, "required": ["b"]}]})");
  EXPECT_TRUE(matches(all, R"({"a":3,"b":"x"})"));
  EXPECT_FALSE(matches(all, R"({"a":4,"b":"x"})"));
  EXPECT_FALSE(matches(all, R"({"a":3})"));
}

TEST(JsonSchemaTest, OptionalPropertiesEveryPresenceInSchemaOrder) {
  const std::string schema = R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
      "required": ["b"]})";
  GrammarMatcher m = schema_matcher(schema);
  const std::vector<std::string> names = {"a", "b", "c"};
  for (int present = 0; present < 8; ++present) {
    std::string text = "{";
    for (int i = 0; i < 3; ++i) {
      if (present & (1 << i)) text += (text.size() > 1 ? "," : "") + ("\"" + names[i] + "\":1");
    }
    text += "}";
    EXPECT_EQ(matches(m, text), (present & 2) != 0) << text;
  }
  EXPECT_FALSE(matches(m, R"({"b":1,"a":1})"));  // out of schema order
  EXPECT_FALSE(matches(m, R"({"b":1,"d":1})"));  // additionalProperties false by default
}

TEST(JsonSchemaTest, AdditionalPropertiesExcludeDeclaredNames) {
  GrammarMatcher m = schema_matcher(R"({"type": "object",
      "properties": {"ab": {"type": "integer"}, "a\"c": {"type": "null"}},
      "additionalProperties": {"type": "string"}})");
  EXPECT_TRUE(matches(m, R"({"ab":1,"x":"y","abc":"z","":"e","a":"f"})"));
  EXPECT_TRUE(matches(m, R"({"a\"c":null,"a\"":"s","a\\":"t"})"));
  EXPECT_FALSE(matches(m, R"({"ab":"wrong"})"));  // a declared name is not additional
  EXPECT_FALSE(matches(m, R"({"a\"c":"wrong"})"));
  EXPECT_FALSE(matches(m, R"({"x":1})"));
  GrammarMatcher open = schema_matcher(R"({"type": "object"})", JsonSchemaOptions{1, true});
  EXPECT_TRUE(matches(open, R"({"x":[1,{"y":null}]})"));
  GrammarMatcher closed = schema_matcher(R"({"type": "object"})");
  EXPECT_TRUE(matches(closed, "{}"));
  EXPECT_FALSE(matches(closed, R"({"x":1})"));
}

TEST(JsonSchemaTest, ArraysPrefixItemsAndCounts) {
  GrammarMatcher m = schema_matcher(R"({"type": "array",
      "prefixItems": [{"type": "string"}, {"type": "integer"}],
      "items": {"type": "null"}, "minItems": 1, "maxItems": 4})");
  for (std::string text : {R"(["a"])", R"(["a",1])", R"(["a",1,null,null])"}) {
    EXPECT_TRUE(matches(m, text)) << text;
  }
  for (std::string text : {"[]", "[1]", R"(["a",1,null,null,null])", R"(["a",null])"}) {
    EXPECT_FALSE(matches(m, text)) << text;
  }
  GrammarMatcher counted = schema_matcher(R"({"items": {"type": "integer"}, "minItems": 2,
      "maxItems": 3, "type": "array"})");
  EXPECT_FALSE(matches(counted, "[1]"));
  EXPECT_TRUE(matches(counted, "[1,2]"));
  EXPECT_TRUE(matches(counted, "[1,2,3]"));
  EXPECT_FALSE(matches(counted, "[1,2,3,4]"));
}

TEST(JsonSchemaTest, WhitespaceIsBoundedAndNeverNewlines) {
  const std::string schema = R"({"type": "object", "properties": {"a": {"type": "array"}}})";
  GrammarMatcher none = schema_matcher(schema, JsonSchemaOptions{0, false});
  EXPECT_TRUE(matches(none, R"({"a":[1,2]})"));
  EXPECT_FALSE(matches(none, R"({ "a":[1,2]})"));
  GrammarMatcher two = schema_matcher(schema, JsonSchemaOptions{2, false});
  EXPECT_TRUE(matches(two, R"({  "a":  [ 1,  2]})"));
  EXPECT_FALSE(matches(two, R"({   "a":[1,2]})"));
  EXPECT_FALSE(matches(two, "{\n\"a\":[1,2]}"));
  EXPECT_FALSE(matches(two, R"({"a" :[1,2]})"));  // only after { [ , :
}

TEST(JsonSchemaTest, Formats) {
  GrammarMatcher date = schema_matcher(R"({"type": "string", "format": "date"})");
  EXPECT_TRUE(matches(date, R"("2024-02-29")"));
  EXPECT_FALSE(matches(date, R"("2024-13-01")"));
  // Days per month and leap years, against the calendar rule written out here.
  const auto is_leap = [](int y) { return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0); };
  const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  for (int year : {1900, 1996, 2000, 2023, 2024, 2100, 0, 4, 400}) {
    for (int month = 1; month <= 12; ++month) {
      for (int day = 27; day <= 32; ++day) {
        char text[32];
        std::snprintf(text, sizeof text, "\"%04d-%02d-%02d\"", year, month, day);
        const int last = days[month - 1] + (month == 2 && is_leap(year) ? 1 : 0);
        EXPECT_EQ(matches(date, text), day <= last) << text;
      }
    }
  }
  GrammarMatcher time = schema_matcher(R"({"type": "string", "format": "date-time"})");
  EXPECT_TRUE(matches(time, R"("2024-02-29T23:59:59.5+05:30")"));
  EXPECT_FALSE(matches(time, R"("2024-02-29T23:59:60+05:30")"));  // leap seconds: never made
  EXPECT_TRUE(matches(time, R"("2024-02-29t00:00:00Z")"));
  EXPECT_FALSE(matches(time, R"("2024-02-29 00:00:00Z")"));
  GrammarMatcher uuid = schema_matcher(R"({"type": "string", "format": "uuid"})");
  EXPECT_TRUE(matches(uuid, R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(matches(uuid, R"("123e4567e89b12d3a456426614174000")"));
  GrammarMatcher email = schema_matcher(R"({"type": "string", "format": "email"})");
  EXPECT_TRUE(matches(email, R"("first.last+tag@example.co.uk")"));
  EXPECT_FALSE(matches(email, R"("no-at.example.com")"));
  EXPECT_FALSE(matches(email, R"("a@b")"));  // approximate: the domain needs a dot
}

TEST(JsonSchemaTest, PatternIsUnanchoredAndNeedsNoEscapes) {
  GrammarMatcher anchored = schema_matcher(R"({"type": "string", "pattern": "^[a-z]+$"})");
  EXPECT_TRUE(matches(anchored, R"("abc")"));
  EXPECT_FALSE(matches(anchored, R"("ab1")"));
  GrammarMatcher inside = schema_matcher(R"({"type": "string", "pattern": "b\\d"})");
  EXPECT_TRUE(matches(inside, R"("ab1c")"));
  EXPECT_FALSE(matches(inside, R"("abc")"));
  EXPECT_FALSE(matches(inside, R"("a"b1")"));  // `.*` never lets a quote through
  GrammarMatcher any = schema_matcher(R"({"type": "string", "pattern": "^[ -~]{2}$"})");
  EXPECT_TRUE(matches(any, R"("a~")"));
  EXPECT_FALSE(matches(any, R"("a"")"));
}

TEST(JsonSchemaTest, JsonObjectGbnf) {
  GrammarMatcher m = testing::matcher_for(json_object_gbnf());
  EXPECT_TRUE(matches(m, R"({"a":[1,{"b":null}], "c": "d"})"));
  EXPECT_TRUE(matches(m, "{}"));
  EXPECT_FALSE(matches(m, "[1]"));
  EXPECT_FALSE(matches(m, R"("x")"));
}

TEST(JsonSchemaTest, RefusalsNamePointerAndKeyword) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"multipleOf": 2})", "json schema at /: unsupported keyword 'multipleOf'"},
      {R"({"properties": {"a": {"not": {}}}})",
       "json schema at /properties/a: unsupported keyword 'not'"},
      {R"({"items": {"uniqueItems": true}})",
       "json schema at /items: unsupported keyword 'uniqueItems'"},
      {R"({"type": "array", "minItems": 3, "maxItems": 1})",
       "json schema at /: minItems 3 > maxItems 1"},
      {R"({"type": "integer", "minimum": 5, "maximum": 3})",
       "json schema at /: no integer satisfies minimum 5 and maximum 3"},
      {R"({"type": "string", "minLength": 5, "maxLength": 3})",
       "json schema at /: minLength 5 > maxLength 3"},
      {R"({"enum": []})", "json schema at /enum: enum must be a non-empty array"},
      {R"({"properties": {"x": {"$ref": "#/$defs/missing"}}})",
       "json schema at /properties/x/$ref: $ref '#/$defs/missing' does not resolve"},
      {R"({"$ref": "http://example.com/schema"})", "json schema at /$ref: $ref 'http"},
      {"false", "json schema at /: schema false matches nothing"},
      {R"({"type": "string", "format": "ipv4"})",
       "json schema at /format: unsupported format 'ipv4'"},
      {R"({"type": "number", "minimum": 0.5, "exclusiveMaximum": 0.5})",
       "json schema at /: no number satisfies minimum 0.5 and exclusiveMaximum 0.5"},
      {R"({"type": "number", "minimum": 1e19})",
       "json schema at /minimum: minimum 1e+19 is beyond 1e18"},
      {R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})",
       "json schema at /$defs/a/$ref: $ref '#/$defs/a' recurses"},
      {R"({"type": "string", "pattern": "a\\\\b"})", "json schema at /pattern: pattern column"},
      {R"({"type": "string", "pattern": "(a)\\1"})", "json schema at /pattern: regex column"},
      {R"({"type": "string", "pattern": "\\xZZ"})", "json schema at /pattern: pattern column"},
      {R"({"$ref": "#/%zz"})", "json schema at /$ref: $ref '#/%zz' does not resolve"},
      {R"({"type": "object", "required": ["x"], "additionalProperties": false})",
       "json schema at /required: required property 'x' is not in properties"},
      {R"({"type": "boolen"})", "json schema at /type: unknown type \"boolen\""},
      {R"({"type": "string", "maxLength": 100001})",
       "json schema at /maxLength: maxLength 100001 is over 100000"},
      {R"({"type": "array", "minItems": -1})", "json schema at /minItems: minItems must be a"},
      {R"({"allOf": [{"type": "string"}, {"type": "integer"}]})",
       "json schema at /allOf/1: the types of allOf members do not intersect"},
      {R"({"allOf": [{"pattern": "a"}, {"pattern": "b"}]})",
       "json schema at /allOf/1: members disagree on 'pattern'"},
      {R"({"properties": {"a": {}}, "additionalProperties": false,
           "anyOf": [{"properties": {"b": {}}}]})",
       "json schema at /anyOf/0: additionalProperties of one member would constrain property"},
  };
  for (const auto& [schema, expected] : cases) {
    EXPECT_EQ(refusal(schema).rfind(expected, 0), 0u) << schema << " -> " << refusal(schema);
  }
  std::string long_name = R"({"type": "object", "additionalProperties": true, "properties": {")" +
                          std::string(300, 'n') + R"(": {}}})";
  EXPECT_EQ(refusal(long_name).rfind("json schema at /additionalProperties: property name", 0), 0u)
      << refusal(long_name);
  std::string big = R"({"enum": [")" + std::string(kMaxJsonSchemaBytes, 'x') + "\"]}";
  EXPECT_EQ(refusal(big).rfind("json schema at /: schema is ", 0), 0u) << refusal(big);
}

}  // namespace
}  // namespace pagedserve::model::grammar
