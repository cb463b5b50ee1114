// RoPE frequencies of every scaling scheme in transformers' modeling_rope_utils.py (default,
// linear, dynamic NTK, llama3, YaRN, LongRoPE) plus GGUF's stored divisors: computed once per
// model, then turned into per-token cos/sin tables by kernels::rope_cos_sin_inv_freq.
#pragma once

#include <vector>

#include "model/loader/model_config.h"

namespace pagedserve::model {

struct RopeFrequencies {
  std::vector<float> inv_freq;  // [rotary_dim / 2]
  // LongRoPE: the frequencies of sequences longer than long_after tokens; empty otherwise.
  std::vector<float> inv_freq_long;
  int long_after = 0;
  float attention_factor = 1.0f;  // multiplies cos and sin (YaRN, LongRoPE)
  // True when inv_freq is theta^(-2i/d) and nothing else: the engine's original path.
  bool plain = false;
};

// The frequencies of the model's global layers, or (local = true) of Gemma 3's local layers
// (rope_local_theta, no scaling).
//
// Dynamic NTK follows vLLM: one base for the longest context (max_position_embeddings *
// factor), not Hugging Face's per-forward recomputation from the current length, so a token's
// rotation never depends on what else is in the batch.
RopeFrequencies rope_frequencies(const ModelConfig& config, bool local);

}  // namespace pagedserve::model
