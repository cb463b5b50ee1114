// write_synthetic_model: the files load with our own loaders (config, weights of every dtype,
// tokenizer of exactly the requested vocabulary), the tokenizer round-trips text, the weights
// keep activations in a sane range, and the same spec gives the same bytes.
#include "model/synthetic_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <fstream>
#include <iterator>

#include "model/loader/llama_weights.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/model/reference_llama.h"

namespace pagedserve::model {
namespace {

std::filesystem::path temp_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("ps_synthetic_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  return dir;
}

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

SyntheticModelSpec small_spec(DType dtype, uint64_t seed) {
  SyntheticModelSpec spec;
  spec.hidden_size = 64;
  spec.num_layers = 2;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  spec.intermediate_size = 96;
  spec.vocab_size = 700;
  spec.max_position_embeddings = 256;
  spec.dtype = dtype;
  spec.seed = seed;
  return spec;
}

TEST(SyntheticModel, LoadsWithTheRequestedShapeAndBoundedWeights) {
  const auto dir = temp_dir("shape");
  write_synthetic_model(dir, small_spec(DType::F32, 7));
  const LlamaWeights w = load_llama_weights(dir);
  EXPECT_EQ(w.config.hidden_size, 64);
  EXPECT_EQ(w.config.num_hidden_layers, 2);
  EXPECT_EQ(w.config.num_attention_heads, 4);
  EXPECT_EQ(w.config.num_key_value_heads, 2);
  EXPECT_EQ(w.config.head_dim, 16);
  EXPECT_EQ(w.config.intermediate_size, 96);
  EXPECT_EQ(w.config.vocab_size, 700);
  EXPECT_EQ(w.config.max_position_embeddings, 256);
  EXPECT_EQ(w.config.torch_dtype, "float32");
  ASSERT_EQ(w.layers.size(), 2u);
  for (float v : w.layers[0].input_norm) EXPECT_EQ(v, 1.0f);
  // Uniform in +-sqrt(3 / fan_in): bounded, and a variance close to 1 / fan_in.
  const float bound = std::sqrt(3.0f / 64.0f);
  double sum_sq = 0;
  for (float v : w.layers[1].w_up) {
    ASSERT_LE(std::abs(v), bound);
    sum_sq += double{v} * v;
  }
  EXPECT_NEAR(sum_sq / w.layers[1].w_up.size() * 64.0, 1.0, 0.1);
  std::filesystem::remove_all(dir);
}

TEST(SyntheticModel, HalfPrecisionDtypesRoundTheSameValues) {
  const auto dir32 = temp_dir("f32");
  const auto dir16 = temp_dir("f16");
  const auto dirbf = temp_dir("bf16");
  write_synthetic_model(dir32, small_spec(DType::F32, 3));
  write_synthetic_model(dir16, small_spec(DType::F16, 3));
  write_synthetic_model(dirbf, small_spec(DType::BF16, 3));
  const LlamaWeights w32 = load_llama_weights(dir32);
  const LlamaWeights w16 = load_llama_weights(dir16);
  const LlamaWeights wbf = load_llama_weights(dirbf);
  EXPECT_EQ(w16.config.torch_dtype, "float16");
  EXPECT_EQ(wbf.config.torch_dtype, "bfloat16");
  // Rounding to nearest: within half a unit in the last place (2^-11 and 2^-8 relative).
  for (size_t i = 0; i < w32.embed_tokens.size(); ++i) {
    const float want = w32.embed_tokens[i];
    ASSERT_LE(std::abs(w16.embed_tokens[i] - want), std::abs(want) * 0x1.0p-11f + 0x1.0p-24f) << i;
    ASSERT_LE(std::abs(wbf.embed_tokens[i] - want), std::abs(want) * 0x1.0p-8f) << i;
  }
  for (const auto& dir : {dir32, dir16, dirbf}) std::filesystem::remove_all(dir);
}

TEST(SyntheticModel, TokenizerHasExactlyTheVocabularyAndRoundTripsText) {
  const auto dir = temp_dir("tokenizer");
  write_synthetic_model(dir, small_spec(DType::BF16, 1));
  const Tokenizer tokenizer = Tokenizer::from_dir(dir);
  EXPECT_EQ(tokenizer.vocab_size(), 700);
  EXPECT_EQ(tokenizer.eos_token_id(), 0);
  EXPECT_EQ(tokenizer.bos_token_id(), 0);
  EXPECT_TRUE(tokenizer.is_special(0));
  for (const std::string& text : std::vector<std::string>{
           "Once upon a time, there was a little girl.", "  spaces\tand\nnewlines  ",
           "caf\u00e9 \u65e5\u672c\u8a9e \U0001F600 12345", std::string("\x01\x7f", 2)}) {
    const std::vector<int32_t> ids = tokenizer.encode(text, false);
    for (int32_t id : ids) ASSERT_TRUE(id > 0 && id < 700) << id;
    EXPECT_EQ(tokenizer.decode(ids), text);
  }
  // Merges apply: a two-letter merged token (one word to the pre-tokenizer, and only one way
  // to merge two bytes) encodes to its own id.
  int two_letter_tokens = 0;
  for (int32_t id = 257; id < 700; ++id) {
    const std::string text = tokenizer.decode(std::vector<int32_t>{id});
    if (text.size() != 2 || !std::isalpha(static_cast<unsigned char>(text[0])) ||
        !std::isalpha(static_cast<unsigned char>(text[1]))) {
      continue;
    }
    ++two_letter_tokens;
    EXPECT_EQ(tokenizer.encode(text, false), std::vector<int32_t>{id}) << text;
  }
  EXPECT_GT(two_letter_tokens, 0);
  std::filesystem::remove_all(dir);
}

TEST(SyntheticModel, SameSpecGivesIdenticalBytesAndTheSeedChangesWeights) {
  const auto a = temp_dir("a");
  const auto b = temp_dir("b");
  const auto c = temp_dir("c");
  write_synthetic_model(a, small_spec(DType::F16, 11));
  write_synthetic_model(b, small_spec(DType::F16, 11));
  write_synthetic_model(c, small_spec(DType::F16, 12));
  for (const char* file :
       {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_EQ(read_bytes(a / file), read_bytes(b / file)) << file;
  }
  EXPECT_NE(read_bytes(a / "model.safetensors"), read_bytes(c / "model.safetensors"));
  EXPECT_EQ(read_bytes(a / "tokenizer.json"), read_bytes(c / "tokenizer.json"));
  for (const auto& dir : {a, b, c}) std::filesystem::remove_all(dir);
}

TEST(SyntheticModel, ActivationsStaySane) {
  const auto dir = temp_dir("activations");
  SyntheticModelSpec spec = small_spec(DType::F32, 5);
  spec.num_layers = 6;
  write_synthetic_model(dir, spec);
  const LlamaWeights w = load_llama_weights(dir);
  testing::ReferenceLlama reference(w);
  for (int32_t token : {5, 300, 699, 1, 42, 42, 42}) {
    const std::vector<float> logits = reference.next(token);
    double sum_sq = 0;
    for (float v : logits) {
      ASSERT_TRUE(std::isfinite(v));
      sum_sq += double{v} * v;
    }
    const double rms = std::sqrt(sum_sq / logits.size());
    EXPECT_GT(rms, 0.1);
    EXPECT_LT(rms, 10.0);
  }
  std::filesystem::remove_all(dir);
}

TEST(SyntheticModel, RejectsInconsistentShapes) {
  SyntheticModelSpec spec = small_spec(DType::F32, 0);
  spec.num_kv_heads = 3;
  EXPECT_THROW(validate(spec), std::invalid_argument);
  spec = small_spec(DType::F32, 0);
  spec.vocab_size = 100;
  EXPECT_THROW(validate(spec), std::invalid_argument);
  spec = small_spec(DType::F32, 0);
  spec.hidden_size = 60;  // head_dim 15: odd, RoPE needs pairs
  EXPECT_THROW(validate(spec), std::invalid_argument);
}

}  // namespace
}  // namespace pagedserve::model
