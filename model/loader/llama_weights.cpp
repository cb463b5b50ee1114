// load_llama_weights: maps Hugging Face Llama tensor names onto LlamaWeights, checking every
// shape against config.json before converting, so a mismatched checkpoint fails with the
// tensor's name instead of producing garbage later in the executor.
#include "model/loader/llama_weights.h"

#include <system_error>

#include "model/loader/model_error.h"
#include "model/loader/safetensors.h"

namespace pagedserve::model {

namespace {

// A bias the config does not announce would change the math; config.json may omit
// attention_bias, so look at the tensors themselves rather than silently dropping them.
void reject_unexpected_bias(const WeightStore& store, const std::string& name) {
  if (store.find(name) != nullptr) {
    throw ModelError(store.source().string() + ": tensor " + name +
                     " is a bias its config.json does not announce (attention_bias / mlp_bias)");
  }
}

// The attention tensors of one layer under Hugging Face names.
void open_hf_attention(const WeightStore& store, const ModelConfig& c, const std::string& prefix,
                       LlamaLayerTensors& layer) {
  const int64_t hidden = c.hidden_size;
  const int64_t q_rows = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kv_rows = int64_t{c.num_key_value_heads} * c.head_dim;
  const std::string attn = prefix + "self_attn.";
  if (c.architecture == "Phi3ForCausalLM") {
    layer.wqkv = &store.require(attn + "qkv_proj.weight", {q_rows + 2 * kv_rows, hidden});
  } else {
    layer.wq = &store.require(attn + "q_proj.weight", {q_rows, hidden});
    layer.wk = &store.require(attn + "k_proj.weight", {kv_rows, hidden});
    layer.wv = &store.require(attn + "v_proj.weight", {kv_rows, hidden});
  }
  for (const char* proj : {"q_proj", "k_proj", "v_proj", "qkv_proj"}) {
    if (!c.qkv_bias) reject_unexpected_bias(store, attn + proj + ".bias");
  }
  if (c.qkv_bias) {
    layer.q_bias = &store.require(attn + "q_proj.bias", {q_rows});
    layer.k_bias = &store.require(attn + "k_proj.bias", {kv_rows});
    layer.v_bias = &store.require(attn + "v_proj.bias", {kv_rows});
  }
  if (c.qk_norm) {
    layer.q_norm = &store.require(attn + "q_norm.weight", {c.head_dim});
    layer.k_norm = &store.require(attn + "k_norm.weight", {c.head_dim});
  }
  layer.wo = &store.require(attn + "o_proj.weight", {hidden, q_rows});
  if (c.o_bias) {
    layer.o_bias = &store.require(attn + "o_proj.bias", {hidden});
  } else {
    reject_unexpected_bias(store, attn + "o_proj.bias");
  }
}

void open_hf_mlp(const WeightStore& store, const ModelConfig& c, const std::string& prefix,
                 LlamaLayerTensors& layer) {
  const int64_t hidden = c.hidden_size;
  const int64_t ffn = c.intermediate_size;
  const std::string mlp = prefix + "mlp.";
  if (c.architecture == "Phi3ForCausalLM") {
    layer.w_gate_up = &store.require(mlp + "gate_up_proj.weight", {2 * ffn, hidden});
  } else {
    layer.w_gate = &store.require(mlp + "gate_proj.weight", {ffn, hidden});
    layer.w_up = &store.require(mlp + "up_proj.weight", {ffn, hidden});
  }
  layer.w_down = &store.require(mlp + "down_proj.weight", {hidden, ffn});
  if (c.mlp_bias) {
    layer.gate_bias = &store.require(mlp + "gate_proj.bias", {ffn});
    layer.up_bias = &store.require(mlp + "up_proj.bias", {ffn});
    layer.down_bias = &store.require(mlp + "down_proj.bias", {hidden});
  } else {
    for (const char* proj : {"gate_proj", "up_proj", "down_proj", "gate_up_proj"}) {
      reject_unexpected_bias(store, mlp + proj + ".bias");
    }
  }
}

void open_hf_norms(const WeightStore& store, const ModelConfig& c, const std::string& prefix,
                   LlamaLayerTensors& layer) {
  const int64_t hidden = c.hidden_size;
  layer.input_norm = &store.require(prefix + "input_layernorm.weight", {hidden});
  if (c.sandwich_norms) {
    // Gemma 2/3: post_attention_layernorm normalises the attention output; the MLP's input
    // norm is pre_feedforward_layernorm.
    layer.post_attention_norm =
        &store.require(prefix + "post_attention_layernorm.weight", {hidden});
    layer.post_norm = &store.require(prefix + "pre_feedforward_layernorm.weight", {hidden});
    layer.post_mlp_norm = &store.require(prefix + "post_feedforward_layernorm.weight", {hidden});
  } else {
    layer.post_norm = &store.require(prefix + "post_attention_layernorm.weight", {hidden});
  }
}

// Where the text model's tensors sit: "model." in a causal LM; under the language model of a
// multimodal checkpoint (Gemma 3 4B+: "language_model.model." as transformers < 4.52 saved
// it, "model.language_model." after).
std::string text_model_root(const WeightStore& store) {
  for (const char* root : {"model.", "language_model.model.", "model.language_model."}) {
    if (store.find(std::string(root) + "embed_tokens.weight") != nullptr) return root;
  }
  return "model.";  // the error will name model.embed_tokens.weight
}

bool is_gguf_path(const std::filesystem::path& path) {
  std::error_code ec;
  return path.extension() == ".gguf" && std::filesystem::is_regular_file(path, ec);
}

}  // namespace

std::string LlamaCheckpoint::source() const {
  if (gguf) return gguf_path.string();
  return store.source().string();
}

std::optional<std::filesystem::path> find_gguf_file(const std::filesystem::path& model_path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(model_path, ec)) return model_path;
  if (!std::filesystem::is_directory(model_path, ec)) return std::nullopt;
  if (std::filesystem::exists(model_path / "config.json", ec)) return std::nullopt;
  std::optional<std::filesystem::path> found;
  for (const auto& entry : std::filesystem::directory_iterator(model_path, ec)) {
    if (!is_gguf_path(entry.path())) continue;
    if (found) {
      throw ModelError(model_path.string() + ": holds several .gguf files (" +
                       found->filename().string() + ", " + entry.path().filename().string() +
                       "); pass the one to load with --model FILE.gguf");
    }
    found = entry.path();
  }
  return found;
}

