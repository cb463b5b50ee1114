// min_tokens: until that many tokens exist, EOS and stop token ids cannot be drawn at all, so a
// sequence that would have ended early keeps going and never carries a stop token mid-text.
// stories260K (llama2.c's TinyStories model) separates stories with BOS, so BOS as a stop
// token id is how its stories end on their own.
#include <gtest/gtest.h>

#include <algorithm>

#include "actors/llm_engine.h"
#include "tests/test_paths.h"

namespace pagedserve::actors {
namespace {

std::vector<int32_t> run_one(LlmEngine& engine, const model::SamplingParams& p) {
  const uint64_t id = engine.add_request(engine.tokenizer().encode("Once upon a time"), p);
  std::vector<int32_t> tokens;
  while (engine.has_unfinished_requests()) {
    for (const RequestOutput& out : engine.step()) {
      if (out.request_id == id && out.finished) tokens = out.outputs.at(0).token_ids;
    }
  }
  return tokens;
}

TEST(MinTokens, StopTokensCannotBeDrawnBeforeMinTokens) {
  EngineConfig config;
  config.model_dir = testing::stories260k_dir();
  config.num_kv_blocks = 256;
  LlmEngine engine(config);
  const int32_t bos = *engine.tokenizer().bos_token_id();

  // Find a seed whose sample ends early: the story ends on its own.
  model::SamplingParams p;
  p.temperature = 1.0f;
  p.max_tokens = 150;
  p.stop_token_ids = {bos};
  std::vector<int32_t> ended_early;
  for (uint64_t seed = 1; seed < 200 && ended_early.empty(); ++seed) {
    p.seed = seed;
    std::vector<int32_t> tokens = run_one(engine, p);
    if (!tokens.empty() && tokens.back() == bos && tokens.size() < 150) ended_early = tokens;
  }
  ASSERT_FALSE(ended_early.empty()) << "no seed ended its story within 150 tokens";

  p.min_tokens = static_cast<int>(ended_early.size()) + 20;
  p.max_tokens = p.min_tokens + 10;
  const std::vector<int32_t> forced = run_one(engine, p);
  ASSERT_GE(forced.size(), static_cast<size_t>(p.min_tokens));
  EXPECT_EQ(std::count(forced.begin(), forced.begin() + p.min_tokens, bos), 0)
      << "a stop token was drawn before min_tokens";
  // Up to the step where the stop token was drawn the draws are the same: the ban changes
  // only the banned tokens.
  EXPECT_TRUE(std::equal(ended_early.begin(), ended_early.end() - 1, forced.begin()));
}

}  // namespace
}  // namespace pagedserve::actors
