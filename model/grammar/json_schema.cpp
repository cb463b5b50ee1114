// JSON Schema -> GBNF: keyword checks, dispatch by keyword, $ref (rules, recursion), allOf
// (merged into one schema), anyOf/oneOf (alternatives), enum/const, types; the built-in rules.
// Objects and arrays: json_schema_containers.cpp; integers and strings: json_schema_scalars.cpp;
// allOf merging: json_schema_merge.cpp.
//
// Whitespace: at most options.max_whitespace spaces after `{`, `[`, `,` and `:`, nowhere else
// (the compact form of nlohmann's dump() always matches). Keyword semantics follow JSON Schema:
// a keyword applies only to its own type, so {"minLength": 2} still accepts numbers.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "model/grammar/json_schema_converter.h"

namespace pagedserve::model::grammar {
namespace json_schema_detail {
namespace {

constexpr int kMaxSchemaDepth = 64;

// Ignored wherever they appear ($defs and definitions hold schemas reached by $ref).
const std::set<std::string>& annotation_keywords() {
  static const std::set<std::string> keys = {"title",    "description", "default",  "examples",
                                             "$schema",  "$id",         "$comment", "deprecated",
                                             "readOnly", "writeOnly",   "$defs",    "definitions"};
  return keys;
}

const std::set<std::string>& supported_keywords() {
  static const std::set<std::string> keys = {"type",
                                             "enum",
                                             "const",
                                             "anyOf",
                                             "oneOf",
                                             "allOf",
                                             "$ref",
                                             "properties",
                                             "required",
                                             "additionalProperties",
                                             "items",
                                             "prefixItems",
                                             "additionalItems",
                                             "minItems",
                                             "maxItems",
                                             "uniqueItems",
                                             "pattern",
                                             "minLength",
                                             "maxLength",
                                             "format",
                                             "minimum",
                                             "maximum",
                                             "exclusiveMinimum",
                                             "exclusiveMaximum"};
  return keys;
}

// Keywords that constrain an instance of this type (and only of it).
const std::map<std::string, std::vector<std::string>>& type_keywords() {
  static const std::map<std::string, std::vector<std::string>> keys = {
      {"object", {"properties", "required", "additionalProperties"}},
      {"array", {"items", "prefixItems", "additionalItems", "minItems", "maxItems"}},
      {"string", {"pattern", "minLength", "maxLength", "format"}},
      {"number", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}}};
  return keys;
}

bool has_type_keyword(const Json& schema) {
  for (const auto& [type, keys] : type_keywords()) {
    for (const auto& key : keys) {
      if (schema.contains(key)) return true;
    }
  }
  return false;
}

bool value_has_type(const Json& value, const std::string& type) {
  if (type == "integer") {
    return value.is_number_integer() ||
           (value.is_number_float() && std::trunc(value.get<double>()) == value.get<double>());
  }
  if (type == "number") return value.is_number();
  if (type == "string") return value.is_string();
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "boolean") return value.is_boolean();
  return type == "null" && value.is_null();
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? separator : "") + parts[i];
  return out;
}