LlamaCheckpoint open_llama_checkpoint(const std::filesystem::path& model_path) {
  std::error_code ec;
  if (model_path.extension() == ".gguf" && !std::filesystem::exists(model_path, ec)) {
    throw ModelError(model_path.string() + ": file not found");
  }
  if (const auto gguf = find_gguf_file(model_path)) return open_gguf_checkpoint(*gguf);
  return open_hf_checkpoint(model_path);
}

LlamaCheckpoint open_hf_checkpoint(const std::filesystem::path& model_dir) {
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
  const int64_t vocab = c.vocab_size;
  const std::string root = text_model_root(store);
  checkpoint.embed_tokens = &store.require(root + "embed_tokens.weight", {vocab, hidden});
  // No reserve(num_hidden_layers): the count is untrusted until the tensors are found, and a
  // config claiming 2^31 layers must end in "missing tensor", not a huge allocation.
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string prefix = root + "layers." + std::to_string(i) + ".";
    LlamaLayerTensors& layer = checkpoint.layers.emplace_back();
    open_hf_norms(store, c, prefix, layer);
    open_hf_attention(store, c, prefix, layer);
    open_hf_mlp(store, c, prefix, layer);
  }
  checkpoint.final_norm = &store.require(root + "norm.weight", {hidden});
  // Tied checkpoints sometimes still carry a copy of lm_head.weight; the config decides.
  if (!c.tie_word_embeddings)
    checkpoint.lm_head = &store.require("lm_head.weight", {vocab, hidden});
  return checkpoint;
}

namespace {

// What the float32 LlamaWeights (and so the CUDA executor) cannot express.
std::string first_unsupported_feature(const LlamaCheckpoint& checkpoint) {
  const ModelConfig& c = checkpoint.config;
  if (c.architecture != "LlamaForCausalLM" && c.architecture != "MistralForCausalLM") {
    return "architecture " + c.architecture;
  }
  if (c.qkv_bias || c.o_bias || c.mlp_bias) return "biases";
  if (c.rope_scaling.type != RopeScaling::Type::kNone || !c.rope_scaling.freq_divisors.empty()) {
    return "RoPE scaling";
  }
  if (c.rope_dims() != c.head_dim) return "partial rotary embeddings";
  for (const LayerConfig& layer : c.layers) {
    if (layer.sliding_window > 0) return "sliding-window attention";
    if (!layer.use_rope) return "layers without RoPE";
  }
  return {};
}

}  // namespace

std::vector<float> checkpoint_norm_f32(const TensorView* view, float offset) {
  if (view == nullptr) return {};
  std::vector<float> values = to_f32(*view);
  if (offset != 0.0f) {
    for (float& v : values) v += offset;
  }
  return values;
}

std::vector<float> stacked_f32(std::initializer_list<const TensorView*> parts) {
  std::vector<float> out;
  for (const TensorView* part : parts) {
    if (part == nullptr) return {};
    const std::vector<float> values = to_f32(*part);
    out.insert(out.end(), values.begin(), values.end());
  }
  return out;
}

LlamaWeights load_llama_weights(const std::filesystem::path& model_dir) {
  const LlamaCheckpoint checkpoint = open_llama_checkpoint(model_dir);
  if (const std::string feature = first_unsupported_feature(checkpoint); !feature.empty()) {
    throw ModelError(checkpoint.source() + ": " + feature +
                     " is not supported by the float32 Llama weights (the CUDA executor); "
                     "use the CPU executor (--device cpu)");
  }
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
