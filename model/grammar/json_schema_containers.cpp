// Objects and arrays of the JSON Schema -> GBNF converter.
//
// An object lists its declared properties in the schema's order (required ones always, optional
// ones may be skipped), then any additional properties: keys other than the declared names.
// So a valid object has at least one accepted spelling: declared keys in schema order first.
// An array is its prefixItems, then items, counted against minItems/maxItems.
#include <algorithm>
#include <cstdio>
#include <map>

#include "model/grammar/json_schema_converter.h"

namespace pagedserve::model::grammar::json_schema_detail {
namespace {

// Longer declared names beside additional properties are refused: the exclusion grammar nests
// one group per character.
constexpr size_t kMaxExcludedNameBytes = 256;

struct Property {
  std::string name;
  bool required = false;
  std::string value;  // GBNF expression of the value
};

// The code points of UTF-8 text (valid: it comes from a parsed JSON string).
std::vector<char32_t> code_points(const std::string& text) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < text.size();) {
    auto byte = static_cast<unsigned char>(text[i]);
    int length = byte < 0x80 ? 1 : byte < 0xE0 ? 2 : byte < 0xF0 ? 3 : 4;
    char32_t cp = length == 1 ? byte : byte & (0x7F >> length);
    for (int k = 1; k < length && i + k < text.size(); ++k) {
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    }
    out.push_back(cp);
    i += length;
  }
  return out;
}

std::string class_char(char32_t c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
    return std::string(1, static_cast<char>(c));
  }
  char buffer[16];
  if (c < 0x80) {
    std::snprintf(buffer, sizeof buffer, "\\x%02X", static_cast<unsigned>(c));
  } else if (c < 0x10000) {
    std::snprintf(buffer, sizeof buffer, "\\u%04X", static_cast<unsigned>(c));
  } else {
    std::snprintf(buffer, sizeof buffer, "\\U%08X", static_cast<unsigned>(c));
  }
  return buffer;
}

std::string literal_of(char32_t c) {
  std::string utf8;
  if (c < 0x80) {
    utf8 += static_cast<char>(c);
  } else if (c < 0x800) {
    utf8 += static_cast<char>(0xC0 | (c >> 6));
    utf8 += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    utf8 += static_cast<char>(0xE0 | (c >> 12));
    utf8 += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    utf8 += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    utf8 += static_cast<char>(0xF0 | (c >> 18));
    utf8 += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    utf8 += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    utf8 += static_cast<char>(0x80 | (c & 0x3F));
  }
  return gbnf_literal(utf8);
}

// A trie of the declared names as JSON text (between the quotes, escapes spelled out), for a
// key rule matching every other key. A name is excluded as written: "\u0061" still spells a
// key "a" that the grammar accepts as additional (models write names plainly).
class KeyExclusion {
 public:
  KeyExclusion(SchemaConverter& converter, const std::string& pointer)
      : converter_(converter), pointer_(pointer), nodes_(1) {}

  void add(const std::string& name) {
    std::string text = Json(name).dump();
    if (text.size() > kMaxExcludedNameBytes) {
      converter_.fail(pointer_, "property name longer than " +
                                    std::to_string(kMaxExcludedNameBytes) +
                                    " bytes beside additional properties (unsupported)");
    }
    size_t node = 0;
    bool in_escape = false;
    for (char32_t c : code_points(text.substr(1, text.size() - 2))) {
      if (in_escape && c == 'u') {
        converter_.fail(pointer_, "property name " + Json(name).dump() +
                                      " with a control character beside additional properties "
                                      "(unsupported)");
      }
      auto [child, added] = nodes_[node].children.try_emplace(c, nodes_.size());
      size_t next = child->second;
      if (added) nodes_.push_back(Node{{}, false, !in_escape && c == '\\'});
      node = next;
      in_escape = !in_escape && c == '\\';
    }
    nodes_[node].terminal = true;
  }

  // A JSON string whose text is none of the names.
  std::string key_rule() {
    return "\"\\\"\" ( " + continuations(0) + " )" + (may_end(nodes_[0]) ? "?" : "") + " \"\\\"\"";
  }

 private:
  struct Node {
    std::map<char32_t, size_t> children;
    bool terminal = false;
    bool mid_escape = false;  // reached by the backslash that opens an escape
  };

  static bool may_end(const Node& node) { return !node.terminal && !node.mid_escape; }

  // The non-empty continuations of the text at `index` that spell no name.
  std::string continuations(size_t index) {
    std::vector<std::string> out;
    for (const auto& [c, child] : nodes_[index].children) {
      out.push_back(literal_of(c) + " ( " + continuations(child) + " )" +
                    (may_end(nodes_[child]) ? "?" : ""));
    }
    out.push_back(other(nodes_[index]));
    std::string joined;
    for (size_t i = 0; i < out.size(); ++i) joined += (i ? " | " : "") + out[i];
    return joined;
  }

