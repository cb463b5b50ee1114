// Synthetic checkpoints for benchmarks, experiments and loader tests: random weights
// (deterministic by seed) of any model family of issue 15, written either in the Hugging Face
// layout (config.json, model.safetensors, tokenizer.json, tokenizer_config.json) or as one GGUF
// file the way llama.cpp's convert_hf_to_gguf.py would have converted that folder, so that
// every loader and tool reads them like a downloaded model. Weight values do not change the
// speed of a forward pass, so a model of the right shape is all a throughput benchmark needs;
// the two formats of one spec hold the same weights, so they must give the same logits.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "model/loader/safetensors.h"

namespace pagedserve::model {

// The families `make-model --arch` writes. kLlama3 is Llama with Llama 3.1 rope_scaling;
// kMistral is Mistral with a sliding window on every layer.
enum class SyntheticFamily {
  kLlama,
  kLlama3,
  kMistral,
  kQwen2,
  kQwen3,
  kPhi3,
  kGemma2,
  kGemma3,
  kSmolLM3
};

// "llama", "llama3", ... as --arch spells them.
const char* synthetic_family_name(SyntheticFamily family);
std::optional<SyntheticFamily> parse_synthetic_family(std::string_view name);
std::string synthetic_family_names();  // "llama, llama3, ..." for help and errors

struct SyntheticModelSpec {
  SyntheticFamily family = SyntheticFamily::kLlama;
  int hidden_size = 768;
  int num_layers = 12;
  int num_heads = 12;
  int num_kv_heads = 12;
  int head_dim = 0;  // 0 = hidden_size / num_heads
  int intermediate_size = 2048;
  int vocab_size = 32000;
  int max_position_embeddings = 4096;
  // Mistral, Phi-3, Gemma 2 and 3: the window of their sliding layers. Qwen2/Qwen3 write it
  // with use_sliding_window false, as their released configs do.
  int sliding_window = 4096;
  // Norm weights are 1 + uniform(+-norm_jitter) (Gemma stores the w of its 1 + w); 0 keeps
  // them exactly 1, as before families existed. Tests set it so that every norm matters.
  float norm_jitter = 0.0f;
  DType dtype = DType::F32;
  uint64_t seed = 0;
};

// The head size the spec describes (head_dim, or hidden / heads).
int synthetic_head_dim(const SyntheticModelSpec& spec);

// Checks the spec (positive sizes, kv heads dividing heads, an even head_dim for RoPE, a head
// size of hidden / heads for the families whose config has no head_dim key, a vocabulary of at
// least 258 tokens: 256 bytes, one special, one merge). Throws std::invalid_argument naming
// the bad field.
void validate(const SyntheticModelSpec& spec);

// Writes the model in Hugging Face layout into `dir` (created if missing; existing files of
// the same names are replaced). Weights are uniform in +-sqrt(3 / fan_in) (unit-variance
// activations through every linear layer), biases uniform in +-0.5, and the same spec always
// produces the same bytes (the default Llama spec the same bytes as before families existed).
// config.json has each family's real keys. The tokenizer is a byte-level BPE of exactly
// vocab_size ids: id 0 is <|endoftext|> (BOS and EOS), ids 1..256 the bytes, the rest merges
// of earlier tokens picked by a fixed generator (they need not mean anything, but every text
// round-trips). Throws std::runtime_error when a file cannot be written.
void write_synthetic_model(const std::filesystem::path& dir, const SyntheticModelSpec& spec);

// Writes the same model as one GGUF v3 file, as convert_hf_to_gguf.py converts the folder
// write_synthetic_model writes: general.architecture (llama for Llama and Mistral), the
// {arch}.* hyperparameters, llama.cpp's tensor names, Q/K rows permuted for llama.cpp's RoPE
// in llama-architecture files, Gemma norms stored as 1 + w, 1-D tensors in F32, Llama 3's
// rope_freqs and Phi-3's rope_factors_long/short tensors, and the tokenizer as gpt2 metadata.
// The whole file is built in memory before it is written (GgufWriter). Throws
// std::runtime_error when the file cannot be written.
void write_synthetic_gguf(const std::filesystem::path& file, const SyntheticModelSpec& spec);

}  // namespace pagedserve::model
