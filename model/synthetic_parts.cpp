// The pieces both synthetic-model writers share: family traits, the tensor list with Hugging
// Face and llama.cpp names, seeded values, dtype encoding, the byte-level vocabulary and the
// RoPE scaling parameters. Every random value comes from splitmix64 streams keyed by (seed,
// tensor index), so the bytes depend on the spec alone, never on the standard library's
// distributions.
#include "model/synthetic_parts.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <unordered_set>

namespace pagedserve::model::synthetic {
namespace {

constexpr int kMaxMergedBytes = 8;  // keeps generated tokens word-sized
constexpr float kBiasBound = 0.5f;

using F = SyntheticFamily;
// name, architecture, model_type, gguf arch, rope_theta, rms eps, tied, head_dim key,
// qkv_bias, qk_norm, fused, gemma, permuted_qk
constexpr FamilyTraits kTraits[] = {
    {F::kLlama, "llama", "LlamaForCausalLM", "llama", "llama", 10000.0, 1e-5, false, true, false,
     false, false, false, true},
    {F::kLlama3, "llama3", "LlamaForCausalLM", "llama", "llama", 500000.0, 1e-5, false, true, false,
     false, false, false, true},
    {F::kMistral, "mistral", "MistralForCausalLM", "mistral", "llama", 1000000.0, 1e-5, false, true,
     false, false, false, false, true},
    {F::kQwen2, "qwen2", "Qwen2ForCausalLM", "qwen2", "qwen2", 1000000.0, 1e-6, true, false, true,
     false, false, false, false},
    {F::kQwen3, "qwen3", "Qwen3ForCausalLM", "qwen3", "qwen3", 1000000.0, 1e-6, true, true, false,
     true, false, false, false},
    {F::kPhi3, "phi3", "Phi3ForCausalLM", "phi3", "phi3", 10000.0, 1e-5, false, false, false, false,
     true, false, false},
    {F::kGemma2, "gemma2", "Gemma2ForCausalLM", "gemma2", "gemma2", 10000.0, 1e-6, true, true,
     false, false, false, true, false},
    {F::kGemma3, "gemma3", "Gemma3ForCausalLM", "gemma3_text", "gemma3", 1000000.0, 1e-6, true,
     true, false, true, false, true, false},
    {F::kSmolLM3, "smollm3", "SmolLM3ForCausalLM", "smollm3", "smollm3", 5000000.0, 1e-6, true,
     false, false, false, false, false, true},
};

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

float unit_uniform(uint64_t& state) {  // [0, 1)
  return static_cast<float>(splitmix64(state) >> 40) * 0x1.0p-24f;
}

// float -> IEEE half, round to nearest even (the weights are small and finite).
uint16_t to_f16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = bits & 0x7fffffu;
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow: infinity
  if (exponent <= 0) {                                               // subnormal or zero
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    const int shift = 14 - exponent;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry into exponent
  return static_cast<uint16_t>(sign | half);
}

float from_f16(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const int exponent = (half >> 10) & 0x1f;
  const uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = static_cast<float>(mantissa) * 0x1.0p-24f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | (static_cast<uint32_t>(exponent - 15 + 127) << 23) |
                              (mantissa << 13));
}

uint16_t to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

uint32_t encode_one(DType dtype, float value) {
  switch (dtype) {
    case DType::F16:
      return to_f16(value);
    case DType::BF16:
      return to_bf16(value);
    default:  // F32
      break;
  }
  return std::bit_cast<uint32_t>(value);
}

void add_layer(std::vector<TensorSpec>& specs, const SyntheticModelSpec& s, const FamilyTraits& t,
               int layer) {
  const int64_t hidden = s.hidden_size;
  const int64_t head_dim = synthetic_head_dim(s);
  const int64_t q_rows = int64_t{s.num_heads} * head_dim;
  const int64_t kv_rows = int64_t{s.num_kv_heads} * head_dim;
  const int64_t ffn = s.intermediate_size;
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  const std::string g = "blk." + std::to_string(layer) + ".";
  auto add = [&](const std::string& hf, const std::string& gguf, std::vector<int64_t> shape,
                 TensorKind kind, int64_t fan_in, RopeRows rows = RopeRows::kNone) {
    specs.push_back({p + hf, g + gguf, std::move(shape), kind, fan_in, rows});
  };
  add("input_layernorm.weight", "attn_norm.weight", {hidden}, TensorKind::kNorm, 0);
  if (t.fused) {
    add("self_attn.qkv_proj.weight", "attn_qkv.weight", {q_rows + 2 * kv_rows, hidden},
        TensorKind::kMatrix, hidden);
  } else {
    add("self_attn.q_proj.weight", "attn_q.weight", {q_rows, hidden}, TensorKind::kMatrix, hidden,
        RopeRows::kQuery);
    add("self_attn.k_proj.weight", "attn_k.weight", {kv_rows, hidden}, TensorKind::kMatrix, hidden,
        RopeRows::kKey);
    add("self_attn.v_proj.weight", "attn_v.weight", {kv_rows, hidden}, TensorKind::kMatrix, hidden);
  }
  if (t.qkv_bias) {
    add("self_attn.q_proj.bias", "attn_q.bias", {q_rows}, TensorKind::kBias, 0);
    add("self_attn.k_proj.bias", "attn_k.bias", {kv_rows}, TensorKind::kBias, 0);
    add("self_attn.v_proj.bias", "attn_v.bias", {kv_rows}, TensorKind::kBias, 0);
  }
  if (t.qk_norm) {
    add("self_attn.q_norm.weight", "attn_q_norm.weight", {head_dim}, TensorKind::kNorm, 0);
    add("self_attn.k_norm.weight", "attn_k_norm.weight", {head_dim}, TensorKind::kNorm, 0);
  }
  add("self_attn.o_proj.weight", "attn_output.weight", {hidden, q_rows}, TensorKind::kMatrix,
      q_rows);
  if (t.gemma) {  // sandwich norms: llama.cpp's ffn_norm is the pre-feedforward one
    add("post_attention_layernorm.weight", "post_attention_norm.weight", {hidden},
        TensorKind::kNorm, 0);
    add("pre_feedforward_layernorm.weight", "ffn_norm.weight", {hidden}, TensorKind::kNorm, 0);
    add("post_feedforward_layernorm.weight", "post_ffw_norm.weight", {hidden}, TensorKind::kNorm,
        0);
  } else {
    add("post_attention_layernorm.weight", "ffn_norm.weight", {hidden}, TensorKind::kNorm, 0);
  }
  if (t.fused) {  // gate rows first, then up; llama.cpp keeps the pair as ffn_up
    add("mlp.gate_up_proj.weight", "ffn_up.weight", {2 * ffn, hidden}, TensorKind::kMatrix, hidden);
  } else {
    add("mlp.gate_proj.weight", "ffn_gate.weight", {ffn, hidden}, TensorKind::kMatrix, hidden);
    add("mlp.up_proj.weight", "ffn_up.weight", {ffn, hidden}, TensorKind::kMatrix, hidden);
  }
  add("mlp.down_proj.weight", "ffn_down.weight", {hidden, ffn}, TensorKind::kMatrix, ffn);
}

}  // namespace

