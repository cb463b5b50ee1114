// Parses and validates a Hugging Face config.json for the LlamaForCausalLM family; see
// model_config.h. Anything this engine cannot run faithfully (other architectures, RoPE
// scaling, biases, other activations) is rejected here, before any weight is read, so a
// user learns at load time rather than from wrong text.
#include "model/loader/model_config.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "model/loader/json_file.h"
#include "model/loader/model_error.h"

namespace pagedserve::model {

namespace {

using nlohmann::json;

constexpr const char* kLlamaArchitecture = "LlamaForCausalLM";

// Field access that names the file and the field in every error. An explicit null counts as
// absent, because Hugging Face writes `"head_dim": null` and the like for "use the default".
class ConfigReader {
 public:
  ConfigReader(const std::filesystem::path& path, const json& root) : path_(path), root_(root) {}

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
    if (!value.is_number_integer())
      fail(what + " must be an integer, got " + detail::json_kind(value));
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
    return to_int(*value, std::string("field ") + field);
  }

  int required_positive_int(const char* field) const {
    const std::optional<int> value = optional_int(field);
    if (!value) fail(std::string("missing field ") + field);
    return check_positive(field, *value);
  }

  int check_positive(const char* field, int value) const {
    if (value <= 0) {
      fail(std::string("field ") + field + " must be positive, got " + std::to_string(value));
    }
    return value;
  }

  std::optional<double> optional_number(const char* field) const {
    const json* value = find(field);
    if (!value) return std::nullopt;
    if (!value->is_number()) {
      fail(std::string("field ") + field + " must be a number, got " + detail::json_kind(*value));
    }
    return value->get<double>();
  }

  std::optional<bool> optional_bool(const char* field) const {
    const json* value = find(field);
    if (!value) return std::nullopt;
    if (!value->is_boolean()) {
      fail(std::string("field ") + field + " must be a boolean, got " + detail::json_kind(*value));
    }
    return value->get<bool>();
  }

  std::optional<std::string> optional_string(const char* field) const {
    const json* value = find(field);
    if (!value) return std::nullopt;
    if (!value->is_string()) {
      fail(std::string("field ") + field + " must be a string, got " + detail::json_kind(*value));
    }
    return value->get<std::string>();
  }

 private:
  const std::filesystem::path& path_;
  const json& root_;
};

// Fills architecture and model_type, or rejects the model.
void read_architecture(const ConfigReader& reader, ModelConfig& config) {
  config.model_type = reader.optional_string("model_type").value_or("");
  const json* architectures = reader.find("architectures");
  if (!architectures) {
    // Older exports carry only model_type; "llama" means the same causal LM.
    if (config.model_type == "llama") {
      config.architecture = kLlamaArchitecture;
      return;
    }
    const std::string found =
        config.model_type.empty() ? "(no architectures or model_type)" : config.model_type;
    reader.fail("unsupported architecture " + found + " (pagedserve supports LlamaForCausalLM)");
  }
  if (!architectures->is_array()) {
    reader.fail("field architectures must be an array, got " + detail::json_kind(*architectures));
  }
  std::string listed;
  for (const json& entry : *architectures) {
    if (!entry.is_string()) {
      reader.fail("field architectures must hold strings, got " + detail::json_kind(entry));
    }
    const auto& name = entry.get_ref<const std::string&>();
    if (name == kLlamaArchitecture) {
      config.architecture = name;
      return;
    }
    listed += (listed.empty() ? "" : ", ") + name;
  }
  if (listed.empty()) listed = "(empty architectures list)";
  reader.fail("unsupported architecture " + listed + " (pagedserve supports LlamaForCausalLM)");
}

// Features of the Llama family that change the math; we would silently compute the wrong
// model if we ignored them, so each gets its own error.
void reject_unsupported_features(const ConfigReader& reader) {
  if (const json* rope_scaling = reader.find("rope_scaling")) {
    reader.fail("rope_scaling is not supported yet (found " + detail::json_brief(*rope_scaling) +
                "); pagedserve implements plain RoPE only");
  }
  if (reader.optional_bool("attention_bias").value_or(false)) {
    reader.fail(
        "attention_bias=true is not supported (pagedserve's Llama has no attention biases)");
  }
  if (reader.optional_bool("mlp_bias").value_or(false)) {
    reader.fail("mlp_bias=true is not supported (pagedserve's Llama has no MLP biases)");
  }
  if (const auto act = reader.optional_string("hidden_act"); act && *act != "silu") {
    reader.fail("hidden_act " + *act + " is not supported (pagedserve implements silu)");
  }
}

void read_token_ids(const ConfigReader& reader, ModelConfig& config) {
  config.bos_token_id = reader.optional_int("bos_token_id").value_or(-1);
  const json* eos = reader.find("eos_token_id");
  if (!eos) return;
  if (eos->is_array()) {
    for (const json& id : *eos)
      config.eos_token_ids.push_back(reader.to_int(id, "field eos_token_id entry"));
  } else if (eos->is_number_integer()) {
    config.eos_token_ids.push_back(reader.to_int(*eos, "field eos_token_id"));
  } else {
    reader.fail("field eos_token_id must be an integer or a list of integers, got " +
                detail::json_kind(*eos));
  }
}

}  // namespace

