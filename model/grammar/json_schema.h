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
// date-time, uuid, email), integer minimum/maximum/exclusiveMinimum/exclusiveMaximum, number
// bounds where they can be expressed. Annotations (title, description, default, examples,
// $schema, $id, $comment, deprecated, readOnly, writeOnly) are ignored. Anything else is
// refused: throws GrammarError "json schema at <JSON pointer>: unsupported keyword 'k'" (or
// what is wrong, e.g. "minItems 3 > maxItems 1"). Never silently ignored.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                const JsonSchemaOptions& options = {});

// GBNF matching any JSON value whose top level is an object (response_format json_object).
std::string json_object_gbnf(const JsonSchemaOptions& options = {});

}  // namespace pagedserve::model::grammar
