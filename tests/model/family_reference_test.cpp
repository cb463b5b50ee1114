// Every model family of issue 15, loaded from a Hugging Face folder and run by LlamaModel (paged,
// batched, float32), against HfReference (tests/model/family_reference.h: contiguous K/V, double
// precision, the transformers modeling code's semantics). Batches of 1..8 sequences of mixed
// lengths, prompts fed in 1-3 chunks then decoded token by token, sequences joining mid-run,
// prompts longer than the sliding window, block size 4 with shuffled block tables.
//
// Two RoPE types make the frequencies depend on the length of the transformers forward pass,
// so the sequences here are shaped to where every reading of them agrees:
// - dynamic NTK: transformers recomputes the base per forward from max(position)+1 (clamped below
//   at max_position_embeddings); a cache built by earlier forwards keeps keys rotated with older
//   bases. vLLM (and this engine) use one base, the one transformers computes for a forward of
//   max_position_embeddings * factor tokens. The test feeds sequences of exactly that length and
//   compares every row with transformers' single forward over the whole sequence.
// - longrope (Phi-3): transformers uses long_factor when the forward's max(position)+1 exceeds
//   original_max_position_embeddings, else short_factor. One test keeps every sequence within the
//   original length (short factors throughout); another makes every sequence's first chunk longer
//   than it (long factors from the first forward on).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>

#include "model/llama_model.h"
#include "model/loader/llama_weights.h"
#include "model/loader/model_error.h"
#include "tests/model/family_models.h"
#include "tests/model/family_reference.h"
#include "tests/model/loader/loader_test_util.h"

namespace pagedserve::model {
namespace {

namespace ref = pagedserve::testing;
using model::testing::TempDir;
using ref::HfModel;
using ref::HfReference;

struct RunSpec {
  int num_seqs = 4;
  int min_len = 1;
  int max_len = 20;
  int first_chunk_min = 1;  // each sequence's first forward covers at least this many tokens
  int block_size = 4;
  uint32_t seed = 1;
};

constexpr double kTolerance = 1e-4;  // relative to the row's largest |logit| (at least 1)

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int> chunks;  // tokens per forward: 1-3 prompt chunks, then 1 per decode step
  int start_step = 0;
  size_t next_chunk = 0;
  int computed = 0;
  std::vector<int32_t> table;
  std::vector<std::vector<double>> reference_logits;  // per position
};

std::vector<int> schedule(int length, int first_chunk_min, std::mt19937& rng) {
  const int first_min = std::min(length, std::max(1, first_chunk_min));
  const int prompt = std::uniform_int_distribution<int>(first_min, length)(rng);
  const int pieces =
      std::min(std::uniform_int_distribution<int>(1, 3)(rng), prompt - first_min + 1);
  // Cut points strictly inside (first_min - 1, prompt): the first chunk keeps >= first_min.
  std::vector<int> cuts;
  std::vector<int> candidates(prompt - first_min);
  std::iota(candidates.begin(), candidates.end(), first_min);
  std::shuffle(candidates.begin(), candidates.end(), rng);
  cuts.assign(candidates.begin(),
              candidates.begin() + std::min<int>(pieces - 1, candidates.size()));
  cuts.push_back(prompt);
  std::sort(cuts.begin(), cuts.end());
  std::vector<int> chunks;
  int done = 0;
  for (int cut : cuts) {
    chunks.push_back(cut - done);
    done = cut;
  }
  for (int i = prompt; i < length; ++i) chunks.push_back(1);
  return chunks;
}

// Checks one engine logits row; on a mismatch reports the first differing logit and the row's
// largest difference.
bool row_matches(const float* got, const std::vector<double>& want, const std::string& where) {
  double scale = 1.0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  double worst = 0;
  int first_bad = -1, worst_index = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double diff = std::abs(got[i] - want[i]);
    if (diff > kTolerance * scale && first_bad < 0) first_bad = static_cast<int>(i);
    if (diff > worst) worst = diff, worst_index = static_cast<int>(i);
  }
  if (first_bad < 0) return true;
  ADD_FAILURE() << where << ": logit " << first_bad << " engine " << got[first_bad] << " reference "
                << want[first_bad] << "; worst |diff| " << worst << " at logit " << worst_index
                << " (engine " << got[worst_index] << ", reference " << want[worst_index]
                << "), row scale " << scale << ", tolerance " << kTolerance * scale;
  return false;
}

