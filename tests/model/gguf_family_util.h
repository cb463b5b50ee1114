// Helpers of the GGUF family tests (gguf_family_test.cpp, gguf_conversion_test.cpp): a random
// batch schedule (1-3 prompt chunks then decode, sequences joining mid-run, shuffled block
// tables) run on two models whose logits must agree, the tiny make-model spec of each family,
// and the config fields a Hugging Face folder and its GGUF file must agree on.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "model/llama_model.h"
#include "model/loader/llama_weights.h"
#include "model/synthetic_model.h"
#include "tests/model/loader/loader_test_util.h"

namespace pagedserve::model::gguf_family {

using model::testing::TempDir;

// ---- A random batch schedule, run on two models ----

struct RunSpec {
  int num_seqs = 4;
  int min_len = 1;
  int max_len = 20;
  int block_size = 4;
  uint32_t seed = 1;
};

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int> chunks;  // tokens per forward: 1-3 prompt chunks, then 1 per decode step
  int start_step = 0;
  std::vector<int32_t> table;
};

struct Schedule {
  std::vector<Seq> seqs;
  int num_blocks = 0;
  int block_size = 4;
};

inline std::vector<int> chunks_for(int length, std::mt19937& rng) {
  const int prompt = std::uniform_int_distribution<int>(1, length)(rng);
  const int pieces = std::min(std::uniform_int_distribution<int>(1, 3)(rng), prompt);
  std::vector<int> cuts(prompt - 1);
  std::iota(cuts.begin(), cuts.end(), 1);
  std::shuffle(cuts.begin(), cuts.end(), rng);
  cuts.resize(pieces - 1);
  cuts.push_back(prompt);
  std::sort(cuts.begin(), cuts.end());
  std::vector<int> chunks;
  int done = 0;
  for (int cut : cuts) chunks.push_back(cut - std::exchange(done, cut));
  for (int i = prompt; i < length; ++i) chunks.push_back(1);
  return chunks;
}

inline Schedule make_schedule(int vocab, const RunSpec& spec) {
  std::mt19937 rng(spec.seed);
  Schedule s;
  s.block_size = spec.block_size;
  s.seqs.resize(spec.num_seqs);
  int blocks_needed = 0;
  for (size_t i = 0; i < s.seqs.size(); ++i) {
    Seq& q = s.seqs[i];
    q.tokens.resize(std::uniform_int_distribution<int>(spec.min_len, spec.max_len)(rng));
    for (int32_t& t : q.tokens) t = std::uniform_int_distribution<int>(0, vocab - 1)(rng);
    q.chunks = chunks_for(static_cast<int>(q.tokens.size()), rng);
    q.start_step = i == 0 ? 0 : std::uniform_int_distribution<int>(0, 2)(rng);
    blocks_needed += (static_cast<int>(q.tokens.size()) + s.block_size - 1) / s.block_size;
  }
  s.num_blocks = 2 * blocks_needed + 3;
  std::vector<int32_t> free_blocks(s.num_blocks);
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  for (Seq& q : s.seqs) {
    const int n = (static_cast<int>(q.tokens.size()) + s.block_size - 1) / s.block_size;
    q.table.assign(free_blocks.end() - n, free_blocks.end());
    free_blocks.resize(free_blocks.size() - n);
  }
  return s;
}

