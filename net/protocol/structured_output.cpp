// Structured-output fields -> one GBNF grammar -> SamplingParams::grammar (see
// structured_output.h).
#include "net/protocol/structured_output.h"

#include <array>
#include <string_view>
#include <vector>

#include "model/grammar/grammar.h"
#include "model/grammar/json_schema.h"

namespace pagedserve::net {
namespace {

using model::grammar::GrammarError;
using Ordered = nlohmann::ordered_json;

// Each translator throws GrammarError; the caller turns that into a 400 naming `param`.
std::string schema_gbnf(const Ordered& schema, const std::string& param) {
  if (schema.is_string()) {
    // vLLM's guided_json may be the schema's JSON text.
    Ordered parsed = Ordered::parse(schema.get<std::string>(), nullptr, false);
    if (parsed.is_discarded()) throw GrammarError(param + " is not valid JSON");
    return model::grammar::json_schema_to_gbnf(parsed);
  }
  if (!schema.is_object() && !schema.is_boolean()) {
    throw GrammarError(param + " must be a JSON schema (an object)");
  }
  return model::grammar::json_schema_to_gbnf(schema);
}

std::string choice_gbnf(const Ordered& choices, const std::string& param) {
  if (!choices.is_array() || choices.empty()) {
    throw GrammarError(param + " must be a non-empty list of strings");
  }
  std::vector<std::string> list;
  for (const Ordered& choice : choices) {
    if (!choice.is_string()) throw GrammarError(param + " must be a non-empty list of strings");
    list.push_back(choice.get<std::string>());
  }
  return model::grammar::choice_to_gbnf(list);
}

std::string string_of(const Ordered& value, const std::string& param) {
  if (!value.is_string()) throw GrammarError(param + " must be a string");
  return value.get<std::string>();
}

std::string response_format_gbnf(const Ordered& format) {
  if (!format.is_object() || !format.contains("type") || !format["type"].is_string()) {
    throw GrammarError("response_format must be an object with a string \"type\"");
  }
  const std::string type = format["type"].get<std::string>();
  if (type == "text") return {};
  if (type == "json_object") return model::grammar::json_object_gbnf();
  if (type != "json_schema") {
    throw GrammarError("response_format.type must be text, json_object or json_schema, got \"" +
                       type + "\"");
  }
  auto spec = format.find("json_schema");
  if (spec == format.end() || !spec->is_object()) {
    throw GrammarError("response_format.json_schema must be an object with a \"schema\"");
  }
  auto schema = spec->find("schema");
  if (schema == spec->end()) {
    // OpenAI's SDK sends the schema under "schema"; vLLM also takes the object itself.
    throw GrammarError("response_format.json_schema.schema is required");
  }
  return schema_gbnf(*schema, "response_format.json_schema.schema");
}

// vLLM's newer form: {"json" | "regex" | "choice" | "grammar" | "json_object": true}.
std::string structured_outputs_gbnf(const Ordered& spec, std::string& param) {
  if (!spec.is_object()) throw GrammarError("structured_outputs must be an object");
  std::string gbnf;
  int given = 0;
  for (const auto& [key, value] : spec.items()) {
    if (value.is_null()) continue;
    const std::string sub = "structured_outputs." + key;
    if (key == "json") {
      gbnf = schema_gbnf(value, sub);
    } else if (key == "regex") {
      gbnf = model::grammar::regex_to_gbnf(string_of(value, sub));
    } else if (key == "choice") {
      gbnf = choice_gbnf(value, sub);
    } else if (key == "grammar") {
      gbnf = string_of(value, sub);
    } else if (key == "json_object") {
      if (!value.is_boolean()) throw GrammarError(sub + " must be a boolean");
      if (!value.get<bool>()) continue;
      gbnf = model::grammar::json_object_gbnf();
    } else if (key == "disable_any_whitespace" || key == "disable_additional_properties" ||
               key == "backend") {
      continue;  // backend options; the one backend here always behaves the same way
    } else {
      throw GrammarError(sub + " is not supported");
    }
    param = sub;
    ++given;
  }
  if (given > 1)
    throw GrammarError("structured_outputs must hold one constraint, got " + std::to_string(given));
  return gbnf;
}

constexpr std::array<std::string_view, 9> kConstraintFields = {
    "response_format", "guided_json",    "guided_regex",
    "guided_choice",   "guided_grammar", "structured_outputs",
    "grammar",         "json_schema",    "guided_whitespace_pattern"};

std::string constraint_gbnf(std::string_view key, const Ordered& value, std::string& param) {
  const std::string name(key);
  if (key == "response_format") return response_format_gbnf(value);
  if (key == "guided_json" || key == "json_schema") return schema_gbnf(value, name);
  if (key == "guided_regex") return model::grammar::regex_to_gbnf(string_of(value, name));
  if (key == "guided_choice") return choice_gbnf(value, name);
  if (key == "guided_grammar" || key == "grammar") return string_of(value, name);
  if (key == "structured_outputs") return structured_outputs_gbnf(value, param);
  throw GrammarError(name + " is not supported (JSON whitespace is always compact)");
}

}  // namespace

std::optional<OutputConstraint> read_output_constraint(FieldReader& fields,
                                                       const Ordered* ordered) {
  std::optional<OutputConstraint> found;
  for (std::string_view key : kConstraintFields) {
    const Ordered value = ordered_field(fields, ordered, key);
    if (value.is_null()) continue;
    std::string param(key);
    try {
      std::string gbnf = constraint_gbnf(key, value, param);
      if (gbnf.empty()) continue;  // response_format text: no constraint
      if (found) {
        fields.fail(invalid_request(
            "only one structured output may be given, got " + found->param + " and " + param,
            param));
        return std::nullopt;
      }
      found = OutputConstraint{std::move(gbnf), std::move(param)};
    } catch (const GrammarError& e) {
      fields.fail(invalid_request(e.what(), param));
      return std::nullopt;
    } catch (const nlohmann::json::exception& e) {
      fields.fail(invalid_request(param + ": " + e.what(), param));
      return std::nullopt;
    }
  }
  return found;
}

void compile_output_constraint(FieldReader& fields, const ServedModel& served,
                               const OutputConstraint& constraint,
                               model::SamplingParams& sampling) {
  if (!served.grammars) {
    fields.fail(invalid_request("structured outputs are not available here", constraint.param));
    return;
  }
  try {
    sampling.grammar = served.grammars->get(constraint.gbnf, constraint.root);
  } catch (const GrammarError& e) {
    fields.fail(invalid_request(e.what(), constraint.param));
  }
}

std::optional<Ordered> parse_ordered_if_needed(std::string_view body) {
  bool needed = body.find("\"tools\"") != std::string_view::npos;
  for (std::string_view key : kConstraintFields) {
    if (body.find(key) != std::string_view::npos) needed = true;
  }
  if (!needed) return std::nullopt;
  Ordered parsed = Ordered::parse(body, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) return std::nullopt;
  return parsed;
}

}  // namespace pagedserve::net
