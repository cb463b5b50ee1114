// Quantized weights end to end on the trained stories260K: Q8_0, whether quantized at load
// (--quantization q8_0) or read from a Q8_0 GGUF file (`pagedserve quantize`), generates the
// float32 model's greedy story token for token for 100 tokens, and gives every KV block back.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "actors/llm_engine.h"
#include "model/quantize_gguf.h"
#include "tests/actors/engine_test_util.h"
#include "tests/test_paths.h"

namespace pagedserve::actors {
namespace {

using namespace testing_util;

constexpr int kTokens = 100;

std::vector<int32_t> greedy_story(const EngineConfig& config) {
  LlmEngine engine(config);
  const uint64_t id =
      engine.add_request(engine.tokenizer().encode("Once upon a time"), greedy(kTokens));
  std::map<uint64_t, Finished> done = run_to_completion(engine);
  expect_all_blocks_free(engine);
  return done[id].tokens();
}

TEST(QuantizedEngine, OnlineQ8_0GivesTheFloatStory) {
  const std::vector<int32_t> reference = greedy_story(stories_config());
  ASSERT_EQ(reference.size(), static_cast<size_t>(kTokens));
  EngineConfig config = stories_config();
  config.quantization = "q8_0";
  EXPECT_EQ(greedy_story(config), reference);
}

TEST(QuantizedEngine, Q8_0GgufFileGivesTheFloatStory) {
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() /
      ("pagedserve-stories260K-q8_0-" + std::to_string(::getpid()) + ".gguf");
  const auto plan = model::parse_quantization_plan("q8_0");
  ASSERT_TRUE(plan.has_value());
  model::quantize_gguf(pagedserve::testing::shared_dir() / "models" / "stories260K.gguf", out,
                       *plan);
  EngineConfig config = stories_config();
  config.model_dir = out;
  const std::vector<int32_t> quantized = greedy_story(config);
  std::filesystem::remove(out);
  EXPECT_EQ(quantized, greedy_story(stories_config()));
}

TEST(QuantizedEngine, UnknownQuantizationIsRefusedNamingIt) {
  EngineConfig config = stories_config();
  config.quantization = "q3_xs";
  try {
    LlmEngine engine(config);
    ADD_FAILURE() << "--quantization q3_xs was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("q3_xs"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pagedserve::actors
