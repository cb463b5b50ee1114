// GGUF metadata access: gguf_type_name, GgufFile::find and the typed getters (see gguf.h).
// Values were validated when the file was parsed; the getters only check that a key holds the
// kind of value the caller asks for and say which key and which types when it does not.
#include <limits>
#include <string>

#include "model/loader/gguf.h"
#include "model/loader/model_error.h"

namespace pagedserve::model {

const char* gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
      return "uint8";
    case GgufType::kInt8:
      return "int8";
    case GgufType::kUint16:
      return "uint16";
    case GgufType::kInt16:
      return "int16";
    case GgufType::kUint32:
      return "uint32";
    case GgufType::kInt32:
      return "int32";
    case GgufType::kFloat32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "uint64";
    case GgufType::kInt64:
      return "int64";
    case GgufType::kFloat64:
      return "float64";
  }
  return "unknown";
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& problem) {
  throw ModelError(path.string() + ": " + problem);
}

bool is_integer_type(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

bool is_float_type(GgufType type) {
  return type == GgufType::kFloat32 || type == GgufType::kFloat64;
}

// "uint32", or "array of string" for arrays: what error messages call a value's type.
std::string value_type_string(const GgufValue& value) {
  if (value.type != GgufType::kArray) return gguf_type_name(value.type);
  return std::string("array of ") + gguf_type_name(value.element_type);
}

// A metadata value as an int64, or nullopt when it is not an integer (or a uint64 too large).
std::optional<int64_t> as_int64(const GgufValue& value) {
  if (!is_integer_type(value.type)) return std::nullopt;
  if (const auto* u = std::get_if<uint64_t>(&value.value)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  return std::get<int64_t>(value.value);
}

std::optional<double> as_double(const GgufValue& value) {
  if (is_float_type(value.type)) return std::get<double>(value.value);
  if (!is_integer_type(value.type)) return std::nullopt;
  if (const auto* u = std::get_if<uint64_t>(&value.value)) return static_cast<double>(*u);
  return static_cast<double>(std::get<int64_t>(value.value));
}

[[noreturn]] void wrong_type(const std::filesystem::path& path, std::string_view key,
                             const GgufValue& value, const char* expected) {
  fail(path, "metadata key " + std::string(key) + " has type " + value_type_string(value) +
                 ", expected " + expected);
}

// The elements of `value` when it is an array whose element type passes `accepts`.
template <typename Accepts>
const std::vector<GgufValue>* array_of(const GgufValue& value, Accepts accepts) {
  if (value.type != GgufType::kArray || !accepts(value.element_type)) return nullptr;
  return &std::get<std::vector<GgufValue>>(value.value);
}

}  // namespace

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (value->type != GgufType::kString) wrong_type(path_, key, *value, "string");
  return std::get<std::string>(value->value);
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!is_integer_type(value->type)) wrong_type(path_, key, *value, "an integer");
  const std::optional<int64_t> result = as_int64(*value);
  if (!result) {
    fail(path_, "metadata key " + std::string(key) + " has value " +
                    std::to_string(std::get<uint64_t>(value->value)) + ", above INT64_MAX");
  }
  return result;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  const std::optional<double> result = as_double(*value);
  if (!result) wrong_type(path_, key, *value, "a number");
  return result;
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (value->type != GgufType::kBool) wrong_type(path_, key, *value, "bool");
  return std::get<bool>(value->value);
}

std::optional<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  const auto* elements = array_of(*value, [](GgufType t) { return t == GgufType::kString; });
  if (elements == nullptr) wrong_type(path_, key, *value, "array of string");
  std::vector<std::string> result;
  result.reserve(elements->size());
  for (const GgufValue& element : *elements) result.push_back(std::get<std::string>(element.value));
  return result;
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  const auto* elements = array_of(*value, is_integer_type);
  if (elements == nullptr) wrong_type(path_, key, *value, "array of integers");
  std::vector<int64_t> result;
  result.reserve(elements->size());
  for (size_t i = 0; i < elements->size(); ++i) {
    const std::optional<int64_t> element = as_int64((*elements)[i]);
    if (!element) {
      fail(path_, "metadata key " + std::string(key) + " element " + std::to_string(i) +
                      " is above INT64_MAX");
    }
    result.push_back(*element);
  }
  return result;
}

std::optional<std::vector<float>> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  const auto* elements = array_of(*value, is_float_type);
  if (elements == nullptr) wrong_type(path_, key, *value, "array of float32 or float64");
  std::vector<float> result;
  result.reserve(elements->size());
  for (const GgufValue& element : *elements) {
    result.push_back(static_cast<float>(std::get<double>(element.value)));
  }
  return result;
}
}  // namespace pagedserve::model