const FamilyTraits& traits(SyntheticFamily family) {
  for (const FamilyTraits& t : kTraits) {
    if (t.family == family) return t;
  }
  throw std::invalid_argument("unknown synthetic family");
}

std::vector<TensorSpec> tensor_specs(const SyntheticModelSpec& s) {
  const FamilyTraits& t = traits(s.family);
  const int64_t hidden = s.hidden_size;
  const int64_t vocab = s.vocab_size;
  // Embeddings get fan_in 1: unit-variance rows, which the first RMSNorm rescales anyway.
  std::vector<TensorSpec> specs{{"model.embed_tokens.weight",
                                 "token_embd.weight",
                                 {vocab, hidden},
                                 TensorKind::kEmbedding,
                                 1}};
  for (int i = 0; i < s.num_layers; ++i) add_layer(specs, s, t, i);
  specs.push_back({"model.norm.weight", "output_norm.weight", {hidden}, TensorKind::kNorm, 0});
  if (!t.tied) {
    specs.push_back(
        {"lm_head.weight", "output.weight", {vocab, hidden}, TensorKind::kMatrix, hidden});
  }
  return specs;
}

std::vector<float> tensor_values(const SyntheticModelSpec& s, size_t index,
                                 const TensorSpec& tensor) {
  int64_t n = 1;
  for (int64_t d : tensor.shape) n *= d;
  std::vector<float> values(static_cast<size_t>(n));
  uint64_t state = s.seed * 0x100000001B3ull + index;
  switch (tensor.kind) {
    case TensorKind::kEmbedding:
    case TensorKind::kMatrix: {
      const auto bound = static_cast<float>(std::sqrt(3.0 / static_cast<double>(tensor.fan_in)));
      for (float& v : values) v = (2.0f * unit_uniform(state) - 1.0f) * bound;
      break;
    }
    case TensorKind::kBias:
      for (float& v : values) v = (2.0f * unit_uniform(state) - 1.0f) * kBiasBound;
      break;
    case TensorKind::kNorm: {
      const float base = traits(s.family).gemma ? 0.0f : 1.0f;  // Gemma multiplies by 1 + w
      for (float& v : values) {
        v = s.norm_jitter == 0.0f ? base
                                  : base + (2.0f * unit_uniform(state) - 1.0f) * s.norm_jitter;
      }
      break;
    }
  }
  return values;
}

