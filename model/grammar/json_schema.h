// JSON Schema -> GBNF, for response_format json_schema, guided_json and tool arguments.
// Pure.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model/grammar/grammar.h"

namespace pagedserve::model::grammar {

// Largest schema accepted, as serialized JSON (bytes); larger ones are a GrammarError.
inline constexpr size_t kMaxJsonSchemaBytes = 64 * 1024;

struct JsonSchemaOptions {
  // What separates tokens of the JSON (after `{`, `[`, `,`, `:`): at most this many
  // spaces (no newlines), so a weak model cannot stall in whitespace.
  int max_whitespace = 1;
  // Objects: properties in the schema's order (required ones always present, optional ones
  // may be skipped). additionalProperties false when the schema does not say (OpenAI's
  // strict mode); true follows the JSON Schema default and allows extra keys.
  bool default_additional_properties = false;
};

// The GBNF whose root matches exactly the JSON texts valid against `schema` (for the supported
// keywords). Supported: type (incl. lists), properties, required, additionalProperties (bool or
// schema), enum, const, items, prefixItems, minItems, maxItems, nested objects, anyOf, oneOf
// (as anyOf), allOf of object schemas, $ref to #/$defs/... and #/definitions/... (recursion
// allowed), string pattern (regex_to_gbnf), minLength, maxLength, format (date, time,
// date-time, uuid, email), minimum/maximum/exclusiveMinimum/exclusiveMaximum on integers and
// numbers (bounds within 1e18), uniqueItems false, additionalItems (draft 7 tuples). Annotations
// (title, description, default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly)
// are ignored. Anything else is refused: throws GrammarError "json schema at <JSON pointer>:
// unsupported keyword 'k'" (or what is wrong, e.g. "minItems 3 > maxItems 1"). Never silently
// ignored.
//
// How the texts are written (json_schema*.cpp have the details):
// - whitespace only after `{`, `[`, `,` and `:`; compact JSON always matches;
// - an object's declared properties come in the schema's order, additional ones after them
//   (keys spelling a declared name are not additional);
// - keywords apply to their own type only ({"minLength": 2} still accepts numbers); `type`
//   absent means any type;
// - bounded numbers are plain decimals (no exponent); bounded ones are never written "-0";
// - `pattern` and `format` match string content that needs no JSON escapes (a pattern that
//   requires `"`, `\` or a control character is refused; `\s` is the space alone); formats are
//   approximate where noted (date does not check days per month, email is a simplification);
// - oneOf is anyOf (exact when its members do not overlap); allOf and the keywords beside
//   anyOf/oneOf are merged into each member where that is exact (else refused);
// - $ref: local JSON pointers ("#", "#/$defs/x", "#/definitions/x", any "#/..."); a $ref beside
//   other constraining keywords is refused. The root pointer is written "/".
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                const JsonSchemaOptions& options = {});

// GBNF matching any JSON value whose top level is an object (response_format json_object).
std::string json_object_gbnf(const JsonSchemaOptions& options = {});

}  // namespace pagedserve::model::grammar
