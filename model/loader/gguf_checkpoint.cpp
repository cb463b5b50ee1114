// open_gguf_checkpoint: a GGUF file's metadata mapped onto ModelConfig and its tensors onto
// LlamaLayerTensors, with llama.cpp's names (token_embd, blk.N.attn_q, ...). Two conversions
// of llama.cpp's converter are undone here: the Q and K rows of llama-family files are
// permuted for interleaved RoPE (this engine rotates halves, as Hugging Face does), and Gemma's
// norms are stored as 1 + w (so no offset is added at load).
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "model/loader/gguf.h"
#include "model/loader/llama_weights.h"
#include "model/loader/model_error.h"
#include "model/loader/shape_string.h"

namespace pagedserve::model {
namespace {

struct ArchInfo {
  const char* gguf_name;     // general.architecture
  const char* architecture;  // the Hugging Face class it stands for
  bool permuted_qk;          // converter permuted Q/K rows for interleaved RoPE
};

constexpr ArchInfo kArchs[] = {
    {"llama", "LlamaForCausalLM", true},    {"qwen2", "Qwen2ForCausalLM", false},
    {"qwen3", "Qwen3ForCausalLM", false},   {"phi3", "Phi3ForCausalLM", false},
    {"gemma", "GemmaForCausalLM", false},   {"gemma2", "Gemma2ForCausalLM", false},
    {"gemma3", "Gemma3ForCausalLM", false}, {"smollm3", "SmolLM3ForCausalLM", true},
};

class GgufReader {
 public:
  GgufReader(LlamaCheckpoint& checkpoint, const GgufFile& file, std::string arch)
      : checkpoint_(checkpoint), file_(file), arch_(std::move(arch)) {}

  [[noreturn]] void fail(const std::string& problem) const {
    throw ModelError(file_.path().string() + ": " + problem);
  }

  std::optional<int64_t> arch_int(const char* key) const {
    return file_.get_int(arch_ + "." + key);
  }
  std::optional<double> arch_float(const char* key) const {
    return file_.get_float(arch_ + "." + key);
  }
  // A per-layer count stored as one integer or one per layer (all equal here).
  std::optional<int> uniform_int(const char* key) const {
    const std::string full = arch_ + "." + key;
    const GgufValue* value = file_.find(full);
    if (value == nullptr) return std::nullopt;
    if (value->type != GgufType::kArray) return checked_int(full, *file_.get_int(full));
    const std::vector<int64_t> values = *file_.get_int_array(full);
    if (values.empty()) fail("metadata key " + full + " is an empty array");
    for (int64_t v : values) {
      if (v != values[0]) {
        fail("metadata key " + full + " varies per layer, which pagedserve does not support");
      }
    }
    return checked_int(full, values[0]);
  }
  int required_int(const char* key) const {
    const std::optional<int> value = uniform_int(key);
    if (!value) fail("missing metadata key " + arch_ + "." + key);
    return *value;
  }
  int checked_int(const std::string& key, int64_t value) const {
    if (value <= 0 || value > (int64_t{1} << 30)) {
      fail("metadata key " + key + " is " + std::to_string(value) + ", outside [1, 2^30]");
    }
    return static_cast<int>(value);
  }

  const TensorView* find(const std::string& name) {
    const GgufTensor* tensor = file_.find_tensor(name);
    if (tensor == nullptr) return nullptr;
    checkpoint_.owned_views.push_back(std::make_unique<TensorView>(file_.view(*tensor)));
    return checkpoint_.owned_views.back().get();
  }
  const TensorView* require(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorView* view = find(name);
    if (view == nullptr) fail("missing tensor " + name);
    if (view->shape != shape) {
      fail("tensor " + name + " has shape " + detail::shape_string(view->shape) + ", expected " +
           detail::shape_string(shape));
    }
    return view;
  }
  // An optional tensor that must have `shape` when present.
  const TensorView* optional(const std::string& name, const std::vector<int64_t>& shape) {
    return file_.find_tensor(name) ? require(name, shape) : nullptr;
  }