size_t element_bytes(DType dtype) { return dtype_size(dtype); }

void encode_values(DType dtype, const float* values, size_t count, std::byte* out) {
  const size_t bytes = element_bytes(dtype);
  for (size_t i = 0; i < count; ++i) {
    const uint32_t bits = encode_one(dtype, values[i]);
    for (size_t b = 0; b < bytes; ++b) {
      out[i * bytes + b] = static_cast<std::byte>((bits >> (8 * b)) & 0xff);
    }
  }
}

float round_to_dtype(DType dtype, float value) {
  switch (dtype) {
    case DType::F16:
      return from_f16(to_f16(value));
    case DType::BF16:
      return std::bit_cast<float>(static_cast<uint32_t>(to_bf16(value)) << 16);
    default:  // F32
      break;
  }
  return value;
}

// GPT-2's byte-to-unicode table: printable bytes stand for themselves, the others are moved
// to U+0100 and up, so every byte is one visible character.
static std::vector<std::string> byte_level_alphabet() {
  std::vector<int> code_point(256, -1);
  for (int b = '!'; b <= '~'; ++b) code_point[b] = b;
  for (int b = 0xA1; b <= 0xAC; ++b) code_point[b] = b;
  for (int b = 0xAE; b <= 0xFF; ++b) code_point[b] = b;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    if (code_point[b] < 0) code_point[b] = next++;
  }
  std::vector<std::string> alphabet;
  for (int cp : code_point) {
    std::string utf8;
    if (cp < 0x80) {
      utf8.push_back(static_cast<char>(cp));
    } else {  // all code points here are below U+0800: two bytes
      utf8.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      utf8.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    alphabet.push_back(utf8);
  }
  return alphabet;
}

