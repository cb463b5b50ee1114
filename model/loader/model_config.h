// ModelConfig: the architecture facts read from a Hugging Face config.json.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace pagedserve::model {

struct ModelConfig {
  std::string architecture;      // e.g. "LlamaForCausalLM"
  std::string model_type;        // e.g. "llama"
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;   // defaults to num_attention_heads when absent
  int head_dim = 0;              // defaults to hidden_size / num_attention_heads when absent
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  int vocab_size = 0;
  bool tie_word_embeddings = false;
  int max_position_embeddings = 2048;
  int bos_token_id = -1;               // -1 when the config has none
  std::vector<int> eos_token_ids;      // config's eos_token_id (int or list); may be empty
  std::string torch_dtype;             // "float32", "float16", "bfloat16" or ""
};

// Reads and validates `config_json`. Throws ModelError naming the file for invalid JSON,
// missing or non-positive sizes, inconsistent heads (num_attention_heads not a multiple of
// num_key_value_heads), or an unsupported architecture (only LlamaForCausalLM for now).
ModelConfig load_model_config(const std::filesystem::path& config_json);

}  // namespace pagedserve::model