ModelConfig load_model_config(const std::filesystem::path& config_json) {
  const json root = detail::read_json_file(config_json);
  const ConfigReader reader(config_json, root);
  if (!root.is_object())
    reader.fail("top level must be a JSON object, got " + detail::json_kind(root));

  ModelConfig config;
  read_architecture(reader, config);
  reject_unsupported_features(reader);

  config.hidden_size = reader.required_positive_int("hidden_size");
  config.intermediate_size = reader.required_positive_int("intermediate_size");
  config.num_hidden_layers = reader.required_positive_int("num_hidden_layers");
  config.num_attention_heads = reader.required_positive_int("num_attention_heads");
  config.vocab_size = reader.required_positive_int("vocab_size");
  config.num_key_value_heads = reader.check_positive(
      "num_key_value_heads",
      reader.optional_int("num_key_value_heads").value_or(config.num_attention_heads));
  if (config.num_attention_heads % config.num_key_value_heads != 0) {
    reader.fail("num_attention_heads " + std::to_string(config.num_attention_heads) +
                " is not a multiple of num_key_value_heads " +
                std::to_string(config.num_key_value_heads));
  }
  if (const auto head_dim = reader.optional_int("head_dim")) {
    config.head_dim = reader.check_positive("head_dim", *head_dim);
  } else {
    if (config.hidden_size % config.num_attention_heads != 0) {
      reader.fail("hidden_size " + std::to_string(config.hidden_size) +
                  " is not a multiple of num_attention_heads " +
                  std::to_string(config.num_attention_heads) + " and head_dim is not given");
    }
    config.head_dim = config.hidden_size / config.num_attention_heads;
  }
  config.max_position_embeddings = reader.check_positive(
      "max_position_embeddings",
      reader.optional_int("max_position_embeddings").value_or(config.max_position_embeddings));

  const double eps = reader.optional_number("rms_norm_eps").value_or(config.rms_norm_eps);
  if (!(eps > 0.0)) reader.fail("field rms_norm_eps must be positive, got " + std::to_string(eps));
  config.rms_norm_eps = static_cast<float>(eps);
  const double theta = reader.optional_number("rope_theta").value_or(config.rope_theta);
  if (!(theta > 0.0))
    reader.fail("field rope_theta must be positive, got " + std::to_string(theta));
  config.rope_theta = static_cast<float>(theta);

  config.tie_word_embeddings = reader.optional_bool("tie_word_embeddings").value_or(false);
  read_token_ids(reader, config);
  // transformers >= 4.56 writes "dtype"; older exports write "torch_dtype".
  if (auto dtype = reader.optional_string("torch_dtype")) {
    config.torch_dtype = std::move(*dtype);
  } else {
    config.torch_dtype = reader.optional_string("dtype").value_or("");
  }
  return config;
}

}  // namespace pagedserve::model
