// quantize_gguf (`pagedserve quantize`): which tensors get which type (llama.cpp's rules for the
// _M mixes, the output projection and widths that fill no block), values within the format's
// error of the originals, untouched tensors copied byte for byte, metadata kept.
#include "model/quantize_gguf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>

#include "model/loader/gguf.h"
#include "model/loader/model_error.h"
#include "tests/test_paths.h"

namespace pagedserve::model {
namespace {

using kernels::QuantType;
using ::testing::HasSubstr;

std::filesystem::path stories_gguf() {
  return pagedserve::testing::shared_dir() / "models" / "stories260K.gguf";
}

TEST(QuantizationPlan, NamesParseCaseInsensitively) {
  EXPECT_EQ(parse_quantization_plan("q8_0")->base, QuantType::kQ8_0);
  EXPECT_EQ(parse_quantization_plan("Q4_K_M")->base, QuantType::kQ4_K);
  EXPECT_TRUE(parse_quantization_plan("q4_k_m")->mixed_k);
  EXPECT_FALSE(parse_quantization_plan("Q4_K_S")->mixed_k);
  EXPECT_EQ(parse_quantization_plan("Q4_K_M")->llama_file_type, 15u);
  EXPECT_EQ(parse_quantization_plan("Q8_0")->llama_file_type, 7u);
  EXPECT_FALSE(parse_quantization_plan("Q4_1").has_value());
  EXPECT_FALSE(parse_quantization_plan("").has_value());
}

TEST(QuantizationPlan, Q4KMixPutsSomeLayersValueAndDownInQ6K) {
  const QuantizationPlan plan = *parse_quantization_plan("Q4_K_M");
  constexpr int kLayers = 16;  // more bits: layers 0, 1 (first eighth), 14, 15 (last), 4, 7, 10, 13
  const std::vector<int> more_bits = {0, 1, 4, 7, 10, 13, 14, 15};
  for (int layer = 0; layer < kLayers; ++layer) {
    const bool more = std::count(more_bits.begin(), more_bits.end(), layer) > 0;
    const std::string prefix = "blk." + std::to_string(layer) + ".";
    SCOPED_TRACE(prefix);
    EXPECT_EQ(plan.type_for(prefix + "attn_v.weight", layer, kLayers, 2048),
              more ? QuantType::kQ6_K : QuantType::kQ4_K);
    EXPECT_EQ(plan.type_for(prefix + "ffn_down.weight", layer, kLayers, 8192),
              more ? QuantType::kQ6_K : QuantType::kQ4_K);
    EXPECT_EQ(plan.type_for(prefix + "attn_q.weight", layer, kLayers, 2048), QuantType::kQ4_K);
  }
  EXPECT_EQ(plan.type_for("output.weight", -1, kLayers, 2048), QuantType::kQ6_K);
  EXPECT_EQ(plan.type_for("token_embd.weight", -1, kLayers, 2048), QuantType::kQ4_K);
}

TEST(QuantizationPlan, WidthsThatFillNoBlockFallBackAsLlamaCppDoes) {
  const QuantizationPlan q4k = *parse_quantization_plan("Q4_K");
  EXPECT_EQ(q4k.type_for("blk.0.attn_q.weight", 0, 4, 64), QuantType::kQ5_0);  // 64 % 256
  EXPECT_EQ(q4k.type_for("output.weight", -1, 4, 64), QuantType::kQ8_0);       // Q6_K -> Q8_0
  EXPECT_EQ(q4k.type_for("blk.0.ffn_down.weight", 0, 4, 172), std::nullopt);   // 172 % 32
  const QuantizationPlan q8 = *parse_quantization_plan("Q8_0");
  EXPECT_EQ(q8.type_for("output.weight", -1, 4, 64), QuantType::kQ8_0);
}

class QuantizeGguf : public ::testing::Test {
 protected:
  void TearDown() override { std::filesystem::remove(out_); }
  // One file per test and process: ctest runs the tests of this fixture in parallel, and
  // rewriting a file another test has mapped kills that test with SIGBUS.
  std::filesystem::path out_ =
      std::filesystem::temp_directory_path() /
      ("pagedserve-quantize-gguf-" + std::to_string(::getpid()) + "-" +
       ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".gguf");
};

TEST_F(QuantizeGguf, Q8_0MatricesAreWithinHalfAStepAndTheRestIsCopied) {
  quantize_gguf(stories_gguf(), out_, *parse_quantization_plan("Q8_0"));
  const auto in = GgufFile::open(stories_gguf());
  const auto out = GgufFile::open(out_);
  EXPECT_EQ(out->get_int("general.file_type"), 7);
  EXPECT_EQ(out->get_string("general.architecture"), in->get_string("general.architecture"));
  EXPECT_EQ(out->get_string_array("tokenizer.ggml.tokens"),
            in->get_string_array("tokenizer.ggml.tokens"));
  ASSERT_EQ(out->tensors().size(), in->tensors().size());
  int quantized = 0;
  for (const auto& [name, original] : in->tensors()) {
    SCOPED_TRACE(name);
    const GgufTensor* written = out->find_tensor(name);
    ASSERT_NE(written, nullptr);
    const TensorView a = in->view(original);
    const TensorView b = out->view(*written);
    ASSERT_EQ(a.shape, b.shape);
    if (a.shape.size() != 2 || a.shape[1] % 32 != 0) {  // norms; ffn_down (width 172)
      EXPECT_EQ(b.dtype, a.dtype);
      ASSERT_EQ(a.num_bytes, b.num_bytes);
      EXPECT_EQ(std::memcmp(a.data, b.data, a.num_bytes), 0);
      continue;
    }
    ASSERT_EQ(b.dtype, DType::Q8_0);
    ++quantized;
    const std::vector<float> before = to_f32(a);
    const std::vector<float> after = to_f32(b);
    for (size_t block = 0; block < before.size() / 32; ++block) {
      float amax = 0;
      for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(before[block * 32 + i]));
      // ggml's Q8_0: step d = amax / 127, rounded to nearest, d stored as f16 (relative error
      // 2^-11, times |q| <= 127).
      const float bound = amax / 127 * (0.5f + 127.0f / 2048) + 1e-7f;
      for (size_t i = 0; i < 32; ++i) {
        ASSERT_LE(std::fabs(after[block * 32 + i] - before[block * 32 + i]), bound)
            << "block " << block << " element " << i;
      }
    }
  }
  EXPECT_GE(quantized, 5 * 6 + 1);  // q, k, v, o, gate, up per layer and the embedding
}

TEST_F(QuantizeGguf, AlreadyQuantizedInputIsRefusedNamingTheTensor) {
  quantize_gguf(stories_gguf(), out_, *parse_quantization_plan("Q8_0"));
  const std::filesystem::path again = out_.string() + ".again";
  try {
    quantize_gguf(out_, again, *parse_quantization_plan("Q4_0"));
    ADD_FAILURE() << "a Q8_0 file was requantized";
  } catch (const ModelError& e) {
    EXPECT_THAT(e.what(), HasSubstr("already Q8_0"));
    EXPECT_THAT(e.what(), HasSubstr(out_.string()));
  }
  EXPECT_FALSE(std::filesystem::exists(again));
}

}  // namespace
}  // namespace pagedserve::model