  // Continuations whose first character leaves the trie at `node`.
  std::string other(const Node& node) {
    std::string any = converter_.add_rule("key-tail", converter_.core("char") + "*");
    if (node.mid_escape) {
      std::string letters;
      for (char32_t c : std::u32string(U"\"\\/bfnrt")) {
        if (!node.children.count(c)) letters += class_char(c);
      }
      std::string out = "\"u\" [0-9a-fA-F]{4} " + any;
      return letters.empty() ? out : "[" + letters + "] " + any + " | " + out;
    }
    std::string excluded = "\"\\\\\\x00-\\x1F";
    for (const auto& [c, child] : node.children) excluded += class_char(c);
    std::string out = "[^" + excluded + "] " + any;
    if (!node.children.count('\\')) {
      out +=
          " | " + converter_.add_rule("key-escape-tail",
                                      "\"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) " + any);
    }
    return out;
  }

  SchemaConverter& converter_;
  std::string pointer_;
  std::vector<Node> nodes_;
};

// The schema's declared properties in order, then names only `required` adds (their values
// follow additionalProperties). `excluded` gets every declared name, false ones included.
std::vector<Property> declared_properties(SchemaConverter& converter, const Json& schema,
                                          const std::string& pointer, const std::string& hint,
                                          const Json& additional,
                                          std::vector<std::string>& excluded) {
  Json required = schema.value("required", Json::array());
  if (!required.is_array() ||
      !std::all_of(required.begin(), required.end(), [](const Json& n) { return n.is_string(); })) {
    converter.fail(pointer_append(pointer, "required"), "required must be an array of strings");
  }
  auto is_required = [&](const std::string& name) {
    return std::find(required.begin(), required.end(), Json(name)) != required.end();
  };
  Json properties = schema.value("properties", Json::object());
  if (!properties.is_object()) {
    converter.fail(pointer_append(pointer, "properties"), "properties must be an object");
  }
  std::vector<Property> out;
  std::string at = pointer_append(pointer, "properties");
  for (const auto& [name, sub] : properties.items()) {
    excluded.push_back(name);
    if (sub == Json(false)) {
      if (is_required(name)) converter.fail(pointer_append(at, name), "required property is false");
      continue;
    }
    out.push_back({name, is_required(name),
                   converter.visit(sub, pointer_append(at, name), hint + "-" + name)});
  }
  for (const auto& name_json : required) {
    std::string name = name_json.get<std::string>();
    if (properties.contains(name) ||
        std::find(excluded.begin(), excluded.end(), name) != excluded.end()) {
      continue;
    }
    if (additional == Json(false)) {
      converter.fail(pointer_append(pointer, "required"), "required property '" + name +
                                                              "' is not in properties and "
                                                              "additionalProperties is false");
    }
    excluded.push_back(name);
    out.push_back({name, true,
                   converter.visit(additional, pointer_append(pointer, "additionalProperties"),
                                   hint + "-" + name)});
  }
  return out;
}

}  // namespace

std::string SchemaConverter::visit_object(const Json& schema, const std::string& pointer,
                                          const std::string& hint) {
  struct DepthGuard {
    int& depth;
    ~DepthGuard() { --depth; }
  } guard{++container_depth};
  Json additional = schema.contains("additionalProperties")
                        ? schema["additionalProperties"]
                        : Json(options_.default_additional_properties);
  std::vector<std::string> excluded;
  std::vector<Property> properties =
      declared_properties(*this, schema, pointer, hint, additional, excluded);
  std::string comma = "\",\" " + ws();
  std::string extra;  // one additional member, or "" when none is allowed
  if (additional != Json(false)) {
    std::string key = core("string");
    if (!excluded.empty()) {
      KeyExclusion exclusion(*this, pointer_append(pointer, "additionalProperties"));
      for (const auto& name : excluded) exclusion.add(name);
      key = add_rule(hint + "-additional-key", exclusion.key_rule());
    }
    std::string value =
        visit(additional, pointer_append(pointer, "additionalProperties"), hint + "-additional");
    extra = add_rule(hint + "-additional-kv", key + " \":\" " + ws() + value);
  }
  // rest[i]: what follows once something was written, from property i on (each after a comma).
  size_t n = properties.size();
  std::vector<std::string> members(n), rest(n + 1);
  rest[n] = extra.empty() ? "" : "( " + comma + extra + " )*";
  for (size_t i = n; i-- > 0;) {
    const Property& p = properties[i];
    members[i] = gbnf_literal(Json(p.name).dump()) + " \":\" " + ws() + p.value;
    std::string item = p.required ? comma + members[i] : "( " + comma + members[i] + " )?";
    rest[i] = rest[i + 1].empty() ? item : item + " " + add_rule(hint + "-rest", rest[i + 1]);
  }
  // first: the non-empty member lists starting at property i (nothing written before), built
  // from the first required property (or the end) back to the start.
  size_t required_at = 0;
  while (required_at < n && !properties[required_at].required) ++required_at;
  bool any_required = required_at < n;
  std::string first = extra.empty() ? "" : extra + (rest[n].empty() ? "" : " " + rest[n]);
  for (size_t i = std::min(required_at + 1, n); i-- > 0;) {
    std::string tail = rest[i + 1].empty() ? "" : " " + add_rule(hint + "-rest", rest[i + 1]);
    std::string here = members[i] + tail;
    first =
        i == required_at || first.empty() ? here : here + " | " + add_rule(hint + "-from", first);
  }
  std::string body = "\"{\" " + ws();
  if (!first.empty()) body += "( " + first + " )" + (any_required ? " " : "? ");
  return add_rule(hint + "-object", body + "\"}\"");
}