// Runs spec.num_seqs random sequences through the model loaded from `dir`, comparing every
// logits row with the reference.
void run_and_compare(const HfModel& hf, const std::filesystem::path& dir, const RunSpec& spec) {
  const LlamaCheckpoint checkpoint = open_llama_checkpoint(dir);
  const LlamaModel model(checkpoint, nullptr);
  const ModelConfig& c = model.config();
  const int vocab = hf.config.at("vocab_size");
  ASSERT_EQ(c.vocab_size, vocab);

  std::mt19937 rng(spec.seed);
  std::uniform_int_distribution<int> token(0, vocab - 1);
  std::uniform_int_distribution<int> length(spec.min_len, spec.max_len);
  std::vector<Seq> seqs(spec.num_seqs);
  int blocks_needed = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = seqs[i];
    s.tokens.resize(length(rng));
    for (int32_t& t : s.tokens) t = token(rng);
    s.chunks = schedule(static_cast<int>(s.tokens.size()), spec.first_chunk_min, rng);
    s.start_step = i == 0 ? 0 : std::uniform_int_distribution<int>(0, 2)(rng);
    blocks_needed += (static_cast<int>(s.tokens.size()) + spec.block_size - 1) / spec.block_size;
    HfReference reference(hf, static_cast<int>(s.tokens.size()));
    for (int32_t t : s.tokens) s.reference_logits.push_back(reference.next(t));
  }
  const int num_blocks = 2 * blocks_needed + 3;
  std::vector<int32_t> free_blocks(num_blocks);
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  for (Seq& s : seqs) {
    const int n = (static_cast<int>(s.tokens.size()) + spec.block_size - 1) / spec.block_size;
    s.table.assign(free_blocks.end() - n, free_blocks.end());
    free_blocks.resize(free_blocks.size() - n);
  }

  PagedKvCache cache(c.num_hidden_layers, num_blocks, spec.block_size, c.num_key_value_heads,
                     c.head_dim);
  auto unfinished = [&] {
    return std::any_of(seqs.begin(), seqs.end(),
                       [](const Seq& s) { return s.next_chunk < s.chunks.size(); });
  };
  for (int step = 0; unfinished(); ++step) {
    ForwardBatch batch;
    std::vector<std::pair<int, int>> rows;  // (seq, position) of each logits row
    for (int i = 0; i < spec.num_seqs; ++i) {
      Seq& s = seqs[i];
      if (step < s.start_step || s.next_chunk == s.chunks.size()) continue;
      const int chunk = s.chunks[s.next_chunk++];
      batch.add_sequence({s.tokens.begin() + s.computed, s.tokens.begin() + s.computed + chunk},
                         s.computed, s.table, spec.block_size, true);
      s.computed += chunk;
      rows.emplace_back(i, s.computed - 1);
    }
    if (rows.empty()) continue;
    const std::vector<float> logits = model.forward(batch, cache);
    ASSERT_EQ(logits.size(), rows.size() * static_cast<size_t>(vocab));
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto [i, pos] = rows[r];
      const std::string where = "step " + std::to_string(step) + " seq " + std::to_string(i) +
                                " (length " + std::to_string(seqs[i].tokens.size()) + ") pos " +
                                std::to_string(pos);
      if (!row_matches(&logits[r * vocab], seqs[i].reference_logits[pos], where)) return;
    }
  }
}

// Writes `hf` to a temp folder and checks LlamaModel on it against the reference; whatever the
// engine throws (refusing the model, or failing mid-run) is a failure naming the message.
void expect_engine_matches_reference(const HfModel& hf, const RunSpec& spec) {
  SCOPED_TRACE(hf.config.at("architectures")[0].get<std::string>() + " " +
               std::to_string(spec.num_seqs) + " seqs, seed " + std::to_string(spec.seed));
  TempDir dir;
  hf.write(dir.path());
  try {
    run_and_compare(hf, dir.path(), spec);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "engine threw: " << e.what();
  }
}

