// Integers (exact digit-range grammars for minimum/maximum) and strings (minLength/maxLength in
// code points, format, pattern) of the JSON Schema -> GBNF converter.
//
// Bounds on non-integer numbers: json_schema_numbers.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/grammar/json_schema_converter.h"

namespace pagedserve::model::grammar::json_schema_detail {
namespace {

constexpr double kMaxIntegerBound = 1e18;  // |bound| beyond this: refused

std::string digits(size_t count) {
  if (count == 0) return "";
  return count == 1 ? "[0-9]" : "[0-9]{" + std::to_string(count) + "}";
}

std::string digit_class(char low, char high) {
  if (low == high) return std::string("\"") + low + "\"";
  return std::string("[") + low + "-" + high + "]";
}

bool all_of_char(std::string_view text, char c) {
  return std::all_of(text.begin(), text.end(), [c](char x) { return x == c; });
}

// The decimal numbers of low.size() digits in [low, high] (same length, low <= high).
std::string same_length_range(std::string_view low, std::string_view high) {
  if (low.empty()) return "";
  if (low == high) return "\"" + std::string(low) + "\"";
  std::string_view low_rest = low.substr(1), high_rest = high.substr(1);
  auto join = [](const std::string& a, const std::string& b) {
    return b.empty() ? a : a + " " + b;
  };
  if (low[0] == high[0]) {
    return join(digit_class(low[0], low[0]), same_length_range(low_rest, high_rest));
  }
  if (all_of_char(low_rest, '0') && all_of_char(high_rest, '9')) {
    return join(digit_class(low[0], high[0]), digits(low_rest.size()));
  }
  std::vector<std::string> alternatives;
  char middle_low = low[0], middle_high = high[0];
  if (!all_of_char(low_rest, '0')) {
    std::string nines(low_rest.size(), '9');
    alternatives.push_back(join(digit_class(low[0], low[0]), same_length_range(low_rest, nines)));
    ++middle_low;
  }
  if (!all_of_char(high_rest, '9')) --middle_high;
  if (middle_low <= middle_high) {
    alternatives.push_back(join(digit_class(middle_low, middle_high), digits(low_rest.size())));
  }
  if (!all_of_char(high_rest, '9')) {
    std::string zeros(high_rest.size(), '0');
    alternatives.push_back(
        join(digit_class(high[0], high[0]), same_length_range(zeros, high_rest)));
  }
  std::string out = "( ";
  for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
  return out + " )";
}

// Non-negative integers in [low, high] (high open when empty), without leading zeros.
std::vector<std::string> natural_range(int64_t low, std::optional<int64_t> high) {
  std::string low_text = std::to_string(low);
  std::vector<std::string> out;
  size_t last_length = high ? std::to_string(*high).size() : low_text.size();
  for (size_t length = low_text.size(); length <= last_length; ++length) {
    std::string from = length == low_text.size() ? low_text : "1" + std::string(length - 1, '0');
    std::string to =
        high && length == last_length ? std::to_string(*high) : std::string(length, '9');
    out.push_back(same_length_range(from, to));
  }
  if (!high) out.push_back("[1-9] [0-9]{" + std::to_string(low_text.size()) + ",}");
  return out;
}

}  // namespace

std::string integer_range_gbnf(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> alternatives;
  if (!lo || *lo < 0) {  // negative part: "-" and a natural in [max(1, -hi), -lo]
    int64_t magnitude_low = hi && *hi < 0 ? -*hi : 1;
    std::optional<int64_t> magnitude_high;
    if (lo) magnitude_high = -*lo;
    std::vector<std::string> naturals = natural_range(magnitude_low, magnitude_high);
    std::string joined;
    for (size_t i = 0; i < naturals.size(); ++i) joined += (i ? " | " : "") + naturals[i];
    alternatives.push_back("\"-\" ( " + joined + " )");
  }
  if (!hi || *hi >= 0) {
    for (const auto& natural : natural_range(lo && *lo > 0 ? *lo : 0, hi)) {
      alternatives.push_back(natural);
    }
  }
  std::string out;
  for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
  return out;
}

namespace {

// The tighter of minimum/exclusiveMinimum (lower) or maximum/exclusiveMaximum (upper), with
// the keyword and value that set it (for errors).
struct Bound {
  double value = 0;
  NumberBound number;
  std::string keyword;
};

std::optional<Bound> tightest_bound(const SchemaConverter& converter, const Json& schema,
                                    const std::string& pointer, bool lower) {
  std::optional<Bound> bound;
  for (std::string key :
       {lower ? "minimum" : "maximum", lower ? "exclusiveMinimum" : "exclusiveMaximum"}) {
    if (!schema.contains(key)) continue;
    const Json& value = schema[key];
    if (!value.is_number()) converter.fail(pointer_append(pointer, key), key + " must be a number");
    double x = value.get<double>();
    if (std::fabs(x) > kMaxIntegerBound) {
      converter.fail(pointer_append(pointer, key), key + " " + value.dump() + " is beyond 1e18");
    }
    bool strict = key.rfind("exclusive", 0) == 0;
    bool tighter =
        !bound || (lower ? x > bound->value : x < bound->value) || (x == bound->value && strict);
    if (tighter) bound = Bound{x, NumberBound{value.dump(), strict}, key + " " + value.dump()};
  }
  return bound;
}

std::optional<int64_t> integer_bound(const std::optional<Bound>& bound, bool lower) {
  if (!bound) return std::nullopt;
  double x = bound->value;
  bool strict = bound->number.strict;
  return static_cast<int64_t>(lower ? (strict ? std::floor(x) + 1 : std::ceil(x))
                                    : (strict ? std::ceil(x) - 1 : std::floor(x)));
}

}  // namespace

std::string SchemaConverter::visit_integer(const Json& schema, const std::string& pointer,
                                           bool any_number) {
  std::optional<Bound> lower = tightest_bound(*this, schema, pointer, true);
  std::optional<Bound> upper = tightest_bound(*this, schema, pointer, false);
  if (!lower && !upper) return core(any_number ? "number" : "integer");
  std::string empty = std::string("no ") + (any_number ? "number" : "integer") + " satisfies " +
                      (lower ? lower->keyword : "") + (lower && upper ? " and " : "") +
                      (upper ? upper->keyword : "");
  if (any_number) {
    std::optional<NumberBound> low, high;
    if (lower) low = lower->number;
    if (upper) high = upper->number;
    std::optional<std::string> range = number_range_gbnf(low, high);
    if (!range) fail(pointer, empty);
    return add_rule("number-range", *range);
  }
  std::optional<int64_t> low = integer_bound(lower, true), high = integer_bound(upper, false);
  if (low && high && *low > *high) fail(pointer, empty);
  return add_rule("integer-range", integer_range_gbnf(low, high));
}

namespace {

std::string format_gbnf(const std::string& format) {
  static const std::string two_digit_hour = R"(( [01] [0-9] | "2" [0-3] ))";
  // Days per month, and February 29 in leap years only (the Gregorian rule on the four
  // digits), as RFC 3339 full-date requires and validators check.
  static const std::string date =
      R"(( [0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ))"
      R"( | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ))"
      R"( | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ))"
      R"( | ( [0-9] [0-9] ( [02468] [48] | [13579] [26] | [2468] "0" ))"
      R"( | ( [02468] [048] | [13579] [26] ) "00" ) "-02-29" ))";
  // Seconds 00-59: a leap second (60) is valid only at the end of a UTC day, which validators
  // check against the offset; never generating one keeps every output valid.
  static const std::string time = two_digit_hour + R"( ":" [0-5] [0-9] ":" [0-5] [0-9])" +
                                  R"( ( "." [0-9]+ )? ( [zZ] | [-+] )" + two_digit_hour +
                                  R"( ":" [0-5] [0-9] ))";
  static const std::string hex = "[0-9a-fA-F]";
  // Approximate email: dot-atoms around "@" and a domain of dotted labels (no quoted local
  // parts, no IP literals).
  static const std::string atom = R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)";
  static const std::string label = R"([A-Za-z0-9] ( [A-Za-z0-9-]* [A-Za-z0-9] )?)";
  if (format == "date") return date;
  if (format == "time") return time;
  if (format == "date-time") return date + " [tT] " + time;
  if (format == "uuid") {
    return hex + "{8} \"-\" " + hex + "{4} \"-\" " + hex + "{4} \"-\" " + hex + "{4} \"-\" " + hex +
           "{12}";
  }
  if (format == "email") {
    return atom + " ( \".\" " + atom + " )* \"@\" " + label + " ( \".\" " + label + " )+";
  }
  return "";
}

}  // namespace