ByteLevelVocab byte_level_vocab(int vocab_size) {
  ByteLevelVocab vocab;
  std::vector<int> num_bytes;
  vocab.tokens.push_back(kEndOfText);
  num_bytes.push_back(0);
  for (const std::string& ch : byte_level_alphabet()) {
    vocab.tokens.push_back(ch);
    num_bytes.push_back(1);
  }
  std::unordered_set<std::string> known(vocab.tokens.begin(), vocab.tokens.end());
  // Merges of two earlier tokens. A fixed stream (not the weight seed) so every synthetic model
  // of one vocab size shares its tokenizer.
  uint64_t state = 0x5EED5EED;
  while (static_cast<int>(vocab.tokens.size()) < vocab_size) {
    const int count = static_cast<int>(vocab.tokens.size()) - 1;  // candidates are ids 1..count
    const size_t a = 1 + splitmix64(state) % count;
    const size_t b = 1 + splitmix64(state) % count;
    if (num_bytes[a] + num_bytes[b] > kMaxMergedBytes) continue;
    std::string merged = vocab.tokens[a] + vocab.tokens[b];
    if (!known.insert(merged).second) continue;
    vocab.merges.emplace_back(vocab.tokens[a], vocab.tokens[b]);
    vocab.tokens.push_back(std::move(merged));
    num_bytes.push_back(num_bytes[a] + num_bytes[b]);
  }
  return vocab;
}

std::vector<float> llama3_rope_divisors(const SyntheticModelSpec& spec) {
  const Llama3Scaling scaling;
  const int dim = synthetic_head_dim(spec);
  const auto base = static_cast<float>(traits(spec.family).rope_theta);
  const auto factor = static_cast<float>(scaling.factor);
  const auto low = static_cast<float>(scaling.low_freq_factor);
  const auto high = static_cast<float>(scaling.high_freq_factor);
  const auto old_context = static_cast<float>(scaling.original_max_position_embeddings);
  const float low_freq_wavelen = old_context / low;
  const float high_freq_wavelen = old_context / high;
  std::vector<float> divisors;
  for (int i = 0; i < dim; i += 2) {
    const float freq = 1.0f / std::pow(base, static_cast<float>(i) / static_cast<float>(dim));
    const float wavelen = 2.0f * std::numbers::pi_v<float> / freq;
    if (wavelen < high_freq_wavelen) {
      divisors.push_back(1.0f);
    } else if (wavelen > low_freq_wavelen) {
      divisors.push_back(factor);
    } else {
      const float smooth = (old_context / wavelen - low) / (high - low);
      divisors.push_back(1.0f / ((1.0f - smooth) / factor + smooth));
    }
  }
  return divisors;
}

int phi3_original_context(const SyntheticModelSpec& spec) {
  return std::max(1, spec.max_position_embeddings / 4);
}

std::vector<double> phi3_rope_factors(const SyntheticModelSpec& spec, bool long_factors) {
  // Multiples of 1/64, exact in float and double alike, so both formats read the same value.
  uint64_t state = spec.seed * 0x100000001B3ull + (long_factors ? 0xF00Dull : 0xBEEFull);
  std::vector<double> factors;
  for (int i = 0; i < synthetic_head_dim(spec) / 2; ++i) {
    const uint64_t step = splitmix64(state) % (long_factors ? 321 : 33);
    factors.push_back(1.0 + static_cast<double>(step) / 64.0 + (long_factors ? 0.5 : 0.0));
  }
  return factors;
}

}  // namespace pagedserve::model::synthetic

namespace pagedserve::model {

const char* synthetic_family_name(SyntheticFamily family) { return synthetic::traits(family).name; }

std::optional<SyntheticFamily> parse_synthetic_family(std::string_view name) {
  for (const synthetic::FamilyTraits& t : synthetic::kTraits) {
    if (name == t.name) return t.family;
  }
  return std::nullopt;
}

std::string synthetic_family_names() {
  std::string names;
  for (const synthetic::FamilyTraits& t : synthetic::kTraits) {
    names += (names.empty() ? "" : ", ") + std::string(t.name);
  }
  return names;
}

int synthetic_head_dim(const SyntheticModelSpec& spec) {
  if (spec.head_dim > 0) return spec.head_dim;
  return spec.num_heads > 0 ? spec.hidden_size / spec.num_heads : 0;
}

}  // namespace pagedserve::model
