// load_llama_weights: maps Hugging Face Llama tensor names onto LlamaWeights, checking every
// shape against config.json before converting, so a mismatched checkpoint fails with the
// tensor's name instead of producing garbage later in the executor.
#include "model/loader/llama_weights.h"

#include <system_error>

#include "model/loader/model_error.h"
#include "model/loader/safetensors.h"

namespace pagedserve::model {

namespace {

std::vector<float> load(const WeightStore& store, const std::string& name,
                        const std::vector<int64_t>& shape) {
  return to_f32(store.require(name, shape));
}

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

LlamaWeights load_llama_weights(const std::filesystem::path& model_dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(model_dir, ec)) {
    throw ModelError(model_dir.string() + ": model directory not found");
  }
  LlamaWeights weights;
  weights.config = load_model_config(model_dir / "config.json");
  const ModelConfig& c = weights.config;
  const WeightStore store = WeightStore::open(model_dir);

  const int64_t hidden = c.hidden_size;
  const int64_t ffn = c.intermediate_size;
  const int64_t q_rows = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kv_rows = int64_t{c.num_key_value_heads} * c.head_dim;
  const int64_t vocab = c.vocab_size;

  weights.embed_tokens = load(store, "model.embed_tokens.weight", {vocab, hidden});
  // No reserve(num_hidden_layers): the count is untrusted until the tensors are found, and a
  // config claiming 2^31 layers must end in "missing tensor", not a huge allocation.
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    reject_biases(store, prefix);
    LlamaLayerWeights& layer = weights.layers.emplace_back();
    layer.input_norm = load(store, prefix + "input_layernorm.weight", {hidden});
    layer.wq = load(store, prefix + "self_attn.q_proj.weight", {q_rows, hidden});
    layer.wk = load(store, prefix + "self_attn.k_proj.weight", {kv_rows, hidden});
    layer.wv = load(store, prefix + "self_attn.v_proj.weight", {kv_rows, hidden});
    layer.wo = load(store, prefix + "self_attn.o_proj.weight", {hidden, q_rows});
    layer.post_norm = load(store, prefix + "post_attention_layernorm.weight", {hidden});
    layer.w_gate = load(store, prefix + "mlp.gate_proj.weight", {ffn, hidden});
    layer.w_up = load(store, prefix + "mlp.up_proj.weight", {ffn, hidden});
    layer.w_down = load(store, prefix + "mlp.down_proj.weight", {hidden, ffn});
  }
  weights.final_norm = load(store, "model.norm.weight", {hidden});
  // Tied checkpoints sometimes still carry a copy of lm_head.weight; the config decides.
  if (!c.tie_word_embeddings) weights.lm_head = load(store, "lm_head.weight", {vocab, hidden});
  return weights;
}

}  // namespace pagedserve::model