// Batches of 1..8 sequences, each batch with its own seed.
void expect_batches_match(const HfModel& hf, RunSpec spec) {
  const uint32_t base_seed = spec.seed;
  for (int n = 1; n <= 8; ++n) {
    spec.num_seqs = n;
    spec.seed = base_seed + 17 * n;
    expect_engine_matches_reference(hf, spec);
    if (::testing::Test::HasFailure()) return;
  }
}

// ---- Llama ----

TEST(FamilyReference, LlamaPlain) {
  expect_batches_match(ref::llama_model(1), {.max_len = 20, .seed = 100});
}

// Llama 3.1 scaling. head_dim 16 and rope_theta 500 give wavelengths 6.3, 13.6 (high band,
// < 64/4), 29.6 (medium, interpolated), 64.8 ... 1426 (low, divided by 8) against an
// original context of 64.
TEST(FamilyReference, LlamaLlama3RopeScaling) {
  ref::FamilyShape s{.hidden = 64, .heads = 4, .kv_heads = 1, .head_dim = 16};
  HfModel hf = ref::llama_model(2,
                                {{"rope_type", "llama3"},
                                 {"factor", 8.0},
                                 {"low_freq_factor", 1.0},
                                 {"high_freq_factor", 4.0},
                                 {"original_max_position_embeddings", 64}},
                                s);
  hf.config["rope_theta"] = 500.0;
  hf.config["max_position_embeddings"] = 512;
  hf.config["tie_word_embeddings"] = true;
  hf.tensors.erase("lm_head.weight");
  expect_batches_match(hf, {.max_len = 24, .seed = 200});
}

// Linear, written with the older "type" key as Llama 2-era configs have it.
TEST(FamilyReference, LlamaLinearRopeScaling) {
  HfModel hf = ref::llama_model(3, {{"type", "linear"}, {"factor", 4.0}});
  expect_batches_match(hf, {.max_len = 20, .seed = 300});
}

// Dynamic NTK: max_position_embeddings 12, factor 2, every sequence 24 tokens long (see the top).
TEST(FamilyReference, LlamaDynamicRopeScalingAtFullLength) {
  HfModel hf = ref::llama_model(4, {{"type", "dynamic"}, {"factor", 2.0}});
  hf.config["max_position_embeddings"] = 12;
  expect_batches_match(hf, {.min_len = 24, .max_len = 24, .seed = 400});
}

// YaRN: factor 4 from an original 64 (max_position_embeddings 256); with head_dim 16 and
// beta_fast 32 / beta_slow 1 the ramp spans dims 0..3, so frequencies are kept, blended and
// interpolated; mscale 0.1 ln 4 + 1 multiplies cos and sin.
TEST(FamilyReference, LlamaYarnRopeScaling) {
  ref::FamilyShape s{.hidden = 64, .heads = 4, .kv_heads = 2, .head_dim = 16};
  HfModel hf = ref::llama_model(5,
                                {{"rope_type", "yarn"},
                                 {"factor", 4.0},
                                 {"original_max_position_embeddings", 64},
                                 {"beta_fast", 32.0},
                                 {"beta_slow", 1.0}},
                                s);
  hf.config["max_position_embeddings"] = 256;
  expect_batches_match(hf, {.max_len = 20, .seed = 500});
}

TEST(FamilyReference, LlamaAttentionAndMlpBias) {
  HfModel hf = ref::llama_model(6);
  hf.config["attention_bias"] = true;
  hf.config["mlp_bias"] = true;
  hf.tensors.clear();
  ref::add_tensors(hf, {}, {.qkv_bias = true, .o_bias = true, .mlp_bias = true}, false, 6);
  expect_batches_match(hf, {.max_len = 20, .seed = 600});
}

TEST(FamilyReference, LlamaTiedEmbeddings) {
  HfModel hf = ref::llama_model(7);
  hf.config["tie_word_embeddings"] = true;
  hf.tensors.erase("lm_head.weight");
  expect_batches_match(hf, {.max_len = 20, .seed = 700});
}

// ---- Mistral, Qwen, Phi-3 ----

TEST(FamilyReference, MistralSlidingWindowShorterThanPrompts) {
  expect_batches_match(ref::mistral_model(8, 5), {.min_len = 6, .max_len = 22, .seed = 800});
}

TEST(FamilyReference, Qwen2BiasesTiedEmbeddingsSlidingWindowOff) {
  expect_batches_match(ref::qwen2_model(9), {.min_len = 5, .max_len = 20, .seed = 900});
}