// Logits of every forward's rows, keyed by (sequence, position).
inline std::map<std::pair<int, int>, std::vector<float>> run(const LlamaModel& model,
                                                             const Schedule& s) {
  const ModelConfig& c = model.config();
  PagedKvCache cache(c.num_hidden_layers, s.num_blocks, s.block_size, c.num_key_value_heads,
                     c.head_dim);
  std::vector<size_t> next_chunk(s.seqs.size(), 0);
  std::vector<int> computed(s.seqs.size(), 0);
  std::map<std::pair<int, int>, std::vector<float>> logits_at;
  for (int step = 0;; ++step) {
    ForwardBatch batch;
    std::vector<std::pair<int, int>> rows;
    bool unfinished = false;
    for (size_t i = 0; i < s.seqs.size(); ++i) {
      const Seq& q = s.seqs[i];
      if (next_chunk[i] == q.chunks.size()) continue;
      unfinished = true;
      if (step < q.start_step) continue;
      const int chunk = q.chunks[next_chunk[i]++];
      batch.add_sequence({q.tokens.begin() + computed[i], q.tokens.begin() + computed[i] + chunk},
                         computed[i], q.table, s.block_size, true);
      computed[i] += chunk;
      rows.emplace_back(static_cast<int>(i), computed[i] - 1);
    }
    if (!unfinished) break;
    if (rows.empty()) continue;
    const std::vector<float> logits = model.forward(batch, cache);
    const size_t vocab = logits.size() / rows.size();
    for (size_t r = 0; r < rows.size(); ++r) {
      logits_at[rows[r]].assign(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
    }
  }
  return logits_at;
}

constexpr double kTolerance = 2e-5;  // relative to the row's largest |logit| (at least 1)

inline void expect_same_logits(const LlamaModel& hf, const LlamaModel& gguf, const RunSpec& spec) {
  const Schedule schedule = make_schedule(hf.config().vocab_size, spec);
  const auto want = run(hf, schedule);
  const auto got = run(gguf, schedule);
  ASSERT_EQ(want.size(), got.size());
  for (const auto& [where, row] : want) {
    const std::vector<float>& other = got.at(where);
    ASSERT_EQ(row.size(), other.size());
    double scale = 1.0, worst = 0.0;
    size_t worst_index = 0;
    for (size_t i = 0; i < row.size(); ++i) {
      scale = std::max(scale, std::abs(static_cast<double>(row[i])));
      const double diff = std::abs(static_cast<double>(row[i]) - other[i]);
      if (diff > worst) worst = diff, worst_index = i;
    }
    ASSERT_LE(worst, kTolerance * scale)
        << "seq " << where.first << " pos " << where.second << ": logit " << worst_index << " HF "
        << row[worst_index] << " GGUF " << other[worst_index] << " (seed " << spec.seed << ", "
        << spec.num_seqs << " seqs)";
  }
}

// ---- make-model's two formats ----

inline SyntheticModelSpec tiny_spec(SyntheticFamily family, uint64_t seed) {
  SyntheticModelSpec s;
  s.family = family;
  s.hidden_size = 48;
  s.num_layers = 2;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.intermediate_size = 64;
  s.vocab_size = 300;
  s.max_position_embeddings = 256;
  s.sliding_window = 5;  // shorter than most sequences here
  s.norm_jitter = 0.25f;
  s.seed = seed;
  if (family == SyntheticFamily::kGemma2 || family == SyntheticFamily::kSmolLM3) {
    s.num_layers = 4;  // Gemma 2 alternates windows; SmolLM3 drops RoPE in layer 3
  }
  if (family == SyntheticFamily::kGemma3) s.num_layers = 6;  // five local, one global
  if (family == SyntheticFamily::kQwen3 || family == SyntheticFamily::kGemma3) {
    s.head_dim = 16;  // an explicit head_dim that is not hidden / heads
  }
  return s;
}

struct BothFormats {
  TempDir dir;
  std::filesystem::path hf;
  std::filesystem::path gguf;
};

inline std::unique_ptr<BothFormats> write_both(const SyntheticModelSpec& spec) {
  auto both = std::make_unique<BothFormats>();
  both->hf = both->dir.path() / "hf";
  both->gguf = both->dir.path() / "model.gguf";
  write_synthetic_model(both->hf, spec);
  write_synthetic_gguf(both->gguf, spec);
  return both;
}

// The parts of the two configs that must agree (GGUF carries no architecture class name for
// Mistral, and its dtype comes from the embedding tensor).
inline void expect_same_config(const ModelConfig& hf, const ModelConfig& gguf) {
  EXPECT_EQ(hf.hidden_size, gguf.hidden_size);
  EXPECT_EQ(hf.num_hidden_layers, gguf.num_hidden_layers);
  EXPECT_EQ(hf.num_attention_heads, gguf.num_attention_heads);
  EXPECT_EQ(hf.num_key_value_heads, gguf.num_key_value_heads);
  EXPECT_EQ(hf.head_dim, gguf.head_dim);
  EXPECT_EQ(hf.intermediate_size, gguf.intermediate_size);
  EXPECT_EQ(hf.vocab_size, gguf.vocab_size);
  EXPECT_EQ(hf.tie_word_embeddings, gguf.tie_word_embeddings);
  EXPECT_EQ(hf.max_position_embeddings, gguf.max_position_embeddings);
  EXPECT_EQ(hf.rope_dims(), gguf.rope_dims());
  EXPECT_FLOAT_EQ(hf.rope_theta, gguf.rope_theta);
  EXPECT_FLOAT_EQ(hf.rms_norm_eps, gguf.rms_norm_eps);
  EXPECT_EQ(hf.activation, gguf.activation);
  EXPECT_EQ(hf.qkv_bias, gguf.qkv_bias);
  EXPECT_EQ(hf.qk_norm, gguf.qk_norm);
  EXPECT_EQ(hf.sandwich_norms, gguf.sandwich_norms);
  EXPECT_FLOAT_EQ(hf.softmax_scale(), gguf.softmax_scale());
  EXPECT_FLOAT_EQ(hf.attn_logit_softcap, gguf.attn_logit_softcap);
  EXPECT_FLOAT_EQ(hf.final_logit_softcap, gguf.final_logit_softcap);
  EXPECT_EQ(hf.bos_token_id, gguf.bos_token_id);
  EXPECT_EQ(hf.eos_token_ids, gguf.eos_token_ids);
  ASSERT_EQ(hf.layers.size(), gguf.layers.size());
  for (size_t i = 0; i < hf.layers.size(); ++i) {
    EXPECT_EQ(hf.layers[i].sliding_window, gguf.layers[i].sliding_window) << "layer " << i;
    EXPECT_EQ(hf.layers[i].use_rope, gguf.layers[i].use_rope) << "layer " << i;
    EXPECT_EQ(hf.layers[i].local_rope, gguf.layers[i].local_rope) << "layer " << i;
  }
}

}  // namespace pagedserve::model::gguf_family
