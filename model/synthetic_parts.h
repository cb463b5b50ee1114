// What the Hugging Face and GGUF writers of synthetic models share (model/synthetic_model.cpp,
// model/synthetic_gguf.cpp): each family's traits, the list of tensors with both formats'
// names, the seeded values of each tensor, dtype encoding, the byte-level BPE vocabulary and
// the RoPE scaling parameters. Internal to the two writers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/synthetic_model.h"

namespace pagedserve::model::synthetic {

struct FamilyTraits {
  SyntheticFamily family;
  const char* name;          // make-model --arch
  const char* architecture;  // config.json "architectures"
  const char* model_type;    // config.json "model_type"
  const char* gguf_arch;     // general.architecture, as llama.cpp's converter names it
  double rope_theta;
  double rms_norm_eps;
  bool tied;          // tie_word_embeddings: no lm_head / output tensor
  bool head_dim_key;  // config.json has head_dim (so the converter writes key_length)
  bool qkv_bias;      // Qwen2
  bool qk_norm;       // Qwen3, Gemma 3
  bool fused;         // Phi-3: qkv_proj and gate_up_proj
  bool gemma;         // four norms per layer, stored as w for (1 + w)
  bool permuted_qk;   // llama-architecture GGUF: the converter permutes Q/K rows
};
const FamilyTraits& traits(SyntheticFamily family);

enum class TensorKind { kEmbedding, kMatrix, kNorm, kBias };
enum class RopeRows { kNone, kQuery, kKey };  // rows llama.cpp's permute() reorders

struct TensorSpec {
  std::string hf_name;
  std::string gguf_name;
  std::vector<int64_t> shape;  // row-major, as in safetensors
  TensorKind kind;
  int64_t fan_in;  // matrices: the uniform bound is sqrt(3 / fan_in)
  RopeRows rope_rows = RopeRows::kNone;
};

// In Hugging Face file order; the index in this list keys each tensor's random stream.
std::vector<TensorSpec> tensor_specs(const SyntheticModelSpec& spec);

// The values of tensor `index` as Hugging Face stores them, before rounding to spec.dtype.
std::vector<float> tensor_values(const SyntheticModelSpec& spec, size_t index,
                                 const TensorSpec& tensor);

size_t element_bytes(DType dtype);
// Little-endian `dtype` encodings of `count` values (round to nearest even).
void encode_values(DType dtype, const float* values, size_t count, std::byte* out);
float round_to_dtype(DType dtype, float value);

inline constexpr const char* kEndOfText = "<|endoftext|>";

// The byte-level BPE: tokens[id] in GPT-2's byte-to-unicode alphabet (id 0 <|endoftext|>),
// merges in priority order. The same for every model of one vocabulary size.
struct ByteLevelVocab {
  std::vector<std::string> tokens;
  std::vector<std::pair<std::string, std::string>> merges;
};
ByteLevelVocab byte_level_vocab(int vocab_size);

// Llama 3.1's rope_scaling (llama3 family).
struct Llama3Scaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};
// What convert_hf_to_gguf.py writes as rope_freqs for that scaling: a divisor per frequency,
// computed in float32 as the converter's torch code does. [head_dim / 2]
std::vector<float> llama3_rope_divisors(const SyntheticModelSpec& spec);

// Phi-3 longrope: the pretrained context (a quarter of max_position_embeddings, so the
// scaled regime is in use) and seeded short/long factors. [head_dim / 2]
int phi3_original_context(const SyntheticModelSpec& spec);
std::vector<double> phi3_rope_factors(const SyntheticModelSpec& spec, bool long_factors);

constexpr double kGemma3RopeLocalBase = 10000.0;  // rope_local_base_freq (llama.cpp's too)
constexpr double kGemma3LinearFactor = 8.0;       // rope_scaling of the 4B+ models
constexpr double kGemma2AttnSoftcap = 50.0;
constexpr double kGemma2FinalSoftcap = 30.0;
constexpr int kSmolLM3NoRopeInterval = 4;  // every fourth layer has no RoPE

}  // namespace pagedserve::model::synthetic
