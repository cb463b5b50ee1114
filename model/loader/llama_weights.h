// LlamaWeights: every weight of a LlamaForCausalLM, converted to float32 for the CPU executor.
#pragma once

#include <cstddef>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
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

// The tensors of a checkpoint of any supported family in the checkpoint's own dtype: views
// into the mapped files, every name and shape already checked against the config. For
// consumers that keep 16-bit weights 16-bit (the CPU executor packs straight from these
// views). Optional tensors are nullptr when the family has none.
struct LlamaLayerTensors {
  const TensorView* input_norm = nullptr;
  // q, k and v: separate (wq, wk, wv) or fused into one [q + 2 kv, hidden] matrix (Phi-3).
  const TensorView* wq = nullptr;
  const TensorView* wk = nullptr;
  const TensorView* wv = nullptr;
  const TensorView* wqkv = nullptr;
  const TensorView* q_bias = nullptr;  // with config.qkv_bias
  const TensorView* k_bias = nullptr;
  const TensorView* v_bias = nullptr;
  const TensorView* q_norm = nullptr;  // [head_dim], with config.qk_norm
  const TensorView* k_norm = nullptr;
  const TensorView* wo = nullptr;
  const TensorView* o_bias = nullptr;               // with config.o_bias
  const TensorView* post_attention_norm = nullptr;  // Gemma: norm of the attention output
  const TensorView* post_norm = nullptr;            // the norm before the MLP
  const TensorView* post_mlp_norm = nullptr;        // Gemma: norm of the MLP output
  // gate and up: separate or fused into one [2 ffn, hidden] matrix (Phi-3), gate first.
  const TensorView* w_gate = nullptr;
  const TensorView* w_up = nullptr;
  const TensorView* w_gate_up = nullptr;
  const TensorView* w_down = nullptr;
  const TensorView* gate_bias = nullptr;  // with config.mlp_bias
  const TensorView* up_bias = nullptr;
  const TensorView* down_bias = nullptr;
};

class GgufFile;  // model/loader/gguf.h

struct LlamaCheckpoint {
  ModelConfig config;
  WeightStore store;                     // a Hugging Face folder's mappings, or empty
  std::shared_ptr<const GgufFile> gguf;  // a GGUF file's mapping, or null
  std::filesystem::path gguf_path;
  // Views made for this checkpoint (GGUF tensors) and the bytes of tensors the loader had to
  // rewrite (GGUF's permuted Q/K rows): the views above may point into both.
  std::vector<std::unique_ptr<TensorView>> owned_views;
  std::vector<std::unique_ptr<std::vector<std::byte>>> owned_bytes;
  const TensorView* embed_tokens = nullptr;
  std::vector<LlamaLayerTensors> layers;
  const TensorView* final_norm = nullptr;
  const TensorView* lm_head = nullptr;  // nullptr when tied to embed_tokens

  const TensorView& output_projection() const { return lm_head ? *lm_head : *embed_tokens; }
  std::string source() const;  // the file errors should name
};

// Opens a model: a Hugging Face folder (config.json + safetensors), a .gguf file, or a folder
// holding exactly one .gguf and no config.json. Checks every name and shape, converting
// nothing.
LlamaCheckpoint open_llama_checkpoint(const std::filesystem::path& model_path);
// The Hugging Face and GGUF halves of open_llama_checkpoint.
LlamaCheckpoint open_hf_checkpoint(const std::filesystem::path& model_dir);
LlamaCheckpoint open_gguf_checkpoint(const std::filesystem::path& gguf_file);
// The .gguf file `model_path` names (itself, or the only .gguf in a folder without
// config.json); nullopt for a Hugging Face folder.
std::optional<std::filesystem::path> find_gguf_file(const std::filesystem::path& model_path);

// A norm's weights in float32 plus `offset` (Gemma's Hugging Face norms store w of 1 + w);
// empty when `view` is null (the family has no such norm).
std::vector<float> checkpoint_norm_f32(const TensorView* view, float offset);
// The tensors of stacked projections (q/k/v or gate/up biases) concatenated in float32, in
// the order given; empty when any part is null (the family has none). One optional tensor
// is a stack of one.
std::vector<float> stacked_f32(std::initializer_list<const TensorView*> parts);

// Loads the weights of a plain Llama model (no biases, norms or scaling the float32 path does
// not model; the CUDA executor's input) in float32, from either format (Hugging Face names:
// model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ..., model.norm.weight,
// lm_head.weight unless tie_word_embeddings). Every tensor's shape is checked against the
// config. Throws ModelError naming the file and the problem.
LlamaWeights load_llama_weights(const std::filesystem::path& model_dir);

}  // namespace pagedserve::model
