// LlamaWeights: every weight of a LlamaForCausalLM, converted to float32 for the CPU executor.
#pragma once

#include <filesystem>
#include <vector>

#include "model/loader/model_config.h"
#include "model/loader/safetensors.h"

namespace pagedserve::model {

struct LlamaLayerWeights {
  std::vector<float> input_norm;  // [hidden]
  std::vector<float> wq;          // [num_heads * head_dim, hidden]
  std::vector<float> wk;          // [num_kv_heads * head_dim, hidden]
  std::vector<float> wv;          // [num_kv_heads * head_dim, hidden]
  std::vector<float> wo;          // [hidden, num_heads * head_dim]
  std::vector<float> post_norm;   // [hidden]
  std::vector<float> w_gate;      // [intermediate, hidden]
  std::vector<float> w_up;        // [intermediate, hidden]
  std::vector<float> w_down;      // [hidden, intermediate]
};

struct LlamaWeights {
  ModelConfig config;
  std::vector<float> embed_tokens;  // [vocab, hidden]
  std::vector<LlamaLayerWeights> layers;
  std::vector<float> final_norm;  // [hidden]
  std::vector<float> lm_head;     // [vocab, hidden]; empty when tied to embed_tokens

  const std::vector<float>& output_projection() const {
    return lm_head.empty() ? embed_tokens : lm_head;
  }
};

// The tensors of a Llama checkpoint in the checkpoint's own dtype: views into the mapped files,
// every name and shape already checked against the config. For consumers that keep 16-bit
// weights 16-bit (the CPU executor packs straight from these views).
struct LlamaLayerTensors {
  const TensorView* input_norm = nullptr;
  const TensorView* wq = nullptr;
  const TensorView* wk = nullptr;
  const TensorView* wv = nullptr;
  const TensorView* wo = nullptr;
  const TensorView* post_norm = nullptr;
  const TensorView* w_gate = nullptr;
  const TensorView* w_up = nullptr;
  const TensorView* w_down = nullptr;
};

struct LlamaCheckpoint {
  ModelConfig config;
  WeightStore store;  // owns the mappings every view below points into
  const TensorView* embed_tokens = nullptr;
  std::vector<LlamaLayerTensors> layers;
  const TensorView* final_norm = nullptr;
  const TensorView* lm_head = nullptr;  // nullptr when tied to embed_tokens

  const TensorView& output_projection() const { return lm_head ? *lm_head : *embed_tokens; }
};

// Opens config.json and the safetensors weights of `model_dir` with the checks of
// load_llama_weights below, converting nothing.
LlamaCheckpoint open_llama_checkpoint(const std::filesystem::path& model_dir);

// Loads config.json and the safetensors weights of `model_dir` (Hugging Face names:
// model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ..., model.norm.weight,
// lm_head.weight unless tie_word_embeddings). Every tensor's shape is checked against the
// config. Throws ModelError naming the file and the problem.
LlamaWeights load_llama_weights(const std::filesystem::path& model_dir);

}  // namespace pagedserve::model