std::string SchemaConverter::visit_string(const Json& schema, const std::string& pointer,
                                          const std::string& hint) {
  const std::string quote = "\"\\\"\"";
  bool has_length = schema.contains("minLength") || schema.contains("maxLength");
  if (schema.contains("format")) {
    std::string at = pointer_append(pointer, "format");
    if (!schema["format"].is_string()) fail(at, "format must be a string");
    std::string format = schema["format"].get<std::string>();
    std::string body = format_gbnf(format);
    if (body.empty()) fail(at, "unsupported format '" + format + "'");
    if (has_length || schema.contains("pattern")) {
      fail(pointer, "unsupported keyword '" + std::string(has_length ? "minLength" : "pattern") +
                        "' beside format");
    }
    return add_rule(hint + "-" + format, quote + " " + body + " " + quote);
  }
  if (schema.contains("pattern")) {
    if (has_length) {
      fail(pointer, std::string("unsupported keyword '") +
                        (schema.contains("minLength") ? "minLength" : "maxLength") +
                        "' beside pattern");
    }
    std::string at = pointer_append(pointer, "pattern");
    if (!schema["pattern"].is_string()) fail(at, "pattern must be a string");
    std::string prefix = next_regex_prefix();
    std::string regex = json_content_regex(schema["pattern"].get<std::string>(), at);
    try {
      add_raw_rules(regex_to_gbnf(regex, prefix));
    } catch (const GrammarError& error) {  // columns count in the rewritten pattern
      fail(at, std::string(error.what()) + " (in the pattern as rewritten: " + regex + ")");
    }
    return add_rule(hint + "-pattern", quote + " " + prefix + " " + quote);
  }
  if (!has_length) return core("string");
  int64_t low = count_keyword(*this, schema, pointer, "minLength").value_or(0);
  std::optional<int64_t> high = count_keyword(*this, schema, pointer, "maxLength");
  if (high && low > *high) {
    fail(pointer, "minLength " + std::to_string(low) + " > maxLength " + std::to_string(*high));
  }
  if (high && *high == 0) return add_rule(hint + "-string", quote + " " + quote);
  std::string repetition = high ? "{" + std::to_string(low) + "," + std::to_string(*high) + "}"
                                : "{" + std::to_string(low) + ",}";
  return add_rule(hint + "-string", quote + " " + core("char") + repetition + " " + quote);
}

}  // namespace pagedserve::model::grammar::json_schema_detail
