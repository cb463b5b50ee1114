// load_llama_weights: maps Hugging Face Llama tensor names onto LlamaWeights, checking every
// shape against config.json before converting, so a mismatched checkpoint fails with the
// tensor's name instead of producing garbage later in the executor.
#include "model/loader/llama_weights.h"

#include <system_error>

#include "model/loader/model_error.h"
#include "model/loader/safetensors.h"

namespace pagedserve::model {

namespace {

// Biases would change the math; config.json may omit attention_bias, so also look at the
// tensors themselves rather than silently dropping them.
void reject_biases(const WeightStore& store, const std::string& layer_prefix) {
  static const char* const kBiased[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                        "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                        "mlp.down_proj"};
  for (const char* module : kBiased) {
    const std::string name = layer_prefix + module + ".bias";
    if (store.find(name) != nullptr) {
      throw ModelError(store.source().string() + ": tensor " + name +
                       " is a bias, which pagedserve's Llama does not support");
    }
  }
}

}  // namespace

LlamaCheckpoint open_llama_checkpoint(const std::filesystem::path& model_dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(model_dir, ec)) {
    throw ModelError(model_dir.string() + ": model directory not found");
  }
  LlamaCheckpoint checkpoint;
  checkpoint.config = load_model_config(model_dir / "config.json");
  const ModelConfig& c = checkpoint.config;
  checkpoint.store = WeightStore::open(model_dir);
  const WeightStore& store = checkpoint.store;

  const int64_t hidden = c.hidden_size;
  const int64_t ffn = c.intermediate_size;
  const int64_t q_rows = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kv_rows = int64_t{c.num_key_value_heads} * c.head_dim;
  const int64_t vocab = c.vocab_size;

  checkpoint.embed_tokens = &store.require("model.embed_tokens.weight", {vocab, hidden});
  // No reserve(num_hidden_layers): the count is untrusted until the tensors are found, and a
  // config claiming 2^31 layers must end in "missing tensor", not a huge allocation.
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    reject_biases(store, prefix);
    LlamaLayerTensors& layer = checkpoint.layers.emplace_back();
    layer.input_norm = &store.require(prefix + "input_layernorm.weight", {hidden});
    layer.wq = &store.require(prefix + "self_attn.q_proj.weight", {q_rows, hidden});
    layer.wk = &store.require(prefix + "self_attn.k_proj.weight", {kv_rows, hidden});
    layer.wv = &store.require(prefix + "self_attn.v_proj.weight", {kv_rows, hidden});
    layer.wo = &store.require(prefix + "self_attn.o_proj.weight", {hidden, q_rows});
    layer.post_norm = &store.require(prefix + "post_attention_layernorm.weight", {hidden});
    layer.w_gate = &store.require(prefix + "mlp.gate_proj.weight", {ffn, hidden});
    layer.w_up = &store.require(prefix + "mlp.up_proj.weight", {ffn, hidden});
    layer.w_down = &store.require(prefix + "mlp.down_proj.weight", {hidden, ffn});
  }
  checkpoint.final_norm = &store.require("model.norm.weight", {hidden});
  // Tied checkpoints sometimes still carry a copy of lm_head.weight; the config decides.
  if (!c.tie_word_embeddings)
    checkpoint.lm_head = &store.require("lm_head.weight", {vocab, hidden});
  return checkpoint;
}

LlamaWeights load_llama_weights(const std::filesystem::path& model_dir) {
  const LlamaCheckpoint checkpoint = open_llama_checkpoint(model_dir);
  LlamaWeights weights;
  weights.config = checkpoint.config;
  weights.embed_tokens = to_f32(*checkpoint.embed_tokens);
  for (const LlamaLayerTensors& t : checkpoint.layers) {
    LlamaLayerWeights& layer = weights.layers.emplace_back();
    layer.input_norm = to_f32(*t.input_norm);
    layer.wq = to_f32(*t.wq);
    layer.wk = to_f32(*t.wk);
    layer.wv = to_f32(*t.wv);
    layer.wo = to_f32(*t.wo);
    layer.post_norm = to_f32(*t.post_norm);
    layer.w_gate = to_f32(*t.w_gate);
    layer.w_up = to_f32(*t.w_up);
    layer.w_down = to_f32(*t.w_down);
  }
  weights.final_norm = to_f32(*checkpoint.final_norm);
  if (checkpoint.lm_head) weights.lm_head = to_f32(*checkpoint.lm_head);
  return weights;
}

}  // namespace pagedserve::model
