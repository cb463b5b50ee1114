// write_synthetic_gguf: the synthetic model as llama.cpp's convert_hf_to_gguf.py would write
// it from the Hugging Face folder of the same spec. What the converter does, per family
// (LlamaModel, Qwen2Model, Qwen3Model, Phi3MiniModel, Gemma2Model, Gemma3Model, SmolLM3Model):
// - metadata: TextModel.set_gguf_parameters' keys (block_count, context_length, ...,
//   key_length/value_length only when config.json has head_dim) plus each class's own;
// - tensors: llama.cpp names; Q/K rows permuted (LlamaModel.permute) for llama and smollm3;
//   Gemma norms + 1; 1-D tensors F32, matrices in the model dtype; generated tensors first
//   (Llama 3's rope_freqs, Phi-3's rope_factors_long/short);
// - tokenizer: _set_vocab_gpt2 (model gpt2, tokens, token types, merges) and SpecialVocab
//   (bos/eos ids, add_bos_token from tokenizer_config.json).
// Mistral gets one key the converter does not write: llama.attention.sliding_window, so that
// the file keeps the window its config.json has (llama.cpp's llama architecture has none).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "model/loader/gguf.h"
#include "model/synthetic_model.h"
#include "model/synthetic_parts.h"

namespace pagedserve::model {
namespace {

using synthetic::FamilyTraits;
using synthetic::TensorSpec;

// llama.cpp's LlamaFileType for the dtype of the matrices.
uint32_t file_type(DType dtype) {
  switch (dtype) {
    case DType::F16:
      return 1;  // MOSTLY_F16
    case DType::BF16:
      return 32;  // MOSTLY_BF16
    default:  // F32
      break;
  }
  return 0;  // ALL_F32
}

GgmlType ggml_type(DType dtype) {
  switch (dtype) {
    case DType::F16:
      return GgmlType::kF16;
    case DType::BF16:
      return GgmlType::kBF16;
    default:  // F32
      break;
  }
  return GgmlType::kF32;
}

std::vector<std::byte> encode(DType dtype, const std::vector<float>& values) {
  std::vector<std::byte> bytes(values.size() * synthetic::element_bytes(dtype));
  synthetic::encode_values(dtype, values.data(), values.size(), bytes.data());
  return bytes;
}

// LlamaModel.permute: within each head of d rows, row h*d + 2i + half of the result is row
// h*d + half*d/2 + i of the input (the two RoPE halves interleaved).
std::vector<float> permute_rows(const std::vector<float>& values, int64_t rows, int num_heads) {
  const int64_t cols = static_cast<int64_t>(values.size()) / rows;
  const int64_t head_dim = rows / num_heads;
  std::vector<float> out(values.size());
  for (int64_t h = 0; h < num_heads; ++h) {
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      for (int64_t half = 0; half < 2; ++half) {
        const int64_t to = h * head_dim + 2 * i + half;
        const int64_t from = h * head_dim + half * (head_dim / 2) + i;
        std::copy_n(values.begin() + from * cols, cols, out.begin() + to * cols);
      }
    }
  }
  return out;
}

void add_hyperparameters(GgufWriter& w, const SyntheticModelSpec& s, const FamilyTraits& t) {
  const std::string a = std::string(t.gguf_arch) + ".";
  const int head_dim = synthetic_head_dim(s);
  const auto u32 = [](int value) { return static_cast<uint32_t>(value); };
  w.add_uint32(a + "context_length", u32(s.max_position_embeddings));
  w.add_uint32(a + "embedding_length", u32(s.hidden_size));
  w.add_uint32(a + "block_count", u32(s.num_layers));
  w.add_uint32(a + "feed_forward_length", u32(s.intermediate_size));
  w.add_uint32(a + "attention.head_count", u32(s.num_heads));
  w.add_uint32(a + "attention.head_count_kv", u32(s.num_kv_heads));
  // Gemma2Model writes no rope_theta (its config's is the default 10000).
  if (s.family != SyntheticFamily::kGemma2) {
    w.add_float32(a + "rope.freq_base", static_cast<float>(t.rope_theta));
  }
  w.add_float32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(t.rms_norm_eps));
  if (t.head_dim_key) {
    w.add_uint32(a + "attention.key_length", u32(head_dim));
    w.add_uint32(a + "attention.value_length", u32(head_dim));
  }
  if (t.permuted_qk) {  // LlamaModel (also SmolLM3Model)
    w.add_uint32(a + "vocab_size", u32(s.vocab_size));
    w.add_uint32(a + "rope.dimension_count", u32(head_dim));
  }
  w.add_uint32("general.file_type", file_type(s.dtype));
  switch (s.family) {
    case SyntheticFamily::kMistral:
      w.add_uint32(a + "attention.sliding_window", u32(s.sliding_window));
      break;
    case SyntheticFamily::kPhi3: {
      const int original = synthetic::phi3_original_context(s);
      w.add_uint32(a + "rope.scaling.original_context_length", u32(original));
      w.add_uint32(a + "rope.dimension_count", u32(head_dim));
      w.add_uint32(a + "attention.sliding_window", u32(s.sliding_window));
      const double scale = static_cast<double>(s.max_position_embeddings) / original;
      const double attn_factor =
          scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log(original)) : 1.0;
      w.add_float32(a + "rope.scaling.attn_factor", static_cast<float>(attn_factor));
      break;
    }
    case SyntheticFamily::kGemma2:
      w.add_float32(a + "attn_logit_softcapping",
                    static_cast<float>(synthetic::kGemma2AttnSoftcap));
      w.add_float32(a + "final_logit_softcapping",
                    static_cast<float>(synthetic::kGemma2FinalSoftcap));
      w.add_uint32(a + "attention.sliding_window", u32(s.sliding_window));
      break;
    case SyntheticFamily::kGemma3:
      w.add_string(a + "rope.scaling.type", "linear");
      w.add_float32(a + "rope.scaling.factor", static_cast<float>(synthetic::kGemma3LinearFactor));
      w.add_uint32(a + "attention.sliding_window", u32(s.sliding_window));
      break;
    default:
      break;
  }
}

