// Reading a request's JSON: UTF-8 validation, parsing a body into an object, and FieldReader,
// which reads typed, optional fields and keeps the first error as a 400 naming the field.
// Shared by the completions, chat, tokenize and WebSocket parsers.
//
// Conventions (OpenAI-style): a field that is absent or null means "not given"; a field of the
// wrong type is a 400 naming it; unknown fields are ignored. Integers may be written as
// integral floats (16.0), as Python/pydantic accept them; booleans are never numbers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "net/protocol/api_error.h"

namespace pagedserve::net {

bool is_valid_utf8(std::string_view text);

// Parses a request body that must be a JSON object (400 for invalid UTF-8, invalid JSON or
// another JSON type).
Result<nlohmann::json> parse_json_object(std::string_view body);

// Reads optional fields of one JSON object. Each getter returns nullopt when the field is
// absent or null, and also when it is invalid, in which case failed() turns true and error()
// names the field (only the first error is kept; later getters still run but change nothing).
class FieldReader {
 public:
  explicit FieldReader(const nlohmann::json& object) : object_(object) {}

  // The raw field, or nullptr when absent or null.
  const nlohmann::json* find(std::string_view key) const;

  std::optional<bool> boolean(std::string_view key);
  // An integer in [min, max] (the error says which range).
  std::optional<int64_t> integer(std::string_view key, int64_t min = INT64_MIN,
                                 int64_t max = INT64_MAX);
  std::optional<double> number(std::string_view key);
  std::optional<std::string> string(std::string_view key);
  // A string or a list of strings (OpenAI's `stop`).
  std::optional<std::vector<std::string>> string_or_list(std::string_view key);
  // A list of integers in [min, max].
  std::optional<std::vector<int64_t>> integer_list(std::string_view key, int64_t min, int64_t max);
  const nlohmann::json* object(std::string_view key);  // nullptr when absent, null or invalid

  // Records `error` unless one was recorded already.
  void fail(ApiError error);
  // fail(invalid_request(message, param)) when `condition` is false.
  void require(bool condition, std::string message, std::string param);

  bool failed() const { return error_.has_value(); }
  const ApiError& error() const { return *error_; }

 private:
  void wrong_type(std::string_view key, std::string_view expected);

  const nlohmann::json& object_;
  std::optional<ApiError> error_;
};

// Field `key` of the object `fields` reads, taken from `ordered` (the same body parsed with its
// key order kept; may be null) when it is there: schemas and tools keep their order. Null when
// the field is absent or null.
nlohmann::ordered_json ordered_field(const FieldReader& fields,
                                     const nlohmann::ordered_json* ordered, std::string_view key);

// Reads `value` as an integer in [min, max] (integral floats accepted); nullopt otherwise.
std::optional<int64_t> json_to_integer(const nlohmann::json& value, int64_t min, int64_t max);

}  // namespace pagedserve::net