  // Undoes the converter's permute(): GGUF row h*d + 2i + half holds Hugging Face row
  // h*d + half*d/2 + i of each head (d = head_dim).
  const TensorView* unpermute_rows(const TensorView* view, int num_heads, int head_dim) {
    const size_t row_bytes = static_cast<size_t>(view->num_bytes / view->shape[0]);
    auto bytes = std::make_unique<std::vector<std::byte>>(view->num_bytes);
    const int half = head_dim / 2;
    for (int h = 0; h < num_heads; ++h) {
      for (int i = 0; i < half; ++i) {
        for (int part = 0; part < 2; ++part) {
          const size_t from = static_cast<size_t>(h) * head_dim + 2 * i + part;
          const size_t to = static_cast<size_t>(h) * head_dim + part * half + i;
          std::memcpy(bytes->data() + to * row_bytes, view->data + from * row_bytes, row_bytes);
        }
      }
    }
    auto copy = std::make_unique<TensorView>(*view);
    copy->data = bytes->data();
    checkpoint_.owned_bytes.push_back(std::move(bytes));
    checkpoint_.owned_views.push_back(std::move(copy));
    return checkpoint_.owned_views.back().get();
  }

  const GgufFile& file() const { return file_; }
  const std::string& arch() const { return arch_; }

