// tools / tool_choice / parallel_tool_calls (see chat_tools.h).
#include "net/protocol/chat_tools.h"

#include <set>

namespace pagedserve::net {
namespace {

using Ordered = nlohmann::ordered_json;

bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// One tool's problem, or "" when it is valid.
std::string check_tool(const Ordered& tool, const std::string& param) {
  if (!tool.is_object()) return param + " must be an object";
  if (!tool.contains("type") || tool["type"] != "function") {
    return param + ".type must be \"function\"";
  }
  if (!tool.contains("function") || !tool["function"].is_object()) {
    return param + ".function must be an object";
  }
  const Ordered& function = tool["function"];
  if (!function.contains("name") || !function["name"].is_string() ||
      !valid_function_name(function["name"].get<std::string>())) {
    return param + ".function.name must be 1 to 64 of a-z, A-Z, 0-9, _ and -";
  }
  if (function.contains("parameters") && !function["parameters"].is_null() &&
      !function["parameters"].is_object()) {
    return param + ".function.parameters must be a JSON schema object";
  }
  if (function.contains("description") && !function["description"].is_null() &&
      !function["description"].is_string()) {
    return param + ".function.description must be a string";
  }
  return {};
}

void read_tool_choice(FieldReader& fields, const Ordered& choice, ChatTools& out) {
  if (choice.is_null()) {
    out.choice = out.tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
    return;
  }
  if (choice.is_string()) {
    const std::string name = choice.get<std::string>();
    if (name == "none")
      out.choice = ToolChoice::kNone;
    else if (name == "auto")
      out.choice = ToolChoice::kAuto;
    else if (name == "required")
      out.choice = ToolChoice::kRequired;
    else
      fields.fail(
          invalid_request("tool_choice must be none, auto, required or "
                          "{\"type\": \"function\", \"function\": {\"name\"}}, got \"" +
                              name + "\"",
                          "tool_choice"));
  } else if (choice.is_object() && choice.contains("function") && choice["function"].is_object() &&
             choice["function"].contains("name") && choice["function"]["name"].is_string()) {
    out.choice = ToolChoice::kNamed;
    out.named = choice["function"]["name"].get<std::string>();
    bool known = false;
    for (const Ordered& tool : out.tools) known |= tool["function"]["name"] == out.named;
    fields.require(known, "tool_choice names function \"" + out.named + "\", which is not in tools",
                   "tool_choice");
  } else {
    fields.fail(invalid_request(
        "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": "
        "{\"name\"}}",
        "tool_choice"));
  }
  if (out.choice != ToolChoice::kNone && out.choice != ToolChoice::kAuto) {
    fields.require(!out.tools.empty(), "tool_choice requires tools", "tool_choice");
  }
}

}  // namespace

std::vector<const Ordered*> ChatTools::callable() const {
  std::vector<const Ordered*> out;
  for (const Ordered& tool : tools) {
    if (choice != ToolChoice::kNamed || tool["function"]["name"] == named) out.push_back(&tool);
  }
  return out;
}

ChatTools read_chat_tools(FieldReader& fields, const Ordered* ordered) {
  ChatTools out;
  const Ordered tools = ordered_field(fields, ordered, "tools");
  if (!tools.is_null()) {
    if (!tools.is_array()) {
      fields.fail(invalid_request("tools must be a list", "tools"));
      return out;
    }
    std::set<std::string> names;
    for (size_t i = 0; i < tools.size(); ++i) {
      const std::string param = "tools[" + std::to_string(i) + "]";
      if (std::string problem = check_tool(tools[i], param); !problem.empty()) {
        fields.fail(invalid_request(problem, param));
        return out;
      }
      const std::string name = tools[i]["function"]["name"].get<std::string>();
      if (!names.insert(name).second) {
        fields.fail(invalid_request("tools has two functions named \"" + name + "\"", param));
        return out;
      }
    }
    out.tools = tools;
  }
  read_tool_choice(fields, ordered_field(fields, ordered, "tool_choice"), out);
  out.parallel = fields.boolean("parallel_tool_calls").value_or(true);
  return out;
}

}  // namespace pagedserve::net