void add_tokenizer(GgufWriter& w, const SyntheticModelSpec& s) {
  const synthetic::ByteLevelVocab bpe = synthetic::byte_level_vocab(s.vocab_size);
  constexpr int32_t kNormal = 1, kControl = 3;  // llama.cpp's token types
  std::vector<int32_t> types(bpe.tokens.size(), kNormal);
  types[0] = kControl;  // <|endoftext|>, a special added token
  std::vector<std::string> merges;
  merges.reserve(bpe.merges.size());
  for (const auto& [left, right] : bpe.merges) merges.push_back(left + " " + right);
  w.add_string("tokenizer.ggml.model", "gpt2");
  // The tokenizer.json pre-tokenizer is ByteLevel with GPT-2's regex: llama.cpp's "gpt-2".
  w.add_string("tokenizer.ggml.pre", "gpt-2");
  w.add_string_array("tokenizer.ggml.tokens", bpe.tokens);
  w.add_int32_array("tokenizer.ggml.token_type", types);
  w.add_string_array("tokenizer.ggml.merges", merges);
  w.add_uint32("tokenizer.ggml.bos_token_id", 0);
  w.add_uint32("tokenizer.ggml.eos_token_id", 0);
  w.add_bool("tokenizer.ggml.add_bos_token", false);
}

// The converter's generate_extra_tensors, written before the checkpoint's tensors.
void add_generated_tensors(GgufWriter& w, const SyntheticModelSpec& s) {
  const int64_t half = synthetic_head_dim(s) / 2;
  if (s.family == SyntheticFamily::kLlama3) {
    w.add_tensor("rope_freqs.weight", GgmlType::kF32, {half},
                 encode(DType::F32, synthetic::llama3_rope_divisors(s)));
  }
  if (s.family == SyntheticFamily::kPhi3) {
    for (const bool is_long : {true, false}) {
      const std::vector<double> factors = synthetic::phi3_rope_factors(s, is_long);
      w.add_tensor(is_long ? "rope_factors_long.weight" : "rope_factors_short.weight",
                   GgmlType::kF32, {half},
                   encode(DType::F32, std::vector<float>(factors.begin(), factors.end())));
    }
  }
}

// One checkpoint tensor: rounded to the model dtype first (that is what the folder holds),
// then converted as the converter converts it.
void add_checkpoint_tensor(GgufWriter& w, const SyntheticModelSpec& s, const FamilyTraits& t,
                           size_t index, const TensorSpec& tensor) {
  std::vector<float> values = synthetic::tensor_values(s, index, tensor);
  for (float& v : values) v = synthetic::round_to_dtype(s.dtype, v);
  if (tensor.shape.size() == 1) {  // norms and biases: F32, Gemma's norms as 1 + w
    if (t.gemma && tensor.kind == synthetic::TensorKind::kNorm) {
      for (float& v : values) v += 1.0f;
    }
    w.add_tensor(tensor.gguf_name, GgmlType::kF32, tensor.shape, encode(DType::F32, values));
    return;
  }
  if (t.permuted_qk && tensor.rope_rows != synthetic::RopeRows::kNone) {
    const int heads =
        tensor.rope_rows == synthetic::RopeRows::kQuery ? s.num_heads : s.num_kv_heads;
    values = permute_rows(values, tensor.shape[0], heads);
  }
  w.add_tensor(tensor.gguf_name, ggml_type(s.dtype), tensor.shape, encode(s.dtype, values));
}

}  // namespace

void write_synthetic_gguf(const std::filesystem::path& file, const SyntheticModelSpec& spec) {
  validate(spec);
  const FamilyTraits& t = synthetic::traits(spec.family);
  GgufWriter w;
  w.add_string("general.architecture", t.gguf_arch);
  w.add_string("general.type", "model");
  w.add_string("general.name", std::string("pagedserve synthetic ") + t.name);
  add_hyperparameters(w, spec, t);
  add_tokenizer(w, spec);
  w.add_uint32("general.quantization_version", 2);
  add_generated_tensors(w, spec);
  const std::vector<TensorSpec> specs = synthetic::tensor_specs(spec);
  for (size_t index = 0; index < specs.size(); ++index) {
    add_checkpoint_tensor(w, spec, t, index, specs[index]);
  }
  if (file.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(file.parent_path(), ec);
    if (ec) {
      throw std::runtime_error(file.parent_path().string() +
                               ": cannot create directory: " + ec.message());
    }
  }
  w.write(file);
}

}  // namespace pagedserve::model