 private:
  LlamaCheckpoint& checkpoint_;
  const GgufFile& file_;
  std::string arch_;
};

void read_sizes(const GgufReader& r, ModelConfig& c) {
  c.hidden_size = r.required_int("embedding_length");
  c.num_hidden_layers = r.required_int("block_count");
  if (c.num_hidden_layers > kMaxLayers) {
    r.fail("block_count " + std::to_string(c.num_hidden_layers) + " is more than " +
           std::to_string(kMaxLayers));
  }
  c.intermediate_size = r.required_int("feed_forward_length");
  c.num_attention_heads = r.required_int("attention.head_count");
  c.num_key_value_heads = r.uniform_int("attention.head_count_kv").value_or(c.num_attention_heads);
  if (c.hidden_size % c.num_attention_heads != 0 && !r.uniform_int("attention.key_length")) {
    r.fail("embedding_length is not a multiple of attention.head_count and no key_length");
  }
  c.head_dim =
      r.uniform_int("attention.key_length").value_or(c.hidden_size / c.num_attention_heads);
  if (const auto value_length = r.uniform_int("attention.value_length");
      value_length && *value_length != c.head_dim) {
    r.fail("attention.value_length differs from attention.key_length; not supported");
  }
  c.max_position_embeddings = r.uniform_int("context_length").value_or(2048);
  c.rms_norm_eps =
      static_cast<float>(r.arch_float("attention.layer_norm_rms_epsilon").value_or(1e-5));
  c.rope_theta = static_cast<float>(r.arch_float("rope.freq_base").value_or(10000.0));
  if (const auto dims = r.uniform_int("rope.dimension_count")) c.rotary_dim = *dims;
}

void read_rope_scaling(const GgufReader& r, ModelConfig& c) {
  const std::string type = r.file().get_string(r.arch() + ".rope.scaling.type").value_or("none");
  RopeScaling& s = c.rope_scaling;
  s.factor = r.arch_float("rope.scaling.factor").value_or(1.0);
  if (s.factor == 0.0) s.factor = 1.0;
  s.original_max_position_embeddings =
      static_cast<int>(r.arch_int("rope.scaling.original_context_length").value_or(0));
  if (type == "none") {
    s.type = RopeScaling::Type::kNone;
  } else if (type == "linear") {
    s.type = RopeScaling::Type::kLinear;
  } else if (type == "yarn") {
    s.type = RopeScaling::Type::kYarn;
    s.beta_fast = r.arch_float("rope.scaling.yarn_beta_fast").value_or(32.0);
    s.beta_slow = r.arch_float("rope.scaling.yarn_beta_slow").value_or(1.0);
    if (s.original_max_position_embeddings <= 0) {
      s.original_max_position_embeddings = c.max_position_embeddings;
    }
  } else if (type == "longrope") {
    s.type = RopeScaling::Type::kLongRope;  // the factors come as tensors
  } else {
    r.fail("rope.scaling.type " + type + " is not supported");
  }
}

// The switches of each family, as llama.cpp's model loader sets them for the architecture.
void read_family(const GgufReader& r, ModelConfig& c) {
  const std::string& a = r.arch();
  c.layers.assign(static_cast<size_t>(c.num_hidden_layers), LayerConfig{});
  const int window = static_cast<int>(r.arch_int("attention.sliding_window").value_or(0));
  if (a == "qwen2") c.qkv_bias = true;
  if (a == "qwen3" || a == "gemma3") c.qk_norm = true;
  // Phi-3 (and a llama file that states a window, as make-model's Mistral does; the
  // converter writes none for Mistral, so llama.cpp runs those with full attention).
  if (a == "phi3" || a == "llama") {
    for (LayerConfig& layer : c.layers) layer.sliding_window = window;
  }
  if (a == "smollm3") {
    for (int i = 0; i < c.num_hidden_layers; ++i) c.layers[i].use_rope = (i + 1) % 4 != 0;
  }
  if (a.starts_with("gemma")) {
    c.activation = Activation::kGeluTanh;
    c.embedding_multiplier = std::sqrt(static_cast<float>(c.hidden_size));
    c.sandwich_norms = a != "gemma";
    c.attn_logit_softcap = static_cast<float>(r.arch_float("attn_logit_softcapping").value_or(0.0));
    c.final_logit_softcap =
        static_cast<float>(r.arch_float("final_logit_softcapping").value_or(0.0));
    // llama.cpp: the 27B models scale by hidden / heads (their query_pre_attn_scalar).
    const bool is_27b = (a == "gemma2" && c.num_hidden_layers == 46) ||
                        (a == "gemma3" && c.num_hidden_layers == 62);
    if (is_27b) {
      c.attention_scale =
          1.0f / std::sqrt(static_cast<float>(c.hidden_size / c.num_attention_heads));
    }
  }
  if (a == "gemma2") {
    for (int i = 0; i < c.num_hidden_layers; i += 2) c.layers[i].sliding_window = window;
  }
  if (a == "gemma3") {
    c.rope_local_theta = 10000.0f;
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      if ((i + 1) % 6 != 0) {
        c.layers[i].sliding_window = window;
        c.layers[i].local_rope = true;
      }
    }
  }
}

void read_token_ids(const GgufFile& file, ModelConfig& c) {
  if (const auto bos = file.get_int("tokenizer.ggml.bos_token_id")) {
    c.bos_token_id = static_cast<int>(*bos);
  }
  if (const auto eos = file.get_int("tokenizer.ggml.eos_token_id")) {
    c.eos_token_ids.push_back(static_cast<int>(*eos));
  }
  if (const auto eot = file.get_int("tokenizer.ggml.eot_token_id")) {
    if (c.eos_token_ids.empty() || c.eos_token_ids[0] != *eot) {
      c.eos_token_ids.push_back(static_cast<int>(*eot));
    }
  }
}

void open_layer(GgufReader& r, const ModelConfig& c, bool permuted_qk, int i,
                LlamaLayerTensors& layer) {
  const int64_t hidden = c.hidden_size;
  const int64_t ffn = c.intermediate_size;
  const int64_t q_rows = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kv_rows = int64_t{c.num_key_value_heads} * c.head_dim;
  const std::string p = "blk." + std::to_string(i) + ".";
  layer.input_norm = r.require(p + "attn_norm.weight", {hidden});
  if (r.file().find_tensor(p + "attn_qkv.weight")) {
    layer.wqkv = r.require(p + "attn_qkv.weight", {q_rows + 2 * kv_rows, hidden});
  } else {
    layer.wq = r.require(p + "attn_q.weight", {q_rows, hidden});
    layer.wk = r.require(p + "attn_k.weight", {kv_rows, hidden});
    layer.wv = r.require(p + "attn_v.weight", {kv_rows, hidden});
    if (permuted_qk) {
      layer.wq = r.unpermute_rows(layer.wq, c.num_attention_heads, c.head_dim);
      layer.wk = r.unpermute_rows(layer.wk, c.num_key_value_heads, c.head_dim);
    }
  }
  if (c.qkv_bias) {
    layer.q_bias = r.require(p + "attn_q.bias", {q_rows});
    layer.k_bias = r.require(p + "attn_k.bias", {kv_rows});
    layer.v_bias = r.require(p + "attn_v.bias", {kv_rows});
    if (permuted_qk) {  // the converter permutes q_proj.bias and k_proj.bias like the weights
      layer.q_bias = r.unpermute_rows(layer.q_bias, c.num_attention_heads, c.head_dim);
      layer.k_bias = r.unpermute_rows(layer.k_bias, c.num_key_value_heads, c.head_dim);
    }
  }
  if (c.qk_norm) {
    layer.q_norm = r.require(p + "attn_q_norm.weight", {c.head_dim});
    layer.k_norm = r.require(p + "attn_k_norm.weight", {c.head_dim});
  }
  layer.wo = r.require(p + "attn_output.weight", {hidden, q_rows});
  if (c.o_bias) layer.o_bias = r.require(p + "attn_output.bias", {hidden});
  if (c.sandwich_norms) {
    layer.post_attention_norm = r.require(p + "post_attention_norm.weight", {hidden});
    layer.post_mlp_norm = r.require(p + "post_ffw_norm.weight", {hidden});
  }
  layer.post_norm = r.require(p + "ffn_norm.weight", {hidden});
  if (r.file().find_tensor(p + "ffn_gate.weight")) {
    layer.w_gate = r.require(p + "ffn_gate.weight", {ffn, hidden});
    layer.w_up = r.require(p + "ffn_up.weight", {ffn, hidden});
  } else {
    layer.w_gate_up = r.require(p + "ffn_up.weight", {2 * ffn, hidden});  // Phi-3: fused
  }
  layer.w_down = r.require(p + "ffn_down.weight", {hidden, ffn});
  if (c.mlp_bias) {  // Llama mlp_bias
    layer.gate_bias = r.require(p + "ffn_gate.bias", {ffn});
    layer.up_bias = r.require(p + "ffn_up.bias", {ffn});
    layer.down_bias = r.require(p + "ffn_down.bias", {hidden});
  }
}

}  // namespace

