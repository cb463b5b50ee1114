// Parses and validates a Hugging Face config.json; see model_config.h. The family-independent
// fields are read here; what each architecture adds (biases, norms, RoPE scaling, sliding
// windows) is read by model/loader/family_config.cpp. Anything this engine cannot run
// faithfully is rejected before any weight is read, so a user learns at load time rather than
// from wrong text.
#include "model/loader/model_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "model/loader/config_reader.h"
#include "model/loader/json_file.h"
#include "model/loader/model_error.h"

namespace pagedserve::model {

namespace {

using nlohmann::json;

using detail::ConfigReader;

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
  const detail::FamilyReader& family = detail::find_family(reader, config);

  config.hidden_size = reader.required_positive_int("hidden_size");
  config.intermediate_size = reader.required_positive_int("intermediate_size");
  config.num_hidden_layers = reader.required_positive_int("num_hidden_layers");
  if (config.num_hidden_layers > kMaxLayers) {
    reader.fail("field num_hidden_layers " + std::to_string(config.num_hidden_layers) +
                " is more than " + std::to_string(kMaxLayers));
  }
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
  family.read(reader, config);
  validate_model_config(config, config_json.string());
  return config;
}

}  // namespace pagedserve::model

namespace pagedserve::model {

float ModelConfig::softmax_scale() const {
  return attention_scale > 0.0f ? attention_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

int ModelConfig::max_window_of_all_layers() const {
  int widest = 0;
  for (const LayerConfig& layer : layers) {
    if (layer.sliding_window <= 0) return 0;
    widest = std::max(widest, layer.sliding_window);
  }
  return widest;
}

void validate_model_config(const ModelConfig& c, const std::string& source) {
  const auto fail = [&](const std::string& problem) { throw ModelError(source + ": " + problem); };
  const auto positive = [&](const char* name, int value) {
    if (value <= 0) fail(std::string(name) + " must be positive, got " + std::to_string(value));
  };
  positive("hidden_size", c.hidden_size);
  positive("intermediate_size", c.intermediate_size);
  positive("num_hidden_layers", c.num_hidden_layers);
  positive("num_attention_heads", c.num_attention_heads);
  positive("num_key_value_heads", c.num_key_value_heads);
  positive("head_dim", c.head_dim);
  positive("vocab_size", c.vocab_size);
  positive("max_position_embeddings", c.max_position_embeddings);
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    fail("num_attention_heads " + std::to_string(c.num_attention_heads) +
         " is not a multiple of num_key_value_heads " + std::to_string(c.num_key_value_heads));
  }
  const int rotary = c.rope_dims();
  if (rotary % 2 != 0 || rotary > c.head_dim) {
    fail("the rotary dimension " + std::to_string(rotary) + " must be even and at most head_dim " +
         std::to_string(c.head_dim));
  }
  if (!(c.rms_norm_eps > 0.0f)) fail("rms_norm_eps must be positive");
  if (!(c.rope_theta > 0.0f) || !(c.rope_local_theta > 0.0f)) fail("rope_theta must be positive");
  if (static_cast<int>(c.layers.size()) != c.num_hidden_layers) {
    fail("per-layer settings for " + std::to_string(c.layers.size()) + " layers, expected " +
         std::to_string(c.num_hidden_layers));
  }
  for (const LayerConfig& layer : c.layers) {
    if (layer.sliding_window < 0) fail("a sliding window must not be negative");
  }
  const RopeScaling& r = c.rope_scaling;
  if (!(r.factor > 0.0)) fail("the RoPE scaling factor must be positive");
  if (r.type == RopeScaling::Type::kLongRope) {
    const size_t half = static_cast<size_t>(rotary / 2);
    if (r.short_factor.size() != half || r.long_factor.size() != half) {
      fail("longrope short_factor and long_factor must each have rotary_dim / 2 = " +
           std::to_string(half) + " entries, got " + std::to_string(r.short_factor.size()) +
           " and " + std::to_string(r.long_factor.size()));
    }
  }
  if (r.type == RopeScaling::Type::kLlama3 && !(r.high_freq_factor > r.low_freq_factor)) {
    fail("llama3 rope scaling needs high_freq_factor > low_freq_factor");
  }
}

}  // namespace pagedserve::model