namespace {

// `item` repeated between `low` and `high` (unbounded when empty) times.
std::string repeat(const std::string& item, int64_t low, std::optional<int64_t> high) {
  if (high && *high == 0) return "";
  std::string group = "( " + item + " )";
  if (!high) return group + (low == 0 ? "*" : low == 1 ? "+" : "{" + std::to_string(low) + ",}");
  if (low == 0 && *high == 1) return group + "?";
  if (low == *high) return group + "{" + std::to_string(low) + "}";
  return group + "{" + std::to_string(low) + "," + std::to_string(*high) + "}";
}

}  // namespace

std::string SchemaConverter::visit_array(const Json& schema, const std::string& pointer,
                                         const std::string& hint) {
  struct DepthGuard {
    int& depth;
    ~DepthGuard() { --depth; }
  } guard{++container_depth};
  // 2020-12: prefixItems + items (the rest); draft 7: items as a list + additionalItems.
  const bool tuple_items = schema.contains("items") && schema["items"].is_array();
  if (tuple_items && schema.contains("prefixItems")) {
    fail(pointer_append(pointer, "items"), "items must be a schema beside prefixItems");
  }
  std::string prefix_key = tuple_items ? "items" : "prefixItems";
  std::string rest_key = tuple_items ? "additionalItems" : "items";
  Json prefix = schema.value(prefix_key, Json::array());
  if (!prefix.is_array()) fail(pointer_append(pointer, prefix_key), prefix_key + " must be a list");
  Json rest = schema.value(rest_key, Json(true));
  int64_t low = count_keyword(*this, schema, pointer, "minItems").value_or(0);
  std::optional<int64_t> high = count_keyword(*this, schema, pointer, "maxItems");
  if (high && low > *high) {
    fail(pointer, "minItems " + std::to_string(low) + " > maxItems " + std::to_string(*high));
  }
  std::vector<std::string> items;
  for (size_t i = 0; i < prefix.size() && prefix[i] != Json(false); ++i) {
    items.push_back(visit(prefix[i],
                          pointer_append(pointer_append(pointer, prefix_key), std::to_string(i)),
                          hint + "-item"));
  }
  // Items past the prefix: none when a prefix item is false or the rest schema is false.
  auto k = static_cast<int64_t>(items.size());
  if (k < static_cast<int64_t>(prefix.size()) || rest == Json(false)) {
    high = high ? std::min(*high, k) : k;
    if (low > *high) {
      fail(pointer, "minItems " + std::to_string(low) + " > the " + std::to_string(*high) +
                        " items allowed");
    }
  }
  std::string comma = "\",\" " + ws();
  std::string body;
  int open = 0;
  for (int64_t i = 0; i < k && (!high || i < *high); ++i) {
    std::string item = (i ? comma : "") + items[i] + " ";
    body += i < low ? item : "( " + item, open += i < low ? 0 : 1;
  }
  if (!high || *high > k) {
    std::string tail = visit(rest, pointer_append(pointer, rest_key), hint + "-item");
    int64_t tail_low = std::max<int64_t>(0, low - k);
    std::optional<int64_t> tail_high;
    if (high) tail_high = *high - k;
    if (k > 0) {
      body += repeat(comma + tail, tail_low, tail_high) + " ";
    } else {
      std::optional<int64_t> more_high;
      if (tail_high) more_high = *tail_high - 1;
      std::string list =
          tail + " " + repeat(comma + tail, std::max<int64_t>(0, tail_low - 1), more_high);
      body += tail_low > 0 ? list + " " : "( " + list + " )? ";
    }
  }
  for (; open > 0; --open) body += ")? ";
  return add_rule(hint + "-array", "\"[\" " + ws() + body + "\"]\"");
}

}  // namespace pagedserve::model::grammar::json_schema_detail
