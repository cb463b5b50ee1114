// What each supported architecture adds to the Llama skeleton, read from its config.json with
// the field names and defaults of its transformers configuration class. A field that would
// change the math in a way the engine does not model is refused by name.
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/cpu/kv_dtype.h"
#include "model/loader/config_reader.h"

namespace pagedserve::model::detail {
namespace {

using Type = RopeScaling::Type;

// Hugging Face multiplies Gemma's embeddings by sqrt(hidden) cast to the model's dtype.
float round_to_dtype(float value, const std::string& torch_dtype) {
  if (torch_dtype == "bfloat16") return kernels::bf16_to_f32(kernels::f32_to_bf16(value));
  if (torch_dtype == "float16") return kernels::f16_to_f32(kernels::f32_to_f16(value));
  return value;
}

void read_rope_scaling(const ConfigReader& reader, ModelConfig& config) {
  const std::optional<ConfigReader> scaling = reader.child("rope_scaling");
  if (!scaling) return;
  std::optional<std::string> type = scaling->optional_string("rope_type");
  if (!type) type = scaling->optional_string("type");
  if (!type) scaling->fail("field rope_scaling has neither rope_type nor type");
  RopeScaling& r = config.rope_scaling;
  r.factor = scaling->optional_number("factor").value_or(1.0);
  r.original_max_position_embeddings =
      scaling->optional_int("original_max_position_embeddings")
          .value_or(reader.optional_int("original_max_position_embeddings").value_or(0));
  r.attention_factor = scaling->optional_number("attention_factor").value_or(0.0);
  if (*type == "default") {
    r.type = Type::kNone;
  } else if (*type == "linear") {
    r.type = Type::kLinear;
  } else if (*type == "dynamic") {
    r.type = Type::kDynamic;
  } else if (*type == "llama3") {
    r.type = Type::kLlama3;
    r.low_freq_factor = scaling->optional_number("low_freq_factor").value_or(1.0);
    r.high_freq_factor = scaling->optional_number("high_freq_factor").value_or(4.0);
    if (r.original_max_position_embeddings <= 0) {
      scaling->fail("llama3 rope_scaling needs original_max_position_embeddings");
    }
  } else if (*type == "yarn") {
    r.type = Type::kYarn;
    r.beta_fast = scaling->optional_number("beta_fast").value_or(32.0);
    r.beta_slow = scaling->optional_number("beta_slow").value_or(1.0);
    r.mscale = scaling->optional_number("mscale").value_or(0.0);
    r.mscale_all_dim = scaling->optional_number("mscale_all_dim").value_or(0.0);
    r.truncate = scaling->optional_bool("truncate").value_or(true);
    if (r.original_max_position_embeddings <= 0) {
      r.original_max_position_embeddings = config.max_position_embeddings;
    }
  } else if (*type == "longrope" || *type == "su") {
    r.type = Type::kLongRope;
    const auto as_floats = [&](const char* field) {
      const auto values = scaling->optional_number_array(field);
      if (!values) scaling->fail("longrope rope_scaling needs " + scaling->name(field));
      return std::vector<float>(values->begin(), values->end());
    };
    r.short_factor = as_floats("short_factor");
    r.long_factor = as_floats("long_factor");
    // Phi-3 keeps the pretrained length at the top level; the factor is the ratio to it.
    if (r.original_max_position_embeddings > 0) {
      r.factor =
          static_cast<double>(config.max_position_embeddings) / r.original_max_position_embeddings;
    } else {
      r.original_max_position_embeddings = config.max_position_embeddings;
    }
  } else {
    scaling->fail("rope_scaling type " + *type +
                  " is not supported (pagedserve implements default, linear, dynamic, llama3, "
                  "yarn and longrope)");
  }
}

void read_partial_rotary(const ConfigReader& reader, ModelConfig& config) {
  const double fraction = reader.optional_number("partial_rotary_factor").value_or(1.0);
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    reader.fail("field partial_rotary_factor must be in (0, 1], got " + std::to_string(fraction));
  }
  config.rotary_dim = static_cast<int>(config.head_dim * fraction);
}

void require_activation(const ConfigReader& reader, ModelConfig& config, const char* field,
                        const char* fallback) {
  const std::string act = reader.optional_string(field).value_or(fallback);
  if (act == "silu" || act == "swish") {
    config.activation = Activation::kSilu;
  } else if (act == "gelu_pytorch_tanh" || act == "gelu_tanh" || act == "gelu_new" ||
             (act == "gelu" && config.model_type.starts_with("gemma"))) {
    // Gemma's code uses the tanh approximation whatever "gelu" it is given.
    config.activation = Activation::kGeluTanh;
  } else {
    reader.fail("field " + reader.name(field) + " " + act +
                " is not supported (pagedserve implements silu and gelu_pytorch_tanh)");
  }
}

// Every layer the same: the whole context, or one window.
void uniform_layers(ModelConfig& config, int sliding_window) {
  config.layers.assign(static_cast<size_t>(config.num_hidden_layers), LayerConfig{});
  for (LayerConfig& layer : config.layers) layer.sliding_window = sliding_window;
}

// transformers >= 4.53 lists each layer's kind; it wins over the older per-family rules.
bool read_layer_types(const ConfigReader& reader, ModelConfig& config, int sliding_window) {
  const auto types = reader.optional_string_array("layer_types");
  if (!types) return false;
  if (static_cast<int>(types->size()) != config.num_hidden_layers) {
    reader.fail("field layer_types has " + std::to_string(types->size()) + " entries for " +
                std::to_string(config.num_hidden_layers) + " layers");
  }
  uniform_layers(config, 0);
  for (size_t i = 0; i < types->size(); ++i) {
    const std::string& type = (*types)[i];
    if (type == "sliding_attention") {
      if (sliding_window <= 0) reader.fail("layer_types has sliding layers but no sliding_window");
      config.layers[i].sliding_window = sliding_window;
    } else if (type != "full_attention") {
      reader.fail("layer type " + type +
                  " is not supported (pagedserve implements full_attention and "
                  "sliding_attention)");
    }
  }
  return true;
}

int optional_window(const ConfigReader& reader) {
  const std::optional<int> window = reader.optional_int("sliding_window");
  if (window && *window < 0) reader.fail("field sliding_window must not be negative");
  return window.value_or(0);
}

void read_llama(const ConfigReader& reader, ModelConfig& config) {
  require_activation(reader, config, "hidden_act", "silu");
  read_rope_scaling(reader, config);
  read_partial_rotary(reader, config);
  const bool attention_bias = reader.optional_bool("attention_bias").value_or(false);
  config.qkv_bias = config.o_bias = attention_bias;
  config.mlp_bias = reader.optional_bool("mlp_bias").value_or(false);
  if (!read_layer_types(reader, config, 0)) uniform_layers(config, 0);
}

void read_mistral(const ConfigReader& reader, ModelConfig& config) {
  require_activation(reader, config, "hidden_act", "silu");
  read_rope_scaling(reader, config);
  const int window = optional_window(reader);
  if (!read_layer_types(reader, config, window)) uniform_layers(config, window);
}

// Qwen2/Qwen3/SmolLM3: sliding layers only with use_sliding_window, from max_window_layers on.
void read_qwen_windows(const ConfigReader& reader, ModelConfig& config) {
  const bool use_window = reader.optional_bool("use_sliding_window").value_or(false);
  const int window = use_window ? optional_window(reader) : 0;
  if (read_layer_types(reader, config, window)) return;
  uniform_layers(config, 0);
  if (window <= 0) return;
  const int first = reader.optional_int("max_window_layers").value_or(config.num_hidden_layers);
  for (int i = std::max(first, 0); i < config.num_hidden_layers; ++i) {
    config.layers[i].sliding_window = window;
  }
}

void read_qwen2(const ConfigReader& reader, ModelConfig& config) {
  require_activation(reader, config, "hidden_act", "silu");
  read_rope_scaling(reader, config);
  config.qkv_bias = true;
  read_qwen_windows(reader, config);
}

void read_qwen3(const ConfigReader& reader, ModelConfig& config) {
  require_activation(reader, config, "hidden_act", "silu");
  read_rope_scaling(reader, config);
  const bool attention_bias = reader.optional_bool("attention_bias").value_or(false);
  config.qkv_bias = config.o_bias = attention_bias;
  config.qk_norm = true;
  read_qwen_windows(reader, config);
}

void read_phi3(const ConfigReader& reader, ModelConfig& config) {
  require_activation(reader, config, "hidden_act", "silu");
  read_rope_scaling(reader, config);
  read_partial_rotary(reader, config);
  const int window = optional_window(reader);
  if (!read_layer_types(reader, config, window)) uniform_layers(config, window);
}

void read_smollm3(const ConfigReader& reader, ModelConfig& config) {
  require_activation(reader, config, "hidden_act", "silu");
  read_rope_scaling(reader, config);
  const bool attention_bias = reader.optional_bool("attention_bias").value_or(false);
  config.qkv_bias = config.o_bias = attention_bias;
  config.mlp_bias = reader.optional_bool("mlp_bias").value_or(false);
  config.tie_word_embeddings = reader.optional_bool("tie_word_embeddings").value_or(true);
  read_qwen_windows(reader, config);
  const auto flags = reader.optional_number_array("no_rope_layers");
  const int interval = reader.optional_int("no_rope_layer_interval").value_or(4);
  for (int i = 0; i < config.num_hidden_layers; ++i) {
    // no_rope_layers[i] is 1 where layer i USES RoPE (the name notwithstanding).
    if (flags) {
      if (static_cast<int>(flags->size()) != config.num_hidden_layers) {
        reader.fail("field no_rope_layers must have one entry per layer");
      }
      config.layers[i].use_rope = (*flags)[i] != 0.0;
    } else {
      config.layers[i].use_rope = interval <= 0 || (i + 1) % interval != 0;
    }
  }
}

// What Gemma 1, 2 and 3 share: GeGLU, (1 + w) norms, scaled embeddings, tied embeddings.
void read_gemma_common(const ConfigReader& reader, ModelConfig& config) {
  const char* act_field = reader.find("hidden_activation") ? "hidden_activation" : "hidden_act";
  require_activation(reader, config, act_field, "gelu_pytorch_tanh");
  config.norm_weight_offset = 1.0f;
  config.embedding_multiplier =
      round_to_dtype(std::sqrt(static_cast<float>(config.hidden_size)), config.torch_dtype);
  config.tie_word_embeddings = reader.optional_bool("tie_word_embeddings").value_or(true);
  if (const auto scalar = reader.optional_number("query_pre_attn_scalar")) {
    if (!(*scalar > 0.0)) reader.fail("field query_pre_attn_scalar must be positive");
    config.attention_scale = static_cast<float>(1.0 / std::sqrt(*scalar));
  }
  config.attn_logit_softcap =
      static_cast<float>(reader.optional_number("attn_logit_softcapping").value_or(0.0));
  config.final_logit_softcap =
      static_cast<float>(reader.optional_number("final_logit_softcapping").value_or(0.0));
  if (config.attn_logit_softcap < 0.0f || config.final_logit_softcap < 0.0f) {
    reader.fail("soft-capping values must not be negative");
  }
  read_rope_scaling(reader, config);
}

void read_gemma(const ConfigReader& reader, ModelConfig& config) {
  read_gemma_common(reader, config);
  uniform_layers(config, 0);
}

void read_gemma2(const ConfigReader& reader, ModelConfig& config) {
  read_gemma_common(reader, config);
  config.sandwich_norms = true;
  const int window = optional_window(reader);
  if (read_layer_types(reader, config, window)) return;
  uniform_layers(config, 0);
  for (int i = 0; i < config.num_hidden_layers; i += 2) config.layers[i].sliding_window = window;
}

void read_gemma3(const ConfigReader& reader, ModelConfig& config) {
  read_gemma_common(reader, config);
  config.sandwich_norms = true;
  config.qk_norm = true;
  config.rope_local_theta =
      static_cast<float>(reader.optional_number("rope_local_base_freq").value_or(10000.0));
  const int window = optional_window(reader);
  if (!read_layer_types(reader, config, window)) {
    uniform_layers(config, 0);
    const int pattern = reader.optional_int("sliding_window_pattern").value_or(6);
    for (int i = 0; i < config.num_hidden_layers; ++i) {
      if (pattern > 0 && (i + 1) % pattern != 0) config.layers[i].sliding_window = window;
    }
  }
  // Local layers use their own RoPE base and no scaling.
  for (LayerConfig& layer : config.layers) layer.local_rope = layer.sliding_window > 0;
}

constexpr FamilyReader kFamilies[] = {
    {"LlamaForCausalLM", "llama", read_llama},
    {"MistralForCausalLM", "mistral", read_mistral},
    {"Qwen2ForCausalLM", "qwen2", read_qwen2},
    {"Qwen3ForCausalLM", "qwen3", read_qwen3},
    {"Phi3ForCausalLM", "phi3", read_phi3},
    {"GemmaForCausalLM", "gemma", read_gemma},
    {"Gemma2ForCausalLM", "gemma2", read_gemma2},
    {"Gemma3ForCausalLM", "gemma3_text", read_gemma3},
    {"SmolLM3ForCausalLM", "smollm3", read_smollm3},
};

}  // namespace

