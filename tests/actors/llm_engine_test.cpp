// LlmEngine end to end on the real stories260K model: the known greedy story, batching and
// preemption that do not change greedy output, seeds, prefix-cache hits, aborts, and requests
// the engine must refuse. Every test ends with every KV block back in the pool.
#include "actors/llm_engine.h"

#include <gtest/gtest.h>

#include <map>

#include "tests/actors/engine_test_util.h"
#include "tests/test_paths.h"

namespace pagedserve::actors {
namespace {

using namespace testing_util;

const std::vector<std::string> kPrompts = {
    "Once upon a time",   "Lily and Tom",    "The cat sat", "One day, a little bird",
    "Tim had a red ball", "The sun was hot", "Mom said",    "A big dog ran to the park and"};

TEST(LlmEngine, GreedyStoriesContinuationIsTheKnownStory) {
  LlmEngine engine(stories_config());
  std::vector<int32_t> prompt = engine.tokenizer().encode("Once upon a time");
  ASSERT_EQ(prompt, (std::vector<int32_t>{1, 403, 407, 261, 378}));
  const uint64_t id = engine.add_request(prompt, greedy(40));
  auto done = run_to_completion(engine);
  const std::string text = engine.tokenizer().decode(done[id].tokens(), true);
  EXPECT_EQ(text.rfind(", there was a little girl named Lily.", 0), 0u) << text;
  EXPECT_EQ(done[id].finish_reason(), FinishReason::kLength);
  EXPECT_EQ(done[id].tokens().size(), 40u);
  expect_all_blocks_free(engine);
}

// The same trained model as a GGUF file (llama.cpp's interleaved Q/K rows, its tokenizer in the
// metadata): the same tokens, the same story, token for token the HF folder's output.
TEST(LlmEngine, GgufFileServesTheSameStoryAsTheHuggingFaceFolder) {
  EngineConfig gguf_config = stories_config();
  gguf_config.model_dir = pagedserve::testing::shared_dir() / "models" / "stories260K.gguf";
  LlmEngine gguf(gguf_config);
  LlmEngine hf(stories_config());
  const std::vector<int32_t> prompt = gguf.tokenizer().encode("Once upon a time");
  ASSERT_EQ(prompt, hf.tokenizer().encode("Once upon a time"));
  const uint64_t gguf_id = gguf.add_request(prompt, greedy(40));
  const uint64_t hf_id = hf.add_request(prompt, greedy(40));
  auto gguf_done = run_to_completion(gguf);
  auto hf_done = run_to_completion(hf);
  EXPECT_EQ(gguf_done[gguf_id].tokens(), hf_done[hf_id].tokens());
  const std::string text = gguf.tokenizer().decode(gguf_done[gguf_id].tokens(), true);
  EXPECT_EQ(text.rfind(", there was a little girl named Lily.", 0), 0u) << text;
  expect_all_blocks_free(gguf);
}

// Models train for long contexts; a default context the pool cannot hold is capped to what it
// holds, while one the user asked for is still refused with the sizes.
TEST(LlmEngine, DefaultContextIsCappedToTheKvPool) {
  EngineConfig config = stories_config();  // max_position_embeddings 512
  config.num_kv_blocks = 10;               // 160 tokens of 16-token blocks
  LlmEngine engine(config);
  EXPECT_EQ(engine.config().max_model_len, 160);
  config.max_model_len = 512;
  try {
    LlmEngine refused(config);
    ADD_FAILURE() << "an explicit max_model_len the pool cannot hold was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("max_model_len 512 needs 32 KV blocks"), std::string::npos)
        << e.what();
  }
}

std::vector<std::vector<int32_t>> generate_each_alone(const EngineConfig& config, int max_tokens) {
  std::vector<std::vector<int32_t>> outputs;
  for (const std::string& prompt : kPrompts) {
    LlmEngine engine(config);
    const uint64_t id = engine.add_request(engine.tokenizer().encode(prompt), greedy(max_tokens));
    outputs.push_back(run_to_completion(engine)[id].tokens());
  }
  return outputs;
}

TEST(LlmEngine, BatchingAndPreemptionDoNotChangeGreedyOutput) {
  EngineConfig config = stories_config();
  config.enable_prefix_caching = false;
  const auto alone = generate_each_alone(config, 60);

  // 8 sequences of up to ~70 tokens need ~40 blocks of 16; 12 forces preemption by recompute.
  for (int num_blocks : {256, 12}) {
    SCOPED_TRACE("num_kv_blocks " + std::to_string(num_blocks));
    config.num_kv_blocks = num_blocks;
    config.max_model_len = 192;
    LlmEngine engine(config);
    std::vector<uint64_t> ids;
    for (const std::string& prompt : kPrompts) {
      ids.push_back(engine.add_request(engine.tokenizer().encode(prompt), greedy(60)));
    }
    auto done = run_to_completion(engine);
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(done[ids[i]].tokens(), alone[i]) << "prompt " << i;
    }
    expect_all_blocks_free(engine);
  }
}

TEST(LlmEngine, SameSeedSameTextDifferentSeedDifferentText) {
  LlmEngine engine(stories_config());
  const auto prompt = engine.tokenizer().encode("Once upon a time");
  model::SamplingParams p;
  p.temperature = 1.0f;
  p.max_tokens = 30;
  p.ignore_eos = true;
  p.seed = 1234;
  const uint64_t a = engine.add_request(prompt, p);
  const uint64_t b = engine.add_request(prompt, p);
  p.seed = 999;
  const uint64_t c = engine.add_request(prompt, p);
  auto done = run_to_completion(engine);
  EXPECT_EQ(done[a].tokens(), done[b].tokens());
  EXPECT_NE(done[a].tokens(), done[c].tokens());
  expect_all_blocks_free(engine);
}

TEST(LlmEngine, PrefixCacheHitGivesTheSameGreedyOutput) {
  LlmEngine engine(stories_config());
  const auto prompt = engine.tokenizer().encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park. One day, she saw a big, red ball.");
  ASSERT_GT(prompt.size(), 32u);
  const uint64_t first = engine.add_request(prompt, greedy(20));
  auto done_first = run_to_completion(engine);
  const uint64_t second = engine.add_request(prompt, greedy(20));
  auto done_second = run_to_completion(engine);
  EXPECT_EQ(done_first[first].last.num_cached_tokens, 0);
  EXPECT_EQ(done_second[second].last.num_cached_tokens,
            static_cast<int>((prompt.size() - 1) / 16 * 16));
  EXPECT_EQ(done_first[first].tokens(), done_second[second].tokens());
  expect_all_blocks_free(engine);
}

TEST(LlmEngine, AbortFreesBlocksAndReportsAbort) {
  LlmEngine engine(stories_config());
  const uint64_t id =
      engine.add_request(engine.tokenizer().encode("Once upon a time"), greedy(100));
  size_t generated = 0;
  for (int i = 0; i < 3; ++i) generated += engine.step().size();
  EXPECT_EQ(generated, 3u);
  EXPECT_GT(engine.scheduler().block_manager().num_used_device_blocks(), 0);
  engine.abort_request(id);
  EXPECT_EQ(engine.scheduler().block_manager().num_used_device_blocks(), 0)
      << "abort frees every block at once";
  auto done = run_to_completion(engine);
  EXPECT_EQ(done[id].finish_reason(), FinishReason::kAbort);
  EXPECT_TRUE(done[id].tokens().empty());
  expect_all_blocks_free(engine);
}

TEST(LlmEngine, RefusesBadRequestsWithAMessage) {
  EngineConfig config = stories_config();
  config.max_model_len = 64;
  LlmEngine engine(config);
  auto expect_refused = [&](std::vector<int32_t> prompt, model::SamplingParams p,
                            const std::string& needle) {
    try {
      engine.add_request(std::move(prompt), p);
      ADD_FAILURE() << "accepted a request that should fail with " << needle;
    } catch (const InvalidRequest& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_refused({}, greedy(5), "at least one token");
  expect_refused({1, 5000}, greedy(5), "outside the vocabulary");
  expect_refused(std::vector<int32_t>(64, 5), greedy(5), "max_model_len");
  model::SamplingParams bad = greedy(5);
  bad.top_p = 3.0f;
  expect_refused({1, 2}, bad, "top_p");
  EXPECT_FALSE(engine.has_unfinished_requests());
}

TEST(LlmEngine, APromptLargerThanThePoolFinishesWithAnError) {
  EngineConfig config = stories_config();
  config.num_kv_blocks = 2;
  config.max_model_len = 512;
  // The engine refuses a pool that cannot hold max_model_len, so say so explicitly.
  EXPECT_THROW(LlmEngine{config}, std::exception);
}

TEST(LlmEngine, GenerationStopsAtMaxModelLen) {
  EngineConfig config = stories_config();
  config.max_model_len = 12;
  LlmEngine engine(config);
  const uint64_t id =
      engine.add_request(engine.tokenizer().encode("Once upon a time"), greedy(100));
  auto done = run_to_completion(engine);
  EXPECT_EQ(done[id].tokens().size(), 12u - 5u);
  EXPECT_EQ(done[id].finish_reason(), FinishReason::kLength);
  expect_all_blocks_free(engine);
}

}  // namespace
}  // namespace pagedserve::actors
