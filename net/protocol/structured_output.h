// Structured outputs: the request fields that constrain what a completion may say, turned into
// one GBNF grammar and compiled for the served model (SamplingParams::grammar). Pure apart from
// the served model's grammar cache; any thread.
//
// Accepted (at most one of them per request; two are a 400):
//   OpenAI     response_format {"type": "text" | "json_object" | "json_schema", "json_schema":
//              {"name", "schema", "strict", "description"}}
//   vLLM       guided_json (schema object or its JSON text), guided_regex, guided_choice (list
//              of strings), guided_grammar (GBNF); or the newer structured_outputs {"json",
//              "regex", "choice", "grammar", "json_object": true}. guided_decoding_backend is
//              accepted and ignored (there is one backend); guided_whitespace_pattern is refused.
//   llama.cpp  grammar (GBNF), json_schema (schema object).
// A schema, regex or grammar that cannot be compiled is a 400 whose message says where
// (model/grammar/grammar.h: GrammarError) and whose param names the field.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "model/sampling_params.h"
#include "net/protocol/json_fields.h"
#include "net/protocol/served_model.h"

namespace pagedserve::net {

// A constraint as GBNF text, and the field it came from (for errors).
struct OutputConstraint {
  std::string gbnf;
  std::string param;
  std::string root = "root";  // the rule the output must match
};

// Reads the constraint fields of a completions or chat body. `ordered` is the same body parsed
// with its key order kept (schemas list properties in the order the output should follow);
// null: the order of `fields`' object (sorted keys). Errors go to `fields`.
std::optional<OutputConstraint> read_output_constraint(FieldReader& fields,
                                                       const nlohmann::ordered_json* ordered);

// Compiles `constraint` for the served model into sampling.grammar; a grammar that does not
// compile is a 400 recorded in `fields`.
void compile_output_constraint(FieldReader& fields, const ServedModel& served,
                               const OutputConstraint& constraint, model::SamplingParams& sampling);

// A body parsed again with its key order kept, when it has a field whose order matters (a
// schema, tools); nullopt otherwise or when it does not parse (the first parse reported that).
std::optional<nlohmann::ordered_json> parse_ordered_if_needed(std::string_view body);

}  // namespace pagedserve::net