LlamaCheckpoint open_gguf_checkpoint(const std::filesystem::path& gguf_file) {
  LlamaCheckpoint checkpoint;
  checkpoint.gguf = GgufFile::open(gguf_file);
  checkpoint.gguf_path = gguf_file;
  const GgufFile& file = *checkpoint.gguf;
  const std::string arch = file.get_string("general.architecture").value_or("");
  const ArchInfo* info = nullptr;
  std::string supported;
  for (const ArchInfo& candidate : kArchs) {
    if (arch == candidate.gguf_name) info = &candidate;
    supported += (supported.empty() ? "" : ", ") + std::string(candidate.gguf_name);
  }
  if (info == nullptr) {
    throw ModelError(gguf_file.string() + ": unsupported general.architecture '" + arch +
                     "' (pagedserve reads " + supported + ")");
  }
  if (file.tensors().empty()) {
    throw ModelError(gguf_file.string() +
                     ": holds no tensors (a vocabulary-only GGUF file? it can be read by "
                     "`pagedserve tokenize`, not served)");
  }
  GgufReader r(checkpoint, file, arch);
  ModelConfig& c = checkpoint.config;
  c.architecture = info->architecture;
  c.model_type = arch;
  read_sizes(r, c);
  read_rope_scaling(r, c);
  read_family(r, c);
  read_token_ids(file, c);

  const GgufTensor* embed = file.find_tensor("token_embd.weight");
  if (embed == nullptr) r.fail("missing tensor token_embd.weight");
  const std::vector<int64_t> embed_shape = embed->shape();
  if (embed_shape.size() != 2) r.fail("tensor token_embd.weight is not a matrix");
  c.vocab_size = static_cast<int>(embed_shape[0]);
  const int64_t hidden = c.hidden_size;
  checkpoint.embed_tokens = r.require("token_embd.weight", {c.vocab_size, hidden});
  c.torch_dtype = torch_dtype_name(checkpoint.embed_tokens->dtype);
  // Biases are announced by their tensors in GGUF.
  c.qkv_bias = c.qkv_bias || file.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.o_bias = file.find_tensor("blk.0.attn_output.bias") != nullptr;
  c.mlp_bias = file.find_tensor("blk.0.ffn_down.bias") != nullptr;
  validate_model_config(c, gguf_file.string());

  for (int i = 0; i < c.num_hidden_layers; ++i) {
    open_layer(r, c, info->permuted_qk, i, checkpoint.layers.emplace_back());
  }
  checkpoint.final_norm = r.require("output_norm.weight", {hidden});
  checkpoint.lm_head = r.optional("output.weight", {c.vocab_size, hidden});
  c.tie_word_embeddings = checkpoint.lm_head == nullptr;

  const int64_t half = c.rope_dims() / 2;
  if (const TensorView* divisors = r.optional("rope_freqs.weight", {half})) {
    c.rope_scaling.freq_divisors = to_f32(*divisors);
  }
  if (const TensorView* long_factors = r.optional("rope_factors_long.weight", {half})) {
    RopeScaling& s = c.rope_scaling;
    s.type = RopeScaling::Type::kLongRope;
    s.short_factor = to_f32(*r.require("rope_factors_short.weight", {half}));
    s.long_factor = to_f32(*long_factors);
    if (s.original_max_position_embeddings <= 0) {
      r.fail("rope_factors_long.weight without rope.scaling.original_context_length");
    }
    s.factor = static_cast<double>(c.max_position_embeddings) / s.original_max_position_embeddings;
    s.attention_factor = r.arch_float("rope.scaling.attn_factor").value_or(0.0);
  }
  return checkpoint;
}

}  // namespace pagedserve::model
