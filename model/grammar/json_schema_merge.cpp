// allOf, and the keywords beside anyOf/oneOf, as one merged schema: the converter handles
// a conjunction only where merging is exact (disjoint keywords, properties merged by name,
// required united, types intersected, bounds tightened); anything else is refused.
#include <algorithm>

#include "model/grammar/json_schema_converter.h"

namespace pagedserve::model::grammar::json_schema_detail {
namespace {

constexpr int kMaxRefChain = 16;

Json type_list(const Json& schema) {
  if (!schema.contains("type")) return Json::array();
  return schema["type"].is_array() ? schema["type"] : Json::array({schema["type"]});
}

bool contains(const Json& list, const Json& value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

// Types allowed by both lists ("integer" and "number" meet at "integer").
Json intersect_types(const Json& a, const Json& b) {
  Json out = Json::array();
  for (const auto& t : a) {
    if (contains(b, t) || (t == "integer" && contains(b, "number"))) {
      out.push_back(t);
    } else if (t == "number" && contains(b, "integer")) {
      out.push_back("integer");
    }
  }
  return out;
}

bool is_lower_bound(const std::string& key) {
  return key == "minimum" || key == "exclusiveMinimum" || key == "minLength" || key == "minItems";
}

bool is_upper_bound(const std::string& key) {
  return key == "maximum" || key == "exclusiveMaximum" || key == "maxLength" || key == "maxItems";
}

}  // namespace

Json SchemaConverter::resolve_member(const Json& member, const std::string& pointer,
                                     int ref_depth) const {
  if (member.is_boolean()) {
    if (member.get<bool>()) return Json::object();
    fail(pointer, "schema false matches nothing");
  }
  if (!member.is_object()) fail(pointer, "a schema must be an object or a boolean");
  check_keywords(member, pointer);
  if (!member.contains("$ref")) return member;
  for (const auto& [key, value] : member.items()) {
    if (key != "$ref" && !is_annotation(key)) {
      fail(pointer, "unsupported keyword '" + key + "' beside $ref");
    }
  }
  if (!member["$ref"].is_string()) fail(pointer_append(pointer, "$ref"), "$ref must be a string");
  if (ref_depth >= kMaxRefChain) {
    fail(pointer_append(pointer, "$ref"), "$ref chain in allOf/anyOf too long or recursive");
  }
  return resolve_member(resolve(member["$ref"].get<std::string>(), pointer), pointer,
                        ref_depth + 1);
}

namespace {

// `x`'s additionalProperties would constrain a property that only `y` declares: the merged
// schema could not say that, so refuse.
void check_additional(const Json& x, const Json& y, const std::string& pointer,
                      const SchemaConverter& converter) {
  if (!x.contains("additionalProperties") || x["additionalProperties"] == Json(true)) return;
  Json names = Json::array();
  if (y.contains("properties") && y["properties"].is_object()) {
    for (const auto& [name, sub] : y["properties"].items()) names.push_back(name);
  }
  if (y.contains("required") && y["required"].is_array()) {
    for (const auto& name : y["required"]) names.push_back(name);
  }
  for (const auto& name : names) {
    bool declared = x.contains("properties") && x["properties"].is_object() && name.is_string() &&
                    x["properties"].contains(name.get<std::string>());
    if (!declared) {
      converter.fail(pointer, "additionalProperties of one member would constrain property " +
                                  name.dump() + " of another (unsupported)");
    }
  }
}

void merge_properties(Json& mine, const Json& theirs, const std::string& pointer,
                      const SchemaConverter& converter) {
  if (!mine.is_object() || !theirs.is_object()) {
    converter.fail(pointer, "properties must be an object");
  }
  for (const auto& [name, sub] : theirs.items()) {
    if (!mine.contains(name)) {
      mine[name] = sub;
    } else if (mine[name] != sub) {
      mine[name] = Json{{"allOf", Json::array({mine[name], sub})}};
    }
  }
}

}  // namespace

Json SchemaConverter::merge(const Json& a, const Json& b, const std::string& pointer) const {
  check_additional(a, b, pointer, *this);
  check_additional(b, a, pointer, *this);
  Json out = a;
  for (const auto& [key, value] : b.items()) {
    if (is_annotation(key)) continue;
    if (!out.contains(key)) {
      out[key] = value;
      continue;
    }
    Json& mine = out[key];
    if (mine == value) continue;
    if (key == "properties") {
      merge_properties(mine, value, pointer, *this);
    } else if (key == "required" && mine.is_array() && value.is_array()) {
      for (const auto& name : value) {
        if (!contains(mine, name)) mine.push_back(name);
      }
    } else if (key == "type") {
      mine = intersect_types(type_list(a), type_list(b));
      if (mine.empty()) fail(pointer, "the types of allOf members do not intersect");
    } else if (key == "allOf" && mine.is_array() && value.is_array()) {
      for (const auto& member : value) mine.push_back(member);
    } else if (is_lower_bound(key) && mine.is_number() && value.is_number()) {
      if (value.get<double>() > mine.get<double>()) mine = value;
    } else if (is_upper_bound(key) && mine.is_number() && value.is_number()) {
      if (value.get<double>() < mine.get<double>()) mine = value;
    } else {
      fail(pointer, "members disagree on '" + key + "' (unsupported)");
    }
  }
  return out;
}

}  // namespace pagedserve::model::grammar::json_schema_detail