TEST(FamilyReference, Qwen3QkNormExplicitHeadDim) {
  expect_batches_match(ref::qwen3_model(10), {.max_len = 20, .seed = 1000});
}

// Every sequence within original_max_position_embeddings (16): short factors.
TEST(FamilyReference, Phi3LongRopeShortFactorsAndSlidingWindow) {
  expect_batches_match(ref::phi3_model(11, 16, 6, false),
                       {.min_len = 7, .max_len = 16, .seed = 1100});
}

// Every sequence's first forward already longer than 16 tokens: long factors throughout.
TEST(FamilyReference, Phi3LongRopeLongFactorsAndSlidingWindow) {
  expect_batches_match(ref::phi3_model(12, 16, 6, false),
                       {.min_len = 17, .max_len = 30, .first_chunk_min = 17, .seed = 1200});
}

TEST(FamilyReference, Phi4MiniPartialRotaryTied) {
  expect_batches_match(ref::phi3_model(13, 16, 64, true),
                       {.min_len = 1, .max_len = 16, .seed = 1300});
  expect_batches_match(ref::phi3_model(14, 16, 64, true),
                       {.min_len = 17, .max_len = 28, .first_chunk_min = 17, .seed = 1350});
}

// ---- Gemma, SmolLM3 ----

TEST(FamilyReference, Gemma2SoftcapsAlternatingSlidingWindow) {
  expect_batches_match(ref::gemma2_model(15, 5), {.min_len = 6, .max_len = 22, .seed = 1500});
}

TEST(FamilyReference, Gemma3FiveLocalOneGlobal) {
  expect_batches_match(ref::gemma3_model(16, 5), {.min_len = 6, .max_len = 22, .seed = 1600});
}

TEST(FamilyReference, Gemma3ExplicitLayerTypes) {
  const nlohmann::json layer_types = {"full_attention", "sliding_attention", "full_attention"};
  expect_batches_match(ref::gemma3_model(17, 4, layer_types),
                       {.min_len = 5, .max_len = 20, .seed = 1700});
}

TEST(FamilyReference, SmolLM3NoRopeLayers) {
  expect_batches_match(ref::smollm3_model(18), {.max_len = 20, .seed = 1800});
}

// ---- The tests above can fail ----

// Largest |a - b| / max(1, |b|) between the reference logits of two models on one sequence.
double reference_difference(const HfModel& a, const HfModel& b, int length, int context_a,
                            int context_b) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> token(0, a.config.at("vocab_size").get<int>() - 1);
  HfReference ra(a, context_a), rb(b, context_b);
  double worst = 0;
  for (int i = 0; i < length; ++i) {
    const int32_t t = token(rng);
    const auto la = ra.next(t), lb = rb.next(t);
    for (size_t v = 0; v < la.size(); ++v) {
      worst = std::max(worst, std::abs(la[v] - lb[v]) / std::max(1.0, std::abs(lb[v])));
    }
  }
  return worst;
}

