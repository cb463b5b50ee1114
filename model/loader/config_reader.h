// ConfigReader: typed access to the fields of a config.json that names the file and the field
// in every error. Private to model/loader.
#pragma once

#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/loader/json_file.h"
#include "model/loader/model_config.h"
#include "model/loader/model_error.h"

namespace pagedserve::model::detail {

using nlohmann::json;

// Field access that names the file and the field in every error. An explicit null counts as
// absent, because Hugging Face writes `"head_dim": null` and the like for "use the default".
class ConfigReader {
 public:
  ConfigReader(const std::filesystem::path& path, const json& root, std::string prefix = "")
      : path_(path), root_(root), prefix_(std::move(prefix)) {}

  // A reader of the object in `field` (e.g. rope_scaling), whose errors say
  // "field rope_scaling.factor ...". nullopt when the field is absent or null.
  std::optional<ConfigReader> child(const char* field) const {
    const json* value = find(field);
    if (!value) return std::nullopt;
    if (!value->is_object()) {
      fail("field " + prefix_ + field + " must be an object, got " + json_kind(*value));
    }
    return ConfigReader(path_, *value, prefix_ + field + ".");
  }
  const json& root() const { return root_; }
  const std::filesystem::path& path() const { return path_; }
  std::string name(const char* field) const { return prefix_ + field; }

  [[noreturn]] void fail(const std::string& problem) const {
    throw ModelError(path_.string() + ": " + problem);
  }

  const json* find(const char* field) const {
    auto it = root_.find(field);
    if (it == root_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  int to_int(const json& value, const std::string& what) const {
    // Integral floats (64.0) are rejected too: a size written as a float is a broken export.
    if (!value.is_number_integer()) fail(what + " must be an integer, got " + json_kind(value));
    if (value.is_number_unsigned()) {
      const auto v = value.get<uint64_t>();
      if (v > static_cast<uint64_t>(std::numeric_limits<int>::max()))
        fail(what + " is out of range");
      return static_cast<int>(v);
    }
    const auto v = value.get<int64_t>();
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
      fail(what + " is out of range");
    }
    return static_cast<int>(v);
  }

  std::optional<int> optional_int(const char* field) const {
    const json* value = find(field);
    if (!value) return std::nullopt;
    return to_int(*value, "field " + name(field));
  }

  int required_positive_int(const char* field) const {
    const std::optional<int> value = optional_int(field);
    if (!value) fail("missing field " + name(field));
    return check_positive(field, *value);
  }

  int check_positive(const char* field, int value) const {
    if (value <= 0) {
      fail("field " + name(field) + " must be positive, got " + std::to_string(value));
    }
    return value;
  }

  std::optional<double> optional_number(const char* field) const {
    const json* value = find(field);
    if (!value) return std::nullopt;
    if (!value->is_number()) {
      fail("field " + name(field) + " must be a number, got " + json_kind(*value));
    }
    return value->get<double>();
  }

  std::optional<bool> optional_bool(const char* field) const {
    const json* value = find(field);
    if (!value) return std::nullopt;
    if (!value->is_boolean()) {
      fail("field " + name(field) + " must be a boolean, got " + json_kind(*value));
    }
    return value->get<bool>();
  }

  std::optional<std::vector<double>> optional_number_array(const char* field) const {
    const json* value = find(field);
    if (!value) return std::nullopt;
    if (!value->is_array()) {
      fail("field " + name(field) + " must be a list of numbers, got " + json_kind(*value));
    }
    std::vector<double> out;
    for (const json& entry : *value) {
      if (!entry.is_number()) {
        fail("field " + name(field) + " must hold numbers, got " + json_kind(entry));
      }
      out.push_back(entry.get<double>());
    }
    return out;
  }

  std::optional<std::vector<std::string>> optional_string_array(const char* field) const {
    const json* value = find(field);
    if (!value) return std::nullopt;
    if (!value->is_array()) {
      fail("field " + name(field) + " must be a list of strings, got " + json_kind(*value));
    }
    std::vector<std::string> out;
    for (const json& entry : *value) {
      if (!entry.is_string()) {
        fail("field " + name(field) + " must hold strings, got " + json_kind(entry));
      }
      out.push_back(entry.get<std::string>());
    }
    return out;
  }

  std::optional<std::string> optional_string(const char* field) const {
    const json* value = find(field);
    if (!value) return std::nullopt;
    if (!value->is_string()) {
      fail("field " + name(field) + " must be a string, got " + json_kind(*value));
    }
    return value->get<std::string>();
  }

 private:
  const std::filesystem::path& path_;
  const json& root_;
  std::string prefix_;  // "rope_scaling." for a child reader
};

// One supported architecture: its names and what it adds to the Llama skeleton
// (model/loader/family_config.cpp).
struct FamilyReader {
  const char* architecture;  // "Qwen3ForCausalLM"
  const char* model_type;    // "qwen3"
  void (*read)(const ConfigReader& reader, ModelConfig& config);
};

// The family config.json's architectures (or, without them, its model_type) names; sets
// config.architecture and config.model_type. Throws ModelError naming the architecture and
// listing the supported ones.
const FamilyReader& find_family(const ConfigReader& reader, ModelConfig& config);

}  // namespace pagedserve::model::detail
