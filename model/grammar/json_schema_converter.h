// The JSON Schema -> GBNF converter behind json_schema.h (internal to model/grammar).
// json_schema.cpp: dispatch, $ref, combinators, the public functions;
// json_schema_containers.cpp: objects and arrays; json_schema_scalars.cpp: integers, strings,
// formats, patterns. Pure; one converter per call, single-threaded.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/grammar/json_schema.h"

namespace pagedserve::model::grammar::json_schema_detail {

using Json = nlohmann::ordered_json;

// Keywords ignored wherever they appear (title, description, ...; also $defs, definitions).
bool is_annotation(const std::string& key);

// "/properties/a~1b": a JSON pointer token appended to `pointer` (RFC 6901 escaping).
std::string pointer_append(const std::string& pointer, std::string_view token);

// A scalar JSON value as the grammar writes it: integral numbers (1.0, 2e3) as integers, so
// enum [1.0] accepts `1` (containers: SchemaConverter::value_gbnf).
std::string canonical_json(const Json& value);

// GBNF expression for the integers in [lo, hi] (either end may be open), exact digit by digit.
// "-0" is not emitted (0 is written "0").
std::string integer_range_gbnf(std::optional<int64_t> lo, std::optional<int64_t> hi);

// A JSON Schema `pattern` (unanchored) as an anchored regex over the characters a JSON string
// holds unescaped (json_schema_pattern.cpp). Throws GrammarError naming `pointer`.
std::string json_content_regex(std::string_view pattern, const std::string& pointer);

// One bound of a number range: the bound's JSON text (e.g. "-1.5", "2e3"), exclusive or not.
struct NumberBound {
  std::string text;
  bool strict = false;
};
// GBNF expression for the plain decimals (no exponent) in the range (json_schema_numbers.cpp);
// nullopt when the range is empty. The integer parts of the bounds must be below 1e18.
std::optional<std::string> number_range_gbnf(const std::optional<NumberBound>& lo,
                                             const std::optional<NumberBound>& hi);

class SchemaConverter {
 public:
  SchemaConverter(const Json& root, const JsonSchemaOptions& options);

  // The whole grammar, root rule first.
  std::string convert();

  // A GBNF expression (a rule name or a group) matching the JSON texts valid against `schema`,
  // found at `pointer` (for errors). `hint` names the rules made for it.
  std::string visit(const Json& schema, const std::string& pointer, const std::string& hint);

  // Defines a rule with this body (or reuses one with the same body); returns its name.
  std::string add_rule(const std::string& hint, const std::string& body);
  // A built-in rule (ws, char, string, number, integer, value, object, array), defined on use.
  std::string core(const std::string& name);
  // "ws " when whitespace is allowed between tokens, else "".
  std::string ws();

  [[noreturn]] void fail(const std::string& pointer, const std::string& what) const;

  // Containers (json_schema_containers.cpp).
  std::string visit_object(const Json& schema, const std::string& pointer, const std::string& hint);
  std::string visit_array(const Json& schema, const std::string& pointer, const std::string& hint);
  // Scalars (json_schema_scalars.cpp).
  std::string visit_integer(const Json& schema, const std::string& pointer, bool any_number);
  std::string visit_string(const Json& schema, const std::string& pointer, const std::string& hint);

  const JsonSchemaOptions& options() const { return options_; }
  // Rules written elsewhere (regex_to_gbnf), appended as they are; returns a fresh prefix.
  std::string next_regex_prefix() { return "regex" + std::to_string(++num_regexes_); }
  void add_raw_rules(const std::string& text) { raw_rules_ += text + "\n"; }

  // Counts objects/arrays entered, so a $ref cycle that consumes no token is caught.
  int container_depth = 0;

 private:
  std::string visit_ref(const Json& schema, const std::string& pointer);
  std::string visit_any_of(const Json& schema, const std::string& pointer, const std::string& hint);
  std::string visit_enum(const Json& schema, const std::string& pointer, const std::string& hint);
  // An enum/const value, with the whitespace the grammar allows elsewhere.
  std::string value_gbnf(const Json& value, int depth = 0);
  std::string visit_types(const Json& schema, const std::string& pointer, const std::string& hint);
  const Json& resolve(const std::string& ref, const std::string& pointer) const;
  Json merge(const Json& a, const Json& b, const std::string& pointer) const;
  Json resolve_member(const Json& member, const std::string& pointer, int ref_depth) const;
  void check_keywords(const Json& schema, const std::string& pointer) const;
  std::string unique_name(const std::string& hint);

  const Json& root_;
  JsonSchemaOptions options_;
  std::vector<std::pair<std::string, std::string>> rules_;  // name, body; in definition order
  std::map<std::string, std::string> name_of_body_;
  std::set<std::string> names_;
  std::map<std::string, std::string> ref_rule_;  // "#/$defs/x" -> rule name
  std::map<std::string, int> refs_in_progress_;  // ref -> container_depth at entry
  int visit_depth_ = 0;
  int num_regexes_ = 0;
  std::string raw_rules_;
};

// minItems/maxItems/minLength/maxLength: a count >= 0 (1.0 counts), at most kMaxCount (GBNF
// repetition bounds stop there); nullopt when absent.
inline constexpr int64_t kMaxCount = 100'000;
std::optional<int64_t> count_keyword(const SchemaConverter& converter, const Json& schema,
                                     const std::string& pointer, const std::string& key);

// Schema types as a set of names; "integer" is dropped when "number" is there.
std::set<std::string> schema_types(const Json& schema, const std::string& pointer,
                                   const SchemaConverter& converter);

}  // namespace pagedserve::model::grammar::json_schema_detail