const FamilyReader& find_family(const ConfigReader& reader, ModelConfig& config) {
  config.model_type = reader.optional_string("model_type").value_or("");
  const std::optional<std::vector<std::string>> architectures =
      reader.optional_string_array("architectures");
  std::string listed;
  if (architectures) {
    for (const std::string& name : *architectures) {
      for (const FamilyReader& family : kFamilies) {
        if (name == family.architecture) {
          config.architecture = name;
          return family;
        }
      }
      listed += (listed.empty() ? "" : ", ") + name;
    }
  } else {
    // Older exports carry only model_type.
    for (const FamilyReader& family : kFamilies) {
      if (config.model_type == family.model_type) {
        config.architecture = family.architecture;
        return family;
      }
    }
    listed = config.model_type.empty() ? "(no architectures or model_type)" : config.model_type;
  }
  if (listed.empty()) listed = "(empty architectures list)";
  reader.fail("unsupported architecture " + listed + " (pagedserve supports " +
              supported_architectures() + ")");
}

}  // namespace pagedserve::model::detail

namespace pagedserve::model {

const char* supported_architectures() {
  return "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
         "Phi3ForCausalLM, GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, "
         "Gemma3ForConditionalGeneration (its text model), SmolLM3ForCausalLM";
}

}  // namespace pagedserve::model
