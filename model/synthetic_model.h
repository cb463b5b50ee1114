// Synthetic Llama checkpoints for benchmarks and experiments: random weights (deterministic by
// seed) written in the Hugging Face layout (config.json, model.safetensors, tokenizer.json,
// tokenizer_config.json) so that every loader and tool reads them like a downloaded model.
// Weight values do not change the speed of a forward pass, so a model of the right shape is
// all a throughput benchmark needs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "model/loader/safetensors.h"

namespace pagedserve::model {

struct SyntheticModelSpec {
  int hidden_size = 768;
  int num_layers = 12;
  int num_heads = 12;
  int num_kv_heads = 12;
  int intermediate_size = 2048;
  int vocab_size = 32000;
  int max_position_embeddings = 4096;
  DType dtype = DType::F32;
  uint64_t seed = 0;
};

// Checks the spec (positive sizes, heads dividing hidden and kv heads dividing heads, an even
// head_dim for RoPE, a vocabulary of at least 258 tokens: 256 bytes, one special, one merge).
// Throws std::invalid_argument naming the bad field.
void validate(const SyntheticModelSpec& spec);

// Writes the model into `dir` (created if missing; existing files of the same names are
// replaced). Weights are uniform in +-sqrt(3 / fan_in) (unit-variance activations through
// every linear layer), norms are 1, and the same spec always produces the same bytes.
// The tokenizer is a byte-level BPE of exactly vocab_size ids: id 0 is <|endoftext|> (BOS and
// EOS), ids 1..256 the bytes, the rest merges of earlier tokens picked by a fixed generator
// (they need not mean anything, but every text round-trips). Throws std::runtime_error when a
// file cannot be written.
void write_synthetic_model(const std::filesystem::path& dir, const SyntheticModelSpec& spec);

}  // namespace pagedserve::model