// Decodes one RFC 6901 token of a URI fragment: %XX, then ~1 -> '/', ~0 -> '~'.
std::string decode_pointer_token(std::string_view token) {
  std::string unescaped;
  for (size_t i = 0; i < token.size(); ++i) {
    if (token[i] == '%' && i + 2 < token.size() &&
        std::isxdigit(static_cast<unsigned char>(token[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(token[i + 2]))) {
      unescaped += static_cast<char>(std::stoi(std::string(token.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      unescaped += token[i];
    }
  }
  std::string out;
  for (size_t i = 0; i < unescaped.size(); ++i) {
    if (unescaped[i] == '~' && i + 1 < unescaped.size() && unescaped[i + 1] == '1') {
      out += '/', ++i;
    } else if (unescaped[i] == '~' && i + 1 < unescaped.size() && unescaped[i + 1] == '0') {
      out += '~', ++i;
    } else {
      out += unescaped[i];
    }
  }
  return out;
}

}  // namespace

bool is_annotation(const std::string& key) { return annotation_keywords().count(key) > 0; }

std::string pointer_append(const std::string& pointer, std::string_view token) {
  std::string out = pointer + "/";
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string canonical_json(const Json& value) {
  if (value.is_number_float()) {
    double x = value.get<double>();
    if (std::isfinite(x) && std::trunc(x) == x && std::fabs(x) < 1e15) {
      return std::to_string(static_cast<int64_t>(x));
    }
    return value.dump();
  }
  return value.dump();
}

std::optional<int64_t> count_keyword(const SchemaConverter& converter, const Json& schema,
                                     const std::string& pointer, const std::string& key) {
  if (!schema.contains(key)) return std::nullopt;
  const Json& value = schema[key];
  std::string at = pointer_append(pointer, key);
  if (!value.is_number() || value.get<double>() < 0 ||
      value.get<double>() != std::floor(value.get<double>())) {
    converter.fail(at, key + " must be a count >= 0");
  }
  if (value.get<double>() > static_cast<double>(kMaxCount)) {
    converter.fail(at, key + " " + value.dump() + " is over " + std::to_string(kMaxCount));
  }
  return static_cast<int64_t>(value.get<double>());
}

std::set<std::string> schema_types(const Json& schema, const std::string& pointer,
                                   const SchemaConverter& converter) {
  static const std::set<std::string> all = {"null",   "boolean", "object", "array",
                                            "string", "number",  "integer"};
  std::set<std::string> types;
  if (!schema.contains("type")) {
    types = all;
  } else {
    const Json& type = schema["type"];
    const Json list = type.is_array() ? type : Json::array({type});
    for (const auto& t : list) {
      if (!t.is_string() || !all.count(t.get<std::string>())) {
        converter.fail(pointer_append(pointer, "type"), "unknown type " + t.dump());
      }
      types.insert(t.get<std::string>());
    }
    if (types.empty()) converter.fail(pointer_append(pointer, "type"), "type list is empty");
  }
  if (types.count("number")) types.erase("integer");
  return types;
}

SchemaConverter::SchemaConverter(const Json& root, const JsonSchemaOptions& options)
    : root_(root), options_(options) {
  names_ = {"root",    "ws",    "char",   "string", "number",
            "integer", "value", "object", "member", "array"};
}

void SchemaConverter::fail(const std::string& pointer, const std::string& what) const {
  throw GrammarError("json schema at " + (pointer.empty() ? std::string("/") : pointer) + ": " +
                     what);
}

std::string SchemaConverter::unique_name(const std::string& hint) {
  std::string base;
  for (char c : hint) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    base += ok ? c : '-';
  }
  if (base.empty() || base.rfind("regex", 0) == 0) base = "x-" + base;
  std::string name = base;
  for (int i = 2; names_.count(name); ++i) name = base + "-" + std::to_string(i);
  names_.insert(name);
  return name;
}

std::string SchemaConverter::add_rule(const std::string& hint, const std::string& body) {
  auto found = name_of_body_.find(body);
  if (found != name_of_body_.end()) return found->second;
  std::string name = unique_name(hint);
  rules_.emplace_back(name, body);
  name_of_body_[body] = name;
  return name;
}

std::string SchemaConverter::ws() {
  if (options_.max_whitespace <= 0) return "";
  return core("ws") + " ";
}

std::string SchemaConverter::core(const std::string& name) {
  for (const auto& [defined, body] : rules_) {
    if (defined == name) return name;
  }
  std::string body;
  if (name == "ws") {
    int n = options_.max_whitespace;
    body = n == 1 ? "\" \"?" : "\" \"{0," + std::to_string(n) + "}";
  } else if (name == "char") {
    body = R"([^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ))";
  } else if (name == "string") {
    body = "\"\\\"\" " + core("char") + "* \"\\\"\"";
  } else if (name == "integer") {
    body = R"("-"? ( "0" | [1-9] [0-9]* ))";
  } else if (name == "number") {
    body = core("integer") + R"( ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?)";
  } else if (name == "value") {
    rules_.emplace_back(name, "");  // defined before its parts: value and object recurse
    std::string parts = core("object") + " | " + core("array") + " | " + core("string") + " | " +
                        core("number") + R"( | "true" | "false" | "null")";
    for (auto& rule : rules_) {
      if (rule.first == name) rule.second = parts;
    }
    return name;
  } else if (name == "member") {
    body = core("string") + " \":\" " + ws() + core("value");
  } else if (name == "object") {
    body = "\"{\" " + ws() + "( " + core("member") + " ( \",\" " + ws() + "member )* )? \"}\"";
  } else if (name == "array") {
    body = "\"[\" " + ws() + "( " + core("value") + " ( \",\" " + ws() + "value )* )? \"]\"";
  }
  rules_.emplace_back(name, body);
  return name;
}

void SchemaConverter::check_keywords(const Json& schema, const std::string& pointer) const {
  for (const auto& [key, value] : schema.items()) {
    if (is_annotation(key)) continue;
    if (!supported_keywords().count(key) || (key == "uniqueItems" && value != Json(false))) {
      fail(pointer, "unsupported keyword '" + key + "'");
    }
  }
}

std::string SchemaConverter::convert() {
  std::string dumped = root_.dump();
  if (dumped.size() > kMaxJsonSchemaBytes) {
    fail("", "schema is " + std::to_string(dumped.size()) + " bytes, more than " +
                 std::to_string(kMaxJsonSchemaBytes));
  }
  if (root_ == Json(false)) fail("", "schema false matches nothing");
  ref_rule_["#"] = "root";
  refs_in_progress_["#"] = container_depth;
  std::string body = visit(root_, "", "root");
  std::string text = "root ::= " + body + "\n";
  for (const auto& [name, rule_body] : rules_) text += name + " ::= " + rule_body + "\n";
  text += raw_rules_;
  if (text.size() > kMaxGrammarBytes) {
    fail("", "the grammar would be " + std::to_string(text.size()) + " bytes, more than " +
                 std::to_string(kMaxGrammarBytes));
  }
  return text;
}

std::string SchemaConverter::visit(const Json& schema, const std::string& pointer,
                                   const std::string& hint) {
  struct DepthGuard {
    int& depth;
    ~DepthGuard() { --depth; }
  } guard{++visit_depth_};
  if (visit_depth_ > kMaxSchemaDepth) fail(pointer, "schema nested too deep");
  if (schema.is_boolean()) {
    if (schema.get<bool>()) return core("value");
    fail(pointer, "schema false matches nothing");
  }
  if (!schema.is_object()) fail(pointer, "a schema must be an object or a boolean");
  check_keywords(schema, pointer);
  if (schema.contains("$ref")) return visit_ref(schema, pointer);
  if (schema.contains("allOf")) {
    const Json& members = schema["allOf"];
    if (!members.is_array() || members.empty()) {
      fail(pointer_append(pointer, "allOf"), "allOf must be a non-empty array");
    }
    Json merged = schema;
    merged.erase("allOf");
    for (size_t i = 0; i < members.size(); ++i) {
      std::string at = pointer_append(pointer_append(pointer, "allOf"), std::to_string(i));
      merged = merge(merged, resolve_member(members[i], at, 0), at);
    }
    return visit(merged, pointer, hint);
  }
  if (schema.contains("anyOf") || schema.contains("oneOf")) {
    return visit_any_of(schema, pointer, hint);
  }
  if (schema.contains("enum") || schema.contains("const")) {
    return visit_enum(schema, pointer, hint);
  }
  return visit_types(schema, pointer, hint);
}

const Json& SchemaConverter::resolve(const std::string& ref, const std::string& pointer) const {
  if (ref.empty() || ref[0] != '#' || (ref.size() > 1 && ref[1] != '/')) {
    fail(pointer_append(pointer, "$ref"),
         "$ref '" + ref + "' does not resolve (only '#' and '#/...' pointers are supported)");
  }
  const Json* node = &root_;
  size_t start = 2;
  while (start <= ref.size() && ref.size() > 1) {
    size_t end = std::min(ref.find('/', start), ref.size());
    std::string token = decode_pointer_token(std::string_view(ref).substr(start, end - start));
    if (node->is_object() && node->contains(token)) {
      node = &(*node)[token];
    } else if (node->is_array() && !token.empty() &&
               std::all_of(token.begin(), token.end(), ::isdigit) &&
               std::stoul(token) < node->size()) {
      node = &(*node)[std::stoul(token)];
    } else {
      fail(pointer_append(pointer, "$ref"), "$ref '" + ref + "' does not resolve");
    }
    start = end + 1;
  }
  return *node;
}

std::string SchemaConverter::visit_ref(const Json& schema, const std::string& pointer) {
  for (const auto& [key, value] : schema.items()) {
    if (key != "$ref" && !is_annotation(key)) {
      fail(pointer, "unsupported keyword '" + key + "' beside $ref");
    }
  }
  if (!schema["$ref"].is_string()) fail(pointer_append(pointer, "$ref"), "$ref must be a string");
  std::string ref = schema["$ref"].get<std::string>();
  if (auto found = ref_rule_.find(ref); found != ref_rule_.end()) {
    auto in_progress = refs_in_progress_.find(ref);
    if (in_progress != refs_in_progress_.end() && in_progress->second == container_depth) {
      fail(pointer_append(pointer, "$ref"),
           "$ref '" + ref + "' recurses without an object or array in between");
    }
    return found->second;
  }
  const Json& target = resolve(ref, pointer);
  std::string name = unique_name(ref.substr(ref.rfind('/') + 1));
  ref_rule_[ref] = name;
  refs_in_progress_[ref] = container_depth;
  std::string body = visit(target, ref.substr(1), name);
  refs_in_progress_.erase(ref);
  rules_.emplace_back(name, body);
  return name;
}

std::string SchemaConverter::visit_any_of(const Json& schema, const std::string& pointer,
                                          const std::string& hint) {
  if (schema.contains("anyOf") && schema.contains("oneOf")) {
    fail(pointer, "unsupported keyword 'oneOf' beside anyOf");
  }
  // oneOf is taken as anyOf: exact when its members do not overlap.
  std::string key = schema.contains("anyOf") ? "anyOf" : "oneOf";
  const Json& members = schema[key];
  std::string at = pointer_append(pointer, key);
  if (!members.is_array() || members.empty()) fail(at, key + " must be a non-empty array");
  Json siblings = schema;
  siblings.erase(key);
  bool plain = std::all_of(siblings.items().begin(), siblings.items().end(),
                           [](const auto& item) { return is_annotation(item.key()); });
  std::vector<std::string> alternatives;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == Json(false)) continue;
    std::string member_at = pointer_append(at, std::to_string(i));
    std::string alternative =
        plain ? visit(members[i], member_at, hint)
              : visit(merge(siblings, resolve_member(members[i], member_at, 0), member_at),
                      member_at, hint);
    if (std::find(alternatives.begin(), alternatives.end(), alternative) == alternatives.end()) {
      alternatives.push_back(alternative);
    }
  }
  if (alternatives.empty()) fail(at, "no member of " + key + " can match");
  if (alternatives.size() == 1) return alternatives[0];
  return add_rule(hint, join(alternatives, " | "));
}

std::string SchemaConverter::visit_enum(const Json& schema, const std::string& pointer,
                                        const std::string& hint) {
  for (const auto& [key, value] : schema.items()) {
    if (key != "enum" && key != "const" && key != "type" && !is_annotation(key)) {
      fail(pointer, "unsupported keyword '" + key + "' beside enum/const");
    }
  }
  Json values = schema.contains("const") ? Json::array({schema["const"]}) : schema["enum"];
  if (!values.is_array() || values.empty()) {
    fail(pointer_append(pointer, "enum"), "enum must be a non-empty array");
  }
  if (schema.contains("const") && schema.contains("enum")) {
    const Json& allowed = schema["enum"];
    if (!allowed.is_array() ||
        std::find(allowed.begin(), allowed.end(), values[0]) == allowed.end()) {
      fail(pointer, "const is not among the enum values");
    }
  }
  std::set<std::string> types = schema_types(schema, pointer, *this);
  std::vector<std::string> alternatives;
  for (const auto& value : values) {
    bool typed = std::any_of(types.begin(), types.end(),
                             [&](const std::string& t) { return value_has_type(value, t); });
    std::string literal = value_gbnf(value);
    if (typed &&
        std::find(alternatives.begin(), alternatives.end(), literal) == alternatives.end()) {
      alternatives.push_back(literal);
    }
  }
  if (alternatives.empty()) fail(pointer, "no enum/const value has the schema's type");
  return add_rule(hint, join(alternatives, " | "));
}

std::string SchemaConverter::value_gbnf(const Json& value, int depth) {
  if (!value.is_array() && !value.is_object()) return gbnf_literal(canonical_json(value));
  if (depth > kMaxSchemaDepth) fail("", "an enum/const value nested too deep");
  if (value.empty())
    return gbnf_literal(value.is_array() ? "[" : "{") + " " + ws() +
           gbnf_literal(value.is_array() ? "]" : "}");
  std::string out = gbnf_literal(value.is_array() ? "[" : "{") + " " + ws();
  bool first = true;
  for (const auto& [key, item] : value.items()) {
    if (!first) out += "\",\" " + ws();
    if (value.is_object()) out += gbnf_literal(Json(key).dump()) + " \":\" " + ws();
    out += value_gbnf(item, depth + 1) + " ";
    first = false;
  }
  return "( " + out + gbnf_literal(value.is_array() ? "]" : "}") + " )";
}

std::string SchemaConverter::visit_types(const Json& schema, const std::string& pointer,
                                         const std::string& hint) {
  if (!schema.contains("type") && !has_type_keyword(schema)) return core("value");
  std::set<std::string> types = schema_types(schema, pointer, *this);
  std::vector<std::string> alternatives;
  if (types.count("object")) alternatives.push_back(visit_object(schema, pointer, hint));
  if (types.count("array")) alternatives.push_back(visit_array(schema, pointer, hint));
  if (types.count("string")) alternatives.push_back(visit_string(schema, pointer, hint));
  if (types.count("number") || types.count("integer")) {
    alternatives.push_back(visit_integer(schema, pointer, types.count("number") > 0));
  }
  if (types.count("boolean")) alternatives.push_back(R"("true" | "false")");
  if (types.count("null")) alternatives.push_back(R"("null")");
  if (alternatives.size() == 1 && alternatives[0].find(' ') == std::string::npos) {
    return alternatives[0];
  }
  return add_rule(hint, join(alternatives, " | "));
}

}  // namespace json_schema_detail

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                const JsonSchemaOptions& options) {
  return json_schema_detail::SchemaConverter(schema, options).convert();
}

std::string json_object_gbnf(const JsonSchemaOptions& options) {
  return json_schema_to_gbnf(nlohmann::ordered_json{{"type", "object"}},
                             JsonSchemaOptions{options.max_whitespace, true});
}

}  // namespace pagedserve::model::grammar
