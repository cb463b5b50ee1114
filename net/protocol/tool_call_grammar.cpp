// Forced tool calls as a grammar (see tool_call_grammar.h).
#include "net/protocol/tool_call_grammar.h"

#include "model/grammar/grammar.h"
#include "model/grammar/json_schema.h"

namespace pagedserve::net {
namespace {

using Ordered = nlohmann::ordered_json;

// A tool's parameters moved under `prefix` of a bigger schema: its local $refs ("#/$defs/x",
// "#") are rewritten to point into the new place.
void rebase_refs(Ordered& schema, const std::string& prefix) {
  if (schema.is_object()) {
    for (auto& [key, value] : schema.items()) {
      if (key == "$ref" && value.is_string()) {
        const std::string ref = value.get<std::string>();
        if (ref.starts_with("#")) value = "#" + prefix + ref.substr(1);
      } else {
        rebase_refs(value, prefix);
      }
    }
  } else if (schema.is_array()) {
    for (Ordered& item : schema) rebase_refs(item, prefix);
  }
}

// anyOf over the callable tools of {"name": const, args_key: parameters}.
Ordered call_schema(const ChatTools& tools, const std::string& args_key) {
  Ordered any_of = Ordered::array();
  for (const Ordered* tool : tools.callable()) {
    const Ordered& function = (*tool)["function"];
    Ordered parameters = function.contains("parameters") && !function["parameters"].is_null()
                             ? function["parameters"]
                             : Ordered{{"type", "object"}, {"properties", Ordered::object()}};
    rebase_refs(parameters, "/anyOf/" + std::to_string(any_of.size()) + "/properties/" + args_key);
    Ordered properties = Ordered::object();
    properties["name"] = Ordered{{"const", function["name"]}};
    properties[args_key] = std::move(parameters);
    any_of.push_back(Ordered{{"type", "object"},
                             {"properties", std::move(properties)},
                             {"required", Ordered::array({"name", args_key})},
                             {"additionalProperties", false}});
  }
  return Ordered{{"anyOf", std::move(any_of)}};
}

}  // namespace

std::string tool_call_gbnf(const ChatTools& tools, ToolCallFormat format) {
  using model::grammar::gbnf_literal;
  const std::string args_key = format == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
  std::string gbnf;
  try {
    gbnf = model::grammar::json_schema_to_gbnf(call_schema(tools, args_key));
  } catch (const model::grammar::GrammarError& e) {
    // Pointers are into the call schema: /anyOf/i/properties/arguments/... is tool i.
    throw model::grammar::GrammarError(std::string("tools: ") + e.what());
  }
  const std::string more = std::to_string(tools.parallel ? kMaxForcedToolCalls - 1 : 0);
  std::string root = std::string(kToolCallsRootRule) + " ::= ";
  switch (format) {
    case ToolCallFormat::kHermes: {
      const std::string call =
          "(" + gbnf_literal("<tool_call>\n") + " root " + gbnf_literal("\n</tool_call>") + ")";
      root += call + " (" + gbnf_literal("\n") + " " + call + "){0," + more + "}";
      break;
    }
    case ToolCallFormat::kMistral:
      root += gbnf_literal("[TOOL_CALLS][") + " root (" + gbnf_literal(", ") + " root){0," + more +
              "} " + gbnf_literal("]");
      break;
    case ToolCallFormat::kLlama3Json:
      root += "root";
      break;
  }
  return root + "\n" + gbnf;
}

}  // namespace pagedserve::net
