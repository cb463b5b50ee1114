// ModelConfig: the architecture facts of a decoder-only model, read from a Hugging Face
// config.json (load_model_config) or from GGUF metadata (model/loader/gguf_checkpoint.cpp).
// Every supported family (Llama, Mistral, Qwen2/2.5, Qwen3, Phi-3, Gemma 2/3, SmolLM3) is the
// Llama skeleton plus the switches below; anything that would change the math and is not
// modelled here is refused at load time, so a user never gets silently wrong text.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace pagedserve::model {

enum class Activation { kSilu, kGeluTanh };  // SwiGLU (Llama) or GeGLU with tanh GELU (Gemma)

// How RoPE frequencies are derived (transformers' modeling_rope_utils.py names).
struct RopeScaling {
  enum class Type { kNone, kLinear, kDynamic, kLlama3, kYarn, kLongRope };
  Type type = Type::kNone;
  double factor = 1.0;
  int original_max_position_embeddings = 0;  // llama3, yarn, longrope; 0 = not given
  double low_freq_factor = 1.0;              // llama3
  double high_freq_factor = 4.0;             // llama3
  double beta_fast = 32.0;                   // yarn
  double beta_slow = 1.0;                    // yarn
  double mscale = 0.0;                       // yarn (DeepSeek style); 0 = not given
  double mscale_all_dim = 0.0;               // yarn; 0 = not given
  bool truncate = true;                      // yarn: round the correction range
  double attention_factor = 0.0;             // yarn, longrope: cos/sin multiplier; 0 = derive
  std::vector<float> short_factor;           // longrope, [rotary_dim / 2]
  std::vector<float> long_factor;            // longrope, [rotary_dim / 2]
  // GGUF's rope_freqs tensor (Llama 3 files): inv_freq[i] is divided by freq_divisors[i]
  // after everything above; empty = none. [rotary_dim / 2]
  std::vector<float> freq_divisors;
};

// What differs between the layers of one model.
struct LayerConfig {
  int sliding_window = 0;   // > 0: attends to the last sliding_window positions only
  bool use_rope = true;     // SmolLM3 leaves RoPE out of every fourth layer
  bool local_rope = false;  // Gemma 3's sliding layers: rope_local_theta, no scaling
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  std::string model_type;    // e.g. "llama"
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;  // defaults to num_attention_heads when absent
  int head_dim = 0;             // defaults to hidden_size / num_attention_heads when absent
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  int vocab_size = 0;
  bool tie_word_embeddings = false;
  int max_position_embeddings = 2048;
  int bos_token_id = -1;           // -1 when the config has none
  std::vector<int> eos_token_ids;  // config's eos_token_id (int or list); may be empty
  std::string torch_dtype;         // "float32", "float16", "bfloat16" or ""

  // The per-family switches. Defaults are plain Llama.
  Activation activation = Activation::kSilu;
  bool qkv_bias = false;        // Qwen2, Llama attention_bias
  bool o_bias = false;          // Llama attention_bias
  bool mlp_bias = false;        // Llama mlp_bias: gate, up and down
  bool qk_norm = false;         // Qwen3, Gemma 3: per-head RMSNorm of q and k before RoPE
  bool sandwich_norms = false;  // Gemma 2/3: norms after attention and after the MLP too
  // Added to every RMSNorm weight at load: 1 for Hugging Face Gemma checkpoints, which store
  // w for a norm that multiplies by (1 + w); 0 elsewhere (GGUF stores 1 + w already).
  float norm_weight_offset = 0.0f;
  float embedding_multiplier = 1.0f;  // Gemma: sqrt(hidden_size), rounded to the model dtype
  float attention_scale = 0.0f;       // softmax scale; 0 = 1 / sqrt(head_dim)
  float attn_logit_softcap = 0.0f;    // Gemma 2; 0 = none
  float final_logit_softcap = 0.0f;   // Gemma 2; 0 = none
  int rotary_dim = 0;                 // head_dim * partial_rotary_factor; 0 = head_dim
  RopeScaling rope_scaling;
  float rope_local_theta = 10000.0f;  // Gemma 3's local layers
  std::vector<LayerConfig> layers;    // [num_hidden_layers]; filled by the loaders

  float softmax_scale() const;  // attention_scale, or 1 / sqrt(head_dim)
  int rope_dims() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  // Layer l's settings (defaults past the filled ones, as for hand-built configs).
  LayerConfig layer_config(size_t l) const { return l < layers.size() ? layers[l] : LayerConfig{}; }
  // The largest sliding window of any layer, or 0 when some layer sees the whole context.
  int max_window_of_all_layers() const;
};

// More layers than any real model has (the deepest have ~120); a larger count is a broken or
// hostile file, refused before anything is allocated per layer.
constexpr int kMaxLayers = 65536;

// The architectures load_model_config accepts, for error messages.
const char* supported_architectures();

// Reads and validates `config_json`. Throws ModelError naming the file for invalid JSON,
// missing or non-positive sizes, inconsistent heads (num_attention_heads not a multiple of
// num_key_value_heads), an unsupported architecture (naming it and listing the supported
// ones), or a feature of a supported family that is not implemented (naming it).
ModelConfig load_model_config(const std::filesystem::path& config_json);

// Checks the family-independent invariants (positive sizes, heads, rotary_dim even and at
// most head_dim, one LayerConfig per layer, longrope factor lengths). Throws ModelError
// "<source>: <problem>".
void validate_model_config(const ModelConfig& config, const std::string& source);

}  // namespace pagedserve::model