// Each family feature moves the reference's logits by far more than the tolerance on the
// sequence lengths used above, so an engine that ignored it would fail its test.
TEST(FamilyReference, EveryFeatureChangesTheReferenceLogits) {
  struct Case {
    std::string what;
    HfModel with, without;
    int length = 20, context_with = 20, context_without = 20;
  };
  std::vector<Case> cases;
  auto add = [&](std::string what, const HfModel& with, auto&& strip) {
    HfModel without = with;
    strip(without);
    cases.push_back({std::move(what), with, std::move(without)});
  };
  auto no_scaling = [](HfModel& m) { m.config["rope_scaling"] = nullptr; };
  ref::FamilyShape s16{.hidden = 64, .heads = 4, .kv_heads = 1, .head_dim = 16};
  HfModel llama3 = ref::llama_model(2,
                                    {{"rope_type", "llama3"},
                                     {"factor", 8.0},
                                     {"low_freq_factor", 1.0},
                                     {"high_freq_factor", 4.0},
                                     {"original_max_position_embeddings", 64}},
                                    s16);
  llama3.config["rope_theta"] = 500.0;
  add("llama3 rope", llama3, no_scaling);
  add("linear rope", ref::llama_model(3, {{"type", "linear"}, {"factor", 4.0}}), no_scaling);
  HfModel dynamic = ref::llama_model(4, {{"type", "dynamic"}, {"factor", 2.0}});
  dynamic.config["max_position_embeddings"] = 12;
  add("dynamic rope", dynamic, no_scaling);
  HfModel yarn = ref::llama_model(
      5, {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}}, s16);
  yarn.config["max_position_embeddings"] = 256;
  add("yarn rope", yarn, no_scaling);
  add("mistral sliding window", ref::mistral_model(8, 5),
      [](HfModel& m) { m.config["sliding_window"] = nullptr; });
  add("qwen2 use_sliding_window", ref::qwen2_model(9),
      [](HfModel& m) { m.config["use_sliding_window"] = true; });
  add("qwen2 biases", ref::qwen2_model(9), [](HfModel& m) {
    for (auto it = m.tensors.begin(); it != m.tensors.end();) {
      it = it->first.ends_with(".bias") ? m.tensors.erase(it) : std::next(it);
    }
  });
  add("qwen3 q/k norm", ref::qwen3_model(10), [](HfModel& m) {
    for (int l = 0; l < 3; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
      m.tensors.erase(p + "q_norm.weight");
      m.tensors.erase(p + "k_norm.weight");
    }
  });
  add("phi3 sliding window", ref::phi3_model(11, 16, 6, false),
      [](HfModel& m) { m.config["sliding_window"] = nullptr; });
  add("phi4-mini partial rotary", ref::phi3_model(13, 16, 64, true), [](HfModel& m) {
    m.config["partial_rotary_factor"] = 0.5;  // 4 of 8 factors used
  });
  add("gemma2 attention softcap", ref::gemma2_model(15, 5),
      [](HfModel& m) { m.config["attn_logit_softcapping"] = nullptr; });
  add("gemma2 final softcap", ref::gemma2_model(15, 5),
      [](HfModel& m) { m.config["final_logit_softcapping"] = nullptr; });
  add("gemma2 query_pre_attn_scalar", ref::gemma2_model(15, 5),
      [](HfModel& m) { m.config["query_pre_attn_scalar"] = 16; });
  add("gemma2 sliding window", ref::gemma2_model(15, 5),
      [](HfModel& m) { m.config["sliding_window"] = nullptr; });
  add("gemma3 local rope base", ref::gemma3_model(16, 5),
      [](HfModel& m) { m.config["rope_local_base_freq"] = 1000000.0; });
  add("gemma3 global linear scaling", ref::gemma3_model(16, 5), no_scaling);
  add("gemma3 sliding window", ref::gemma3_model(16, 5),
      [](HfModel& m) { m.config["sliding_window"] = nullptr; });
  add("smollm3 no-rope layer", ref::smollm3_model(18), [](HfModel& m) {
    m.config["no_rope_layers"] = {1, 1, 1, 1};
  });
  // Phi-3 short against long factors: the same model read at two context lengths.
  cases.push_back({"phi3 long factors", ref::phi3_model(11, 16, 6, false),
                   ref::phi3_model(11, 16, 6, false), 16, 17, 16});
  for (const Case& c : cases) {
    const double difference =
        reference_difference(c.with, c.without, c.length, c.context_with, c.context_without);
    EXPECT_GT(difference, 100 * kTolerance) << c.what;
  }
}

// ---- Refusal ----

TEST(FamilyReference, UnknownArchitectureIsNamedWithTheSupportedOnes) {
  HfModel hf = ref::llama_model(19);
  hf.config["architectures"] = {"FooBarForCausalLM"};
  hf.config["model_type"] = "foobar";
  TempDir dir;
  hf.write(dir.path());
  try {
    (void)open_llama_checkpoint(dir.path());
    FAIL() << "an unknown architecture was accepted";
  } catch (const ModelError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("FooBarForCausalLM"), std::string::npos) << message;
    EXPECT_NE(message.find("config.json"), std::string::npos) << message;
    for (const char* supported :
         {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
          "Phi3ForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM", "SmolLM3ForCausalLM"}) {
      EXPECT_NE(message.find(supported), std::string::npos)
          << "not listed: " << supported << " in: " << message;
    }
  }
}

}  // namespace
}  // namespace pagedserve::model
