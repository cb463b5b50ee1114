// UTF-8 validation, JSON body parsing and FieldReader (see json_fields.h).
#include "net/protocol/json_fields.h"

#include <climits>
#include <cmath>

#include "model/tokenizer/unicode_tables.h"

namespace pagedserve::net {

bool is_valid_utf8(std::string_view text) {
  // One validator for the project: the tokenizer's (overlongs, surrogates and values past
  // U+10FFFF are rejected there too).
  return model::tokenizer::unicode::is_valid_utf8(text);
}

Result<nlohmann::json> parse_json_object(std::string_view body) {
  if (!is_valid_utf8(body)) return invalid_request("the request body is not valid UTF-8");
  nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return invalid_request("the request body is not valid JSON");
  if (!parsed.is_object()) return invalid_request("the request body must be a JSON object");
  return parsed;
}

std::optional<int64_t> json_to_integer(const nlohmann::json& value, int64_t min, int64_t max) {
  int64_t result = 0;
  if (value.is_number_integer() && !value.is_number_unsigned()) {
    result = value.get<int64_t>();
  } else if (value.is_number_unsigned()) {
    const auto u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    result = static_cast<int64_t>(u);
  } else if (value.is_number_float()) {
    const double d = value.get<double>();
    // 2^63 is the first double past INT64_MAX.
    if (!std::isfinite(d) || d != std::floor(d) || d < -9.2233720368547758e18 ||
        d >= 9.2233720368547758e18) {
      return std::nullopt;
    }
    result = static_cast<int64_t>(d);
  } else {
    return std::nullopt;
  }
  if (result < min || result > max) return std::nullopt;
  return result;
}

const nlohmann::json* FieldReader::find(std::string_view key) const {
  auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

void FieldReader::fail(ApiError error) {
  if (!error_) error_ = std::move(error);
}

void FieldReader::require(bool condition, std::string message, std::string param) {
  if (!condition) fail(invalid_request(std::move(message), std::move(param)));
}

void FieldReader::wrong_type(std::string_view key, std::string_view expected) {
  fail(invalid_request(std::string(key) + " must be " + std::string(expected), std::string(key)));
}

std::optional<bool> FieldReader::boolean(std::string_view key) {
  const nlohmann::json* value = find(key);
  if (!value) return std::nullopt;
  if (!value->is_boolean()) {
    wrong_type(key, "a boolean");
    return std::nullopt;
  }
  return value->get<bool>();
}

namespace {

// " >= 1", " in [0, 20]" or "" (any integer). Bounds at the int32 limits or beyond only say
// "fits the type", so the message leaves them out.
std::string range_text(int64_t min, int64_t max) {
  const bool no_min = min <= INT32_MIN;
  const bool no_max = max >= INT32_MAX;
  if (no_min && no_max) return "";
  if (no_max) return " >= " + std::to_string(min);
  if (no_min) return " <= " + std::to_string(max);
  return " in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

}  // namespace

std::optional<int64_t> FieldReader::integer(std::string_view key, int64_t min, int64_t max) {
  const nlohmann::json* value = find(key);
  if (!value) return std::nullopt;
  std::optional<int64_t> result = json_to_integer(*value, INT64_MIN, INT64_MAX);
  if (!result || *result < min || *result > max) {
    std::string message = std::string(key) + " must be an integer" + range_text(min, max);
    if (value->is_number()) message += ", got " + value->dump();
    fail(invalid_request(std::move(message), std::string(key)));
    return std::nullopt;
  }
  return result;
}

std::optional<double> FieldReader::number(std::string_view key) {
  const nlohmann::json* value = find(key);
  if (!value) return std::nullopt;
  if (!value->is_number()) {
    wrong_type(key, "a number");
    return std::nullopt;
  }
  return value->get<double>();
}

std::optional<std::string> FieldReader::string(std::string_view key) {
  const nlohmann::json* value = find(key);
  if (!value) return std::nullopt;
  if (!value->is_string()) {
    wrong_type(key, "a string");
    return std::nullopt;
  }
  return value->get<std::string>();
}

std::optional<std::vector<std::string>> FieldReader::string_or_list(std::string_view key) {
  const nlohmann::json* value = find(key);
  if (!value) return std::nullopt;
  if (value->is_string()) return std::vector<std::string>{value->get<std::string>()};
  std::vector<std::string> out;
  if (value->is_array()) {
    for (const nlohmann::json& item : *value) {
      if (!item.is_string()) break;
      out.push_back(item.get<std::string>());
    }
    if (out.size() == value->size()) return out;
  }
  wrong_type(key, "a string or a list of strings");
  return std::nullopt;
}

std::optional<std::vector<int64_t>> FieldReader::integer_list(std::string_view key, int64_t min,
                                                              int64_t max) {
  const nlohmann::json* value = find(key);
  if (!value) return std::nullopt;
  if (!value->is_array()) {
    wrong_type(key, "a list of integers");
    return std::nullopt;
  }
  std::vector<int64_t> out;
  out.reserve(value->size());
  for (const nlohmann::json& item : *value) {
    std::optional<int64_t> id = json_to_integer(item, min, max);
    if (!id) {
      std::string message = std::string(key) + " must be a list of integers" + range_text(min, max);
      if (item.is_number()) message += ", got " + item.dump();
      fail(invalid_request(std::move(message), std::string(key)));
      return std::nullopt;
    }
    out.push_back(*id);
  }
  return out;
}

const nlohmann::json* FieldReader::object(std::string_view key) {
  const nlohmann::json* value = find(key);
  if (!value) return nullptr;
  if (!value->is_object()) {
    wrong_type(key, "an object");
    return nullptr;
  }
  return value;
}

nlohmann::ordered_json ordered_field(const FieldReader& fields,
                                     const nlohmann::ordered_json* ordered, std::string_view key) {
  const nlohmann::json* value = fields.find(key);
  if (value == nullptr) return {};
  if (ordered != nullptr) {
    if (auto it = ordered->find(key); it != ordered->end()) return *it;
  }
  return nlohmann::ordered_json::parse(value->dump());
}

}  // namespace pagedserve::net
